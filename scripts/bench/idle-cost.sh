#!/usr/bin/env bash
# Idle cost of partitions: starts a local vdl cluster (deploy/local-cluster.sh), creates
# TOPICS topics of PARTITIONS partitions each (AdminClient from the project's .venv, made by
# scripts/test-deps.sh), waits until every partition has a leader, lets it settle, then samples
# every node for SAMPLE_S seconds of idleness: CPU (utime+stime from /proc, as % of one core),
# threads, RSS and disk used. Prints one line per node and a JSON summary; stops the cluster.
#
# With FAILOVER=1 it then SIGKILLs node 1 and prints how long until every partition has a
# leader again, as node 2's Metadata says.
#
# Usage: scripts/bench/idle-cost.sh            (env: VDL_BIN, default target/release/vdl;
#        TOPICS=100 PARTITIONS=10 SETTLE_S=20 SAMPLE_S=60 FAILOVER=0 VDL_KAFKA_BASE_PORT=24092)
# A benchmark, not a test: it measures, it does not pass or fail.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TOPICS="${TOPICS:-100}"
PARTITIONS="${PARTITIONS:-10}"
SETTLE_S="${SETTLE_S:-20}"
SAMPLE_S="${SAMPLE_S:-60}"
export VDL_BIN="${VDL_BIN:-$REPO/target/release/vdl}"
export VDL_KAFKA_BASE_PORT="${VDL_KAFKA_BASE_PORT:-24092}"
export VDL_DATA_DIR="${VDL_DATA_DIR:-$(mktemp -d /tmp/vdl-idle-XXXXXX)}"
export VDL_STREAMS="${VDL_STREAMS:-}"
PY="$REPO/.venv/bin/python"
[[ -x "$PY" ]] || { echo "no $PY: run scripts/test-deps.sh first" >&2; exit 2; }

cleanup() { VDL_CLEAN=1 "$REPO/deploy/local-cluster.sh" stop >/dev/null 2>&1 || true; }
trap cleanup EXIT
bootstrap="$("$REPO/deploy/local-cluster.sh" start | tail -n 1)"
nodes=$(ls "$VDL_DATA_DIR"/vdl*.pid | wc -l)

t0=$(date +%s.%N)
"$PY" - "$bootstrap" "$TOPICS" "$PARTITIONS" <<'PYEOF'
import sys, time
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, topics, partitions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
a = AdminClient({"bootstrap.servers": bootstrap})
names = [f"idle-{i}" for i in range(topics)]
for i in range(0, topics, 20):
    fs = a.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=-1)
                          for n in names[i:i + 20]], request_timeout=60)
    for f in fs.values():
        f.result(timeout=120)
created = time.monotonic()
deadline = created + 300
while time.monotonic() < deadline:
    md = a.list_topics(timeout=30)
    ok = sum(1 for n in names if n in md.topics
             for p in md.topics[n].partitions.values() if p.leader >= 0)
    if ok == topics * partitions:
        break
    time.sleep(0.5)
print(f"partitions with a leader: {ok} of {topics * partitions}", file=sys.stderr)
PYEOF
t1=$(date +%s.%N)
echo "created $TOPICS x $PARTITIONS partitions, all led, in $(echo "$t1 - $t0" | bc) s" >&2
sleep "$SETTLE_S"

hz=$(getconf CLK_TCK)
declare -A cpu0
for ((i = 1; i <= nodes; i++)); do
  pid=$(cat "$VDL_DATA_DIR/vdl$i.pid")
  cpu0[$i]=$(awk '{print $14 + $15}' "/proc/$pid/stat")
done
sleep "$SAMPLE_S"
json="["
for ((i = 1; i <= nodes; i++)); do
  pid=$(cat "$VDL_DATA_DIR/vdl$i.pid")
  cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  cpu_pct=$(echo "scale=2; 100 * ($cpu1 - ${cpu0[$i]}) / $hz / $SAMPLE_S" | bc)
  threads=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status")
  rss_mb=$(awk '/^VmRSS:/ {printf "%.0f", $2 / 1024}' "/proc/$pid/status")
  disk_mb=$(du -sm "$VDL_DATA_DIR/vdl$i" | cut -f1)
  echo "vdl$i: cpu ${cpu_pct}% of a core, threads $threads, rss ${rss_mb} MB, disk ${disk_mb} MB" >&2
  json+="${i:+}{\"node\":$i,\"cpu_pct\":$cpu_pct,\"threads\":$threads,\"rss_mb\":$rss_mb,\"disk_mb\":$disk_mb},"
done
echo "${json%,}]"

if [[ "${FAILOVER:-0}" == 1 ]]; then
  kill -9 "$(cat "$VDL_DATA_DIR/vdl1.pid")"
  "$PY" - "127.0.0.1:$((VDL_KAFKA_BASE_PORT + 1))" "$TOPICS" "$PARTITIONS" <<'PYEOF'
import sys, time
from confluent_kafka.admin import AdminClient
bootstrap, topics, partitions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
start = time.monotonic()
a = AdminClient({"bootstrap.servers": bootstrap})
names = [f"idle-{i}" for i in range(topics)]
led = 0
while time.monotonic() - start < 120:
    md = a.list_topics(timeout=30)
    led = sum(1 for n in names if n in md.topics
              for p in md.topics[n].partitions.values() if p.leader not in (-1, 1))
    if led == topics * partitions:
        break
    time.sleep(0.05)
print(f"after SIGKILL of vdl1: {led} of {topics * partitions} partitions led by vdl2/vdl3 "
      f"{time.monotonic() - start:.2f} s later", file=sys.stderr)
PYEOF
fi
