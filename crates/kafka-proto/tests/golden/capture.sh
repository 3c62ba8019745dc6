#!/usr/bin/env bash
# Re-capture the golden Kafka frames from scratch: real client requests and
# real Apache Kafka 3.9 broker responses, recorded by a proxy in between.
#
# Usage: crates/kafka-proto/tests/golden/capture.sh [--keep-work]
#   env: GOLDEN_BASE_PORT (default 29092), GOLDEN_CAP (pairs kept per
#        client/api/version/variant, default 3), CONFLUENT_KAFKA_VERSION
#        (pip pin, default 2.16.1), VDL_CACHE_DIR (see scripts/kafka/).
#
# What it does:
#  1. starts a recording proxy (proxy.py) and a single KRaft broker whose
#     PLAINTEXT and SASL_PLAINTEXT listeners ADVERTISE the proxy's ports, so
#     every client connection (bootstrap and the broker found via Metadata)
#     goes through the proxy; inter-broker traffic uses a separate INTERNAL
#     listener so it never shows up in the capture;
#  2. runs kcat, confluent-kafka (Python) and the Kafka 3.9 Java client, one
#     after the other, the proxy labelling connections by the running client;
#  3. writes frames/*.bin, manifest.tsv and the summary table in README.md
#     (assemble.py), and stops everything it started, also on failure.
set -euo pipefail

usage() { echo "usage: $0 [--keep-work]" >&2; }
KEEP_WORK=0
for a in "$@"; do
  case "$a" in
    --keep-work) KEEP_WORK=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done

GOLDEN="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$GOLDEN/../../../.." && pwd)"
CLUSTER="$REPO/scripts/kafka/kafka-cluster.sh"
BASE="${GOLDEN_BASE_PORT:-29092}"
CAP="${GOLDEN_CAP:-3}"
CK_VERSION="${CONFLUENT_KAFKA_VERSION:-2.16.1}"
# Port plan (all 127.0.0.1): broker PLAINTEXT BASE, controller BASE+10 (from
# kafka-cluster.sh), broker SASL BASE+3, INTERNAL BASE+4; proxies BASE+100
# (-> PLAINTEXT) and BASE+103 (-> SASL).
P_PLAIN=$BASE; P_SASL=$((BASE + 3)); P_INTERNAL=$((BASE + 4)); P_CTRL=$((BASE + 10))
X_PLAIN=$((BASE + 100)); X_SASL=$((BASE + 103))
CLIENTS="kcat,python,java"
T0=$SECONDS

log() { echo "capture [$((SECONDS - T0))s]: $*" >&2; }

# ---- prerequisites (each installs only when missing) -----------------------
if ! command -v kcat >/dev/null 2>&1; then
  log "installing kcat (Debian package)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null
fi
LIBS="$("$REPO/scripts/kafka/fetch-kafka.sh" | tail -n1)"
VENV="$REPO/.venv"
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import confluent_kafka, sys; sys.exit(confluent_kafka.__version__ != '$CK_VERSION')" 2>/dev/null; then
  log "pip install confluent-kafka==$CK_VERSION"
  "$VENV/bin/pip" install -q "confluent-kafka==$CK_VERSION"
fi

