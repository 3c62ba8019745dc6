//! Node configuration: the TOML file `vdl start --config FILE` reads, and the embedded default
//! (`vdl start` with no file).
//!
//! Every option is documented in `deploy/vdl.example.toml`. Unknown keys are errors that name the
//! key, so a typo never silently falls back to a default.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use crate::security::config::{
    FileKafkaListener, FilePeerTls, FileSecurity, KafkaListenerConfig, SecuritySettings, TlsFiles,
};

/// Why a configuration could not be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is malformed, has an unknown key, or a value of the wrong type (the message names
    /// the key and its line).
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A value is syntactically fine but not usable.
    #[error("config key `{key}`: {message}")]
    Invalid {
        /// The offending key, as written in the file.
        key: &'static str,
        /// Why it is not usable.
        message: String,
    },
}

/// Smallest accepted `metadata.snapshot_interval_entries` other than 0: a snapshot per few
/// entries would rewrite the whole metadata state for every command.
pub const MIN_SNAPSHOT_INTERVAL_ENTRIES: u64 = 100;

/// A whole node configuration, validated.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's Raft id (non-zero, unique in the cluster).
    pub id: u64,
    /// This node's name, as used in `initial_cluster`.
    pub name: String,
    /// Directory holding every log stream of this node.
    pub data_dir: PathBuf,
    /// Address the Raft peer listener binds.
    pub peer_listen: SocketAddr,
    /// Address the Kafka listener binds.
    pub kafka_listen: SocketAddr,
    /// Host and port clients are told to connect to for this node.
    pub kafka_advertised: String,
    /// Address of the admin/metrics HTTP listener, if any.
    pub admin_listen: Option<SocketAddr>,
    /// Every member of the cluster, this node included.
    pub members: Vec<Member>,
    /// This node joins a running cluster (`[node] join = true`, see
    /// [`crate::replication::membership`]): `members` are the cluster's current members and this
    /// node; at first start its metadata group starts as a learner of the others, whose metadata it
    /// receives once an operator added it (`POST /members`). Ignored once the data directory
    /// holds the metadata group's state.
    pub join: bool,
    /// Raft timing and limits.
    pub raft: RaftTiming,
    /// Storage settings applied to every log stream.
    pub storage: StorageSettings,
    /// Log streams created at first start.
    pub initial_streams: Vec<String>,
    /// Kafka listener limits.
    pub kafka: KafkaSettings,
    /// Connection limits per client address, accept rates and the authentication deadline
    /// of the Kafka listeners (see [`crate::kafka::conn_limits`]).
    pub connection_limits: crate::kafka::conn_limits::ConnectionLimitSettings,
    /// The replicated cluster metadata's snapshots.
    pub metadata: MetadataSettings,
    /// The Kafka listeners of `[[kafka.listeners]]`. Empty: one PLAINTEXT listener named
    /// `PLAINTEXT` at `kafka_listen` / `kafka_advertised` (see [`NodeConfig::kafka_listeners`]).
    /// When set, `kafka_listen` and `kafka_advertised` are the first listener's.
    pub listeners: Vec<KafkaListenerConfig>,
    /// Authentication, bootstrap users and authorization (`[security]`).
    pub security: SecuritySettings,
    /// Mutual TLS between nodes (`[peer_tls]`); `None`: plain TCP.
    pub peer_tls: Option<TlsFiles>,
    /// The admin API's HTTPS, authentication and advertised address (`[admin]`, see
    /// [`crate::admin_auth`]).
    pub admin: crate::admin_auth::AdminSettings,
    /// Longest a graceful shutdown (SIGTERM, SIGINT) may take: handing leadership over,
    /// answering the requests in flight, syncing; then the process exits anyway.
    pub shutdown_timeout: Duration,
}

