#!/usr/bin/env bash
# What one BGREWRITEAOF costs: each run starts a fresh server from a
# build on core 1 (AOF on, automatic rewrites off), fills it with
# memtier_benchmark on core 0, waits a second, then times one
# BGREWRITEAOF on the otherwise idle server: the server's CPU seconds
# (user + system, every thread, from /proc) and the wall time until INFO
# says it is done. Builds alternated round by round, then medians.
#
#   scripts/bench_rewrite_cpu.sh <memtier_benchmark> <rounds> <keys> <keel-server>...
#
# VALUES: memtier's value options (default -d 100; e.g. "-d 100 -R" for
# random bytes LZF cannot shorten, "--data-size-range 100-1000 -R" W1's).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
memtier=${1:?usage: $0 <memtier_benchmark> <rounds> <keys> <keel-server>...}
rounds=${2:?rounds} keys=${3:?keys}
shift 3
builds=("$@")
values=${VALUES:--d 100}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT
port=7942

info_field() { # section field -> value
    { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null
    printf 'INFO %s\r\n' "$1" >&3
    local line
    while read -r -t 2 line <&3; do
        line=${line%$'\r'}
        if [[ $line == "$2:"* ]]; then echo "${line#*:}"; break; fi
    done
    exec 3<&-
}

for round in $(seq "$rounds"); do
    for i in $(round_order "$round" ${#builds[@]}); do
        dir=$work/run; mkdir -p "$dir"
        taskset -c 1 "${builds[$i]}" --port "$port" --dir "$dir" --save '' --appendonly yes \
            --appendfsync everysec --auto-aof-rewrite-percentage 0 >"$dir/log" 2>&1 &
        pid=$!
        ready "$port"
        # shellcheck disable=SC2086
        taskset -c 0 "$memtier" -p "$port" -t 1 -c 50 --pipeline 20 --ratio 1:0 $values \
            --key-pattern P:P --key-maximum "$keys" --requests allkeys --hide-histogram >/dev/null 2>&1
        sleep 1
        done_before=$(info_field persistence aof_rewrites)
        before=$(cpu_ticks "$pid") start=$(date +%s%N)
        { exec 3<>"/dev/tcp/127.0.0.1/$port"; printf 'BGREWRITEAOF\r\n' >&3; read -r -t 2 _ <&3; exec 3<&-; }
        while [ "$(info_field persistence aof_rewrites)" = "$done_before" ] \
            || [ "$(info_field persistence aof_rewrite_in_progress)" != 0 ]; do
            sleep 0.02
        done
        after=$(cpu_ticks "$pid") end=$(date +%s%N)
        base=$(stat -c %s "$dir"/appendonlydir/*.base.rdb)
        kill "$pid"; wait "$pid" 2>/dev/null || true
        discard_run "$dir"
        row=$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v ns=$((end - start)) -v b="$base" \
            'BEGIN {printf "%.2f %.2f %d", t / hz, ns / 1e9, b}')
        echo "$row" >>"$work/build-$i"
        echo "round $round, ${builds[$i]}: cpu-s wall-s base-bytes = $row"
    done
done
medians_table "CPU s | wall s | base bytes" "$work" "${builds[@]}"
echo "(medians of $rounds runs; $keys keys, values: $values)"
