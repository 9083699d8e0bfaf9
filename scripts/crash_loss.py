#!/usr/bin/env python3
"""What a kill -9 loses: acknowledged writes missing after a restart.

    scripts/crash_loss.py <server-binary> <everysec|always|no> [clients] [seconds] [rounds]

Each round starts the server (keel-server or redis-server: the flags are
common to both) on core 1 in a fresh directory under the current one with
`appendonly yes` and the given `appendfsync`. `clients` threads (default
20) each write SET c<i>:<n> <n>, n = 1, 2, ..., one at a time on their own
connection, for `seconds` (default 2); then SIGKILL, a restart on the same
directory, and for each client the highest n present (a client's writes
land in order) against the highest acknowledged. Prints the acknowledged
and lost writes of each round (default 5). The clients are Python: the
write rates printed measure them, not the server."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

binary, policy = sys.argv[1], sys.argv[2]
clients = int(sys.argv[3]) if len(sys.argv) > 3 else 20
secs = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 5
port = 7977

def start(d):
    p = subprocess.Popen(["taskset", "-c", "1", binary, "--port", str(port), "--dir", d, "--save", "",
                          "--appendonly", "yes", "--appendfsync", policy],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"PING\r\n")
            if s.recv(100).startswith(b"+PONG"):
                s.close(); return p
        except OSError: pass
        time.sleep(0.05)
    raise SystemExit("no start")

def cmd(s, *args):
    s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))

def reply(f):
    line = f.readline()
    if line.startswith(b"$"):
        n = int(line[1:])
        if n < 0: return None
        data = f.read(n + 2); return data[:-2]
    return line

for r in range(rounds):
    d = tempfile.mkdtemp(dir=".")
    p = start(d)
    acked = [0] * clients
    stop = False
    def writer(i):
        try:
            s = socket.create_connection(("127.0.0.1", port)); f = s.makefile("rb")
            n = 0
            while not stop:
                n += 1
                cmd(s, b"SET", b"c%d:%d" % (i, n), b"%d" % n)
                if not reply(f).startswith(b"+OK"): break
                acked[i] = n
        except OSError: pass
    ts = [threading.Thread(target=writer, args=(i,)) for i in range(clients)]
    for t in ts: t.start()
    time.sleep(secs)
    os.kill(p.pid, signal.SIGKILL)
    stop = True
    for t in ts: t.join()
    p.wait()
    p = start(d)
    s = socket.create_connection(("127.0.0.1", port)); f = s.makefile("rb")
    lost = 0; total = sum(acked)
    for i in range(clients):
        # binary search the highest n present (writes of one client are in order)
        lo, hi = 0, acked[i]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            cmd(s, b"EXISTS", b"c%d:%d" % (i, mid))
            if reply(f).strip() == b":1": lo = mid
            else: hi = mid - 1
        lost += acked[i] - lo
    p.kill(); p.wait(); shutil.rmtree(d)
    print(f"{os.path.basename(binary)} {policy} round {r+1}: acknowledged {total}, lost {lost} ({total/secs:.0f} writes/s)")
