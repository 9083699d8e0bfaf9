#!/usr/bin/env bash
# W1's latency without and during a BGSAVE, for one or more keel-server
# builds side by side (e.g. before and after a change), alternated round by
# round so that the machine's drift falls on all of them alike:
#
#   scripts/bench_bgsave_pairs.sh <size-GB> <rounds> <seconds> <keel-server>...
#
# The dataset: W1's values (random 100-1000 B), written once into the first
# build and saved; every build then loads that dump.rdb and gets W1 for 30 s
# to settle. Each round gives each build one W1 window of <seconds> without
# a snapshot, then one under back-to-back BGSAVEs. Servers are pinned to
# core 1 (`--threads 1`), memtier ($MEMTIER, default
# /tmp/memtier/memtier_benchmark) to core 0. Prints one row per build and
# round: ops/s and latency percentiles (ms) of both windows, the ratio of the
# p99s, and, where `perf` can count them, the worker thread's sched_yield and
# futex calls during the BGSAVE window (a worker that waits for a shard's
# lock shows there).
set -euo pipefail
source "$(dirname "$0")/bgsave_while.sh"
size_gb=${1:?size in GB}
rounds=${2:?rounds}
seconds=${3:?seconds per window}
shift 3
[ $# -ge 1 ] || { echo "name at least one keel-server" >&2; exit 2; }
memtier=${MEMTIER:-/tmp/memtier/memtier_benchmark}
keys=$(awk -v g="$size_gb" 'BEGIN {printf "%d", g * 1e9 / 550}')
work=$(mktemp -d)
# Servers start in command substitutions, so they are not this shell's
# jobs: their pids are kept in a file for the cleanup.
trap 'kill $(jobs -p) $(cat "$work/pids" 2>/dev/null) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

field() { redis-cli -p "$1" info "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f {print $2}'; }
start() { # binary port dir -> pid on stdout once it answers PONG (loaded)
    taskset -c 1 "$1" --port "$2" --threads 1 --dir "$3" --save '' --appendonly no >"$3/log" 2>&1 &
    local pid=$!
    echo "$pid" >>"$work/pids"
    until [ "$(redis-cli -p "$2" ping 2>/dev/null)" = PONG ]; do
        kill -0 "$pid" 2>/dev/null || { echo "$1 exited at start; see $3/log" >&2; cat "$3/log" >&2; exit 1; }
        sleep 0.05
    done
    echo "$pid"
}
w1() { # port seconds -> "ops p50 p90 p99 p99.9"
    taskset -c 0 "$memtier" -s 127.0.0.1 -p "$1" -t 1 -c 100 --ratio 1:1 --data-size-range 100-1000 -R \
        --key-pattern R:R --key-maximum "$keys" --test-time "$2" --hide-histogram \
        --print-percentiles 50,90,99,99.9 2>/dev/null | awk '/^Totals/ {print $2, $6, $7, $8, $9}'
}
worker_tid() {
    local t
    for t in /proc/"$1"/task/*; do
        [ "$(cat "$t/comm")" = keel-worker-0 ] && basename "$t"
    done
    return 0
}
counting=no
perf stat -e syscalls:sys_enter_sched_yield,syscalls:sys_enter_futex true >/dev/null 2>&1 && counting=yes

mkdir -p "$work/seed"
pid=$(start "$1" 7721 "$work/seed")
taskset -c 0 "$memtier" -s 127.0.0.1 -p 7721 -t 1 -c 4 --pipeline 64 --ratio 1:0 --data-size-range 100-1000 -R \
    --key-pattern P:P --key-minimum 1 --key-maximum "$keys" -n allkeys --hide-histogram >/dev/null 2>&1
redis-cli -p 7721 save >/dev/null
redis-cli -p 7721 shutdown nosave >/dev/null 2>&1 || true
while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
echo "dataset: $keys keys, dump.rdb $(stat -c %s "$work/seed/dump.rdb") bytes" >&2

ports=() pids=()
for i in $(seq $#); do
    dir=$work/build$i; mkdir -p "$dir"; cp "$work/seed/dump.rdb" "$dir/"
    ports+=($((7721 + i))); pids+=("$(start "${!i}" "${ports[-1]}" "$dir")")
    w1 "${ports[-1]}" 30 >/dev/null
done

window() { # port server-pid bgsave(yes|no) -> "ops p50 p90 p99 p99.9 yields futex-calls"
    local counts=$work/counts yields=n/a futexes=n/a
    rm -f "$counts"
    w1 "$1" "$seconds" >"$work/window" &
    local load=$!
    # Counted in both windows alike: a traced syscall costs the worker too.
    if [ $counting = yes ]; then
        perf stat -x, -e syscalls:sys_enter_sched_yield,syscalls:sys_enter_futex \
            -t "$(worker_tid "$2")" -o "$counts" sleep "$seconds" &
    fi
    if [ "$3" = yes ]; then bgsave_while "$1" "$load"; fi
    wait
    if [ -s "$counts" ]; then
        yields=$(awk -F, '/sched_yield/ {print $1}' "$counts")
        futexes=$(awk -F, '/futex/ {print $1}' "$counts")
    fi
    echo "$(cat "$work/window") $yields $futexes"
}

echo "| build | round | ops/s | p50 | p90 | p99 | p99.9 | ops/s during BGSAVE | p50 | p90 | p99 | p99.9 | p99 ratio | worker yields | worker futex calls |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for round in $(seq "$rounds"); do
    for i in $(seq $#); do
        port=${ports[$((i - 1))]} pid=${pids[$((i - 1))]}
        read -r ops p50 p90 p99 p999 _ _ <<<"$(window "$port" "$pid" no)"
        read -r bops bp50 bp90 bp99 bp999 yields futexes <<<"$(window "$port" "$pid" yes)"
        ratio=$(awk -v a="$bp99" -v b="$p99" 'BEGIN {printf "%.2f", a / b}')
        echo "| ${!i} | $round | $ops | $p50 | $p90 | $p99 | $p999 | $bops | $bp50 | $bp90 | $bp99 | $bp999 | $ratio | $yields | $futexes |"
    done
done
for i in $(seq $#); do
    redis-cli -p "${ports[$((i - 1))]}" shutdown nosave >/dev/null 2>&1 || true
done
