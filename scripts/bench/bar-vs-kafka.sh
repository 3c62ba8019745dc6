#!/usr/bin/env bash
# The produce cells of the performance bar (issue 15), vdl builds against Apache Kafka 3.9 in
# its default durability (no fsync) and optionally with fsync on every message, measured by the
# same client (vdl-perf) on fresh 3-node clusters in interleaved rounds (Kafka, build 1, build
# 2, ..., then again), so the machine's drift hits every target alike.
#
# Every target first gets WARMUP_S seconds of batch-50 produce (Kafka's JIT needs it; vdl gets
# the same), then each cell runs CELL_S seconds after a 2 s warm-up of its own. acks=all,
# one request in flight per connection, 1 partition unless said:
#   b1       batch 1 x 1 KiB            b10     batch 10 x 1 KiB
#   b50      batch 50 x 1 KiB           b50x4k  batch 50 x 4 KiB
#   p8-b50   8 partitions, 8 producers (producer i on partition i), batch 50 x 1 KiB
#
# Usage: scripts/bench/bar-vs-kafka.sh ROUNDS OUT_DIR VDL_BIN [VDL_BIN ...]
#   env: CELL_S (default 6), WARMUP_S (default 20), KAFKA_MODES (default "default";
#        "default fsync" adds Kafka with fsync on every message), VDL_PERF
# Writes OUT_DIR/results.tsv (round, target, cell, records/s, p50 ms, p99 ms) and prints each
# line. A benchmark: it measures, it does not judge.
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,20p "$0"; exit 2; }
ROUNDS=$1; OUT=$2; shift 2
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
export VDL_PERF=${VDL_PERF:-$REPO/target/release/vdl-perf}
export CELL_S=${CELL_S:-6} WARMUP_S=${WARMUP_S:-20}
mkdir -p "$OUT"
: > "$OUT/results.tsv"

CELLS='
set -e
run() { # name, topic, then vdl-perf produce flags
  local name=$1 topic=$2; shift 2
  "$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" --topic "$topic" --message-size 1KiB "$@" --duration 2s > /dev/null
  "$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" --topic "$topic" --message-size 1KiB "$@" --duration "${CELL_S}s" > "$CELL_OUT/$name.json"
}
"$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" --topic bench --batch 50 --message-size 1KiB --duration "${WARMUP_S}s" > /dev/null
run b1 bench --batch 1
run b10 bench --batch 10
run b50 bench --batch 50
"$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" --topic bench --batch 50 --message-size 4KiB --duration 2s > /dev/null
"$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" --topic bench --batch 50 --message-size 4KiB --duration "${CELL_S}s" > "$CELL_OUT/b50x4k.json"
run p8-b50 bench8 --partitions 8 --threads 8 --batch 50
'

record() { # round target
  local round=$1 target=$2 cell
  for cell in b1 b10 b50 b50x4k p8-b50; do
    python3 "$REPO/scripts/bench/result_line.py" "$OUT/$round-$target/$cell.json" "$round" "$target" "$cell" \
      >> "$OUT/results.tsv"
    tail -n 1 "$OUT/results.tsv"
  done
}

for ((round = 1; round <= ROUNDS; round++)); do
  for mode in ${KAFKA_MODES:-default}; do
    export CELL_OUT="$OUT/$round-kafka-$mode"
    mkdir -p "$CELL_OUT"
    "$REPO/deploy/compare-kafka/run-suite.sh" --mode "$mode" --exec "$CELLS" > "$CELL_OUT/run.log" 2>&1
    record "$round" "kafka-$mode"
  done
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    export CELL_OUT="$OUT/$round-vdl$i"
    mkdir -p "$CELL_OUT"
    VDL="$bin" "$REPO/deploy/compare-kafka/run-vdl-suite.sh" --exec "$CELLS" > "$CELL_OUT/run.log" 2>&1
    record "$round" "vdl$i"
  done
done
