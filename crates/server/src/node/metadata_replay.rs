//! The node's side of the metadata group: its replay at start, its catch-up with what the
//! cluster had committed, metadata snapshots loaded and applied, the deleted incarnations found
//! in the log, and when the log may be compacted.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use logstore::LogStore;

use crate::core::data_dir::DataDir;
use crate::core::effects::EffectHost;
use crate::metadata::{
    Effect, MetaCommand, MetadataHost, MetadataRecoveryError, MetadataStateMachine, METADATA_STREAM,
};
use crate::replication::stream::LogStream;

use super::{Node, NodeError};

/// How often the catch-up after a start looks again.
const CATCH_UP_POLL: Duration = Duration::from_millis(10);

/// Longest the catch-up after a start waits for the connected peers' leader reports once the
/// metadata is current (each peer sends its report at least every
/// [`crate::replication::leaders::REPORT_REFRESH`]; a peer of an earlier release sends none).
const LEADER_REPORTS_WAIT: Duration = Duration::from_secs(3);

/// The node carries out what applied metadata commands ask of it, through the core's one
/// dispatch ([`crate::core::effects::carry_out`]).
impl MetadataHost for Node {
    fn carry_out(&self, effect: Effect) {
        crate::core::effects::carry_out(&mut NodeEffects(self), effect);
    }

    fn metadata_applied(&self, index: u64) {
        self.note_metadata_applied(index);
    }

    fn snapshot_installed(&self, index: u64) {
        self.apply_metadata_snapshot(index, true);
    }

    fn compaction_allowed(&self) -> bool {
        self.metadata_compaction_allowed()
    }
}

impl Node {
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

    /// Whether this node's metadata is known to be current: a metadata barrier committed after
    /// this node started has been applied here, so everything the cluster had committed before
    /// the start (also entries this node had not heard were committed when it stopped) is
    /// applied. Set once (see [`Node::start_metadata_catch_up`]), never cleared.
    pub fn metadata_current(&self) -> bool {
        self.metadata_current.load(Ordering::Acquire)
    }

    /// Whether this node has caught up with the cluster after its start: its metadata is
    /// current ([`Node::metadata_current`]) and every peer connected then has told it which
    /// partitions it leads (or 3 s passed since the metadata was), so Metadata can name the
    /// leader of every partition, also of one whose replica here has not heard from its
    /// leader yet. Set once, never cleared.
    pub fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    /// Waits, at most `timeout`, until this node has caught up with the cluster
    /// ([`Node::caught_up`]); returns whether it has.
    pub async fn wait_for_catch_up(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.caught_up() {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(CATCH_UP_POLL).await;
        }
        true
    }

