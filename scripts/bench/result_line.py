#!/usr/bin/env python3
"""Prints one TSV line `round target cell records/s p50_ms p99_ms` from a `vdl-perf --json
produce` result file. Usage: result_line.py RESULT.json ROUND TARGET CELL
(used by bar-vs-kafka.sh and partitions-vs-kafka.sh)."""
import json
import sys

path, round_, target, cell = sys.argv[1:5]
r = json.load(open(path))
r = r[0] if isinstance(r, list) else r
print(f"{round_}\t{target}\t{cell}\t{r['records_per_s']:.0f}\t"
      f"{r['latency']['p50_ms']:.3f}\t{r['latency']['p99_ms']:.3f}")
