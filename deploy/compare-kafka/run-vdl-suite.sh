#!/usr/bin/env bash
# Measure vdl with vdl-perf, the same way run-suite.sh measures Kafka: start a
# 3-node vdl cluster on 127.0.0.1 (three `vdl start --config` processes, fresh
# data dir, stream/topic created at start: 3 replicas, a produce is acknowledged
# after fsync on a majority), run vdl-perf, stop the nodes (by their PIDs) and
# delete the data.
#
# Usage:
#   deploy/compare-kafka/run-vdl-suite.sh [--out DIR] [--topic T] [--base-port N]
#                                         [--sync always|never|interval:MS]
#                                         [--exec SHELL_CMD | -- VDL_PERF_ARGS...]
#
# Ports: Kafka BASE..BASE+2 (default 29092), Raft peers BASE+100.., admin
# BASE+200... Without VDL_PERF_ARGS it runs
# `vdl-perf suite --out DIR --label vdl` (DIR default bench-reports/vdl).
# VDL (env) is the vdl binary (default target/release/vdl, built if missing),
# VDL_PERF the vdl-perf binary (default target/release/vdl-perf), VDL_COMPARE_DIR the
# nodes' data directory (default .cache/vdl-compare; removed before and after; on tmpfs an
# fsync costs nothing, which separates the disk's share of a figure from the rest).
# VDL_STORAGE_EXTRA (env): lines added to every node's [storage] section (e.g.
# `cleaner_backoff_ms = 1000`). SHELL_CMD also gets CLUSTER_DIR (node logs
# CLUSTER_DIR/vdl<i>.log), VDL_PIDS (the nodes' PIDs) and VDL_ADMIN (admin addresses).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
OUT=""
TOPIC="bench"
BASE=29092
SYNC="always"
EXEC=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --topic) TOPIC="$2"; shift 2 ;;
    --base-port) BASE="$2"; shift 2 ;;
    --sync) SYNC="$2"; shift 2 ;;
    --exec) EXEC="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-vdl-suite: unknown argument $1" >&2; exit 2 ;;
  esac
done

VDL="${VDL:-$REPO/target/release/vdl}"
VDL_PERF="${VDL_PERF:-$REPO/target/release/vdl-perf}"
[[ -x "$VDL" ]] || (cd "$REPO" && cargo build --release -p vdl-server --bin vdl)
[[ -x "$VDL_PERF" ]] || (cd "$REPO" && cargo build --release -p vdl-perf)

DIR="${VDL_COMPARE_DIR:-$REPO/.cache/vdl-compare}"
rm -rf "$DIR"
mkdir -p "$DIR"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$DIR"
}
trap cleanup EXIT

MEMBERS="\"vdl1=1@127.0.0.1:$((BASE + 100))\", \"vdl2=2@127.0.0.1:$((BASE + 101))\", \"vdl3=3@127.0.0.1:$((BASE + 102))\""
BOOTSTRAP=""
VDL_ADMIN=""
for i in 0 1 2; do
  id=$((i + 1))
  cat > "$DIR/vdl$id.toml" <<EOF
initial_cluster = [$MEMBERS]
[node]
id = $id
name = "vdl$id"
data_dir = "$DIR/node$id"
[listeners]
peer = "127.0.0.1:$((BASE + 100 + i))"
kafka = "127.0.0.1:$((BASE + i))"
admin = "127.0.0.1:$((BASE + 200 + i))"
[storage]
sync = "$SYNC"
${VDL_STORAGE_EXTRA:-}
[streams]
initial = ["$TOPIC"]
EOF
  "$VDL" start --config "$DIR/vdl$id.toml" > "$DIR/vdl$id.log" 2>&1 &
  PIDS+=($!)
  BOOTSTRAP+="${BOOTSTRAP:+,}127.0.0.1:$((BASE + i))"
  VDL_ADMIN+="${VDL_ADMIN:+,}127.0.0.1:$((BASE + 200 + i))"
done

# Ready when a produce of one record is acknowledged (a leader is elected and serving).
ready=0
for _ in $(seq 60); do
  if "$VDL_PERF" produce --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --messages 1 \
       --duration 2s --timeout 2s >/dev/null 2>&1; then ready=1; break; fi
  sleep 1
done
if [[ $ready != 1 ]]; then
  echo "run-vdl-suite: the cluster did not accept a produce within 60 s; logs in $DIR" >&2
  tail -20 "$DIR"/vdl*.log >&2
  trap - EXIT; for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  exit 1
fi
echo "run-vdl-suite: vdl, 3 nodes, sync=$SYNC, bootstrap $BOOTSTRAP, topic $TOPIC" >&2

if [[ -n "$EXEC" ]]; then
  CLUSTER_DIR="$DIR"
  VDL_PIDS="${PIDS[*]}"
  export BOOTSTRAP TOPIC VDL_PERF CLUSTER_DIR VDL_PIDS VDL_ADMIN
  bash -c "$EXEC"
  exit $?
fi
if [[ $# -eq 0 ]]; then
  set -- suite --out "${OUT:-$REPO/bench-reports/vdl}" --label vdl
fi
"$VDL_PERF" "$@" --bootstrap "$BOOTSTRAP" --topic "$TOPIC"
