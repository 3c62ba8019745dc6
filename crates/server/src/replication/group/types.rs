//! The group's public input and output types: what it is built from ([`GroupParts`]), what
//! it takes ([`GroupInput`], [`Proposal`]), how proposals are answered ([`AppendReply`],
//! [`Appended`], [`AppendError`]) and what it publishes ([`Visible`], [`DurableCopies`],
//! [`ReplicaReport`]). Re-exported by `group.rs`, where other modules name them.

use crate::replication::peer_guard::PeerStats;
use crate::replication::producers::{ProducerTable, SequenceError};
use crate::replication::raft_storage::{RaftStorage, SharedStore};
use crate::replication::state_machine::StateMachine;
use crate::replication::transport::PeerSender;
use crate::runtime::inbox::InboxReceiver;
use bytes::Bytes;
use raft::prelude::Message;
use raft::RawNode;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::{oneshot, watch};

/// Why an append was not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AppendError {
    /// This node is not the leader; `leader` is the current leader's id when known.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The leader's node id, if known.
        leader: Option<u64>,
    },
    /// Not committed within the caller's deadline. The entry may still commit later.
    #[error("not committed before the deadline")]
    Timeout,
    /// Too many proposals are waiting.
    #[error("too many pending proposals")]
    Busy,
    /// The entry was replaced by another leader's entry; it is not in the log.
    #[error("the entry was overwritten after a leader change")]
    Lost,
    /// The group is shutting down.
    #[error("the log stream is stopped")]
    Stopped,
    /// The payload is not acceptable (e.g. too large).
    #[error("invalid append: {0}")]
    Invalid(String),
    /// An idempotent producer's batch does not fit its sequence.
    #[error("producer sequence: {0:?}")]
    Sequence(SequenceError),
    /// The replica could not write the entry (e.g. the disk is full): nothing of it is in
    /// this replica's log (Kafka's KAFKA_STORAGE_ERROR, retriable).
    #[error("storage error: {0}")]
    Storage(String),
    /// Committed on a majority, but fewer replicas than asked are in sync to hold more copies
    /// (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND: the data is in the log, not acknowledged).
    #[error("only {in_sync} replicas in sync, {required} asked")]
    TooFewInSync {
        /// Replicas in sync when the wait ended.
        in_sync: usize,
        /// Copies the append asked for.
        required: usize,
    },
}

/// Where an acknowledged append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Raft index of the entry holding the data.
    pub raft_index: u64,
    /// Offset of the first record of this append (for metadata appends: the next offset).
    pub base_offset: u64,
    /// Offsets this append took.
    pub offset_count: u32,
}

/// What a proposal carries.
#[derive(Debug)]
pub enum ProposalData {
    /// Validated Kafka record batches (magic 2) that take `offset_span` offsets in total.
    Records {
        /// The batches, concatenated.
        batches: Bytes,
        /// Sum of lastOffsetDelta + 1 over the batches.
        offset_span: u32,
    },
    /// Opaque replicated metadata (applied through [`StateMachine`]).
    Meta(Bytes),
    /// Opaque replicated metadata proposed only while this replica leads in Raft term `term`:
    /// never forwarded to another leader; [`AppendError::NotLeader`] otherwise. For writes
    /// validated against state that belongs to one leadership term (the group coordinator's).
    MetaAsLeader {
        /// The entry.
        data: Bytes,
        /// The term the proposer validated it in.
        term: u64,
    },
}

/// A request to append, answered on `reply` once committed.
#[derive(Debug)]
pub struct Proposal {
    /// What to append.
    pub data: ProposalData,
    /// Where the outcome goes.
    pub reply: AppendReply,
}

/// Takes a proposal's outcome on the thread that learns it (the group's worker, or the
/// proposer's when the inbox refuses the proposal) instead of the waiter's channel. The Kafka
/// layer uses it to write a produce response to the client's socket without waking the
/// connection's task (`kafka::direct_answer`). It must not block.
pub type AnswerHook = Box<dyn FnOnce(Result<Appended, AppendError>) + Send>;

/// Where a proposal's outcome goes: to its [`AnswerHook`] when it has one, else to the
/// waiter's channel. Dropped unanswered (a group stopping with the proposal queued), the hook
/// gets [`AppendError::Stopped`], as a waiter would see its channel close.
pub struct AppendReply {
    tx: Option<oneshot::Sender<Result<Appended, AppendError>>>,
    hook: Option<AnswerHook>,
}