/// Default [`NodeConfig::shutdown_timeout`].
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Snapshots of the replicated cluster metadata (see [`crate::metadata::snapshot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataSettings {
    /// A node writes a snapshot of the metadata every this many applied entries and then
    /// compacts its metadata log below it (0: never; the whole log is kept and replayed).
    pub snapshot_interval_entries: u64,
}

impl Default for MetadataSettings {
    fn default() -> Self {
        MetadataSettings {
            snapshot_interval_entries: 10_000,
        }
    }
}

/// Limits of the Kafka listener, named after the Kafka settings they mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaSettings {
    /// Connections accepted at once (`max.connections`); further ones wait in the backlog.
    pub max_connections: usize,
    /// Requests read ahead and handled concurrently on one connection before reading pauses.
    pub max_in_flight_per_connection: usize,
    /// Largest request frame (`socket.request.max.bytes`).
    pub request_max_bytes: usize,
    /// Largest record batch accepted in a produce (`message.max.bytes`).
    pub message_max_bytes: usize,
    /// How far ahead of this node's clock a produced record's create-time timestamp may be, in
    /// milliseconds (`message.timestamp.after.max.ms`, Kafka 4.0's default of one hour);
    /// beyond it the partition is refused with INVALID_TIMESTAMP.
    pub message_timestamp_after_max_ms: u64,
    /// A connection with no request for this long is closed (`connections.max.idle.ms`).
    pub connection_idle: Duration,
    /// Whether a Metadata request for an unknown topic creates it, when the client allows it
    /// (`auto.create.topics.enable`).
    pub auto_create_topics: bool,
    /// Most topics the cluster may hold: CreateTopics beyond it gets POLICY_VIOLATION and
    /// auto-creation stops (each topic costs its replicas at least one Raft group and open file).
    pub max_topics: usize,
    /// Partitions of an auto-created topic, and of a CreateTopics request that leaves the count
    /// to the broker (-1) (`num.partitions`).
    pub num_partitions: u32,
    /// Most partitions the cluster may hold, over all topics: CreateTopics and CreatePartitions
    /// beyond it get POLICY_VIOLATION. Each partition costs each of its replicas a Raft group
    /// on the shared worker pool, a store and one open file (the active segment), so a node
    /// hosting P partitions needs an open-file limit above 2P (see `fd_budget.rs`).
    pub max_partitions: u32,
    /// Replicas of each partition of a topic created without a replication factor (auto-created,
    /// or CreateTopics with -1): Kafka's `default.replication.factor`. `None`: the smaller of 3
    /// and the number of members (see [`NodeConfig::default_replication_factor`]).
    pub default_replication_factor: Option<usize>,
    /// How long a consumer group without members keeps its committed offsets after its last
    /// activity (its last commit, or becoming empty): Kafka's `offsets.retention.minutes`,
    /// 7 days by default.
    pub offsets_retention: Duration,
    /// How often the group coordinator looks for expired offsets
    /// (`offsets.retention.check.interval.ms`, 10 minutes by default).
    pub offsets_retention_check_interval: Duration,
    /// A follower is in sync (Kafka's ISR) while it holds everything the leader had committed
    /// this long ago (`replica.lag.time.max.ms`, 30 s by default) and was heard from within two
    /// election timeouts.
    pub replica_lag_time_max: Duration,
}

impl Default for KafkaSettings {
    fn default() -> KafkaSettings {
        KafkaSettings {
            max_connections: 10_000,
            max_in_flight_per_connection: 64,
            request_max_bytes: 100 << 20,
            message_max_bytes: 1 << 20,
            message_timestamp_after_max_ms:
                kafka_proto::records::validate::DEFAULT_TIMESTAMP_AFTER_MAX_MS as u64,
            connection_idle: Duration::from_secs(600),
            auto_create_topics: true,
            max_topics: 1000,
            num_partitions: 1,
            max_partitions: 10_000,
            default_replication_factor: None,
            offsets_retention: Duration::from_secs(7 * 24 * 3600),
            offsets_retention_check_interval: Duration::from_secs(600),
            replica_lag_time_max: Duration::from_secs(30),
        }
    }
}

/// One member of `initial_cluster`: `name=id@peer-address`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member's name.
    pub name: String,
    /// Its Raft id.
    pub id: u64,
    /// Its Raft peer address.
    pub peer_addr: SocketAddr,
}

/// Raft timing: how often leaders heartbeat and how long followers wait before an election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    /// Granularity of the Raft clock.
    pub tick: Duration,
    /// Leader heartbeat interval (a whole number of ticks).
    pub heartbeat: Duration,
    /// Base election timeout (a whole number of ticks); raft-rs randomises it in [t, 2t).
    pub election_timeout: Duration,
    /// Largest append message to a follower, in bytes.
    pub max_append_bytes: u64,
    /// Append messages in flight to one follower before waiting for acknowledgements.
    pub max_inflight_appends: usize,
    /// Whether the leader sends appends to followers before its own fsync finishes (pipelining).
    pub pipeline: bool,
    /// Whether many proposals are merged into one Raft entry and one fsync (group commit).
    pub group_commit: bool,
    /// How often the leader of a topic partition checks whether its preferred replica is back
    /// and caught up, and hands leadership to it (Kafka's `auto.leader.rebalance.enable` and
    /// `leader.imbalance.check.interval.seconds`). `None` turns the rebalance off.
    pub leader_rebalance_interval: Option<Duration>,
    /// Worker threads that drive every Raft group of the node (0: twice the cores, 2 to 16;
    /// see [`crate::runtime::worker_count`]).
    pub worker_threads: usize,
}

impl Default for RaftTiming {
    fn default() -> RaftTiming {
        RaftTiming {
            tick: Duration::from_millis(50),
            heartbeat: Duration::from_millis(100),
            election_timeout: Duration::from_millis(2000),
            max_append_bytes: 1 << 20,
            max_inflight_appends: 256,
            pipeline: true,
            group_commit: true,
            leader_rebalance_interval: Some(Duration::from_secs(10)),
            worker_threads: 0,
        }
    }
}

impl RaftTiming {
    /// Heartbeat interval in ticks (at least 1).
    pub fn heartbeat_ticks(&self) -> usize {
        ticks(self.heartbeat, self.tick)
    }

    /// Election timeout in ticks (at least 2 heartbeats).
    pub fn election_ticks(&self) -> usize {
        ticks(self.election_timeout, self.tick).max(2 * self.heartbeat_ticks())
    }
}

fn ticks(d: Duration, tick: Duration) -> usize {
    let t = tick.as_millis().max(1);
    ((d.as_millis() / t) as usize).max(1)
}

/// When appended entries are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// fdatasync before an entry is acknowledged to Raft (the default: no acknowledged write is
    /// ever lost).
    Always,
    /// fdatasync at most this often; a crash can lose the last interval on this node.
    Interval(Duration),
    /// Never fdatasync (benchmarks only).
    Never,
}

/// Storage settings: per log stream, except the node-wide `cache_bytes` and
/// `max_open_segment_files`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageSettings {
    /// Segment file size at which a new segment is started.
    pub segment_bytes: u64,
    /// Bytes of newest entries kept in memory by all streams of the node together (one
    /// budget shared by their tail caches; `logstore::CacheBudget`).
    pub cache_bytes: u64,
    /// Most sealed segment files kept open (memory-mapped) by the node at once, all streams
    /// together; others are opened on demand (`logstore::OpenSegments`).
    pub max_open_segment_files: usize,
    /// Durability policy.
    pub sync: SyncMode,
    /// Whether retention may delete segments (VDL's delete permission).
    pub deletion_allowed: bool,
    /// Whether operators may delete a partition's old segments by hand (`vdlctl segment
    /// delete`, the admin API); off by default.
    pub operator_delete_allowed: bool,
    /// Keep at most this many bytes per stream (older whole segments are deleted).
    pub retention_bytes: Option<u64>,
    /// Delete segments whose newest entry is older than this.
    pub retention_age: Option<Duration>,
    /// How often each stream applies the retention rules.
    pub retention_check_interval: Duration,
    /// How long a leader's retention keeps entries for a replica it has not heard from
    /// (a node that is down): after this, retention deletes what the rules say and the replica
    /// catches up from a snapshot when it returns (`storage.retention_down_replica_wait_ms`).
    pub retention_down_replica_wait: Duration,
    /// Most bytes of old segments a leader's retention keeps for a live replica that is still
    /// catching up (`storage.retention_lagging_replica_max_bytes`); older ones go and the
    /// replica catches up from a snapshot.
    pub retention_lagging_replica_max_bytes: u64,
    /// Zeroed bytes kept written ahead of each stream's active segment so that syncing an
    /// append flushes data only, not file-system metadata (0 disables).
    pub preallocate_bytes: u64,
    /// Rate at which the background scrubber reads and CRC-checks sealed segments, in bytes
    /// per second, all streams together (0: no scrubber).
    pub scrub_bytes_per_second: u64,
    /// Pause between two passes of the scrubber over every sealed segment.
    pub scrub_pass_pause: Duration,
    /// Tests only: the control file of a fault-injecting file system
    /// (`logstore::FaultInjectingFs`) installed at start; `None`: the real file system.
    pub fault_injection_file: Option<std::path::PathBuf>,
}

/// Default of `storage.retention_down_replica_wait_ms`: a minute (a restart or a short outage
/// finds its entries still there; a node down for longer catches up from a snapshot).
pub const DEFAULT_RETENTION_DOWN_REPLICA_WAIT: Duration = Duration::from_secs(60);

/// Default of `storage.retention_lagging_replica_max_bytes`: 1 GiB per partition.
pub const DEFAULT_RETENTION_LAGGING_REPLICA_MAX_BYTES: u64 = 1 << 30;

/// Default scrubber rate: 4 MB/s (about 1% of a core for CRC-32C and page-cache reads, far
/// below the disk's bandwidth; see docs/reliability.md for the measured cost).
pub const DEFAULT_SCRUB_BYTES_PER_SECOND: u64 = 4_000_000;

impl Default for StorageSettings {
    fn default() -> StorageSettings {
        StorageSettings {
            segment_bytes: 256 << 20,
            cache_bytes: DEFAULT_CACHE_BYTES,
            max_open_segment_files: logstore::DEFAULT_MAX_OPEN_SEGMENT_FILES,
            sync: SyncMode::Always,
            deletion_allowed: true,
            operator_delete_allowed: false,
            retention_bytes: None,
            retention_age: Some(Duration::from_secs(7 * 24 * 3600)),
            retention_check_interval: Duration::from_secs(10),
            retention_down_replica_wait: DEFAULT_RETENTION_DOWN_REPLICA_WAIT,
            retention_lagging_replica_max_bytes: DEFAULT_RETENTION_LAGGING_REPLICA_MAX_BYTES,
            preallocate_bytes: 16 << 20,
            scrub_bytes_per_second: DEFAULT_SCRUB_BYTES_PER_SECOND,
            scrub_pass_pause: Duration::from_secs(60),
            fault_injection_file: None,
        }
    }
}

// ---- the file format ----------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    node: FileNode,
    #[serde(default)]
    listeners: FileListeners,
    initial_cluster: Option<Vec<String>>,
    #[serde(default)]
    raft: FileRaft,
    #[serde(default)]
    storage: FileStorage,
    #[serde(default)]
    streams: FileStreams,
    #[serde(default)]
    kafka: FileKafka,
    #[serde(default)]
    metadata: FileMetadata,
    #[serde(default)]
    security: FileSecurity,
    peer_tls: Option<FilePeerTls>,
    #[serde(default)]
    admin: crate::admin_auth::FileAdmin,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMetadata {
    snapshot_interval_entries: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileKafka {
    max_connections: Option<usize>,
    max_in_flight_per_connection: Option<usize>,
    request_max_bytes: Option<usize>,
    message_max_bytes: Option<usize>,
    message_timestamp_after_max_ms: Option<u64>,
    connection_idle_ms: Option<u64>,
    auto_create_topics: Option<bool>,
    max_topics: Option<usize>,
    num_partitions: Option<u32>,
    max_partitions: Option<u32>,
    default_replication_factor: Option<usize>,
    offsets_retention_ms: Option<u64>,
    offsets_retention_check_ms: Option<u64>,
    replica_lag_time_max_ms: Option<u64>,
    listeners: Option<Vec<FileKafkaListener>>,
    max_connections_per_ip: Option<usize>,
    max_connections_per_ip_overrides: Option<std::collections::BTreeMap<String, usize>>,
    max_connection_creation_rate: Option<u32>,
    max_connection_creation_rate_per_ip: Option<u32>,
    authentication_timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNode {
    id: u64,
    join: Option<bool>,
    name: Option<String>,
    data_dir: Option<PathBuf>,
    shutdown_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileListeners {
    peer: Option<String>,
    kafka: Option<String>,
    kafka_advertised: Option<String>,
    admin: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRaft {
    tick_ms: Option<u64>,
    heartbeat_ms: Option<u64>,
    election_timeout_ms: Option<u64>,
    max_append_bytes: Option<u64>,
    max_inflight_appends: Option<usize>,
    pipeline: Option<bool>,
    group_commit: Option<bool>,
    leader_rebalance_interval_ms: Option<u64>,
    worker_threads: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileStorage {
    segment_bytes: Option<u64>,
    cache_bytes: Option<u64>,
    max_open_segment_files: Option<usize>,
    sync: Option<String>,
    deletion_allowed: Option<bool>,
    operator_delete_allowed: Option<bool>,
    retention_bytes: Option<u64>,
    retention_hours: Option<u64>,
    retention_check_ms: Option<u64>,
    retention_down_replica_wait_ms: Option<u64>,
    retention_lagging_replica_max_bytes: Option<u64>,
    preallocate_bytes: Option<u64>,
    scrub_rate_mb_per_s: Option<f64>,
    scrub_pause_ms: Option<u64>,
    fault_injection_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileStreams {
    initial: Option<Vec<String>>,
}

/// Default of `storage.cache_bytes`: the tail-cache budget of a node, all streams together
/// (it was 64 MiB per stream, unbounded per node). 128 MiB lets one busy partition cache twice
/// what it could before, and even fully used by partitions that went idle it keeps a node of
/// 1,000 partitions well under its 300 MB memory target.
pub const DEFAULT_CACHE_BYTES: u64 = 128 << 20;

/// Default Kafka port of the embedded single-node setup.
pub const DEFAULT_KAFKA_ADDR: &str = "127.0.0.1:9092";
/// Default Raft peer port of the embedded single-node setup.
pub const DEFAULT_PEER_ADDR: &str = "127.0.0.1:9192";
/// Default data directory of the embedded single-node setup.
pub const DEFAULT_DATA_DIR: &str = "./vdl-data";
/// Highest value `kafka.max_partitions` and `kafka.num_partitions` accept (Kafka's partition
/// index is an int32; this bound keeps a typo from promising what no node can hold).
pub const MAX_PARTITIONS_LIMIT: u32 = 100_000;

impl NodeConfig {
    /// The embedded default: one node (id 1, "vdl1") with data in `./vdl-data`, Kafka on
    /// 127.0.0.1:9092, Raft peers on 127.0.0.1:9192, no admin listener, no initial streams
    /// (topics are created on first use).
    pub fn single_node_default() -> NodeConfig {
        let peer: SocketAddr = DEFAULT_PEER_ADDR.parse().expect("constant address parses");
        NodeConfig {
            id: 1,
            name: "vdl1".into(),
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            peer_listen: peer,
            kafka_listen: DEFAULT_KAFKA_ADDR.parse().expect("constant address parses"),
            kafka_advertised: DEFAULT_KAFKA_ADDR.into(),
            admin_listen: None,
            members: vec![Member {
                name: "vdl1".into(),
                id: 1,
                peer_addr: peer,
            }],
            join: false,
            raft: RaftTiming::default(),
            storage: StorageSettings::default(),
            initial_streams: Vec::new(),
            kafka: KafkaSettings::default(),
            connection_limits: Default::default(),
            metadata: MetadataSettings::default(),
            listeners: Vec::new(),
            security: SecuritySettings::default(),
            peer_tls: None,
            admin: crate::admin_auth::AdminSettings::default(),
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        }
    }

    /// Every Kafka listener of this node, first one first: `[[kafka.listeners]]`, or the one
    /// PLAINTEXT listener named `PLAINTEXT` at `kafka_listen` / `kafka_advertised`.
    pub fn kafka_listeners(&self) -> Vec<KafkaListenerConfig> {
        if self.listeners.is_empty() {
            vec![KafkaListenerConfig::plaintext(
                self.kafka_listen,
                self.kafka_advertised.clone(),
            )]
        } else {
            self.listeners.clone()
        }
    }

    /// Reads and validates a TOML file.
    pub fn from_file(path: &Path) -> Result<NodeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        NodeConfig::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
    }

    /// Parses and validates TOML text.
    pub fn from_toml(text: &str) -> Result<NodeConfig, ConfigError> {
        let mut file: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::from("<text>"),
            message: e.to_string(),
        })?;
        let defaults = NodeConfig::single_node_default();
        let id = file.node.id;
        if id == 0 {
            return invalid("node.id", "must be a non-zero integer");
        }
        let name = file.node.name.unwrap_or_else(|| format!("vdl{id}"));
        let peer_listen = addr("listeners.peer", file.listeners.peer, defaults.peer_listen)?;
        let listeners = match file.kafka.listeners.take() {
            None => Vec::new(),
            Some(_) if file.listeners.kafka.is_some() || file.listeners.kafka_advertised.is_some() => {
                return invalid(
                    "kafka.listeners",
                    "set either kafka.listeners or listeners.kafka/listeners.kafka_advertised, not both",
                )
            }
            Some(list) => crate::security::config::parse_listeners(list)?,
        };
        let (kafka_listen, kafka_advertised) = match listeners.first() {
            Some(first) => (first.listen, first.advertised.clone()),
            None => {
                let kafka_listen = addr(
                    "listeners.kafka",
                    file.listeners.kafka,
                    defaults.kafka_listen,
                )?;
                let kafka_advertised = file
                    .listeners
                    .kafka_advertised
                    .unwrap_or_else(|| kafka_listen.to_string());
                if !kafka_advertised.contains(':') {
                    return invalid("listeners.kafka_advertised", "must be HOST:PORT");
                }
                (kafka_listen, kafka_advertised)
            }
        };
        let security = crate::security::config::parse_security(file.security)?;
        let peer_tls = file.peer_tls.map(crate::security::config::parse_peer_tls);
        let admin_listen = match file.listeners.admin {
            None => None,
            Some(a) => Some(parse_addr("listeners.admin", &a)?),
        };
        // Any security configured makes the admin API require authentication by default.
        let secured = peer_tls.is_some()
            || security.authorizer == crate::security::authorizer::AuthorizerMode::Acl
            || listeners
                .iter()
                .any(|l| l.protocol != crate::security::config::SecurityProtocol::Plaintext);
        let admin = crate::admin_auth::parse_admin(file.admin, secured)?;
        let members = match file.initial_cluster {
            None => vec![Member {
                name: name.clone(),
                id,
                peer_addr: peer_listen,
            }],
            Some(list) => list
                .iter()
                .map(|m| parse_member(m))
                .collect::<Result<Vec<_>, _>>()?,
        };
        check_members(&members, id, &name)?;

        let mut raft = RaftTiming::default();
        let r = file.raft;
        if let Some(v) = r.tick_ms {
            raft.tick = positive_ms("raft.tick_ms", v)?;
        }
        if let Some(v) = r.heartbeat_ms {
            raft.heartbeat = positive_ms("raft.heartbeat_ms", v)?;
        }
        if let Some(v) = r.election_timeout_ms {
            raft.election_timeout = positive_ms("raft.election_timeout_ms", v)?;
        }
        if raft.heartbeat < raft.tick {
            return invalid("raft.heartbeat_ms", "must be at least raft.tick_ms");
        }
        if raft.election_timeout < 2 * raft.heartbeat {
            return invalid(
                "raft.election_timeout_ms",
                "must be at least twice raft.heartbeat_ms",
            );
        }
        if let Some(v) = r.max_append_bytes {
            if v < 4096 {
                return invalid("raft.max_append_bytes", "must be at least 4096");
            }
            raft.max_append_bytes = v;
        }
        if let Some(v) = r.max_inflight_appends {
            if v == 0 {
                return invalid("raft.max_inflight_appends", "must be at least 1");
            }
            raft.max_inflight_appends = v;
        }
        raft.pipeline = r.pipeline.unwrap_or(raft.pipeline);
        raft.group_commit = r.group_commit.unwrap_or(raft.group_commit);
        if let Some(n) = r.worker_threads {
            if n > 256 {
                return invalid("raft.worker_threads", "must be at most 256 (0: automatic)");
            }
            raft.worker_threads = n;
        }
        if let Some(ms) = r.leader_rebalance_interval_ms {
            raft.leader_rebalance_interval = (ms > 0).then(|| Duration::from_millis(ms));
        }

        let mut storage = StorageSettings::default();
        let s = file.storage;
        if let Some(v) = s.segment_bytes {
            if v < 1 << 20 {
                return invalid("storage.segment_bytes", "must be at least 1048576 (1 MiB)");
            }
            storage.segment_bytes = v;
        }
        if let Some(v) = s.cache_bytes {
            storage.cache_bytes = v;
        }
        if let Some(v) = s.max_open_segment_files {
            if v == 0 {
                return invalid("storage.max_open_segment_files", "must be at least 1");
            }
            storage.max_open_segment_files = v;
        }
        storage.preallocate_bytes = s.preallocate_bytes.unwrap_or(storage.preallocate_bytes);
        if let Some(v) = s.sync {
            storage.sync = parse_sync(&v)?;
        }
        storage.deletion_allowed = s.deletion_allowed.unwrap_or(storage.deletion_allowed);
        storage.operator_delete_allowed = s
            .operator_delete_allowed
            .unwrap_or(storage.operator_delete_allowed);
        storage.retention_bytes = s.retention_bytes.or(storage.retention_bytes);
        if let Some(ms) = s.retention_check_ms {
            storage.retention_check_interval = positive_ms("storage.retention_check_ms", ms)?;
        }
        if let Some(ms) = s.retention_down_replica_wait_ms {
            storage.retention_down_replica_wait = Duration::from_millis(ms);
        }
        storage.retention_lagging_replica_max_bytes = s
            .retention_lagging_replica_max_bytes
            .unwrap_or(storage.retention_lagging_replica_max_bytes);
        if let Some(h) = s.retention_hours {
            storage.retention_age = Some(Duration::from_secs(h.saturating_mul(3600)));
        }
        if let Some(mb) = s.scrub_rate_mb_per_s {
            if !(0.0..=100_000.0).contains(&mb) {
                return invalid(
                    "storage.scrub_rate_mb_per_s",
                    "must be between 0 and 100000",
                );
            }
            storage.scrub_bytes_per_second = (mb * 1e6) as u64;
        }
        if let Some(ms) = s.scrub_pause_ms {
            storage.scrub_pass_pause = Duration::from_millis(ms);
        }
        storage.fault_injection_file = s.fault_injection_file;

        let mut kafka = KafkaSettings::default();
        let k = file.kafka;
        let connection_limits = crate::kafka::conn_limits::ConnectionLimitSettings::from_file(
            k.max_connections_per_ip,
            k.max_connections_per_ip_overrides,
            k.max_connection_creation_rate,
            k.max_connection_creation_rate_per_ip,
            k.authentication_timeout_ms,
        )
        .map_err(|e| ConfigError::Invalid {
            key: e.key,
            message: e.message,
        })?;
        for (key, value, target) in [
            (
                "kafka.max_connections",
                k.max_connections,
                &mut kafka.max_connections,
            ),
            (
                "kafka.max_in_flight_per_connection",
                k.max_in_flight_per_connection,
                &mut kafka.max_in_flight_per_connection,
            ),
            (
                "kafka.request_max_bytes",
                k.request_max_bytes,
                &mut kafka.request_max_bytes,
            ),
            (
                "kafka.message_max_bytes",
                k.message_max_bytes,
                &mut kafka.message_max_bytes,
            ),
            ("kafka.max_topics", k.max_topics, &mut kafka.max_topics),
        ] {
            if let Some(v) = value {
                if v == 0 {
                    return invalid(key, "must be positive");
                }
                *target = v;
            }
        }
        kafka.auto_create_topics = k.auto_create_topics.unwrap_or(kafka.auto_create_topics);
        for (key, value, target) in [
            (
                "kafka.num_partitions",
                k.num_partitions,
                &mut kafka.num_partitions,
            ),
            (
                "kafka.max_partitions",
                k.max_partitions,
                &mut kafka.max_partitions,
            ),
        ] {
            if let Some(v) = value {
                if v == 0 || v > MAX_PARTITIONS_LIMIT {
                    return invalid(key, &format!("must be in 1..={MAX_PARTITIONS_LIMIT}"));
                }
                *target = v;
            }
        }
        if kafka.num_partitions > kafka.max_partitions {
            return invalid(
                "kafka.num_partitions",
                "must be at most kafka.max_partitions",
            );
        }
        if let Some(r) = k.default_replication_factor {
            if r == 0 || r > members.len() {
                return invalid(
                    "kafka.default_replication_factor",
                    &format!(
                        "must be in 1..={} (the number of members in initial_cluster)",
                        members.len()
                    ),
                );
            }
            kafka.default_replication_factor = Some(r);
        }
        if let Some(ms) = k.connection_idle_ms {
            kafka.connection_idle = positive_ms("kafka.connection_idle_ms", ms)?;
        }
        if let Some(ms) = k.offsets_retention_ms {
            if i64::try_from(ms).is_err() {
                return invalid(
                    "kafka.offsets_retention_ms",
                    "must be at most 9223372036854775807",
                );
            }
            kafka.offsets_retention = positive_ms("kafka.offsets_retention_ms", ms)?;
        }
        if let Some(ms) = k.offsets_retention_check_ms {
            kafka.offsets_retention_check_interval =
                positive_ms("kafka.offsets_retention_check_ms", ms)?;
        }
        if let Some(ms) = k.replica_lag_time_max_ms {
            kafka.replica_lag_time_max = positive_ms("kafka.replica_lag_time_max_ms", ms)?;
        }
        if let Some(ms) = k.message_timestamp_after_max_ms {
            if i64::try_from(ms).is_err() {
                return invalid(
                    "kafka.message_timestamp_after_max_ms",
                    "must be at most 9223372036854775807",
                );
            }
            kafka.message_timestamp_after_max_ms = ms;
        }

        let mut metadata = MetadataSettings::default();
        if let Some(n) = file.metadata.snapshot_interval_entries {
            if n != 0 && n < MIN_SNAPSHOT_INTERVAL_ENTRIES {
                return invalid(
                    "metadata.snapshot_interval_entries",
                    &format!("must be 0 (never) or at least {MIN_SNAPSHOT_INTERVAL_ENTRIES}"),
                );
            }
            metadata.snapshot_interval_entries = n;
        }

        let initial_streams = file.streams.initial.unwrap_or_default();
        for s in &initial_streams {
            if !valid_stream_name(s) {
                return invalid(
                    "streams.initial",
                    &format!("`{s}` is not a valid name (1-249 of [a-zA-Z0-9._-])"),
                );
            }
        }

        let shutdown_timeout = match file.node.shutdown_timeout_ms {
            None => DEFAULT_SHUTDOWN_TIMEOUT,
            Some(ms) => positive_ms("node.shutdown_timeout_ms", ms)?,
        };
        Ok(NodeConfig {
            shutdown_timeout,
            id,
            name,
            data_dir: file.node.data_dir.unwrap_or(defaults.data_dir),
            peer_listen,
            kafka_listen,
            kafka_advertised,
            admin_listen,
            members,
            join: file.node.join.unwrap_or(false),
            raft,
            storage,
            initial_streams,
            kafka,
            connection_limits,
            metadata,
            listeners,
            security,
            peer_tls,
            admin,
        })
    }

    /// The member entry of another node, by id.
    pub fn member(&self, id: u64) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// Ids of all members, this node included, ascending.
    pub fn member_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        ids
    }

    /// Replicas per partition of a topic created without a replication factor:
    /// `kafka.default_replication_factor` when set, else the smaller of 3 (Kafka's usual
    /// production setting) and the number of members. Always in `1..=members`.
    pub fn default_replication_factor(&self) -> usize {
        let members = self.members.len().max(1);
        self.kafka
            .default_replication_factor
            .unwrap_or(3)
            .clamp(1, members)
    }
}

/// Kafka's rule for topic names, which are also stream names here.
pub fn valid_stream_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

fn invalid<T>(key: &'static str, message: &str) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid {
        key,
        message: message.to_owned(),
    })
}

fn parse_addr(key: &'static str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse().map_err(|_| ConfigError::Invalid {
        key,
        message: format!("`{s}` is not an IP:PORT socket address"),
    })
}

