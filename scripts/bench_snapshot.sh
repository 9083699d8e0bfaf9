#!/usr/bin/env bash
# Snapshots, Keel against redis-server on the same data in one run:
#   (a) p99 and max latency of W1 without a snapshot and under back-to-back
#       BGSAVEs (the whole measured window is covered by snapshots),
#   (b) peak memory during back-to-back BGSAVEs under W1 (a second run, as
#       sampling memory disturbs latency) over memory before (PSS of the
#       server and its children: Redis's fork child counts with the pages it
#       copies, shared pages once),
#   (c) seconds per GB of snapshot (the same dump.rdb for both) to write it
#       (one BGSAVE, no load) and to load it at start, and Redis's
#       latest_fork_usec per GB.
#
#   scripts/bench_snapshot.sh <size-GB> [seconds]
#
# The dataset: W1's values (random 100-1000 B, so <size-GB> / 550 B keys),
# written once into Keel and saved; both servers then load that same
# dump.rdb (Redis reads Keel's files). Servers are pinned with `taskset -c
# $SERVER_CPUS` (default 1), memtier with `taskset -c 0`. Keel is
# $KEEL (default target/release/keel-server; build it first) with --threads
# ${KEEL_THREADS:-1}; memtier is $MEMTIER (default
# /tmp/memtier/memtier_benchmark). Prints one Markdown row per server.
set -euo pipefail
source "$(dirname "$0")/bgsave_while.sh"
size_gb=${1:?size in GB}
seconds=${2:-20}
cd "$(dirname "$0")/.."
keel=${KEEL:-target/release/keel-server}
memtier=${MEMTIER:-/tmp/memtier/memtier_benchmark}
cpus=${SERVER_CPUS:-1}
keys=$(awk -v g="$size_gb" 'BEGIN {printf "%d", g * 1e9 / 550}')
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
w1=(-t 1 -c 100 --ratio 1:1 --data-size-range 100-1000 -R --key-pattern R:R --key-maximum "$keys")

now() { date +%s.%N; }
field() { redis-cli -p "$1" info "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f {print $2}'; }
# PSS in bytes of a process and its children (Redis's BGSAVE child).
pss() {
    local total=0 pid
    for pid in $1 $(pgrep -P "$1" || true); do
        total=$((total + $(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0) * 1024))
    done
    echo "$total"
}
start() { # name port dir: sets $pid; returns once the dataset is loaded
    local t0
    t0=$(now)
    if [ "$1" = keel ]; then
        taskset -c "$cpus" "$keel" --port "$2" --threads "${KEEL_THREADS:-1}" --dir "$3" --save '' \
            --appendonly no >"$3/log" 2>&1 &
    else
        taskset -c "$cpus" redis-server --port "$2" --dir "$3" --save '' --appendonly no >"$3/log" 2>&1 &
    fi
    pid=$!
    # PONG only once loading is over (-LOADING before).
    until [ "$(redis-cli -p "$2" ping 2>/dev/null)" = PONG ]; do
        kill -0 "$pid" 2>/dev/null || { echo "$1 exited at start; see $3/log" >&2; cat "$3/log" >&2; exit 1; }
        sleep 0.01
    done
    awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.3f", b - a}' >"$3/load_s"
}
stop() { redis-cli -p "$1" shutdown nosave >/dev/null 2>&1 || true; wait "$2" 2>/dev/null || true; }
wait_bgsave() { while [ "$(field "$1" persistence rdb_bgsave_in_progress)" != 0 ]; do sleep 0.01; done; }
w1_latency() { # port seconds -> "p99 max" in ms
    taskset -c 0 "$memtier" -s 127.0.0.1 -p "$1" "${w1[@]}" --test-time "$2" --hide-histogram \
        --print-percentiles 99,100 2>/dev/null | awk '/^Totals/ {print $6, $7}'
}

# The dataset, written once into Keel and saved.
mkdir -p "$work/seed"
start keel 7711 "$work/seed"
taskset -c 0 "$memtier" -s 127.0.0.1 -p 7711 -t 1 -c 4 --pipeline 64 --ratio 1:0 --data-size-range 100-1000 -R \
    --key-pattern P:P --key-minimum 1 --key-maximum "$keys" -n allkeys --hide-histogram >/dev/null 2>&1
redis-cli -p 7711 save >/dev/null
stop 7711 "$pid"
dump_bytes=$(stat -c %s "$work/seed/dump.rdb")
gb=$(awk -v b="$dump_bytes" 'BEGIN {printf "%.3f", b / 1e9}')
echo "dataset: $keys keys, dump.rdb $dump_bytes bytes" >&2

echo "| server | used_memory GB | dump GB | W1 p99 ms | W1 max ms | W1 p99 during BGSAVE ms | W1 max during BGSAVE ms | peak/before memory | write s/GB | load s/GB | fork ms/GB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
port=7712
for server in keel redis; do
    # A link, not a copy: a copy's writeback would run beside the load
    # (on the second core when Keel loads with both).
    dir=$work/$server; mkdir -p "$dir"; ln "$work/seed/dump.rdb" "$dir/"
    start "$server" "$port" "$dir"
    load_s=$(cat "$dir/load_s")
    used=$(awk -v b="$(field "$port" memory used_memory)" 'BEGIN {printf "%.2f", b / 1e9}')
    read -r p99 max <<<"$(w1_latency "$port" "$seconds")"
    # Back-to-back BGSAVEs for the whole of a W1 run: latency, with nothing
    # else touching the server but the one connection that starts them.
    w1_latency "$port" "$seconds" >"$dir/during" &
    load=$!
    bgsave_while "$port" "$load"
    wait "$load"
    # Then the same again with memory sampled, in a run of its own: reading
    # smaps_rollup walks the process's page tables under its mmap lock,
    # stalling its page faults meanwhile, which would show in the latency.
    before=$(pss "$pid")
    w1_latency "$port" "$seconds" >/dev/null &
    load=$!
    peak=$before
    while kill -0 "$load" 2>/dev/null; do
        redis-cli -p "$port" bgsave >/dev/null 2>&1 || true
        while [ "$(field "$port" persistence rdb_bgsave_in_progress)" = 1 ]; do
            m=$(pss "$pid"); [ "$m" -gt "$peak" ] && peak=$m
            sleep 0.5
        done
    done
    wait "$load"
    wait_bgsave "$port"
    read -r p99_bg max_bg <"$dir/during"
    # One BGSAVE without load: the time to write the snapshot.
    t0=$(now)
    redis-cli -p "$port" bgsave >/dev/null
    wait_bgsave "$port"
    write_s=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.3f", b - a}')
    fork_us=$(field "$port" stats latest_fork_usec)
    stop "$port" "$pid"
    awk -v s="$server" -v used="$used" -v gb="$gb" -v p="$p99" -v m="$max" -v pb="$p99_bg" -v mb="$max_bg" -v before="$before" \
        -v peak="$peak" -v w="$write_s" -v l="$load_s" -v f="${fork_us:-}" 'BEGIN {
            fork = (f == "" ? "n/a" : sprintf("%.1f", f / 1000 / gb))
            printf "| %s | %s | %.2f | %s | %s | %s | %s | %.3f | %.2f | %.2f | %s |\n",
                s, used, gb, p, m, pb, mb, peak / before, w / gb, l / gb, fork }'
    port=$((port + 1))
done
