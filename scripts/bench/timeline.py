#!/usr/bin/env python3
"""Merges the produce-path timelines of a local cluster's nodes (`VDL_TIMELINE=<prefix>`, one
file `<prefix>.<pid>` per process, lines `ns stage tag`, see crates/server/src/runtime/timeline.rs;
scripts/bench/produce-timeline.sh runs the whole thing) and prints, for synchronous Produce
requests (one in flight), the median time of each milestone since the leader read the request.

Usage: scripts/bench/timeline.py PREFIX [--skip N] [--min-us A] [--max-us B]
  --skip N    leave out the first N produces (warm-up; default 1000)
  --min-us A  only the produces whose leader read -> write took at least A us (the slow mode
              of a bimodal latency), --max-us B only those that took less than B us

How a request is followed: the leader is the process that read Produce frames (API key 0); the
i-th Produce it read pairs with the i-th Produce response it wrote (one connection answers in
order). Within that window each milestone is the first event of its stage after the previous
milestone of the chain: leader dispatch, proposal queued, group turn, appends handed to the
transport, first peer frame written, leader fsync; on each follower: frame delivered, turn,
fsync, acknowledgement handed to the transport, its frame written; then on the leader: the
acknowledgement delivered, the turn that handles it, the answer, the response ready and
written. The follower whose acknowledgement was written first is reported ("F1"). A milestone
missing in a window (for example a turn that handled two inputs at once) is left out of that
window's figures, so each row says in how many windows it was seen.
"""

import bisect
import glob
import statistics
import sys

STAGES = {
    1: "frame read",
    2: "dispatched",
    3: "proposal queued",
    4: "turn start",
    5: "appends queued",
    6: "fsync done",
    7: "acks queued",
    8: "peer frame written",
    9: "peer frame delivered",
    10: "answered",
    11: "response ready",
    12: "response written",
}
PRODUCE = 0


def load(prefix):
    nodes = {}
    for path in sorted(glob.glob(prefix + ".*")):
        pid = path.rsplit(".", 1)[1]
        events = []
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3:
                    events.append((int(parts[0]), int(parts[1]), int(parts[2])))
        events.sort()
        nodes[pid] = events
    return nodes


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    prefix = sys.argv[1]
    skip = 1000
    if "--skip" in sys.argv:
        skip = int(sys.argv[sys.argv.index("--skip") + 1])
    min_us = float(sys.argv[sys.argv.index("--min-us") + 1]) if "--min-us" in sys.argv else 0.0
    max_us = float(sys.argv[sys.argv.index("--max-us") + 1]) if "--max-us" in sys.argv else 1e18
    nodes = load(prefix)
    leader = max(nodes, key=lambda p: sum(1 for e in nodes[p] if e[1] == 1 and e[2] == PRODUCE))
    followers = [p for p in nodes if p != leader]
    lev = nodes[leader]
    # One connection answers in request order: the i-th Produce read pairs with the i-th
    # Produce response written.
    reads = [ns for ns, st, tag in lev if st == 1 and tag == PRODUCE]
    writes = [ns for ns, st, tag in lev if st == 12 and tag == PRODUCE]
    windows = [(r, w) for r, w in zip(reads, writes) if w > r][skip:]
    windows = [(r, w) for r, w in windows if min_us <= (w - r) / 1000.0 < max_us]
    if not windows:
        print("no complete produce windows")
        sys.exit(1)

    def first_after(events, stage, after, until):
        """Time of the first `stage` event in (after, until], or None."""
        i = bisect.bisect_right(events, (after, 1 << 62, 1 << 62))
        while i < len(events) and events[i][0] <= until:
            if events[i][1] == stage:
                return events[i][0]
            i += 1
        return None

    milestones = {}
    order = []

    def note(name, t, lo):
        if name not in milestones:
            order.append(name)
            milestones[name] = []
        if t is not None:
            milestones[name].append((t - lo) / 1000.0)

    complete = 0
    for lo, hi in windows:
        t = {}
        t["L dispatched"] = first_after(lev, 2, lo - 1, hi)
        t["L proposal queued"] = first_after(lev, 3, t["L dispatched"] or lo, hi)
        t["L group turn starts"] = first_after(lev, 4, t["L proposal queued"] or lo, hi)
        t["L appends queued"] = first_after(lev, 5, t["L group turn starts"] or lo, hi)
        t["L first peer frame written"] = first_after(lev, 8, t["L appends queued"] or lo, hi)
        t["L fsync done"] = first_after(lev, 6, t["L appends queued"] or lo, hi)
        fs = []
        for p in followers:
            ev = nodes[p]
            f = {}
            f["delivered"] = first_after(ev, 9, t["L appends queued"] or lo, hi)
            f["turn starts"] = first_after(ev, 4, f["delivered"] or lo, hi)
            f["fsync done"] = first_after(ev, 6, f["turn starts"] or lo, hi)
            f["ack queued"] = first_after(ev, 7, f["fsync done"] or lo, hi)
            f["ack frame written"] = first_after(ev, 8, f["ack queued"] or lo, hi)
            if f["ack frame written"] is not None:
                fs.append(f)
        fs.sort(key=lambda f: f["ack frame written"])
        for rank, f in enumerate(fs[:1]):
            for k, v in f.items():
                t["F1 " + k] = v
        first_ack = fs[0]["ack frame written"] if fs else None
        t["L ack delivered"] = first_after(lev, 9, first_ack or hi, hi) if first_ack else None
        t["L group turn starts (ack)"] = (
            first_after(lev, 4, t["L ack delivered"], hi) if t["L ack delivered"] else None
        )
        t["L answered"] = first_after(lev, 10, t["L appends queued"] or lo, hi)
        t["L response ready"] = first_after(lev, 11, t["L answered"] or lo, hi)
        t["L response written"] = hi
        if all(v is not None for v in t.values()):
            complete += 1
        for name, v in sorted(t.items(), key=lambda kv: (kv[1] is None, kv[1] or 0)):
            note(name, v, lo)

    total = [(hi - lo) / 1000.0 for lo, hi in windows]
    print(f"{len(windows)} produces (after skipping {skip}), {complete} with every milestone; "
          f"leader pid {leader}")
    print(f"leader socket read -> socket write: median {statistics.median(total):.1f} us, "
          f"p90 {sorted(total)[int(len(total) * 0.9)]:.1f} us")
    print()
    print("| milestone (L leader, F1 first follower to acknowledge) | seen in | median us since the leader read the request | median step |")
    print("|---|---|---|---|")
    rows = [(statistics.median(v), name, len(v)) for name, v in milestones.items() if v]
    rows.sort()
    prev = 0.0
    for med, name, n in rows:
        print(f"| {name} | {100.0 * n / len(windows):.0f}% | {med:.1f} | +{med - prev:.1f} |")
        prev = med


if __name__ == "__main__":
    main()
