# Shell functions the bench and compat scripts share; source it, don't run it.

# ready <port>: returns once a server on 127.0.0.1:<port> answers PING
# (within 5 s), else exits. Bash's /dev/tcp, so no redis-cli is needed.
ready() {
    for _ in $(seq 100); do
        if { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null; then
            printf 'PING\r\n' >&3
            local reply=; read -r -t 1 reply <&3 || true; exec 3<&-
            [[ $reply == +PONG* ]] && return
        fi
        sleep 0.05
    done
    echo "the server on port $1 did not start" >&2; exit 1
}

# cpu_ticks <pid>: user + system clock ticks of a process and of the
# children it has reaped (a Redis rewrite's or snapshot's fork counts).
cpu_ticks() { awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat"; }

# seed_load <workload>: sets `load`, memtier_benchmark's options for the
# seeds' W1 or w2-<size>-<sets>:<gets> from one thread (bench.sh's,
# bench_instructions.sh's), and `conns`, its connection count.
seed_load() {
    case $1 in
        w1) conns=100; load=(-t 1 -c 100 --ratio 1:1 --data-size-range 100-1000 -R --key-pattern R:R --key-maximum 1000000) ;;
        w2-*)
            local size ratio
            IFS=- read -r _ size ratio <<<"$1"
            conns=70; load=(-t 1 -c 70 --pipeline 20 -d "$size" --ratio "$ratio" --key-pattern R:R --key-maximum 1000000) ;;
        *) echo "workload: w1 | w2-<size>-<sets>:<gets>" >&2; exit 2 ;;
    esac
}

# median: the median of the numbers on stdin, one per line.
median() { sort -g | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }

# medians_table <header> <dir> <build>...: a Markdown table, one row per
# build, of the medians of the three columns in <dir>/build-<i> (one line
# per run); <header> names them, e.g. "ops/s | p99 ms | CPU s per M ops".
medians_table() {
    local header=$1 dir=$2; shift 2
    local builds=("$@") i c cols
    echo "| build | $header |"
    echo "|---|---:|---:|---:|"
    for i in "${!builds[@]}"; do
        cols=$(for c in 1 2 3; do awk -v c="$c" '{print $c}' "$dir/build-$i" | median; done | paste -sd'|')
        echo "| ${builds[$i]} | ${cols//|/ | } |"
    done
}

# round_order <round> <n>: the indexes 0..n-1, starting at (round - 1) mod n,
# so that builds compared round by round each come first as often: a fixed
# order favoured the first build of every round (BENCHMARKS.md).
round_order() { local k; for k in $(seq 0 $(($2 - 1))); do echo $(( (k + $1 - 1) % $2 )); done; }

# discard_run <dir>: deletes a run's directory and syncs, so that the
# filesystem commits the removal (on a `discard` mount, a disk busy for a
# while) before the next run starts.
discard_run() { rm -rf "$1"; sync; }

# kill_servers_under <dir>: kills every redis-server or keel-server whose
# working directory is below <dir>; a failed test can leave one running,
# holding a port. (Redis renames its process, so go by directory.)
kill_servers_under() {
    local pid
    for pid in $(pgrep -f 'redis-server|keel-server'); do
        [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)/" == "$1"/* ]] && kill -KILL "$pid" 2>/dev/null
    done
    true
}

# keel_redis_table <ok> <err> <unit>...: a Markdown table of the counts in
# the caller's `results["Keel|<unit>"]` and `results["Redis|<unit>"]`
# ("<ok>|<err>" each, "-" where missing); <ok> and <err> name the columns.
keel_redis_table() {
    local ok=$1 err=$2 u kok kerr rok rerr; shift 2
    echo "| unit | Keel $ok | Keel $err | Redis $ok | Redis $err |"
    echo "|---|---:|---:|---:|---:|"
    for u in "$@"; do
        IFS='|' read -r kok kerr <<<"${results["Keel|$u"]:--|-}"
        IFS='|' read -r rok rerr <<<"${results["Redis|$u"]:--|-}"
        echo "| ${u%.tcl} | $kok | $kerr | $rok | $rerr |"
    done
}

# make_test_certs <redis-checkout>: the certificates `runtest --tls` uses,
# in the checkout's tests/tls, made by its utils/gen-test-certs.sh if
# missing (needs openssl).
make_test_certs() {
    [[ -f "$1/tests/tls/server.crt" ]] && return 0
    (cd "$1" && ./utils/gen-test-certs.sh >/dev/null 2>&1) ||
        { echo "could not make the TLS certificates in $1/tests/tls" >&2; exit 2; }
}
