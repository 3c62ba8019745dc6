//! A vdl node: its log streams (one Raft group each), the peer transport between nodes, and
//! handles for reading and appending. Can run inside any tokio program (tests start three in one
//! process).

use crate::runtime::inbox::{inbox_with_waker, InboxSender};
use crate::runtime::{Runtime, Slot};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use logstore::{LogStore, StoreConfig, SyncPolicy};
use raft::RawNode;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{NodeConfig, SyncMode};
use crate::metadata::{
    ClusterMeta, CommittedOffset, MetaCommand, MetaEntry, MetadataStateMachine, RequestId,
    METADATA_GROUP_ID, METADATA_STREAM,
};
use crate::replication::group::{
    new_group, try_deliver, AppendError, GroupInput, GroupParts, Visible,
};
use crate::replication::ids::{boot_nonce, group_id_for, group_id_for_topic};
use crate::replication::peer_guard::{PeerGuard, PeerStats};
use crate::replication::producer_snapshot::rebuild_producers;
use crate::replication::raft_storage::{RaftStorage, SharedStore};
use crate::replication::router::Registry;
use crate::replication::stream::LogStream;
use crate::replication::transport::{self, LinkFilter, OpenLinks, PeerSender};
use crate::topic_config::TopicSettings;

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
    MetadataSnapshot(#[from] crate::metadata_snapshot::SnapshotFileError),
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
    /// The data directory's identity files could not be read or written.
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

/// The store retention policy of a topic's settings.
fn retention_policy(settings: &TopicSettings) -> logstore::RetentionPolicy {
    logstore::RetentionPolicy {
        max_segments: None,
        max_bytes: settings.retention_bytes,
        max_age: settings.retention_age,
    }
}

/// A running node.
pub struct Node {
    config: NodeConfig,
    registry: Arc<Registry>,
    peers: PeerSender,
    /// The partitions of topics (and streams configured at start) this node is a replica of, by
    /// name and partition index. Shared with the liveness task, which reports the ones led here.
    streams: Arc<Mutex<StreamMap>>,
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
    metadata_group: Mutex<Option<LogStream>>,
    /// Shared by every store of the node: the tail-cache budget and the open sealed segments.
    store_resources: logstore::StoreResources,
    /// Consumer group membership, while this node coordinates groups (leads the metadata group).
    group_coordinator: crate::kafka::group_coordinator::Coordinator,
    /// Drawn at start: with a counter, makes metadata request ids unique across restarts.
    boot_nonce: u64,
    /// Topic incarnations whose `DeleteTopic` was in this node's metadata log when it started
    /// (see [`Node::open_topic`]).
    deleted_before_start: Mutex<HashSet<(String, u64)>>,
    request_seq: std::sync::atomic::AtomicU64,
    /// Set once the metadata group has applied what was committed when this node started
    /// (its replay is done): retention waits for it (see `GroupParts::retention_allowed`).
    retention_allowed: Arc<std::sync::atomic::AtomicBool>,
    /// The metadata commit index at start (0 until the metadata group is open).
    metadata_replay_target: std::sync::atomic::AtomicU64,
    /// The peer protocol version each peer last spoke: while one speaks an earlier release's,
    /// metadata commands are written in JSON, which that release reads.
    peer_versions: Arc<crate::replication::peer_wire::PeerVersions>,
    /// Flow control: the buckets of the node-wide limits and client quotas in use here.
    flow: crate::flow::throttle::FlowControl,
    /// Decides what each Kafka request may do (`[security]`; the ACLs are in `metadata`).
    authorizer: crate::security::authorizer::Authorizer,
    /// Set once a metadata barrier committed after start was applied here (see
    /// [`Node::acls_current`]).
    acls_current: Arc<std::sync::atomic::AtomicBool>,
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
    /// The TLS configurations of the Kafka listeners that use TLS, by listener name (set by
    /// `serve_kafka`), for reloads.
    listener_tls: Mutex<Vec<(String, Arc<crate::security::tls::ReloadingServerTls>)>>,
    /// Mutual TLS between nodes (`[peer_tls]`), for reloads, and the task polling its files.
    peer_tls: Option<(Arc<transport::PeerTls>, tokio::task::JoinHandle<()>)>,
    /// Damaged replicas and the scrubber's counters (see [`crate::storage_faults`]).
    storage_faults: Arc<crate::storage_faults::StorageFaults>,
    /// The background scrubber (None when `storage.scrub_rate_mb_per_s` is 0).
    scrubber: Mutex<Option<crate::scrubber::Scrubber>>,
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
type StreamMap = HashMap<String, BTreeMap<u32, LogStream>>;

/// Where a topic's partitions live: its incarnation and each partition's replicas (preferred
/// leader first), as the replicated metadata says (or, for a stream configured at start, one
/// partition on every member).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicLayout {
    /// The topic's incarnation (0 for a stream configured at start).
    pub incarnation: u64,
    /// Replicas of partition `p` at index `p`.
    pub replicas: Vec<Vec<u64>>,
}

/// Pings every peer once per heartbeat interval and reports to every group each peer not heard
/// from for an election timeout (see [`crate::replication::liveness`]). Each ping carries this
/// node's leader report when it is due (see [`crate::replication::leaders`]).
async fn watch_liveness(
    registry: Arc<Registry>,
    peers: PeerSender,
    streams: Arc<Mutex<StreamMap>>,
    me: u64,
    others: Arc<RwLock<Vec<u64>>>,
    every: Duration,
    timeout: Duration,
) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut schedule = crate::replication::leaders::ReportSchedule::default();
    loop {
        interval.tick().await;
        let report = schedule.due(led_here(&streams, me), std::time::Instant::now());
        let others = others.read().unwrap_or_else(|e| e.into_inner()).clone();
        for peer in &others {
            let mut ping = crate::replication::liveness::ping(me, *peer);
            if let Some(report) = &report {
                ping.context = report.clone();
            }
            peers.send(crate::replication::liveness::LIVENESS_GROUP, ping);
        }
        for peer in registry
            .liveness
            .newly_down(std::time::Instant::now(), timeout)
        {
            tracing::info!(
                peer,
                "peer not heard from for an election timeout: waking its groups"
            );
            registry.tell_all_groups(|| GroupInput::PeerDown(peer));
        }
    }
}

/// Whether member `id` is this node or among the connected brokers `live`.
fn kafka_live_or_self(id: u64, me: u64, live: &[(u64, String)]) -> bool {
    id == me || live.iter().any(|(l, _)| *l == id)
}

/// Every 200 ms, proposes `FinishReassignment` for each partition this node leads whose Raft
/// group reached its new replicas (see [`crate::replication::membership`]); ends with the node.
async fn finish_reassignments(node: std::sync::Weak<Node>) {
    let mut interval = tokio::time::interval(Duration::from_millis(200));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(node) = node.upgrade() else {
            return;
        };
        for (name, incarnation, partition) in node.settled_reassignments() {
            tracing::info!(topic = %name, partition, "reassignment done");
            let cmd = MetaCommand::FinishReassignment {
                name,
                incarnation,
                partition,
            };
            if let Err(e) = node.propose_metadata(&cmd, Duration::from_secs(5)).await {
                tracing::debug!("finishing a reassignment failed (retried): {e}");
            }
        }
    }
}

/// The groups among `streams` that node `me` leads now, with their terms.
fn led_here(streams: &Mutex<StreamMap>, me: u64) -> Vec<(u64, u64)> {
    let streams = streams.lock().unwrap_or_else(|e| e.into_inner());
    streams
        .values()
        .flat_map(BTreeMap::values)
        .filter_map(|s| {
            let v = s.visible();
            (v.leader == me).then_some((s.group, v.term))
        })
        .collect()
}

/// While this node is rejoining after a replaced disk, checks every 200 ms whether every group
/// has caught up; then ends rejoin mode and reconnects to the peers so their hellos say so.
async fn settle_rejoin(registry: Arc<Registry>, peers: PeerSender) {
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if !registry.directories.rejoin().is_active() {
            continue;
        }
        let groups: Vec<u64> = registry
            .groups
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect();
        if registry.directories.maybe_settle(&groups) {
            peers.redial_all();
        }
    }
}

/// How long a listener's address may stay in use before binding it fails: the listener of a
/// node that was just shut down in the same process (its task is cancelled, not yet dropped),
/// or of a previous process of this node that is still exiting, lets go of it within this.
const BIND_RETRY_FOR: Duration = Duration::from_secs(5);

/// Binds `addr`, retrying while it is in use for at most [`BIND_RETRY_FOR`].
async fn bind_listener(addr: std::net::SocketAddr) -> Result<TcpListener, NodeError> {
    let deadline = tokio::time::Instant::now() + BIND_RETRY_FOR;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(source) => return Err(NodeError::Bind { addr, source }),
        }
    }
}

/// How often the TLS files of the Kafka listeners are checked for changes.
pub const TLS_RELOAD_POLL: Duration = Duration::from_secs(2);

