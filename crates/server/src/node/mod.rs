//! A vdl node: its log streams (one Raft group each), the peer transport between nodes, and
//! handles for reading and appending. Can run inside any tokio program (tests start three in one
//! process).
//!
//! This file holds the [`Node`] itself, why it may fail to start ([`NodeError`]), its start-up
//! wiring and its shutdown; each submodule adds the methods of one job:
//! - `catalog`: the topics and streams hosted here (kept in a [`crate::core::catalog`]),
//!   opening them as [`crate::core::topics`] decides, dropping them, their settings;
//! - `raft_groups`: opening and stopping Raft groups, their store and Raft configuration;
//! - `data_dir`: the node's side of the data directory's layout ([`crate::core::data_dir`]);
//! - `metadata_replay`: the metadata group's replay and snapshots, compaction;
//! - `metadata_proposals`: writing commands to the replicated metadata;
//! - `membership`: live brokers, members added and removed, reconciling voters;
//! - `hand_off`: leadership transfers and the hand-off before stopping;
//! - `listeners`: binding a listener, what starts once the node serves clients, the TLS
//!   reloads of the listeners (the Kafka listeners themselves, the group coordinator and the
//!   handlers' view of the node are the Kafka service's, `crate::service`: node/ imports
//!   nothing of `kafka/`);
//! - `security`: SCRAM look-ups, the authorizer, the ACL catch-up;
//! - `background`: the liveness, reassignment, rejoin loops and the scrubber;
//! - `cleaner`: the log cleaner of the compacted topics and what it visits;
//! - `metrics`: the node's counters and scrapes.

mod background;
mod bootstrap_users;
mod catalog;
mod cleaner;
mod data_dir;
mod hand_off;
mod listeners;
mod membership;
mod metadata_proposals;
mod metadata_replay;
mod metrics;
mod raft_groups;
mod security;

use crate::runtime::inbox::InboxSender;
use crate::runtime::{Runtime, Slot};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use thiserror::Error;

use crate::config::NodeConfig;
use crate::metadata::{ClusterMeta, MetadataStateMachine, METADATA_GROUP_ID, METADATA_STREAM};
use crate::replication::group::{AppendError, GroupInput};
use crate::replication::ids::{boot_nonce, group_id_for};
use crate::replication::peer_guard::{PeerGuard, PeerStats};
use crate::replication::router::Registry;
use crate::replication::stream::LogStream;
use crate::replication::transport::{self, LinkFilter, OpenLinks, PeerSender};

use self::background::{finish_reassignments, settle_rejoin, watch_liveness};
pub(crate) use self::listeners::bind_listener;

/// Inputs queued for one group before further ones are dropped (messages) or refused
/// (proposals, answered with `Busy`).
pub const GROUP_INBOX_CAPACITY: usize = 16_384;