impl AppendReply {
    /// A reply to `tx`, or to `hook` when there is one.
    pub fn new(
        tx: oneshot::Sender<Result<Appended, AppendError>>,
        hook: Option<AnswerHook>,
    ) -> AppendReply {
        AppendReply { tx: Some(tx), hook }
    }

    /// Delivers the outcome to the hook, or sends it to the waiter. Err (with the outcome)
    /// when the waiter is gone, as [`oneshot::Sender::send`].
    #[allow(clippy::result_large_err)]
    pub fn send(
        mut self,
        outcome: Result<Appended, AppendError>,
    ) -> Result<(), Result<Appended, AppendError>> {
        if let Some(hook) = self.hook.take() {
            hook(outcome);
            return Ok(());
        }
        match self.tx.take() {
            Some(tx) => tx.send(outcome),
            None => Err(outcome),
        }
    }
}

impl Drop for AppendReply {
    fn drop(&mut self) {
        if let Some(hook) = self.hook.take() {
            hook(Err(AppendError::Stopped));
        }
    }
}

impl std::fmt::Debug for AppendReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppendReply")
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

/// Input to a group (queued in its inbox; each input schedules a turn).
#[derive(Debug)]
pub enum GroupInput {
    /// A Raft message from a peer.
    Raft(Message),
    /// A client proposal.
    Propose(Proposal),
    /// Sending to this peer failed.
    Unreachable(u64),
    /// This peer came back with a new data directory (a replaced disk): on the leader, its
    /// progress restarts from nothing, so its log is sent again instead of assumed present.
    PeerReplaced(u64),
    /// Ask this node to start an election now (tests, leadership transfer).
    Campaign,
    /// Hand leadership to this replica (ElectLeaders): on the leader it transfers at once,
    /// on a follower raft-rs forwards the request to the leader.
    TransferLeader(u64),
    /// The store's records floor was raised (DeleteRecords): publish the new log start offset
    /// and delete the segments below it now.
    RecordsFloorRaised,
    /// Report the idempotent producers this group knows (DescribeProducers).
    DescribeProducers(oneshot::Sender<Vec<crate::replication::producers::ProducerSummary>>),
    /// A linearizable read barrier (Raft's ReadIndex, confirmed by a quorum's heartbeats, no
    /// log entry): answered with the read index once this replica, as leader, has applied
    /// through it; NOT_LEADER on a follower or when leadership is lost first.
    ReadIndex(oneshot::Sender<Result<u64, AppendError>>),
    /// This peer has not been heard from for an election timeout (node liveness, see
    /// [`crate::runtime::quiesce`]): a quiesced group it leads wakes and elects (see
    /// `group/succession.rs`); a quiesced leader it is a voter of wakes only when the voters
    /// not reported down no longer make a majority.
    PeerDown(u64),
    /// This peer, reported down before, is heard from again: a quiesced leader it is a voter
    /// of wakes to bring it up to date (a leader may have quiesced without it).
    PeerUp(u64),
    /// The replicas this group should have as voters (see [`crate::replication::membership`]): its
    /// leader adds the missing ones as learners, promotes each once caught up, then removes the
    /// others, one configuration change at a time (handing leadership away first when it is
    /// itself removed).
    SetVoters(Vec<u64>),
    /// The store found damaged data (a read or the scrubber): the group repairs its log at
    /// its next turn (see [`Group::check_damage`](super::Group::check_damage)).
    CheckDamage,
    /// This node is leaving (graceful shutdown): on the leader, start a leader transfer to the
    /// most caught-up voter not in the list (voters tried already) and answer its id (None:
    /// not the leader, or no other voter left to try); from now on the group refuses to take
    /// leadership back (it drops `MsgTimeoutNow`).
    HandOff(Vec<u64>, oneshot::Sender<Option<u64>>),
    /// Report this replica's Raft state and, on the leader, every voter's progress.
    DescribeReplicas(oneshot::Sender<ReplicaReport>),
    /// Stop the group (its pending appends fail with `Stopped`).
    Stop,
}

