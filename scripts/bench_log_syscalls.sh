#!/usr/bin/env bash
# The log's syscalls, thread by thread: each Keel build given runs under
# `perf record` (fdatasync, pwrite64, pwritev and write entries) on core 1
# with a fresh directory, memtier_benchmark drives it from core 0, and a
# row per build and round gives the rate and, for each thread name (the
# journal's writer and fsync threads, the space helper, the worker), how
# many of each call it made; threads a rewrite starts count under their
# name. Builds alternate, each round starting with the next.
#
#   scripts/bench_log_syscalls.sh <memtier_benchmark> <rounds> <seconds> <keel-server>... [-- <server flags>]
#
# LOAD: memtier options (default W2 with 6000-byte values at 1:1). Needs
# perf (Debian's linux-perf) and root, or a perf_event_paranoid that lets
# perf read tracepoints.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
memtier=$1 rounds=$2 seconds=$3
shift 3
builds=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do builds+=("$1"); shift; done
[ $# -gt 0 ] && shift
flags=("$@")
load=${LOAD:-"-t 1 -c 70 --pipeline 20 -d 6000 --ratio 1:1 --key-pattern R:R --key-maximum 1000000"}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT
calls=(fdatasync pwrite64 pwritev write)
events=$(printf 'syscalls:sys_enter_%s,' "${calls[@]}")

echo "| build | round | ops/s | thread | $(printf '%s | ' "${calls[@]}")"
echo "|---|---:|---:|---|---:|---:|---:|---:|"
for round in $(seq "$rounds"); do
    for i in $(round_order "$round" ${#builds[@]}); do
        dir=$work/run port=$((7800 + i)); mkdir -p "$dir"
        perf record -q -o "$dir/perf.data" -e "${events%,}" -- \
            taskset -c 1 "${builds[$i]}" --port $port --dir "$dir" --save '' "${flags[@]}" >"$dir/log" 2>&1 &
        perf_pid=$!
        ready $port
        # shellcheck disable=SC2086 # $load is a list of options
        ops=$(taskset -c 0 "$memtier" -s 127.0.0.1 -p $port $load --test-time "$seconds" --hide-histogram 2>/dev/null |
            awk '/^Totals/ {print $2; exit}')
        # The server, perf's child: its title no longer holds its arguments.
        pkill -INT -P $perf_pid || true
        wait $perf_pid || true
        # One line per thread name: its count of each call, in `calls` order.
        perf script -i "$dir/perf.data" -F comm,event 2>/dev/null |
            awk -v calls="${calls[*]}" -v build="${builds[$i]}" -v round="$round" -v ops="$ops" '
                { sub(/:$/, "", $NF); sub(/^syscalls:sys_enter_/, "", $NF); threads[$1] = 1; n[$1, $NF]++ }
                END {
                    k = split(calls, c, " ")
                    for (t in threads) {
                        row = "| " build " | " round " | " ops " | " t " |"
                        for (j = 1; j <= k; j++) row = row " " (n[t, c[j]] + 0) " |"
                        print row
                    }
                }' | sort
        discard_run "$dir"
    done
done