    /// Commits one metadata barrier (retried every 200 ms, 5 s per attempt, until it commits or
    /// the node ends) and then marks the metadata, and with it the ACLs, current: as a Kafka
    /// broker catches up on the metadata log to what the controllers had committed before it
    /// serves clients. Then waits for the connected peers' leader reports (at most 3 s) and
    /// marks the node caught up ([`Node::caught_up`]). Started
    /// with the Kafka listeners.
    pub(super) fn start_metadata_catch_up(self: &Arc<Self>) {
        if self.caught_up() {
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
                match n
                    .metadata_proposer()
                    .propose(&MetaCommand::barrier(), Duration::from_secs(5))
                    .await
                {
                    Ok(_) => {
                        n.metadata_current.store(true, Ordering::Release);
                        tracing::info!("caught up with the cluster metadata");
                        break;
                    }
                    Err(e) => tracing::debug!("metadata catch-up barrier not committed yet: {e}"),
                }
                drop(n);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let deadline = Instant::now() + LEADER_REPORTS_WAIT;
            loop {
                let Some(n) = node.upgrade() else {
                    return;
                };
                if n.leader_reports_heard() || Instant::now() >= deadline {
                    n.caught_up.store(true, Ordering::Release);
                    return;
                }
                drop(n);
                tokio::time::sleep(CATCH_UP_POLL).await;
            }
        });
    }

    /// Called as the metadata group applies entries (and once at its start): when `index`
    /// reaches the commit index the node started with, the replay is done and retention may
    /// run.
    pub fn note_metadata_applied(&self, index: u64) {
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

    /// Loads the newest metadata snapshot in `dir` into the state machine (and the node's
    /// metadata), makes the metadata log `store` start no later than right after it, and opens
    /// the topics it holds as the replay of the entries it covers would have. Returns its index
    /// (None: no snapshot; the log must then start at index 1).
    pub(super) fn load_metadata_snapshot(
        &self,
        sm: &mut MetadataStateMachine,
        dir: &Path,
        store: &mut LogStore,
    ) -> Result<Option<u64>, NodeError> {
        let started = Instant::now();
        let index = sm.recover(dir, store).map_err(|e| match e {
            MetadataRecoveryError::Snapshot(e) => NodeError::MetadataSnapshot(e),
            MetadataRecoveryError::LogGap {
                dir,
                first_index,
                snapshot_index,
            } => NodeError::MetadataLogGap {
                dir,
                first_index,
                snapshot_index,
            },
            MetadataRecoveryError::Store(source) => NodeError::Store {
                name: METADATA_STREAM.to_owned(),
                source,
            },
        })?;
        let Some(index) = index else {
            return Ok(None);
        };
        self.apply_metadata_snapshot(index, false);
        tracing::info!(
            index,
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
        crate::core::effects::bring_in_line(&mut NodeEffects(self), index, &topics, reconcile);
    }

    /// Records the topic incarnations deleted by a `DeleteTopic` in the metadata log `store`
    /// (read once at start, before the replay).
    pub(super) fn note_deleted_incarnations(&self, store: &LogStore) {
        let found = crate::core::topics::deleted_incarnations(store);
        self.deleted_before_start
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(found);
    }

    /// The metadata group's handle (the Raft group every node votes in).
    pub fn metadata_group(&self) -> Option<LogStream> {
        self.metadata_proposer.group()
    }

    /// The one path by which anything on this node writes to the replicated metadata: build
    /// the [`crate::metadata::MetaCommand`] and propose it here (see
    /// [`crate::metadata::proposer`]).
    pub fn metadata_proposer(&self) -> &crate::metadata::proposer::MetadataProposer {
        &self.metadata_proposer
    }

    /// Changes each time the metadata applied here decides a transaction (its markers are
    /// due) or queues a partition leader's request to add a partition to one (the coordinator
    /// handles it): each of the transaction tasks holds its own receiver, so none misses a
    /// change made while it was busy.
    pub fn transaction_work(&self) -> tokio::sync::watch::Receiver<u64> {
        self.transaction_work.subscribe()
    }
}

/// The node as the host of what the metadata's effects call for (see
/// [`crate::core::effects`]): each action is the node's method of the same name.
struct NodeEffects<'a>(&'a Node);

impl EffectHost for NodeEffects<'_> {
    type OpenError = NodeError;

    fn data_dir(&self) -> &DataDir {
        &self.0.data_dir
    }

    fn open_topic_incarnations(&self) -> Vec<(String, u64)> {
        self.0
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .open_topic_incarnations()
    }

    fn open_topic(
        &mut self,
        name: &str,
        incarnation: u64,
        replicas: &[Vec<u64>],
    ) -> Result<(), NodeError> {
        self.0.open_topic(name, incarnation, replicas)
    }

    fn drop_topic(&mut self, name: &str, incarnation: Option<u64>) {
        self.0.drop_topic(name, incarnation);
    }

    fn apply_topic_settings(&mut self, name: &str, incarnation: u64) {
        self.0.apply_topic_settings(name, incarnation);
    }

    fn delete_records_before(&mut self, name: &str, incarnation: u64, partition: u32, offset: u64) {
        self.0
            .delete_records_before(name, incarnation, partition, offset);
    }

    fn hand_leadership_to(&mut self, name: &str, incarnation: u64, partition: u32, preferred: u64) {
        self.0
            .hand_leadership_to(name, incarnation, partition, preferred);
    }

    fn reconcile_membership(&mut self) {
        self.0.reconcile_membership();
    }

    fn note_admin_address(&mut self, id: u64, address: String) {
        self.0.note_admin_address(id, address);
    }

    fn note_transaction_work(&mut self) {
        self.0
            .transaction_work
            .send_modify(|n| *n = n.wrapping_add(1));
    }
}
