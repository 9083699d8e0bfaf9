#!/usr/bin/env python3
"""Times SET and GET of one big value over one connection, each request
sent whole and its reply read whole before the next: prints the median
SET, the median GET and GET's 99th percentile, in ms.

    scripts/big_value_latency.py <port> <value bytes> <requests>
"""
import socket
import sys
import time


def command(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def read_exactly(sock, n, buf):
    while len(buf) < n:
        chunk = sock.recv(1 << 20)
        if not chunk:
            sys.exit("the server closed the connection")
        buf += chunk
    return buf


def main():
    port, size, requests = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    value = b"v" * size
    set_request, get_request = command(b"SET", b"big", value), command(b"GET", b"big")
    get_reply = b"$%d\r\n" % size + value + b"\r\n"
    times = {"SET": [], "GET": []}
    for _ in range(requests):
        for name, request, reply in (("SET", set_request, b"+OK\r\n"), ("GET", get_request, get_reply)):
            started = time.perf_counter()
            sock.sendall(request)
            got = read_exactly(sock, len(reply), bytearray())
            times[name].append((time.perf_counter() - started) * 1000)
            assert got == reply, f"unexpected reply to {name}"
    sets, gets = sorted(times["SET"]), sorted(times["GET"])
    print(f"{sets[len(sets) // 2]:.3f} {gets[len(gets) // 2]:.3f} {gets[int(len(gets) * 0.99)]:.3f}")


main()
