#!/usr/bin/env bash
# Instructions per request, counted by callgrind: each server given (Keel
# builds, or /usr/bin/redis-server) runs under valgrind while memtier_benchmark
# sends a fixed number of requests, and only the serving thread's code is
# counted (Keel's `Worker::run`, Redis's `aeMain`: parsing, lookup, commands,
# replies, the event loop; not the kernel). Unlike ops/s or CPU time the
# count does not move from run to run, so a change of a few percent shows
# at once. It counts work, not waiting: a cache miss costs one instruction
# here, so confirm what it finds with bench.sh or bench_builds.sh.
#
#   scripts/bench_instructions.sh <memtier_benchmark> <workload> <requests-per-connection> <server>...
#
# workload: w1 or w2-<size>-<sets>:<gets>, as bench.sh. The load runs twice
# (the first fills the keyspace some); both count. Persistence is off.
# Needs valgrind (apt-get install valgrind).
set -euo pipefail
memtier=$1 workload=$2 requests=$3; shift 3
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind" >&2; exit 1; }
source scripts/lib.sh
seed_load "$workload"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT
echo "| server | $workload instructions per request |"
echo "|---|---:|"
for server in "$@"; do
    # Not realpath: Debian's redis-server is a link to redis-check-rdb.
    server=$(cd "$(dirname "$server")" && pwd)/$(basename "$server")
    dir=$(mktemp -d -p "$work")
    case $(basename "$server") in
        redis-server*) loop=aeMain; flags=(--save '' --appendonly no) ;;
        *) loop='*Worker::run*'; flags=(--threads 1 --save '' --appendonly no) ;;
    esac
    valgrind --tool=callgrind --callgrind-out-file="$dir/out" --collect-atstart=no "--toggle-collect=$loop" \
        "$server" --port 7791 --dir "$dir" "${flags[@]}" >"$dir/log" 2>&1 &
    pid=$!
    # Under valgrind a server takes seconds to start: up to ten of
    # ready's 5 s waits.
    for _ in $(seq 10); do (ready 7791) 2>/dev/null && break; done
    ready 7791
    for _ in 1 2; do
        "$memtier" -s 127.0.0.1 -p 7791 "${load[@]}" -n "$requests" --hide-histogram >/dev/null 2>&1
    done
    kill "$pid"; wait "$pid" || true
    total=$(awk '/^totals:/ {s += $2} END {print s}' "$dir"/out*)
    awk -v t="$total" -v n=$((2 * conns * requests)) -v s="$server" 'BEGIN {printf "| %s | %.0f |\n", s, t / n}'
done
