//! Opening one simulated replica: its log store (on the simulated disk) and the real group
//! state machine over it, configured as the server does but with a pinned election timeout.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use logstore::{LogStore, StoreConfig, SyncPolicy};
use raft::RawNode;
use tokio::sync::watch;
use vdl_server::replication::group::{new_group, GroupParts, Visible};
use vdl_server::replication::peer_guard::PeerStats;
use vdl_server::replication::producers::ProducerTable;
use vdl_server::replication::raft_storage::{RaftStorage, SharedStore};
use vdl_server::replication::replicas::Directories;
use vdl_server::replication::transport::PeerSender;
use vdl_server::runtime::inbox::inbox;

use crate::world::{SimGroup, SimOptions, NODES};

const HEARTBEAT_TICKS: usize = 2;
const ELECTION_TICKS: usize = 10;
/// Segment size and retention limit of a run with [`SimOptions::retention`].
const RETENTION_SEGMENT_BYTES: u64 = 2 << 10;
const RETENTION_MAX_BYTES: u64 = 6 << 10;

/// Opens replica `node` of `group` under `dir`.
pub fn open_group(
    dir: &Path,
    node: u64,
    group: u64,
    peers: PeerSender,
    options: SimOptions,
    directories: &Arc<Directories>,
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
    let mut store = LogStore::open(&dir.join(format!("g{group}")), store_config)
        .unwrap_or_else(|e| panic!("node {node}: opening the store of group {group}: {e}"));
    if store.conf_state().voters.is_empty() {
        let cs = logstore::ConfState {
            voters: NODES.to_vec(),
            ..Default::default()
        };
        store.save_conf_state(&cs).expect("save the configuration");
    }
    let hs = store.hard_state();
    let commit = hs
        .commit
        .max(store.first_index().saturating_sub(1))
        .min(store.last_index());
    let visible = Visible {
        applied_index: commit,
        high_watermark: store.next_offset_after_index(commit).expect("offsets"),
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
        applied: commit,
        max_size_per_msg: 1 << 20,
        max_inflight_msgs: 256,
        check_quorum: true,
        pre_vote: true,
        min_election_tick: ELECTION_TICKS + 2,
        max_election_tick: ELECTION_TICKS + 3,
        ..Default::default()
    };
    let name = format!("n{node}-g{group}");
    let raw = RawNode::new(
        &cfg,
        RaftStorage::new(shared.clone()),
        &vdl_server::replication::raft_log::group_logger(&name),
    )
    .expect("a raft node");
    let (tx, rx) = inbox(vdl_server::node::GROUP_INBOX_CAPACITY);
    let (vis_tx, vis_rx) = watch::channel(visible);
    let parts = GroupParts {
        id: group,
        name,
        node: raw,
        store: shared.clone(),
        inbox: rx,
        peers,
        tick: Duration::from_millis(50),
        visible: vis_tx,
        durable_copies: watch::channel([0; vdl_server::replication::group::MAX_TRACKED_VOTERS]).0,
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
        state_machine: None,
        producers: Some(ProducerTable::default()),
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
    }
}
