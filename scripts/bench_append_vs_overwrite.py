#!/usr/bin/env python3
"""What the kernel's copy into the page cache costs appending to a file,
against overwriting pages written before (what the space written ahead
gives the journal under `appendfsync always`): 2 GB in write(2)s of the
given size, no sync, system time per 2 GB, each mode run twice,
interleaved.

    scripts/bench_append_vs_overwrite.py <dir> <write-size>
"""
import os
import sys

directory = sys.argv[1]
size = int(sys.argv[2])
TOTAL = 2 << 30


def run(overwrite):
    path = os.path.join(directory, "keel-append-test.bin")
    buf = os.urandom(size)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        if overwrite:
            filler = b"#" * (1 << 20)
            for _ in range(TOTAL >> 20):
                os.write(fd, filler)
            os.lseek(fd, 0, os.SEEK_SET)
        before = os.times().system
        written = 0
        while written < TOTAL:
            os.write(fd, buf)
            written += size
        return os.times().system - before
    finally:
        os.close(fd)
        os.unlink(path)


for overwrite in (False, True, False, True):
    mode = "overwrite" if overwrite else "append"
    print(f"{mode:9} {size} B writes: {run(overwrite):.2f} s of system time per 2 GB")
