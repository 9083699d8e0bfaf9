#!/usr/bin/env bash
# keel-bench against memtier_benchmark: both tools drive the same servers,
# alternated run by run, and a Markdown table gives each tool's medians.
#
#   scripts/bench_tools.sh /path/to/memtier_benchmark [runs] [seconds]
#
# Servers: Debian's redis-server (persistence off) and memcached (one
# worker thread), each pinned to core 1 with `taskset -c 1`; each tool runs
# one thread pinned to core 0, timed by /usr/bin/time for its CPU use.
# Loads (BENCHMARKS.md's W1 and W2):
#   W1        -c 100 --ratio 1:1 --data-size-range 100-1000 -R --key-pattern R:R --key-maximum 1000000
#   W2        -c 70 --pipeline 20 -d 100 --ratio 1:1 --key-pattern R:R --key-maximum 1000000
#   W1 rated  W1 at a fixed rate below both tools' capacity, so the server,
#             not the tool, sets the pace and latencies compare at the same
#             throughput: half the lower of the two tools' W1 medians, as
#             memtier's per-connection --rate-limiting (rate / 100) and
#             keel-bench's total --rate. RATE=<ops/s> overrides it.
#   memcached W2 with -P memcache_text
# The server is flushed before every run, so each starts from the same state.
#
# Columns: ops/s, average and p99 latency in ms as each tool prints them
# (memtier times from the send; so does keel-bench in closed loop), CPU
# seconds (user + system) per million operations, medians over the runs.
# In the rated rows keel-bench's main figures are coordinated-omission
# corrected (from each request's intended start); its uncorrected ones,
# timed from the send as memtier's are, fill the "from send" columns so the
# two tools compare like with like.
#
# keel-bench is built in release mode (CARGO_TARGET_DIR is honoured).
set -euo pipefail
memtier=${1:?usage: $0 /path/to/memtier_benchmark [runs] [seconds]}
runs=${2:-5}
seconds=${3:-5}
cd "$(dirname "$0")/.."
[ -x "$memtier" ] || { echo "$memtier: not an executable" >&2; exit 2; }
for tool in redis-server memcached redis-cli taskset /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "$tool is missing" >&2; exit 2; }
done
cargo build --release --locked -q -p keel-bench
keel_bench=${CARGO_TARGET_DIR:-target}/release/keel-bench

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait || true; rm -rf "$work"' EXIT

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { # first free port from $1 up
    local p=$1
    while ! port_free "$p"; do p=$((p + 1)); done
    echo "$p"
}
wait_listening() { # port name
    for _ in $(seq 200); do port_free "$1" || return 0; sleep 0.05; done
    echo "$2 did not start on port $1" >&2; exit 1
}

redis_port=$(free_port 7731)
taskset -c 1 redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
wait_listening "$redis_port" redis-server
memcached_port=$(free_port $((redis_port + 1)))
memcached_user=()
[ "$(id -u)" -ne 0 ] || memcached_user=(-u root)
taskset -c 1 memcached -l 127.0.0.1 -p "$memcached_port" -U 0 -t 1 -m 1024 "${memcached_user[@]}" >"$work/memcached.log" 2>&1 &
wait_listening "$memcached_port" memcached

flush() { # protocol port
    if [ "$1" = memcache_text ]; then
        exec 3<>"/dev/tcp/127.0.0.1/$2"
        printf 'flush_all\r\n' >&3
        read -r reply <&3
        exec 3>&-
        [ "${reply%$'\r'}" = OK ] || { echo "memcached flush_all: $reply" >&2; exit 1; }
    else
        redis-cli -p "$2" flushall >/dev/null
    fi
}

