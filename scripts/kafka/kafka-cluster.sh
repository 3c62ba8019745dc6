#!/usr/bin/env bash
# Run a local Apache Kafka 3.9 or 4.x KRaft cluster (1 or 3 nodes, combined
# broker+controller) on 127.0.0.1, to compare vdl against and to capture golden
# protocol frames from. Jars come from scripts/kafka/fetch-kafka.sh.
# Kafka 3.9.2 by default; --kafka-version 4.1.1 (or env KAFKA_VERSION=4.1.1)
# runs Kafka 4.1 (log4j2 logging, the consumer group protocol of KIP-848 on).
#
# Usage:
#   scripts/kafka/kafka-cluster.sh start  [--brokers 1|3] [--fsync-every-message]
#                                         [--base-port N] [--dir D]
#                                         [--extra-props FILE] [--heap "-Xmx.."]
#                                         [--kafka-version V]
#   scripts/kafka/kafka-cluster.sh stop   [--dir D] [--clean]
#   scripts/kafka/kafka-cluster.sh status [--dir D]
#   scripts/kafka/kafka-cluster.sh bootstrap [--dir D]
#   scripts/kafka/kafka-cluster.sh create-topic NAME [--rf N] [--partitions P]
#                                         [--min-isr M] [--dir D]
#
# Ports: broker i (0-based) serves clients on BASE+i and its controller
# listener on BASE+10+i (default BASE 19092, so 19092..19094 / 19102..19104).
# Default dir: $VDL_CACHE_DIR/kafka-cluster or $REPO/.cache/kafka-cluster.
# --extra-props FILE is appended to every broker's config (later keys win in
# java.util.Properties), e.g. to add listeners; the golden capture uses it.
# The cluster's settings (broker count, ports, Kafka version) are remembered in
# D/cluster.env, so stop/status/create-topic need only --dir.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
TEMPLATE_DIR="$REPO/deploy/compare-kafka"

usage() {
  sed -n '/^# Usage:/,/^# Ports:/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
}

die() { echo "kafka-cluster: $*" >&2; exit 1; }

[[ $# -ge 1 ]] || { usage; exit 2; }
CMD="$1"; shift

BROKERS=1
FSYNC=0
BASE_PORT=19092
DIR="${VDL_CACHE_DIR:-$REPO/.cache}/kafka-cluster"
EXTRA_PROPS=""
HEAP="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
CLEAN=0
TOPIC=""
RF=""
PARTITIONS=1
MIN_ISR=""
# Fixed cluster id (base64url of "vdl-kafka-golden") so that responses that
# carry the cluster id (Metadata, DescribeCluster) are the same on every run.
CLUSTER_ID="${KAFKA_CLUSTER_ID:-dmRsLWthZmthLWdvbGRlbg}"
# Which Kafka: fetch-kafka.sh's default (3.9.2) unless given; start records it
# in cluster.env, which the other commands load (and a restart reuses).
KAFKA_VERSION_GIVEN="${KAFKA_VERSION:-}"
KAFKA_VERSION="${KAFKA_VERSION:-3.9.2}"

if [[ "$CMD" == create-topic ]]; then
  [[ $# -ge 1 && "$1" != --* ]] || die "create-topic needs a topic NAME"
  TOPIC="$1"; shift
fi
while [[ $# -gt 0 ]]; do
  case "$1" in
    --brokers) BROKERS="$2"; shift 2 ;;
    --fsync-every-message) FSYNC=1; shift ;;
    --base-port) BASE_PORT="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --extra-props) EXTRA_PROPS="$2"; shift 2 ;;
    --heap) HEAP="$2"; shift 2 ;;
    --kafka-version) KAFKA_VERSION="$2"; KAFKA_VERSION_GIVEN="$2"; shift 2 ;;
    --clean) CLEAN=1; shift ;;
    --rf) RF="$2"; shift 2 ;;
    --partitions) PARTITIONS="$2"; shift 2 ;;
    --min-isr) MIN_ISR="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage; die "unknown argument: $1" ;;
  esac
done
case "$CMD" in
  -h|--help|help) usage; exit 0 ;;
  start) mkdir -p "$DIR" ;;  # only start creates anything
esac
# Absolute path: it is baked into configs and used to recognise our PIDs.
[[ -d "$DIR" ]] && DIR="$(cd "$DIR" && pwd)"
ENV_FILE="$DIR/cluster.env"

libs_dir() { KAFKA_VERSION="$KAFKA_VERSION" "$SCRIPT_DIR/fetch-kafka.sh"; }

