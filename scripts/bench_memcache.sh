#!/usr/bin/env bash
# Measures Keel's memcached port against memcached itself under the seeds'
# workloads spoken in memcached's text protocol: each server pinned to core
# 1 with one worker thread, memtier_benchmark (-P memcache_text) pinned to
# core 0, alternated run by run; prints the medians as a Markdown row with
# each server's CPU seconds per million operations (see bench.sh).
#
#   scripts/bench_memcache.sh <memtier_benchmark> <workload> <persistence> [runs] [seconds]
#
# workload: w1 or w2-<size>-<sets>:<gets>, as in bench.sh. persistence:
# Keel's (off, everysec or always); memcached keeps nothing on disk.
# Keel is $KEEL (default target/release/keel-server), memcached
# /usr/bin/memcached (Debian's 1.6.18).
set -euo pipefail
memtier=$1 workload=$2 persistence=$3 runs=${4:-3} seconds=${5:-10}
cd "$(dirname "$0")/.."
source scripts/lib.sh
keel=${KEEL:-target/release/keel-server}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT

case $persistence in
    off) keel_flags=(--appendonly no) ;;
    everysec|always) keel_flags=(--appendonly yes --appendfsync "$persistence") ;;
    *) echo "persistence: off|everysec|always" >&2; exit 2 ;;
esac
case $workload in
    w1) load=(-t 1 -c 100 --ratio 1:1 --data-size-range 100-1000 -R --key-pattern R:R --key-maximum 1000000) ;;
    w2-*)
        IFS=- read -r _ size ratio <<<"$workload"
        load=(-t 1 -c 70 --pipeline 20 -d "$size" --ratio "$ratio" --key-pattern R:R --key-maximum 1000000) ;;
    *) echo "workload: w1 | w2-<size>-<sets>:<gets>" >&2; exit 2 ;;
esac

# Keel listens for Redis on 7711 and for memcached on 7712; memcached on 7713.
mkdir -p "$work/keel"
taskset -c 1 "$keel" --port 7711 --memcached-port 7712 --threads 1 --dir "$work/keel" --save '' \
    "${keel_flags[@]}" >"$work/keel/log" 2>&1 &
echo $! >"$work/keel.pid"
ready 7711
# -m: memory enough that memcached evicts nothing (Keel evicts nothing).
taskset -c 1 memcached -p 7713 -U 0 -l 127.0.0.1 -t 1 -m 8192 -u "$(id -un)" >"$work/memcached.log" 2>&1 &
echo $! >"$work/memcached.pid"
sleep 0.5

measure() { # port pid -> "ops avg p99 cpu-seconds-per-million-ops"
    local before after
    before=$(cpu_ticks "$2")
    taskset -c 0 "$memtier" -P memcache_text -s 127.0.0.1 -p "$1" "${load[@]}" --test-time "$seconds" \
        --hide-histogram --print-percentiles 50,99 2>/dev/null >"$work/out"
    after=$(cpu_ticks "$2")
    awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v s="$seconds" \
        '/^Totals/ {printf "%s %s %s %.3f\n", $2, $5, $7, t / hz / ($2 * s / 1e6)}' "$work/out"
}

for _ in $(seq "$runs"); do
    measure 7712 "$(cat "$work/keel.pid")" >>"$work/keel.runs"
    measure 7713 "$(cat "$work/memcached.pid")" >>"$work/memcached.runs"
done
for s in keel memcached; do
    for col in 1 2 3 4; do awk -v c=$col '{print $c}' "$work/$s.runs" | median; done | paste -sd' ' >"$work/$s.median"
done
read -r ko ka kp kc <"$work/keel.median"; read -r mo ma mp mc <"$work/memcached.median"
ratio=$(awk -v k="$ko" -v m="$mo" 'BEGIN {printf "%.2f", k / m}')
per_cpu=$(awk -v k="$kc" -v m="$mc" 'BEGIN {printf "%.2f", m / k}')
echo "| $workload | $persistence | $ko | $ka | $kp | $kc | $mo | $ma | $mp | $mc | $ratio | $per_cpu |"
