#!/usr/bin/env bash
# Runs every test of the workspace on a fresh Debian machine: installs what
# the tests talk to (Debian's redis-server for the differential and AOF
# interop tests, redis-tools for redis-cli and redis-check-aof, memcached
# for keel-bench's memcache_text tests and the memcached differential
# tests, libmemcached-tools for memccapable, chromium for keel-bench's
# --report test, openssl for the TLS tests' certificates), then the whole
# cargo test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v memcached >/dev/null || need+=(memcached)
command -v memccapable >/dev/null || need+=(libmemcached-tools)
command -v chromium >/dev/null || need+=(chromium)
command -v openssl >/dev/null || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Test servers log to $TMPDIR/keel-test-logs/<port>.log: start each run
# with none, so that the logs there are this run's.
rm -rf "${TMPDIR:-/tmp}/keel-test-logs"
cargo test --workspace --all-targets --locked "$@"
