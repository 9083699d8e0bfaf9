#!/usr/bin/env bash
# Full replication time (seed 003): how long a replica takes from
# REPLICAOF to a synced link, with Keel as the master and with Debian's
# redis-server 7.0.15 as the master, alternated run by run. The replica is
# Debian's redis-server each time (pinned to core 0, loading from disk as
# Redis does by default), or Keel with REPLICA=keel (one worker thread,
# no persistence either); the master is pinned to core 1 (Keel with one
# worker thread). Both masters hold the same dataset, made by DEBUG
# POPULATE, and keep nothing on disk (`--appendonly no --save ''`);
# both masters send their RDB at once (`repl-diskless-sync-delay 0`, the
# default being to wait 5 s for more replicas). Prints, per master, the
# median sync time in seconds, the RDB's size as the replica got it, and
# the master's CPU seconds for the sync.
#
#   scripts/bench_replication.sh <keys> <value bytes> [runs]
#
# Keel is $KEEL (default target/release/keel-server). TLS_CERTS=<dir>
# (ca.crt, server.crt/.key, client.crt/.key, as scripts/lib.sh's
# make_test_certs makes them) syncs over TLS: each master serves a
# tls-port too, and the replica connects there with `tls-replication
# yes`, showing the client certificate.
set -euo pipefail
keys=$1 size=$2 runs=${3:-3}
cd "$(dirname "$0")/.."
source scripts/lib.sh
keel=${KEEL:-target/release/keel-server}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT

# The port a replica connects to: the plain one, or the TLS one next to it.
tls=() replica_tls=() step=0
if [ -n "${TLS_CERTS:-}" ]; then
    tls=(--tls-cert-file "$TLS_CERTS/server.crt" --tls-key-file "$TLS_CERTS/server.key" --tls-ca-cert-file "$TLS_CERTS/ca.crt")
    replica_tls=("${tls[@]}" --tls-replication yes --tls-client-cert-file "$TLS_CERTS/client.crt" --tls-client-key-file "$TLS_CERTS/client.key")
    step=1
fi
mkdir -p "$work/keel" "$work/redis"
taskset -c 1 "$keel" --port 7711 --threads 1 --dir "$work/keel" --save '' --appendonly no \
    --enable-debug-command yes --repl-diskless-sync-delay 0 ${tls[@]+"${tls[@]}" --tls-port 7712} >"$work/keel/log" 2>&1 &
echo $! >"$work/keel.pid"
taskset -c 1 redis-server --port 7713 --dir "$work/redis" --save '' --appendonly no \
    --enable-debug-command yes --repl-diskless-sync-delay 0 ${tls[@]+"${tls[@]}" --tls-port 7714} >"$work/redis/log" 2>&1 &
echo $! >"$work/redis.pid"
ready 7711
ready 7713
for port in 7711 7713; do
    redis-cli -p $port DEBUG POPULATE "$keys" key "$size" >/dev/null
done

sync_once() { # master port, master pid -> "seconds rdb-bytes master-cpu-seconds"
    local dir before after start end
    dir=$(mktemp -d -p "$work")
    if [[ ${REPLICA:-redis} == keel ]]; then
        taskset -c 0 "$keel" --port 7715 --threads 1 --dir "$dir" --save '' --appendonly no \
            ${replica_tls[@]+"${replica_tls[@]}"} >"$dir/log" 2>&1 &
    else
        taskset -c 0 redis-server --port 7715 --dir "$dir" --save '' --appendonly no \
            ${replica_tls[@]+"${replica_tls[@]}"} >"$dir/log" 2>&1 &
    fi
    local pid=$!
    ready 7715
    before=$(cpu_ticks "$2")
    start=$(date +%s.%N)
    redis-cli -p 7715 REPLICAOF 127.0.0.1 $(($1 + step)) >/dev/null
    until redis-cli -p 7715 INFO replication | grep -q '^master_link_status:up'; do sleep 0.01; done
    end=$(date +%s.%N)
    after=$(cpu_ticks "$2")
    local bytes
    # The replica keeps what it received as its dump.rdb.
    bytes=$(stat -c %s "$dir/dump.rdb" 2>/dev/null || echo 0)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
    awk -v s="$start" -v e="$end" -v b="$bytes" -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" \
        'BEGIN {printf "%.2f %d %.2f\n", e - s, b, t / hz}'
}

for round in $(seq "$runs"); do
    for i in $(round_order "$round" 2); do
        case $i in
            0) sync_once 7711 "$(cat "$work/keel.pid")" >>"$work/keel.runs" ;;
            1) sync_once 7713 "$(cat "$work/redis.pid")" >>"$work/redis.runs" ;;
        esac
    done
done
echo "| master | replica | link | keys | value bytes | sync s | RDB bytes | master CPU s |"
echo "|---|---|---|---:|---:|---:|---:|---:|"
for s in keel redis; do
    cols=$(for c in 1 2 3; do awk -v c="$c" '{print $c}' "$work/$s.runs" | median; done | paste -sd' ')
    read -r secs bytes cpu <<<"$cols"
    echo "| $s | ${REPLICA:-redis} | $([ $step = 1 ] && echo TLS || echo plain) | $keys | $size | $secs | $bytes | $cpu |"
done
