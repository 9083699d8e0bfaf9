#!/usr/bin/env bash
# What cluster mode costs a node: redis-benchmark SET and GET against one
# Keel node and one redis-server, each once standalone and once with
# `cluster-enabled yes` and every slot its own (so no command is
# redirected, and each pays the slot check), alternated, <runs> rounds.
#
#   scripts/bench_cluster_mode.sh [runs] [requests]
#
# Server on core 1 (Keel with one thread), redis-benchmark on core 0,
# `appendonly no`. Prints: server mode test ops/s.
set -euo pipefail
RUNS=${1:-3}
REQUESTS=${2:-500000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KEEL=${KEEL:-$ROOT/target/release/keel-server}
REDIS=${REDIS:-/usr/bin/redis-server}
PORT=17711
WORK=$(mktemp -d)
trap 'redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT

one() {
    local name=$1 mode=$2
    local dir="$WORK/$name-$mode" args=(--port $PORT --appendonly no --save '')
    rm -rf "$dir" && mkdir -p "$dir"
    [[ $name == keel ]] && args+=(--threads 1)
    [[ $mode == cluster ]] && args+=(--cluster-enabled yes)
    local bin=$KEEL
    [[ $name == redis ]] && bin=$REDIS
    if redis-cli -p $PORT ping >/dev/null 2>&1; then
        echo "port $PORT is taken: stop what listens there first" >&2
        exit 1
    fi
    (cd "$dir" && taskset -c 1 "$bin" "${args[@]}" >log 2>&1 &)
    until redis-cli -p $PORT ping >/dev/null 2>&1; do sleep 0.1; done
    if [[ $mode == cluster ]]; then
        redis-cli -p $PORT cluster addslotsrange 0 16383 >/dev/null
        until redis-cli -p $PORT cluster info | grep -q cluster_state:ok; do sleep 0.1; done
    fi
    taskset -c 0 redis-benchmark -p $PORT -t set,get -n "$REQUESTS" -c 50 -r 100000 -q 2>/dev/null |
        tr '\r' '\n' | grep -E '^(SET|GET): [0-9.]+ requests per second' |
        sed -E "s/^(SET|GET): ([0-9.]+).*/$name $mode \1 \2/"
    redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true
    while redis-cli -p $PORT ping >/dev/null 2>&1; do sleep 0.1; done
}

for _ in $(seq "$RUNS"); do
    for name in keel redis; do
        one $name standalone
        one $name cluster
    done
done
