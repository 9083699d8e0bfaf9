# Sourced by the snapshot benchmarks:
#
#   bgsave_while <port> <pid>
#
# runs BGSAVEs back to back on the server at <port> while process <pid> (a
# load generator) runs, through one connection, polling INFO persistence
# every 0.1 s. No process is started per poll: a redis-cli ten times a
# second takes one of the two cores for milliseconds at a time, and on
# either core that showed in the latency measured beside it (Keel's W1 p99
# under back-to-back BGSAVEs rose 2.1x-2.5x with it, 1.06x-1.15x without).
bgsave_while() {
    local port=$1 load=$2 conn nap line body
    exec {conn}<>"/dev/tcp/127.0.0.1/$port"
    # A pipe that stays empty (opened for writing too, so it never reaches
    # its end): `read -t` on it is a sleep without a process.
    exec {nap}<> <(:)
    # Sends one command; its reply's first line lands in $line, a bulk
    # reply's body in $body.
    ask() {
        printf '%s\r\n' "$1" >&"$conn"
        IFS= read -r line <&"$conn"
        line=${line%$'\r'}
        body=
        if [ "${line:0:1}" = '$' ] && [ "${line:1}" -ge 0 ]; then
            IFS= read -r -d '' -N $((${line:1} + 2)) body <&"$conn"
        fi
    }
    while kill -0 "$load" 2>/dev/null; do
        ask BGSAVE
        [[ $line == +* ]] || { echo "BGSAVE: $line" >&2; return 1; }
        while kill -0 "$load" 2>/dev/null; do
            ask 'INFO persistence'
            [[ $body == *rdb_bgsave_in_progress:1* ]] || break
            read -r -t 0.1 -u "$nap" || true
        done
    done
    exec {conn}>&- {nap}>&-
}