# Kafka 4 logs through log4j2 and moved some tools from kafka.* (Scala) to
# org.apache.kafka.tools.* (Java).
kafka_major() { echo "${KAFKA_VERSION%%.*}"; }
# The JVM flag naming a log4j config file: FILE without its extension gets
# .properties (log4j 1.2, Kafka 3) or .log4j2.properties (Kafka 4).
log_flag() {
  if (($(kafka_major) >= 4)); then
    echo "-Dlog4j2.configurationFile=file:$1.log4j2.properties"
  else
    echo "-Dlog4j.configuration=file:$1.properties"
  fi
}
api_versions_class() {
  if (($(kafka_major) >= 4)); then echo org.apache.kafka.tools.BrokerApiVersionsCommand; else echo kafka.admin.BrokerApiVersionsCommand; fi
}

# The JVM's class path: every jar in the cache dir ("dir/*" is expanded by java).
java_cp() { echo "$(libs_dir | tail -n1)/*"; }

# Is PID alive and still the process we started (PIDs get reused)?
our_pid_alive() {
  local pid="$1" marker="$2"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$marker"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

load_env() {
  [[ -f "$ENV_FILE" ]] || die "no cluster in $DIR (missing cluster.env); start one first"
  # shellcheck disable=SC1090
  source "$ENV_FILE"
}

bootstrap_string() {
  local s="" i
  for ((i = 0; i < BROKERS; i++)); do s+="${s:+,}127.0.0.1:$((BASE_PORT + i))"; done
  echo "$s"
}

render_config() {
  local i="$1" bdir="$2" voters="$3" rf="$4" min_isr="$5" offsets_parts="$6"
  sed -e "s#@NODE_ID@#$i#g" \
      -e "s#@VOTERS@#$voters#g" \
      -e "s#@PORT@#$((BASE_PORT + i))#g" \
      -e "s#@CONTROLLER_PORT@#$((BASE_PORT + 10 + i))#g" \
      -e "s#@LOG_DIR@#$bdir/data#g" \
      -e "s#@RF@#$rf#g" \
      -e "s#@MIN_ISR@#$min_isr#g" \
      -e "s#@OFFSETS_PARTITIONS@#$offsets_parts#g" \
      "$TEMPLATE_DIR/server.properties.template" >"$bdir/server.properties"
  if [[ "$FSYNC" == 1 ]]; then
    { echo; echo "# --- fsync-every-message.properties ---"; cat "$TEMPLATE_DIR/fsync-every-message.properties"; } >>"$bdir/server.properties"
  fi
  if (($(kafka_major) >= 4)); then
    # The consumer group protocol (KIP-848, group.protocol=consumer): spelled out
    # although it is Kafka 4's default, since the tests rely on it; members
    # heartbeat every second instead of 5 s (a join or leave converges in a few
    # heartbeats), like group.initial.rebalance.delay.ms=0 for classic groups.
    { echo; echo "# --- Kafka 4 ---"
      echo "group.coordinator.rebalance.protocols=classic,consumer"
      echo "group.consumer.min.heartbeat.interval.ms=1000"
      echo "group.consumer.heartbeat.interval.ms=1000"; } >>"$bdir/server.properties"
  fi
  if [[ -n "$EXTRA_PROPS" ]]; then
    { echo; echo "# --- extra props: $EXTRA_PROPS ---"; sed "s#@NODE_ID@#$i#g" "$EXTRA_PROPS"; } >>"$bdir/server.properties"
  fi
}

write_log4j() {
  # Broker logs go to a file per broker; stdout only gets JVM noise.
  cat >"$DIR/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.MaxFileSize=50MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
EOF
  cat >"$DIR/log4j.log4j2.properties" <<'EOF'
status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.filePattern = ${sys:kafka.logs.dir}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 2
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
EOF
}

# Run a Kafka tool class with a small heap and quiet logging.
run_tool() {
  local cls="$1"; shift
  java -Xmx256m -cp "$(java_cp)" "$(log_flag "$DIR/tools-log4j")" "$cls" "$@"
}

write_tools_log4j() {
  cat >"$DIR/tools-log4j.properties" <<'EOF'
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
  cat >"$DIR/tools-log4j.log4j2.properties" <<'EOF'
status = warn
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = stderr
EOF
}

cmd_start() {
  [[ "$BROKERS" == 1 || "$BROKERS" == 3 ]] || die "--brokers must be 1 or 3"
  if [[ -f "$ENV_FILE" ]]; then
    local old_brokers
    old_brokers="$(sed -n 's/^BROKERS=//p' "$ENV_FILE")"
    if [[ "$old_brokers" != "$BROKERS" ]]; then
      die "$DIR holds a $old_brokers-broker cluster; use another --dir or 'stop --clean' it first"
    fi
    # Its data was written by the Kafka version it recorded: start that one again.
    local old_version
    old_version="$(sed -n 's/^KAFKA_VERSION=//p' "$ENV_FILE")"
    old_version="${old_version:-3.9.2}"
    if [[ -z "$KAFKA_VERSION_GIVEN" ]]; then
      KAFKA_VERSION="$old_version"
    elif [[ "$KAFKA_VERSION_GIVEN" != "$old_version" ]]; then
      die "$DIR holds a Kafka $old_version cluster; use another --dir or 'stop --clean' it first"
    fi
    # Refuse to start twice.
    local i pid
    for ((i = 0; i < old_brokers; i++)); do
      pid="$(cat "$DIR/broker-$i/pid" 2>/dev/null || true)"
      if our_pid_alive "$pid" "$DIR/broker-$i/server.properties"; then
        die "broker $i already running (pid $pid); see: $0 status --dir $DIR"
      fi
    done
  fi
  local i
  for ((i = 0; i < BROKERS; i++)); do
    port_open $((BASE_PORT + i)) && die "port $((BASE_PORT + i)) is already in use"
    port_open $((BASE_PORT + 10 + i)) && die "port $((BASE_PORT + 10 + i)) is already in use"
  done

  local cp rf min_isr offsets_parts voters=""
  cp="$(java_cp)"
  if [[ "$BROKERS" == 3 ]]; then rf=3; min_isr=2; else rf=1; min_isr=1; fi
  # Fewer __consumer_offsets partitions than the default 50: faster startup of
  # the group coordinator on a 2-core machine; irrelevant for throughput.
  offsets_parts=10
  for ((i = 0; i < BROKERS; i++)); do voters+="${voters:+,}$i@127.0.0.1:$((BASE_PORT + 10 + i))"; done

  cat >"$ENV_FILE" <<EOF
BROKERS=$BROKERS
BASE_PORT=$BASE_PORT
FSYNC=$FSYNC
CLUSTER_ID=$CLUSTER_ID
KAFKA_VERSION=$KAFKA_VERSION
EOF
  write_log4j
  write_tools_log4j

  local fmt_pids=()
  for ((i = 0; i < BROKERS; i++)); do
    local bdir="$DIR/broker-$i"
    mkdir -p "$bdir/logs"
    render_config "$i" "$bdir" "$voters" "$rf" "$min_isr" "$offsets_parts"
    # Format once; a restart keeps the data (and the same cluster id).
    # In parallel: each format is a JVM start of a few seconds.
    if [[ ! -f "$bdir/data/meta.properties" ]]; then
      timeout 120 java -Xmx256m -cp "$cp" "$(log_flag "$DIR/tools-log4j")" \
        kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$bdir/server.properties" --ignore-formatted \
        >"$bdir/logs/format.out" 2>&1 &
      fmt_pids+=("$!:$i")
    fi
  done
  local fp
  for fp in "${fmt_pids[@]}"; do
    wait "${fp%%:*}" || { cat "$DIR/broker-${fp##*:}/logs/format.out" >&2; die "storage format failed for broker ${fp##*:}"; }
  done

  for ((i = 0; i < BROKERS; i++)); do
    local bdir="$DIR/broker-$i"
    # shellcheck disable=SC2086
    nohup java $HEAP -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
      "$(log_flag "$DIR/log4j")" -Dkafka.logs.dir="$bdir/logs" \
      -cp "$cp" kafka.Kafka "$bdir/server.properties" \
      >"$bdir/logs/stdout.log" 2>&1 </dev/null &
    echo $! >"$bdir/pid"
  done
  echo "started $BROKERS broker(s) in $DIR (fsync-every-message=$FSYNC), waiting for them to answer..." >&2

  # Bounded wait: every client port open, then every broker registered and
  # unfenced (BrokerApiVersionsCommand lists the brokers the metadata knows).
  local deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-120})) ok=0 bs
  bs="$(bootstrap_string)"
  while ((SECONDS < deadline)); do
    for ((i = 0; i < BROKERS; i++)); do
      # Plain kill -0 here: right after the fork, /proc/PID/cmdline can still
      # show the shell that is about to exec java.
      kill -0 "$(cat "$DIR/broker-$i/pid")" 2>/dev/null || {
        tail -n 30 "$DIR/broker-$i/logs/stdout.log" "$DIR/broker-$i/logs/server.log" >&2 || true
        die "broker $i exited during startup (logs in $DIR/broker-$i/logs)"
      }
    done
    local all_open=1
    for ((i = 0; i < BROKERS; i++)); do port_open $((BASE_PORT + i)) || all_open=0; done
    if [[ "$all_open" == 1 ]]; then
      local n
      n="$(timeout 30 java -Xmx128m -cp "$cp" "$(log_flag "$DIR/tools-log4j")" \
            "$(api_versions_class)" --bootstrap-server "$bs" 2>/dev/null \
            | grep -c ' (id: [0-9]* rack: ' || true)"
      if [[ "$n" -ge "$BROKERS" ]]; then ok=1; break; fi
    fi
    sleep 1
  done
  [[ "$ok" == 1 ]] || die "cluster did not become ready in time; logs in $DIR/broker-*/logs (stop it with: $0 stop --dir $DIR)"
  echo "ready; bootstrap:" >&2
  echo "$bs"
}

