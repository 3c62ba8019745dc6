#!/usr/bin/env bash
# Fetch across many topics: a Java consumer (Kafka 3.9's console consumer, whose Fetch names
# topics by id, v13+) subscribed to TOPICS single-partition topics reads RECORDS_PER_TOPIC
# records of each from the start. One or more vdl builds, each on a fresh 3-node cluster
# (deploy/local-cluster.sh), in interleaved rounds (build 1, build 2, ... then again) so the
# machine's drift hits every build alike.
#
# Measured per build and round: the consumer's wall time from start to the last record (the
# JVM's start and the group join included, the same for every build), and the CPU seconds the
# three vdl processes spent meanwhile (utime + stime from /proc, after minus before).
#
# Usage: scripts/bench/fetch-many-topics.sh ROUNDS OUT_DIR VDL_BIN [VDL_BIN ...]
#   env: TOPICS (default 1000), RECORDS_PER_TOPIC (default 10), KAFKA_BASE_PORT (default 39092)
# Needs the Python venv (.venv, scripts/test-deps.sh) and Java; fetches the Kafka 3.9 jars
# (scripts/kafka/fetch-kafka.sh). Writes OUT_DIR/results.tsv (round, build, consume seconds,
# vdl CPU seconds). A benchmark: it measures, it does not judge.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS="${1:?rounds}"
OUT="${2:?out dir}"
shift 2
(($# > 0)) || { echo "name at least one vdl binary" >&2; exit 2; }
TOPICS="${TOPICS:-1000}"
RECORDS_PER_TOPIC="${RECORDS_PER_TOPIC:-10}"
BASE="${KAFKA_BASE_PORT:-39092}"
PY="$REPO/.venv/bin/python"
LIBS="$("$REPO/scripts/kafka/fetch-kafka.sh" | tail -n 1)"
mkdir -p "$OUT"
printf 'round\tbuild\tconsume_s\tvdl_cpu_s\n' > "$OUT/results.tsv"

# CPU seconds (user + system) of the PIDs in $DATA/vdl*.pid.
vdl_cpu_s() {
  local total=0 pid ticks
  for f in "$DATA"/vdl*.pid; do
    pid="$(cat "$f")"
    ticks="$(awk '{print $14 + $15}' "/proc/$pid/stat")"
    total=$((total + ticks))
  done
  python3 -c "import os; print($total / os.sysconf('SC_CLK_TCK'))"
}

# Creates the topics and writes the records (confluent-kafka), waits until all are readable.
setup_topics() {
  "$PY" - "$1" "$TOPICS" "$RECORDS_PER_TOPIC" <<'EOF'
import sys, time
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, topics, per_topic = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = [f"mt-{i:05d}" for i in range(topics)]
admin = AdminClient({"bootstrap.servers": bootstrap})
for start in range(0, topics, 200):
    fs = admin.create_topics([NewTopic(n, 1, 3) for n in names[start:start + 200]])
    for f in fs.values():
        f.result(timeout=120)
p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
deadline = time.monotonic() + 300
for n in names:
    for r in range(per_topic):
        while True:
            try:
                p.produce(n, value=b"x" * 100, key=str(r).encode())
                break
            except BufferError:
                p.poll(0.1)
    p.poll(0)
left = p.flush(max(1, deadline - time.monotonic()))
assert left == 0, f"{left} records not delivered"
EOF
}

for ((round = 1; round <= ROUNDS; round++)); do
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    DATA="$(mktemp -d /tmp/vdl-fetch-many-XXXXXX)"
    export VDL_BIN="$bin" VDL_DATA_DIR="$DATA" VDL_KAFKA_BASE_PORT="$BASE" VDL_STREAMS=""
    # Room for the topics (kafka.max_topics defaults to 1,000).
    export VDL_EXTRA_CONFIG=$'[kafka]\nmax_topics = '"$((TOPICS + 10))"
    # The cluster goes whatever happens next.
    trap '"$REPO/deploy/local-cluster.sh" stop > /dev/null 2>&1 || true; rm -rf "$DATA"' EXIT
    "$REPO/deploy/local-cluster.sh" start > "$OUT/$round-vdl$i-start.log" 2>&1
    BOOTSTRAP="127.0.0.1:$BASE"
    setup_topics "$BOOTSTRAP"
    before="$(vdl_cpu_s)"
    t0="$(date +%s.%N)"
    java -Xshare:auto -XX:TieredStopAtLevel=1 -cp "$LIBS/*" \
      org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$BOOTSTRAP" \
      --include '^mt-.*' --from-beginning --group "fetch-many-$round-$i" \
      --max-messages $((TOPICS * RECORDS_PER_TOPIC)) --timeout-ms 300000 \
      > /dev/null 2> "$OUT/$round-vdl$i-consumer.log"
    t1="$(date +%s.%N)"
    after="$(vdl_cpu_s)"
    "$REPO/deploy/local-cluster.sh" stop > /dev/null 2>&1 || true
    rm -rf "$DATA"
    trap - EXIT
    line="$(python3 -c "print(f'$round\tvdl$i\t{$t1 - $t0:.2f}\t{$after - $before:.2f}')")"
    echo "$line" | tee -a "$OUT/results.tsv"
  done
done
