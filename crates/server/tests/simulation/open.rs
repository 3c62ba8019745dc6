//! Opening one simulated replica: its log store (on the simulated disk) and the real group
//! state machine over it, configured as the server does but with a pinned election timeout;
//! for the metadata group also the real metadata state machine, with its snapshots, over a
//! recorder standing in for the node ([`MetaRecorder`]).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use logstore::{LogStore, StoreConfig, SyncPolicy};
use raft::RawNode;
use tokio::sync::watch;
use vdl_server::metadata::{ClusterMeta, Effect, MetadataHost, MetadataStateMachine};
use vdl_server::replication::group::{new_group, DurableCopies, GroupParts, Visible};
use vdl_server::replication::liveness::Liveness;
use vdl_server::replication::peer_guard::PeerStats;
use vdl_server::replication::producers::ProducerTable;
use vdl_server::replication::raft_storage::{RaftStorage, SharedStore};
use vdl_server::replication::replicas::Directories;
use vdl_server::replication::state_machine::StateMachine;
use vdl_server::replication::transport::PeerSender;
use vdl_server::runtime::inbox::inbox;

use crate::world::{SimGroup, SimOptions, NODES};

const HEARTBEAT_TICKS: usize = 2;
const ELECTION_TICKS: usize = 10;
/// Segment size and retention limit of a run with [`SimOptions::retention`].
const RETENTION_SEGMENT_BYTES: u64 = 2 << 10;
const RETENTION_MAX_BYTES: u64 = 6 << 10;

/// Metadata entries applied between the metadata state machine's snapshots: small, so that
/// snapshots, the log's compaction below them and followers installing them happen often.
const METADATA_SNAPSHOT_INTERVAL_ENTRIES: u64 = 12;
/// Segment size of the metadata log: small, so that compaction below a snapshot deletes
/// segments.
const METADATA_SEGMENT_BYTES: u64 = 1 << 10;

/// What the metadata state machine asked of the node, kept until the simulated node carries
/// it out between turns (through the core, see `world.rs`).
pub enum HostEvent {
    /// An applied command's effect.
    Effect(Effect),
    /// A snapshot at this index was installed from the leader: the node brings its
    /// partitions in line with the state.
    SnapshotInstalled(u64),
}

/// Stands in for the node hosting a metadata replica: counts what the state machine asks of
/// it, and queues the effects and snapshots for the simulated node, which opens and drops
/// partitions through the core as the node does.
#[derive(Default)]
pub struct MetaRecorder {
    /// Effects and installed snapshots not carried out yet, in order.
    pub events: std::sync::Mutex<Vec<HostEvent>>,
    /// Effects carried out.
    pub effects: AtomicU64,
    /// Snapshots installed from a leader.
    pub snapshots_installed: AtomicU64,
    /// The highest index reported applied.
    pub applied: AtomicU64,
}

impl MetadataHost for MetaRecorder {
    fn carry_out(&self, effect: Effect) {
        self.effects.fetch_add(1, Ordering::Relaxed);
        self.events.lock().unwrap().push(HostEvent::Effect(effect));
    }

    fn metadata_applied(&self, index: u64) {
        self.applied.fetch_max(index, Ordering::Relaxed);
    }

    fn snapshot_installed(&self, index: u64) {
        self.snapshots_installed.fetch_add(1, Ordering::Relaxed);
        self.events
            .lock()
            .unwrap()
            .push(HostEvent::SnapshotInstalled(index));
    }

    fn compaction_allowed(&self) -> bool {
        true
    }
}

/// A metadata replica's state, as the node holds it.
pub struct SimMeta {
    /// The state the state machine applies into.
    pub state: Arc<RwLock<ClusterMeta>>,
    /// The node's side, kept alive while the replica runs.
    pub host: Arc<MetaRecorder>,
    /// The topic incarnations deleted by a `DeleteTopic` in the log at start (the core's
    /// scan, as the node's before its replay).
    pub deleted_before_start: std::collections::BTreeSet<(String, u64)>,
}

