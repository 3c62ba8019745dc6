#!/usr/bin/env bash
# The Java client tests: starts a three-node vdl cluster (deploy/local-cluster.sh, free ports, a
# temporary data directory), runs tests/clients/java's test classes against it one after the
# other, stops the cluster by its PIDs; then starts a three-node Apache Kafka 3.9 cluster
# (scripts/kafka/kafka-cluster.sh, jars from scripts/kafka/fetch-kafka.sh) and runs the
# ecosystem tests (Kafka Connect, Kafka Streams) against it too, so a difference between vdl and
# Kafka shows as a test failing against one of them; then a three-node Apache Kafka 4.1 cluster
# (the same scripts, version 4.1.1) for the consumer group protocol test. Exit status: 0 when every test passed
# against every target; every test runs even when an earlier one failed.
#
# Against vdl (JAVA_TEST_MAIN, default all ten): ClientTest (Apache Kafka's Java client 3.9:
# default idempotent producer, consumer group with commitSync; then a 6-partition topic with
# keyed records, a two-member group and a rebalance, and CreatePartitions), StaticMembership (a
# restarted static member takes its partition back without a rebalance, a duplicate is fenced,
# removal by instance id), TransactionsTest (a transactional producer commits and aborts,
# read_committed and read_uncommitted consumers, Admin list/describeTransactions, fencing by a
# second producer of the transactional id, and the transaction version in use: the 3.9 client
# keeps epoch 0 (version 1), the 4.1.1 client bumps it per transaction on vdl (version 2)),
# k4:vdl.clients.TransactionsTest (the same class
# compiled against and run with the Kafka 4.1.1 Java client), StreamsEosTest (Kafka Streams 3.9
# exactly_once_v2: a count's output exactly once read_committed across an instance that halts
# mid-transaction), ConnectEosTest (Connect 3.9 with exactly.once.source.support=enabled,
# FileStreamSource with exactly.once.support=required: every line exactly once read_committed
# across a worker killed mid-stream), go:txn (tests/clients/go/txn, franz-go's
# GroupTransactSession ETL: each input exactly once in the output read_committed, across an
# abort, a rebalance and a worker that dies mid-transaction), ConnectDistributedTest (Kafka Connect 3.9 distributed, default
# compacted internal topics, file source and sink, a worker restart resumes at the committed
# offset; the vdl cluster runs its log cleaner every 500 ms and the test waits for it to
# compact), StreamsKTableTest (Kafka Streams 3.9, a KTable count, its compacted changelog, a
# restore into a fresh state directory), DebeziumPostgresTest (Debezium 3.6.1's PostgreSQL
# connector on Connect 3.9 distributed, from a plugin.path directory made here from
# java/debezium/pom.xml; a PostgreSQL server the test starts itself: snapshot, c/u/d and
# tombstones per key, a worker restart resumes from the stored offset),
# k4:vdl.clients.ConsumerProtocolTest (the Java client 4.1.1 with group.protocol=consumer, KIP-848:
# members join and leave a 6-partition group while records flow, every record processed once,
# only the moved partitions revoked, describe/listGroups show a CONSUMER group, uniform and range
# assignors; then the coordinator, the metadata leader, is SIGKILLed and restarted:
# -Dvdl.failover.kill/-Dvdl.failover.restart, and the members keep their partitions).
# Against Kafka (JAVA_TEST_KAFKA_MAIN, default TransactionsTest, StreamsEosTest, ConnectEosTest,
# go:txn, ConnectDistributedTest, StreamsKTableTest; k4:vdl.clients.TransactionsTest and
# DebeziumPostgresTest run there too when named: both passed there, and would add 20-70 s to
# every run).
# Against Kafka 4.1 (JAVA_TEST_KAFKA4_MAIN, default k4:vdl.clients.ConsumerProtocolTest, with the
# coordinator-failover part: the coordinator broker is SIGKILLed and not restarted, so that test
# runs last there).
#
# Usage: tests/clients/run-java.sh            (env: VDL_BIN, default target/debug/vdl;
#                                              JAVA_TEST_TARGETS: "vdl kafka kafka4"
#                                              (default), or any of them, e.g. "kafka4";
#                                              JAVA_TEST_MAIN / JAVA_TEST_KAFKA_MAIN /
#                                              JAVA_TEST_KAFKA4_MAIN: the test
#                                              classes, e.g. vdl.clients.StaticMembership;
#                                              VDL_KEEP=1 keeps the clusters' data and logs;
#                                              JAVA_TEST_RECORDS, default 500)
# Needs a JDK and Maven with the dependencies prefetched (3.9.2 and, for k4:, 4.1.1), the Kafka
# 3.9 and 4.1 jars, PostgreSQL's server (Debian's postgresql) and, for go:txn, Go >= 1.26 with franz-go
# prefetched: scripts/test-deps.sh does all but install Go.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PROJ="$REPO/tests/clients/java"
BUILD="$PROJ/target"
N="${JAVA_TEST_RECORDS:-500}"

