#!/usr/bin/env bash
# Latency of durable writes at fixed open-loop rates, while the AOF is
# rewritten or not: W1 (100 connections, 50/50 GET/SET, random 100-1000 B
# values over 1M keys) at each rate given with keel-bench (latency from
# each request's intended start), `appendfsync always` (APPENDFSYNC
# changes it), on a dataset of 1M keys written beforehand; each run starts
# a BGREWRITEAOF with the load unless REWRITE=no. A run shorter than the
# rewrite measures the rewrite at work; a longer one also its commit and
# the removal of the files it replaced (the "rewrite s" column says how
# long each server's rewrite took).
# Every server (each Keel binary given, then redis-server) is pinned to
# core 1 and the load generator to core 0; runs alternate server by server,
# and each row is the median of the runs. The last column is keel-bench's
# busiest thread, in percent of a core: near 100, keel-bench's own pacing
# lags and the latencies are partly its own.
#
#   scripts/bench_rewrite_latency.sh <keel-bench> <rate>[,<rate>...] [runs] [seconds] [keel-server ...]
#
# Without a Keel binary, target/release/keel-server is measured; NO_REDIS=1
# leaves redis-server out. LOAD_ARGS
# adds keel-bench options to the measured load: with
# LOAD_ARGS=--distinct-client-seed each connection draws its own keys (by
# default all draw the same sequence, as memtier_benchmark's do, so the
# writes touch about 1/100 as many distinct keys).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
bench=$1 rates=$2 runs=${3:-3} seconds=${4:-25}
fsync=${APPENDFSYNC:-always}
shift $(( $# < 4 ? $# : 4 ))
cd "$(dirname "$0")/.."
keels=("$@")
[ ${#keels[@]} -gt 0 ] || keels=(target/release/keel-server)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT

servers=() ports=()
port=7900
measured=("${keels[@]}")
[ -n "${NO_REDIS:-}" ] || measured+=(redis)
for k in "${measured[@]}"; do
    port=$((port + 1)); dir=$work/$port; mkdir -p "$dir"
    if [ "$k" = redis ]; then
        taskset -c 1 redis-server --port $port --dir "$dir" --save '' --appendonly yes --appendfsync "$fsync" \
            --auto-aof-rewrite-percentage 0 >"$dir/log" 2>&1 &
    else
        taskset -c 1 "$k" --port $port --threads 1 --dir "$dir" --save '' --appendonly yes --appendfsync "$fsync" \
            --auto-aof-rewrite-percentage 0 >"$dir/log" 2>&1 &
    fi
    for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.05; done
    taskset -c 0 "$bench" -s 127.0.0.1 -p $port -t 1 -c 50 --pipeline 20 --ratio 1:0 --data-size-range 100-1000 \
        -R --key-pattern P:P --key-maximum 1000000 -n allkeys --hide-histogram >/dev/null 2>&1
    servers+=("$k") ports+=($port)
done

rewriting() { redis-cli -p "$1" info persistence | grep -q 'aof_rewrite_in_progress:1'; }
echo "| server | rate | ops/s | p50 ms | p99 ms | p99.9 ms | rewrite s | keel-bench % |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for rate in ${rates//,/ }; do
    for _ in $(seq "$runs"); do
        for i in "${!ports[@]}"; do
            p=${ports[$i]}
            while rewriting "$p"; do sleep 0.2; done
            [ "${REWRITE:-yes}" = no ] || redis-cli -p "$p" bgrewriteaof >/dev/null
            taskset -c 0 "$bench" -s 127.0.0.1 -p "$p" -t 1 -c 100 --ratio 1:1 --data-size-range 100-1000 -R \
                --key-pattern R:R --key-maximum 1000000 --test-time "$seconds" --rate "$rate" --hide-histogram ${LOAD_ARGS:-} \
                --print-percentiles 50,99,99.9 2>/dev/null >"$work/out"
            while rewriting "$p"; do sleep 0.2; done
            took=-
            [ "${REWRITE:-yes}" = no ] || took=$(redis-cli -p "$p" info persistence | awk -F: '/^aof_last_rewrite_time_sec/ {print $2+0}')
            busiest=$(grep -o 'busiest thread [0-9]*%' "$work/out" | tr -dc 0-9)
            echo "$(awk '/^Totals/ {print $2, $6, $7, $8; exit}' "$work/out") $took $busiest" >>"$work/$rate-$i"
        done
    done
    for i in "${!ports[@]}"; do
        cols=$(for c in 1 2 3 4 5 6; do awk -v c=$c '{print $c}' "$work/$rate-$i" | median; done | paste -sd' ')
        read -r ops p50 p99 p999 took busiest <<<"$cols"
        echo "| ${servers[$i]} | $rate | $ops | $p50 | $p99 | $p999 | $took | $busiest |"
    done
done