/// Why a node or stream could not start.
#[derive(Debug, Error)]
pub enum NodeError {
    /// A listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// A stream's store could not be opened.
    #[error("log stream {name}: {source}")]
    Store {
        /// The stream.
        name: String,
        /// The store error.
        source: logstore::LogStoreError,
    },
    /// raft-rs refused the configuration or state.
    #[error("log stream {name}: raft: {message}")]
    Raft {
        /// The stream.
        name: String,
        /// What raft-rs said.
        message: String,
    },
    /// No such stream on this node.
    #[error("no log stream named {0}")]
    NoSuchStream(String),
    /// A TLS configuration (Kafka listener or peer transport) could not be loaded.
    #[error("TLS for {listener}: {message}")]
    Tls {
        /// The Kafka listener's name, or `peer`.
        listener: String,
        /// What is wrong.
        message: String,
    },
    /// Two stream names hash to the same group id.
    #[error("log streams {0} and {1} map to the same group id")]
    GroupIdCollision(String, String),
    /// The stream's saved commit index is beyond its last durable entry: entries that were
    /// fsynced and acknowledged are missing from the disk. The node refuses to start rather
    /// than serve a log with a hole; an operator must restore the directory or replace it.
    #[error(
        "log stream {name}: the saved commit index {commit} is beyond the last entry on disk \
         ({last_index}): fsynced data is missing from {dir}; restore it, or empty the node's \
         data directory so it rejoins as a new replica"
    )]
    CommitBeyondLog {
        /// The stream.
        name: String,
        /// The saved commit index.
        commit: u64,
        /// The last entry found.
        last_index: u64,
        /// The stream's directory.
        dir: PathBuf,
    },
    /// The metadata snapshot could not be read, is damaged, or does not fit the metadata log.
    #[error("{0}")]
    MetadataSnapshot(#[from] crate::metadata::snapshot::SnapshotFileError),
    /// The metadata log was compacted but no snapshot covers the entries removed.
    #[error(
        "the metadata log in {dir} starts at index {first_index} but the newest snapshot covers \
         only up to {snapshot_index}: the entries between are missing"
    )]
    MetadataLogGap {
        /// The metadata directory.
        dir: PathBuf,
        /// The first entry kept.
        first_index: u64,
        /// The newest snapshot's index (0: none).
        snapshot_index: u64,
    },
    /// The data directory could not be used: its identity files could not be read or
    /// written, or another node (in this process or another) holds its lock.
    #[error("data directory {dir}: {message}")]
    Directory {
        /// The data directory.
        dir: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The data directory holds topic data in the layout of an older version (one directory
    /// per topic name under `streams/`, without incarnations), which this version cannot map
    /// to its topics.
    #[error(
        "{dir} holds topic data in the layout before topic incarnations (streams/<topic>); \
         this version keeps topics in topics/<topic>~<incarnation> and cannot open it: \
         start it with the version that wrote it, or move the directory away"
    )]
    OldLayout {
        /// The directory found.
        dir: PathBuf,
    },
}