# 1. Class path from Maven (offline: test-deps.sh prefetched it; online only as a fallback),
#    and compile with javac: quicker than a full `mvn package` and needs no further plugins.
mkdir -p "$BUILD"
# The class path is cached next to the hash of the pom it came from (Maven costs a JVM start).
POM_SHA="$(sha256sum "$PROJ/pom.xml" | cut -c1-16)"
cp_valid() {
  [[ -f "$BUILD/classpath.txt" && "$(cat "$BUILD/classpath.pom" 2>/dev/null)" == "$POM_SHA" ]] || return 1
  local jar
  while IFS= read -r -d: jar; do [[ -f "$jar" ]] || return 1; done < <(cat "$BUILD/classpath.txt"; echo :)
}
if cp_valid; then
  :
elif ! mvn -B -q -o -f "$PROJ/pom.xml" dependency:build-classpath -Dmdep.outputFile="$BUILD/classpath.txt" >"$BUILD/mvn.log" 2>&1; then
  echo "Maven dependencies not prefetched (run scripts/test-deps.sh); resolving them now" >&2
  timeout 300 mvn -B -q -Dstyle.color=never -f "$PROJ/pom.xml" dependency:build-classpath -Dmdep.outputFile="$BUILD/classpath.txt" 2>&1 | sed "s/\x1b\[[0-9;]*m//g" >&2
fi
echo "$POM_SHA" >"$BUILD/classpath.pom"
CP="$(cat "$BUILD/classpath.txt")"
rm -rf "$BUILD/classes"
javac --release 17 -d "$BUILD/classes" -cp "$CP" "$PROJ"/src/main/java/vdl/clients/*.java

TARGETS="${JAVA_TEST_TARGETS:-vdl kafka kafka4}"
EOS_TESTS="vdl.clients.StreamsEosTest vdl.clients.ConnectEosTest go:txn"
ALL_TESTS="vdl.clients.ClientTest vdl.clients.StaticMembership vdl.clients.TransactionsTest k4:vdl.clients.TransactionsTest k4:vdl.clients.ConsumerProtocolTest $EOS_TESTS vdl.clients.ConnectDistributedTest vdl.clients.StreamsKTableTest vdl.clients.DebeziumPostgresTest"
ECOSYSTEM_TESTS="vdl.clients.TransactionsTest $EOS_TESTS vdl.clients.ConnectDistributedTest vdl.clients.StreamsKTableTest"
VDL_TESTS="${JAVA_TEST_MAIN:-$ALL_TESTS}"
KAFKA_TESTS="${JAVA_TEST_KAFKA_MAIN:-$ECOSYSTEM_TESTS}"
KAFKA4_TESTS="${JAVA_TEST_KAFKA4_MAIN:-k4:vdl.clients.ConsumerProtocolTest}"
RUNNING=""
[[ " $TARGETS " == *" vdl "* ]] && RUNNING+=" $VDL_TESTS"
[[ " $TARGETS " == *" kafka "* ]] && RUNNING+=" $KAFKA_TESTS"
[[ " $TARGETS " == *" kafka4 "* ]] && RUNNING+=" $KAFKA4_TESTS"

# 1b. DebeziumPostgresTest's plugin directory, when that test is to run: the jars of
#     java/debezium/pom.xml's class path (Debezium's PostgreSQL connector; offline once
#     test-deps.sh prefetched it) copied into $BUILD/connect-plugins/debezium-postgres, the
#     worker's plugin.path, cached by that pom's hash; and the PostgreSQL server binaries
#     (Debian's postgresql package: the newest /usr/lib/postgresql/*/bin).
JAVA_PROPS=()
if [[ "$RUNNING" == *DebeziumPostgresTest* ]]; then
  DBZ_POM="$PROJ/debezium/pom.xml"
  DBZ_SHA="$(sha256sum "$DBZ_POM" | cut -c1-16)"
  PLUGINS="$BUILD/connect-plugins"
  if [[ "$(cat "$PLUGINS/.pom" 2>/dev/null)" != "$DBZ_SHA" ]]; then
    rm -rf "$PLUGINS"
    mkdir -p "$PLUGINS/debezium-postgres"
    if ! mvn -B -q -o -f "$DBZ_POM" dependency:build-classpath -Dmdep.outputFile="$BUILD/debezium-classpath.txt" >"$BUILD/mvn-debezium.log" 2>&1; then
      echo "Debezium's Maven artifacts not prefetched (run scripts/test-deps.sh); resolving them now" >&2
      timeout 300 mvn -B -q -Dstyle.color=never -f "$DBZ_POM" dependency:build-classpath -Dmdep.outputFile="$BUILD/debezium-classpath.txt" 2>&1 | sed "s/\x1b\[[0-9;]*m//g" >&2
    fi
    tr ':' '\n' <"$BUILD/debezium-classpath.txt" | xargs -r cp -t "$PLUGINS/debezium-postgres"
    echo "$DBZ_SHA" >"$PLUGINS/.pom"
  fi
  PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)"
  [[ -x "$PG_BIN/initdb" ]] || { echo "no PostgreSQL server binaries (run scripts/test-deps.sh)" >&2; exit 1; }
  JAVA_PROPS=("-Dvdl.pg.bin=$PG_BIN" "-Dvdl.debezium.plugin.path=$PLUGINS")
