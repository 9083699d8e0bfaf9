#!/usr/bin/env bash
# Times `redis-cli --cluster reshard` on a three-master cluster of Keel
# nodes and of Debian's redis-server, one after the other, on the same
# data: <keys> keys of <size> bytes spread over all slots, then <slots>
# slots (and their keys) moved from the first master to the third.
#
#   scripts/bench_reshard.sh [keys] [size] [slots] [runs]
#
# Each node runs with `appendonly yes` and `appendfsync $FSYNC` (default
# always, Keel's default), Keel with one thread, all on core 1;
# redis-cli on core 0. Prints one line per run: server, seconds, keys
# moved.
set -euo pipefail
KEYS=${1:-200000}
SIZE=${2:-100}
SLOTS=${3:-1000}
RUNS=${4:-3}
FSYNC=${FSYNC:-always}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KEEL=${KEEL:-$ROOT/target/release/keel-server}
REDIS=${REDIS:-/usr/bin/redis-server}
WORK=$(mktemp -d)
trap 'pkill -f ":1770[123]( |$)" 2>/dev/null || true; rm -rf "$WORK"' EXIT

# The keys as RESP, one file per master of `redis-cli --cluster create`'s
# split (0-5460, 5461-10922, 10923-16383).
python3 - "$KEYS" "$SIZE" "$WORK" <<'PY'
import sys
keys, size, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xffff
    return crc
out = [open(f"{work}/load{i}.resp", "wb") for i in range(3)]
value = b"x" * size
for n in range(keys):
    key = b"key:%d" % n
    slot = crc16(key) & 16383
    node = 0 if slot <= 5460 else (1 if slot <= 10922 else 2)
    out[node].write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value))
PY

run() {
    local name=$1 bin=$2
    local dirs=()
    for p in 17701 17702 17703; do
        if redis-cli -p $p ping >/dev/null 2>&1; then
            echo "port $p is taken: stop what listens there first" >&2
            exit 1
        fi
        local d="$WORK/$name-$p"
        rm -rf "$d" && mkdir -p "$d"
        dirs+=("$d")
        if [[ $name == keel ]]; then
            (cd "$d" && taskset -c 1 "$bin" --port $p --threads 1 --cluster-enabled yes --appendonly yes --appendfsync $FSYNC --save '' >log 2>&1 &)
        else
            (cd "$d" && taskset -c 1 "$bin" --port $p --cluster-enabled yes --appendonly yes --appendfsync $FSYNC --save '' >log 2>&1 &)
        fi
    done
    for p in 17701 17702 17703; do
        until redis-cli -p $p ping >/dev/null 2>&1; do sleep 0.1; done
    done
    redis-cli --cluster create 127.0.0.1:17701 127.0.0.1:17702 127.0.0.1:17703 --cluster-yes >/dev/null
    until [[ $(redis-cli -p 17701 cluster info | grep -c cluster_state:ok) == 1 ]]; do sleep 0.2; done
    for i in 0 1 2; do
        redis-cli -p $((17701 + i)) --pipe <"$WORK/load$i.resp" >/dev/null
    done
    local from to before start end after
    from=$(redis-cli -p 17701 cluster myid)
    to=$(redis-cli -p 17703 cluster myid)
    before=$(redis-cli -p 17703 dbsize)
    start=$(date +%s.%N)
    taskset -c 0 redis-cli --cluster reshard 127.0.0.1:17701 --cluster-from "$from" --cluster-to "$to" \
        --cluster-slots "$SLOTS" --cluster-yes --cluster-pipeline 100 >/dev/null
    end=$(date +%s.%N)
    after=$(redis-cli -p 17703 dbsize)
    echo "$name $(echo "$end - $start" | bc) $((after - before))"
    for p in 17701 17702 17703; do redis-cli -p $p shutdown nosave >/dev/null 2>&1 || true; done
    sleep 0.5
}

for _ in $(seq "$RUNS"); do
    run keel "$KEEL"
    run redis "$REDIS"
done
