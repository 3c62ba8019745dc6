#!/usr/bin/env bash
# Log compaction (issue 35): a vdl build against Apache Kafka 3.9 (default durability),
# measured by the same client (vdl-perf) on fresh 3-node clusters in interleaved rounds (the
# order of the two targets is reversed every other round).
#
# Per cluster: keyed produce, batch 50 x 1 KiB, acks=all, one request in flight, to one
# partition, keys k0000..k9999 (KEYS). Two topics created by vdl-perf (--topic-config), both
# with segment.bytes=SEGMENT_BYTES (1 MiB):
#   plain      cleanup.policy=delete: the cleaner is idle
#   compacted  cleanup.policy=compact, min.cleanable.dirty.ratio=RATIO (0.1): the cleaner
#              runs on this very partition while it is produced to
# WARMUP_S of produce to plain, then the cell "idle" (2 s warm-up + CELL_S on plain), then
# PREFILL_S of produce to compacted (so the cleaner has sealed dirty segments) and the cell
# "cleaning" (CELL_S on compacted), then DRAIN_S for the cleaner to finish its backlog. The
# idle cell always runs first: once compacted exists, its cleaner may run at any time.
# Both systems get the same cleaner settings: the pause between cleaner rounds BACKOFF_MS
# (vdl storage.cleaner_backoff_ms, Kafka log.cleaner.backoff.ms; Kafka's default is 15 s,
# set low here so cleaning is continuous) and the key map DEDUPE_BYTES (default 128 MiB:
# vdl storage.cleaner_dedupe_buffer_bytes, Kafka log.cleaner.dedupe.buffer.size; one
# cleaner thread each, so one map per node).
#
# Cleaning throughput: bytes the passes read (key map + copy) over the passes' time, all
# passes of the three nodes over the cluster's life (scripts/bench/cleaner_stats.py: vdl's
# `log cleaner pass` log lines, Kafka's LogCleaner statistics in server.log). Memory: the
# nodes' peak and final resident set (VmHWM, VmRSS) at the end, and Kafka's "Buffer
# utilization" (share of its key map used).
#
# Usage: scripts/bench/compaction-vs-kafka.sh ROUNDS OUT_DIR VDL_BIN
#   env: CELL_S (15), WARMUP_S (10), PREFILL_S (5), DRAIN_S (10), KEYS (10000), RATIO (0.1),
#        BACKOFF_MS (1000), DEDUPE_BYTES (134217728), SEGMENT_BYTES (1048576), VDL_PERF
#        (default target/release/vdl-perf), TARGETS ("kafka vdl": either or both)
# Writes OUT_DIR/results.tsv (round, target, cell, records/s, p50 ms, p99 ms, mean ms, % of
# requests >= 1 ms), OUT_DIR/cleaner.tsv (round, target, passes, MB read, pass seconds,
# cleaning MB/s, Kafka's printed MB/s or -, key map bytes, Kafka buffer utilization % or -,
# max node VmHWM MiB, max node VmRSS MiB) and per cluster OUT_DIR/ROUND-TARGET/ (the
# vdl-perf JSON, the cleaner's log lines, metrics, memory); prints each line, then
# medians. A benchmark: it measures, it does not judge.
set -euo pipefail
[ $# -eq 3 ] || { sed -n 2,37p "$0"; exit 2; }
ROUNDS=$1; OUT=$2; VDL_BIN=$3
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
export VDL_PERF=${VDL_PERF:-$REPO/target/release/vdl-perf}
export CELL_S=${CELL_S:-15} WARMUP_S=${WARMUP_S:-10} PREFILL_S=${PREFILL_S:-5}
export DRAIN_S=${DRAIN_S:-10} KEYS=${KEYS:-10000} RATIO=${RATIO:-0.1}
export BACKOFF_MS=${BACKOFF_MS:-1000} DEDUPE_BYTES=${DEDUPE_BYTES:-134217728}
export SEGMENT_BYTES=${SEGMENT_BYTES:-1048576}
TARGETS=${TARGETS:-kafka vdl}
[ -x "$VDL_PERF" ] || { echo "no vdl-perf at $VDL_PERF (set VDL_PERF)" >&2; exit 2; }
[ -x "$VDL_BIN" ] || { echo "no vdl binary at $VDL_BIN" >&2; exit 2; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
: > "$OUT/results.tsv"
: > "$OUT/cleaner.tsv"

# Runs inside run-suite.sh / run-vdl-suite.sh, which export BOOTSTRAP, CLUSTER_DIR (and for
# vdl VDL_PIDS, VDL_ADMIN). KIND is kafka or vdl. Every step is bounded by --duration.
CELLS='
set -euo pipefail
P=("$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" --batch 50 --message-size 1KiB
   --keys "$KEYS" --messages 1000000000 --timeout 30s)
"${P[@]}" --topic plain --partitions 1 --topic-config cleanup.policy=delete \
  --topic-config segment.bytes="$SEGMENT_BYTES" --duration "${WARMUP_S}s" > /dev/null
"${P[@]}" --topic plain --duration 2s > /dev/null
"${P[@]}" --topic plain --duration "${CELL_S}s" > "$CELL_OUT/idle.json"
"${P[@]}" --topic compacted --partitions 1 --topic-config cleanup.policy=compact \
  --topic-config segment.bytes="$SEGMENT_BYTES" --topic-config min.cleanable.dirty.ratio="$RATIO" \
  --duration "${PREFILL_S}s" > /dev/null
"${P[@]}" --topic compacted --duration "${CELL_S}s" > "$CELL_OUT/cleaning.json"
sleep "$DRAIN_S"
: > "$CELL_OUT/memory.txt"
if [ "$KIND" = vdl ]; then
  i=0
  for pid in $VDL_PIDS; do
    i=$((i + 1))
    echo "node$i $(grep -E "^Vm(HWM|RSS)" "/proc/$pid/status" | tr -s " \t" " " | tr "\n" " ")" >> "$CELL_OUT/memory.txt"
    grep -a "log cleaner" "$CLUSTER_DIR/vdl$i.log" > "$CELL_OUT/cleaner-$i.log" || true
  done
  i=0
  for addr in ${VDL_ADMIN//,/ }; do
    i=$((i + 1))
    curl -sf --max-time 10 "http://$addr/metrics" | grep -E "^vdl_(cleaner_|partition_(cleanable|cleaned|dirty))" \
      > "$CELL_OUT/metrics-$i.txt" || true
  done
  python3 "$REPO/scripts/bench/cleaner_stats.py" vdl "$CELL_OUT"/cleaner-*.log > "$CELL_OUT/cleaner.json"
else
  for b in "$CLUSTER_DIR"/broker-*; do
    i=${b##*-}
    pid=$(cat "$b/pid")
    echo "broker$i $(grep -E "^Vm(HWM|RSS)" "/proc/$pid/status" | tr -s " \t" " " | tr "\n" " ")" >> "$CELL_OUT/memory.txt"
    # The cleaner lines: the start of each pass and each statistics block (10 lines).
    grep -a -E -A10 "Beginning cleaning of log|Log cleaner thread|kafka-log-cleaner-thread-[0-9]+\]: *$" "$b/logs/server.log" \
      | grep -a -v "^--$" > "$CELL_OUT/cleaner-$i.log" || true
  done
  python3 "$REPO/scripts/bench/cleaner_stats.py" kafka "$CELL_OUT"/cleaner-*.log > "$CELL_OUT/cleaner.json"
fi
'
export CELLS REPO

record() { # round target
  local round=$1 target=$2 dir="$OUT/$1-$2" cell
  for cell in idle cleaning; do
    python3 "$REPO/scripts/bench/result_line.py" "$dir/$cell.json" "$round" "$target" "$cell" --more \
      >> "$OUT/results.tsv"
    tail -n 1 "$OUT/results.tsv"
  done
  python3 - "$dir" "$round" "$target" "$DEDUPE_BYTES" >> "$OUT/cleaner.tsv" <<'EOF'
import json, re, sys
d, rnd, target, keymap = sys.argv[1:5]
c = json.load(open(f"{d}/cleaner.json"))
hwm, rss = [0], [0]
for line in open(f"{d}/memory.txt"):
    if m := re.search(r"VmHWM: (\d+) kB", line): hwm.append(int(m.group(1)))
    if m := re.search(r"VmRSS: (\d+) kB", line): rss.append(int(m.group(1)))
f = lambda v, fmt: "-" if v is None else fmt.format(v)
print("\t".join([rnd, target, str(c["passes"]), f"{c['bytes_read'] / 1e6:.1f}",
                 f"{c['seconds']:.2f}", f(c["mb_per_s"], "{:.1f}"),
                 f(c.get("kafka_printed_mb_per_s"), "{:.1f}"), keymap,
                 f(c.get("buffer_utilization_max_pct"), "{:.1f}"),
                 f"{max(hwm) / 1024:.0f}", f"{max(rss) / 1024:.0f}"]))
EOF
  tail -n 1 "$OUT/cleaner.tsv"
}

run_kafka() { # round
  export CELL_OUT="$OUT/$1-kafka" KIND=kafka
  mkdir -p "$CELL_OUT"
  printf 'log.cleaner.backoff.ms=%s\nlog.cleaner.dedupe.buffer.size=%s\n' "$BACKOFF_MS" "$DEDUPE_BYTES" \
    > "$CELL_OUT/extra.properties"
  KAFKA_EXTRA_PROPS="$CELL_OUT/extra.properties" \
    "$REPO/deploy/compare-kafka/run-suite.sh" --mode default --exec "$CELLS" > "$CELL_OUT/run.log" 2>&1
  record "$1" kafka
}

run_vdl() { # round
  export CELL_OUT="$OUT/$1-vdl" KIND=vdl
  mkdir -p "$CELL_OUT"
  VDL="$VDL_BIN" VDL_STORAGE_EXTRA="cleaner_backoff_ms = $BACKOFF_MS
cleaner_dedupe_buffer_bytes = $DEDUPE_BYTES" \
    "$REPO/deploy/compare-kafka/run-vdl-suite.sh" --exec "$CELLS" > "$CELL_OUT/run.log" 2>&1
  record "$1" vdl
}

for ((round = 1; round <= ROUNDS; round++)); do
  order=$TARGETS
  if ((round % 2 == 0)); then order=$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for t in $order; do
    case "$t" in
      kafka) run_kafka "$round" ;;
      vdl) run_vdl "$round" ;;
      *) echo "unknown target $t" >&2; exit 2 ;;
    esac
  done
done

python3 - "$OUT" <<'EOF'
import statistics as st, sys
out = sys.argv[1]
rows = [l.split("\t") for l in open(f"{out}/results.tsv").read().splitlines() if l]
clean = [l.split("\t") for l in open(f"{out}/cleaner.tsv").read().splitlines() if l]
print("\nmedians over rounds (records/s, p50 ms, p99 ms; cleaning/idle ratio per round, then median)")
for t in sorted({r[1] for r in rows}):
    for cell in ("idle", "cleaning"):
        sel = [r for r in rows if r[1] == t and r[2] == cell]
        print(f"{t}\t{cell}\t" + "\t".join(f"{st.median(float(r[i]) for r in sel):.3f}" for i in (3, 4, 5)))
    for i, name in ((3, "records/s"), (4, "p50"), (5, "p99")):
        ratios = []
        for rnd in sorted({r[0] for r in rows if r[1] == t}):
            a = [float(r[i]) for r in rows if r[1] == t and r[0] == rnd and r[2] == "idle"]
            b = [float(r[i]) for r in rows if r[1] == t and r[0] == rnd and r[2] == "cleaning"]
            if a and b and a[0]:
                ratios.append(b[0] / a[0])
        if ratios:
            print(f"{t}\tcleaning/idle {name}\t" + " ".join(f"{x:.2f}" for x in ratios)
                  + f"\tmedian {st.median(ratios):.2f}")
    mb = [float(c[5]) for c in clean if c[1] == t and c[5] != "-"]
    if mb:
        print(f"{t}\tcleaning MB/s per round\t" + " ".join(f"{x:.1f}" for x in mb)
              + f"\tmedian {st.median(mb):.1f}")
EOF