/// A running node.
pub struct Node {
    config: NodeConfig,
    registry: Arc<Registry>,
    peers: PeerSender,
    /// The partitions of topics (and streams configured at start) this node is a replica of, by
    /// name and partition index. Shared with the liveness task, which reports the ones led here.
    streams: Arc<Mutex<StreamMap>>,
    /// Where everything lives in the data directory.
    data_dir: crate::core::data_dir::DataDir,
    /// Every open group (the metadata group and every stream's).
    groups: Mutex<Vec<RunningGroup>>,
    /// The worker pool and timer that drive the groups.
    runtime: Runtime,
    peer_task: tokio::task::JoinHandle<()>,
    /// Ends rejoin mode once every group caught up (see [`crate::replication::replicas`]).
    rejoin_task: tokio::task::JoinHandle<()>,
    /// Pings peers and reports silent ones (see [`crate::replication::liveness`]).
    liveness_task: tokio::task::JoinHandle<()>,
    metadata: Arc<RwLock<ClusterMeta>>,
    /// The one path by which this node writes to the metadata (it holds the metadata group's
    /// handle once the group is open).
    metadata_proposer: crate::metadata::proposer::MetadataProposer,
    /// Shared by every store of the node: the tail-cache budget, the open sealed segments, the
    /// active segments' descriptors and the lock on the data directory (taken at start; its
    /// stores hold no `LOCK` descriptor each). [`Node::shutdown`] drops this node's handle on
    /// the lock, which is released once the last of its stores is closed too.
    store_resources: std::sync::Mutex<logstore::StoreResources>,
    /// Topic incarnations whose `DeleteTopic` was in this node's metadata log when it started
    /// (see [`Node::open_topic`]).
    deleted_before_start: Mutex<HashSet<(String, u64)>>,
    /// Set once the metadata group has applied what was committed when this node started
    /// (its replay is done): retention waits for it (see `GroupParts::retention_allowed`).
    retention_allowed: Arc<std::sync::atomic::AtomicBool>,
    /// The metadata commit index at start (0 until the metadata group is open).
    metadata_replay_target: std::sync::atomic::AtomicU64,
    /// Bumped when an applied metadata command asks for the transaction tasks (see
    /// [`Node::transaction_work`]).
    transaction_work: tokio::sync::watch::Sender<u64>,
    /// The peer protocol version each peer last spoke: while one speaks an earlier release's,
    /// metadata commands are written in JSON, which that release reads.
    peer_versions: Arc<crate::replication::peer_wire::PeerVersions>,
    /// Flow control: the buckets of the node-wide limits and client quotas in use here.
    flow: crate::flow::throttle::FlowControl,
    /// Decides what each Kafka request may do (`[security]`; the ACLs are in `metadata`).
    authorizer: crate::security::authorizer::Authorizer,
    /// Set once a metadata barrier committed after start was applied here (see
    /// [`Node::metadata_current`]).
    metadata_current: Arc<std::sync::atomic::AtomicBool>,
    /// Set once the metadata is current and the peers' leader reports are in (see
    /// [`Node::caught_up`]).
    caught_up: std::sync::atomic::AtomicBool,
    /// The peer port's admission checks (members added at runtime are admitted here).
    guard: Arc<PeerGuard>,
    /// The peers the liveness task pings: the configured ones and those added at runtime.
    ping_peers: Arc<RwLock<Vec<u64>>>,
    /// Proposes `FinishReassignment` for the partitions this node leads whose reassignment is
    /// done (see [`crate::replication::membership`]).
    membership_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Members added at runtime, as saved in `known_peers` (see
    /// [`crate::replication::known_peers`]).
    known_peers: Mutex<BTreeMap<u64, std::net::SocketAddr>>,
    /// Held while partitions are opened: the metadata group's thread and a membership
    /// reconcile from another thread must not both open the same partition.
    open_lock: Mutex<()>,
    /// Authentication counters of the Kafka listeners.
    security_stats: Arc<crate::security::stats::SecurityStats>,
    /// The TLS configurations of the listeners that use TLS, by listener name (the Kafka
    /// listeners' added by the Kafka service, the admin listener's by the admin API), for
    /// reloads.
    listener_tls: Mutex<Vec<(String, Arc<crate::security::tls::ReloadingServerTls>)>>,
    /// Mutual TLS between nodes (`[peer_tls]`), for reloads, and the task polling its files.
    peer_tls: Option<(Arc<transport::PeerTls>, tokio::task::JoinHandle<()>)>,
    /// Damaged replicas and the scrubber's counters (see [`crate::storage_faults`]).
    storage_faults: Arc<crate::storage_faults::StorageFaults>,
    /// The background scrubber (None when `storage.scrub_rate_mb_per_s` is 0).
    scrubber: Mutex<Option<crate::scrubber::Scrubber>>,
    /// The log cleaner of the compacted topics' partitions (see `node/cleaner.rs`).
    cleaner: Mutex<Option<crate::runtime::background::BackgroundThread>>,
    /// What the log cleaner did since the node started.
    cleaner_counters: Arc<crate::compaction::cleaner::CleanerCounters>,
    /// Node-wide metrics (request latencies, fsync, connections).
    metrics: Arc<crate::metrics::NodeMetrics>,
    /// Every node's admin address as announced through the metadata log (soft state).
    admin_addresses: Mutex<BTreeMap<u64, String>>,
}

/// Why a leader transfer did not happen.
#[derive(Debug, Error)]
pub enum TransferError {
    /// The topic or partition does not exist.
    #[error("no partition {1} of topic {0}")]
    NoPartition(String, u32),
    /// The target is not one of the partition's replicas.
    #[error("node {to} is not a replica of the partition (replicas: {replicas:?})")]
    NotAReplica {
        /// The asked-for leader.
        to: u64,
        /// The partition's replicas.
        replicas: Vec<u64>,
    },
    /// The request could not be written to the metadata log.
    #[error("cannot write the request to the metadata log: {0}")]
    Propose(AppendError),
    /// The target did not become leader in time.
    #[error("node {to} did not become leader in time (leader now: {leader}; 0: none)")]
    Timeout {
        /// The asked-for leader.
        to: u64,
        /// Who leads now (0: none known).
        leader: u64,
    },
}

/// What [`Node::hand_off_leadership`] achieved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandOffReport {
    /// Groups this node led when it started that have another voter (a group of one voter
    /// cannot hand over and is not counted).
    pub led: usize,
    /// Groups still led here when it gave up (0: all handed over).
    pub still_led: usize,
}

/// Open streams by topic name, then partition index (only the partitions hosted here).
type StreamMap = crate::core::catalog::Catalog<LogStream>;

/// A running group: its group id, its inbox, and its slot in the node's runtime.
type RunningGroup = (u64, InboxSender<GroupInput>, Arc<Slot>);

