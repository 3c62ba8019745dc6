#!/usr/bin/env bash
# End-to-end check of the local Kafka 3.9 tooling: start a cluster, create a
# replicated topic, produce and consume a few messages with Kafka's own console
# tools, stop the cluster. Proves fetch-kafka.sh and kafka-cluster.sh work.
#
# Usage: scripts/kafka/smoke-test.sh [--brokers 1|3] [--fsync-every-message] [--base-port N]
# Uses a throwaway cluster dir under /tmp and removes it at the end.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BROKERS=3
BASE_PORT=19192
FSYNC_ARG=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --brokers) BROKERS="$2"; shift 2 ;;
    --base-port) BASE_PORT="$2"; shift 2 ;;
    --fsync-every-message) FSYNC_ARG=(--fsync-every-message); shift ;;
    *) echo "usage: $0 [--brokers 1|3] [--fsync-every-message] [--base-port N]" >&2; exit 2 ;;
  esac
done

DIR="$(mktemp -d /tmp/vdl-kafka-smoke.XXXXXX)"
CLUSTER="$SCRIPT_DIR/kafka-cluster.sh"
# Always stop what we started, even when a step fails.
trap '"$CLUSTER" stop --dir "$DIR" --clean >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT

CP="$("$SCRIPT_DIR/fetch-kafka.sh" | tail -n1)/*"
BS="$("$CLUSTER" start --brokers "$BROKERS" --base-port "$BASE_PORT" --dir "$DIR" "${FSYNC_ARG[@]}" | tail -n1)"
echo "bootstrap: $BS"
"$CLUSTER" create-topic smoke --rf "$BROKERS" --dir "$DIR"

LOG4J="-Dlog4j.configuration=file:$DIR/tools-log4j.properties"
N=5
for i in $(seq 1 $N); do echo "smoke-message-$i"; done |
  timeout 60 java -Xmx256m "$LOG4J" -cp "$CP" kafka.tools.ConsoleProducer \
    --bootstrap-server "$BS" --topic smoke --producer-property acks=all

OUT="$(timeout 60 java -Xmx256m "$LOG4J" -cp "$CP" org.apache.kafka.tools.consumer.ConsoleConsumer \
  --bootstrap-server "$BS" --topic smoke --from-beginning --max-messages $N --timeout-ms 30000 2>/dev/null)"
echo "$OUT"
GOT="$(grep -c '^smoke-message-' <<<"$OUT" || true)"
if [[ "$GOT" != "$N" ]]; then
  echo "FAIL: consumed $GOT of $N messages" >&2
  exit 1
fi
echo "OK: $BROKERS-broker cluster produced and consumed $N messages"
