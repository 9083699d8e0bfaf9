#!/usr/bin/env bash
# Runs units of Redis's own Tcl test suite (external-server mode) against one
# or more servers and prints a Markdown table of [ok] / [err] counts per unit.
#
#   scripts/compat.sh <path-to-redis-checkout> [server-binary ...]
#
# <path-to-redis-checkout> is a checkout of redis/redis (tag 7.0.15 is what
# the counts in COMPAT.md come from); it needs `runtest` and `tests/`, and
# tclsh 8.5+ (Debian: `apt-get install tcl`). Nothing in it is built: the
# units listed below never exec src/redis-*.
# Server binaries default to target/release/keel-server and
# /usr/bin/redis-server. Every unit gets a fresh server on a free port.
# Environment: COMPAT_UNITS="unit/a unit/b" overrides the unit list,
# COMPAT_TAGS overrides the --tags filter (default "-needs:debug"),
# COMPAT_UNIT_TIMEOUT (seconds, default 600) bounds each unit,
# COMPAT_SKIP_TEST passes one `--skiptest` to runtest (a test name, or a
# regexp after a leading /) for every server alike,
# COMPAT_LOG_DIR names the log directory (default: a new mktemp -d),
# COMPAT_TLS=1 runs the suite over TLS (runtest --tls): each server then
# listens with TLS only, on the certificates the checkout's
# utils/gen-test-certs.sh makes in its tests/tls (needs openssl, tcl-tls
# and redis-cli).
# Needs bash and coreutils (timeout, mktemp) only.
set -uo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

# ---------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------

# Units run, in this order.
UNITS=(
    unit/type/string unit/type/incr unit/keyspace unit/expire unit/multi
    unit/protocol unit/scan unit/info-command unit/bitops unit/type/hash
    unit/type/list unit/type/list-2 unit/type/list-3 unit/type/set
    unit/type/zset unit/sort unit/dump unit/other unit/introspection unit/introspection-2
    unit/lazyfree unit/querybuf unit/slowlog unit/latency-monitor unit/geo unit/pubsub unit/hyperloglog
    unit/scripting unit/functions unit/type/stream unit/type/stream-cgroups
    unit/acl unit/acl-v2 unit/auth unit/bitfield unit/pause unit/quit unit/violations unit/tracking
)
if [[ -n "${COMPAT_UNITS:-}" ]]; then read -r -a UNITS <<<"$COMPAT_UNITS"; fi

# Per-server flags. The script appends `--port <P>` itself.
# Redis: as Redis's own CI job "test-external-nodebug" (.github/workflows/
# external.yml at 7.0.15) starts it: no persistence, DEBUG left disabled
# (the default), so Redis and Keel are held to the same no-DEBUG standard.
REDIS_SERVER_FLAGS=(--bind 127.0.0.1 --save '' --appendonly no)
# Keel (and any binary whose name is not *redis-server*).
# --threads 1: the suite assumes that commands sent on different
# connections run in the order they were sent (a deferred client's BLPOP
# before another client's LPUSH), which a single-threaded Redis gives in
# practice and a multi-threaded server does not; Keel orders each
# connection's commands, not commands across connections.
KEEL_SERVER_FLAGS=(--bind 127.0.0.1 --appendonly no --threads 1)

# runtest arguments besides --host/--port/--single.
# --tags: the "test-external-nodebug" CI job uses "-slow -needs:debug"; we
#   keep the slow tests (they need no extra capability, cost ~1 min against
#   Redis, and unit/type/list-2 is nothing but one slow test).
#   external:skip is applied automatically by the suite in external mode.
# --durable: an error that is not an assertion (e.g. "ERR unknown command")
#   counts as [err] for that test instead of aborting the whole unit.
# --ignore-encoding: skip assert_encoding (OBJECT ENCODING == listpack,
#   intset, quicklist...), Redis-internal representations; the suite's
#   README lists it for external servers. COMPAT_ENCODING=1 leaves it out,
#   holding Keel to Redis's encoding names too.
# --timeout: the suite's own no-progress watchdog (prints which test hangs).
#
# COMPAT_DEBUG=1: DEBUG enabled on both servers and the needs:debug tests
# run, as Redis's CI job "test-external-standalone" starts its server
# (`--enable-debug-command yes`).
RUNTEST_TAGS="${COMPAT_TAGS:--needs:debug}"
if [[ -n "${COMPAT_DEBUG:-}" ]]; then
    REDIS_SERVER_FLAGS+=(--enable-debug-command yes)
    KEEL_SERVER_FLAGS+=(--enable-debug-command yes)
    RUNTEST_TAGS="${COMPAT_TAGS:-}"
