#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain. Idempotent: each step checks
# first and does nothing when its tool is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# The toolchain components the gates use.
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# kcat (librdkafka's command-line client) for the Kafka client tests.
if ! command -v kcat >/dev/null 2>&1; then
  echo "installing kcat (Debian package)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq kcat
fi

# --- Real-client tests (tests/clients/) ---

# Debian packages, installed together with one apt-get update when any is missing: a JDK and
# Maven for the Java client test, iproute2 (`ip netns`) for the network-partition nemesis, curl
# for the secure local cluster's admin calls.
need_pkgs=()
command -v ip >/dev/null 2>&1 || need_pkgs+=(iproute2)
# libfaketime for the clock nemesis (one node's wall clock jumps).
compgen -G '/usr/lib/*/faketime/libfaketimeMT.so.1' >/dev/null || need_pkgs+=(faketime)
{ command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1; } || need_pkgs+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_pkgs+=(maven)
# curl: deploy/local-cluster.sh calls the HTTPS admin API of a VDL_SECURITY=sasl_ssl cluster with it.
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
# PostgreSQL's server (initdb, pg_ctl, psql under /usr/lib/postgresql/*/bin) for
# tests/clients/java's DebeziumPostgresTest, which starts a server of its own.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need_pkgs+=(postgresql)
if ((${#need_pkgs[@]})); then
  echo "installing ${need_pkgs[*]} (Debian packages)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}"
fi

# Python venv with librdkafka's Python client and pytest, pinned (versions on PyPI when this
# was written). Checked through importlib.metadata, so an up-to-date venv costs no pip run.
# kafka-python: the client family of tests/clients/test_compaction_gaps.py's kafka-python test.
PY_PKGS=(confluent-kafka==2.16.1 pytest==8.4.2 pytest-timeout==2.4.0 prometheus-client==0.26.0 kafka-python==3.0.12)
if [ ! -x .venv/bin/python ]; then
  echo "creating the Python venv .venv"
  if ! python3 -m venv .venv 2>/dev/null; then
    # Debian's python3 needs its venv module as a separate package.
    rm -rf .venv
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv
    python3 -m venv .venv
  fi
fi
if ! .venv/bin/python - "${PY_PKGS[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))
PY
then
  echo "installing ${PY_PKGS[*]} into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check "${PY_PKGS[@]}"
fi

# The Java tests' Maven artifacts (kafka-clients, connect-runtime, connect-file and kafka-streams
# 3.9.x; kafka-clients 4.1.1 for test_compaction_gaps.py's Java 4.x run; the dependency plugin),
# so the test never downloads mid-run: resolving offline succeeds once they are in ~/.m2.
# A stamp in ~/.m2 named after the pom's hash records a complete prefetch (asking Maven
# offline would cost a JVM start, ~6 s, on every run).
JAVA_POM=tests/clients/java/pom.xml
JAVA_KAFKA4=4.1.1
JAVA_STAMP="$HOME/.m2/.vdl-java-client-test-$(sha256sum "$JAVA_POM" | cut -c1-16)-k$JAVA_KAFKA4"
if [ ! -f "$JAVA_STAMP" ]; then
  echo "prefetching the Java client test's Maven dependencies"
  for v in "" "-Dkafka.version=$JAVA_KAFKA4"; do
    # Bounded; Maven 3.8 prints bare ANSI resets even in batch mode: strip them.
    timeout 600 mvn -B -q -Dstyle.color=never -f "$JAVA_POM" $v dependency:resolve dependency:build-classpath \
      -Dmdep.outputFile=/dev/null 2>&1 | sed 's/\x1b\[[0-9;]*m//g'
    # Proof that the test's own offline resolution now works.
    mvn -B -q -o -f "$JAVA_POM" $v dependency:build-classpath -Dmdep.outputFile=/dev/null >/dev/null 2>&1 ||
      { echo "the Java test's Maven dependencies ($v) do not resolve offline after prefetching" >&2; exit 1; }
  done
  touch "$JAVA_STAMP"
fi
# DebeziumPostgresTest's Connect plugin (tests/clients/java/debezium/pom.xml: Debezium's
# PostgreSQL connector and its run-time jars), prefetched the same way, with its own stamp.
DBZ_POM=tests/clients/java/debezium/pom.xml
DBZ_STAMP="$HOME/.m2/.vdl-debezium-plugin-$(sha256sum "$DBZ_POM" | cut -c1-16)"
if [ ! -f "$DBZ_STAMP" ]; then
  echo "prefetching Debezium's PostgreSQL connector (Maven)"
  timeout 600 mvn -B -q -Dstyle.color=never -f "$DBZ_POM" dependency:resolve dependency:build-classpath \
    -Dmdep.outputFile=/dev/null 2>&1 | sed 's/\x1b\[[0-9;]*m//g'
  mvn -B -q -o -f "$DBZ_POM" dependency:build-classpath -Dmdep.outputFile=/dev/null >/dev/null 2>&1 ||
    { echo "Debezium's Maven artifacts do not resolve offline after prefetching" >&2; exit 1; }
  touch "$DBZ_STAMP"
fi

# --- Admin-tooling tests (tests/clients/test_admin*.py, issue 11) ---

# Apache Kafka 3.9's jars (from Maven Central into .cache/kafka-3.9/libs): the admin tests run
# Kafka's own command-line tools from them, and with ADMIN_TEST_TARGET=kafka a Kafka cluster;
# tests/clients/run-java.sh runs its Connect and Streams tests against such a cluster too.
# Idempotent: a marker file records a complete download.
timeout 900 ./scripts/kafka/fetch-kafka.sh >/dev/null
# Apache Kafka 4.1's jars (.cache/kafka-4.1/libs): the consumer group protocol tests (KIP-848:
# tests/clients/test_consumer_protocol.py, run-java.sh's kafka4 target) run a Kafka 4.1 cluster
# next to vdl, and kafka-consumer-groups.sh's class from it.
KAFKA_VERSION=4.1.1 timeout 900 ./scripts/kafka/fetch-kafka.sh >/dev/null

# The Go programs' modules (franz-go and kadm; sarama; franz-go for the transactions ETL), so
# `go build` in the tests needs no network.
# Go >= 1.26 is needed (franz-go v1.22.3's go.mod); Debian's golang-go is older, so nothing is
# installed here: on a machine without Go the Go admin test fails and says so.
GO_BIN="$(command -v go || true)"
[[ -z "$GO_BIN" && -x /usr/local/go/bin/go ]] && GO_BIN=/usr/local/go/bin/go
if [[ -n "$GO_BIN" ]]; then
  (cd tests/clients/go/admin && timeout 300 "$GO_BIN" mod download)
  # sarama for test_compaction_gaps.py's sarama test.
  (cd tests/clients/go/sarama && timeout 300 "$GO_BIN" mod download)
  # franz-go for run-java.sh's go:txn (GroupTransactSession ETL); the same versions as admin's.
  (cd tests/clients/go/txn && timeout 300 "$GO_BIN" mod download)
else
  echo "no Go toolchain: tests/clients/test_admin_go.py (when the admin tests are on) and run-java.sh's go:txn will fail" >&2
fi