/// One replica's view of its Raft group (see [`GroupInput::DescribeReplicas`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplicaReport {
    /// `leader`, `follower`, `candidate` or `pre_candidate`.
    pub role: String,
    /// Current term.
    pub term: u64,
    /// Raft commit index.
    pub commit_index: u64,
    /// Index of the last entry in this replica's log.
    pub last_index: u64,
    /// On the leader: each voter's matched index (the leader's own is its last index); empty
    /// on a follower.
    pub progress: Vec<VoterProgress>,
}

/// A voter's replication progress as the leader tracks it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VoterProgress {
    /// Node id.
    pub id: u64,
    /// Highest index known to be in its log.
    pub matched: u64,
    /// Whether it answered within the last election timeout.
    pub recent_active: bool,
}

/// What readers can see of a group: advanced only by the group's turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Visible {
    /// Highest Raft index applied (committed and durable on a majority).
    pub applied_index: u64,
    /// Next Kafka offset after the last committed record: the high watermark.
    pub high_watermark: u64,
    /// The last stable offset: the first offset of the oldest transaction still open in the
    /// partition, or the high watermark when none is (always, for a group without producer
    /// state). A read_committed Fetch returns nothing at or above it (see
    /// [`crate::replication::transactions`]).
    pub last_stable_offset: u64,
    /// First offset still stored.
    pub log_start_offset: u64,
    /// Current leader's node id (0: none known).
    pub leader: u64,
    /// The last leader this replica knew: the current one or, while an election or a leader
    /// transfer is under way (`leader` 0), the one before it (0: none known since this replica
    /// started). Metadata names it meanwhile, as Kafka names a partition's leader until the
    /// next one replaces it (see `kafka::metadata`).
    pub last_leader: u64,
    /// Current term.
    pub term: u64,
    /// On the leader: the voters caught up with it (ids, 0-padded; the leader included). Not
    /// known on a follower (all zero).
    pub in_sync: [u64; MAX_TRACKED_VOTERS],
    /// On the leader: it has committed and applied an entry of its own term, so the high
    /// watermark is the cluster's, not the older one this node restarted or was elected with
    /// (Kafka's leader-epoch start offset, KIP-207). False on a follower and on a leader just
    /// elected, which answers offset queries OFFSET_NOT_AVAILABLE until then.
    pub leader_ready: bool,
    /// The group is quiesced: idle, not ticking, no heartbeats (see [`crate::runtime::quiesce`]).
    pub quiesced: bool,
    /// The voters of the group's configuration as this replica knows it (ascending,
    /// 0-padded).
    pub voters: [u64; MAX_TRACKED_VOTERS],
    /// On the leader: the configuration is the one asked by [`GroupInput::SetVoters`] (or none
    /// was asked), without learners or a configuration change in flight. False on a follower.
    pub membership_settled: bool,
}

/// What the leader knows of the durable copies of its log: published at every turn of a
/// leading group, all zero on a follower (and once leadership is lost). Published on its own
/// channel ([`GroupParts::durable_copies`]), not in [`Visible`]: it changes with every
/// acknowledgement, and waking every reader of `Visible` (fetches waiting for the high
/// watermark) that often would cost them for nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurableCopies {
    /// The term this replica led in when it published this (0: not leading).
    pub term: u64,
    /// Element `k - 1` is the highest Raft index that at least `k` voters hold durably (the
    /// leader's own fsynced log counted), so an acks=all produce that asks for `k` copies
    /// (min.insync.replicas above the majority) waits for it to reach its entry.
    pub by_count: [u64; MAX_TRACKED_VOTERS],
    /// The highest Raft index every replica in the leader's progress (voters, outgoing
    /// voters of a configuration change, learners) holds durably: entries up to it are on
    /// every copy of the log and never truncated. The log cleaner removes a tombstone only
    /// at or below it (see `compaction::cleaner::tombstone_limit`).
    pub on_every_replica: u64,
    /// The ids `on_every_replica` covers (ascending, 0-padded; at most
    /// [`MAX_TRACKED_VOTERS`]: a group with more replicas lists only some, and the cleaner
    /// then removes no tombstone).
    pub replicas: [u64; MAX_TRACKED_VOTERS],
}

/// A partition's aborted transactions still in its log, oldest marker first, as the group last
/// published them (read_committed fetches send the ones their range overlaps).
pub type AbortedList = Arc<[crate::replication::transactions::AbortedTxn]>;

