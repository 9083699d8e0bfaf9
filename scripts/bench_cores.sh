#!/usr/bin/env bash
# How Keel's throughput grows with cores: Keel with --threads N pinned to
# cores 0..N-1, for each N of the list, against Redis on core 0 and Redis
# with io-threads on cores 0..3, all under the same load, alternated server
# by server within each round, medians of the rounds as a Markdown table.
# Needs 2 x max(N) cores: the load generator gets cores max(N)..2max(N)-1,
# so it never shares a core with a server.
#
#   scripts/bench_cores.sh <load-generator> <workload> <persistence> [threads] [runs] [seconds]
#
# load-generator: memtier_benchmark or keel-bench (same options, same
#   "Totals" line). workload: w1 (100 connections, 50/50 GET/SET, random
#   100-1000 B values) or w2-<size>-<sets>:<gets> (70 connections,
#   pipeline 20), as in bench.sh, the connections spread over the load
#   generator's threads (10 per thread). persistence: off, everysec or
#   always. threads: Keel's thread counts, default "1 2 4 8".
# KEEL (default target/release/keel-server), REDIS (default redis-server),
# REDIS_IO_THREADS (default 4; 0 leaves that server out), LOAD_CPUS (the
# load generator's cores, default max(N)..2max(N)-1), WORK (directory
# for the servers' files, default a new one under /tmp: put it on the disk
# to be measured), LOAD_ARGS (more load-generator options), SERVER_ARGS
# (more directives for every server, e.g. "--databases 1000").
#
# Columns: ops/s, p50 and p99 in ms, the server's CPU seconds (user +
# system, from /proc) per million operations, and ops/s as a ratio to
# Redis on one core and to Keel's first thread count.
set -euo pipefail
load_gen=${1:?usage: $0 <load-generator> <workload> <persistence> [threads] [runs] [seconds]}
workload=${2:?workload} persistence=${3:?persistence}
threads=${4:-1 2 4 8} runs=${5:-3} seconds=${6:-5}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
keel=${KEEL:-target/release/keel-server} redis=${REDIS:-redis-server}
io_threads=${REDIS_IO_THREADS:-4}
max=$(tr ' ' '\n' <<<"$threads" | sort -n | tail -1)
load_cores=${LOAD_CPUS:-$max-$((2 * max - 1))}
if [ -z "${LOAD_CPUS:-}" ] && [ $((2 * max)) -gt "$(nproc)" ]; then
    echo "$((2 * max)) cores needed, $(nproc) here" >&2; exit 2
fi
work=$(mktemp -d "${WORK:-/tmp}/bench-cores.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT

case $persistence in
    off) flags=(--appendonly no) ;;
    everysec|always) flags=(--appendonly yes --appendfsync "$persistence") ;;
    *) echo "persistence: off|everysec|always" >&2; exit 2 ;;
esac
case $workload in
    w1) load=(-t 10 -c 10 --ratio 1:1 --data-size-range 100-1000 -R --key-pattern R:R --key-maximum 1000000) ;;
    w2-*)
        IFS=- read -r _ size ratio <<<"$workload"
        load=(-t 7 -c 10 --pipeline 20 -d "$size" --ratio "$ratio" --key-pattern R:R --key-maximum 1000000) ;;
    *) echo "workload: w1 | w2-<size>-<sets>:<gets>" >&2; exit 2 ;;
esac

servers=() port=7800
start() { # name cores command... -> starts it in its own directory
    local name=$1 cores=$2; shift 2
    local dir=$work/$name; mkdir -p "$dir"
    port=$((port + 1))
    # shellcheck disable=SC2086
    taskset -c "$cores" "$@" --port "$port" --dir "$dir" --save '' "${flags[@]}" ${SERVER_ARGS:-} >"$dir/log" 2>&1 &
    echo "$! $port" >"$dir/pid-port"
    ready "$port"
    servers+=("$name")
}
for n in $threads; do start "keel-$n" "0-$((n - 1))" "$keel" --threads "$n"; done
start redis 0 "$redis"
if [ "$io_threads" -gt 0 ]; then
    start "redis-io$io_threads" "0-$((io_threads - 1))" "$redis" --io-threads "$io_threads" --io-threads-do-reads yes
fi

measure() { # name -> appends "ops p50 p99 cpu-seconds-per-million-ops" to its file
    local pid port before after
    read -r pid port <"$work/$1/pid-port"
    before=$(cpu_ticks "$pid")
    taskset -c "$load_cores" "$load_gen" -s 127.0.0.1 -p "$port" "${load[@]}" ${LOAD_ARGS:-} \
        --test-time "$seconds" --hide-histogram --print-percentiles 50,99 2>/dev/null >"$work/out"
    after=$(cpu_ticks "$pid")
    awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v s="$seconds" \
        '/^Totals/ {printf "%s %s %s %.3f\n", $2, $6, $7, t / hz / ($2 * s / 1e6)}' "$work/out" >>"$work/$1/runs"
}

for _ in $(seq "$runs"); do
    for s in "${servers[@]}"; do measure "$s"; done
done
for s in "${servers[@]}"; do
    for col in 1 2 3 4; do awk -v c=$col '{print $c}' "$work/$s/runs" | median; done | paste -sd' ' >"$work/$s/median"
done
read -r redis_ops _ <"$work/redis/median"
first=$(awk '{print $1}' <<<"$threads")
read -r keel1_ops _ <"$work/keel-$first/median"
echo "| server | cores | ops/s | p50 ms | p99 ms | CPU s per M ops | vs Redis | vs Keel --threads $first |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for s in "${servers[@]}"; do
    read -r ops p50 p99 cpu <"$work/$s/median"
    case $s in keel-*) cores=${s#keel-} ;; redis) cores=1 ;; *) cores=$io_threads ;; esac
    awk -v s="$s" -v c="$cores" -v o="$ops" -v a="$p50" -v p="$p99" -v u="$cpu" -v r="$redis_ops" -v k="$keel1_ops" \
        'BEGIN {printf "| %s | %s | %s | %s | %s | %s | %.2fx | %.2fx |\n", s, c, o, a, p, u, o / r, o / k}'
done
echo "($workload, $persistence, $(basename "$load_gen") ${load[*]} ${LOAD_ARGS:-} on cores $load_cores, medians of $runs runs of $seconds s)"
