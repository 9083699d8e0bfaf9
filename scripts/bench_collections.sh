#!/usr/bin/env bash
# Collections against redis-server: memory per element of issue 4's three
# datasets, and throughput of one write/read command pair per type.
#
#   scripts/bench_collections.sh memory
#   scripts/bench_collections.sh throughput <memtier_benchmark> [runs] [seconds]
#   scripts/bench_collections.sh delete <memtier_benchmark> [members]
#
# memory: loads each dataset into both servers (redis-cli --pipe from one
# generated file), and prints RSS growth over the empty server per element:
#   hashes  1M hashes of 10 fields ("field:N" -> 8-byte values)
#   big     one hash, one set, one sorted set of 1M members each
#   lists   1M lists of 10 short elements
# throughput: memtier --command pairs, the two servers alternated run by
# run (median of runs), each server pinned to core 1, memtier to core 0.
# delete: one set of 10M members (by default) in a fresh server; memtier
# runs GET/SET on other keys for 6 s while, 2 s in, the set is deleted: the
# latency percentiles and maximum of those requests, per server and way of
# deleting (UNLINK; DEL, which frees inline as lazyfree-lazy-user-del is no;
# none, the baseline).
# Keel is target/release/keel-server (build it first), persistence off for
# both (the durability issue measures the log).
set -euo pipefail
mode=${1:?memory|throughput}
cd "$(dirname "$0")/.."
keel=target/release/keel-server
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT

start() { # name port
    local dir=$work/$1-$2; mkdir -p "$dir"
    if [ "$1" = keel ]; then
        taskset -c 1 "$keel" --port "$2" --threads 1 --dir "$dir" --appendonly no >"$dir/log" 2>&1 &
    else
        taskset -c 1 redis-server --port "$2" --dir "$dir" --save '' --appendonly no >"$dir/log" 2>&1 &
    fi
    echo $! >"$work/$1.pid"
    for _ in $(seq 100); do redis-cli -p "$2" ping >/dev/null 2>&1 && return; sleep 0.05; done
    echo "$1 did not start" >&2; exit 1
}
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$(cat "$work/$1.pid")/status"; }

generate() { # dataset file -> writes RESP commands, prints the element count
    python3 - "$1" "$2" <<'EOF'
import sys
dataset, path = sys.argv[1], sys.argv[2]
def cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)
n = 0
with open(path, "wb") as f:
    if dataset == "hashes":
        for i in range(1_000_000):
            args = ["HSET", f"hash:{i}"]
            for j in range(10):
                args += [f"field:{j}", f"v{i % 9999999:07d}"]
            f.write(cmd(*args)); n += 10
    elif dataset == "big":
        for i in range(0, 1_000_000, 100):
            f.write(cmd("HSET", "bighash", *[x for k in range(i, i + 100) for x in (f"member:{k}", f"v{k}")]))
            f.write(cmd("SADD", "bigset", *[f"member:{k}" for k in range(i, i + 100)]))
            f.write(cmd("ZADD", "bigzset", *[x for k in range(i, i + 100) for x in (k * 1.5, f"member:{k}")]))
        n = 3_000_000
    elif dataset == "lists":
        for i in range(1_000_000):
            f.write(cmd("RPUSH", f"list:{i}", *[f"elem{j}" for j in range(10)])); n += 10
print(n)
EOF
}

case $mode in
memory)
    echo "| dataset | elements | Keel bytes/element | Redis bytes/element | Keel/Redis |"
    echo "|---|---|---|---|---|"
    port=7711
    for dataset in hashes big lists; do
        n=$(generate "$dataset" "$work/$dataset.resp")
        declare -A per
        for s in keel redis; do
            # A fresh server per dataset: freed memory is not always given
            # back to the system, so a reused server would under-count.
            port=$((port + 1))
            start $s $port
            before=$(rss_kb $s)
            redis-cli -p $port --pipe <"$work/$dataset.resp" >"$work/pipe.log"
            grep -q "errors: 0" "$work/pipe.log" || { cat "$work/pipe.log" >&2; exit 1; }
            sleep 1
            after=$(rss_kb $s)
            per[$s]=$(awk -v a="$after" -v b="$before" -v n="$n" 'BEGIN {printf "%.1f", (a - b) * 1024 / n}')
            kill "$(cat "$work/$s.pid")"; wait "$(cat "$work/$s.pid")" 2>/dev/null || true
        done
        ratio=$(awk -v k="${per[keel]}" -v r="${per[redis]}" 'BEGIN {printf "%.2f", k / r}')
        echo "| $dataset | $n | ${per[keel]} | ${per[redis]} | ${ratio}x |"
    done
    ;;