/// Voters tracked in [`Visible::in_sync`] (a Raft group here has at most this many).
pub const MAX_TRACKED_VOTERS: usize = 7;

/// The parts a group needs, built by the node.
pub struct GroupParts {
    /// Group id (the same on every node).
    pub id: u64,
    /// Human name (stream/topic name).
    pub name: String,
    /// The raft-rs node.
    pub node: RawNode<RaftStorage>,
    /// The store, shared with readers.
    pub store: SharedStore,
    /// Inputs.
    pub inbox: InboxReceiver<GroupInput>,
    /// Outgoing messages.
    pub peers: PeerSender,
    /// The Raft tick period (the runtime's timer drives the ticks; this turns tick counts into
    /// time, e.g. for the in-sync window).
    pub tick: Duration,
    /// Where visibility changes are published.
    pub visible: watch::Sender<Visible>,
    /// Where the leader publishes how many voters hold each index ([`DurableCopies`]).
    pub durable_copies: watch::Sender<DurableCopies>,
    /// Send appends before the local fsync.
    pub pipeline: bool,
    /// Merge queued proposals into shared entries and fsyncs.
    pub group_commit: bool,
    /// Accept proposals on a follower and let raft-rs forward them to the leader (the metadata
    /// group); otherwise a follower answers [`AppendError::NotLeader`].
    pub forward_proposals: bool,
    /// How often the retention rules are applied.
    pub retention_interval: Duration,
    /// How far the leader's retention waits for replicas that still need old entries.
    pub retention_hold: RetentionHold,
    /// A follower is in sync while it holds what the leader had committed this long ago (and
    /// was heard from recently): Kafka's `replica.lag.time.max.ms`.
    pub in_sync_max_lag: Duration,
    /// Retention runs only while this is true: a node sets it once its metadata replay has
    /// reached the commit index it had at start, so a topic's retention overrides (replayed
    /// from the metadata log) are known before anything is deleted by the node's defaults.
    pub retention_allowed: Arc<std::sync::atomic::AtomicBool>,
    /// Where refused peer messages are counted.
    pub peer_stats: Arc<PeerStats>,
    /// The node's view of which peers are down (see [`crate::replication::liveness`]): a
    /// leader quiesces with voters that are down, and wakes only when too few are left.
    pub liveness: Arc<crate::replication::liveness::Liveness>,
    /// Where the group counts each change of its published leader or term (the node's
    /// leader report reads the groups again only after one).
    pub leadership: Arc<crate::replication::leaders::LeadershipChanges>,
    /// Applies committed metadata entries, if this group carries any.
    pub state_machine: Option<Box<dyn StateMachine>>,
    /// Idempotent producers' state, for a stream of record batches (rebuilt from the log).
    pub producers: Option<ProducerTable>,
    /// Where the group publishes the partition's aborted transactions still in its log (see
    /// [`crate::replication::transactions`]), each time the list changes.
    pub aborted: watch::Sender<AbortedList>,
    /// This node's rejoin mode after a replaced disk (see [`crate::replication::replicas`]).
    pub rejoin: std::sync::Arc<crate::replication::replicas::Directories>,
    /// The replica that should lead this group when it is live and caught up (topic
    /// partitions), and how often the leader checks; `None`: whoever is elected stays.
    pub preferred_leader: Option<(u64, Duration)>,
    /// The raft-rs configuration the node was built with (to rebuild it after a repair cut
    /// the log).
    pub raft_config: raft::Config,
    /// The node's storage-fault state (damaged replicas, counters).
    pub faults: Arc<crate::storage_faults::StorageFaults>,
    /// This replica's counters (leader changes, dropped proposals, commit index).
    pub metrics: Arc<crate::metrics::PartitionMetrics>,
    /// The node's metrics (fsync latency, Produce's local and remote stages).
    pub node_metrics: Arc<crate::metrics::NodeMetrics>,
}

/// How far a leader's retention waits for a replica that still needs entries it would delete
/// (Kafka deletes by retention whatever the followers hold; a replica below the log start
/// catches up from a snapshot). Without a bound, one node that is down would stop retention
/// on its partners and fill their disks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionHold {
    /// A replica not heard from for this long holds nothing back.
    pub down_replica_wait: Duration,
    /// A live replica holds back at most this many bytes of segments (the newest it needs).
    pub lagging_replica_max_bytes: u64,
}
