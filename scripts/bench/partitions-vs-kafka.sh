#!/usr/bin/env bash
# Produce with parallelism over partitions, and single-partition batch-1 latency: one or more
# vdl builds against Apache Kafka 3.9 in its default durability (no fsync), measured by the
# same client (vdl-perf) on fresh 3-node clusters, in interleaved rounds (Kafka, build 1,
# build 2, ... then again) so the machine's drift hits every target alike.
#
# Cells (acks=all, 1 KiB records, one request in flight per connection):
#   p1-b1   topic `bench` (1 partition), 1 producer, batch 1
#   p8-b50  topic `bench8` created with 8 partitions (vdl-perf --partitions 8), 8 producers
#           (producer i writes partition i), batch 50
#
# Usage: scripts/bench/partitions-vs-kafka.sh ROUNDS OUT_DIR VDL_BIN [VDL_BIN ...]
#   env: CELL_S (seconds per cell, default 8), VDL_PERF (default target/release/vdl-perf)
# Prints one line per cell and target per round, and writes OUT_DIR/results.tsv
# (round, target, cell, records/s, p50 ms, p99 ms). A benchmark: it measures, it does not judge.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS="${1:?rounds}"
OUT="${2:?out dir}"
shift 2
(($# > 0)) || { echo "name at least one vdl binary" >&2; exit 2; }
CELL_S="${CELL_S:-8}"
export VDL_PERF="${VDL_PERF:-$REPO/target/release/vdl-perf}"
mkdir -p "$OUT"
printf 'round\ttarget\tcell\trecords_per_s\tp50_ms\tp99_ms\n' > "$OUT/results.tsv"

# The vdl-perf commands, run against $BOOTSTRAP; each result lands in $CELL_OUT/<cell>.json.
CELLS='
set -euo pipefail
"$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" --topic bench --batch 1 --message-size 1KiB \
  --threads 1 --duration 2s > /dev/null
"$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" --topic bench --batch 1 --message-size 1KiB \
  --threads 1 --duration "${CELL_S}s" > "$CELL_OUT/p1-b1.json"
"$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" --topic bench8 --partitions 8 --threads 8 \
  --batch 50 --message-size 1KiB --duration 2s > /dev/null
"$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" --topic bench8 --partitions 8 --threads 8 \
  --batch 50 --message-size 1KiB --duration "${CELL_S}s" > "$CELL_OUT/p8-b50.json"
'
export CELL_S

record() { # round target
  local round="$1" target="$2" cell
  for cell in p1-b1 p8-b50; do
    python3 "$REPO/scripts/bench/result_line.py" "$OUT/$round-$target/$cell.json" "$round" "$target" "$cell" \
      >> "$OUT/results.tsv"
    tail -n 1 "$OUT/results.tsv"
  done
}

for ((round = 1; round <= ROUNDS; round++)); do
  export CELL_OUT="$OUT/$round-kafka"
  mkdir -p "$CELL_OUT"
  "$REPO/deploy/compare-kafka/run-suite.sh" --mode default --exec "$CELLS" > /dev/null
  record "$round" kafka
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    export CELL_OUT="$OUT/$round-vdl$i"
    mkdir -p "$CELL_OUT"
    VDL="$bin" "$REPO/deploy/compare-kafka/run-vdl-suite.sh" --exec "$CELLS" > /dev/null
    record "$round" "vdl$i"
  done
done
