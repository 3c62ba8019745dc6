#!/usr/bin/env bash
# Measure Apache Kafka 3.9 with vdl-perf: start a 3-broker KRaft cluster on
# 127.0.0.1 in one durability mode, create the topic (RF 3, min.insync.replicas
# 2, 1 partition: vdl topics have one partition), run vdl-perf, stop and clean.
#
# Usage:
#   deploy/compare-kafka/run-suite.sh --mode default|fsync [--out DIR]
#                                     [--topic T] [--base-port N]
#                                     [--exec SHELL_CMD | -- VDL_PERF_ARGS...]
#
# Without VDL_PERF_ARGS it runs `vdl-perf suite --out DIR --label kafka-<mode>`.
# With them, it runs `vdl-perf VDL_PERF_ARGS --bootstrap <kafka>` (so any
# subcommand can be measured against a fresh cluster); the string @BOOTSTRAP@
# in the arguments is replaced by the bootstrap servers too.
# With --exec, SHELL_CMD runs in bash with BOOTSTRAP, TOPIC and VDL_PERF set
# (several vdl-perf runs against one cluster).
# VDL_PERF (env) is the binary to use (default: target/release/vdl-perf, built
# with `cargo build --release -p vdl-perf` if missing). KAFKA_EXTRA_PROPS (env) is
# a properties file appended to every broker's config (kafka-cluster.sh
# --extra-props). SHELL_CMD also gets CLUSTER_DIR (brokers' logs in
# CLUSTER_DIR/broker-<i>/logs, pids in CLUSTER_DIR/broker-<i>/pid).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
MODE=""
OUT=""
TOPIC="bench"
EXEC=""
BASE_PORT=19092
while [[ $# -gt 0 ]]; do
  case "$1" in
    --mode) MODE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --topic) TOPIC="$2"; shift 2 ;;
    --base-port) BASE_PORT="$2"; shift 2 ;;
    --exec) EXEC="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-suite: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$MODE" in
  default) FLAGS=() ;;
  fsync) FLAGS=(--fsync-every-message) ;;
  *) echo "run-suite: --mode default|fsync is required" >&2; exit 2 ;;
esac

VDL_PERF="${VDL_PERF:-$REPO/target/release/vdl-perf}"
if [[ ! -x "$VDL_PERF" ]]; then
  (cd "$REPO" && cargo build --release -p vdl-perf)
fi
[[ -d "$REPO/.cache/kafka-3.9/libs" ]] || "$REPO/scripts/kafka/fetch-kafka.sh"

DIR="$REPO/.cache/kafka-compare-$MODE"
CLUSTER="$REPO/scripts/kafka/kafka-cluster.sh"
"$CLUSTER" stop --dir "$DIR" --clean >/dev/null 2>&1 || true
cleanup() { "$CLUSTER" stop --dir "$DIR" --clean >/dev/null 2>&1 || true; }
trap cleanup EXIT

[[ -z "${KAFKA_EXTRA_PROPS:-}" ]] || FLAGS+=(--extra-props "$KAFKA_EXTRA_PROPS")
"$CLUSTER" start --brokers 3 "${FLAGS[@]}" --base-port "$BASE_PORT" --dir "$DIR" >&2
"$CLUSTER" create-topic "$TOPIC" --rf 3 --partitions 1 --min-isr 2 --dir "$DIR" >&2
BOOTSTRAP="$("$CLUSTER" bootstrap --dir "$DIR")"
echo "run-suite: Kafka 3.9, 3 brokers, mode $MODE, bootstrap $BOOTSTRAP, topic $TOPIC" >&2

if [[ -n "$EXEC" ]]; then
  CLUSTER_DIR="$DIR"
  export BOOTSTRAP TOPIC VDL_PERF CLUSTER_DIR
  bash -c "$EXEC"
  exit $?
fi
if [[ $# -eq 0 ]]; then
  set -- suite --out "${OUT:-$REPO/bench-reports/kafka-$MODE}" --label "kafka-$MODE"
fi
ARGS=()
for a in "$@"; do ARGS+=("${a//@BOOTSTRAP@/$BOOTSTRAP}"); done
"$VDL_PERF" "${ARGS[@]}" --bootstrap "$BOOTSTRAP" --topic "$TOPIC"