# One run of `tool` on `load` at `port`; appends to $work/<row>.runs:
#   ops/s  avg-ms  p99-ms  cpu-s-per-Mops  [corrected-avg-ms  corrected-p99-ms]
run_one() { # row tool port protocol load-args...
    local row=$1 tool=$2 port=$3 protocol=$4
    shift 4
    local bin=$keel_bench out=$work/out.txt
    [ "$tool" = memtier ] && bin=$memtier
    flush "$protocol" "$port"
    taskset -c 0 /usr/bin/time -f "%U %S" -o "$work/cpu.txt" "$bin" -s 127.0.0.1 -p "$port" -P "$protocol" -t 1 \
        --test-time "$seconds" --hide-histogram --print-percentiles 50,99 "$@" >"$out" 2>"$work/err.txt" || {
        echo "$tool $* failed:" >&2; cat "$work/err.txt" >&2; exit 1
    }
    # The results table's Totals row: ops/s, avg and p99 (columns 2, 5, 7).
    # keel-bench in open loop adds a second, uncorrected table: Totals avg p50 p99.
    awk -v cpu="$(cat "$work/cpu.txt")" -v secs="$seconds" '
        /^Totals/ { n++; if (n == 1) { ops = $2; avg = $5; p99 = $7 } else { uavg = $2; up99 = $4 } }
        END {
            split(cpu, c, " "); per_mop = (c[1] + c[2]) / (ops * secs) * 1e6
            if (n > 1) printf "%s %s %s %.2f %s %s\n", ops, uavg, up99, per_mop, avg, p99
            else printf "%s %s %s %.2f\n", ops, avg, p99, per_mop
        }' "$out" >>"$work/$row.runs"
}

median() { sort -g | awk '{v[NR] = $0} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
column_median() { awk -v c="$2" '{print $c}' "$1" | median; }

# Runs both tools `runs` times on one load, alternating which goes first.
compare() { # label port protocol keel-args -- memtier-args
    local label=$1 port=$2 protocol=$3
    shift 3
    local keel_args=() memtier_args=()
    while [ "$1" != -- ]; do keel_args+=("$1"); shift; done
    shift
    memtier_args=("$@")
    local row
    row=$(printf '%s' "$label" | tr -c 'A-Za-z0-9' _)
    : >"$work/$row.keel.runs"
    : >"$work/$row.memtier.runs"
    for r in $(seq "$runs"); do
        echo "$label: run $r of $runs" >&2
        if [ $((r % 2)) -eq 1 ]; then
            run_one "$row.keel" keel "$port" "$protocol" "${keel_args[@]}"
            run_one "$row.memtier" memtier "$port" "$protocol" "${memtier_args[@]}"
        else
            run_one "$row.memtier" memtier "$port" "$protocol" "${memtier_args[@]}"
            run_one "$row.keel" keel "$port" "$protocol" "${keel_args[@]}"
        fi
    done
    for tool in keel memtier; do
        local f=$work/$row.$tool.runs name=keel-bench corrected="-"
        [ "$tool" = memtier ] && name="memtier $("$memtier" --version | awk 'NR == 1 {sub("v=", "", $2); print $2}')"
        if [ "$(awk 'NR == 1 {print NF}' "$f")" -gt 4 ]; then
            corrected=$(printf '%.3f / %.3f' "$(column_median "$f" 5)" "$(column_median "$f" 6)")
        fi
        printf '| %s | %s | %.0f | %.3f | %.3f | %s | %s |\n' "$label" "$name" "$(column_median "$f" 1)" \
            "$(column_median "$f" 2)" "$(column_median "$f" 3)" "$(column_median "$f" 4)" "$corrected" >>"$work/table.md"
    done
}

w1=(-c 100 --ratio 1:1 --data-size-range 100-1000 -R --key-pattern R:R --key-maximum 1000000)
w2=(-c 70 --pipeline 20 -d 100 --ratio 1:1 --key-pattern R:R --key-maximum 1000000)

compare "W1" "$redis_port" redis "${w1[@]}" -- "${w1[@]}"
compare "W2" "$redis_port" redis "${w2[@]}" -- "${w2[@]}"
# Half the lower of the two tools' W1 medians, in whole requests per connection.
rate=${RATE:-$(printf '%s\n' "$(column_median "$work/W1.keel.runs" 1)" "$(column_median "$work/W1.memtier.runs" 1)" |
    sort -g | awk 'NR == 1 {print int($1 / 2 / 100) * 100}')}
per_connection=$((rate / 100))
[ "$per_connection" -gt 0 ] || { echo "rate $rate is below one request per second per connection" >&2; exit 1; }
compare "W1 at $rate ops/s" "$redis_port" redis "${w1[@]}" --rate "$rate" -- "${w1[@]}" --rate-limiting "$per_connection"
compare "memcached W2" "$memcached_port" memcache_text "${w2[@]}" -- "${w2[@]}"

echo "keel-bench and memtier_benchmark, $runs alternated runs of $seconds s each, medians;"
echo "servers on core 1, tools on core 0 (one thread each)."
echo
echo "| load | tool | ops/s | avg ms (from send) | p99 ms (from send) | CPU-s per million ops | keel-bench corrected avg / p99 ms |"
echo "|---|---|---:|---:|---:|---:|---:|"
cat "$work/table.md"