cmd_stop() {
  load_env
  local i pid pids=()
  for ((i = 0; i < BROKERS; i++)); do
    pid="$(cat "$DIR/broker-$i/pid" 2>/dev/null || true)"
    if our_pid_alive "$pid" "$DIR/broker-$i/server.properties"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  # Controlled shutdown normally takes a few seconds; bound it, then SIGKILL.
  local deadline=$((SECONDS + ${KAFKA_STOP_TIMEOUT:-30})) alive p
  while ((SECONDS < deadline)); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ "$alive" == 0 ]] && break
    sleep 0.5
  done
  for p in "${pids[@]}"; do
    if kill -0 "$p" 2>/dev/null; then echo "pid $p did not stop, sending SIGKILL" >&2; kill -KILL "$p" 2>/dev/null || true; fi
  done
  for ((i = 0; i < BROKERS; i++)); do rm -f "$DIR/broker-$i/pid"; done
  echo "stopped ${#pids[@]} broker process(es) in $DIR" >&2
  if [[ "$CLEAN" == 1 ]]; then
    # Only the files this script creates; never the dir itself if it holds more.
    for ((i = 0; i < BROKERS; i++)); do rm -rf "$DIR/broker-$i"; done
    rm -f "$ENV_FILE" "$DIR/log4j.properties" "$DIR/tools-log4j.properties" \
      "$DIR/log4j.log4j2.properties" "$DIR/tools-log4j.log4j2.properties"
    rmdir "$DIR" 2>/dev/null || true
    echo "removed cluster data in $DIR" >&2
  fi
}

