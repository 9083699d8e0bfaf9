#!/usr/bin/env bash
# Measures Keel against redis-server under the seeds' workloads, alternating
# the two servers run by run, each server pinned to core 1 and the load
# generator to core 0, and prints the median of the runs as a Markdown row.
# Besides ops/s it reports each server's CPU seconds per million operations
# (user + system, from /proc): when the load generator saturates its core
# first, as memtier does on W1, both servers idle part of the time and
# ops/s compares the load generator, while CPU per operation still compares
# the servers. The last column is the per-CPU ratio, Redis's CPU per op
# over Keel's.
#
#   scripts/bench.sh <memtier_benchmark> <workload> <persistence> [runs] [seconds]
#
# workload: w1 (100 connections, 50/50 GET/SET, random 100-1000 B values,
#   random keys) or w2-<size>-<sets>:<gets> (70 clients, pipeline 20, e.g.
#   w2-100-1:1). persistence: off, everysec or always. Keel is $KEEL,
#   default target/release/keel-server (build it first), Redis
#   /usr/bin/redis-server.
# KEEL_THREADS (default 1) sets Keel's --threads. LOAD_ARGS adds
# memtier_benchmark options to the load: LOAD_ARGS=--distinct-client-seed
# gives each connection its own keys (by default every connection draws
# the same sequence, so W1 writes about 1/100 as many distinct keys).
# TLS_CERTS=<dir> runs both servers with TLS only and memtier_benchmark
# over TLS: the directory holds ca.crt, server.crt, server.key, client.crt
# and client.key (Redis's utils/gen-test-certs.sh makes them in tests/tls).
set -euo pipefail
memtier=$1 workload=$2 persistence=$3 runs=${4:-3} seconds=${5:-10}
cd "$(dirname "$0")/.."
keel=${KEEL:-target/release/keel-server}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT

case $persistence in
    off) keel_flags=(--appendonly no); redis_flags=(--appendonly no) ;;
    everysec|always)
        keel_flags=(--appendonly yes --appendfsync "$persistence")
        redis_flags=(--appendonly yes --appendfsync "$persistence") ;;
    *) echo "persistence: off|everysec|always" >&2; exit 2 ;;
esac
source scripts/lib.sh
seed_load "$workload"

tls_server=() tls_client=()
if [ -n "${TLS_CERTS:-}" ]; then
    tls_server=(--tls-cert-file "$TLS_CERTS/server.crt" --tls-key-file "$TLS_CERTS/server.key" --tls-ca-cert-file "$TLS_CERTS/ca.crt")
    tls_client=(--tls --cacert "$TLS_CERTS/ca.crt" --cert "$TLS_CERTS/client.crt" --key "$TLS_CERTS/client.key")
fi
start() { # name port -> starts the server in its own directory
    local dir=$work/$1-$2; mkdir -p "$dir"
    local ports=(--port "$2")
    if [ -n "${TLS_CERTS:-}" ]; then ports=(--port 0 --tls-port "$2" "${tls_server[@]}"); fi
    if [ "$1" = keel ]; then
        taskset -c 1 "$keel" "${ports[@]}" --threads "${KEEL_THREADS:-1}" --dir "$dir" --save '' "${keel_flags[@]}" >"$dir/log" 2>&1 &
    else
        taskset -c 1 redis-server "${ports[@]}" --dir "$dir" --save '' "${redis_flags[@]}" >"$dir/log" 2>&1 &
    fi
    echo $! >"$work/$1.pid"
    for _ in $(seq 100); do redis-cli "${tls_client[@]}" -p "$2" ping >/dev/null 2>&1 && return; sleep 0.05; done
    echo "$1 did not start" >&2; exit 1
}
measure() { # port pid -> "ops avg p99 cpu-seconds-per-million-ops"
    local before after
    before=$(cpu_ticks "$2")
    taskset -c 0 "$memtier" -s 127.0.0.1 -p "$1" "${tls_client[@]}" "${load[@]}" ${LOAD_ARGS:-} --test-time "$seconds" \
        --hide-histogram --print-percentiles 50,99 2>/dev/null >"$work/out"
    after=$(cpu_ticks "$2")
    awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v s="$seconds" \
        '/^Totals/ {printf "%s %s %s %.3f\n", $2, $5, $7, t / hz / ($2 * s / 1e6)}' "$work/out"
}

start keel 7701; start redis 7702
for r in $(seq "$runs"); do
    measure 7701 "$(cat "$work/keel.pid")" >>"$work/keel"
    measure 7702 "$(cat "$work/redis.pid")" >>"$work/redis"
done
for s in keel redis; do
    for col in 1 2 3 4; do awk -v c=$col '{print $c}' "$work/$s" | median; done | paste -sd' ' >"$work/$s.median"
done
read -r ko ka kp kc <"$work/keel.median"; read -r ro ra rp rc <"$work/redis.median"
ratio=$(awk -v k="$ko" -v r="$ro" 'BEGIN {printf "%.2f", k / r}')
per_cpu=$(awk -v k="$kc" -v r="$rc" 'BEGIN {printf "%.2f", r / k}')
echo "| $workload | $persistence | $ko | $ka | $kp | $kc | $ro | $ra | $rp | $rc | ${ratio}x | ${per_cpu}x |"
