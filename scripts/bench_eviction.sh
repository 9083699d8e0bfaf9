#!/usr/bin/env bash
# Measures writes at the memory limit against Redis 7.0: both servers with
# `maxmemory` and the same `maxmemory-policy`, filled past the limit
# first, then SETs of 100-byte values to random keys out of ten million
# (nearly every SET makes a new key, so nearly every one evicts one) from
# redis-benchmark (50 connections). Each server pinned to core 1 with one
# worker thread, no persistence, the load generator pinned to core 0,
# alternated run by run; prints the medians (ops/s, p50 and p99 ms) and
# the keys evicted per SET as a Markdown row.
#
#   scripts/bench_eviction.sh <policy> [runs] [requests] [maxmemory]
#
# policy: any maxmemory-policy, or `none` for no limit (the same SETs
# with memory growing). Keel is $KEEL (default target/release/keel-server),
# Redis /usr/bin/redis-server. Needs redis-benchmark (Debian's redis-tools).
set -euo pipefail
policy=$1 runs=${2:-3} requests=${3:-500000} maxmemory=${4:-64mb}
cd "$(dirname "$0")/.."
source scripts/lib.sh
keel=${KEEL:-target/release/keel-server}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT

flags=(--appendonly no --save '')
if [[ $policy != none ]]; then
    flags+=(--maxmemory "$maxmemory" --maxmemory-policy "$policy")
fi
sets() { # port requests -> "ops p50 p99"
    taskset -c 0 redis-benchmark -p "$1" -c 50 -n "$2" -r 10000000 -d 100 --csv SET key:__rand_int__ __rand_int__ 2>/dev/null |
        awk -F'"' 'NR == 2 {print $4, $10, $14}'
}
evicted() { redis-cli -p "$1" INFO stats | tr -d '\r' | awk -F: '$1 == "evicted_keys" {print $2}'; }

for _ in $(seq "$runs"); do
    for server in keel:7711 redis:7713; do
        name=${server%:*} port=${server#*:}
        rm -rf "${work:?}/$name" && mkdir -p "$work/$name"
        case $name in
            keel) taskset -c 1 "$keel" --port "$port" --threads 1 --dir "$work/$name" "${flags[@]}" >"$work/$name.log" 2>&1 & ;;
            redis) taskset -c 1 redis-server --port "$port" --dir "$work/$name" "${flags[@]}" >"$work/$name.log" 2>&1 & ;;
        esac
        ready "$port"
        # Past the limit before the measured run (a million SETs of about
        # 150 bytes each against 64 MB).
        sets "$port" 1000000 >/dev/null
        before=$(evicted "$port")
        result=$(sets "$port" "$requests")
        after=$(evicted "$port")
        echo "$result $(awk -v a="$after" -v b="$before" -v n="$requests" 'BEGIN {printf "%.2f", (a - b) / n}')" >>"$work/$name.runs"
        redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
        wait
    done
done
row=()
for name in keel redis; do
    for col in 1 2 3 4; do
        row+=("$(awk -v c=$col '{print $c}' "$work/$name.runs" | median)")
    done
done
ratio=$(awk -v k="${row[0]}" -v r="${row[4]}" 'BEGIN {printf "%.2fx", k / r}')
echo "| policy | Keel ops/s | Keel p50 | Keel p99 | Keel evictions per SET | Redis ops/s | Redis p50 | Redis p99 | Redis evictions per SET | ops/s Keel/Redis |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
echo "| $policy | ${row[0]} | ${row[1]} | ${row[2]} | ${row[3]} | ${row[4]} | ${row[5]} | ${row[6]} | ${row[7]} | $ratio |"
