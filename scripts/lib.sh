# Shell functions the bench scripts share; source it, don't run it.

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

# median: the median of the numbers on stdin, one per line.
median() { sort -g | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
