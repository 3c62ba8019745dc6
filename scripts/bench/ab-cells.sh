#!/usr/bin/env bash
# Interleaved A/B of produce cells: vdl builds and/or Apache Kafka 3.9, a fresh 3-node cluster
# per target and round, the same client (vdl-perf, acks=all, one request in flight per
# connection). The order of the targets is reversed every other round, so a drift of the
# machine during the run (this disk's rate for new blocks falls as it is written) does not
# favour whichever target runs second.
#
# Every cluster first gets WARMUP_S seconds of batch-50 x 1 KiB produce, then each cell runs
# CELL_S seconds after a 2 s warm-up of its own, in the order given.
#
# Usage: scripts/bench/ab-cells.sh ROUNDS OUT_DIR TARGET [TARGET ...]
#   TARGET: a vdl binary (or a wrapper script that execs one), or kafka-default /
#           kafka-fsync (Apache Kafka 3.9 by deploy/compare-kafka/run-suite.sh).
#   env: CELLS (default "50x1KiB"): BATCHxSIZE[@PARTITIONS] each, e.g.
#          "50x1KiB 10x4KiB 1x4KiB 50x1KiB@8" (@8: 8 partitions, 8 producers, producer i on
#          partition i, topic bench8); or fetch:SIZE, e.g. "fetch:16KiB fetch:1MiB": one
#          consumer (vdl-perf consume) reading topic bench from the earliest offset with
#          that fetch size per partition, one Fetch in flight, for CELL_S seconds (or to the
#          end of the log): the fetch path's cost per request (small sizes) and its
#          throughput (large ones). Put them after produce cells, which fill the topic;
#        CELL_S (default 6), WARMUP_S (default 10), VDL_PERF;
#        SYNC (default always): the vdl nodes' storage.sync (always, never, interval:MS).
# Writes OUT_DIR/results.tsv (round, target, cell, records/s, p50 ms, p99 ms, mean ms,
# percent of requests at 1 ms or more) and prints each line. A benchmark: it measures, it
# does not judge.
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,23p "$0"; exit 2; }
ROUNDS=$1; OUT=$2; shift 2
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
export VDL_PERF=${VDL_PERF:-$REPO/target/release/vdl-perf}
export CELL_S=${CELL_S:-6} WARMUP_S=${WARMUP_S:-10}
export CELLS=${CELLS:-50x1KiB}
mkdir -p "$OUT"
: > "$OUT/results.tsv"

# Runs inside run-suite.sh / run-vdl-suite.sh, which export BOOTSTRAP.
RUN_CELLS='
set -e
"$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" --topic bench --batch 50 --message-size 1KiB --duration "${WARMUP_S}s" > /dev/null
for cell in $CELLS; do
  if [[ "$cell" == fetch:* ]]; then
    "$VDL_PERF" --json consume --bootstrap "$BOOTSTRAP" --topic bench --from earliest \
      --fetch-size "${cell#fetch:}" --duration "${CELL_S}s" > "$CELL_OUT/$cell.json"
    continue
  fi
  spec=${cell%@*}; parts=1
  [[ "$cell" == *@* ]] && parts=${cell#*@}
  flags=(--batch "${spec%%x*}" --message-size "${spec#*x}" --topic bench)
  if (( parts > 1 )); then flags=(--batch "${spec%%x*}" --message-size "${spec#*x}" --topic "bench$parts" --partitions "$parts" --threads "$parts"); fi
  "$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" "${flags[@]}" --duration 2s > /dev/null
  "$VDL_PERF" --json produce --bootstrap "$BOOTSTRAP" "${flags[@]}" --duration "${CELL_S}s" > "$CELL_OUT/$cell.json"
done
'

run_target() { # round target
  local round=$1 target=$2 name cell
  name=$(basename "$target")
  export CELL_OUT="$OUT/$round-$name"
  mkdir -p "$CELL_OUT"
  case "$target" in
    kafka-default | kafka-fsync)
      "$REPO/deploy/compare-kafka/run-suite.sh" --mode "${target#kafka-}" --exec "$RUN_CELLS" \
        > "$CELL_OUT/run.log" 2>&1 ;;
    *)
      VDL="$target" "$REPO/deploy/compare-kafka/run-vdl-suite.sh" --sync "${SYNC:-always}" \
        --exec "$RUN_CELLS" \
        > "$CELL_OUT/run.log" 2>&1 ;;
  esac
  for cell in $CELLS; do
    python3 "$REPO/scripts/bench/result_line.py" "$CELL_OUT/$cell.json" "$round" "$name" "$cell" \
      --more >> "$OUT/results.tsv"
    tail -n 1 "$OUT/results.tsv"
  done
}

for ((round = 1; round <= ROUNDS; round++)); do
  targets=("$@")
  if ((round % 2 == 0)); then
    reversed=()
    for ((i = ${#targets[@]} - 1; i >= 0; i--)); do reversed+=("${targets[$i]}"); done
    targets=("${reversed[@]}")
  fi
  for target in "${targets[@]}"; do run_target "$round" "$target"; done
done
