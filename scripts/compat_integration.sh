#!/usr/bin/env bash
# Runs units of Redis's Tcl test suite that start their own servers
# (AOF loading, rewriting, the manifest, RDB, MIGRATE's second server in
# unit/dump, the clusters of unit/cluster; tagged external:skip) against
# Keel and against Redis, and prints a Markdown table of [ok] / [err] counts
# per unit.
#
#   scripts/compat_integration.sh <path-to-redis-checkout>
#
# scripts/compat.sh runs the suite against one server it starts itself
# (external mode); these units are tagged external:skip because they start,
# kill and restart servers on directories they prepare. So each server gets
# a scratch copy of the checkout's `runtest` and `tests/` with a `src/` of
# its own, where the suite looks for its binaries:
#   src/redis-server     -> target/release/keel-server, or /usr/bin/redis-server
#   src/redis-check-aof  -> target/release/keel-check-aof, or /usr/bin/redis-check-aof
# (target/ is $CARGO_TARGET_DIR where that is set).
#   src/redis-cli, src/redis-benchmark -> Debian's, for both
# The copy's tests/assets/default.conf (the config every test server starts
# from) drops, for both servers alike, the directives of features Keel does
# not have and refuses at start: protected configs and modules.
#
# Needs tclsh (Debian: tcl) and Debian's redis-server and redis-tools.
# Environment: COMPAT_UNITS="integration/a integration/b" overrides the
# unit list, COMPAT_UNIT_TIMEOUT (seconds, default 900) bounds each unit,
# COMPAT_LOG_DIR names the log directory (default: a new mktemp -d),
# COMPAT_SERVERS="Keel" (or "Redis") runs one server's side only,
# COMPAT_SKIPFILE names a file of more tests to skip for both, one name
# (or, after a `/`, a regexp) a line: scripts/compat_fork_child.skip lists
# those that find and kill a child process Redis forks, which Keel (a
# rewrite, a BGSAVE or a sync's RDB is a thread of its own) has not.
# COMPAT_TLS=1 runs the suite over TLS (runtest --tls): its servers listen
# with TLS only and replicate and gossip over TLS (`tls-replication`,
# `tls-cluster`), on the certificates the checkout's utils/gen-test-certs.sh
# makes in its tests/tls (needs openssl and tcl-tls).
set -uo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

# (integration/aof-race is left out: its redis-benchmark run leaves no
# INCR behind for Redis either, here.)
UNITS=(integration/aof integration/aof-multi-part unit/aofrw integration/rdb
    integration/convert-zipmap-hash-on-load integration/convert-ziplist-hash-on-load
    integration/convert-ziplist-zset-on-load unit/shutdown integration/shutdown
    integration/replication-2 integration/replication-3 integration/block-repl unit/dump
    unit/cluster/misc unit/cluster/links unit/cluster/announced-endpoints
    unit/info unit/pubsubshard unit/wait unit/cluster-scripting unit/limits unit/oom-score-adj
    unit/networking unit/client-eviction unit/obuf-limits integration/corrupt-dump
    integration/replication-psync integration/replication-4 integration/replication
    integration/psync2 integration/psync2-reg integration/psync2-pingoff
    integration/psync2-master-restart integration/failover integration/logging
    integration/redis-cli integration/redis-benchmark integration/replication-buffer
    unit/acl unit/acl-v2 unit/auth)
if [[ -n "${COMPAT_UNITS:-}" ]]; then read -r -a UNITS <<<"$COMPAT_UNITS"; fi
DROPPED_DIRECTIVES='enable-protected-configs|enable-module-command'
# Tests skipped for both servers: each starts a server with a directive of
# a feature Keel does not have, which Keel refuses at start; the suite then
# waits two minutes for the server's PID line and its watchdog (--timeout)
# ends the whole unit, so the tests after it would not run either. They
# count as neither [ok] nor [err], for either server.
SKIPPED=(
    "EVAL can process writes from AOF in read-only replicas"   # replicaof
)
# --durable: an error that is not an assertion counts as [err] for its test
# instead of ending the unit. --clients 1: one unit at a time, in order.
RUNTEST_ARGS=(--durable --timeout 120 --clients 1)
if [[ -n "${COMPAT_SKIPFILE:-}" ]]; then mapfile -t -O "${#SKIPPED[@]}" SKIPPED <"$COMPAT_SKIPFILE"; fi
for t in "${SKIPPED[@]}"; do RUNTEST_ARGS+=(--skiptest "$t"); done
UNIT_TIMEOUT="${COMPAT_UNIT_TIMEOUT:-900}"
TLS="${COMPAT_TLS:-}"
if [[ -n "$TLS" ]]; then RUNTEST_ARGS+=(--tls); fi