fn addr(
    key: &'static str,
    v: Option<String>,
    default: SocketAddr,
) -> Result<SocketAddr, ConfigError> {
    match v {
        None => Ok(default),
        Some(s) => parse_addr(key, &s),
    }
}

fn positive_ms(key: &'static str, v: u64) -> Result<Duration, ConfigError> {
    if v == 0 {
        return invalid(key, "must be positive");
    }
    Ok(Duration::from_millis(v))
}

/// Parses `always`, `never` or `interval:MS`.
fn parse_sync(v: &str) -> Result<SyncMode, ConfigError> {
    match v {
        "always" => Ok(SyncMode::Always),
        "never" => Ok(SyncMode::Never),
        other => match other.strip_prefix("interval:").map(str::parse::<u64>) {
            Some(Ok(ms)) if ms > 0 => Ok(SyncMode::Interval(Duration::from_millis(ms))),
            _ => invalid(
                "storage.sync",
                &format!("`{v}`: expected always, never or interval:MILLISECONDS"),
            ),
        },
    }
}

/// Parses `name=id@host:port`.
fn parse_member(s: &str) -> Result<Member, ConfigError> {
    let bad = || ConfigError::Invalid {
        key: "initial_cluster",
        message: format!("`{s}`: expected name=id@ip:port"),
    };
    let (name, rest) = s.split_once('=').ok_or_else(bad)?;
    let (id, peer) = rest.split_once('@').ok_or_else(bad)?;
    let id: u64 = id.parse().map_err(|_| bad())?;
    let peer_addr: SocketAddr = peer.parse().map_err(|_| bad())?;
    if name.is_empty() || id == 0 {
        return Err(bad());
    }
    Ok(Member {
        name: name.to_owned(),
        id,
        peer_addr,
    })
}

