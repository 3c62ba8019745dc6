#!/usr/bin/env bash
# The produce-path timeline (docs/benchmarks.md, "Where a batch-1 produce spends its time"):
# starts a fresh local 3-node cluster whose nodes record a timestamp at every hand-off of the
# produce path (VDL_TIMELINE, crates/server/src/runtime/timeline.rs), sends MESSAGES synchronous
# batch-1 produces of 1 KiB with vdl-perf, stops the cluster and prints the median time of each
# stage since the leader read the request (scripts/bench/timeline.py).
#
# Usage: scripts/bench/produce-timeline.sh [MESSAGES]     (default 11000; the first 1000
#        requests are left out as warm-up)
# Environment: BATCH (records per request, default 1; MESSAGES counts records), MESSAGE_SIZE
#              (bytes per record, default 1024),
#              VDL_BIN (default target/release/vdl), VDL_PERF (default target/release/vdl-perf),
#              TIMELINE_DIR (default /tmp/vdl-timeline), VDL_KAFKA_BASE_PORT (default 29092).
set -euo pipefail
cd "$(dirname "$0")/../.."
MESSAGES=${1:-11000}
DIR=${TIMELINE_DIR:-/tmp/vdl-timeline}
PERF=${VDL_PERF:-target/release/vdl-perf}
export VDL_BIN=${VDL_BIN:-target/release/vdl}
export VDL_DATA_DIR=$DIR/cluster
export VDL_KAFKA_BASE_PORT=${VDL_KAFKA_BASE_PORT:-29092}
[ -x "$VDL_BIN" ] && [ -x "$PERF" ] || cargo build --release -p vdl-server -p vdl-perf
rm -rf "$DIR" && mkdir -p "$DIR"
trap 'VDL_CLEAN=1 deploy/local-cluster.sh stop > /dev/null 2>&1 || true' EXIT
VDL_TIMELINE=$DIR/events deploy/local-cluster.sh start > "$DIR/start.log"
BOOT=$(tail -1 "$DIR/start.log")
"$PERF" produce --bootstrap "$BOOT" --topic logstream1 --batch "${BATCH:-1}" --message-size "${MESSAGE_SIZE:-1024}" \
  --messages "$MESSAGES" --duration 120s
sleep 1   # the recorders flush every 200 ms
VDL_CLEAN=1 deploy/local-cluster.sh stop > /dev/null 2>&1
trap - EXIT
python3 scripts/bench/timeline.py "$DIR/events" --skip 1000
