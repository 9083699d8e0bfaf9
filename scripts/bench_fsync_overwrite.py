#!/usr/bin/env python3
"""What an fdatasync costs after appending, after writing into space made
with posix_fallocate, and after overwriting blocks already written and
synced (what keel-aof-space-ahead gives the journal): 18 KB writes, each
followed by fdatasync, in a file under the given directory; p50 and p99 in
microseconds, each mode run twice, interleaved.

    scripts/bench_fsync_overwrite.py <dir> [writes]
"""
import os
import sys
import time

directory = sys.argv[1]
writes = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
size = 18000


def run(mode):
    path = os.path.join(directory, "keel-fsync-test.bin")
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY)
    if mode == "fallocate":
        os.posix_fallocate(fd, 0, size * writes)
        os.fsync(fd)
    elif mode == "overwrite":
        os.write(fd, b"\0" * (size * writes))
        os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_SET)
    buf = b"x" * size
    times = []
    for _ in range(writes):
        t = time.perf_counter()
        os.write(fd, buf)
        os.fdatasync(fd)
        times.append((time.perf_counter() - t) * 1e6)
    os.close(fd)
    os.unlink(path)
    times.sort()
    print(f"{mode:10} p50 {times[len(times) // 2]:6.0f} us  p99 {times[int(len(times) * 0.99)]:6.0f} us")


for mode in ["append", "fallocate", "overwrite"] * 2:
    run(mode)
