#!/usr/bin/env bash
# Keel builds against each other (before and after a change): each run
# starts a fresh server from a build on core 1, optionally preloads it,
# drives it with memtier_benchmark on core 0, and prints ops/s, p99 and
# the server's CPU seconds (user + system, from /proc) per million
# operations, builds alternated run by run (each round starting with the
# next build, so that none is always first), then each build's medians.
#
#   scripts/bench_builds.sh <memtier_benchmark> <rounds> <seconds> <keel-server>... [-- <server flags>]
#
# LOAD: memtier options of the measured load (default W1 with each
# connection on its own keys); PRELOAD: memtier options of a fill run
# before it (none by default), e.g. for a million keys of 100 B:
#   PRELOAD="-t 1 -c 50 --pipeline 20 --ratio 1:0 -d 100 --key-pattern P:P --key-maximum 1000000 --requests allkeys"
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
memtier=${1:?usage: $0 <memtier_benchmark> <rounds> <seconds> <keel-server>... [-- <server flags>]}
rounds=${2:?rounds} seconds=${3:?seconds}
shift 3
builds=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do builds+=("$1"); shift; done
[ $# -gt 0 ] && shift
flags=("$@")
load=${LOAD:--t 1 -c 100 --ratio 1:1 --data-size-range 100-1000 -R --key-pattern R:R --key-maximum 1000000 --distinct-client-seed}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT
port=7941


for round in $(seq "$rounds"); do
    for i in $(round_order "$round" ${#builds[@]}); do
        dir=$work/run; mkdir -p "$dir"
        taskset -c 1 "${builds[$i]}" --port "$port" --dir "$dir" --save '' "${flags[@]}" >"$dir/log" 2>&1 &
        pid=$!
        ready "$port"
        if [ -n "${PRELOAD:-}" ]; then
            # shellcheck disable=SC2086
            taskset -c 0 "$memtier" -p "$port" $PRELOAD --hide-histogram >/dev/null 2>&1
        fi
        before=$(cpu_ticks "$pid")
        # shellcheck disable=SC2086
        taskset -c 0 "$memtier" -p "$port" $load --test-time "$seconds" \
            --hide-histogram --print-percentiles 50,99 2>/dev/null >"$work/out"
        after=$(cpu_ticks "$pid")
        kill "$pid"; wait "$pid" 2>/dev/null || true
        discard_run "$dir"
        row=$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v s="$seconds" \
            '/^Totals/ {printf "%s %s %.3f", $2, $7, t / hz / ($2 * s / 1e6)}' "$work/out")
        echo "$row" >>"$work/build-$i"
        echo "round $round, ${builds[$i]}: ops/s p99-ms cpu-s-per-M-ops = $row"
    done
done
medians_table "ops/s | p99 ms | CPU s per M ops" "$work" "${builds[@]}"
echo "(medians of $rounds runs of $seconds s; load: ${load}${PRELOAD:+; preload: $PRELOAD})"
