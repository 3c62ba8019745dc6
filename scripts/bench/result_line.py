#!/usr/bin/env python3
"""Prints one TSV line `round target cell records/s p50_ms p99_ms` from a `vdl-perf --json
produce` result file. Usage: result_line.py RESULT.json ROUND TARGET CELL [--more]
(used by bar-vs-kafka.sh, partitions-vs-kafka.sh and ab-cells.sh). With --more the line
also has the mean request latency (ms) and the share of requests (percent) that took 1 ms
or more: the slow mode of a bimodal latency, which the median hides."""
import json
import sys

path, round_, target, cell = sys.argv[1:5]
more = "--more" in sys.argv[5:]
r = json.load(open(path))
r = r[0] if isinstance(r, list) else r
line = (f"{round_}\t{target}\t{cell}\t{r['records_per_s']:.0f}\t"
        f"{r['latency']['p50_ms']:.3f}\t{r['latency']['p99_ms']:.3f}")
if more:
    # vdl-perf's latency buckets: <0.2, 0.2-0.3, ..., 0.9-1, 1-2, 2-3, >=3 ms.
    over_1ms = sum(r["buckets"][9:])
    line += f"\t{r['latency']['avg_ms']:.3f}\t{over_1ms:.1f}"
print(line)