cmd_status() {
  load_env
  local i pid up=0
  for ((i = 0; i < BROKERS; i++)); do
    pid="$(cat "$DIR/broker-$i/pid" 2>/dev/null || true)"
    if our_pid_alive "$pid" "$DIR/broker-$i/server.properties"; then
      if port_open $((BASE_PORT + i)); then
        echo "broker $i: running pid $pid port $((BASE_PORT + i))"; up=$((up + 1))
      else
        echo "broker $i: starting pid $pid (port $((BASE_PORT + i)) closed)"
      fi
    else
      echo "broker $i: stopped"
    fi
  done
  echo "fsync-every-message: $FSYNC"
  echo "bootstrap: $(bootstrap_string)"
  [[ "$up" == "$BROKERS" ]]
}

cmd_create_topic() {
  load_env
  [[ -n "$RF" ]] || RF="$BROKERS"
  if [[ -z "$MIN_ISR" ]]; then
    if ((RF >= 3)); then MIN_ISR=2; else MIN_ISR=1; fi
  fi
  write_tools_log4j
  timeout 60 java -Xmx256m -cp "$(java_cp)" "$(log_flag "$DIR/tools-log4j")" \
    org.apache.kafka.tools.TopicCommand --bootstrap-server "$(bootstrap_string)" \
    --create --if-not-exists --topic "$TOPIC" --partitions "$PARTITIONS" \
    --replication-factor "$RF" --config "min.insync.replicas=$MIN_ISR"
  timeout 60 java -Xmx256m -cp "$(java_cp)" "$(log_flag "$DIR/tools-log4j")" \
    org.apache.kafka.tools.TopicCommand --bootstrap-server "$(bootstrap_string)" \
    --describe --topic "$TOPIC"
}

case "$CMD" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  bootstrap) load_env; bootstrap_string ;;
  create-topic) cmd_create_topic ;;
  -h|--help|help) usage ;;
  *) usage; exit 2 ;;
esac
