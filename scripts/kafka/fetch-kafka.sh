#!/usr/bin/env bash
# Materialize Apache Kafka 3.9 or 4.x (broker + tools + Java client) from Maven Central
# into a local cache folder, so we can run a real Kafka next to vdl for
# benchmarks and for capturing golden protocol frames.
#
# Usage: scripts/kafka/fetch-kafka.sh [--print-only]
#   env: VDL_CACHE_DIR   cache root (default: $REPO/.cache); jars go to
#                        $VDL_CACHE_DIR/kafka-3.9/libs
#        KAFKA_VERSION   Kafka version to fetch (default 3.9.2, newest 3.9.x
#                        on Maven Central when this was written; 4.1.1 for the
#                        Kafka 4 brokers: jars into .../kafka-4.1/libs)
#        SCALA_VERSION   Scala binary version of the kafka_* artifact (2.13)
# Prints the libs directory on stdout (last line). Idempotent: if the libs
# dir already holds a complete download (marker file), nothing is fetched.
#
# Why Maven and not the binary tarball: the only network we can rely on is
# the package registries, and Maven Central carries every jar a broker needs.
set -euo pipefail

usage() { echo "usage: $0 [--print-only]   (env: VDL_CACHE_DIR, KAFKA_VERSION)" >&2; }

PRINT_ONLY=0
for a in "$@"; do
  case "$a" in
    --print-only) PRINT_ONLY=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
KAFKA_VERSION="${KAFKA_VERSION:-3.9.2}"
SCALA_VERSION="${SCALA_VERSION:-2.13}"
# Keep the "kafka-3.9" folder name stable across 3.9.x patch versions so other
# scripts can find it; the exact version is recorded in the marker file.
KAFKA_MINOR="$(echo "$KAFKA_VERSION" | cut -d. -f1,2)"
if [[ -n "${VDL_CACHE_DIR:-}" ]]; then
  BASE="$VDL_CACHE_DIR/kafka-$KAFKA_MINOR"
else
  BASE="$REPO/.cache/kafka-$KAFKA_MINOR"
fi
LIBS="$BASE/libs"
MARKER="$LIBS/.complete-$KAFKA_VERSION"

if [[ "$PRINT_ONLY" == 1 ]]; then echo "$LIBS"; exit 0; fi

if [[ -f "$MARKER" ]]; then
  echo "$LIBS"
  exit 0
fi

# A fresh machine may have neither a JDK nor Maven; Debian packages are
# reachable, so install them from there (we run as root on dev/CI machines).
need_pkgs=()
command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 || need_pkgs+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_pkgs+=(maven)
if (( ${#need_pkgs[@]} )); then
  echo "installing ${need_pkgs[*]} via apt-get" >&2
  SUDO=""; [[ "$(id -u)" == 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >&2
fi

mkdir -p "$BASE"
POM="$BASE/pom.xml"
# A throwaway pom whose only job is to list the runtime artifacts; Maven then
# resolves the transitive closure for us (scala-library, jackson, zstd, ...).
# Modules listed explicitly because kafka_2.13's pom marks some of them as
# runtime-only or leaves them out (tools, log4j binding).
KAFKA_MAJOR="${KAFKA_MINOR%%.*}"
if ((KAFKA_MAJOR >= 4)); then
  # Kafka 4.x: the broker's code is split over more modules (the coordinators'
  # common runtime, the share coordinator), and it logs through slf4j -> log4j2
  # (the log4j 1.2 binding is gone).
  EXTRA_DEPS='
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-group-coordinator-api</artifactId><version>${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-coordinator-common</artifactId><version>${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-share-coordinator</artifactId><version>${kafka.version}</version></dependency>
    <!-- Kafka 4.x logs through slf4j -> log4j2. -->
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>'
else
  EXTRA_DEPS='
    <!-- Kafka 3.x logs through slf4j -> reload4j (log4j 1.2 API). -->
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
    <dependency><groupId>ch.qos.reload4j</groupId><artifactId>reload4j</artifactId><version>1.2.25</version></dependency>'
fi
cat >"$POM" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>vdl.local</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <properties><kafka.version>$KAFKA_VERSION</kafka.version></properties>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_$SCALA_VERSION</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-server</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-server-common</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage-api</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-raft</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-metadata</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-group-coordinator</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-transaction-coordinator</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>\${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools-api</artifactId><version>\${kafka.version}</version></dependency>$EXTRA_DEPS
  </dependencies>
</project>
EOF

TMP_LIBS="$BASE/libs.tmp.$$"
rm -rf "$TMP_LIBS"
# Bounded: a stuck download should not hang a caller forever.
# (Maven 3.8 prints bare ANSI resets even in batch mode: strip them.)
timeout 900 mvn -B -q -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
  -DoutputDirectory="$TMP_LIBS" -DincludeScope=runtime 2>&1 | sed 's/\x1b\[[0-9;]*m//g' >&2
# Swap in atomically-ish so a half-finished download never looks complete.
rm -rf "$LIBS"
mv "$TMP_LIBS" "$LIBS"
echo "$KAFKA_VERSION" >"$LIBS/.version"
touch "$MARKER"
echo "$LIBS"
