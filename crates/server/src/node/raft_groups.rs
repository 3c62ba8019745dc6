//! Opening and stopping Raft groups on a node: the store and Raft configuration of a stream or
//! the metadata group, the group's parts, and every group running here.

use crate::runtime::inbox::inbox_with_waker;
use std::sync::{Arc, RwLock};

use logstore::{LogStore, StoreConfig, SyncPolicy};
use raft::RawNode;
use tokio::sync::watch;

use crate::config::SyncMode;
use crate::metadata::{METADATA_GROUP_ID, METADATA_STREAM};
use crate::replication::group::{new_group, GroupParts, Visible};
use crate::replication::producer_snapshot::rebuild_producers;
use crate::replication::raft_storage::{RaftStorage, SharedStore};
use crate::replication::stream::LogStream;

use super::catalog::retention_policy;
use super::{GroupKind, Node, NodeError, GROUP_INBOX_CAPACITY};

/// Largest segment of the metadata log: compaction below a snapshot deletes whole segments,
/// so small ones keep what stays on disk close to the snapshot.
pub(super) const METADATA_SEGMENT_BYTES: u64 = 1 << 20;

impl Node {
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

    pub(super) fn store_config(&self) -> StoreConfig {
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

    /// Starts the Raft group of one stream; `voters` are its replicas (used when its store is
    /// new; an existing store keeps the configuration it saved).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn open_group(
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
        let mut roll_age = None;
        if incarnation != 0 {
            // A topic's own retention, segment size and age (its config overrides).
            let settings = self.topic_settings(topic);
            store_config.segment_bytes = settings.segment_bytes;
            store_config.retention = retention_policy(&settings);
            roll_age = Some(settings.segment_age);
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
        let resources = self
            .store_resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut store = LogStore::open_shared(&dir, store_config, &resources).map_err(store_err)?;
        store.set_roll_age(roll_age);
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
        let mut visible = Visible {
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
        let producers = (!replay).then(|| rebuild_producers(&shared, applied));
        // Readers see the last stable offset and the aborted transactions from the start (the
        // group republishes both as it applies).
        visible.last_stable_offset = producers.as_ref().map_or(visible.high_watermark, |t| {
            t.last_stable_offset(visible.high_watermark)
        });
        let aborted: crate::replication::group::AbortedList = producers
            .as_ref()
            .map(|t| {
                t.transactions()
                    .aborted()
                    .iter()
                    .copied()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
            .into();
        let (aborted_tx, aborted_rx) = watch::channel(aborted);
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
        let state_machine = metadata_sm
            .map(|sm| Box::new(sm) as Box<dyn crate::replication::state_machine::StateMachine>);
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
            watch::channel(crate::replication::group::DurableCopies::default());
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
            liveness: self.registry.liveness.clone(),
            leadership: self.registry.leadership.clone(),
            producers,
            aborted: aborted_tx,
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
            aborted: aborted_rx,
            metrics,
        };
        if group == METADATA_GROUP_ID {
            self.metadata_proposer.set_group(Some(stream.clone()));
        } else {
            let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
            // Each partition opens once (open_topic opens only the missing ones).
            let earlier = streams.insert(topic, partition, stream.clone());
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
    pub(super) fn group_owner(&self, group: u64) -> Option<String> {
        if group == METADATA_GROUP_ID && self.metadata_group().is_some() {
            return Some(METADATA_STREAM.to_owned());
        }
        self.streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .owner_of_group(group)
            .map(|(name, partition)| format!("{name}-{partition}"))
    }

    /// Stops one group (waiting for a turn that is running) and forgets its inbox.
    pub(super) fn stop_group(&self, group: u64) {
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

    /// Every group this node hosts (the metadata group first).
    pub(super) fn all_groups(&self) -> Vec<LogStream> {
        let mut all: Vec<LogStream> = self.metadata_group().into_iter().collect();
        all.extend(
            self.streams
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .handles(),
        );
        all
    }
}
