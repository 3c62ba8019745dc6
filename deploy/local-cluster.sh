#!/usr/bin/env bash
# A vdl cluster of VDL_NODES nodes (default 3) on 127.0.0.1, for trying the service with real
# Kafka clients and for the client tests (tests/clients/). Every node is a separate `vdl`
# process with its own TOML config, data directory, log file and PID file. Topic partitions are
# placed on kafka.default_replication_factor nodes each (default: min(3, VDL_NODES)).
#
# Usage: deploy/local-cluster.sh start|stop|status
#   start   write the configs, start every node that is not already running, wait (bounded)
#           until every stream has a leader that all nodes agree on, print the bootstrap string
#           (last line of stdout). Starting again with nodes down restarts just those (their data
#           is kept), which is how a test brings back a node it killed.
#   stop    SIGTERM the PIDs this script started, SIGKILL after VDL_STOP_TIMEOUT seconds.
#           VDL_CLEAN=1 also removes the data directory afterwards.
#   status  which nodes run, and the leader of every stream as each node sees it.
#           Exit status 0 only when every node runs.
#
# Environment (all optional):
#   VDL_NODES            number of nodes, 1-50 (default 3); node i uses each base port + i - 1.
#                        Fixed once the cluster has data: `VDL_CLEAN=1 ... stop` to change it
#   VDL_KAFKA_BASE_PORT  Kafka port of node 1; node i uses base + i - 1 (default 9092)
#   VDL_PEER_BASE_PORT   Raft peer port of node 1 (default: Kafka base + 100, i.e. 9192)
#   VDL_ADMIN_BASE_PORT  admin HTTP port of node 1 (default: Kafka base + 200, i.e. 9292)
#   VDL_DATA_DIR         where configs, data, logs and PID files go (default ./vdl-data/local-cluster)
#   VDL_BIN              the vdl binary (default target/release/vdl, built with cargo if missing;
#                        not rebuilt when present: start warns if the sources are newer)
#   VDL_STREAMS          streams created on first start, space-separated (default "logstream1")
#   VDL_ELECTION_TIMEOUT_MS  Raft election timeout (default 2000, as in deploy/vdl.example.toml)
#   VDL_EXTRA_CONFIG     TOML appended to every node's config (whole tables, e.g.
#                        $'[kafka]\nmax_connections = 1000'); not remembered between runs
#   VDL_SECURITY         "sasl_ssl": SASL_SSL on the Kafka ports (SCRAM-SHA-512 and
#                        SCRAM-SHA-256), certificates generated with `vdl certs generate` into
#                        $VDL_DATA_DIR/tls (client CA $VDL_DATA_DIR/tls/ca.pem: the Kafka
#                        listeners' node<i>.pem and a client certificate for `admin`), a user
#                        `admin` whose password is written to $VDL_DATA_DIR/admin.password,
#                        mutual TLS between the nodes with a separate peer CA
#                        ($VDL_DATA_DIR/tls/peer-ca.pem, peer-node<i>.pem naming node i), the
#                        admin API over HTTPS with authentication required (Basic as admin, or
#                        a client certificate; the script's own calls need curl), and
#                        authorizer = "acl" with super_users User:admin and the admin's
#                        certificate (User:CN=admin,OU=clients,O=vdl): every other principal
#                        needs ACLs (a [security] table in VDL_EXTRA_CONFIG may override
#                        these two keys). Default
#                        (unset or "plaintext"): PLAINTEXT everywhere. Remembered between runs
#   VDL_EXTRA_LISTENERS  with VDL_SECURITY=sasl_ssl, more Kafka listeners per node, space-separated
#                        NAME:PROTOCOL:OFFSET[:MECHANISM,...]: node i listens on its Kafka port +
#                        OFFSET; SSL listeners require a client certificate from the CA. E.g.
#                        "SASL_PLAIN:SASL_PLAINTEXT:300:PLAIN MTLS:SSL:400". Remembered
#   VDL_FAULT_INJECTION  "1": tests only: node i runs the fault-injecting file system controlled
#                        by $VDL_DATA_DIR/faults<i> ([storage] fault_injection_file; not with a
#                        [storage] table in VDL_EXTRA_CONFIG), so a test can cut the power of a
#                        killed node (`vdl power-cut --control $VDL_DATA_DIR/faults<i>`). Not
#                        remembered between runs
#   VDL_START_TIMEOUT    seconds to wait for a leader (default 30)
#   VDL_STOP_TIMEOUT     seconds between SIGTERM and SIGKILL (default 10)
#   RUST_LOG             log filter of the nodes (default info)
#
# Node count, ports, binary and streams are remembered in $VDL_DATA_DIR/cluster.env on start, so
# `stop` and `status` need only VDL_DATA_DIR (and a later `start` reuses them unless overridden).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"

