#!/usr/bin/env bash
# The Java client test: starts a three-node vdl cluster (deploy/local-cluster.sh, free ports, a
# temporary data directory), runs tests/clients/java's ClientTest against it (Apache Kafka's
# Java client 3.9: default idempotent producer, consumer group with commitSync; then a 6-partition
# topic with keyed records, a two-member group and a rebalance, and CreatePartitions), then
# StaticMembership (a restarted static member takes its partition back without a rebalance, a
# duplicate is fenced, removal by instance id), stops the cluster by its PIDs. Exit status: 0
# when every test passed.
#
# Usage: tests/clients/run-java.sh            (env: VDL_BIN, default target/debug/vdl;
#                                              JAVA_TEST_MAIN: the test classes to run, default
#                                              "vdl.clients.ClientTest vdl.clients.StaticMembership"
#                                              (static membership, KIP-345);
#                                              VDL_KEEP=1 keeps the cluster's data and logs;
#                                              JAVA_TEST_RECORDS, default 500)
# Needs a JDK and Maven with the dependencies prefetched: scripts/test-deps.sh does both.
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

# 2. A cluster on free ports: a random Kafka base B with B..B+2, B+100.., B+200.. all closed.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
BASE=""
for _ in $(seq 1 100); do
  # Below the ephemeral range (32768+), where outgoing connections take their local ports.
  b=$((20000 + RANDOM % 10000)); ok=1
  for off in 0 100 200; do for i in 0 1 2; do port_open $((b + off + i)) && ok=0; done; done
  if [[ "$ok" == 1 ]]; then BASE="$b"; break; fi
done
[[ -n "$BASE" ]] || { echo "no free port range" >&2; exit 1; }
DATA="$(mktemp -d /tmp/vdl-java-test.XXXXXX)"
export VDL_DATA_DIR="$DATA" VDL_KAFKA_BASE_PORT="$BASE" VDL_BIN="${VDL_BIN:-$REPO/target/debug/vdl}"
export VDL_START_TIMEOUT=60
cleanup() {
  "$REPO/deploy/local-cluster.sh" stop >/dev/null 2>&1 || true
  if [[ "${VDL_KEEP:-0}" == 1 ]]; then echo "cluster data kept in $DATA" >&2; else rm -rf "$DATA"; fi
}
trap cleanup EXIT
# A SIGTERM (from `timeout` in scripts/test.sh) must still run cleanup: the nodes run in their own
# session (setsid) and would outlive us.
trap 'exit 143' TERM INT
BS="$("$REPO/deploy/local-cluster.sh" start 2>"$DATA/start.log" | tail -n1)" || { cat "$DATA/start.log" >&2; exit 1; }

# 3. The tests, one after the other on the same cluster, each bounded as a whole.
for main in ${JAVA_TEST_MAIN:-vdl.clients.ClientTest vdl.clients.StaticMembership}; do
  echo "java test: $main"
  timeout 240 java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
    -cp "$BUILD/classes:$CP" "$main" "$BS" "java-test-$BASE" "$N"
done