fn check_members(members: &[Member], id: u64, name: &str) -> Result<(), ConfigError> {
    let mut ids = BTreeSet::new();
    let mut names = BTreeSet::new();
    for m in members {
        if !ids.insert(m.id) {
            return invalid("initial_cluster", &format!("id {} appears twice", m.id));
        }
        if !names.insert(m.name.as_str()) {
            return invalid("initial_cluster", &format!("name {} appears twice", m.name));
        }
    }
    match members.iter().find(|m| m.id == id) {
        None => invalid(
            "initial_cluster",
            &format!("does not list this node (node.id = {id})"),
        ),
        Some(m) if m.name != name => invalid(
            "node.name",
            &format!("`{name}` but initial_cluster calls id {id} `{}`", m.name),
        ),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREE: &str = r#"
        initial_cluster = ["a=1@127.0.0.1:7001", "b=2@127.0.0.1:7002", "c=3@127.0.0.1:7003"]
        [node]
        id = 2
        name = "b"
        data_dir = "/tmp/x"
        [listeners]
        peer = "127.0.0.1:7002"
        kafka = "127.0.0.1:9093"
        [raft]
        heartbeat_ms = 100
        election_timeout_ms = 1000
        [storage]
        sync = "interval:5"
        [streams]
        initial = ["logstream1", "binlog.a"]
    "#;

    #[test]
    fn a_three_node_config_parses() {
        let c = NodeConfig::from_toml(THREE).unwrap();
        assert_eq!(c.id, 2);
        assert_eq!(c.member_ids(), vec![1, 2, 3]);
        assert_eq!(c.kafka_advertised, "127.0.0.1:9093");
        assert_eq!(c.storage.sync, SyncMode::Interval(Duration::from_millis(5)));
        assert_eq!(c.storage.cache_bytes, DEFAULT_CACHE_BYTES, "node-wide");
        assert_eq!(c.storage.max_open_segment_files, 1024);
        assert_eq!(c.raft.heartbeat_ticks(), 2);
        assert_eq!(c.raft.election_ticks(), 20);
        assert_eq!(c.initial_streams, vec!["logstream1", "binlog.a"]);
    }

    #[test]
    fn unknown_keys_are_named() {
        let text = THREE.replace("heartbeat_ms", "heartbeat_msec");
        let err = NodeConfig::from_toml(&text).unwrap_err().to_string();
        assert!(err.contains("heartbeat_msec"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        for (from, to, key) in [
            ("id = 2", "id = 0", "node.id"),
            ("interval:5", "sometimes", "storage.sync"),
            (
                "sync = \"interval:5\"",
                "sync = \"interval:5\"\n        max_open_segment_files = 0",
                "storage.max_open_segment_files",
            ),
            (
                "\"c=3@127.0.0.1:7003\"",
                "\"c=3@nowhere\"",
                "initial_cluster",
            ),
            (
                "election_timeout_ms = 1000",
                "election_timeout_ms = 150",
                "raft.election_timeout_ms",
            ),
            ("name = \"b\"", "name = \"z\"", "node.name"),
            ("\"binlog.a\"", "\"bad/name\"", "streams.initial"),
        ] {
            let err = NodeConfig::from_toml(&THREE.replace(from, to)).unwrap_err();
            match err {
                ConfigError::Invalid { key: k, .. } => assert_eq!(k, key),
                other => panic!("{from} -> {to}: expected Invalid({key}), got {other}"),
            }
        }
    }

    #[test]
    fn the_documented_example_file_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/vdl.example.toml");
        let c = NodeConfig::from_file(&path).unwrap();
        assert_eq!(c.member_ids(), vec![1, 2, 3]);
        assert_eq!(c.raft, RaftTiming::default());
        assert_eq!(c.storage, StorageSettings::default());
        // The file spells the replication factor out; with three members it is the default's.
        assert_eq!(c.default_replication_factor(), 3);
        let spelled_out = KafkaSettings {
            default_replication_factor: None,
            ..c.kafka
        };
        assert_eq!(spelled_out, KafkaSettings::default());
        assert_eq!(c.metadata, MetadataSettings::default());
        // The example names a super user but keeps the default: no authorizer.
        assert_eq!(
            c.security,
            SecuritySettings {
                super_users: vec!["User:admin".into()],
                ..SecuritySettings::default()
            }
        );
    }

    /// `[security]`: the authorizer is "none" unless "acl", super users are principals, and
    /// allow_everyone_if_no_acl_found defaults to false.
    #[test]
    fn the_security_table_is_checked() {
        use crate::security::authorizer::AuthorizerMode;
        let with = |table: &str| NodeConfig::from_toml(&format!("{THREE}\n[security]\n{table}\n"));
        assert_eq!(
            NodeConfig::from_toml(THREE).unwrap().security,
            SecuritySettings::default()
        );
        assert_eq!(SecuritySettings::default().authorizer, AuthorizerMode::None);
        let on = with(
            "authorizer = \"acl\"\nsuper_users = [\"User:admin\", \"User:CN=ops,O=x\"]\n\
             allow_everyone_if_no_acl_found = true",
        )
        .unwrap()
        .security;
        assert_eq!(on.authorizer, AuthorizerMode::Acl);
        assert_eq!(on.super_users, vec!["User:admin", "User:CN=ops,O=x"]);
        assert!(on.allow_everyone_if_no_acl_found);
        for (table, key) in [
            ("authorizer = \"simple\"", "security.authorizer"),
            ("super_users = [\"admin\"]", "security.super_users"),
        ] {
            match with(table).unwrap_err() {
                ConfigError::Invalid { key: k, .. } => assert_eq!(k, key, "{table}"),
                other => panic!("{table}: {other}"),
            }
        }
        assert!(with("authorizer_typo = \"acl\"").is_err());
    }

    /// `[[kafka.listeners]]`, `[security]` and `[peer_tls]`: the first listener is the
    /// node's `kafka_listen`; the single-listener keys cannot be mixed with the list; without
    /// the list the node has one PLAINTEXT listener named PLAINTEXT.
    #[test]
    fn listeners_security_and_peer_tls_parse() {
        let plain = NodeConfig::from_toml(THREE).unwrap();
        let only = plain.kafka_listeners();
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].name, "PLAINTEXT");
        assert_eq!(only[0].listen, plain.kafka_listen);
        assert!(plain.peer_tls.is_none());
        let without_kafka = THREE.replace("kafka = \"127.0.0.1:9093\"", "");
        let text = format!(
            r#"{without_kafka}
            [[kafka.listeners]]
            name = "SASL_SSL"
            listen = "127.0.0.1:9300"
            advertised = "b.example:9300"
            security_protocol = "SASL_SSL"
            tls_cert = "n.pem"
            tls_key = "n.key"
            sasl_mechanisms = ["SCRAM-SHA-512", "PLAIN"]
            [[kafka.listeners]]
            name = "INTERNAL"
            listen = "127.0.0.1:9301"
            [security]
            connections_max_reauth_ms = 60000
            connection_failed_authentication_delay_ms = 5
            [peer_tls]
            cert = "n.pem"
            key = "n.key"
            ca = "peer-ca.pem"
            crl = "peer-crl.pem"
            "#
        );
        let c = NodeConfig::from_toml(&text).unwrap();
        assert_eq!(c.kafka_listen, "127.0.0.1:9300".parse().unwrap());
        assert_eq!(c.kafka_advertised, "b.example:9300");
        assert_eq!(c.kafka_listeners().len(), 2);
        assert_eq!(c.kafka_listeners()[0].sasl_mechanisms.len(), 2);
        assert_eq!(
            c.security.connections_max_reauth,
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            c.security.failed_authentication_delay,
            Duration::from_millis(5)
        );
        let peer_tls = c.peer_tls.as_ref().unwrap();
        assert_eq!(peer_tls.ca, Some("peer-ca.pem".into()));
        assert_eq!(peer_tls.crl, Some("peer-crl.pem".into()));
        let mixed =
            format!("{THREE}\n[[kafka.listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:1\"\n");
        match NodeConfig::from_toml(&mixed).unwrap_err() {
            ConfigError::Invalid { key, .. } => assert_eq!(key, "kafka.listeners"),
            other => panic!("{other}"),
        }
    }

    /// `metadata.snapshot_interval_entries`: 0 (never) or at least the minimum.
    #[test]
    fn the_metadata_snapshot_interval_is_checked() {
        let with = |n: u64| {
            NodeConfig::from_toml(&format!(
                "{THREE}\n[metadata]\nsnapshot_interval_entries = {n}\n"
            ))
        };
        assert_eq!(with(0).unwrap().metadata.snapshot_interval_entries, 0);
        assert_eq!(with(500).unwrap().metadata.snapshot_interval_entries, 500);
        let err = with(MIN_SNAPSHOT_INTERVAL_ENTRIES - 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("metadata.snapshot_interval_entries"), "{err}");
        assert_eq!(
            NodeConfig::from_toml(THREE)
                .unwrap()
                .metadata
                .snapshot_interval_entries,
            10_000
        );
    }

    /// The default replication factor: min(3, members) unless set, and never above the
    /// number of members.
    #[test]
    fn the_replication_factor_fits_the_cluster() {
        let c = NodeConfig::from_toml(THREE).unwrap();
        assert_eq!(c.default_replication_factor(), 3);
        assert_eq!(
            NodeConfig::single_node_default().default_replication_factor(),
            1
        );
        let five = THREE.replace(
            r#""c=3@127.0.0.1:7003"]"#,
            r#""c=3@127.0.0.1:7003", "d=4@127.0.0.1:7004", "e=5@127.0.0.1:7005"]"#,
        );
        assert_eq!(
            NodeConfig::from_toml(&five)
                .unwrap()
                .default_replication_factor(),
            3
        );
        let two = format!("{five}\n[kafka]\ndefault_replication_factor = 2\n");
        assert_eq!(
            NodeConfig::from_toml(&two)
                .unwrap()
                .default_replication_factor(),
            2
        );
        for bad in [0, 4] {
            let text = format!("{THREE}\n[kafka]\ndefault_replication_factor = {bad}\n");
            match NodeConfig::from_toml(&text).unwrap_err() {
                ConfigError::Invalid { key, .. } => {
                    assert_eq!(key, "kafka.default_replication_factor")
                }
                other => panic!("{bad}: {other}"),
            }
        }
    }

    #[test]
    fn the_embedded_default_is_a_single_node_on_9092() {
        let c = NodeConfig::single_node_default();
        assert_eq!(c.kafka_listen.port(), 9092);
        assert_eq!(c.member_ids(), vec![1]);
        assert_eq!(c.storage.sync, SyncMode::Always);
    }
}
