#!/usr/bin/env python3
"""Sums the log cleaner's passes from node logs, as one JSON object (used by
compaction-vs-kafka.sh).

  cleaner_stats.py vdl LOG...    vdl's `log cleaner pass` lines (bytes_read, bytes_written,
                                 records_removed, elapsed_us per pass)
  cleaner_stats.py kafka LOG...  Apache Kafka 3.9's LogCleaner statistics blocks

Cleaning throughput is bytes read by the passes (building the key map and copying, both
systems) over the passes' time, in MB/s (10^6 B/s). vdl logs each pass's time in
microseconds. Kafka prints its time in tenths of a second, so its passes are timed from the
log's millisecond timestamps instead: from "Beginning cleaning of log X" to the statistics
block of X in the same file (Kafka's own rounded figure is reported too, as
`kafka_printed_mb_per_s`). Kafka's MB are 2^20 bytes; they are converted.
"""
import json
import re
import sys
from datetime import datetime

ANSI = re.compile(r"\x1b\[[0-9;]*m")
FIELD = re.compile(r"(\w+)=(\S+)")
MIB = 1 << 20


def num(s):
    return float(s.replace(",", ""))


def vdl(paths):
    out = {"passes": 0, "bytes_read": 0, "bytes_written": 0, "records_removed": 0,
           "seconds": 0.0}
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                line = ANSI.sub("", line)
                if "log cleaner pass" not in line or "failed" in line:
                    continue
                fields = dict(FIELD.findall(line))
                if "bytes_read" not in fields or "elapsed_us" not in fields:
                    continue
                out["passes"] += 1
                out["bytes_read"] += int(fields["bytes_read"])
                out["bytes_written"] += int(fields.get("bytes_written", 0))
                out["records_removed"] += int(fields.get("records_removed", 0))
                out["seconds"] += int(fields["elapsed_us"]) / 1e6
    out["mb_per_s"] = out["bytes_read"] / 1e6 / out["seconds"] if out["seconds"] else None
    return out


TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
BEGIN = re.compile(r"Beginning cleaning of log (\S+?)\.?\s*(\(|$)")
CLEANED = re.compile(r"Log cleaner thread \d+ cleaned log (\S+)")
PROCESSED = re.compile(r"([\d,.]+) MB of log processed in ([\d,.]+) seconds")
INDEXED = re.compile(r"Indexed ([\d,.]+) MB in ([\d,.]+) seconds")
UTIL = re.compile(r"Buffer utilization: ([\d,.]+)%")
SIZES = re.compile(r"(Start|End) size: ([\d,.]+) MB \(([\d,]+) messages\)")


def kafka(paths):
    out = {"passes": 0, "bytes_read": 0, "bytes_written": 0, "records_removed": 0,
           "seconds": 0.0, "printed_seconds": 0.0, "processed_bytes": 0,
           "buffer_utilization_max_pct": 0.0, "untimed_passes": 0}
    for path in paths:
        ts = None
        begun = {}
        current = None  # the pass whose statistics block is being read
        with open(path, errors="replace") as f:
            for line in f:
                m = TS.match(line)
                if m:
                    ts = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
                m = BEGIN.search(line)
                if m and ts:
                    begun[m.group(1)] = ts
                m = CLEANED.search(line)
                if m:
                    log = m.group(1)
                    current = {"log": log, "end": ts, "begin": begun.pop(log, None)}
                    out["passes"] += 1
                    if current["begin"] and current["end"]:
                        out["seconds"] += (current["end"] - current["begin"]).total_seconds()
                    else:
                        out["untimed_passes"] += 1
                    continue
                if current is None:
                    continue
                if m := PROCESSED.search(line):
                    b = num(m.group(1)) * MIB
                    out["processed_bytes"] += b
                    out["bytes_read"] += b
                    out["printed_seconds"] += num(m.group(2))
                elif m := INDEXED.search(line):
                    out["bytes_read"] += num(m.group(1)) * MIB
                elif m := UTIL.search(line):
                    out["buffer_utilization_max_pct"] = max(
                        out["buffer_utilization_max_pct"], num(m.group(1)))
                elif m := SIZES.search(line):
                    if m.group(1) == "End":
                        out["bytes_written"] += num(m.group(2)) * MIB
                        out["records_removed"] += current.pop("start_messages", 0) - int(
                            num(m.group(3)))
                        current = None
                    else:
                        current["start_messages"] = int(num(m.group(3)))
    out["bytes_read"] = round(out["bytes_read"])
    out["bytes_written"] = round(out["bytes_written"])
    out["mb_per_s"] = out["bytes_read"] / 1e6 / out["seconds"] if out["seconds"] else None
    out["kafka_printed_mb_per_s"] = (out["processed_bytes"] / 1e6 / out["printed_seconds"]
                                     if out["printed_seconds"] else None)
    del out["processed_bytes"]
    return out


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("vdl", "kafka"):
        sys.exit(__doc__)
    kind, paths = sys.argv[1], sys.argv[2:]
    print(json.dumps(vdl(paths) if kind == "vdl" else kafka(paths)))


if __name__ == "__main__":
    main()
