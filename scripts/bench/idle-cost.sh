#!/usr/bin/env bash
# Idle cost of partitions: starts a local vdl cluster (deploy/local-cluster.sh), creates
# TOPICS topics of PARTITIONS partitions each (AdminClient from the project's .venv, made by
# scripts/test-deps.sh), waits until every partition has a leader, lets it settle, then samples
# every node for SAMPLE_S seconds of idleness: CPU (utime+stime from /proc, as % of one core),
# threads, RSS (and its anonymous part), open descriptors and disk used. Prints one line per node and a JSON summary; stops the cluster.
#
# With FAILOVER=1 it then SIGKILLs node 1 and prints how long until every partition has a
# leader again, as node 2's Metadata says, a produce (acks=all) and read back on
# SAMPLE_PARTITIONS (100) partitions through the survivors, and when the new leaders were
# elected (their "became leader" log lines: percentiles and a count per second). With
# PERF_OUT=file it also samples node 2 with perf from the kill on (PERF_S seconds, default 8).
# Last, the survivors' CPU while node 1 stays down (AFTER_SAMPLE_S seconds, default 10).
#
# With KAFKA=1 the same is measured on a local 3-broker Apache Kafka 3.9 cluster instead
# (scripts/kafka/kafka-cluster.sh, KRaft, every broker also a controller, heap KAFKA_HEAP,
# default "-Xms1g -Xmx1g"; brokers 0-2 on KAFKA_BASE_PORT 29092-29094, broker 0 is the one
# killed); the election log analysis and perf are vdl's only.
#
# Usage: scripts/bench/idle-cost.sh            (env: VDL_BIN, default target/release/vdl;
#        TOPICS=100 PARTITIONS=10 SETTLE_S=20 SAMPLE_S=60 FAILOVER=0 VDL_KAFKA_BASE_PORT=24092
#        KAFKA=0 KAFKA_BASE_PORT=29092 KAFKA_HEAP="-Xms1g -Xmx1g")
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

# The cluster under test: its node ids (`ids`), and per node its process id, name and data
# directory; `victim` is the node FAILOVER kills, `survivor` a bootstrap address without it.
if [[ "${KAFKA:-0}" == 1 ]]; then
  KAFKA_BASE_PORT="${KAFKA_BASE_PORT:-29092}"
  KDIR="$VDL_DATA_DIR/kafka"
  kcluster() { "$REPO/scripts/kafka/kafka-cluster.sh" "$@"; }
  cleanup() { kcluster stop --dir "$KDIR" --clean >/dev/null 2>&1 || true; }
  trap cleanup EXIT
  "$REPO/scripts/kafka/fetch-kafka.sh" >/dev/null
  kcluster start --brokers 3 --base-port "$KAFKA_BASE_PORT" --dir "$KDIR" \
    --heap "${KAFKA_HEAP:--Xms1g -Xmx1g}" >/dev/null
  bootstrap="$(kcluster bootstrap --dir "$KDIR")"
  ids=(0 1 2)
  pid_of() { cat "$KDIR/broker-$1/pid"; }
  name_of() { echo "kafka$1"; }
  data_of() { echo "$KDIR/broker-$1"; }
  victim=0
  survivor="127.0.0.1:$((KAFKA_BASE_PORT + 1))"
else
  cleanup() { VDL_CLEAN=1 "$REPO/deploy/local-cluster.sh" stop >/dev/null 2>&1 || true; }
  trap cleanup EXIT
  bootstrap="$("$REPO/deploy/local-cluster.sh" start | tail -n 1)"
  nodes=$(ls "$VDL_DATA_DIR"/vdl*.pid | wc -l)
  ids=($(seq 1 "$nodes"))
  pid_of() { cat "$VDL_DATA_DIR/vdl$1.pid"; }
  name_of() { echo "vdl$1"; }
  data_of() { echo "$VDL_DATA_DIR/vdl$1"; }
  victim=1
  survivor="127.0.0.1:$((VDL_KAFKA_BASE_PORT + 1))"
fi

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
for i in "${ids[@]}"; do
  cpu0[$i]=$(awk '{print $14 + $15}' "/proc/$(pid_of "$i")/stat")
done
sleep "$SAMPLE_S"
json="["
for i in "${ids[@]}"; do
  pid=$(pid_of "$i")
  cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  cpu_pct=$(echo "scale=2; 100 * ($cpu1 - ${cpu0[$i]}) / $hz / $SAMPLE_S" | bc)
  threads=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status")
  rss_mb=$(awk '/^VmRSS:/ {printf "%.0f", $2 / 1024}' "/proc/$pid/status")
  anon_mb=$(awk '/^RssAnon:/ {printf "%.0f", $2 / 1024}' "/proc/$pid/status")
  fds=$(ls "/proc/$pid/fd" | wc -l)
  disk_mb=$(du -sm "$(data_of "$i")" | cut -f1)
  echo "$(name_of "$i"): cpu ${cpu_pct}% of a core, threads $threads, rss ${rss_mb} MB (anonymous ${anon_mb} MB), open descriptors $fds, disk ${disk_mb} MB" >&2
  json+="${i:+}{\"node\":$i,\"cpu_pct\":$cpu_pct,\"threads\":$threads,\"rss_mb\":$rss_mb,\"anon_rss_mb\":$anon_mb,\"fds\":$fds,\"disk_mb\":$disk_mb},"
done
echo "${json%,}]"

