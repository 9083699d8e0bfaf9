#!/usr/bin/env bash
# Durable writes while snapshots run: Keel with `appendfsync always` under
# W1 while BGSAVEs run back to back, with `rdb-save-incremental-fsync` on
# and off, alternated, one Markdown row per run.
#
#   scripts/bench_save_durable.sh <dump.rdb> [pairs] [seconds]
#
# <dump.rdb>: the dataset (for instance a W1 one: SET random 100-1000 B
# values, then SAVE). Each run starts Keel on a copy with `appendonly no`,
# turns the AOF on (CONFIG SET appendonly yes, whose rewrite is waited
# for), sets `appendfsync always`, then measures. Keel is
# target/release/keel-server (build it first), pinned to core 1; memtier
# ($MEMTIER, default /tmp/memtier/memtier_benchmark) to core 0.
set -euo pipefail
source "$(dirname "$0")/bgsave_while.sh"
dump=$(realpath "${1:?dump.rdb}")
pairs=${2:-2}
seconds=${3:-20}
cd "$(dirname "$0")/.."
keel=target/release/keel-server
memtier=${MEMTIER:-/tmp/memtier/memtier_benchmark}
port=7731
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

field() { redis-cli -p "$port" info persistence | tr -d '\r' | awk -F: -v f="$1" '$1 == f {print $2}'; }
run() { # yes|no -> one row
    local dir=$work/$1 pid load keys
    rm -rf "$dir"; mkdir -p "$dir"; cp "$dump" "$dir/dump.rdb"
    taskset -c 1 "$keel" --port "$port" --threads 1 --dir "$dir" --save '' --appendonly no >"$dir/log" 2>&1 &
    pid=$!
    until [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ]; do sleep 0.1; done
    keys=$(redis-cli -p "$port" dbsize)
    redis-cli -p "$port" config set appendonly yes >/dev/null
    sleep 1
    while [ "$(field aof_rewrite_in_progress)" = 1 ]; do sleep 0.5; done
    redis-cli -p "$port" config set appendfsync always >/dev/null
    redis-cli -p "$port" config set rdb-save-incremental-fsync "$1" >/dev/null
    taskset -c 0 "$memtier" -s 127.0.0.1 -p "$port" -t 1 -c 100 --ratio 1:1 --data-size-range 100-1000 -R \
        --key-pattern R:R --key-maximum "$keys" --test-time "$seconds" --hide-histogram \
        --print-percentiles 50,99,99.9,100 2>/dev/null | awk '/^Totals/ {print $2, $6, $7, $8, $9}' >"$dir/during" &
    load=$!
    bgsave_while "$port" "$load"
    wait "$load"
    read -r ops p50 p99 p999 max <"$dir/during"
    echo "| $1 | $ops | $p50 | $p99 | $p999 | $max |"
    redis-cli -p "$port" shutdown nosave >/dev/null || true
    wait "$pid" 2>/dev/null || true
}

echo "| rdb-save-incremental-fsync | ops/s | p50 ms | p99 ms | p99.9 ms | max ms |"
echo "|---|---:|---:|---:|---:|---:|"
for _ in $(seq "$pairs"); do run yes; run no; done