/// Pause between attempts to propose a metadata command while no leader is known.
const METADATA_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Largest segment of the metadata log: compaction below a snapshot deletes whole segments,
/// so small ones keep what stays on disk close to the snapshot.
const METADATA_SEGMENT_BYTES: u64 = 1 << 20;

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
            liveness: crate::replication::liveness::Liveness::new(&others),
            leaders: crate::replication::leaders::LeaderBook::new(&others, max_reported),
        });
        let guard = Arc::new(PeerGuard::new(config.id, &peer_list));
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
        let store_resources = logstore::StoreResources::new(
            config.storage.cache_bytes,
            config.storage.max_open_segment_files,
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
        let node = Arc::new(Node {
            authorizer,
            acls_current: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            config,
            registry,
            peers,
            rejoin_task,
            liveness_task,
            streams,
            groups: Mutex::new(Vec::new()),
            runtime,
            peer_task,
            metadata: Arc::new(RwLock::new(metadata)),
            metadata_group: Mutex::new(None),
            store_resources,
            group_coordinator: crate::kafka::group_coordinator::Coordinator::new(),
            boot_nonce: boot_nonce(),
            deleted_before_start: Mutex::new(HashSet::new()),
            request_seq: std::sync::atomic::AtomicU64::new(0),
            retention_allowed: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            metadata_replay_target: std::sync::atomic::AtomicU64::new(u64::MAX),
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
            metrics: Arc::new(crate::metrics::NodeMetrics::new(
                &crate::kafka::handlers::SERVED_APIS
                    .iter()
                    .map(|(api, _, _)| *api)
                    .collect::<Vec<_>>(),
            )),
            admin_addresses: Mutex::new(BTreeMap::new()),
        });
        node.refuse_old_layout()?;
        let sm = MetadataStateMachine::new(
            node.metadata.clone(),
            Arc::downgrade(&node),
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

    /// Binds every Kafka listener (reading the TLS files of those that use TLS) and serves
    /// Kafka clients on them until the returned task is aborted. While it runs, TLS files
    /// whose modification time changed are re-read every [`TLS_RELOAD_POLL`].
    pub async fn serve_kafka(self: &Arc<Self>) -> Result<tokio::task::JoinHandle<()>, NodeError> {
        // The sender stays with the listeners' task: the shutdown signal never fires.
        let (keep, never) =
            tokio::sync::watch::channel(crate::kafka::listener::ShutdownPhase::Running);
        self.start_kafka_listeners(never, Some(keep)).await
    }

    /// Like [`Node::serve_kafka`], with a graceful shutdown (see [`crate::shutdown`]): at
    /// `StopAccepting` the listeners close their sockets, at `Drain` every connection answers
    /// what it has read and closes; the returned task ends once all have.
    pub async fn serve_kafka_until(
        self: &Arc<Self>,
        shutdown: crate::kafka::listener::ShutdownSignal,
    ) -> Result<tokio::task::JoinHandle<()>, NodeError> {
        self.start_kafka_listeners(shutdown, None).await
    }

    async fn start_kafka_listeners(
        self: &Arc<Self>,
        shutdown: crate::kafka::listener::ShutdownSignal,
        keep: Option<tokio::sync::watch::Sender<crate::kafka::listener::ShutdownPhase>>,
    ) -> Result<tokio::task::JoinHandle<()>, NodeError> {
        let mut endpoints = Vec::new();
        for config in self.config.kafka_listeners() {
            let tls = match &config.tls {
                None => None,
                Some(files) => {
                    let tls = crate::security::tls::ReloadingServerTls::new(files.clone())
                        .map_err(|e| NodeError::Tls {
                            listener: config.name.clone(),
                            message: e.to_string(),
                        })?;
                    Some(Arc::new(tls))
                }
            };
            let listener = bind_listener(config.listen).await?;
            if let Some(tls) = &tls {
                self.listener_tls
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((config.name.clone(), tls.clone()));
            }
            endpoints.push((
                listener,
                Arc::new(crate::kafka::listener::Endpoint { config, tls }),
            ));
        }
        // The group coordinator's background tasks (deadlines, stored membership, offset
        // expiry) run whether or not a group request ever reaches this node.
        crate::kafka::groups::coordinator(self);
        self.start_acl_catch_up();
        crate::bootstrap_users::start_import(self);
        let node = self.clone();
        Ok(tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            let limits = crate::kafka::listener::connection_limits(&node);
            for (listener, endpoint) in endpoints {
                tasks.spawn(crate::kafka::serve(
                    listener,
                    node.clone(),
                    endpoint,
                    limits.clone(),
                    shutdown.clone(),
                ));
            }
            let weak = Arc::downgrade(&node);
            drop(node);
            let reload = async move {
                loop {
                    tokio::time::sleep(TLS_RELOAD_POLL).await;
                    let Some(node) = weak.upgrade() else { return };
                    node.reload_tls(false);
                }
            };
            // Ends when every listener has (after a shutdown's drain); aborting this task
            // drops the set, which aborts every listener.
            tokio::select! {
                _ = async { while tasks.join_next().await.is_some() {} } => {}
                _ = reload => {}
            }
            drop(keep);
        }))
    }

    /// Adds `tls` (named `name` in logs) to what [`Node::reload_tls`] re-reads: the admin
    /// listener's certificates are reloaded with the Kafka listeners'.
    pub fn reload_tls_with_listeners(
        &self,
        name: &str,
        tls: Arc<crate::security::tls::ReloadingServerTls>,
    ) {
        self.listener_tls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_string(), tls));
    }

    /// Re-reads the TLS files of the Kafka listeners, the admin listener and `[peer_tls]`: all of them (`force`,
    /// on SIGHUP) or those whose modification time changed. New connections get the new
    /// certificates; a file that does not load keeps the previous ones (logged).
    pub fn reload_tls(&self, force: bool) {
        // Changed peer TLS files are picked up by their own poll task.
        if let (true, Some((peer_tls, _))) = (force, &self.peer_tls) {
            peer_tls.reload_logged(true);
        }
        let listeners = self
            .listener_tls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (name, tls) in listeners {
            let result = if force {
                tls.reload().map(|()| true)
            } else {
                tls.reload_if_changed()
            };
            match result {
                Ok(true) => tracing::info!(listener = %name, "TLS certificates reloaded"),
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    listener = %name,
                    "TLS certificates not reloaded, the previous ones stay in use: {e}"
                ),
            }
        }
    }

    /// The SCRAM credential of `user` for `mechanism`: the replicated one (set with
    /// AlterUserScramCredentials, e.g. `kafka-configs.sh --entity-type users`, or imported
    /// from the bootstrap users); until the bootstrap users were imported, else the configured
    /// one (`[[security.scram_users]]`, see [`crate::bootstrap_users`]).
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::ScramMechanism,
    ) -> Option<crate::security::scram::ScramCredential> {
        crate::bootstrap_users::credential(self, user, mechanism)
    }

    /// Authentication counters of the Kafka listeners.
    pub fn security_stats(&self) -> &crate::security::stats::SecurityStats {
        &self.security_stats
    }

    /// The same counters, shared (for the connection limits).
    pub fn security_stats_arc(&self) -> Arc<crate::security::stats::SecurityStats> {
        self.security_stats.clone()
    }

    /// Whether this node's ACLs are known to be current: a metadata barrier committed after
    /// this node started has been applied here, so every ACL change committed before the start
    /// (also ones this node had not heard were committed when it stopped) is applied. Until
    /// then, with the ACL authorizer, only super users are allowed anything: a node must not
    /// decide with a DENY it has not replayed yet. Always true without an authorizer.
    pub fn acls_current(&self) -> bool {
        self.acls_current.load(std::sync::atomic::Ordering::Acquire)
    }

    /// With the ACL authorizer, commits one metadata barrier (retried every 200 ms, 5 s per
    /// attempt, until it commits or the node ends) and then marks the ACLs current.
    fn start_acl_catch_up(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if !self.authorizer.is_enabled() {
            self.acls_current.store(true, Ordering::Release);
            return;
        }
        if self.acls_current() {
            return;
        }
        let node = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(n) = node.upgrade() else {
                    return;
                };
                if n.metadata_group().is_none() {
                    return;
                }
                match n.metadata_barrier(Duration::from_secs(5)).await {
                    Ok(()) => {
                        n.acls_current.store(true, Ordering::Release);
                        tracing::info!("ACLs caught up with the cluster metadata");
                        return;
                    }
                    Err(e) => tracing::debug!("ACL catch-up barrier not committed yet: {e}"),
                }
                drop(n);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }

    /// This node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// A handle on partition 0 of topic (or configured stream) `name`.
    pub fn stream(&self, name: &str) -> Option<LogStream> {
        self.partition(name, 0)
    }

    /// A handle on partition `partition` of topic `name`, if this node is one of its replicas.
    pub fn partition(&self, name: &str, partition: u32) -> Option<LogStream> {
        self.streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .and_then(|p| p.get(&partition))
            .cloned()
    }

    /// Handles on the partitions of topic `name` this node is a replica of, in partition order
    /// (empty when it hosts none, or the topic is unknown).
    pub fn partitions(&self, name: &str) -> Vec<LogStream> {
        self.streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Where topic `name` lives: from the replicated metadata, or a stream configured at start
    /// (one partition, every member). `None` when there is no such topic.
    pub fn topic_layout(&self, name: &str) -> Option<TopicLayout> {
        if let Some(t) = self.metadata().topics.get(name) {
            return Some(TopicLayout {
                incarnation: t.created_at_index,
                replicas: t.replicas.clone(),
            });
        }
        self.partition(name, 0)
            .filter(|s| s.incarnation == 0)
            .map(|_| TopicLayout {
                incarnation: 0,
                replicas: vec![self.config.member_ids()],
            })
    }

    /// The incarnation of topic `name` (0 for a stream configured at start), without copying
    /// its replica lists; `None` when there is no such topic.
    pub fn topic_incarnation(&self, name: &str) -> Option<u64> {
        if let Some(i) = self.metadata().incarnation(name) {
            return Some(i);
        }
        self.partition(name, 0)
            .filter(|s| s.incarnation == 0)
            .map(|_| 0)
    }

    /// Names of every topic of the cluster (hosted here or not) and of the streams configured
    /// at start, sorted.
    pub fn topic_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.metadata().topics.keys().cloned().collect();
        for name in self.stream_names() {
            if self.partition(&name, 0).is_some_and(|s| s.incarnation == 0) {
                names.push(name);
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// The leader of partition `partition` of incarnation `incarnation` of topic `name`, and
    /// its term, as a node that does not host it knows it: from the leaders' reports (see
    /// [`crate::replication::leaders`]). The leader may have died since; callers check it is
    /// connected.
    pub fn reported_leader(
        &self,
        name: &str,
        incarnation: u64,
        partition: u32,
    ) -> Option<(u64, u64)> {
        let group = if incarnation == 0 {
            group_id_for(name)
        } else {
            group_id_for_topic(name, incarnation, partition)
        };
        self.registry.leaders.leader_of(group)
    }

    /// Names of every stream this node hosts a partition of.
    pub fn stream_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        v.sort();
        v
    }

    /// What the peer port refused so far (connections and Raft messages).
    pub fn peer_stats(&self) -> &PeerStats {
        &self.registry.stats
    }

    /// Group ids of the streams (and the metadata group) whose Raft group has ended although
    /// the node was not shut down and the stream not dropped: such a group ended by panicking
    /// (in the binary the panic hook ends the process first). Empty on a healthy node.
    pub fn stopped_groups(&self) -> Vec<u64> {
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups
            .iter()
            .filter(|(_, _, slot)| slot.is_ended())
            .map(|(group, _, _)| *group)
            .collect()
    }

    /// Live brokers: this node and every peer connected to it now, with the Kafka address
    /// each announced (`HOST:PORT`, of its first listener), by node id.
    pub fn live_brokers(&self) -> Vec<(u64, String)> {
        let mut out = vec![(self.config.id, self.config.kafka_advertised.clone())];
        let peers = self
            .registry
            .peers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let removed = self.removed_members();
        for (id, open) in peers.iter() {
            if let Some(c) = open
                .last()
                .filter(|_| *id != self.config.id && !removed.contains(id))
            {
                out.push((*id, c.advertised.clone()));
            }
        }
        out.sort();
        out
    }

    /// Live brokers as a client connected to listener `listener` must see them: each node's
    /// address on the listener of that name (as Kafka answers with the client's listener
    /// name), by node id. A peer without such a listener is left out; a peer of an earlier
    /// release (no listeners announced) is listed with its one advertised address.
    pub fn live_brokers_on(&self, listener: &str) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        if let Some(own) = self
            .config
            .kafka_listeners()
            .into_iter()
            .find(|l| l.name == listener)
        {
            out.push((self.config.id, own.advertised));
        }
        let peers = self
            .registry
            .peers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let removed = self.removed_members();
        for (id, open) in peers.iter() {
            if let Some(addr) = open
                .last()
                .filter(|_| *id != self.config.id && !removed.contains(id))
                .and_then(|c| c.address_on(listener))
            {
                out.push((*id, addr.to_string()));
            }
        }
        out.sort();
        out
    }

    /// The members whose removal finished: leaving, and no longer voters of the metadata
    /// group. They are not listed as brokers.
    fn removed_members(&self) -> Vec<u64> {
        let voters = self.metadata_voters_now();
        self.metadata()
            .member_records
            .iter()
            .filter(|(id, m)| m.leaving && !voters.contains(id))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The metadata group's voters as this node's replica of it knows them.
    fn metadata_voters_now(&self) -> Vec<u64> {
        self.metadata_group()
            .map(|g| {
                g.visible()
                    .voters
                    .iter()
                    .copied()
                    .filter(|id| *id != 0)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The members new replicas may be placed on: those of the replicated member list that
    /// are not leaving (see [`crate::replication::membership`]), ascending.
    pub fn placement_members(&self) -> Vec<u64> {
        self.metadata().active_members()
    }

    /// The configured default replication factor, at most the members new replicas may be
    /// placed on.
    pub fn default_replication_factor(&self) -> usize {
        self.config
            .default_replication_factor()
            .min(self.placement_members().len())
            .max(1)
    }

    /// Every member the replicated metadata knows, with its state (see
    /// [`crate::replication::membership::MemberState`]), ascending by id.
    pub fn members(&self) -> Vec<crate::replication::membership::MemberView> {
        use crate::replication::membership::{MemberState, MemberView};
        let voters = self.metadata_voters_now();
        let live = self.live_brokers();
        let meta = self.metadata();
        meta.member_records
            .iter()
            .map(|(id, m)| {
                let voter = voters.contains(id);
                let state = match (m.leaving, voter) {
                    (false, true) => MemberState::Voter,
                    (false, false) => MemberState::Joining,
                    (true, true) => MemberState::Leaving,
                    (true, false) => MemberState::Removed,
                };
                let configured = self.config.member(*id).map(|c| c.peer_addr.to_string());
                let kafka_live = live.iter().find(|(l, _)| l == id).map(|(_, a)| a.clone());
                MemberView {
                    id: *id,
                    name: m.name.clone(),
                    peer_addr: if m.peer_addr.is_empty() {
                        configured.unwrap_or_default()
                    } else {
                        m.peer_addr.clone()
                    },
                    kafka_addr: kafka_live.unwrap_or_else(|| m.kafka_addr.clone()),
                    state,
                    live: kafka_live_or_self(*id, self.config.id, &live),
                    replicas: meta
                        .topics
                        .values()
                        .map(|t| t.replicas.iter().filter(|r| r.contains(id)).count())
                        .sum(),
                }
            })
            .collect()
    }

    /// Adds member `id` (see [`crate::replication::membership`]) and waits until it is a voter of
    /// the metadata group: it must be running (started with `join = true`) to catch up.
    pub async fn add_member(
        &self,
        id: u64,
        name: String,
        peer_addr: std::net::SocketAddr,
        kafka_addr: String,
        timeout: Duration,
    ) -> Result<(), crate::replication::membership::MembershipError> {
        use crate::replication::membership::MembershipError;
        let deadline = tokio::time::Instant::now() + timeout;
        if let Some(m) = self.metadata().member_records.get(&id) {
            if m.leaving {
                return Err(MembershipError::Removed(id));
            }
            if m.peer_addr != peer_addr.to_string() && !m.peer_addr.is_empty() {
                return Err(MembershipError::Conflict(id, m.peer_addr.clone()));
            }
        }
        let cmd = MetaCommand::AddMember {
            id,
            name,
            peer_addr: peer_addr.to_string(),
            kafka_addr,
            members: self.metadata().member_records.clone(),
        };
        self.propose_metadata(&cmd, timeout)
            .await
            .map_err(MembershipError::Propose)?;
        loop {
            if self.metadata_voters_now().contains(&id) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(MembershipError::Timeout("still a learner of the metadata group: is it running with join = true and reachable?"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Removes member `id` (see [`crate::replication::membership`]): its replicas move to other
    /// members, then it leaves the metadata group. Waits until both are done.
    pub async fn remove_member(
        &self,
        id: u64,
        timeout: Duration,
    ) -> Result<(), crate::replication::membership::MembershipError> {
        use crate::replication::membership::MembershipError;
        let deadline = tokio::time::Instant::now() + timeout;
        {
            let meta = self.metadata();
            let Some(m) = meta.member_records.get(&id) else {
                return Err(MembershipError::Unknown(id));
            };
            if !m.leaving {
                let active = meta.active_members();
                if active.len() < 2 {
                    return Err(MembershipError::LastMember);
                }
                // Every replica it holds needs a member without a replica of that partition.
                for (name, t) in &meta.topics {
                    for (p, r) in t.replicas.iter().enumerate() {
                        if r.contains(&id) && !active.iter().any(|a| *a != id && !r.contains(a)) {
                            return Err(MembershipError::NoRoom(format!("{name}-{p}")));
                        }
                    }
                }
            }
        }
        let members = self.metadata().member_records.clone();
        self.propose_metadata(&MetaCommand::RemoveMember { id, members }, timeout)
            .await
            .map_err(MembershipError::Propose)?;
        loop {
            let hosts = self.metadata().hosts_replicas(id);
            if !hosts && !self.metadata_voters_now().contains(&id) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(MembershipError::Timeout(if hosts {
                    "its replicas are still moving"
                } else {
                    "still a voter of the metadata group"
                }));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn store_config(&self) -> StoreConfig {
        let s = &self.config.storage;
        StoreConfig {
            segment_bytes: s.segment_bytes,
            // No cap per stream beyond the node's budget (`store_resources`): one busy
            // partition may use it all while the others are idle.
            cache_bytes: usize::try_from(s.cache_bytes).unwrap_or(usize::MAX),
            // The one place the durability policy is decided: the group appends unsynced and
            // fsyncs (outside the store's lock) when the store's policy says a sync is due,
            // once per Ready under `always` (group commit).
            sync_policy: match s.sync {
                SyncMode::Always => SyncPolicy::Always,
                SyncMode::Interval(d) => SyncPolicy::Interval(d),
                SyncMode::Never => SyncPolicy::Never,
            },
            deletion_allowed: s.deletion_allowed,
            preallocate_bytes: s.preallocate_bytes,
            retention: logstore::RetentionPolicy {
                max_segments: None,
                max_bytes: s.retention_bytes,
                max_age: s.retention_age,
            },
            ..StoreConfig::default()
        }
    }

    /// Whether the metadata log may be compacted below a snapshot: every other member has said,
    /// in its last hello to this node, that it installs metadata snapshots (a member of an
    /// earlier release, or one not heard from since this node started, could not catch up
    /// through one, so its entries are kept).
    pub fn metadata_compaction_allowed(&self) -> bool {
        let others: Vec<u64> = self
            .config
            .member_ids()
            .into_iter()
            .filter(|id| *id != self.config.id)
            .collect();
        self.peer_versions.all_install_metadata_snapshots(&others)
    }

    /// Called as the metadata group applies entries (and once at its start): when `index`
    /// reaches the commit index the node started with, the replay is done and retention may
    /// run.
    pub fn note_metadata_applied(&self, index: u64) {
        use std::sync::atomic::Ordering;
        // The catch-up replication limit follows the replicated flow limits.
        self.peers.catch_up_limiter().set_rate(
            self.metadata()
                .flow
                .limits
                .catchup_replication_bytes_per_sec,
        );
        if index >= self.metadata_replay_target.load(Ordering::Acquire)
            && !self.retention_allowed.swap(true, Ordering::AcqRel)
        {
            tracing::debug!(index, "metadata replay done: retention may run");
            // Membership targets set during the replay were skipped (a partial state's
            // targets could undo later changes): set the final ones now.
            self.reconcile_membership();
        }
    }

    /// Makes this node match the replicated member list and replica lists (see
    /// [`crate::replication::membership`]): admits and dials every member, opens the partitions it
    /// is a new replica of (as a learner), tells the groups being reassigned and the metadata
    /// group their target voters, and drops the partitions whose reassignment away from this
    /// node finished. Only once the metadata replay at start is done: targets from a
    /// partial state could undo later changes.
    pub fn reconcile_membership(&self) {
        let replayed = self
            .retention_allowed
            .load(std::sync::atomic::Ordering::Acquire);
        let (records, metadata_voters, topics) = {
            let meta = self.metadata();
            (
                meta.member_records.clone(),
                meta.membership_changed.then(|| meta.metadata_voters()),
                meta.topics
                    .iter()
                    .map(|(n, t)| (n.clone(), t.clone()))
                    .collect::<Vec<_>>(),
            )
        };
        for (id, m) in &records {
            let Ok(addr) = m.peer_addr.parse::<std::net::SocketAddr>() else {
                continue;
            };
            if *id == self.config.id {
                continue;
            }
            if self.config.member(*id).is_none() {
                self.remember_peer(*id, addr);
            }
            self.guard.add_member(*id, addr);
            self.peers.add_peer(*id, addr);
            self.registry.liveness.add_peer(*id);
            self.registry.leaders.add_peer(*id);
            let mut ping = self.ping_peers.write().unwrap_or_else(|e| e.into_inner());
            if !ping.contains(id) {
                ping.push(*id);
            }
        }
        if !replayed {
            return;
        }
        if let (Some(g), Some(voters)) = (self.metadata_group(), metadata_voters) {
            let _ = g.inbox.try_send(GroupInput::SetVoters(voters));
        }
        let me = self.config.id;
        for (name, t) in &topics {
            let hosts = t
                .replicas
                .iter()
                .chain(t.moving.values())
                .any(|r| r.contains(&me));
            if hosts {
                if let Err(e) = self.open_topic(name, t.created_at_index, &t.replicas) {
                    tracing::error!(topic = %name, "cannot open a reassigned partition: {e}");
                }
            }
            for stream in self.partitions(name) {
                if stream.incarnation != t.created_at_index {
                    continue;
                }
                let p = stream.partition;
                let Some(new) = t.replicas.get(p as usize) else {
                    continue;
                };
                if t.moving.contains_key(&p) {
                    let _ = stream.inbox.try_send(GroupInput::SetVoters(new.clone()));
                } else if !new.contains(&me) {
                    tracing::info!(topic = %name, partition = p, "replica moved away: dropping it");
                    self.drop_partition(name, t.created_at_index, p);
                }
            }
        }
    }

    /// Saves a runtime member's address in `known_peers` (when new or changed), so a restart
    /// admits and dials it at once.
    fn remember_peer(&self, id: u64, addr: std::net::SocketAddr) {
        let mut known = self.known_peers.lock().unwrap_or_else(|e| e.into_inner());
        if known.get(&id) == Some(&addr) {
            return;
        }
        known.insert(id, addr);
        if let Err(e) = crate::replication::known_peers::save(&self.config.data_dir, &known) {
            tracing::warn!(
                peer = id,
                "saving {} failed: {e}",
                crate::replication::known_peers::KNOWN_PEERS_FILE
            );
        }
    }

    /// Stops one partition's group and deletes its data here (its replica moved to another
    /// node). Appends waiting on it fail with `Stopped`.
    fn drop_partition(&self, name: &str, incarnation: u64, partition: u32) {
        let Some(stream) = self
            .partition(name, partition)
            .filter(|s| s.incarnation == incarnation)
        else {
            return;
        };
        self.stop_group(stream.group);
        {
            let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(parts) = streams.get_mut(name) {
                parts.remove(&partition);
                if parts.is_empty() {
                    streams.remove(name);
                }
            }
        }
        let dir = self.topic_dir(name, incarnation, partition);
        if dir.exists() {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(topic = %name, partition, dir = %dir.display(), "removing a moved replica's data failed: {e}");
            }
        }
    }

    /// The partitions this node leads whose reassignment reached its new replicas (see
    /// [`crate::replication::membership`]): (name, incarnation, partition).
    fn settled_reassignments(&self) -> Vec<(String, u64, u32)> {
        let moving: Vec<(String, u64, u32, Vec<u64>)> = {
            let meta = self.metadata();
            meta.topics
                .iter()
                .flat_map(|(n, t)| {
                    t.moving.keys().filter_map(move |p| {
                        let mut new = t.replicas.get(*p as usize)?.clone();
                        new.sort_unstable();
                        Some((n.clone(), t.created_at_index, *p, new))
                    })
                })
                .collect()
        };
        moving
            .into_iter()
            .filter_map(|(name, incarnation, p, new)| {
                let v = self
                    .partition(&name, p)
                    .filter(|s| s.incarnation == incarnation)?
                    .visible();
                let voters: Vec<u64> = v.voters.iter().copied().filter(|id| *id != 0).collect();
                (v.leader == self.config.id && v.membership_settled && voters == new).then_some((
                    name,
                    incarnation,
                    p,
                ))
            })
            .collect()
    }

    /// The effective settings of topic `name`: its config overrides over this node's
    /// configuration (the node's alone for a topic it does not know).
    pub fn topic_settings(&self, name: &str) -> TopicSettings {
        let meta = self.metadata();
        match meta.topics.get(name) {
            Some(t) if !t.configs.is_empty() => TopicSettings::resolve(&self.config, &t.configs),
            _ => TopicSettings::resolve(&self.config, &BTreeMap::new()),
        }
    }

    /// Applies topic `name`'s current config overrides to its partitions open here (called
    /// when the replicated metadata changed them): retention and segment size on their stores;
    /// the produce path reads the rest per request.
    pub fn apply_topic_settings(&self, name: &str, incarnation: u64) {
        let settings = self.topic_settings(name);
        for stream in self.partitions(name) {
            if stream.incarnation != incarnation {
                continue;
            }
            {
                let mut store = stream.store.write().unwrap_or_else(|e| e.into_inner());
                store.set_retention(retention_policy(&settings));
                store.set_segment_bytes(settings.segment_bytes);
            }
            tracing::info!(stream = %name, partition = stream.partition, ?settings, "topic configs changed");
        }
    }

    /// The current incarnation of topic `name` in the replicated metadata, for a command that
    /// names it (`Invalid` when there is no such topic).
    fn current_incarnation(&self, name: &str) -> Result<u64, AppendError> {
        self.metadata()
            .incarnation(name)
            .ok_or_else(|| AppendError::Invalid(format!("no topic {name}")))
    }

    /// Starts a leader transfer of partition `partition` of topic `name` to `preferred` when
    /// this node leads it (ElectLeaders, applied from the replicated metadata on every node).
    /// Does nothing while the metadata log is replayed at start: an old request is not acted on
    /// again.
    pub fn hand_leadership_to(&self, name: &str, incarnation: u64, partition: u32, preferred: u64) {
        if !self
            .retention_allowed
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return;
        }
        if let Some(stream) = self
            .partition(name, partition)
            .filter(|s| s.incarnation == incarnation && s.visible().leader == self.config.id)
        {
            if preferred != self.config.id {
                tracing::info!(stream = %name, partition, to = preferred, "handing leadership to the preferred replica (ElectLeaders)");
                stream.transfer_leader(preferred);
            }
        }
    }

    /// Asks the leader of partition `partition` of incarnation `incarnation` of topic `name`
    /// (0: a stream configured at start), wherever it runs, to hand leadership to the
    /// partition's preferred replica (through the replicated metadata, which reaches every
    /// node). Returns once this node has applied the request; whether leadership
    /// moved shows in the partition's leader.
    pub async fn elect_preferred_leader(
        &self,
        name: &str,
        incarnation: u64,
        partition: u32,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        self.propose_metadata(
            &MetaCommand::ElectPreferredLeader {
                name: name.to_owned(),
                incarnation,
                partition,
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Raises the log start offset of partition `partition` of topic `name` to `offset`
    /// (DeleteRecords, applied from the replicated metadata): records below it are no longer
    /// readable here, and the segments wholly below it are removed by the partition's group.
    pub fn delete_records_before(&self, name: &str, incarnation: u64, partition: u32, offset: u64) {
        let Some(stream) = self
            .partition(name, partition)
            .filter(|s| s.incarnation == incarnation)
        else {
            return;
        };
        stream
            .store
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .raise_records_floor(offset);
        try_deliver(&stream.inbox, GroupInput::RecordsFloorRaised);
    }

    /// Directory of a stream configured at start (`[streams] initial`).
    pub fn stream_dir(&self, name: &str) -> PathBuf {
        self.config.data_dir.join("streams").join(name)
    }

    /// Directory of one partition of one incarnation of a topic:
    /// `topics/<name>~<incarnation>-<partition>` (`~` is not allowed in topic names, so no two
    /// incarnations or topics share a directory).
    pub fn topic_dir(&self, name: &str, incarnation: u64, partition: u32) -> PathBuf {
        self.config
            .data_dir
            .join("topics")
            .join(format!("{name}~{incarnation}-{partition}"))
    }

    /// Directory a single-partition topic had before partitions existed:
    /// `topics/<name>~<incarnation>`. Renamed to partition 0's directory when found.
    fn topic_dir_before_partitions(&self, name: &str, incarnation: u64) -> PathBuf {
        self.config
            .data_dir
            .join("topics")
            .join(format!("{name}~{incarnation}"))
    }

    /// Every directory of incarnation `incarnation` of topic `name` on disk: its partitions'
    /// (whatever their count) and the one from before partitions.
    fn topic_dirs_on_disk(&self, name: &str, incarnation: u64) -> Vec<PathBuf> {
        let prefix = format!("{name}~{incarnation}-");
        let mut dirs = Vec::new();
        let legacy = self.topic_dir_before_partitions(name, incarnation);
        if legacy.exists() {
            dirs.push(legacy);
        }
        let Ok(entries) = std::fs::read_dir(self.config.data_dir.join("topics")) else {
            return dirs;
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            let file = file.to_string_lossy();
            let is_partition = file
                .strip_prefix(&prefix)
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            if is_partition {
                dirs.push(entry.path());
            }
        }
        dirs
    }

    /// Moves a single-partition topic's directory from the layout before partitions to
    /// partition 0's (one rename, then the parent directory synced).
    fn migrate_topic_dir(&self, name: &str, incarnation: u64) -> Result<(), NodeError> {
        let old = self.topic_dir_before_partitions(name, incarnation);
        let new = self.topic_dir(name, incarnation, 0);
        if !old.exists() || new.exists() {
            return Ok(());
        }
        let fail = |e: std::io::Error| NodeError::Directory {
            dir: old.clone(),
            message: format!("cannot rename to {}: {e}", new.display()),
        };
        std::fs::rename(&old, &new).map_err(fail)?;
        if let Some(parent) = new.parent() {
            std::fs::File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(fail)?;
        }
        tracing::info!(topic = %name, from = %old.display(), to = %new.display(), "moved a topic to the partitioned layout");
        Ok(())
    }

    /// Refuses a data directory written before topic incarnations: `streams/` then holds topics
    /// by bare name, which are not among the streams configured at start.
    fn refuse_old_layout(&self) -> Result<(), NodeError> {
        let Ok(entries) = std::fs::read_dir(self.config.data_dir.join("streams")) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !self.config.initial_streams.contains(&name) {
                return Err(NodeError::OldLayout { dir: entry.path() });
            }
        }
        Ok(())
    }

    /// Opens (creating on first use) a stream configured at start and starts its Raft group;
    /// returns the existing handle when it is already open. Every member of the cluster is a
    /// voter.
    pub fn open_stream(&self, name: &str) -> Result<LogStream, NodeError> {
        if let Some(s) = self.stream(name) {
            return Ok(s);
        }
        let group = group_id_for(name);
        self.open_group(
            name,
            0,
            group,
            0,
            GroupKind::Stream(self.stream_dir(name)),
            self.config.member_ids(),
            Vec::new(),
            None,
        )
    }

    /// Opens (creating on first use) the partitions of incarnation `incarnation` of topic
    /// `name` this node is a replica of (`replicas[p]` lists partition `p`'s, preferred leader
    /// first), starting a Raft group whose voters are those replicas for each that is not open
    /// yet. An older incarnation still open under the name is dropped first.
    pub fn open_topic(
        &self,
        name: &str,
        incarnation: u64,
        replicas: &[Vec<u64>],
    ) -> Result<(), NodeError> {
        let _opening = self.open_lock.lock().unwrap_or_else(|e| e.into_inner());
        let open = self.partitions(name);
        if let Some(s) = open.first() {
            if s.incarnation != incarnation {
                self.drop_topic(name, Some(s.incarnation));
            }
        }
        self.migrate_topic_dir(name, incarnation)?;
        // Replaying the metadata log at start re-runs every CreateTopic, also those of
        // incarnations deleted since. Such an incarnation's data is gone (its delete was applied
        // here before, so it was committed and is in the local log); opening it again would
        // show clients an empty topic under the name until the replay reaches its delete (a
        // produce accepted then would be lost with it). So it is not opened at all.
        let gone = self.topic_dirs_on_disk(name, incarnation).is_empty()
            && self
                .deleted_before_start
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&(name.to_owned(), incarnation));
        if gone {
            tracing::debug!(topic = %name, incarnation, "a deleted incarnation is not reopened on replay");
            return Ok(());
        }
        let moving = self
            .metadata()
            .topics
            .get(name)
            .filter(|t| t.created_at_index == incarnation)
            .map(|t| t.moving.clone())
            .unwrap_or_default();
        let me = self.config.id;
        for (partition, voters) in (0u32..).zip(replicas) {
            if self.partition(name, partition).is_some() {
                continue;
            }
            // A partition being reassigned starts from its configuration before the move: a
            // new replica as a learner of the old ones (it is added as one, and promoted once
            // caught up), an old one as a voter until its group removes it.
            let (conf_voters, conf_learners) = match moving.get(&partition) {
                Some(old) if old.contains(&me) => (old.clone(), Vec::new()),
                Some(old) if voters.contains(&me) => (old.clone(), vec![me]),
                _ if voters.contains(&me) => (voters.clone(), Vec::new()),
                _ => continue,
            };
            let group = group_id_for_topic(name, incarnation, partition);
            let dir = self.topic_dir(name, incarnation, partition);
            let preferred = voters[0];
            let stream = self.open_group(
                name,
                partition,
                group,
                incarnation,
                GroupKind::Stream(dir),
                conf_voters,
                conf_learners,
                Some(preferred),
            )?;
            // The preferred replica stands for election at once: a new partition gets a leader
            // without waiting an election timeout, and leaders start spread over the nodes.
            // Not while the metadata log is replayed from disk at start (no metadata leader
            // known yet): every replica may be replaying at once after a restart of every node,
            // and a campaign would elect a leader for a topic incarnation that the rest of the
            // log deletes (an empty log, answering ListOffsets with 0 until the delete
            // replays). Elections then wait for a timeout, and leader rebalance moves
            // leadership to the preferred replica.
            let live = self
                .metadata_group()
                .is_some_and(|g| g.visible().leader != 0);
            if preferred == self.config.id
                && voters.len() > 1
                && live
                && !moving.contains_key(&partition)
            {
                stream.campaign();
            }
        }
        Ok(())
    }

    /// Loads the newest metadata snapshot in `dir` into the state machine (and the node's
    /// metadata), makes the metadata log `store` start no later than right after it, and opens
    /// the topics it holds as the replay of the entries it covers would have. Returns its index
    /// (None: no snapshot; the log must then start at index 1).
    fn load_metadata_snapshot(
        &self,
        sm: &mut MetadataStateMachine,
        dir: &Path,
        store: &mut LogStore,
    ) -> Result<Option<u64>, NodeError> {
        let store_err = |source| NodeError::Store {
            name: METADATA_STREAM.to_owned(),
            source,
        };
        let Some((wire, bytes)) = crate::metadata_snapshot::load_newest(dir)? else {
            if store.first_index() > 1 {
                return Err(NodeError::MetadataLogGap {
                    dir: dir.to_owned(),
                    first_index: store.first_index(),
                    snapshot_index: 0,
                });
            }
            return Ok(None);
        };
        let started = Instant::now();
        let (index, term) = sm.load(wire, bytes);
        if index + 1 < store.first_index() {
            return Err(NodeError::MetadataLogGap {
                dir: dir.to_owned(),
                first_index: store.first_index(),
                snapshot_index: index,
            });
        }
        // The log ends before the snapshot (a snapshot installed from the leader, then a crash
        // before the log was reset), or holds another term at its index (entries never
        // committed): the log restarts right after the snapshot.
        let matches = index <= store.last_index()
            && (index + 1 == store.first_index() || store.term(index).ok() == Some(term));
        if !matches {
            store
                .install_snapshot(index, term, store.next_offset())
                .map_err(store_err)?;
        }
        self.apply_metadata_snapshot(index, false);
        tracing::info!(
            index,
            term,
            took_ms = started.elapsed().as_millis() as u64,
            "metadata snapshot loaded; replaying the entries after it"
        );
        Ok(Some(index))
    }

    /// Brings the node in line with the metadata state just loaded from a snapshot at `index`,
    /// as applying the entries it covers would have: removes what is left on disk of topic
    /// incarnations created at or before `index` that the state does not hold (their delete
    /// is covered by the snapshot; a crash may have left their files), opens every topic's
    /// partitions hosted here (an incarnation whose delete is later in the log stays closed),
    /// sets their records floors, and with `reconcile` (a snapshot installed from the leader
    /// while running) also drops the incarnations open here that the state no longer has and
    /// applies every topic's configs. Streams configured at start (incarnation 0) are left
    /// alone.
    pub fn apply_metadata_snapshot(&self, index: u64, reconcile: bool) {
        let topics: Vec<(String, crate::metadata::TopicMeta)> = self
            .metadata()
            .topics
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        if reconcile {
            let open: Vec<(String, u64)> = self
                .streams
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter_map(|(name, parts)| {
                    let incarnation = parts.values().next()?.incarnation;
                    (incarnation != 0).then(|| (name.clone(), incarnation))
                })
                .collect();
            for (name, incarnation) in open {
                let current = topics
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, t)| t.created_at_index);
                if current != Some(incarnation) {
                    self.drop_topic(&name, Some(incarnation));
                }
            }
        }
        self.remove_deleted_topic_dirs(index, &topics);
        for (name, t) in &topics {
            if let Err(e) = self.open_topic(name, t.created_at_index, &t.replicas) {
                tracing::error!(topic = %name, incarnation = t.created_at_index, "cannot open a topic of the metadata snapshot: {e}");
            }
            if reconcile {
                self.apply_topic_settings(name, t.created_at_index);
            }
            for (partition, floor) in (0u32..).zip(&t.deleted_before) {
                if *floor > 0 {
                    self.delete_records_before(name, t.created_at_index, partition, *floor);
                }
            }
        }
    }

    /// Removes the directories under `topics/` of incarnations created at or before `index`
    /// that are not in `topics` (the metadata state at `index`): they were deleted by then.
    fn remove_deleted_topic_dirs(
        &self,
        index: u64,
        topics: &[(String, crate::metadata::TopicMeta)],
    ) {
        let Ok(entries) = std::fs::read_dir(self.config.data_dir.join("topics")) else {
            return;
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            let file = file.to_string_lossy();
            // `<name>~<incarnation>-<partition>`, or `<name>~<incarnation>` (before partitions).
            let Some((name, rest)) = file.rsplit_once('~') else {
                continue;
            };
            let incarnation = rest.split_once('-').map_or(rest, |(i, _)| i);
            let Ok(incarnation) = incarnation.parse::<u64>() else {
                continue;
            };
            let alive = topics
                .iter()
                .any(|(n, t)| n == name && t.created_at_index == incarnation);
            if incarnation == 0 || incarnation > index || alive {
                continue;
            }
            if self
                .partitions(name)
                .iter()
                .any(|s| s.incarnation == incarnation)
            {
                continue;
            }
            tracing::info!(topic = %name, incarnation, dir = %entry.path().display(), "removing the data of a topic incarnation deleted before the metadata snapshot");
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(topic = %name, incarnation, "removing a deleted topic's data failed: {e}");
            }
        }
    }

    /// Records the topic incarnations deleted by a `DeleteTopic` in the metadata log `store`
    /// (read once at start, before the replay).
    fn note_deleted_incarnations(&self, store: &LogStore) {
        let mut deleted = self
            .deleted_before_start
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut lo = store.first_index();
        let hi = store.last_index() + 1;
        while lo < hi {
            let entries = match store.entries(lo, hi, 4 << 20) {
                Ok(entries) if !entries.is_empty() => entries,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!("reading the metadata log for deleted topics failed: {e}");
                    break;
                }
            };
            lo = entries.last().map_or(hi, |e| e.index + 1);
            for e in entries
                .iter()
                .filter(|e| e.kind == logstore::EntryKind::Meta)
            {
                if let Ok((
                    _,
                    MetaCommand::DeleteTopic {
                        name,
                        incarnation: Some(incarnation),
                    },
                )) = crate::metadata::MetaEntry::decode(&e.payload)
                {
                    deleted.insert((name, incarnation));
                }
            }
        }
    }

    /// The replicas of `stream` in Kafka's order: the preferred leader first (a stream
    /// configured at start: every member in id order).
    pub fn replicas_of(&self, stream: &LogStream) -> Vec<u64> {
        self.topic_layout(&stream.name)
            .filter(|l| l.incarnation == stream.incarnation)
            .and_then(|l| l.replicas.get(stream.partition as usize).cloned())
            .unwrap_or_else(|| self.config.member_ids())
    }

    /// Starts the Raft group of one stream; `voters` are its replicas (used when its store is
    /// new; an existing store keeps the configuration it saved).
    #[allow(clippy::too_many_arguments)]
    fn open_group(
        &self,
        name: &str,
        partition: u32,
        group: u64,
        incarnation: u64,
        kind: GroupKind,
        voters: Vec<u64>,
        learners: Vec<u64>,
        preferred_leader: Option<u64>,
    ) -> Result<LogStream, NodeError> {
        assert!(
            voters.contains(&self.config.id) || learners.contains(&self.config.id),
            "{name}-{partition}: this node is not among the voters {voters:?} or learners {learners:?}"
        );
        let single_voter = voters.len() == 1 && learners.is_empty();
        if let Some(other) = self.group_owner(group) {
            return Err(NodeError::GroupIdCollision(
                other,
                format!("{name}-{partition}"),
            ));
        }
        let topic = name;
        // Names in logs, thread names and errors: the stream, with the partition above 0.
        let label = if partition == 0 {
            name.to_owned()
        } else {
            format!("{name}-{partition}")
        };
        let name = label.as_str();
        let store_err = |source| NodeError::Store {
            name: name.to_owned(),
            source,
        };
        let mut store_config = self.store_config();
        if incarnation != 0 {
            // A topic's own retention and segment size (its config overrides).
            let settings = self.topic_settings(topic);
            store_config.segment_bytes = settings.segment_bytes;
            store_config.retention = retention_policy(&settings);
        }
        let (dir, forward_proposals, mut metadata_sm) = match kind {
            GroupKind::Stream(dir) => (dir, false, None),
            GroupKind::Metadata(sm) => {
                // The metadata log is deleted only below its snapshots (the group compacts it;
                // retention rules never apply), in small segments so that compaction follows
                // the snapshots closely.
                store_config.deletion_allowed = true;
                store_config.retention = logstore::RetentionPolicy::default();
                store_config.segment_bytes = store_config.segment_bytes.min(METADATA_SEGMENT_BYTES);
                (self.config.data_dir.join(METADATA_STREAM), true, Some(sm))
            }
        };
        let replay = metadata_sm.is_some();
        let sync_always = matches!(self.config.storage.sync, SyncMode::Always);
        let mut store =
            LogStore::open_shared(&dir, store_config, &self.store_resources).map_err(store_err)?;
        let mut snapshot_index = None;
        if let Some(sm) = metadata_sm.as_mut() {
            self.note_deleted_incarnations(&store);
            snapshot_index = self.load_metadata_snapshot(sm, &dir, &mut store)?;
        }
        if store.conf_state().voters.is_empty() {
            let cs = logstore::ConfState {
                voters,
                learners,
                ..Default::default()
            };
            store.save_conf_state(&cs).map_err(store_err)?;
        }
        let hs = store.hard_state();
        if let Some(d) = &store.recovery_report().damage {
            tracing::error!(
                stream = %name,
                file = %d.path.display(),
                offset = d.offset,
                first_bad_index = d.first_bad_index,
                "damaged log data: {}; the log was cut before it and is repaired from a healthy replica",
                d.reason
            );
        }
        // A log cut before damaged entries (repair marker) may end below the saved commit:
        // the group fetches the rest again and does not vote meanwhile.
        if hs.commit > store.last_index() && store.repair_marker().is_none() {
            if sync_always {
                return Err(NodeError::CommitBeyondLog {
                    name: name.to_owned(),
                    commit: hs.commit,
                    last_index: store.last_index(),
                    dir,
                });
            }
            // Without an fsync per write, a crash may lose a tail that was committed: the
            // configuration accepted that; the log restarts at what is on disk.
            tracing::warn!(
                stream = %name,
                commit = hs.commit,
                last_index = store.last_index(),
                "the saved commit index is beyond the log (sync is not \"always\"): the unsynced tail was lost"
            );
        }
        // Every entry below the first one kept was committed (retention and snapshots remove
        // only committed entries), so the commit index is at least the one before it; the hard
        // state's commit is saved only with term and vote and may be older.
        let commit = hs
            .commit
            .max(store.first_index().saturating_sub(1))
            .max(snapshot_index.unwrap_or(0))
            .min(store.last_index());
        // A group with a state machine replays its committed log from the start to rebuild it;
        // a plain stream's state is its log, already on disk.
        let applied = if replay {
            snapshot_index.unwrap_or_else(|| store.first_index().saturating_sub(1))
        } else {
            commit
        };
        if replay {
            self.metadata_replay_target
                .store(commit, std::sync::atomic::Ordering::Release);
            self.note_metadata_applied(applied);
        }
        let visible = Visible {
            applied_index: applied,
            high_watermark: store.next_offset_after_index(applied).map_err(store_err)?,
            log_start_offset: store.first_readable_offset(),
            leader: 0,
            term: hs.term,
            in_sync: [0; crate::replication::group::MAX_TRACKED_VOTERS],
            leader_ready: false,
            quiesced: false,
            ..Visible::default()
        };
        let shared: SharedStore = Arc::new(RwLock::new(store));
        let t = &self.config.raft;
        let cfg = raft::Config {
            id: self.config.id,
            election_tick: t.election_ticks(),
            heartbeat_tick: t.heartbeat_ticks(),
            applied,
            max_size_per_msg: t.max_append_bytes,
            max_inflight_msgs: t.max_inflight_appends,
            check_quorum: true,
            pre_vote: true,
            // Followers refuse (pre-)votes while they heard from a leader within one election
            // timeout (the check_quorum lease). Tick clocks on different nodes are up to one
            // tick apart, so a follower whose timer fired at exactly the timeout could be refused
            // by a peer still one tick inside its lease and then wait a whole second timeout.
            // Starting randomised timeouts two ticks past the lease removes that race, so a new
            // leader is elected within two election timeouts of the old one's last heartbeat.
            min_election_tick: t.election_ticks() + 2,
            max_election_tick: 2 * t.election_ticks(),
            // A stream's leader does not send a round of appends just to tell followers a new
            // commit index: they learn it with the next append or heartbeat. Nothing on a
            // follower waits for it (clients read from leaders), and the round cost every
            // synchronous produce two follower turns and two acknowledgements on the few
            // cores the benchmark measures (docs/benchmarks.md). The metadata group keeps the
            // broadcast: every node applies metadata as soon as it commits.
            skip_bcast_commit: metadata_sm.is_none(),
            ..Default::default()
        };
        let logger = crate::replication::raft_log::group_logger(name);
        let storage = match metadata_sm.as_ref() {
            Some(sm) => RaftStorage::with_state_snapshots(shared.clone(), sm.latest()),
            None => RaftStorage::new(shared.clone()),
        };
        let state_machine =
            metadata_sm.map(|sm| Box::new(sm) as Box<dyn crate::replication::group::StateMachine>);
        let raw = RawNode::new(&cfg, storage, &logger).map_err(|e| NodeError::Raft {
            name: name.to_owned(),
            message: e.to_string(),
        })?;
        let slot = self.runtime.slot();
        let waker_slot = slot.clone();
        let (tx, rx) = inbox_with_waker(
            GROUP_INBOX_CAPACITY,
            Arc::new(move || waker_slot.schedule()),
        );
        let (vis_tx, vis_rx) = watch::channel(visible);
        let (copies_tx, copies_rx) =
            watch::channel([0; crate::replication::group::MAX_TRACKED_VOTERS]);
        let metrics = Arc::new(crate::metrics::PartitionMetrics::default());
        let parts = GroupParts {
            metrics: metrics.clone(),
            node_metrics: self.metrics.clone(),
            id: group,
            name: name.to_owned(),
            node: raw,
            store: shared.clone(),
            inbox: rx,
            peers: self.peers.clone(),
            tick: t.tick,
            visible: vis_tx,
            durable_copies: copies_tx,
            pipeline: t.pipeline,
            group_commit: t.group_commit,
            retention_interval: self.config.storage.retention_check_interval,
            retention_allowed: self.retention_allowed.clone(),
            in_sync_max_lag: self.config.kafka.replica_lag_time_max,
            retention_hold: crate::replication::group::RetentionHold {
                down_replica_wait: self.config.storage.retention_down_replica_wait,
                lagging_replica_max_bytes: self.config.storage.retention_lagging_replica_max_bytes,
            },
            forward_proposals,
            peer_stats: self.registry.stats.clone(),
            producers: (!replay).then(|| rebuild_producers(&shared, applied)),
            state_machine,
            rejoin: self.registry.directories.clone(),
            preferred_leader: preferred_leader.zip(self.config.raft.leader_rebalance_interval),
            raft_config: cfg.clone(),
            faults: self.storage_faults.clone(),
        };
        self.runtime.run(&slot, new_group(parts));
        self.registry
            .groups
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(group, tx.clone());
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((group, tx.clone(), slot));
        let stream = LogStream {
            name: topic.into(),
            partition,
            group,
            incarnation,
            inbox: tx,
            store: shared,
            visible: vis_rx,
            durable_copies: copies_rx,
            metrics,
        };
        if group == METADATA_GROUP_ID {
            *self
                .metadata_group
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(stream.clone());
        } else {
            let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
            let partitions = streams.entry(topic.to_owned()).or_default();
            // Each partition opens once (open_topic opens only the missing ones).
            let earlier = partitions.insert(partition, stream.clone());
            assert!(
                earlier.is_none(),
                "partition {partition} of {topic} opened twice"
            );
        }
        // A group of one voter elects itself at once instead of waiting an election timeout.
        if single_voter {
            stream.campaign();
        }
        Ok(stream)
    }

    /// The stream (`name-partition`) that Raft group `group` belongs to, if one is open.
    fn group_owner(&self, group: u64) -> Option<String> {
        if group == METADATA_GROUP_ID && self.metadata_group().is_some() {
            return Some(METADATA_STREAM.to_owned());
        }
        self.streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flat_map(BTreeMap::values)
            .find(|s| s.group == group)
            .map(|s| format!("{}-{}", s.name, s.partition))
    }

    /// Stops a topic's groups (every partition) and deletes its data on this node (the topic
    /// was deleted). With an incarnation, only that incarnation is touched: a newer one open
    /// under the same name stays, and the older one's directories are removed if they are
    /// still there. Without one, the stream open under the name (a stream configured at start)
    /// is dropped. Appends waiting on a dropped stream fail with `Stopped`.
    pub fn drop_topic(&self, name: &str, incarnation: Option<u64>) {
        let open: Vec<LogStream> = self
            .partitions(name)
            .into_iter()
            .filter(|s| incarnation.is_none_or(|i| i == s.incarnation))
            .collect();
        for stream in &open {
            self.stop_group(stream.group);
        }
        let dirs = match (incarnation, open.first()) {
            (Some(i), _) => self.topic_dirs_on_disk(name, i),
            (None, Some(s)) if s.incarnation > 0 => self.topic_dirs_on_disk(name, s.incarnation),
            (None, _) => vec![self.stream_dir(name)],
        };
        for dir in dirs.iter().filter(|d| d.exists()) {
            if let Err(e) = std::fs::remove_dir_all(dir) {
                tracing::warn!(stream = %name, dir = %dir.display(), "removing a deleted stream's data failed: {e}");
            }
        }
        // Last: once the topic is gone from the map, its data is gone too.
        if !open.is_empty() {
            self.streams
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(name);
        }
    }

    /// Stops one group (waiting for a turn that is running) and forgets its inbox.
    fn stop_group(&self, group: u64) {
        self.registry
            .groups
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&group);
        let running = {
            let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            groups
                .iter()
                .position(|(g, _, _)| *g == group)
                .map(|i| groups.swap_remove(i))
        };
        if let Some((_, _, slot)) = running {
            slot.stop();
        }
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

    /// This node's consumer group coordinator state (see `kafka::groups`).
    pub fn group_coordinator(&self) -> &crate::kafka::group_coordinator::Coordinator {
        &self.group_coordinator
    }

    /// The metadata group's handle (the Raft group every node votes in).
    pub fn metadata_group(&self) -> Option<LogStream> {
        self.metadata_group
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Commits a metadata command through the metadata group (from any node: followers forward
    /// it to the leader) and returns the Raft index it was applied at; by then this node has
    /// applied it.
    pub async fn propose_metadata(
        &self,
        cmd: &MetaCommand,
        timeout: Duration,
    ) -> Result<u64, AppendError> {
        self.propose_metadata_request(cmd, timeout)
            .await
            .map(|(index, _)| index)
    }

    /// Commits a metadata command only while this node leads the metadata group in term `term`:
    /// one attempt on this node's replica, never forwarded to or retried through another leader
    /// ([`AppendError::NotLeader`] when this node does not lead in `term`, [`AppendError::Lost`]
    /// when it was deposed before the entry committed). For writes validated against the group
    /// coordinator's state of that term (a commit checked against the membership of a deposed
    /// coordinator must not land through its successor). Returns once this node applied it.
    pub async fn propose_metadata_in_term(
        &self,
        cmd: &MetaCommand,
        term: u64,
        timeout: Duration,
    ) -> Result<u64, AppendError> {
        let entry = MetaEntry {
            request: self.next_request_id(),
            command: cmd.clone(),
        };
        let data = if self.peer_versions.any_earlier_release() {
            entry.encode_json()
        } else {
            entry.encode()
        };
        let group = self.metadata_group().ok_or(AppendError::Stopped)?;
        let appended = group
            .append_meta_as_leader(Bytes::from(data), term, timeout)
            .await?;
        Ok(appended.raft_index)
    }

    /// A new metadata request id, unique across nodes and restarts.
    fn next_request_id(&self) -> RequestId {
        RequestId {
            node: self.config.id,
            boot: self.boot_nonce,
            seq: self
                .request_seq
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// [`Node::propose_metadata`], also returning the request id the command was stored with.
    /// Every retry carries the same id, so a command is applied once even when an attempt
    /// reported lost had committed after all.
    async fn propose_metadata_request(
        &self,
        cmd: &MetaCommand,
        timeout: Duration,
    ) -> Result<(u64, RequestId), AppendError> {
        let request = self.next_request_id();
        let entry = MetaEntry {
            request,
            command: cmd.clone(),
        };
        // A node of an earlier release cannot read protobuf entries (it would skip them and its
        // metadata would diverge): while one is in the cluster, commands are written in JSON.
        let data = if self.peer_versions.any_earlier_release() {
            entry.encode_json()
        } else {
            entry.encode()
        };
        let data = Bytes::from(data);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let group = self.metadata_group().ok_or(AppendError::Stopped)?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match group.append_meta(data.clone(), left).await {
                Ok(appended) => return Ok((appended.raft_index, request)),
                // The entry is applied already (an earlier attempt committed after it was
                // reported lost): done.
                Err(_) if self.metadata().was_applied(&request) => {
                    let index = self
                        .metadata_group()
                        .map_or(0, |g| g.visible().applied_index);
                    return Ok((index, request));
                }
                // No leader yet (start-up, election) or the proposal died with its leader:
                // try again until the deadline. The request id makes the retry apply once
                // even if the lost attempt commits after all.
                Err(AppendError::NotLeader { .. } | AppendError::Lost)
                    if tokio::time::Instant::now() + METADATA_RETRY_PAUSE < deadline =>
                {
                    tokio::time::sleep(METADATA_RETRY_PAUSE).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Creates a topic with `partitions` partitions, each on
    /// [`NodeConfig::default_replication_factor`] nodes (a no-op when it exists). Returns once
    /// this node has applied it (its replicas here are open).
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        let replication_factor = self.default_replication_factor();
        self.create_topic_replicated(name, partitions, replication_factor, timeout)
            .await
    }

    /// Creates a topic with `partitions` partitions of `replication_factor` replicas each
    /// (1..=members), placed as [`crate::replication::placement`] says (a no-op when it exists).
    /// Returns once this node has applied it.
    pub async fn create_topic_replicated(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: usize,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        self.create_topic_configured(
            name,
            partitions,
            replication_factor,
            BTreeMap::new(),
            timeout,
        )
        .await
    }

    /// [`Node::create_topic_replicated`] with config overrides (validated by the caller with
    /// [`crate::topic_config::validate_all`]).
    pub async fn create_topic_configured(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: usize,
        configs: BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        let members = self.placement_members();
        if !(1..=members.len()).contains(&replication_factor) {
            return Err(AppendError::Invalid(format!(
                "replication factor {replication_factor} with {} nodes",
                members.len()
            )));
        }
        if !crate::config::valid_stream_name(name) || name == METADATA_STREAM {
            return Err(AppendError::Invalid(format!("invalid topic name {name:?}")));
        }
        if partitions == 0 {
            return Err(AppendError::Invalid(
                "a topic needs at least one partition".into(),
            ));
        }
        // The limits are checked by the proposer against what it has applied; creates racing
        // from several nodes may pass them by a few.
        {
            let meta = self.metadata();
            if !meta.topics.contains_key(name) {
                self.check_limits(&meta, 1, partitions)?;
            }
        }
        let (start, shift) = crate::replication::placement::random_pattern(members.len());
        let replicas = crate::replication::placement::assign(
            &members,
            replication_factor,
            0,
            partitions,
            start,
            shift,
        );
        self.propose_metadata(
            &MetaCommand::CreateTopic {
                name: name.to_owned(),
                partitions,
                replicas,
                configs,
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Refuses `new_topics` more topics with `new_partitions` more partitions when the cluster
    /// would pass `kafka.max_topics` or `kafka.max_partitions`, or this node could host more
    /// partitions than its open-file limit allows
    /// ([`crate::runtime::fd_budget::partition_capacity`]); the message says "holds its limit of"
    /// (answered POLICY_VIOLATION).
    pub fn check_limits(
        &self,
        meta: &ClusterMeta,
        new_topics: usize,
        new_partitions: u32,
    ) -> Result<(), AppendError> {
        let k = &self.config.kafka;
        if new_topics > 0 && meta.topics.len() + new_topics > k.max_topics {
            return Err(AppendError::Invalid(format!(
                "the cluster holds its limit of {} topics (kafka.max_topics)",
                k.max_topics
            )));
        }
        let total = meta.total_partitions() + u64::from(new_partitions);
        if total > u64::from(k.max_partitions) {
            return Err(AppendError::Invalid(format!(
                "the cluster holds its limit of {} partitions (kafka.max_partitions): {} exist, {new_partitions} more asked",
                k.max_partitions,
                meta.total_partitions()
            )));
        }
        // This node's open files: running out of them would stop the node (a failed log write
        // is fail-stop), so a create that could make it host more partitions than its
        // descriptors allow is refused instead (counting every new partition as hosted here).
        if new_partitions > 0 {
            if let Ok((nofile, _)) = crate::runtime::fd_budget::nofile_limits() {
                let capacity =
                    crate::runtime::fd_budget::partition_capacity(nofile, k.max_connections);
                let hosted = self
                    .streams
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .map(|p| p.len() as u64)
                    .sum::<u64>();
                if hosted + u64::from(new_partitions) > capacity {
                    return Err(AppendError::Invalid(format!(
                        "node {} holds its limit of {capacity} partitions for its open-file limit of {nofile} \
                         ({} descriptors each, client connections and a reserve kept): it hosts {hosted}, \
                         {new_partitions} more asked; raise LimitNOFILE or lower kafka.max_connections",
                        self.config.id,
                        crate::runtime::fd_budget::DESCRIPTORS_PER_PARTITION
                    )));
                }
            }
        }
        Ok(())
    }

    /// Grows topic `name` to `count` partitions, the new ones with as many replicas as its
    /// partition 0 and placed to continue its pattern (see [`crate::replication::placement`]).
    /// Returns once this node has applied it. Fails when the topic does not exist or has `count`
    /// partitions or more already (Kafka's INVALID_PARTITIONS), or a limit would be passed.
    pub async fn create_partitions(
        &self,
        name: &str,
        count: u32,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        let members = self.placement_members();
        let (incarnation, replicas) = {
            let meta = self.metadata();
            let Some(topic) = meta.topics.get(name) else {
                return Err(AppendError::Invalid(format!("unknown topic {name}")));
            };
            if count <= topic.partitions {
                return Err(AppendError::Invalid(format!(
                    "topic {name} has {} partitions; the new count must be higher, not {count}",
                    topic.partitions
                )));
            }
            self.check_limits(&meta, 0, count - topic.partitions)?;
            let first = topic.replicas.first().cloned().unwrap_or_default();
            let replication_factor = first.len().clamp(1, members.len());
            let (start, shift) = crate::replication::placement::pattern_of(&members, &first)
                .unwrap_or_else(|| crate::replication::placement::random_pattern(members.len()));
            let mut replicas = topic.replicas.clone();
            replicas.extend(crate::replication::placement::assign(
                &members,
                replication_factor,
                topic.partitions,
                count,
                start,
                shift,
            ));
            (topic.created_at_index, replicas)
        };
        self.propose_metadata(
            &MetaCommand::CreatePartitions {
                name: name.to_owned(),
                incarnation,
                count,
                replicas,
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Deletes a topic and its data on every node: the incarnation this node knows now, so a
    /// retried or late delete never removes a topic created again under the same name.
    pub async fn delete_topic(&self, name: &str, timeout: Duration) -> Result<(), AppendError> {
        let incarnation = self.metadata().incarnation(name);
        self.propose_metadata(
            &MetaCommand::DeleteTopic {
                name: name.to_owned(),
                incarnation,
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Allocates a producer id unique in the cluster.
    pub async fn allocate_producer_id(&self, timeout: Duration) -> Result<i64, AppendError> {
        let (_, request) = self
            .propose_metadata_request(&MetaCommand::AllocateProducerId, timeout)
            .await?;
        self.metadata()
            .allocations
            .get(&request)
            .copied()
            .ok_or_else(|| AppendError::Invalid("producer id allocation not found".into()))
    }

    /// Changes topic `name`'s config overrides through the replicated metadata: with
    /// `replace_all` they become exactly `set`, otherwise `remove` goes back to defaults and
    /// `set` is applied. The caller validated the result ([`crate::topic_config`]). Returns once
    /// this node has applied it; every replica applies it as it commits.
    pub async fn alter_topic_configs(
        &self,
        name: &str,
        set: BTreeMap<String, String>,
        remove: Vec<String>,
        replace_all: bool,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        let incarnation = self.current_incarnation(name)?;
        self.propose_metadata(
            &MetaCommand::AlterTopicConfigs {
                name: name.to_owned(),
                incarnation,
                set,
                remove,
                replace_all,
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Deletes partition `partition` of topic `name`'s records below `offset` on every replica
    /// (DeleteRecords) through the replicated metadata; the caller checked `offset` against the
    /// high watermark. Returns once this node has applied it.
    pub async fn delete_records(
        &self,
        name: &str,
        partition: u32,
        offset: u64,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        let incarnation = self.current_incarnation(name)?;
        self.propose_metadata(
            &MetaCommand::DeleteRecords {
                name: name.to_owned(),
                incarnation,
                partition,
                offset,
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Removes consumer group `group`'s committed offsets: all of them (`None`, DeleteGroups)
    /// or those of the listed partitions (OffsetDelete). Returns once this node has applied it.
    pub async fn delete_group_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, i32)>>,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        self.propose_metadata(
            &MetaCommand::DeleteGroupOffsets {
                group: group.to_owned(),
                partitions,
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Records a consumer group's committed offsets, replicated.
    pub async fn commit_offsets(
        &self,
        group: &str,
        offsets: Vec<CommittedOffset>,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        self.propose_metadata(
            &MetaCommand::CommitOffsets {
                group: group.to_owned(),
                offsets,
                commit_time_ms: crate::metadata::wall_clock_ms(),
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Commits a metadata command that changes nothing and returns once this node applied it:
    /// afterwards this node's metadata holds every change committed before the call (a read
    /// barrier that works on any node, leader or not).
    pub async fn metadata_barrier(&self, timeout: Duration) -> Result<(), AppendError> {
        self.propose_metadata(&MetaCommand::DeleteAcls { acls: Vec::new() }, timeout)
            .await
            .map(|_| ())
    }

    /// The authorizer configured for this node (`[security]`).
    pub fn authorizer(&self) -> &crate::security::authorizer::Authorizer {
        &self.authorizer
    }

    /// The SCRAM credential of `user` for `mechanism` stored in the replicated metadata
    /// (AlterUserScramCredentials), as this node has applied it; `None` when there is none.
    pub fn replicated_scram_credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::ScramMechanism,
    ) -> Option<crate::security::scram::ScramCredential> {
        self.metadata()
            .scram_credentials
            .get(&(user.to_owned(), mechanism))
            .cloned()
    }

    /// Records node `id`'s admin address (applied from the metadata log).
    pub fn note_admin_address(&self, id: u64, address: String) {
        self.admin_addresses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, address);
    }

    /// Every node's admin address as announced (this node's own once its announcement is
    /// applied).
    pub fn admin_addresses(&self) -> BTreeMap<u64, String> {
        self.admin_addresses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every group this node hosts (the metadata group first).
    fn all_groups(&self) -> Vec<LogStream> {
        let mut all: Vec<LogStream> = self.metadata_group().into_iter().collect();
        all.extend(
            self.streams
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .flat_map(|p| p.values().cloned()),
        );
        all
    }

    /// Graceful shutdown's first step: hands leadership of every group this node leads (every
    /// partition and the metadata group) to its most caught-up voter; a group still led here an
    /// election timeout later (raft-rs gave the transfer up: the target is down or leaving
    /// too, as when a whole cluster stops) tries the next voter, and when every voter was tried
    /// it is given up on. Returns when no group is led here, every remaining one was given up
    /// on, or `timeout` passes. Every group then refuses to take leadership back. Groups with
    /// no other voter stay led here and are not waited for.
    pub async fn hand_off_leadership(&self, timeout: Duration) -> HandOffReport {
        let me = self.config.id;
        let deadline = Instant::now() + timeout;
        let led_now = |all: &[LogStream]| -> Vec<LogStream> {
            all.iter()
                .filter(|s| s.visible().leader == me)
                .cloned()
                .collect()
        };
        let all = self.all_groups();
        let mut report = HandOffReport {
            led: led_now(&all).len(),
            still_led: 0,
        };
        // Every group refuses leadership from now on, led here or not; those led here with
        // another voter start a transfer (a group of one voter has nobody to hand over to).
        // Per group handed over: the voters tried so far.
        let mut handing: Vec<(LogStream, Vec<u64>)> = Vec::new();
        // Led here with no other voter: nobody to hand over to, not counted as still led.
        let mut alone = HashSet::new();
        for s in &all {
            match s.hand_off(Vec::new()).await {
                Some(to) => handing.push((s.clone(), vec![to])),
                None if s.visible().leader == me => {
                    alone.insert(s.group);
                }
                None => {}
            }
        }
        report.led -= alone.len().min(report.led);
        let retry_every = self.config.raft.election_timeout;
        let mut next_retry = Instant::now() + retry_every;
        loop {
            handing.retain(|(s, _)| s.visible().leader == me);
            report.still_led = led_now(&all)
                .iter()
                .filter(|s| !alone.contains(&s.group))
                .count();
            if handing.is_empty() || Instant::now() >= deadline {
                return report;
            }
            if Instant::now() >= next_retry {
                let mut next = Vec::with_capacity(handing.len());
                for (s, mut tried) in handing.drain(..) {
                    if let Some(to) = s.hand_off(tried.clone()).await {
                        tried.push(to);
                        next.push((s, tried));
                    } else {
                        tracing::warn!(stream = %s.name, partition = s.partition, ?tried, "no voter took leadership; it will be elected anew");
                    }
                }
                handing = next;
                next_retry = Instant::now() + retry_every;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Makes partition `partition` of topic `name` led by replica `to`: through the metadata
    /// log (the current leader, wherever it runs, starts the transfer), then waits until `to`
    /// leads as this node sees it. Errors: no such topic or partition, `to` not a replica,
    /// or not done within `timeout`.
    pub async fn transfer_leader(
        &self,
        name: &str,
        partition: u32,
        to: u64,
        timeout: Duration,
    ) -> Result<(), TransferError> {
        let layout = self
            .topic_layout(name)
            .ok_or_else(|| TransferError::NoPartition(name.to_owned(), partition))?;
        let replicas = layout
            .replicas
            .get(partition as usize)
            .ok_or_else(|| TransferError::NoPartition(name.to_owned(), partition))?;
        if !replicas.contains(&to) {
            return Err(TransferError::NotAReplica {
                to,
                replicas: replicas.clone(),
            });
        }
        let deadline = Instant::now() + timeout;
        let leader = || self.current_leader(name, layout.incarnation, partition);
        if leader() == Some(to) {
            return Ok(());
        }
        let cmd = MetaCommand::TransferLeader {
            name: name.to_owned(),
            incarnation: layout.incarnation,
            partition,
            to,
        };
        let mut next_ask = Instant::now();
        while Instant::now() < deadline {
            if Instant::now() >= next_ask {
                // Asked again every two election timeouts: a transfer raft-rs gave up on (the
                // target was behind) is retried.
                let left = deadline.saturating_duration_since(Instant::now());
                self.propose_metadata(&cmd, left)
                    .await
                    .map_err(TransferError::Propose)?;
                next_ask = Instant::now() + 2 * self.config.raft.election_timeout;
            }
            if leader() == Some(to) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(TransferError::Timeout {
            to,
            leader: leader().unwrap_or(0),
        })
    }

    /// The leader of a partition as this node knows it: its own replica's view, or the
    /// leader reports of the other nodes.
    pub fn current_leader(&self, name: &str, incarnation: u64, partition: u32) -> Option<u64> {
        match self
            .partition(name, partition)
            .filter(|s| s.incarnation == incarnation)
        {
            Some(s) => Some(s.visible().leader).filter(|l| *l != 0),
            None => self
                .reported_leader(name, incarnation, partition)
                .map(|(l, _)| l),
        }
    }

    /// Node-wide metrics: request latencies by API and stage, fsync latency, connections,
    /// throttle time, the authentication failure source.
    pub fn metrics(&self) -> &Arc<crate::metrics::NodeMetrics> {
        &self.metrics
    }

    /// Everything `GET /metrics` reports, read now: every partition replica hosted here (and
    /// the metadata group) with its Raft and log state, and consumer group lag on the
    /// partitions this node leads (so each partition's lag is reported once in the cluster).
    pub fn scrape(&self) -> crate::metrics::Scrape {
        let me = self.config.id;
        let mut streams: Vec<LogStream> = self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flat_map(|p| p.values().cloned())
            .collect();
        streams.sort_by(|a, b| (&*a.name, a.partition).cmp(&(&*b.name, b.partition)));
        let mut partitions = Vec::with_capacity(streams.len() + 1);
        let meta = self.metadata_group();
        for s in meta.iter().chain(&streams) {
            let v = s.visible();
            let (segments, segment_bytes) = s.storage_size();
            let replicas = if s.group == METADATA_GROUP_ID {
                self.config.member_ids().len()
            } else {
                self.replicas_of(s).len()
            };
            partitions.push(crate::metrics::PartitionSample {
                topic: s.name.to_string(),
                partition: s.partition,
                leader: v.leader,
                is_leader: v.leader == me,
                term: v.term,
                applied_index: v.applied_index,
                log_start_offset: v.log_start_offset,
                log_end_offset: s.log_end_offset(),
                high_watermark: v.high_watermark,
                segments,
                segment_bytes,
                replicas,
                in_sync: v.in_sync.iter().filter(|id| **id != 0).count(),
                counters: s.metrics.clone(),
            });
        }
        let led: HashMap<(&str, i32), u64> = partitions
            .iter()
            .filter(|p| p.is_leader && p.topic != METADATA_STREAM)
            .filter_map(|p| {
                Some((
                    (p.topic.as_str(), i32::try_from(p.partition).ok()?),
                    p.high_watermark,
                ))
            })
            .collect();
        let mut group_lag = Vec::new();
        if !led.is_empty() {
            let metadata = self.metadata();
            for (group, offsets) in &metadata.offsets {
                for ((topic, partition), committed) in offsets {
                    if let Some(hw) = led.get(&(topic.as_str(), *partition)) {
                        group_lag.push(crate::metrics::GroupLag {
                            group: group.clone(),
                            topic: topic.clone(),
                            partition: u32::try_from(*partition).unwrap_or(0),
                            lag: hw.saturating_sub(u64::try_from(committed.offset).unwrap_or(0)),
                        });
                    }
                }
            }
        }
        group_lag.sort_by(|a, b| {
            (&a.group, &a.topic, a.partition).cmp(&(&b.group, &b.topic, b.partition))
        });
        let faults = &self.storage_faults;
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        crate::metrics::Scrape {
            node_id: me,
            partitions,
            group_lag,
            node: self.metrics.clone(),
            storage: crate::metrics::StorageSample {
                scrub_bytes_verified: load(&faults.scrub_bytes_verified),
                faults_found: load(&faults.faults_found),
                repairs_completed: load(&faults.repairs_completed),
                damaged_replicas: faults.damaged().len() as u64,
            },
        }
    }

    /// Whether `name` is a topic (created through the metadata group, hosted here or not, or
    /// a stream configured at start).
    pub fn is_topic(&self, name: &str) -> bool {
        self.topic_layout(name).is_some()
    }

    /// Damaged replicas on this node and the scrubber's and repairs' counters.
    pub fn storage_faults(&self) -> &Arc<crate::storage_faults::StorageFaults> {
        &self.storage_faults
    }

    /// Starts the background scrubber over every stream this node holds (see
    /// [`crate::scrubber`]); does nothing when the configured rate is 0.
    fn start_scrubber(&self) {
        let rate = self.config.storage.scrub_bytes_per_second;
        if rate == 0 {
            return;
        }
        let streams = Arc::downgrade(&self.streams);
        let list: crate::scrubber::StreamLister = Box::new(move || {
            let Some(streams) = streams.upgrade() else {
                return Vec::new();
            };
            let map = streams.lock().unwrap_or_else(|e| e.into_inner());
            map.values().flat_map(|p| p.values().cloned()).collect()
        });
        match crate::scrubber::Scrubber::start(
            &format!("vdl{}", self.config.id),
            rate,
            self.config.storage.scrub_pass_pause,
            list,
            self.storage_faults.clone(),
        ) {
            Ok(s) => *self.scrubber.lock().unwrap_or_else(|e| e.into_inner()) = Some(s),
            Err(e) => tracing::error!("cannot start the scrubber thread: {e}"),
        }
    }

    /// Stops the scrubber, every group thread (their pending appends fail with `Stopped`) and
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
        *self
            .metadata_group
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
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
