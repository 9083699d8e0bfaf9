#!/usr/bin/env bash
# Measures scripts against Redis 7.0: EVALSHA of a two-command script and
# FCALL of the same as a function, from redis-benchmark (50 connections,
# random keys), each server pinned to core 1 with one worker thread, the
# load generator pinned to core 0, alternated run by run; prints the
# medians (ops/s, p50 and p99 ms) as Markdown rows.
#
#   scripts/bench_scripting.sh <persistence> [runs] [requests]
#
# persistence: off, everysec or always, the same for both servers. Keel is
# $KEEL (default target/release/keel-server), Redis /usr/bin/redis-server.
# Needs redis-benchmark (Debian's redis-tools).
set -euo pipefail
persistence=$1 runs=${2:-3} requests=${3:-200000}
cd "$(dirname "$0")/.."
source scripts/lib.sh
keel=${KEEL:-target/release/keel-server}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT

case $persistence in
    off) flags=(--appendonly no) ;;
    everysec|always) flags=(--appendonly yes --appendfsync "$persistence") ;;
    *) echo "persistence: off|everysec|always" >&2; exit 2 ;;
esac
script="local n = redis.call('incr', KEYS[1]) redis.call('set', KEYS[2], ARGV[1]) return n"
library="#!lua name=bench
redis.register_function('bump', function(keys, args) local n = redis.call('incr', keys[1]) redis.call('set', keys[2], args[1]) return n end)"

mkdir -p "$work/keel" "$work/redis"
taskset -c 1 "$keel" --port 7711 --threads 1 --dir "$work/keel" --save '' "${flags[@]}" >"$work/keel/log" 2>&1 &
taskset -c 1 redis-server --port 7713 --dir "$work/redis" --save '' "${flags[@]}" >"$work/redis/log" 2>&1 &
ready 7711
ready 7713
for port in 7711 7713; do
    sha=$(redis-cli -p "$port" SCRIPT LOAD "$script")
    redis-cli -p "$port" FUNCTION LOAD "$library" >/dev/null
done

measure() { # port command... -> "ops p50 p99"
    local port=$1
    shift
    taskset -c 0 redis-benchmark -p "$port" -c 50 -n "$requests" -r 100000 --csv "$@" 2>/dev/null |
        awk -F'"' 'NR == 2 {print $4, $10, $14}'
}

for _ in $(seq "$runs"); do
    for server in keel:7711 redis:7713; do
        name=${server%:*} port=${server#*:}
        measure "$port" EVALSHA "$sha" 2 k:__rand_int__ s:__rand_int__ v >>"$work/$name.evalsha"
        measure "$port" FCALL bump 2 k:__rand_int__ s:__rand_int__ v >>"$work/$name.fcall"
    done
done
echo "| command | persistence | Keel ops/s | Keel p50 | Keel p99 | Redis ops/s | Redis p50 | Redis p99 | ops/s Keel/Redis |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for command in evalsha fcall; do
    row=()
    for name in keel redis; do
        for col in 1 2 3; do
            row+=("$(awk -v c=$col '{print $c}' "$work/$name.$command" | median)")
        done
    done
    ratio=$(awk -v k="${row[0]}" -v r="${row[3]}" 'BEGIN {printf "%.2fx", k / r}')
    echo "| $command | $persistence | ${row[0]} | ${row[1]} | ${row[2]} | ${row[3]} | ${row[4]} | ${row[5]} | $ratio |"
done