fi
RUNTEST_ARGS=(--durable --timeout 180)
if [[ -z "${COMPAT_ENCODING:-}" ]]; then RUNTEST_ARGS+=(--ignore-encoding); fi
if [[ -n "$RUNTEST_TAGS" ]]; then RUNTEST_ARGS+=(--tags "$RUNTEST_TAGS"); fi
if [[ -n "${COMPAT_SKIP_TEST:-}" ]]; then RUNTEST_ARGS+=(--skiptest "$COMPAT_SKIP_TEST"); fi
TLS="${COMPAT_TLS:-}"
if [[ -n "$TLS" ]]; then RUNTEST_ARGS+=(--tls); fi

UNIT_TIMEOUT="${COMPAT_UNIT_TIMEOUT:-600}"   # hard bound per unit (seconds)

# ---------------------------------------------------------------------------

usage() {
    echo "usage: $0 <path-to-redis-checkout> [server-binary ...]" >&2
    exit 2
}
[[ $# -ge 1 ]] || usage
case "$1" in -h|--help) usage ;; esac

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
redis_dir="$(cd "$1" 2>/dev/null && pwd)" || { echo "no such directory: $1" >&2; exit 2; }
shift
[[ -x "$redis_dir/runtest" && -f "$redis_dir/tests/test_helper.tcl" ]] ||
    { echo "$redis_dir does not look like a redis checkout (runtest, tests/)" >&2; exit 2; }
for u in "${UNITS[@]}"; do
    [[ -f "$redis_dir/tests/$u.tcl" ]] || { echo "no such unit: $redis_dir/tests/$u.tcl" >&2; exit 2; }
done

if [[ $# -eq 0 ]]; then
    set -- "$repo_root/target/release/keel-server" /usr/bin/redis-server
fi
servers=()
for s in "$@"; do
    if [[ "$s" != */* ]] && command -v "$s" >/dev/null; then s="$(command -v "$s")"; fi
    [[ "$s" = /* ]] || s="$PWD/$s"
    servers+=("$s")
done

tls_dir="$redis_dir/tests/tls"
if [[ -n "$TLS" ]]; then make_test_certs "$redis_dir"; fi

log_dir="${COMPAT_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/keel-compat.XXXXXX")}"
mkdir -p "$log_dir"
echo "raw logs: $log_dir" >&2

label_of() {
    case "$(basename "$1")" in
        keel-server*) echo Keel ;;
        redis-server*) echo Redis ;;
        *) basename "$1" ;;
    esac
}

# 0 if something accepts TCP connections on 127.0.0.1:$1.
port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# 0 if a server on 127.0.0.1:$1 answers PING with +PONG (or any -error).
pings() (
    if [[ -n "$TLS" ]]; then
        reply=$(redis-cli --tls --cacert "$tls_dir/ca.crt" --cert "$tls_dir/client.crt" \
            --key "$tls_dir/client.key" -p "$1" ping 2>&1) || exit 1
        [[ "$reply" == PONG* || "$reply" == ERR* ]]
        exit
    fi
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'PING\r\n' >&3
    IFS= read -r -t 2 line <&3 || exit 1
    [[ "$line" == +* || "$line" == -* ]]
) 2>/dev/null

pick_port() {
    local p
    for _ in $(seq 1 50); do
        p=$(( 30000 + RANDOM % 20000 ))
        port_in_use "$p" || { echo "$p"; return 0; }
    done
    return 1
}

server_pid=""
stop_server() {
    [[ -n "$server_pid" ]] || return 0
    if kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid" 2>/dev/null
        kill -CONT "$server_pid" 2>/dev/null
        for _ in $(seq 1 100); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$server_pid" 2>/dev/null && kill -KILL "$server_pid" 2>/dev/null
    fi
    wait "$server_pid" 2>/dev/null
    server_pid=""
}
trap 'stop_server; exit 130' INT TERM
trap 'stop_server' EXIT

# start_server <binary> <logfile>: sets server_pid and server_port, 0 on success.
# Each server runs in a directory of its own: what one saves (unit/introspection
# makes Redis write a dump.rdb with a stream in it) is never another's dataset.
start_server() {
    local bin="$1" log="$2" tries flags data
    if [[ "$(basename "$bin")" == *redis-server* ]]; then
        flags=("${REDIS_SERVER_FLAGS[@]}")
    else
        flags=("${KEEL_SERVER_FLAGS[@]}")
    fi
    : >"$log"
    for tries in 1 2 3 4 5; do
        server_port="$(pick_port)" || return 1
        data="$(mktemp -d "$log_dir/data.XXXXXX")" || return 1
        local ports=(--port "$server_port")
        if [[ -n "$TLS" ]]; then
            ports=(--port 0 --tls-port "$server_port" --tls-cert-file "$tls_dir/server.crt"
                --tls-key-file "$tls_dir/server.key" --tls-ca-cert-file "$tls_dir/ca.crt")
        fi
        echo "+ $bin ${ports[*]} ${flags[*]} --dir $data" >>"$log"
        "$bin" "${ports[@]}" "${flags[@]}" --dir "$data" >>"$log" 2>&1 </dev/null &
        server_pid=$!
        for _ in $(seq 1 100); do       # up to ~10 s
            if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
            if pings "$server_port"; then return 0; fi
            sleep 0.1
        done
        stop_server                     # died (port race?) or never answered
    done
    return 1
}

count() { grep -cE "$1" "$2" 2>/dev/null; true; }

# results[label|unit] = "ok<TAB>errcell"
declare -A results
labels=()
summary="$log_dir/summary.tsv"
printf 'server\tunit\tok\terr\texception\tignore\tskip\tseconds\trc\tnote\n' >"$summary"

for bin in "${servers[@]}"; do
    label="$(label_of "$bin")"
    labels+=("$label")
    if [[ ! -x "$bin" ]]; then
        echo "warning: $bin not found or not executable; skipping $label" >&2
        for u in "${UNITS[@]}"; do results["$label|$u"]=$'n/a\tn/a'; done
        continue
    fi
    for u in "${UNITS[@]}"; do
        base="$log_dir/$label-${u//\//_}"
        note=""
        if ! start_server "$bin" "$base.server.log"; then
            echo "$label $u: server did not start (see $base.server.log)" >&2
            results["$label|$u"]=$'0\tno start'
            printf '%s\t%s\t0\t0\t0\t0\t0\t0\t-\tno start\n' "$label" "$u" >>"$summary"
            continue
        fi
        start=$SECONDS
        ( cd "$redis_dir" && TERM=dumb timeout -k 10 "$UNIT_TIMEOUT" \
            ./runtest --host 127.0.0.1 --port "$server_port" --single "$u" \
            "${RUNTEST_ARGS[@]}" ) >"$base.runtest.log" 2>&1 </dev/null
        rc=$?
        secs=$(( SECONDS - start ))
        if ! kill -0 "$server_pid" 2>/dev/null; then note="crash"; fi
        stop_server
        if [[ $rc -eq 124 || $rc -eq 137 ]]; then
            note="${note:+$note, }timeout"
        elif grep -q '^\[TIMEOUT\]' "$base.runtest.log"; then
            note="${note:+$note, }hang"
        fi
        log="$base.runtest.log"
        ok=$(count '^\[ok\]' "$log")
        err=$(count '^\[err\]' "$log")
        exc=$(count '^\[exception\]' "$log")
        ign=$(count '^\[ignore\]' "$log")
        skp=$(count '^\[skip\]' "$log")
        cell="$(( err + exc ))"
        [[ -n "$note" ]] && cell="$cell ($note)"
        results["$label|$u"]="$ok"$'\t'"$cell"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
            "$label" "$u" "$ok" "$err" "$exc" "$ign" "$skp" "$secs" "$rc" "$note" >>"$summary"
        echo "$label $u: ok=$ok err=$err exception=$exc ignored=$ign ${secs}s${note:+ [$note]}" >&2
    done
done

# Markdown table.
header="| unit |"
rule="|---|"
for l in "${labels[@]}"; do
    if [[ "$l" == Redis ]]; then
        header+=" $l [ok] | $l [err] |"
    else
        header+=" $l [ok] | $l [err]+[exception] |"
    fi
    rule+="---:|---:|"
done
echo "$header"
echo "$rule"
declare -A tot
for u in "${UNITS[@]}"; do
    row="| $u |"
    for l in "${labels[@]}"; do
        IFS=$'\t' read -r ok cell <<<"${results["$l|$u"]}"
        row+=" $ok | $cell |"
        [[ "$ok" =~ ^[0-9]+$ ]] && tot["$l|ok"]=$(( ${tot["$l|ok"]:-0} + ok ))
        e="${cell%% *}"
        [[ "$e" =~ ^[0-9]+$ ]] && tot["$l|err"]=$(( ${tot["$l|err"]:-0} + e ))
    done
    echo "$row"
done
row="| **total** |"
for l in "${labels[@]}"; do row+=" ${tot["$l|ok"]:-n/a} | ${tot["$l|err"]:-n/a} |"; done
echo "$row"
echo
echo "raw logs: $log_dir"
