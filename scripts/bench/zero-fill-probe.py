#!/usr/bin/env python3
# Zero-fill probe (docs/benchmarks.md, "2026-11-27, second session"): three writers append
# SIZE bytes + fdatasync to their own file on the disk under /tmp (as a local 3-node cluster's
# replicas do), pausing GAP seconds between appends (the rest of the produce path), for SECS
# seconds, and print the appends' latency. MODE:
#   grow       every append grows the file (each sync also writes size and block metadata)
#   fdatasync  a filler thread per file keeps zeros ahead of the writer, as logstore's
#              reserve does (16 MiB fills, PIECE-byte pieces each written back with
#              sync_file_range, one fdatasync per fill), the writer fdatasyncs its file
#   sfr        as fdatasync, but the writer syncs only its own range (sync_file_range) and
#              flushes the device cache by fdatasync of the directory
# Usage: PIECE=131072 scripts/bench/zero-fill-probe.py SIZE MODE SECS GAP
import ctypes
import os
import sys
import threading
import time

LIBC = ctypes.CDLL(None, use_errno=True)
# SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER
SYNC_FILE_RANGE_WRITE_AND_WAIT = 1 | 2 | 4
FILL_BYTES = 16 << 20
WRITERS = 3


def write_back(fd, offset, length):
    """Writes a byte range back to the device and waits for it (no cache flush)."""
    rc = LIBC.sync_file_range(fd, ctypes.c_long(offset), ctypes.c_long(length),
                              SYNC_FILE_RANGE_WRITE_AND_WAIT)
    assert rc == 0, ctypes.get_errno()


def main():
    size, mode = int(sys.argv[1]), sys.argv[2]
    secs, gap = float(sys.argv[3]), float(sys.argv[4])
    piece = int(os.environ.get("PIECE", 1 << 20))
    directory = os.environ.get("PROBE_DIR", "/tmp/zero-fill-probe")
    os.makedirs(directory, exist_ok=True)
    dir_fd = os.open(directory, os.O_RDONLY)
    paths = [f"{directory}/w{i}" for i in range(WRITERS)]
    fds = [os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC) for p in paths]
    os.fsync(dir_fd)
    data, zeros = os.urandom(size), bytes(piece)
    # Per file: the writer's end, the end of synced zeros, whether a fill runs, growing appends.
    state = [{"end": 0, "zeroed": 0, "filling": False, "grown": 0} for _ in range(WRITERS)]
    changed = [threading.Condition() for _ in range(WRITERS)]
    latencies = [[] for _ in range(WRITERS)]
    stop = threading.Event()

    def filler(i):
        fd = os.open(paths[i], os.O_RDWR)
        s, cv = state[i], changed[i]
        while not stop.is_set():
            with cv:
                while not stop.is_set() and (mode == "grow" or s["zeroed"] - s["end"] >= FILL_BYTES // 2):
                    cv.wait(0.05)
                if stop.is_set():
                    break
                start = s["zeroed"]
                s["filling"] = True
            for at in range(start, start + FILL_BYTES, piece):
                os.pwrite(fd, zeros, at)
                write_back(fd, at, piece)
            os.fdatasync(fd)
            with cv:
                s["zeroed"], s["filling"] = start + FILL_BYTES, False
                cv.notify_all()
        os.close(fd)

    def writer(i):
        fd, s, cv = fds[i], state[i], changed[i]
        deadline = time.time() + secs
        while time.time() < deadline:
            started = time.perf_counter()
            with cv:
                at = s["end"]
                while at + size > s["zeroed"] and s["filling"]:
                    cv.wait()
                grows = at + size > s["zeroed"]
                os.pwrite(fd, data, at)
                s["end"] = at + size
                if grows:
                    s["zeroed"] = at + size
                    s["grown"] += 1
                cv.notify_all()
            if grows or mode in ("grow", "fdatasync"):
                os.fdatasync(fd)
            else:  # sfr: the writer's range, then a device flush through a clean descriptor
                write_back(fd, at, size)
                os.fdatasync(dir_fd)
            latencies[i].append(time.perf_counter() - started)
            if gap:
                time.sleep(gap)

    fillers = [threading.Thread(target=filler, args=(i,)) for i in range(WRITERS)]
    writers = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for t in fillers:
        t.start()
    time.sleep(0.5)
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for cv in changed:
        with cv:
            cv.notify_all()
    for t in fillers:
        t.join()

    a = sorted(x for l in latencies for x in l)
    n = len(a)
    ms = lambda q: a[min(n - 1, int(q * n))] * 1000
    print(f"size={size} mode={mode} gap={gap} piece={piece} ops={n} MB/s={n * size / secs / 1e6:.0f} "
          f"avg={sum(a) / n * 1000:.3f} p50={ms(.5):.3f} p90={ms(.9):.3f} p99={ms(.99):.3f} "
          f"p999={ms(.999):.3f} grown={sum(s['grown'] for s in state)}")
    for fd, p in zip(fds, paths):
        os.close(fd)
        os.unlink(p)
    os.close(dir_fd)


if __name__ == "__main__":
    main()