WORK="$(mktemp -d /tmp/vdl-golden.XXXXXX)"
PROXY_PID=""
cleanup() {
  local rc=$?
  set +e
  if [[ -n "$PROXY_PID" ]] && kill -0 "$PROXY_PID" 2>/dev/null; then
    kill -TERM "$PROXY_PID"
    for _ in $(seq 1 50); do kill -0 "$PROXY_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$PROXY_PID" 2>/dev/null
  fi
  if [[ -f "$WORK/kafka/cluster.env" ]]; then
    # Keep broker logs when asked to, or when something failed.
    local clean=(--clean)
    [[ "$KEEP_WORK" == 1 || $rc != 0 ]] && clean=()
    "$CLUSTER" stop --dir "$WORK/kafka" "${clean[@]}" >/dev/null 2>&1
  fi
  if [[ "$KEEP_WORK" == 1 || $rc != 0 ]]; then
    echo "capture: work dir kept: $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- compile the Java client once (faster than source-launch per run) -----
log "compiling CaptureClient.java"
mkdir -p "$WORK/classes"
javac -nowarn -cp "$LIBS/*" -d "$WORK/classes" "$GOLDEN/CaptureClient.java"

# ---- proxy -----------------------------------------------------------------
RAW="$WORK/raw.jsonl"
LABEL="$WORK/label"
echo setup >"$LABEL"
python3 "$GOLDEN/proxy.py" --map "$X_PLAIN:$P_PLAIN" --map "$X_SASL:$P_SASL" \
  --out "$RAW" --label-file "$LABEL" --ready-file "$WORK/proxy.ready" \
  >"$WORK/proxy.log" 2>&1 &
PROXY_PID=$!
for _ in $(seq 1 50); do [[ -f "$WORK/proxy.ready" ]] && break; sleep 0.1; done
[[ -f "$WORK/proxy.ready" ]] || { cat "$WORK/proxy.log" >&2; log "proxy did not start"; exit 1; }

# ---- broker ----------------------------------------------------------------
cat >"$WORK/extra.properties" <<EOF
listeners=PLAINTEXT://127.0.0.1:$P_PLAIN,SASL_PLAINTEXT://127.0.0.1:$P_SASL,INTERNAL://127.0.0.1:$P_INTERNAL,CONTROLLER://127.0.0.1:$P_CTRL
advertised.listeners=PLAINTEXT://127.0.0.1:$X_PLAIN,SASL_PLAINTEXT://127.0.0.1:$X_SASL,INTERNAL://127.0.0.1:$P_INTERNAL
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT
inter.broker.listener.name=INTERNAL
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";
# KIP-848 consumer protocol, so the Java client can send ConsumerGroupHeartbeat.
group.coordinator.rebalance.protocols=classic,consumer
EOF
log "starting Kafka broker (dir $WORK/kafka)"
"$CLUSTER" start --brokers 1 --base-port "$BASE" --dir "$WORK/kafka" \
  --extra-props "$WORK/extra.properties" --heap "-Xms256m -Xmx768m" >/dev/null
"$CLUSTER" create-topic golden-kcat --rf 1 --dir "$WORK/kafka" >/dev/null
BS="127.0.0.1:$X_PLAIN"
SASL_BS="127.0.0.1:$X_SASL"

# ---- client 1: kcat (librdkafka from Debian) -----------------------------------
echo kcat >"$LABEL"
log "kcat ($(kcat -V 2>&1 | grep -o 'librdkafka [^ ]*' | head -1 || true))"
K=(timeout 30 kcat -b "$BS" -X client.id=golden-kcat)
"${K[@]}" -L >/dev/null
for codec in none gzip snappy lz4 zstd; do
  # 10 messages of 100 bytes, keyed ("key:value" lines with -K:).
  for i in $(seq 0 9); do printf 'k%d:%-98s\n' "$i" "$codec-$i" | tr ' ' 'x' | cut -c1-101; done \
    | "${K[@]}" -P -t golden-kcat -K: -z "$codec" -X enable.idempotence=true
done
# And one plain (non-idempotent, acks=1) produce: producer_id -1 in the batch.
seq -f 'plain-%03g' 0 9 | "${K[@]}" -P -t golden-kcat -X acks=1
"${K[@]}" -C -t golden-kcat -o beginning -e -q >/dev/null
"${K[@]}" -G golden-kcat-group -X auto.offset.reset=earliest -e -q golden-kcat >/dev/null || log "kcat -G ended by timeout"
"${K[@]}" -Q -t "golden-kcat:0:$(( $(date +%s) * 1000 - 60000 ))" >/dev/null || true
timeout 30 kcat -b "$SASL_BS" -X client.id=golden-kcat -X security.protocol=SASL_PLAINTEXT \
  -X sasl.mechanisms=PLAIN -X sasl.username=alice -X sasl.password=alice-secret -L >/dev/null

# ---- client 2: confluent-kafka (Python) ----------------------------------------
echo python >"$LABEL"
log "confluent-kafka $CK_VERSION (python)"
timeout 300 "$VENV/bin/python" "$GOLDEN/capture_client.py" "$BS" "$SASL_BS"

# ---- client 3: Apache Kafka 3.9 Java client ------------------------------------
echo java >"$LABEL"
log "kafka-clients $(cat "$LIBS/.version") (java)"
timeout 400 java -Xmx384m -Dlog4j.configuration="file:$WORK/kafka/tools-log4j.properties" \
  -cp "$WORK/classes:$LIBS/*" CaptureClient "$BS" "$SASL_BS"

echo "finished" >"$LABEL"
# Stop the proxy now so every open connection's last pairs are written.
kill -TERM "$PROXY_PID"
for _ in $(seq 1 50); do kill -0 "$PROXY_PID" 2>/dev/null || break; sleep 0.1; done
PROXY_PID=""

# ---- fixtures ------------------------------------------------------------------
log "assembling fixtures"
# Into a staging dir first: the committed fixtures are only replaced when the
# whole capture worked (assemble.py fails if a client produced nothing).
python3 "$GOLDEN/assemble.py" "$RAW" "$WORK/out" --cap "$CAP" --clients "$CLIENTS" >"$WORK/summary.md"
python3 "$GOLDEN/verify_fixtures.py" "$WORK/out" >&2
mkdir -p "$GOLDEN/frames"
rm -f "$GOLDEN"/frames/*.bin
cp "$WORK"/out/frames/*.bin "$GOLDEN/frames/"
cp "$WORK/out/manifest.tsv" "$GOLDEN/manifest.tsv"
# Put the summary table into README.md between the markers.
python3 - "$GOLDEN/README.md" "$WORK/summary.md" <<'EOF'
import sys
readme, summary = sys.argv[1], open(sys.argv[2]).read().strip()
begin, end = "<!-- BEGIN SUMMARY (capture.sh) -->", "<!-- END SUMMARY (capture.sh) -->"
try:
    text = open(readme).read()
except FileNotFoundError:
    text = "# Golden Kafka frames\n\n%s\n%s\n" % (begin, end)
if begin not in text:
    text += "\n%s\n%s\n" % (begin, end)
head, rest = text.split(begin, 1)
tail = rest.split(end, 1)[1]
open(readme, "w").write(head + begin + "\n" + summary + "\n" + end + tail)
EOF
cat "$WORK/summary.md"
log "done in $((SECONDS - T0))s; $(du -sh "$GOLDEN/frames" | cut -f1) in $GOLDEN/frames"
