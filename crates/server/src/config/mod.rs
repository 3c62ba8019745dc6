//! Node configuration: the TOML file `vdl start --config FILE` reads, and the embedded default
//! (`vdl start` with no file).
//!
//! Every option is documented in `deploy/vdl.example.toml`. Unknown keys are errors that name the
//! key, so a typo never silently falls back to a default.

mod admin;
mod conn_limits;
mod kafka;
mod members;
mod raft;
pub mod security;
mod storage;
#[cfg(test)]
mod tests;
mod values;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use crate::security::config::{KafkaListenerConfig, SecuritySettings, TlsFiles};
use security::{FilePeerTls, FileSecurity};

pub use admin::AdminSettings;
use admin::{parse_admin, FileAdmin};
pub use conn_limits::{
    canonical_ip, default_per_ip, ConnectionLimitSettings, LimitError,
    DEFAULT_AUTHENTICATION_TIMEOUT, DEFAULT_MAX_CONNECTIONS_PER_IP,
};
use kafka::FileKafka;
pub use kafka::{KafkaSettings, MigrationPolicy, MAX_PARTITIONS_LIMIT, MAX_PARTITION_DATA_BYTES};
pub use members::Member;
use members::{check_members, parse_member};
use raft::FileRaft;
pub use raft::RaftTiming;
use storage::FileStorage;
pub use storage::{
    StorageSettings, SyncMode, DEFAULT_CACHE_BYTES, DEFAULT_RETENTION_DOWN_REPLICA_WAIT,
    DEFAULT_RETENTION_LAGGING_REPLICA_MAX_BYTES, DEFAULT_SCRUB_BYTES_PER_SECOND,
};
use values::{addr, invalid, parse_addr, positive_ms};

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
    pub connection_limits: ConnectionLimitSettings,
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
    /// [`crate::admin::auth`]).
    pub admin: AdminSettings,
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
    admin: FileAdmin,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMetadata {
    snapshot_interval_entries: Option<u64>,
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
struct FileStreams {
    initial: Option<Vec<String>>,
}

/// Default Kafka port of the embedded single-node setup.
pub const DEFAULT_KAFKA_ADDR: &str = "127.0.0.1:9092";
/// Default Raft peer port of the embedded single-node setup.
pub const DEFAULT_PEER_ADDR: &str = "127.0.0.1:9192";
/// Default data directory of the embedded single-node setup.
pub const DEFAULT_DATA_DIR: &str = "./vdl-data";

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
            admin: AdminSettings::default(),
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
            Some(list) => security::parse_listeners(list)?,
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
        let security = security::parse_security(file.security)?;
        let peer_tls = file.peer_tls.map(security::parse_peer_tls);
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
        let admin = parse_admin(file.admin, secured)?;
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

        let raft = raft::parse_raft(file.raft)?;
        let storage = storage::parse_storage(file.storage)?;
        let connection_limits = ConnectionLimitSettings::from_file(
            file.kafka.max_connections_per_ip,
            file.kafka.max_connections_per_ip_overrides.take(),
            file.kafka.max_connection_creation_rate,
            file.kafka.max_connection_creation_rate_per_ip,
            file.kafka.authentication_timeout_ms,
        )
        .map_err(|e| ConfigError::Invalid {
            key: e.key,
            message: e.message,
        })?;
        let kafka = kafka::parse_kafka(file.kafka, members.len())?;

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
