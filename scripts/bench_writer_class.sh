#!/usr/bin/env bash
# What running the journal's writer thread in SCHED_BATCH
# (keel-aof-writer-batch-class, see crates/journal/src/lib.rs) does: three
# Keel servers, one without persistence, one with the writer in the batch
# class (the default) and one with it in the normal class, alternated run
# by run (servers pinned to core 1, load generator to core 0). Prints, per
# server, the medians of ops/s, p50 and p99 (ms), and, over each server's
# whole life, the journal's records per fdatasync (INFO
# keel_aof_batch_records_avg) and fdatasync p50 (us, the writer's time in
# the call, which includes waiting for the core once the disk is done).
#
#   scripts/bench_writer_class.sh <memtier_benchmark|keel-bench> <load> [appendfsync] [runs] [seconds]
#
# load: w1 or w2-<size>-<sets>:<gets> (as scripts/bench.sh), or lone: one
#   connection doing 100 B SETs one at a time while 50 others pipeline GETs
#   20 deep, saturating the server's core (the columns are the lone
#   writer's; the GETs' rate is the last column). appendfsync: always
#   (default) or everysec.
set -euo pipefail
tool=$1 load_name=$2 fsync=${3:-always} runs=${4:-3} seconds=${5:-8}
cd "$(dirname "$0")/.."
keel=target/release/keel-server
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT

flood=()
case $load_name in
    w1) load=(-t 1 -c 100 --ratio 1:1 --data-size-range 100-1000 -R --key-pattern R:R --key-maximum 1000000) ;;
    w2-*)
        IFS=- read -r _ size ratio <<<"$load_name"
        load=(-t 1 -c 70 --pipeline 20 -d "$size" --ratio "$ratio" --key-pattern R:R --key-maximum 1000000) ;;
    lone)
        load=(-t 1 -c 1 --ratio 1:0 -d 100 --key-pattern R:R --key-maximum 100000)
        flood=(-t 1 -c 50 --pipeline 20 --ratio 0:1 -d 100 --key-pattern R:R --key-maximum 100000) ;;
    *) echo "load: w1 | w2-<size>-<sets>:<gets> | lone" >&2; exit 2 ;;
esac

servers=("off 7721" "batch 7722" "normal 7723")
start() { # name port
    mkdir -p "$work/$1"
    local flags=(--appendonly yes --appendfsync "$fsync" --keel-aof-writer-batch-class)
    case $1 in
        off) flags=(--appendonly no) ;;
        batch) flags+=(yes) ;;
        normal) flags+=(no) ;;
    esac
    taskset -c 1 "$keel" --port "$2" --threads 1 --dir "$work/$1" --save '' "${flags[@]}" >"$work/$1/log" 2>&1 &
    for _ in $(seq 100); do redis-cli -p "$2" ping >/dev/null 2>&1 && return; sleep 0.05; done
    echo "$1 did not start" >&2; exit 1
}
run() { # port seconds memtier-args... -> "ops p50 p99"
    local port=$1 secs=$2; shift 2
    taskset -c 0 "$tool" -s 127.0.0.1 -p "$port" "$@" --test-time "$secs" \
        --hide-histogram --print-percentiles 50,99 2>/dev/null | awk '/^Totals/ {print $2, $6, $7}'
}
measure() { # port -> "ops p50 p99 [flood ops]"
    if [ ${#flood[@]} -eq 0 ]; then
        run "$1" "$seconds" "${load[@]}"
        return
    fi
    # The flood starts first and outlasts the measured client by a second
    # on each side.
    run "$1" $((seconds + 2)) "${flood[@]}" >"$work/flood" &
    local flood_pid=$!
    sleep 1
    local lone
    lone=$(run "$1" "$seconds" "${load[@]}")
    wait "$flood_pid"
    echo "$lone $(awk '{print $1}' "$work/flood")"
}
median() { sort -g | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
info() { redis-cli -p "$1" info persistence | tr -d '\r' | awk -F: -v f="$2" '$1 == f {print $2}'; }

for s in "${servers[@]}"; do start $s; done
for _ in $(seq "$runs"); do
    for s in "${servers[@]}"; do
        read -r name port <<<"$s"
        measure "$port" >>"$work/$name.runs"
    done
done
beside=$([ ${#flood[@]} -eq 0 ] || echo " GETs/s beside |")
echo "| load | appendfsync | writer class | ops/s | p50 ms | p99 ms |$beside records per sync | fsync p50 us |"
echo "|---|---|---|---:|---:|---:|---:|---:|${beside:+---:|}"
for s in "${servers[@]}"; do
    read -r name port <<<"$s"
    cols=$(for c in $(seq "$(awk '{print NF; exit}' "$work/$name.runs")"); do awk -v c="$c" '{print $c}' "$work/$name.runs" | median; done | paste -sd'|')
    persistence=$([ "$name" = off ] && echo off || echo "$fsync")
    class=$([ "$name" = off ] && echo - || echo "$name")
    echo "| $load_name | $persistence | $class | ${cols//|/ | } | $(info "$port" keel_aof_batch_records_avg) | $(info "$port" keel_aof_fsync_p50_us) |"
done