throughput)
    memtier=${2:?memtier_benchmark path} runs=${3:-3} seconds=${4:-8}
    start keel 7711; start redis 7712
    # name | write command | read command, each on random keys of a 10k
    # key space so that collections grow to a few hundred members.
    pairs=(
        "HSET/HGET|HSET __key__ __data__ __data__|HGET __key__ __data__"
        "LPUSH/LPOP|LPUSH __key__ __data__|LPOP __key__"
        "SADD/SISMEMBER|SADD __key__ __data__|SISMEMBER __key__ __data__"
        "ZADD/ZRANGE|ZADD __key__ 1 __data__|ZRANGE __key__ 0 9"
    )
    median() { sort -g | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
    echo "| commands | Keel ops/s | Keel p99 ms | Redis ops/s | Redis p99 ms | Keel/Redis |"
    echo "|---|---|---|---|---|---|"
    for pair in "${pairs[@]}"; do
        IFS='|' read -r name write read <<<"$pair"
        for s in keel redis; do : >"$work/$s.runs"; done
        for r in $(seq "$runs"); do
            for s in keel redis; do
                port=$([ $s = keel ] && echo 7711 || echo 7712)
                redis-cli -p $port flushall >/dev/null
                taskset -c 0 "$memtier" -s 127.0.0.1 -p $port -t 1 -c 50 --pipeline 1 \
                    --command "$write" --command-ratio 1 --command-key-pattern R \
                    --command "$read" --command-ratio 1 --command-key-pattern R \
                    --key-maximum 10000 -d 8 -R --test-time "$seconds" \
                    --hide-histogram --print-percentiles 99 2>/dev/null |
                    awk '/^Totals/ {print $2, $4}' >>"$work/$s.runs"
            done
        done
        for s in keel redis; do
            ops=$(awk '{print $1}' "$work/$s.runs" | median); p99=$(awk '{print $2}' "$work/$s.runs" | median)
            echo "$ops $p99" >"$work/$s.med"
        done
        read -r ko kp <"$work/keel.med"; read -r ro rp <"$work/redis.med"
        ratio=$(awk -v k="$ko" -v r="$ro" 'BEGIN {printf "%.2f", k / r}')
        echo "| $name | $ko | $kp | $ro | $rp | ${ratio}x |"
    done
    ;;
delete)
    memtier=${2:?memtier_benchmark path} members=${3:-10000000}
    python3 - "$members" "$work/big.resp" <<'EOF'
import sys
n, path = int(sys.argv[1]), sys.argv[2]
with open(path, "wb") as f:
    for i in range(0, n, 1000):
        args = [b"SADD", b"bigset"] + [b"member:%d" % k for k in range(i, min(i + 1000, n))]
        f.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
EOF
    echo "| server | deleted with | set members | p50 ms | p99 ms | p99.9 ms | max ms | delete command ms |"
    echo "|---|---|---|---|---|---|---|---|"
    port=7720
    for s in keel redis; do
        for how in none UNLINK DEL; do
            port=$((port + 1))
            start $s $port
            redis-cli -p $port --pipe <"$work/big.resp" >"$work/pipe.log"
            grep -q "errors: 0" "$work/pipe.log" || { cat "$work/pipe.log" >&2; exit 1; }
            card=$(redis-cli -p $port scard bigset)
            taskset -c 0 "$memtier" -s 127.0.0.1 -p $port -t 1 -c 20 --ratio 1:1 -d 32 \
                --key-pattern R:R --key-maximum 100000 --test-time 6 --hide-histogram \
                --print-percentiles 50,99,99.9,100 >"$work/memtier.out" 2>/dev/null &
            sleep 2
            took=-
            if [ $how != none ]; then
                t0=$(date +%s%N); redis-cli -p $port $how bigset >/dev/null; t1=$(date +%s%N)
                took=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", (b - a) / 1e6}')
            fi
            wait $!
            read -r p50 p99 p999 max < <(awk '/^Totals/ {print $6, $7, $8, $9}' "$work/memtier.out")
            echo "| $s | $how | $card | $p50 | $p99 | $p999 | $max | $took |"
            kill "$(cat "$work/$s.pid")"; wait "$(cat "$work/$s.pid")" 2>/dev/null || true
        done
    done
    ;;
*) echo "mode: memory | throughput | delete" >&2; exit 2 ;;
esac