/// Opens replica `node` of the metadata group under `dir`: its state machine loads the newest
/// snapshot (as the node does at start) and the group replays the log after it.
pub fn open_metadata_group(
    dir: &Path,
    node: u64,
    peers: PeerSender,
    options: SimOptions,
    directories: &Arc<Directories>,
) -> SimGroup {
    let group = vdl_server::metadata::METADATA_GROUP_ID;
    let meta_dir = dir.join(format!("g{group}"));
    let state = Arc::new(RwLock::new(ClusterMeta::new(NODES.to_vec())));
    let host = Arc::new(MetaRecorder::default());
    let weak_host: std::sync::Weak<MetaRecorder> = Arc::downgrade(&host);
    let weak_host: std::sync::Weak<dyn MetadataHost> = weak_host;
    let sm = MetadataStateMachine::new(
        state.clone(),
        weak_host,
        meta_dir,
        METADATA_SNAPSHOT_INTERVAL_ENTRIES,
    );
    let mut sg = open_replica(
        &dir.join(format!("g{group}")),
        node,
        group,
        (NODES.to_vec(), Vec::new()),
        peers,
        options,
        directories,
        Some(sm),
    );
    let deleted_before_start = vdl_server::core::topics::deleted_incarnations(
        &vdl_server::replication::raft_storage::read(&sg.store),
    );
    sg.meta = Some(SimMeta {
        state,
        host,
        deleted_before_start,
    });
    sg
}

