#!/usr/bin/env bash
# What a rewrite costs a closed loop: W1 under memtier_benchmark (100
# connections, 50/50 GET/SET, random 100-1000 B values, each connection on
# its own keys) against a server holding 1M keys written beforehand, with a
# BGREWRITEAOF sent 1 s into the run or none. The four cases (Keel and
# redis-server, each with and without the rewrite) alternate run by run,
# each a fresh server on core 1 (`appendfsync`
# APPENDFSYNC, default everysec; no automatic rewrites), memtier on core 0.
# A row per server and case: the medians of ops/s, p50 and p99, and in how
# many runs the rewrite was still going when the load stopped.
#
#   scripts/bench_rewrite_throughput.sh <memtier_benchmark> [runs] [seconds]
#
# Keel is $KEEL, default target/release/keel-server.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
memtier=$1 runs=${2:-3} seconds=${3:-8}
cd "$(dirname "$0")/.."
keel=${KEEL:-target/release/keel-server}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT
flags=(--save '' --appendonly yes --appendfsync "${APPENDFSYNC:-everysec}" --auto-aof-rewrite-percentage 0)
values=(--data-size-range 100-1000 -R --key-maximum 1000000)

servers=("$keel" /usr/bin/redis-server)
cases=()
for server in "${servers[@]}"; do for rewrite in yes no; do cases+=("$server $rewrite"); done; done
for run in $(seq "$runs"); do
    for i in "${!cases[@]}"; do
        read -r server rewrite <<<"${cases[$i]}"
        dir=$work/run port=$((7700 + i)); mkdir -p "$dir"
        taskset -c 1 "$server" --port $port --dir "$dir" "${flags[@]}" >"$dir/log" 2>&1 &
        pid=$!
        ready $port
        taskset -c 0 "$memtier" -s 127.0.0.1 -p $port -t 1 -c 50 --pipeline 20 --ratio 1:0 --key-pattern P:P \
            "${values[@]}" --requests allkeys --hide-histogram >/dev/null 2>&1
        taskset -c 0 "$memtier" -s 127.0.0.1 -p $port -t 1 -c 100 --ratio 1:1 --key-pattern R:R "${values[@]}" \
            --distinct-client-seed --test-time "$seconds" --hide-histogram >"$dir/out" 2>/dev/null &
        load=$!
        sleep 1
        [ "$rewrite" = no ] || redis-cli -p $port bgrewriteaof >/dev/null
        wait $load
        going=$(redis-cli -p $port info persistence | tr -d '\r' | awk -F: '/^aof_rewrite_in_progress:/ {print $2}')
        echo "$(awk '/^Totals/ {print $2, $6, $7; exit}' "$dir/out") $going" >>"$work/case-$i"
        kill $pid; wait $pid 2>/dev/null || true
        discard_run "$dir"
    done
done

echo "| server | rewrite | ops/s | p50 ms | p99 ms | runs still rewriting at the end |"
echo "|---|---|---:|---:|---:|---:|"
for i in "${!cases[@]}"; do
    read -r server rewrite <<<"${cases[$i]}"
    cols=$(for c in 1 2 3; do awk -v c=$c '{print $c}' "$work/case-$i" | median; done | paste -sd' ')
    read -r ops p50 p99 <<<"$cols"
    echo "| $(basename "$server") | $rewrite | $ops | $p50 | $p99 | $(awk '{n += $4} END {print n}' "$work/case-$i") of $runs |"
done
