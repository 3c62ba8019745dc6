#!/usr/bin/env python3
"""Ways of making one append durable, timed on this machine's disk: append SIZE bytes at
successive offsets of a file zeroed beforehand (64 MiB, so no write grows it), ROUNDS times per
way, and print p50 / p99 in microseconds.

  buffered          pwrite + fdatasync (what the log store does)
  buffered+dsync    one pwritev2(RWF_DSYNC): the write and the sync in one system call
  direct            O_DIRECT pwrite + fdatasync (page cache bypassed; needs aligned buffers)
  direct+dsync      O_DIRECT pwritev2(RWF_DSYNC)

Measured 2026-11-27 (2 cores, virtio disk, ext4 without journal; see docs/benchmarks.md):
RWF_DSYNC saved nothing over pwrite + fdatasync; O_DIRECT was 10-20 us faster at p50 in some
passes and not in others. Usage: scripts/bench/sync-call-probe.py [SIZE] [ROUNDS]
(SIZE a multiple of 4096, default 4096; ROUNDS default 3000; PROBE_DIR default /tmp).
"""
import mmap
import os
import sys
import time

FILE_BYTES = 64 << 20


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    assert size % 4096 == 0, "O_DIRECT needs whole 4 KiB blocks"
    path = os.path.join(os.environ.get("PROBE_DIR", "/tmp"), "sync-call.probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    os.pwrite(fd, b"\0" * FILE_BYTES, 0)
    os.fsync(fd)
    os.close(fd)
    buffered = os.open(path, os.O_RDWR)
    direct = os.open(path, os.O_RDWR | os.O_DIRECT)
    aligned = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT wants
    aligned.write(os.urandom(size))
    data = bytes(aligned)

    def append(way, offset):
        if way == "buffered":
            os.pwrite(buffered, data, offset)
            os.fdatasync(buffered)
        elif way == "buffered+dsync":
            os.pwritev(buffered, [data], offset, os.RWF_DSYNC)
        elif way == "direct":
            os.pwritev(direct, [aligned], offset)
            os.fdatasync(direct)
        else:
            os.pwritev(direct, [aligned], offset, os.RWF_DSYNC)

    try:
        for _ in range(2):
            for way in ("buffered", "buffered+dsync", "direct", "direct+dsync"):
                took = []
                offset = 0
                for _ in range(rounds):
                    started = time.perf_counter_ns()
                    append(way, offset)
                    took.append(time.perf_counter_ns() - started)
                    offset = (offset + size) % (FILE_BYTES - size)
                took.sort()
                p50 = took[len(took) // 2] / 1000
                p99 = took[len(took) * 99 // 100] / 1000
                print(f"{size} B {way:15} p50 {p50:7.1f} us  p99 {p99:7.1f} us", flush=True)
    finally:
        os.close(buffered)
        os.close(direct)
        os.unlink(path)


if __name__ == "__main__":
    main()