thread_local! {
    /// Each simulated node's liveness view (the real node's `Registry::liveness`), shared by
    /// its groups; a world runs on one thread, so each test has its own.
    static LIVENESS: std::cell::RefCell<std::collections::HashMap<u64, Arc<Liveness>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Node `node`'s liveness view (created, with every other node heard from, on first use).
pub fn node_liveness(node: u64) -> Arc<Liveness> {
    LIVENESS.with(|l| {
        l.borrow_mut()
            .entry(node)
            .or_insert_with(|| Arc::new(fresh_liveness(node)))
            .clone()
    })
}

/// Gives node `node` a fresh liveness view, as a restarted process starts with.
pub fn reset_node_liveness(node: u64) {
    LIVENESS.with(|l| {
        l.borrow_mut().insert(node, Arc::new(fresh_liveness(node)));
    });
}

fn fresh_liveness(node: u64) -> Liveness {
    let others: Vec<u64> = NODES.iter().copied().filter(|n| *n != node).collect();
    Liveness::new(&others)
}

/// Opens replica `node` of `group` under `dir` (every node a voter).
pub fn open_group(
    dir: &Path,
    node: u64,
    group: u64,
    peers: PeerSender,
    options: SimOptions,
    directories: &Arc<Directories>,
) -> SimGroup {
    open_replica(
        &dir.join(format!("g{group}")),
        node,
        group,
        (NODES.to_vec(), Vec::new()),
        peers,
        options,
        directories,
        None,
    )
}

/// Opens replica `node` of a topic partition's `group` in `group_dir` (where the core's
/// data-directory layout puts it), starting from `voters` and `learners` when new (as the
/// core decided).
#[allow(clippy::too_many_arguments)]
pub fn open_partition_group(
    group_dir: &Path,
    node: u64,
    group: u64,
    voters: Vec<u64>,
    learners: Vec<u64>,
    peers: PeerSender,
    options: SimOptions,
    directories: &Arc<Directories>,
) -> SimGroup {
    open_replica(
        group_dir,
        node,
        group,
        (voters, learners),
        peers,
        options,
        directories,
        None,
    )
}

/// Opens a replica in `group_dir`: a log stream's, or with `metadata` the metadata group's;
/// `conf` (voters, learners) is saved when the store is new.
#[allow(clippy::too_many_arguments)]
fn open_replica(
    group_dir: &Path,
    node: u64,
    group: u64,
    conf: (Vec<u64>, Vec<u64>),
    peers: PeerSender,
    options: SimOptions,
    directories: &Arc<Directories>,
    mut metadata: Option<MetadataStateMachine>,
) -> SimGroup {
    let mut store_config = StoreConfig {
        segment_bytes: 1 << 20,
        // As a node with `sync = "always"` configures it: the store's policy asks the group for
        // one fsync per Ready (group commit), which the group runs outside the store's lock.
        sync_policy: SyncPolicy::Always,
        preallocate_bytes: 0,
        ..StoreConfig::default()
    };
    if options.retention {
        store_config.segment_bytes = RETENTION_SEGMENT_BYTES;
        store_config.retention = logstore::RetentionPolicy {
            max_bytes: Some(RETENTION_MAX_BYTES),
            ..Default::default()
        };
    }
    if options.compaction && crate::cleaning::compacted_group(group) {
        // Small segments, so that they seal and are cleanable often; no retention.
        store_config.segment_bytes = crate::cleaning::COMPACTED_SEGMENT_BYTES;
        store_config.retention = logstore::RetentionPolicy::default();
    }
    if metadata.is_some() {
        // As the node opens the metadata log: deleted only below its snapshots.
        store_config.deletion_allowed = true;
        store_config.retention = logstore::RetentionPolicy::default();
        store_config.segment_bytes = METADATA_SEGMENT_BYTES;
    }
    let mut store = LogStore::open(group_dir, store_config)
        .unwrap_or_else(|e| panic!("node {node}: opening the store of group {group}: {e}"));
    let snapshot_index = match metadata.as_mut() {
        Some(sm) => sm
            .recover(group_dir, &mut store)
            .unwrap_or_else(|e| panic!("node {node}: recovering the metadata: {e}")),
        None => None,
    };
    if store.conf_state().voters.is_empty() {
        let cs = logstore::ConfState {
            voters: conf.0,
            learners: conf.1,
            ..Default::default()
        };
        store.save_conf_state(&cs).expect("save the configuration");
    }
    let hs = store.hard_state();
    let commit = hs
        .commit
        .max(store.first_index().saturating_sub(1))
        .max(snapshot_index.unwrap_or(0))
        .min(store.last_index());
    // The metadata state machine replays the log from its snapshot (as the node does); a
    // stream's state is its log.
    let applied = if metadata.is_some() {
        snapshot_index.unwrap_or_else(|| store.first_index().saturating_sub(1))
    } else {
        commit
    };
    let visible = Visible {
        applied_index: applied,
        high_watermark: store.next_offset_after_index(applied).expect("offsets"),
        log_start_offset: store.log_start_offset(),
        leader: 0,
        term: hs.term,
        in_sync: [0; vdl_server::replication::group::MAX_TRACKED_VOTERS],
        leader_ready: false,
        quiesced: false,
        ..Visible::default()
    };
    let shared: SharedStore = Arc::new(RwLock::new(store));
    let cfg = raft::Config {
        id: node,
        election_tick: ELECTION_TICKS,
        heartbeat_tick: HEARTBEAT_TICKS,
        applied,
        max_size_per_msg: 1 << 20,
        max_inflight_msgs: 256,
        check_quorum: true,
        pre_vote: true,
        min_election_tick: ELECTION_TICKS + 2,
        max_election_tick: ELECTION_TICKS + 3,
        ..Default::default()
    };
    let name = format!("n{node}-g{group}");
    let storage = match metadata.as_ref() {
        Some(sm) => RaftStorage::with_state_snapshots(shared.clone(), sm.latest()),
        None => RaftStorage::new(shared.clone()),
    };
    let replay = metadata.is_some();
    let state_machine = metadata.map(|sm| Box::new(sm) as Box<dyn StateMachine>);
    let raw = RawNode::new(
        &cfg,
        storage,
        &vdl_server::replication::raft_log::group_logger(&name),
    )
    .expect("a raft node");
    let (tx, rx) = inbox(vdl_server::node::GROUP_INBOX_CAPACITY);
    let (vis_tx, vis_rx) = watch::channel(visible);
    let (copies_tx, copies_rx) = watch::channel(DurableCopies::default());
    let parts = GroupParts {
        id: group,
        name,
        node: raw,
        store: shared.clone(),
        inbox: rx,
        peers,
        tick: Duration::from_millis(50),
        visible: vis_tx,
        durable_copies: copies_tx,
        pipeline: true,
        group_commit: true,
        forward_proposals: false,
        // With retention: at every turn, and a leader holds nothing back for any replica
        // (the wall clock is not the simulation's: "not heard from for 0 s" is every
        // replica), so whoever falls behind needs a snapshot.
        retention_interval: if options.retention {
            Duration::ZERO
        } else {
            Duration::from_secs(3600)
        },
        retention_allowed: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        in_sync_max_lag: Duration::from_secs(30),
        retention_hold: vdl_server::replication::group::RetentionHold {
            down_replica_wait: if options.retention {
                Duration::ZERO
            } else {
                Duration::from_secs(60)
            },
            lagging_replica_max_bytes: if options.retention { 0 } else { 1 << 30 },
        },
        peer_stats: Arc::new(PeerStats::default()),
        liveness: node_liveness(node),
        leadership: Default::default(),
        state_machine,
        producers: (!replay).then(ProducerTable::default),
        aborted: watch::channel(Vec::new().into()).0,
        rejoin: directories.clone(),
        preferred_leader: None,
        raft_config: cfg.clone(),
        faults: Arc::new(vdl_server::storage_faults::StorageFaults::default()),
        metrics: Arc::default(),
        node_metrics: Arc::new(vdl_server::metrics::NodeMetrics::new(&[])),
    };
    SimGroup {
        task: new_group(parts),
        inbox: tx,
        store: shared,
        visible: vis_rx,
        durable_copies: copies_rx,
        meta: None,
    }
}