/// What kind of Raft group to open.
enum GroupKind {
    /// A log stream (a topic, or a stream configured at start) in this directory.
    Stream(PathBuf),
    /// The cluster metadata group, with its state machine.
    Metadata(MetadataStateMachine),
}

impl Node {
    /// Starts a node inside the current tokio runtime: binds the peer listener, connects to
    /// peers, opens (or creates) every initial stream and starts its Raft group.
    pub async fn start(config: NodeConfig) -> Result<Arc<Node>, NodeError> {
        Node::start_with_filter(config, Arc::new(OpenLinks)).await
    }

    /// Like [`Node::start`], with a filter on outgoing peer links (fault-injection tests).
    pub async fn start_with_filter(
        config: NodeConfig,
        filter: Arc<dyn LinkFilter>,
    ) -> Result<Arc<Node>, NodeError> {
        // One lock for every store under the data directory (the metadata log, streams,
        // topics): held for the node's life, refused while another node (in this process or
        // another) has the directory.
        let root_lock =
            logstore::RootLock::acquire(&config.data_dir).map_err(|e| NodeError::Directory {
                dir: config.data_dir.clone(),
                message: e.to_string(),
            })?;
        let listener = bind_listener(config.peer_listen).await?;
        let directories = crate::replication::replicas::Directories::open(&config.data_dir)
            .map_err(|e| NodeError::Directory {
                dir: config.data_dir.clone(),
                message: e.to_string(),
            })?;
        let peer_stats = Arc::new(PeerStats::default());
        // The configured members, and those added at runtime this node heard of before.
        let known_peers = crate::replication::known_peers::load(&config.data_dir).map_err(|e| {
            NodeError::Directory {
                dir: config.data_dir.clone(),
                message: e.to_string(),
            }
        })?;
        let mut peer_list: Vec<(u64, std::net::SocketAddr)> =
            config.members.iter().map(|m| (m.id, m.peer_addr)).collect();
        for (id, addr) in &known_peers {
            if config.member(*id).is_none() {
                peer_list.push((*id, *addr));
            }
        }
        let others: Vec<u64> = peer_list
            .iter()
            .map(|(id, _)| *id)
            .filter(|m| *m != config.id)
            .collect();
        // A peer leads at most every partition (and the configured streams); the limit is
        // generous since creates racing from several nodes may pass max_partitions by a few.
        let max_reported = (config.kafka.max_partitions as usize)
            .saturating_mul(2)
            .saturating_add(config.initial_streams.len());
        let registry = Arc::new(Registry {
            directories: Arc::new(directories),
            groups: RwLock::new(HashMap::new()),
            stats: peer_stats.clone(),
            peers: Mutex::new(HashMap::new()),
            liveness: Arc::new(crate::replication::liveness::Liveness::new(&others)),
            leaders: crate::replication::leaders::LeaderBook::new(&others, max_reported),
            leadership: Arc::default(),
        });
        let guard = Arc::new(PeerGuard::new(
            config.id,
            &peer_list,
            Arc::new(crate::metadata::forwarded::MetadataForwarding),
        ));
        let ping_peers = Arc::new(RwLock::new(others.clone()));
        let versions = Arc::new(crate::replication::peer_wire::PeerVersions::default());
        let peer_tls = match &config.peer_tls {
            None => None,
            Some(files) => Some(Arc::new(
                transport::PeerTls::from_files(files, config.id).map_err(|e| NodeError::Tls {
                    listener: "the peer transport".into(),
                    message: e.to_string(),
                })?,
            )),
        };
        let peer_tls_reload = peer_tls
            .as_ref()
            .map(|t| (t.clone(), crate::security::peer_tls::spawn_reload_poll(t)));
        let peer_task = tokio::spawn(transport::serve_peers(
            listener,
            registry.clone(),
            guard.clone(),
            peer_stats,
            versions.clone(),
            peer_tls.clone(),
        ));
        let listener_addresses = config
            .kafka_listeners()
            .into_iter()
            .map(|l| (l.name, l.advertised))
            .collect();
        let peers = transport::start_senders(
            config.id,
            config.kafka_advertised.clone(),
            listener_addresses,
            &peer_list,
            registry.clone(),
            filter,
            versions.clone(),
            peer_tls,
        );
        let rejoin_task = tokio::spawn(settle_rejoin(registry.clone(), peers.clone()));
        let streams = Arc::new(Mutex::new(StreamMap::new()));
        let liveness_task = tokio::spawn(watch_liveness(
            registry.clone(),
            peers.clone(),
            streams.clone(),
            config.id,
            ping_peers.clone(),
            config.raft.heartbeat,
            config.raft.election_timeout,
        ));
        let workers = crate::runtime::worker_count(config.raft.worker_threads);
        let runtime = Runtime::start(&format!("vdl{}", config.id), workers, config.raft.tick)
            .map_err(|e| NodeError::Raft {
                name: "runtime".to_owned(),
                message: format!("cannot start the group runtime's threads: {e}"),
            })?;
        let store_resources = std::sync::Mutex::new(
            logstore::StoreResources::with_limits(
                config.storage.cache_bytes,
                config.storage.max_open_segment_files,
                config.storage.max_open_active_files,
            )
            .with_root_lock(root_lock),
        );
        // A joining node's metadata starts from the cluster's members without itself: the
        // log it receives adds it (the same state the other members have at that point).
        let metadata = ClusterMeta::with_members(
            config
                .members
                .iter()
                .filter(|m| !config.join || m.id != config.id)
                .map(|m| {
                    (
                        m.id,
                        crate::metadata::MemberRecord {
                            name: m.name.clone(),
                            peer_addr: m.peer_addr.to_string(),
                            kafka_addr: String::new(),
                            leaving: false,
                        },
                    )
                })
                .collect(),
        );
        let authorizer = crate::security::authorizer::Authorizer::new(
            config.security.authorizer,
            config.security.super_users.iter().cloned(),
            config.security.allow_everyone_if_no_acl_found,
        );
        let metadata = Arc::new(RwLock::new(metadata));
        let metadata_proposer = crate::metadata::proposer::MetadataProposer::new(
            config.id,
            boot_nonce(),
            versions.clone(),
            metadata.clone(),
        );
        let data_dir = crate::core::data_dir::DataDir::new(config.data_dir.clone());
        let node = Arc::new(Node {
            authorizer,
            metadata_current: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            caught_up: std::sync::atomic::AtomicBool::new(false),
            config,
            registry,
            peers,
            rejoin_task,
            liveness_task,
            streams,
            data_dir,
            groups: Mutex::new(Vec::new()),
            runtime,
            peer_task,
            metadata,
            metadata_proposer,
            store_resources,
            deleted_before_start: Mutex::new(HashSet::new()),
            retention_allowed: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            metadata_replay_target: std::sync::atomic::AtomicU64::new(u64::MAX),
            transaction_work: tokio::sync::watch::Sender::new(0),
            peer_versions: versions,
            flow: crate::flow::throttle::FlowControl::default(),
            guard,
            ping_peers,
            membership_task: Mutex::new(None),
            known_peers: Mutex::new(known_peers),
            open_lock: Mutex::new(()),
            security_stats: Arc::new(crate::security::stats::SecurityStats::default()),
            listener_tls: Mutex::new(Vec::new()),
            peer_tls: peer_tls_reload,
            storage_faults: Arc::new(crate::storage_faults::StorageFaults::default()),
            scrubber: Mutex::new(None),
            cleaner: Mutex::new(None),
            cleaner_counters: Arc::default(),
            metrics: Arc::new(crate::metrics::NodeMetrics::new(
                &crate::served_apis::SERVED_APIS
                    .iter()
                    .map(|(api, _, _)| *api)
                    .collect::<Vec<_>>(),
            )),
            admin_addresses: Mutex::new(BTreeMap::new()),
        });
        node.refuse_old_layout()?;
        let host: std::sync::Weak<Node> = Arc::downgrade(&node);
        let host: std::sync::Weak<dyn crate::metadata::MetadataHost> = host;
        let sm = MetadataStateMachine::new(
            node.metadata.clone(),
            host,
            node.config.data_dir.join(METADATA_STREAM),
            node.config.metadata.snapshot_interval_entries,
        );
        let (voters, learners) = if node.config.join {
            let others: Vec<u64> = node
                .config
                .member_ids()
                .into_iter()
                .filter(|id| *id != node.config.id)
                .collect();
            (others, vec![node.config.id])
        } else {
            (node.config.member_ids(), Vec::new())
        };
        node.open_group(
            METADATA_STREAM,
            0,
            METADATA_GROUP_ID,
            0,
            GroupKind::Metadata(sm),
            voters,
            learners,
            None,
        )?;
        let mut seen: HashMap<u64, String> = HashMap::new();
        let initial_streams = if node.config.join {
            if !node.config.initial_streams.is_empty() {
                tracing::warn!("streams.initial is ignored on a joining node: those streams stay on the initial members");
            }
            Vec::new()
        } else {
            node.config.initial_streams.clone()
        };
        for name in initial_streams {
            let id = group_id_for(&name);
            if let Some(other) = seen.insert(id, name.clone()) {
                return Err(NodeError::GroupIdCollision(other, name));
            }
            node.open_stream(&name)?;
        }
        node.reconcile_membership();
        *node
            .membership_task
            .lock()
            .unwrap_or_else(|e| e.into_inner()) =
            Some(tokio::spawn(finish_reassignments(Arc::downgrade(&node))));
        node.start_scrubber();
        node.start_cleaner();
        // vdl_authentication_failures_total counts failed SASL logins and TLS handshakes.
        let stats = node.security_stats.clone();
        node.metrics
            .set_authentication_failures_source(Box::new(move || {
                let s = stats.snapshot();
                s.authentication_failures + s.tls_handshake_failures
            }));
        let stats = node.security_stats.clone();
        node.metrics.set_connection_limit_source(Box::new(move || {
            let s = stats.snapshot();
            (
                s.connections_refused_per_ip + s.connections_refused_rate_per_ip,
                s.authentication_timeouts,
            )
        }));
        Ok(node)
    }

