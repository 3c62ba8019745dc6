#!/usr/bin/env bash
# Transactional produce: throughput and commit latency of Kafka's transactional producer
# (confluent-kafka / librdkafka, from the project's .venv made by scripts/test-deps.sh) against a
# local 3-node vdl cluster (deploy/local-cluster.sh) and a local 3-broker Apache Kafka 3.9
# (scripts/kafka/kafka-cluster.sh, Kafka's defaults: no fsync), in interleaved rounds.
#
# Each cell: one producer with a transactional id, acks=all, 1 KiB records to a topic of one
# partition (replication factor 3); for TXN_S seconds (at most MAX_TXNS transactions) it
# begins a transaction, produces RECORDS records, and commits. Printed per cell: transactions
# and records per second, and the commit_transaction() latency p50/p99: what an application
# waits for at a commit (the client flushes the transaction's records, acks=all, then sends
# EndTxn and returns once the coordinator has decided; the markers follow).
#
# Usage: scripts/bench/txn-vs-kafka.sh ROUNDS OUT_DIR
#   env: VDL_BIN (default target/release/vdl), RECORDS_LIST ("1 100 1000"), TXN_S (10),
#        MAX_TXNS (100000), TARGETS ("kafka vdl")
# Writes OUT_DIR/results.tsv (round, target, records per transaction, txn/s, records/s,
# commit p50 ms, commit p99 ms). A benchmark: it measures, it does not judge.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS="${1:?rounds}"
OUT="${2:?out dir}"
RECORDS_LIST="${RECORDS_LIST:-1 100 1000}"
TXN_S="${TXN_S:-10}"
MAX_TXNS="${MAX_TXNS:-100000}"
TARGETS="${TARGETS:-kafka vdl}"
export VDL_BIN="${VDL_BIN:-$REPO/target/release/vdl}"
PY="$REPO/.venv/bin/python"
[[ -x "$PY" ]] || { echo "no $PY: run scripts/test-deps.sh first" >&2; exit 2; }
mkdir -p "$OUT"
printf 'round\ttarget\trecords_per_txn\ttxn_per_s\trecords_per_s\tcommit_p50_ms\tcommit_p99_ms\n' \
  > "$OUT/results.tsv"
WORK="$(mktemp -d /tmp/vdl-txn-bench-XXXXXX)"
KDIR="$WORK/kafka"
export VDL_DATA_DIR="$WORK/vdl"
export VDL_KAFKA_BASE_PORT="${VDL_KAFKA_BASE_PORT:-25092}"
KAFKA_BASE_PORT="${KAFKA_BASE_PORT:-29192}"

stop_all() {
  VDL_CLEAN=1 "$REPO/deploy/local-cluster.sh" stop >/dev/null 2>&1 || true
  "$REPO/scripts/kafka/kafka-cluster.sh" stop --dir "$KDIR" --clean >/dev/null 2>&1 || true
}
trap 'stop_all; rm -rf "$WORK"' EXIT

# Starts `$1` (kafka or vdl) fresh and prints its bootstrap address.
start_target() {
  if [[ "$1" == kafka ]]; then
    "$REPO/scripts/kafka/fetch-kafka.sh" >/dev/null
    "$REPO/scripts/kafka/kafka-cluster.sh" start --brokers 3 --base-port "$KAFKA_BASE_PORT" \
      --dir "$KDIR" >/dev/null
    "$REPO/scripts/kafka/kafka-cluster.sh" bootstrap --dir "$KDIR"
  else
    "$REPO/deploy/local-cluster.sh" start | tail -n 1
  fi
}

for ((round = 1; round <= ROUNDS; round++)); do
  for target in $TARGETS; do
    bootstrap="$(start_target "$target")"
    for records in $RECORDS_LIST; do
      line="$("$PY" - "$bootstrap" "$records" "$TXN_S" "$MAX_TXNS" "$target-$round-$records" <<'PYEOF'
import sys, time
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, records, seconds, max_txns, tag = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
topic = f"txn-bench-{tag}"
admin = AdminClient({"bootstrap.servers": bootstrap})
for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)]).values():
    f.result(timeout=60)
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{tag}",
              "acks": "all", "linger.ms": 1, "batch.num.messages": 10000,
              "queue.buffering.max.messages": 1000000})
p.init_transactions(60)
value = b"x" * 1024
# Warm-up: one transaction.
p.begin_transaction(); p.produce(topic, value, partition=0); p.commit_transaction(60)
commits, done = [], 0
start = time.monotonic()
while time.monotonic() - start < seconds and done < max_txns:
    p.begin_transaction()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    t = time.monotonic()
    p.commit_transaction(60)
    commits.append(time.monotonic() - t)
    done += 1
elapsed = time.monotonic() - start
commits.sort()
q = lambda f: commits[min(len(commits) - 1, int(f * len(commits)))] * 1000
print(f"{done / elapsed:.1f}\t{done * records / elapsed:.0f}\t{q(0.5):.2f}\t{q(0.99):.2f}")
PYEOF
)"
      printf '%s\t%s\t%s\t%s\n' "$round" "$target" "$records" "$line" >> "$OUT/results.tsv"
      echo "round $round $target records/txn $records: $line (txn/s, records/s, commit p50 ms, p99 ms)" >&2
    done
    stop_all
  done
done
column -t "$OUT/results.tsv" >&2
