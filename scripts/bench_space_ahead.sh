#!/usr/bin/env bash
# What the space written ahead of the incr file (keel-aof-space-ahead, see
# crates/journal/src/prealloc.rs) buys under appendfsync always: two Keel
# servers, one with the default 4 MB ahead and one with none, alternated run
# by run (server pinned to core 1, load generator to core 0). Prints, per
# server, the medians of ops/s, p50 and p99 (ms), and the journal's own
# fdatasync p50 and p99 (us, INFO keel_aof_fsync_p50_us/p99_us, over each
# server's whole life).
#
#   scripts/bench_space_ahead.sh <memtier_benchmark|keel-bench> <load> [runs] [seconds]
#
# load: w1 (100 connections, 50/50 GET/SET, 100-1000 B values), or
#   writers-<clients> (that many connections doing SETs of 500 B, one at a
#   time: durable write latency below saturation).
set -euo pipefail
tool=$1 load_name=$2 runs=${3:-3} seconds=${4:-8}
cd "$(dirname "$0")/.."
keel=target/release/keel-server
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT

case $load_name in
    w1) load=(-t 1 -c 100 --ratio 1:1 --data-size-range 100-1000 -R --key-pattern R:R --key-maximum 1000000) ;;
    writers-*) load=(-t 1 -c "${load_name#writers-}" --ratio 1:0 -d 500 --key-pattern R:R --key-maximum 1000000) ;;
    *) echo "load: w1 | writers-<clients>" >&2; exit 2 ;;
esac

start() { # name port space-ahead
    mkdir -p "$work/$1"
    taskset -c 1 "$keel" --port "$2" --threads 1 --dir "$work/$1" --save '' --appendonly yes \
        --appendfsync always --auto-aof-rewrite-percentage 0 --keel-aof-space-ahead "$3" >"$work/$1/log" 2>&1 &
    for _ in $(seq 100); do redis-cli -p "$2" ping >/dev/null 2>&1 && return; sleep 0.05; done
    echo "$1 did not start" >&2; exit 1
}
measure() { # port -> "ops p50 p99"
    taskset -c 0 "$tool" -s 127.0.0.1 -p "$1" "${load[@]}" --test-time "$seconds" \
        --hide-histogram --print-percentiles 50,99 2>/dev/null | awk '/^Totals/ {print $2, $6, $7}'
}
median() { sort -g | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
info() { redis-cli -p "$1" info persistence | tr -d '\r' | awk -F: -v f="$2" '$1 == f {print $2}'; }

start ahead 7711 4mb; start none 7712 0
for _ in $(seq "$runs"); do
    measure 7711 >>"$work/ahead.runs"
    measure 7712 >>"$work/none.runs"
done
echo "| load | space ahead | ops/s | p50 ms | p99 ms | fsync p50 us | fsync p99 us |"
echo "|---|---|---:|---:|---:|---:|---:|"
for s in "ahead 7711 4mb" "none 7712 0"; do
    read -r name port bytes <<<"$s"
    cols=$(for c in 1 2 3; do awk -v c=$c '{print $c}' "$work/$name.runs" | median; done | paste -sd' ')
    read -r ops p50 p99 <<<"$cols"
    echo "| $load_name | $bytes | $ops | $p50 | $p99 | $(info "$port" keel_aof_fsync_p50_us) | $(info "$port" keel_aof_fsync_p99_us) |"
done
