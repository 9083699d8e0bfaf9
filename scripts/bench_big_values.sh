#!/usr/bin/env bash
# SET and GET of one big value, one request at a time over one connection
# (scripts/big_value_latency.py), against Keel builds and Debian's
# redis-server, each on core 1 with the client on core 0, servers
# alternated run by run, no persistence; prints each server's medians over
# the runs of its median SET, median GET and GET p99 (ms).
#
#   scripts/bench_big_values.sh <value bytes> <requests per run> <runs> <keel-server>...
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
size=${1:?usage: $0 <value bytes> <requests per run> <runs> <keel-server>...}
requests=${2:?requests} runs=${3:?runs}
shift 3
servers=("$@" /usr/bin/redis-server)
client="$(dirname "$0")/big_value_latency.py"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT
port=7942
for round in $(seq "$runs"); do
    for i in $(round_order "$round" ${#servers[@]}); do
        dir=$work/run; mkdir -p "$dir"
        extra=(); [[ ${servers[$i]} == */redis-server ]] || extra=(--threads 1)
        taskset -c 1 "${servers[$i]}" --port "$port" --dir "$dir" --save '' --appendonly no "${extra[@]}" >"$dir/log" 2>&1 &
        pid=$!
        ready "$port"
        taskset -c 0 python3 "$client" "$port" "$size" "$requests" >>"$work/build-$i"
        kill "$pid"; wait "$pid" || true
        discard_run "$dir"
    done
done
medians_table "SET p50 ms | GET p50 ms | GET p99 ms" "$work" "${servers[@]}"