if [[ "${FAILOVER:-0}" == 1 ]]; then
  if [[ -n "${PERF_OUT:-}" && "${KAFKA:-0}" != 1 ]]; then
    # Where a survivor's CPU goes during the failover: node 2 sampled for PERF_S (8) seconds
    # from just before the kill (perf report -i "$PERF_OUT").
    perf record -F 499 -g -o "$PERF_OUT" -p "$(cat "$VDL_DATA_DIR/vdl2.pid")" -- sleep "${PERF_S:-8}" \
      >/dev/null 2>&1 &
    sleep 0.5
  fi
  killed_at=$(date +%s.%N)
  kill -9 "$(pid_of "$victim")"
  "$PY" - "$survivor" "$TOPICS" "$PARTITIONS" "$victim" "$(name_of "$victim")" <<'PYEOF'
import sys, time
from confluent_kafka.admin import AdminClient
bootstrap, topics, partitions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
victim, victim_name = int(sys.argv[4]), sys.argv[5]
start = time.monotonic()
a = AdminClient({"bootstrap.servers": bootstrap})
names = [f"idle-{i}" for i in range(topics)]
led = 0
while time.monotonic() - start < 120:
    md = a.list_topics(timeout=30)
    led = sum(1 for n in names if n in md.topics
              for p in md.topics[n].partitions.values() if p.leader not in (-1, victim))
    if led == topics * partitions:
        break
    time.sleep(0.05)
print(f"after SIGKILL of {victim_name}: {led} of {topics * partitions} partitions led by the others "
      f"{time.monotonic() - start:.2f} s later", file=sys.stderr)
PYEOF
  # A produce/consume round trip on a sample of partitions through the survivors.
  "$PY" - "$survivor" "$TOPICS" "$PARTITIONS" "${SAMPLE_PARTITIONS:-100}" <<'PYEOF'
import random, sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
bootstrap, topics, partitions, sample = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(7)
chosen = rng.sample([(f"idle-{t}", p) for t in range(topics) for p in range(partitions)],
                    min(sample, topics * partitions))
start = time.monotonic()
p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
acked = []
for topic, part in chosen:
    p.produce(topic, value=f"after-failover {topic} {part}".encode(), partition=part,
              on_delivery=lambda err, m: acked.append((m.topic(), m.partition(), m.offset())) if err is None else None)
p.flush(60)
produced = time.monotonic()
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle-cost-sample",
              "enable.auto.commit": False})
c.assign([TopicPartition(t, part, off) for t, part, off in acked])
want, got = len(acked), 0
deadline = time.monotonic() + 60
while got < want and time.monotonic() < deadline:
    m = c.poll(1.0)
    if m is not None and m.error() is None and m.value().startswith(b"after-failover"):
        got += 1
c.close()
print(f"after failover: {len(acked)} of {len(chosen)} sampled partitions acknowledged a produce "
      f"(acks=all) in {produced - start:.2f} s; {got} of them read back in "
      f"{time.monotonic() - produced:.2f} s", file=sys.stderr)
PYEOF
  # What the survivors cost while node 1 stays down: CPU over AFTER_SAMPLE_S (10) seconds,
  # after 10 s for the groups to settle (quiesce again, where they can).
  sleep 10
  after_s="${AFTER_SAMPLE_S:-10}"
  declare -A after0
  survivors=()
  for i in "${ids[@]}"; do [[ "$i" == "$victim" ]] || survivors+=("$i"); done
  for i in "${survivors[@]}"; do
    after0[$i]=$(awk '{print $14 + $15}' "/proc/$(pid_of "$i")/stat")
  done
  sleep "$after_s"
  for i in "${survivors[@]}"; do
    pid=$(pid_of "$i")
    cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    echo "$(name_of "$i") with $(name_of "$victim") down: cpu $(echo "scale=2; 100 * ($cpu1 - ${after0[$i]}) / $hz / $after_s" | bc)% of a core, open descriptors $(ls "/proc/$pid/fd" | wc -l)" >&2
  done
  # Where the time went: each new leader logs "became leader" (one line per partition); their
  # times after the kill, and when the survivors first reported node 1 down.
  [[ "${KAFKA:-0}" == 1 ]] && exit 0
  "$PY" - "$killed_at" "$VDL_DATA_DIR" "$nodes" <<'PYEOF'
import datetime, re, sys
killed_at, data_dir, nodes = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
stamp = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")
ansi = re.compile(r"\x1b\[[0-9;]*m")
def seconds_after_kill(line):
    m = stamp.search(line)
    if not m:
        return None
    t = datetime.datetime.fromisoformat(m.group(1)[:26]).replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() - killed_at
elected, down = [], []
for i in range(2, nodes + 1):
    for line in open(f"{data_dir}/vdl{i}.log", errors="replace"):
        line = ansi.sub("", line)
        if "became leader" not in line and "waking its groups" not in line:
            continue
        s = seconds_after_kill(line)
        if s is None or s < 0:
            continue
        (elected if "became leader" in line else down).append(s)
elected.sort()
if elected:
    q = lambda f: elected[min(len(elected) - 1, int(f * len(elected)))]
    print(f"elections after the kill: {len(elected)}; done at p50 {q(0.5):.2f} s, p90 {q(0.9):.2f} s, "
          f"p99 {q(0.99):.2f} s, last {elected[-1]:.2f} s; first {elected[0]:.2f} s", file=sys.stderr)
    per_s = {}
    for s in elected:
        per_s[int(s)] = per_s.get(int(s), 0) + 1
    print("elections per second after the kill: " + ", ".join(f"{k}s:{v}" for k, v in sorted(per_s.items())), file=sys.stderr)
if down:
    print(f"node 1 reported down by liveness at {min(down):.2f} s", file=sys.stderr)
PYEOF
fi