[[ $# -eq 1 ]] || { echo "usage: $0 <path-to-redis-checkout>" >&2; exit 2; }
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Keel's binaries are cargo's: under CARGO_TARGET_DIR where that is set.
target_dir="${CARGO_TARGET_DIR:-$repo_root/target}"
redis_dir="$(cd "$1" 2>/dev/null && pwd)" || { echo "no such directory: $1" >&2; exit 2; }
[[ -x "$redis_dir/runtest" && -f "$redis_dir/tests/test_helper.tcl" ]] ||
    { echo "$redis_dir does not look like a redis checkout (runtest, tests/)" >&2; exit 2; }
for bin in "$target_dir/release/keel-server" "$target_dir/release/keel-check-aof" \
    /usr/bin/redis-server /usr/bin/redis-check-aof /usr/bin/redis-cli /usr/bin/redis-benchmark; do
    [[ -x "$bin" ]] || { echo "missing $bin (cargo build --release; apt-get install redis-server redis-tools)" >&2; exit 2; }
done

if [[ -n "$TLS" ]]; then make_test_certs "$redis_dir"; fi

log_dir="${COMPAT_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/keel-compat-integration.XXXXXX")}"
mkdir -p "$log_dir"
log_dir="$(cd "$log_dir" && pwd)"
echo "raw logs: $log_dir" >&2

# make_tree <dir> <server> <check-aof>: the scratch copy described above.
make_tree() {
    local dir="$1"
    rm -rf "$dir"
    mkdir -p "$dir/src"
    cp -r "$redis_dir/runtest" "$redis_dir/tests" "$dir/"
    rm -rf "$dir/tests/tmp"
    mkdir -p "$dir/tests/tmp"
    grep -vE "^($DROPPED_DIRECTIVES) " "$redis_dir/tests/assets/default.conf" >"$dir/tests/assets/default.conf"
    ln -s "$2" "$dir/src/redis-server"
    ln -s "$3" "$dir/src/redis-check-aof"
    ln -s /usr/bin/redis-cli "$dir/src/redis-cli"
    ln -s /usr/bin/redis-benchmark "$dir/src/redis-benchmark"
}

declare -A results
read -r -a labels <<<"${COMPAT_SERVERS:-Keel Redis}"
for label in "${labels[@]}"; do
    tree="$log_dir/tree-$label"
    if [[ $label == Keel ]]; then
        make_tree "$tree" "$target_dir/release/keel-server" "$target_dir/release/keel-check-aof"
    else
        make_tree "$tree" /usr/bin/redis-server /usr/bin/redis-check-aof
    fi
    for u in "${UNITS[@]}"; do
        log="$log_dir/$label-${u//\//_}.log"
        ( cd "$tree" && TERM=dumb timeout -k 10 "$UNIT_TIMEOUT" ./runtest --single "$u" "${RUNTEST_ARGS[@]}" ) \
            >"$log" 2>&1 </dev/null
        kill_servers_under "$tree"
        sed -i 's/\x1b\[[0-9;]*m//g' "$log"
        ok=$(grep -c '^\[ok\]' "$log")
        err=$(grep -cE '^\[(err|exception)\]' "$log")
        results["$label|$u"]="$ok|$err"
        echo "$label $u: $ok ok, $err err" >&2
    done
done

keel_redis_table "[ok]" "[err]+[exception]" "${UNITS[@]}"