die() { echo "local-cluster: $*" >&2; exit 1; }
usage() { sed -n '/^# Usage:/,/^# Environment/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; }

[[ $# -eq 1 ]] || { usage; exit 2; }
CMD="$1"

DATA_DIR="${VDL_DATA_DIR:-./vdl-data/local-cluster}"
# Absolute: the path is written into the configs and is how we recognise our own processes.
if [[ "$CMD" == start ]]; then mkdir -p "$DATA_DIR" || die "cannot create data directory $DATA_DIR"; fi
[[ -d "$DATA_DIR" ]] || die "no cluster in $DATA_DIR (start one first)"
DATA_DIR="$(cd "$DATA_DIR" && pwd)"
ENV_FILE="$DATA_DIR/cluster.env"

# Settings: environment first, then what the last start remembered, then defaults.
SAVED_NODES="" SAVED_KAFKA_BASE="" SAVED_PEER_BASE="" SAVED_ADMIN_BASE="" SAVED_BIN="" SAVED_STREAMS="" SAVED_ELECTION=""
SAVED_SECURITY="" SAVED_EXTRA_LISTENERS=""
if [[ -f "$ENV_FILE" ]]; then
  # shellcheck disable=SC1090
  source "$ENV_FILE"
fi
NODES="${VDL_NODES:-${SAVED_NODES:-3}}"
[[ "$NODES" =~ ^[0-9]+$ ]] && ((NODES >= 1 && NODES <= 50)) || die "VDL_NODES must be a number of nodes in 1-50, not '$NODES'"
# The member list is in every node's data; a cluster cannot change its size by a restart.
if [[ "$CMD" == start && -n "$SAVED_NODES" && "$NODES" != "$SAVED_NODES" && -d "$DATA_DIR/vdl1" ]]; then
  die "the cluster in $DATA_DIR has $SAVED_NODES nodes, not $NODES; stop and remove it first (VDL_CLEAN=1 VDL_DATA_DIR=$DATA_DIR $0 stop)"
fi
KAFKA_BASE="${VDL_KAFKA_BASE_PORT:-${SAVED_KAFKA_BASE:-9092}}"
PEER_BASE="${VDL_PEER_BASE_PORT:-${SAVED_PEER_BASE:-$((KAFKA_BASE + 100))}}"
ADMIN_BASE="${VDL_ADMIN_BASE_PORT:-${SAVED_ADMIN_BASE:-$((KAFKA_BASE + 200))}}"
STREAMS="${VDL_STREAMS:-${SAVED_STREAMS:-logstream1}}"
ELECTION_MS="${VDL_ELECTION_TIMEOUT_MS:-${SAVED_ELECTION:-2000}}"
BIN="${VDL_BIN:-${SAVED_BIN:-$REPO/target/release/vdl}}"
SECURITY="${VDL_SECURITY:-${SAVED_SECURITY:-plaintext}}"
[[ "$SECURITY" == plaintext || "$SECURITY" == sasl_ssl ]] || die "VDL_SECURITY must be sasl_ssl or plaintext, not '$SECURITY'"
EXTRA_LISTENERS="${VDL_EXTRA_LISTENERS-${SAVED_EXTRA_LISTENERS:-}}"
[[ -z "$EXTRA_LISTENERS" || "$SECURITY" == sasl_ssl ]] || die "VDL_EXTRA_LISTENERS needs VDL_SECURITY=sasl_ssl"
TLS_DIR="$DATA_DIR/tls"
START_TIMEOUT="${VDL_START_TIMEOUT:-30}"
STOP_TIMEOUT="${VDL_STOP_TIMEOUT:-10}"

kafka_port() { echo $((KAFKA_BASE + $1 - 1)); }
peer_port() { echo $((PEER_BASE + $1 - 1)); }
admin_port() { echo $((ADMIN_BASE + $1 - 1)); }
config_file() { echo "$DATA_DIR/vdl$1.toml"; }
pid_file() { echo "$DATA_DIR/vdl$1.pid"; }

bootstrap() {
  local s="" i
  for ((i = 1; i <= NODES; i++)); do s+="${s:+,}127.0.0.1:$(kafka_port "$i")"; done
  echo "$s"
}

# PID of node i if it is alive and still the process we started: PIDs are reused, so the
# command line must name this node's config file. Prints nothing otherwise.
node_pid() {
  local pid
  pid="$(cat "$(pid_file "$1")" 2>/dev/null || true)"
  [[ -n "$pid" ]] && alive "$pid" || return 0
  if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$(config_file "$1")"; then
    echo "$pid"
  fi
}

# Alive and not a zombie (a killed node whose parent has not reaped it yet counts as dead).
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local state
  state="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)"
  [[ -n "$state" && "$state" != Z ]]
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# GET /status of node i (one line of JSON), or nothing. curl when present; otherwise plain bash,
# so the script needs nothing beyond coreutils.
admin_status() {
  local port
  port="$(admin_port "$1")"
  if [[ "$SECURITY" == sasl_ssl ]]; then
    # HTTPS, as the admin user (the password reaches curl on stdin, never its command line).
    [[ -s "$DATA_DIR/admin.password" ]] || return 0
    printf 'user = "admin:%s"\n' "$(cat "$DATA_DIR/admin.password")" |
      curl -fsS --max-time 2 --cacert "$TLS_DIR/ca.pem" -K - "https://127.0.0.1:$port/status" 2>/dev/null || true
    return 0
  fi
  if command -v curl >/dev/null 2>&1; then
    curl -fsS --max-time 2 "http://127.0.0.1:$port/status" 2>/dev/null || true
  else
    # shellcheck disable=SC2016 # $1 expands in the inner shell
    timeout 2 bash -c '
      exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 0
      printf "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" >&3
      sed "1,/^\r\$/d" <&3' _ "$port" 2>/dev/null || true
  fi
}

# "name leader" per stream from a /status document. serde writes the fields in declaration
# order (name, leader, term, ...), which is what makes this grep enough and jq unnecessary.
stream_leaders() {
  grep -o '"name":"[^"]*","leader":[0-9]*' <<<"$1" | sed 's/"name":"\([^"]*\)","leader":\([0-9]*\)/\1 \2/' || true
}

# VDL_SECURITY=sasl_ssl: the CA and certificates, and the admin user's credentials, made once
# and kept with the cluster's data (a restart reuses them).
ensure_security() {
  [[ "$SECURITY" == sasl_ssl ]] || return 0
  if [[ ! -f "$TLS_DIR/ca.pem" || ! -f "$TLS_DIR/node$NODES.pem" || ! -f "$TLS_DIR/peer-node$NODES.pem" ]]; then
    "$BIN" certs generate --out "$TLS_DIR" --nodes "$NODES" --clients admin >/dev/null \
      || die "cannot generate certificates in $TLS_DIR"
  fi
  if [[ ! -s "$DATA_DIR/admin.password" || ! -s "$TLS_DIR/users.toml" ]]; then
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=\n' >"$DATA_DIR/admin.password")
    local m
    : >"$TLS_DIR/users.toml"
    for m in SCRAM-SHA-512 SCRAM-SHA-256; do
      "$BIN" scram-credential --user admin --mechanism "$m" --password-file "$DATA_DIR/admin.password" \
        >>"$TLS_DIR/users.toml" || die "cannot make the admin user's credentials"
    done
  fi
}

# The [[kafka.listeners]], [peer_tls] and user entries of node i (VDL_SECURITY=sasl_ssl).
security_config() {
  local i="$1" spec name proto offset mechs mech_list m
  printf '[[kafka.listeners]]\nname = "SASL_SSL"\nlisten = "127.0.0.1:%s"\nsecurity_protocol = "SASL_SSL"\n' "$(kafka_port "$i")"
  printf 'tls_cert = "%s"\ntls_key = "%s"\n' "$TLS_DIR/node$i.pem" "$TLS_DIR/node$i.key"
  printf 'sasl_mechanisms = ["SCRAM-SHA-512", "SCRAM-SHA-256"]\n'
  for spec in $EXTRA_LISTENERS; do
    IFS=: read -r name proto offset mechs <<<"$spec"
    [[ -n "$name" && -n "$proto" && "$offset" =~ ^[0-9]+$ ]] || die "bad VDL_EXTRA_LISTENERS entry '$spec' (NAME:PROTOCOL:OFFSET[:MECHANISMS])"
    printf '\n[[kafka.listeners]]\nname = "%s"\nlisten = "127.0.0.1:%s"\nsecurity_protocol = "%s"\n' \
      "$name" "$(($(kafka_port "$i") + offset))" "$proto"
    if [[ "$proto" == SSL || "$proto" == SASL_SSL ]]; then
      printf 'tls_cert = "%s"\ntls_key = "%s"\n' "$TLS_DIR/node$i.pem" "$TLS_DIR/node$i.key"
    fi
    if [[ "$proto" == SSL ]]; then
      printf 'tls_ca = "%s"\ntls_client_auth = "required"\n' "$TLS_DIR/ca.pem"
    fi
    if [[ -n "$mechs" ]]; then
      mech_list=""
      for m in ${mechs//,/ }; do mech_list+="${mech_list:+, }\"$m\""; done
      printf 'sasl_mechanisms = [%s]\n' "$mech_list"
    fi
  done
  # Peers: the peer CA's certificate naming node i (never the client CA, so a Kafka client
  # certificate is no peer credential).
  printf '\n[peer_tls]\ncert = "%s"\nkey = "%s"\nca = "%s"\n\n' "$TLS_DIR/peer-node$i.pem" "$TLS_DIR/peer-node$i.key" "$TLS_DIR/peer-ca.pem"
  # The admin API over HTTPS; every call authenticates (require_auth defaults to on with
  # security): HTTP Basic with a SCRAM user (admin, password in $DATA_DIR/admin.password) or a
  # client certificate from the CA.
  printf '[admin]\ntls_cert = "%s"\ntls_key = "%s"\ntls_ca = "%s"\ntls_client_auth = "requested"\n\n' \
    "$TLS_DIR/node$i.pem" "$TLS_DIR/node$i.key" "$TLS_DIR/ca.pem"
  # Authorization on (unless VDL_EXTRA_CONFIG has a [security] table: then its keys are
  # merged into that table by extra_config instead, a TOML table being defined only once).
  if ! has_security_table; then
    printf '[security]\n%s\n' "$SECURE_AUTHZ"
  fi
  cat "$TLS_DIR/users.toml"
}

# VDL_SECURITY=sasl_ssl: authorization by ACLs, the admin user (SCRAM) and the admin's client
# certificate being the super users; every other principal needs ACLs.
SECURE_AUTHZ='authorizer = "acl"
super_users = ["User:admin", "User:CN=admin,OU=clients,O=vdl"]'

has_security_table() { grep -qE '^[[:space:]]*\[security\][[:space:]]*$' <<<"${VDL_EXTRA_CONFIG:-}"; }

# VDL_EXTRA_CONFIG as written into the configs: with VDL_SECURITY=sasl_ssl and a [security]
# table of its own, the secure defaults (SECURE_AUTHZ) it does not set go into that table.
extra_config() {
  local extra="${VDL_EXTRA_CONFIG:-}" keys="" line key
  if [[ "$SECURITY" == sasl_ssl ]] && has_security_table; then
    while IFS= read -r line; do
      key="${line%% =*}"
      grep -qE "^[[:space:]]*$key[[:space:]]*=" <<<"$extra" || keys+="$line"$'\n'
    done <<<"$SECURE_AUTHZ"
    awk -v keys="$keys" '{ print } /^[[:space:]]*\[security\][[:space:]]*$/ { printf "%s", keys }' <<<"$extra"
  else
    printf '%s\n' "$extra"
  fi
}

# Every listener port of node i (the Kafka port first).
listener_ports() {
  local i="$1" spec offset
  kafka_port "$i"
  for spec in $EXTRA_LISTENERS; do
    offset="$(cut -d: -f3 <<<"$spec")"
    echo $(($(kafka_port "$i") + offset))
  done
}

write_config() {
  local i="$1" members="" j streams_toml=""
  for ((j = 1; j <= NODES; j++)); do members+="${members:+, }\"vdl$j=$j@127.0.0.1:$(peer_port "$j")\""; done
  local s
  for s in $STREAMS; do streams_toml+="${streams_toml:+, }\"$s\""; done
  local kafka_keys
  kafka_keys="kafka = \"127.0.0.1:$(kafka_port "$i")\""$'\n'"kafka_advertised = \"127.0.0.1:$(kafka_port "$i")\""
  [[ "$SECURITY" == sasl_ssl ]] && kafka_keys="# Kafka listeners: [[kafka.listeners]] below (VDL_SECURITY=sasl_ssl)"
  # Only what differs from the defaults of deploy/vdl.example.toml: addresses, ids, data, and
  # the election timeout (tests lower it to make failover quicker).
  cat >"$(config_file "$i")" <<EOF
# Written by deploy/local-cluster.sh; rewritten on every start.
initial_cluster = [$members]

[node]
id = $i
name = "vdl$i"
data_dir = "$DATA_DIR/vdl$i"

[listeners]
peer = "127.0.0.1:$(peer_port "$i")"
$kafka_keys
admin = "127.0.0.1:$(admin_port "$i")"

[raft]
election_timeout_ms = $ELECTION_MS

[streams]
initial = [$streams_toml]
${VDL_EXTRA_CONFIG:+
# From VDL_EXTRA_CONFIG:
$(extra_config)}
EOF
  if [[ "${VDL_FAULT_INJECTION:-}" == 1 ]]; then
    grep -qE '^[[:space:]]*\[storage\][[:space:]]*$' <<<"${VDL_EXTRA_CONFIG:-}" &&
      die "VDL_FAULT_INJECTION=1 writes a [storage] table: VDL_EXTRA_CONFIG must not have one"
    printf '\n# VDL_FAULT_INJECTION=1 (tests only)\n[storage]\nfault_injection_file = "%s"\n' \
      "$DATA_DIR/faults$i" >>"$(config_file "$i")"
  fi
  if [[ "$SECURITY" == sasl_ssl ]]; then
    { echo; echo "# VDL_SECURITY=sasl_ssl"; security_config "$i"; } >>"$(config_file "$i")"
  fi
}

ensure_binary() {
  if [[ -x "$BIN" ]]; then
    # Only built when missing (a rebuild can take minutes); say so when the sources are newer.
    if [[ "$BIN" == "$REPO/target/"* ]] && [[ -n "$(find "$REPO/crates" -name '*.rs' -newer "$BIN" -print -quit 2>/dev/null)" ]]; then
      echo "warning: $BIN is older than the sources under crates/; rebuild it with cargo build" >&2
    fi
    return 0
  fi
  if [[ "$BIN" == "$REPO/target/release/vdl" ]]; then
    echo "building $BIN (cargo build --release -p vdl-server --bin vdl)" >&2
    (cd "$REPO" && cargo build --release -q -p vdl-server --bin vdl) >&2
  elif [[ "$BIN" == "$REPO/target/debug/vdl" ]]; then
    echo "building $BIN (cargo build -p vdl-server --bin vdl)" >&2
    (cd "$REPO" && cargo build -q -p vdl-server --bin vdl) >&2
  fi
  [[ -x "$BIN" ]] || die "no vdl binary at $BIN (set VDL_BIN)"
}

# True when every stream named in the config has, on every running node, the same non-zero
# leader, and that leader is one of the running nodes. Prints "stream leader" lines on success.
leaders_agreed() {
  local i pid doc s leader seen out="" running=()
  for ((i = 1; i <= NODES; i++)); do
    pid="$(node_pid "$i")"; [[ -n "$pid" ]] && running+=("$i")
  done
  ((${#running[@]} > 0)) || return 1
  for s in $STREAMS; do
    seen=""
    for i in "${running[@]}"; do
      doc="$(admin_status "$i")"
      leader="$(stream_leaders "$doc" | awk -v s="$s" '$1 == s { print $2 }')"
      [[ -n "$leader" && "$leader" != 0 ]] || return 1
      [[ -z "$seen" || "$seen" == "$leader" ]] || return 1
      seen="$leader"
    done
    [[ " ${running[*]} " == *" $seen "* ]] || return 1
    out+="$s leader=vdl$seen"$'\n'
  done
  printf '%s' "$out"
}

cmd_start() {
  ensure_binary
  BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
  cat >"$ENV_FILE" <<EOF
SAVED_NODES=$NODES
SAVED_KAFKA_BASE=$KAFKA_BASE
SAVED_PEER_BASE=$PEER_BASE
SAVED_ADMIN_BASE=$ADMIN_BASE
SAVED_BIN='$BIN'
SAVED_STREAMS='$STREAMS'
SAVED_ELECTION=$ELECTION_MS
SAVED_SECURITY=$SECURITY
SAVED_EXTRA_LISTENERS='$EXTRA_LISTENERS'
EOF
  ensure_security
  local i pid started=()
  for ((i = 1; i <= NODES; i++)); do
    pid="$(node_pid "$i")"
    if [[ -n "$pid" ]]; then
      echo "vdl$i already running (pid $pid)" >&2
      continue
    fi
    local p
    for p in $(listener_ports "$i") "$(peer_port "$i")" "$(admin_port "$i")"; do
      port_open "$p" && die "port $p (for vdl$i) is already in use by another process"
    done
    write_config "$i"
    "$BIN" check-config "$(config_file "$i")" >/dev/null || die "invalid config $(config_file "$i")"
    mkdir -p "$DATA_DIR/vdl$i"
    # setsid: the nodes must not die with the shell that started them (or get its Ctrl-C);
    # they are stopped only through their PID files.
    RUST_LOG="${RUST_LOG:-info}" setsid "$BIN" start --config "$(config_file "$i")" \
      >>"$DATA_DIR/vdl$i.log" 2>&1 </dev/null &
    echo $! >"$(pid_file "$i")"
    started+=("$i")
  done
  echo "started ${#started[@]} node(s) in $DATA_DIR; waiting up to ${START_TIMEOUT}s for leaders" >&2

  # Bounded wait: every node alive with its Kafka port open, and every stream with an agreed
  # leader. A node that exits during startup (bad config, port taken) fails the start at once.
  local deadline=$((SECONDS + START_TIMEOUT)) leaders=""
  while ((SECONDS < deadline)); do
    local all_up=1
    for ((i = 1; i <= NODES; i++)); do
      pid="$(cat "$(pid_file "$i")" 2>/dev/null || true)"
      if [[ -z "$pid" ]] || ! alive "$pid"; then
        grep -v -E "^ +([0-9]+: |at )" "$DATA_DIR/vdl$i.log" | tail -n 20 >&2 || true
        die "vdl$i exited during startup (log: $DATA_DIR/vdl$i.log)"
      fi
      port_open "$(kafka_port "$i")" || all_up=0
    done
    if [[ "$all_up" == 1 ]] && leaders="$(leaders_agreed)"; then
      printf '%s\n' "$leaders" >&2
      echo "bootstrap:" >&2
      bootstrap
      return 0
    fi
    sleep 0.2
  done
  for ((i = 1; i <= NODES; i++)); do
    port_open "$(kafka_port "$i")" || echo "vdl$i: Kafka port $(kafka_port "$i") not open (a vdl binary without the Kafka listener?)" >&2
    [[ -n "$(admin_status "$i")" ]] || echo "vdl$i: admin API on $(admin_port "$i") not answering" >&2
  done
  die "not ready within ${START_TIMEOUT}s (every Kafka port open, one leader per stream agreed by all nodes); logs in $DATA_DIR/vdl*.log (stop with: VDL_DATA_DIR=$DATA_DIR $0 stop)"
}

cmd_stop() {
  local i pid pids=()
  for ((i = 1; i <= NODES; i++)); do
    pid="$(node_pid "$i")"
    if [[ -n "$pid" ]]; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  # vdl stops on SIGTERM within a moment; bound the wait anyway, then SIGKILL what is left.
  local deadline=$((SECONDS + STOP_TIMEOUT)) any p
  while ((SECONDS < deadline)); do
    any=0
    for p in "${pids[@]}"; do alive "$p" && any=1; done
    [[ "$any" == 0 ]] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do
    if alive "$p"; then
      echo "pid $p did not stop in ${STOP_TIMEOUT}s, sending SIGKILL" >&2
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
  for ((i = 1; i <= NODES; i++)); do rm -f "$(pid_file "$i")"; done
  echo "stopped ${#pids[@]} node(s) in $DATA_DIR" >&2
  if [[ "${VDL_CLEAN:-0}" == 1 ]]; then
    # Only what this script creates, never anything else that may live in the directory.
    for ((i = 1; i <= NODES; i++)); do
      rm -rf "$DATA_DIR/vdl$i" "$(config_file "$i")" "$DATA_DIR/vdl$i.log"
    done
    rm -f "$ENV_FILE" "$DATA_DIR/admin.password"
    rm -rf "$TLS_DIR"
    rmdir "$DATA_DIR" 2>/dev/null || true
    echo "removed $DATA_DIR" >&2
  fi
}

cmd_status() {
  local i pid up=0 doc
  for ((i = 1; i <= NODES; i++)); do
    pid="$(node_pid "$i")"
    if [[ -z "$pid" ]]; then
      echo "vdl$i: stopped"
      continue
    fi
    up=$((up + 1))
    doc="$(admin_status "$i")"
    if [[ -z "$doc" ]]; then
      echo "vdl$i: running pid $pid, kafka 127.0.0.1:$(kafka_port "$i"), admin not answering"
      continue
    fi
    echo "vdl$i: running pid $pid, kafka 127.0.0.1:$(kafka_port "$i"), admin 127.0.0.1:$(admin_port "$i")"
    stream_leaders "$doc" | while read -r s l; do
      if [[ "$l" == 0 ]]; then echo "  $s: no leader"; else echo "  $s: leader vdl$l"; fi
    done
  done
  echo "bootstrap: $(bootstrap)"
  [[ "$up" == "$NODES" ]]
}

case "$CMD" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  -h|--help|help) usage ;;
  *) usage; exit 2 ;;
esac
