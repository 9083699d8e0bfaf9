#!/usr/bin/env bash
# Runs Redis's older cluster suite (tests/cluster/, what `runtest-cluster`
# runs: 20 instances with `cluster-enabled yes` and `appendonly yes`) against
# Keel and against Redis, and prints a Markdown table of OK / FAILED counts
# per unit.
#
#   scripts/compat_cluster.sh <path-to-redis-checkout>
#
# The suite starts its instances from the checkout's src/redis-server and
# calls src/redis-cli. So each server gets a scratch copy of the checkout's
# tests/ with a src/ of its own:
#   src/redis-server -> target/release/keel-server, or /usr/bin/redis-server
#   src/redis-cli    -> Debian's, for both
# (target/ is $CARGO_TARGET_DIR where that is set). Both servers run with
# `--config appendfsync everysec`, Redis's default for the suite's
# `appendonly yes`, so that they run under the same flags (Keel's default
# is `always`).
#
# A unit stops at its first FAILED test (the runner jumps to the next
# unit), so a unit's OK count is the tests before that one.
#
# Needs tclsh (Debian: tcl) and Debian's redis-server and redis-tools.
# Environment: COMPAT_SERVERS="Keel" (or "Redis") runs one server's side
# only; COMPAT_LOG_DIR names the log directory (default: a new mktemp -d);
# COMPAT_TIMEOUT bounds each server's whole run (seconds, default 3600).
set -uo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

[[ $# -eq 1 ]] || { echo "usage: $0 <path-to-redis-checkout>" >&2; exit 2; }
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo_root/target}"
redis_dir="$(cd "$1" 2>/dev/null && pwd)" || { echo "no such directory: $1" >&2; exit 2; }
[[ -f "$redis_dir/tests/cluster/run.tcl" ]] ||
    { echo "$redis_dir does not look like a redis checkout (tests/cluster/run.tcl)" >&2; exit 2; }
for bin in "$target_dir/release/keel-server" /usr/bin/redis-server /usr/bin/redis-cli; do
    [[ -x "$bin" ]] || { echo "missing $bin (cargo build --release; apt-get install redis-server redis-tools)" >&2; exit 2; }
done

log_dir="${COMPAT_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/keel-compat-cluster.XXXXXX")}"
mkdir -p "$log_dir"
log_dir="$(cd "$log_dir" && pwd)"
echo "raw logs: $log_dir" >&2

units=()
for f in "$redis_dir"/tests/cluster/tests/*.tcl; do units+=("$(basename "$f")"); done

declare -A results
read -r -a labels <<<"${COMPAT_SERVERS:-Keel Redis}"
for label in "${labels[@]}"; do
    tree="$log_dir/tree-$label"
    rm -rf "$tree"
    mkdir -p "$tree/src"
    cp -r "$redis_dir/tests" "$tree/"
    rm -rf "$tree/tests/cluster/tmp"
    mkdir -p "$tree/tests/cluster/tmp"
    server=/usr/bin/redis-server
    [[ $label == Keel ]] && server="$target_dir/release/keel-server"
    ln -s "$server" "$tree/src/redis-server"
    ln -s /usr/bin/redis-cli "$tree/src/redis-cli"
    log="$log_dir/$label.log"
    ( cd "$tree" && timeout -k 10 "${COMPAT_TIMEOUT:-3600}" tclsh tests/cluster/run.tcl --config appendfsync everysec ) \
        >"$log" 2>&1 </dev/null
    # The runner kills its instances at the end; a timeout may leave some.
    kill_servers_under "$tree"
    sed -i 's/\x1b\[[0-9;]*m//g' "$log"
    for u in "${units[@]}"; do
        # The lines from this unit's header to the next one's.
        part=$(awk -v u="Testing unit: $u" '$0 == u {on = 1; next} /^Testing unit: / {on = 0} on' "$log")
        ok=$(grep -cE '^[0-9:]+> .*OK$' <<<"$part")
        failed=$(grep -c 'FAILED' <<<"$part")
        results["$label|$u"]="$ok|$((failed > 0 ? 1 : 0))"
        [[ -z $part ]] && results["$label|$u"]="-|-"
        echo "$label $u: ${results["$label|$u"]}" >&2
    done
done

keel_redis_table OK FAILED "${units[@]}"