fi

# 1b'. k4:CLASS, a class run with Apache Kafka's Java client 4.1.1 instead of 3.9 (the same pom
#      with -Dkafka.version=4.1.1, prefetched by test-deps.sh; only that class and what it uses
#      compiled, into $BUILD/classes-4). Classes that need the 4.x client's API live in
#      java/src/k4/java (outside Maven's and the 3.9 compile's source tree).
CP4=""
if [[ "$RUNNING" == *k4:* ]]; then
  mvn -B -q -o -f "$PROJ/pom.xml" -Dkafka.version=4.1.1 dependency:build-classpath \
    -Dmdep.outputFile="$BUILD/classpath-4.txt" >"$BUILD/mvn-4.log" 2>&1 ||
    { echo "the Kafka 4.1.1 client's Maven artifacts are not prefetched (run scripts/test-deps.sh)" >&2; cat "$BUILD/mvn-4.log" >&2; exit 1; }
  CP4="$(cat "$BUILD/classpath-4.txt")"
  rm -rf "$BUILD/classes-4"
  K4_SOURCES=()
  for main in $RUNNING; do
    src="$PROJ/src/k4/java/$(echo "${main#k4:}" | tr . /).java"
    [[ -f "$src" ]] || src="$PROJ/src/main/java/$(echo "${main#k4:}" | tr . /).java"
    [[ "$main" == k4:* && " ${K4_SOURCES[*]-} " != *" $src "* ]] && K4_SOURCES+=("$src")
  done
  javac --release 17 -nowarn -d "$BUILD/classes-4" -cp "$CP4" -sourcepath "$PROJ/src/k4/java:$PROJ/src/main/java" "${K4_SOURCES[@]}"
fi

# 1c. go:txn, franz-go's GroupTransactSession ETL (tests/clients/go/txn), when it is to run:
#     built once with `go build -mod=readonly` (its modules prefetched by test-deps.sh; Go >=
#     1.26, `go` on PATH or /usr/local/go/bin/go).
GO_TXN=""
if [[ "$RUNNING" == *go:txn* ]]; then
  GO_BIN="$(command -v go || true)"
  [[ -z "$GO_BIN" && -x /usr/local/go/bin/go ]] && GO_BIN=/usr/local/go/bin/go
  [[ -n "$GO_BIN" ]] || { echo "no Go toolchain (go on PATH or /usr/local/go/bin/go) for go:txn" >&2; exit 1; }
  GO_TXN="$BUILD/go-txn"
  (cd "$REPO/tests/clients/go/txn" && timeout 300 "$GO_BIN" build -mod=readonly -o "$GO_TXN" .)
fi

FAILED=()

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# A base port B with B+off+0..2 closed for every offset given, between LOW and HIGH (below the
# ephemeral range, 32768+, where outgoing connections take their local ports). With
# VDL_TEST_LANE=k/2 (scripts/test.sh runs this next to a pytest lane) only in the k-th half,
# less its top 300 ports: the slice tests/clients/lanes.py gives that lane, so the two never
# probe the same ports.
free_base() {
  local low="$1" high="$2"; shift 2
  local b ok off i
  if [[ "${VDL_TEST_LANE:-}" =~ ^([12])/2$ ]]; then
    local width=$(((high - low) / 2))
    low=$((low + (BASH_REMATCH[1] - 1) * width)); high=$((low + width - 300))
  fi
  for _ in $(seq 1 100); do
    b=$((low + RANDOM % (high - low))); ok=1
    for off in "$@"; do for i in 0 1 2; do port_open $((b + off + i)) && ok=0; done; done
    if [[ "$ok" == 1 ]]; then echo "$b"; return 0; fi
  done
  echo "no free port range" >&2; return 1
}

# Runs each test class in $1 against bootstrap $2 (names prefixed with $3), extra JVM flags after.
run_tests() {
  local tests="$1" bs="$2" prefix="$3" main; shift 3
  for main in $tests; do
    echo "java test ($TARGET): $main (at ${SECONDS}s)"
    if [[ "$main" == go:txn ]]; then
      if ! timeout 200 nice -n 10 "$GO_TXN" -bootstrap "$bs" -prefix "$prefix-franz-txn" -n 200 -timeout 180s; then
        echo "java test ($TARGET): $main FAILED" >&2
        FAILED+=("$TARGET:$main")
      fi
      continue
    fi
    local cp="$BUILD/classes:$CP" class="$main" name="$prefix"
    if [[ "$main" == k4:* ]]; then cp="$BUILD/classes-4:$CP4" class="${main#k4:}" name="$prefix-k4"; fi
    if ! timeout 240 nice -n 10 java -Xmx384m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn "$@" ${JAVA_PROPS[@]+"${JAVA_PROPS[@]}"} \
      -cp "$cp" "$class" "$bs" "$name" "$N"; then
      echo "java test ($TARGET): $main FAILED" >&2
      FAILED+=("$TARGET:$main")
    fi
  done
}

KEEP="${VDL_KEEP:-0}"
VDL_DATA="" KAFKA_DATA=""
cleanup() {
  if [[ -n "$VDL_DATA" ]]; then
    VDL_DATA_DIR="$VDL_DATA" "$REPO/deploy/local-cluster.sh" stop >/dev/null 2>&1 || true
    if [[ "$KEEP" == 1 ]]; then echo "vdl cluster data kept in $VDL_DATA" >&2; else rm -rf "$VDL_DATA"; fi
    VDL_DATA=""
  fi
  if [[ -n "$KAFKA_DATA" ]]; then
    KAFKA_STOP_TIMEOUT=20 "$REPO/scripts/kafka/kafka-cluster.sh" stop --dir "$KAFKA_DATA" >/dev/null 2>&1 || true
    if [[ "$KEEP" == 1 ]]; then echo "kafka cluster data kept in $KAFKA_DATA" >&2; else rm -rf "$KAFKA_DATA"; fi
    KAFKA_DATA=""
  fi
}
trap cleanup EXIT
# A SIGTERM (from `timeout` in scripts/test.sh) must still run cleanup: the nodes run in their own
# session (setsid) and would outlive us.
trap 'exit 143' TERM INT

# 2. vdl: a cluster on free ports (Kafka base B: B..B+2, peers B+100.., admin B+200..), with
#    a log cleaner that runs every 500 ms and segment.ms checked as often, so the Connect test
#    sees its internal topics compacted within seconds.
if [[ " $TARGETS " == *" vdl "* ]]; then
  TARGET=vdl
  BASE="$(free_base 20000 30000 0 100 200)"
  VDL_DATA="$(mktemp -d /tmp/vdl-java-test.XXXXXX)"
  # The start command in a script of its own: ConsumerProtocolTest's coordinator failover runs
  # it again to restart the node it killed (local-cluster.sh start restarts just the nodes that
  # are down, with their data).
  cat >"$VDL_DATA/start.sh" <<EOF
#!/usr/bin/env bash
export VDL_DATA_DIR="$VDL_DATA" VDL_KAFKA_BASE_PORT="$BASE" VDL_BIN="${VDL_BIN:-$REPO/target/debug/vdl}"
export VDL_START_TIMEOUT=60 VDL_EXTRA_CONFIG='[storage]
cleaner_backoff_ms = 500
retention_check_ms = 500

[kafka]
consumer_group_heartbeat_interval_ms = 1000'
exec "$REPO/deploy/local-cluster.sh" start
EOF
  # The failover's kill: SIGKILL node \$1 by the PID local-cluster.sh recorded, if that PID
  # still runs that node's config.
  cat >"$VDL_DATA/kill.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
pid="\$(cat "$VDL_DATA/vdl\$1.pid")"
tr '\0' ' ' <"/proc/\$pid/cmdline" | grep -qF -- "$VDL_DATA/vdl\$1.toml"
kill -KILL "\$pid"
EOF
  chmod +x "$VDL_DATA/start.sh" "$VDL_DATA/kill.sh"
  BS="$("$VDL_DATA/start.sh" 2>"$VDL_DATA/start.log" | tail -n1)" ||
    { cat "$VDL_DATA/start.log" >&2; exit 1; }
  METRICS="http://127.0.0.1:$((BASE + 200))/metrics,http://127.0.0.1:$((BASE + 201))/metrics,http://127.0.0.1:$((BASE + 202))/metrics"
  run_tests "$VDL_TESTS" "$BS" "java-test-$BASE" "-Dvdl.metrics=$METRICS" "-Dvdl.failover.kill=$VDL_DATA/kill.sh {id}" \
    "-Dvdl.failover.restart=$VDL_DATA/start.sh >$VDL_DATA/restart.log 2>&1 || { cat $VDL_DATA/restart.log >&2; exit 1; }"
  cleanup
fi

# 3. Apache Kafka 3.9, three KRaft nodes (clients on B..B+2, controllers on B+10..B+12).
if [[ " $TARGETS " == *" kafka "* ]]; then
  TARGET=kafka
  "$REPO/scripts/kafka/fetch-kafka.sh" >/dev/null
  BASE="$(free_base 12000 20000 0 10)"
  KAFKA_DATA="$(mktemp -d /tmp/vdl-java-kafka.XXXXXX)"
  BS="$(KAFKA_START_TIMEOUT=240 nice -n 10 "$REPO/scripts/kafka/kafka-cluster.sh" start --brokers 3 \
    --base-port "$BASE" --dir "$KAFKA_DATA" 2>"$KAFKA_DATA/start.log" | tail -n1)" ||
    { cat "$KAFKA_DATA/start.log" >&2; exit 1; }
  echo "kafka cluster ready at ${SECONDS}s: $BS"
  run_tests "$KAFKA_TESTS" "$BS" "java-test-$BASE"
  cleanup
fi

# 4. Apache Kafka 4.1, three KRaft nodes, for the consumer group protocol (KIP-848). The
#    coordinator-failover part SIGKILLs the coordinator broker (by the PID kafka-cluster.sh
#    recorded) and does not restart it: the cluster is stopped right after.
if [[ " $TARGETS " == *" kafka4 "* ]]; then
  TARGET=kafka4
  KAFKA_VERSION=4.1.1 "$REPO/scripts/kafka/fetch-kafka.sh" >/dev/null
  BASE="$(free_base 12000 20000 0 10)"
  KAFKA_DATA="$(mktemp -d /tmp/vdl-java-kafka4.XXXXXX)"
  BS="$(KAFKA_START_TIMEOUT=240 nice -n 10 "$REPO/scripts/kafka/kafka-cluster.sh" start --brokers 3 \
    --kafka-version 4.1.1 --base-port "$BASE" --dir "$KAFKA_DATA" 2>"$KAFKA_DATA/start.log" | tail -n1)" ||
    { cat "$KAFKA_DATA/start.log" >&2; exit 1; }
  echo "kafka 4.1 cluster ready at ${SECONDS}s: $BS"
  run_tests "$KAFKA4_TESTS" "$BS" "java-test-$BASE" \
    "-Dvdl.failover.kill=kill -KILL \$(cat $KAFKA_DATA/broker-{id}/pid)"
  cleanup
fi

if ((${#FAILED[@]})); then
  echo "java tests FAILED: ${FAILED[*]}" >&2
  exit 1
fi
echo "java tests passed (targets: $TARGETS) in ${SECONDS}s"