    /// This node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The cluster metadata as applied on this node.
    pub fn metadata(&self) -> std::sync::RwLockReadGuard<'_, ClusterMeta> {
        self.metadata.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this node is in rejoin mode (its disk was replaced and some Raft group has not
    /// caught up yet; it grants no votes meanwhile, see [`crate::replication::replicas`]).
    pub fn is_rejoining(&self) -> bool {
        self.registry.directories.rejoin().is_active()
    }

    /// This node's limit on catch-up replication (see [`crate::flow::replication`]).
    pub fn catch_up_limiter(&self) -> &crate::flow::replication::ReplicationLimiter {
        self.peers.catch_up_limiter()
    }

    /// This node's flow control (limits and quotas are in [`Node::flow_settings`]).
    pub fn flow(&self) -> &crate::flow::throttle::FlowControl {
        &self.flow
    }

    /// The flow limits and client quotas in force, as the replicated metadata holds them.
    pub fn flow_settings(&self) -> Arc<crate::flow::settings::FlowSettings> {
        self.metadata().flow.clone()
    }

    /// Stops the scrubber, the log cleaner, every group thread (their pending appends fail with `Stopped`) and
    /// the peer listener. Data already synced stays; nothing more is written.
    pub fn shutdown(&self) {
        if let Some(t) = self
            .membership_task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            t.abort();
        }
        drop(
            self.scrubber
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        drop(
            self.cleaner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        self.sync_all();
        self.peer_task.abort();
        if let Some((_, poll)) = &self.peer_tls {
            poll.abort();
        }
        self.rejoin_task.abort();
        self.liveness_task.abort();
        self.registry
            .groups
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let groups = std::mem::take(&mut *self.groups.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, _, slot) in &groups {
            slot.stop();
        }
        self.runtime.shutdown();
        // Release this node's handles on the stores (handles held elsewhere keep theirs).
        self.streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.metadata_proposer.set_group(None);
        // Let go of the data directory's lock: a node started again on it (in this process)
        // takes it once this node's stores are closed, even while this `Node` is still
        // referenced somewhere.
        self.store_resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .root_lock = None;
    }
}

impl Node {
    /// Syncs every store's unsynced tail (under `storage.sync = "always"` there is none; with
    /// another sync mode this makes a clean shutdown lose nothing).
    pub fn sync_all(&self) {
        for s in self.all_groups() {
            if let Err(e) = s.store.write().unwrap_or_else(|e| e.into_inner()).sync() {
                tracing::error!(stream = %s.name, partition = s.partition, "sync at shutdown failed: {e}");
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.shutdown();
    }
}
