#!/usr/bin/env python3
# Sustained write rate of this machine's disk, per second: 1 MiB appends + fdatasync for SECS
# seconds to one file under PROBE_DIR (default /tmp), wrapping to the file's start after
# WRAP_GIB GiB. With WRAP_GIB small (2) the blocks are soon overwritten; with it larger than
# what SECS writes, every write lands on new blocks. On the project machine (2026-11-27): new
# blocks ran at 1.1-1.2 GB/s for about 2.5 GB, then about 300 MB/s; overwrites held 1.4-1.7
# GB/s for 25 s. Usage: scripts/bench/disk-new-blocks.py SECS WRAP_GIB
import os, sys, time

secs, wrap = float(sys.argv[1]), int(sys.argv[2]) << 30
path = os.path.join(os.environ.get("PROBE_DIR", "/tmp"), "disk-new-blocks.probe")
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
buf = os.urandom(1 << 20)
t0 = last = time.time()
n = off = 0
try:
    while time.time() - t0 < secs:
        os.pwrite(fd, buf, off)
        os.fdatasync(fd)
        off = (off + len(buf)) % wrap
        n += 1
        now = time.time()
        if now - last >= 1:
            print(f"{now - t0:5.1f} s  {n * len(buf) / (now - last) / 1e6:6.0f} MB/s", flush=True)
            n, last = 0, now
finally:
    os.close(fd)
    os.unlink(path)
