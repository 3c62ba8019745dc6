//! One Raft group (one log stream): a state machine that the node's runtime (a fixed pool of
//! worker threads, [`crate::runtime`]) drives in turns.
//!
//! The group owns the raft-rs `RawNode` and is the only writer of the stream's log store (one
//! turn at a time, on whichever worker runs it). A turn takes the queued input (peer messages,
//! proposals, link events), batches the proposals into entries, ticks when the runtime's timer
//! says a tick is due, then handles the `Ready` in raft-rs's required order:
//!
//! 1. send `messages()` — for a leader these are the appends to followers, sent *before* its own
//!    fsync so followers write in parallel with the leader (the pipeline; off when
//!    `pipeline = false`, then they are sent after the fsync);
//! 2. install a snapshot if there is one;
//! 3. apply committed entries (already durable here): move the high watermark, answer proposals;
//! 4. append `entries()` to the store and fsync once for all of them (group commit) when the
//!    store's sync policy asks for it (`sync = "always"`; `interval` fsyncs once the interval
//!    has passed, from the turn when no append comes; `never` does not);
//! 5. persist the hard state when term or vote changed (it must be durable before a vote is
//!    sent);
//! 6. send `persisted_messages()` (votes, follower acknowledgements) — only now, after the fsync;
//! 7. `advance`, then send and apply what the light ready holds.
//!
//! A proposal is answered only when its entry is committed (on a majority's disks) with the
//! term it was appended in; if another leader's entry wins that index, it is answered with
//! [`AppendError::Lost`].

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::TrySendError;

use crate::runtime::inbox::{InboxReceiver, InboxSender};
use crate::runtime::timeline::{self, Stage as Hop};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use raft::prelude::{ConfChange, ConfChangeV2, Entry, EntryType, Message};
use raft::{RawNode, StateRole};

use crate::replication::in_sync::{durable_copies, CommitHistory};
use thiserror::Error;
use tokio::sync::{oneshot, watch};

use crate::replication::peer_guard::{check_in_group, GroupLimits, PeerStats};
use crate::replication::producers::{
    batch_infos, total_span, ProducerTable, SequenceCheck, SequenceError,
};
use crate::replication::raft_storage::{
    decode_snapshot_data, from_raft_conf, read, to_store_entry, write, RaftStorage, SharedStore,
    CTX_META, CTX_RECORDS,
};
use crate::replication::state_machine::StateMachine;
use crate::replication::transport::PeerSender;
use crate::runtime::{Next, Task};

/// Proposals waiting for commit on one group before new ones are refused with
/// [`AppendError::Busy`].
pub const MAX_PENDING_PROPOSALS: usize = 65_536;
/// Inputs drained per loop turn before the Ready is handled (bounds latency under load).
const MAX_INPUTS_PER_TURN: usize = 4096;
/// Largest entry built by merging proposals.
const MAX_MERGED_ENTRY_BYTES: usize = 1 << 20;

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
    /// [`crate::runtime::quiesce`]): a quiesced group it leads, or a quiesced leader, wakes.
    PeerDown(u64),
    /// The replicas this group should have as voters (see [`crate::replication::membership`]): its
    /// leader adds the missing ones as learners, promotes each once caught up, then removes the
    /// others, one configuration change at a time (handing leadership away first when it is
    /// itself removed).
    SetVoters(Vec<u64>),
    /// The store found damaged data (a read or the scrubber): the group repairs its log at
    /// its next turn (see [`Group::check_damage`]).
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
    /// First offset still stored.
    pub log_start_offset: u64,
    /// Current leader's node id (0: none known).
    pub leader: u64,
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

/// Context of a rejected append a repairing replica sends its leader to say where its log
/// now ends (see [`Group::lost_entries_reported`]).
pub const LOST_ENTRIES_CONTEXT: &[u8] = b"vdl-lost-entries";

/// Context of a heartbeat response a replica whose hard state was lost sends each voter it
/// has not heard from: the voter answers with [`TERM_REPORT_CONTEXT`] and its current term
/// (see [`Group::rebuild_hard_state`]). Both are consumed before raft-rs; the query carries
/// term 1, which a peer of an older version ignores as a stale message.
const TERM_QUERY_CONTEXT: &[u8] = b"vdl-term-query";
/// Context of the answer to [`TERM_QUERY_CONTEXT`].
const TERM_REPORT_CONTEXT: &[u8] = b"vdl-term-report";

#[path = "group_rejoin.rs"]
mod rejoin;
use rejoin::rejoin_read_epoch;

/// On the leader: element `k - 1` is the highest Raft index that at least `k` voters hold
/// durably (the leader's own fsynced log counted), so an acks=all produce that asks for `k`
/// copies (min.insync.replicas above the majority) waits for it to reach its entry. All zero
/// on a follower. Published on its own channel ([`GroupParts::durable_copies`]), not in
/// [`Visible`]: it changes with every acknowledgement, and waking every reader of `Visible`
/// (fetches waiting for the high watermark) that often would cost them for nothing.
pub type DurableCopies = [u64; MAX_TRACKED_VOTERS];

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
    /// Applies committed metadata entries, if this group carries any.
    pub state_machine: Option<Box<dyn StateMachine>>,
    /// Idempotent producers' state, for a stream of record batches (rebuilt from the log).
    pub producers: Option<ProducerTable>,
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

/// A replica repairing a log that lost entries to corruption (see the server README,
/// "Storage faults").
#[derive(Debug, Clone, Copy)]
struct Repair {
    /// What was lost (from the store's durable repair marker).
    marker: logstore::RepairMarker,
    /// The commit index of the first append a leader sent after the repair (None: not heard
    /// yet). The repair ends once this replica applied it and its log is at least as up to
    /// date as it was before the cut.
    target: Option<u64>,
}

struct Waiting {
    term: u64,
    proposals: Vec<(AppendReply, u32)>,
    /// When it was proposed to raft-rs; once appended and fsynced here, when that finished
    /// (Produce's local and remote stages, see [`crate::metrics::Stage`]).
    proposed_at: Instant,
    /// Records (not metadata): its stages are Produce's.
    records: bool,
}

/// The state of a running group.
struct Group {
    p: GroupParts,
    queued: Vec<Proposal>,
    /// Proposed to raft-rs, identified by id in the entry context, not yet appended.
    proposed: HashMap<u64, Waiting>,
    /// Appended at a known index, waiting for commit.
    appended: BTreeMap<u64, Waiting>,
    next_proposal_id: u64,
    pending_count: usize,
    persisted_term: u64,
    persisted_vote: u64,
    visible: Visible,
    /// Rejoin epoch in which this group caught up (see [`crate::replication::replicas`]).
    rejoin_done: u64,
    /// In rejoin mode: (epoch, commit index a leader confirmed with a quorum in it).
    rejoin_target: Option<(u64, u64)>,
    /// In rejoin mode: (epoch, ticks since) this replica last asked its leader for the
    /// target. Counted in ticks, not wall-clock time: the group keeps ticking while it waits
    /// (it does not quiesce), and the simulation replays it.
    rejoin_target_asked: Option<(u64, usize)>,
    /// Entries and bytes of peer appends stepped since the last Ready was handled: the next
    /// Ready's append must fit the store's batch limits.
    unpersisted: (usize, u64),
    /// The store's entry and batch limits.
    store_limits: (u64, usize, u64),
    /// The term in which this node, as leader, committed and applied an entry of its own term
    /// (0: none); see [`Visible::leader_ready`].
    ready_term: u64,
    /// On the leader: consecutive ticks its log was idle (see [`crate::runtime::quiesce`]).
    idle_ticks: usize,
    /// The heartbeats of the Ready being handled tell followers to quiesce.
    mark_quiesce_heartbeats: bool,
    /// When the retention rules are applied next.
    next_retention: Instant,
    /// When the leader checks next whether to hand leadership to the preferred replica.
    next_rebalance: Option<Instant>,
    /// When each peer last sent this group a message that was stepped (see
    /// [`Group::update_in_sync`]).
    heard_from: HashMap<u64, Instant>,
    /// On the leader: since when each peer's progress waits for a snapshot to arrive (see
    /// [`Group::retry_lost_snapshots`]).
    snapshot_waits: HashMap<u64, Instant>,
    /// Since when this replica leads (None: not leading): a peer not heard from since counts
    /// as silent from then on (see [`Group::retention_floor`]).
    leading_since: Option<Instant>,
    /// On the leader: its commit index over the last `in_sync_max_lag` (the in-sync rule).
    commit_history: CommitHistory,
    /// Entries applied since the producer table was last saved (see
    /// [`Group::save_producers`]).
    producers_unsaved: u64,
    /// Read barriers asked of raft-rs, by the id in their context (at most
    /// [`MAX_PENDING_READS`]).
    reads_asked: HashMap<u64, oneshot::Sender<Result<u64, AppendError>>>,
    /// Read barriers confirmed by a quorum: (read index, reply), answered once applied.
    reads_confirmed: Vec<(u64, oneshot::Sender<Result<u64, AppendError>>)>,
    /// The next read barrier's id.
    next_read_id: u64,
    /// The state machine's newest durable snapshot (0: none): its log may be compacted below.
    snapshot_index: u64,
    /// The voters asked by [`GroupInput::SetVoters`] (None: keep the configuration).
    target_voters: Option<Vec<u64>>,
    /// Set while the log lacks entries it lost to corruption.
    repair: Option<Repair>,
    /// The `hardstate` file was damaged: term and vote are unknown until every other voter
    /// was heard from (see [`Group::rebuild_hard_state`]).
    hard_state_unknown: bool,
    /// While `hard_state_unknown`: the highest term heard from each peer since the start.
    terms_heard: HashMap<u64, u64>,
    /// While `hard_state_unknown`: when the voters not heard from were last asked their term.
    terms_asked: Option<Instant>,
    /// On a leader whose store found damage: when it asked a healthy follower to take over.
    handover_since: Option<Instant>,
    /// Committed entries through this index were read back intact (see
    /// [`Group::verify_committed`]).
    verified_through: u64,
    /// The last index on disk when the group started: entries after it came through this
    /// process and are read from its cache or fresh writes.
    unverified_through: u64,
    /// When a damaged replica last asked its peers for a leader ([`Group::call_for_leader`]).
    called_for_leader: Option<Instant>,
    /// The node is shutting down and handed leadership away: never take it back.
    leaving: bool,
}

/// Read barriers waiting at once per group; more get [`AppendError::Busy`].
pub const MAX_PENDING_READS: usize = 4096;

/// Builds a group's state machine, to run on the node's [`crate::runtime::Runtime`] until it
/// receives [`GroupInput::Stop`] or its slot is stopped.
pub fn new_group(parts: GroupParts) -> Box<dyn Task> {
    let (hs, store_limits, marker, hs_damage, last_at_open) = {
        let s = read(&parts.store);
        let c = s.config();
        (
            s.hard_state(),
            (c.max_entry_bytes, c.max_batch_entries, c.max_batch_bytes),
            s.repair_marker(),
            s.hard_state_damage().map(str::to_owned).or_else(|| {
                s.vote_unknown()
                    .then(|| "votes still unknown after an earlier hard-state damage".to_owned())
            }),
            s.last_index(),
        )
    };
    if let Some(why) = &hs_damage {
        tracing::error!(stream = %parts.name, "{why}: term and vote are lost; this replica will not vote or campaign until it has heard from every other voter, and then votes only in later terms");
        parts
            .faults
            .mark_damaged(crate::storage_faults::DamagedReplica {
                stream: parts.name.clone(),
                first_bad_index: 0,
                lost_last_index: 0,
                detail: why.clone(),
            });
    }
    if let Some(m) = marker {
        tracing::warn!(stream = %parts.name, first_bad_index = m.first_bad_index, lost_last_index = m.lost_last_index, "log cut before damaged entries; repairing from the leader");
        parts
            .faults
            .mark_damaged(crate::storage_faults::DamagedReplica {
                stream: parts.name.clone(),
                first_bad_index: m.first_bad_index,
                lost_last_index: m.lost_last_index,
                detail: "found at open".into(),
            });
    }
    let visible = *parts.visible.borrow();
    let snapshot_index = parts
        .state_machine
        .as_ref()
        .map_or(0, |sm| sm.newest_snapshot());
    let now = Instant::now();
    let next_retention = now + parts.retention_interval;
    let next_rebalance = parts.preferred_leader.map(|(_, every)| now + every);
    Box::new(Group {
        p: parts,
        queued: Vec::new(),
        proposed: HashMap::new(),
        appended: BTreeMap::new(),
        // Entry contexts name (node, proposal id); ids start from a per-start nonce (the clock
        // in nanoseconds), so an entry proposed before a restart can never be taken for a
        // proposal made after it.
        next_proposal_id: crate::replication::ids::boot_nonce(),
        pending_count: 0,
        persisted_term: hs.term,
        persisted_vote: hs.vote,
        visible,
        rejoin_done: 0,
        rejoin_target: None,
        rejoin_target_asked: None,
        unpersisted: (0, 0),
        store_limits,
        ready_term: 0,
        idle_ticks: 0,
        mark_quiesce_heartbeats: false,
        heard_from: HashMap::new(),
        leading_since: None,
        snapshot_waits: HashMap::new(),
        commit_history: CommitHistory::default(),
        producers_unsaved: 0,
        next_retention,
        next_rebalance,
        reads_asked: HashMap::new(),
        reads_confirmed: Vec::new(),
        next_read_id: 0,
        snapshot_index,
        target_voters: None,
        repair: marker.map(|marker| Repair {
            marker,
            target: None,
        }),
        hard_state_unknown: hs_damage.is_some(),
        terms_heard: HashMap::new(),
        terms_asked: None,
        handover_since: None,
        verified_through: visible.applied_index,
        unverified_through: last_at_open,
        called_for_leader: None,
        leaving: false,
    })
}

impl Task for Group {
    /// One turn: take the queued inputs (at most [`MAX_INPUTS_PER_TURN`]; the rest make the
    /// runtime schedule another turn), turn proposals into entries, tick when due and not
    /// quiesced, handle the Ready, then the slow timers (retention, leader rebalance).
    fn turn(&mut self, tick: bool) -> Next {
        timeline::stamp(Hop::TurnStart, self.p.id);
        for _ in 0..MAX_INPUTS_PER_TURN {
            match self.p.inbox.try_recv() {
                Ok(input) => {
                    if !self.take(input) {
                        return Next::Done;
                    }
                }
                Err(_) => break,
            }
        }
        self.propose_queued();
        if tick && !self.visible.quiesced {
            if self.may_not_campaign() {
                // A replica repairing lost entries, whose term and vote are unknown, or
                // rejoining after a replaced disk, never campaigns: its election timer is held
                // just short of firing. It still ticks,
                // so its leader lease (check_quorum) expires and it can vote for a candidate
                // `repair_allows` admits once the leader is gone.
                let raft = &mut self.p.node.raft;
                let hold = raft.randomized_election_timeout().saturating_sub(2);
                raft.election_elapsed = raft.election_elapsed.min(hold);
            }
            self.p.node.tick();
            if let Some((_, ticks)) = self.rejoin_target_asked.as_mut() {
                *ticks += 1;
            }
            self.maybe_quiesce();
            self.retry_lost_snapshots();
        }
        if self.verify_committed() {
            self.handle_ready();
            if self.change_membership() {
                self.handle_ready();
            }
        }
        self.publish_membership();
        self.ask_rejoin_target();
        self.check_damage();
        self.call_for_leader();
        self.ask_terms();
        let now = Instant::now();
        if now >= self.next_retention {
            self.apply_retention();
            self.next_retention = Instant::now() + self.p.retention_interval;
        }
        if let (Some(at), Some((_, every))) = (self.next_rebalance, self.p.preferred_leader) {
            if now >= at {
                self.hand_over_to_preferred();
                self.next_rebalance = Some(Instant::now() + every);
            }
        }
        let sync_due = self.sync_when_due();
        // A quiesced group wakes only for input and its slow timers (and a due sync).
        let slow = self
            .next_rebalance
            .map_or(self.next_retention, |r| r.min(self.next_retention));
        let slow = sync_due.map_or(slow, |d| d.min(slow));
        Next::Continue {
            ticking: !self.visible.quiesced,
            wake_at: Some(slow),
        }
    }

    fn has_input(&self) -> bool {
        self.p.inbox.has_items()
    }

    fn finish(&mut self) {
        self.fail_all(AppendError::Stopped);
        self.save_producers(true);
    }
}

impl Group {
    /// On the leader, once per tick: counts idle ticks and, after an election timeout of them,
    /// broadcasts the quiesce heartbeat and stops ticking (see [`crate::runtime::quiesce`]). The
    /// metadata group never quiesces.
    fn maybe_quiesce(&mut self) {
        let idle = !self.p.forward_proposals
            && (self.target_voters.is_none() || self.visible.membership_settled)
            && self.queued.is_empty()
            && self.proposed.is_empty()
            && self.appended.is_empty()
            && self.pending_count == 0
            && crate::runtime::quiesce::leader_may_quiesce(&self.p.node.raft);
        if !idle {
            self.idle_ticks = 0;
            return;
        }
        self.idle_ticks += 1;
        let needed = self.p.node.raft.election_timeout()
            * crate::runtime::quiesce::QUIESCE_AFTER_IDLE_ELECTIONS;
        if self.idle_ticks >= needed {
            self.p.node.raft.ping();
            self.mark_quiesce_heartbeats = true;
            self.set_quiesced(true);
        }
    }

    /// On the leader, once per tick: a peer whose progress has waited for a snapshot for an
    /// election timeout is reported as a failed snapshot, so raft-rs probes it and sends
    /// another. raft-rs pauses a peer in snapshot state until the peer answers it or the
    /// snapshot's outcome is reported; a snapshot message lost on the way (the peer's group
    /// not open yet when a replaced disk's node comes back, a dropped connection) would
    /// otherwise leave the peer without entries for good.
    fn retry_lost_snapshots(&mut self) {
        let raft = &self.p.node.raft;
        if raft.state != StateRole::Leader {
            self.snapshot_waits.clear();
            return;
        }
        let timeout = self.p.tick * u32::try_from(raft.election_timeout()).unwrap_or(u32::MAX);
        let waiting: Vec<u64> = raft
            .prs()
            .iter()
            .filter(|(_, pr)| pr.state == raft::ProgressState::Snapshot)
            .map(|(id, _)| *id)
            .collect();
        self.snapshot_waits.retain(|id, _| waiting.contains(id));
        let now = Instant::now();
        for id in waiting {
            let since = *self.snapshot_waits.entry(id).or_insert(now);
            if now.saturating_duration_since(since) > timeout {
                tracing::info!(stream = %self.p.name, peer = id, "no answer to a snapshot within an election timeout: sending another");
                self.snapshot_waits.remove(&id);
                self.p
                    .node
                    .report_snapshot(id, raft::SnapshotStatus::Failure);
            }
        }
    }

    /// Enters or leaves quiescence, publishing the change.
    fn set_quiesced(&mut self, quiesced: bool) {
        if self.visible.quiesced != quiesced {
            self.idle_ticks = 0;
            self.visible.quiesced = quiesced;
            self.publish();
        }
    }

    /// Whether a peer's failure concerns this group: it leads it, or this node leads (and must
    /// check its quorum) and the peer is one of its voters (with replica placement, most
    /// peers are not).
    fn concerns(&self, peer: u64) -> bool {
        let raft = &self.p.node.raft;
        raft.leader_id == peer
            || (raft.state == StateRole::Leader && raft.prs().get(peer).is_some())
    }

    /// On the leader: hands leadership to the preferred replica when it is not this node, is
    /// in the configuration, was heard from recently and has every committed entry (raft-rs
    /// then sends it TimeoutNow once it matches the whole log; proposals arriving meanwhile are
    /// refused as on any leader change, and clients retry).
    fn hand_over_to_preferred(&mut self) {
        let Some((preferred, _)) = self.p.preferred_leader else {
            return;
        };
        let raft = &self.p.node.raft;
        if raft.state != StateRole::Leader || raft.id == preferred || raft.lead_transferee.is_some()
        {
            return;
        }
        let committed = raft.raft_log.committed;
        let ready = raft
            .prs()
            .get(preferred)
            .is_some_and(|pr| pr.recent_active && pr.matched >= committed);
        if ready {
            tracing::info!(stream = %self.p.name, to = preferred, "handing leadership to the preferred replica");
            self.set_quiesced(false);
            self.p.node.transfer_leader(preferred);
        }
    }

    /// On the leader: starts a transfer to the voter not in `tried` with the highest matched
    /// index (recently active ones first) and returns its id; None when not leading or no
    /// such voter.
    fn hand_off(&mut self, tried: &[u64]) -> Option<u64> {
        let raft = &self.p.node.raft;
        if raft.state != StateRole::Leader {
            return None;
        }
        let me = raft.id;
        let voters: Vec<u64> = raft.prs().conf().voters().ids().iter().collect();
        let target = raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != me && voters.contains(id) && !tried.contains(id))
            .max_by_key(|(id, pr)| (pr.recent_active, pr.matched, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id)?;
        self.set_quiesced(false);
        tracing::info!(stream = %self.p.name, to = target, "shutting down: handing leadership over");
        self.p.node.transfer_leader(target);
        Some(target)
    }

    fn describe_replicas(&self) -> ReplicaReport {
        let raft = &self.p.node.raft;
        let role = match raft.state {
            StateRole::Leader => "leader",
            StateRole::Follower => "follower",
            StateRole::Candidate => "candidate",
            StateRole::PreCandidate => "pre_candidate",
        };
        let mut progress: Vec<VoterProgress> = if raft.state == StateRole::Leader {
            let voters: Vec<u64> = raft.prs().conf().voters().ids().iter().collect();
            raft.prs()
                .iter()
                .filter(|(id, _)| voters.contains(id))
                .map(|(id, pr)| VoterProgress {
                    id: *id,
                    matched: if *id == raft.id {
                        raft.raft_log.last_index()
                    } else {
                        pr.matched
                    },
                    recent_active: *id == raft.id || pr.recent_active,
                })
                .collect()
        } else {
            Vec::new()
        };
        progress.sort_by_key(|p| p.id);
        ReplicaReport {
            role: role.to_owned(),
            term: raft.term,
            commit_index: raft.raft_log.committed,
            last_index: raft.raft_log.last_index(),
            progress,
        }
    }

    /// The floor retention may cut below (segments holding an index at or above it stay):
    /// never an unapplied entry; on the leader, not what a replica still needs (below its
    /// matched index), within [`RetentionHold`]'s bounds: a replica silent for longer than
    /// `down_replica_wait` (counted from when this replica became leader at the earliest)
    /// holds nothing back, a live one at most `lagging_replica_max_bytes`. A replica missing
    /// deleted entries gets a snapshot when it next needs them.
    fn retention_floor(&self) -> u64 {
        let applied_floor = self.visible.applied_index + 1;
        let raft = &self.p.node.raft;
        let Some(leading_since) = self
            .leading_since
            .filter(|_| raft.state == StateRole::Leader)
        else {
            return applied_floor;
        };
        let hold = self.p.retention_hold;
        let s = read(&self.p.store);
        let mut floor = applied_floor;
        for (id, progress) in raft.prs().iter() {
            if *id == raft.id {
                continue;
            }
            let last_heard = self
                .heard_from
                .get(id)
                .map_or(leading_since, |at| (*at).max(leading_since));
            if last_heard.elapsed() > hold.down_replica_wait {
                continue;
            }
            floor = floor.min(s.retention_floor_holding(
                applied_floor,
                progress.matched + 1,
                hold.lagging_replica_max_bytes,
            ));
        }
        floor
    }

    /// Deletes old segments as the store's retention policy says, above the floor of
    /// [`Group::retention_floor`].
    fn apply_retention(&mut self) {
        if !self
            .p
            .retention_allowed
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return;
        }
        if self.p.state_machine.is_some() {
            // A state machine's log goes only below its snapshots.
            self.compact_below_snapshot();
            return;
        }
        let floor = self.retention_floor();
        let mut s = write(&self.p.store);
        match s.apply_retention(floor) {
            Ok(outcome) if outcome.segments_deleted > 0 => {
                tracing::info!(
                    stream = %self.p.name,
                    segments = outcome.segments_deleted,
                    bytes = outcome.bytes_deleted,
                    log_start_offset = outcome.log_start_offset,
                    "retention deleted old segments"
                );
                self.visible.log_start_offset = s.first_readable_offset();
                drop(s);
                self.publish();
            }
            Ok(_) | Err(logstore::LogStoreError::DeletionForbidden) => {}
            Err(e) => tracing::warn!(stream = %self.p.name, "retention failed: {e}"),
        }
    }

    /// A state machine's log (the metadata group's): deletes the sealed segments below its
    /// newest durable snapshot, but on the leader not below what a voter heard from recently
    /// still needs (its matched index). A voter that was silent gets the snapshot instead, as
    /// does one whose entries a later leader compacted.
    fn compact_below_snapshot(&mut self) {
        if self.snapshot_index == 0
            || !self
                .p
                .state_machine
                .as_ref()
                .is_some_and(|sm| sm.compaction_allowed())
        {
            return;
        }
        let mut floor = self.snapshot_index + 1;
        let raft = &self.p.node.raft;
        if raft.state == StateRole::Leader {
            let recent =
                self.p.tick * 2 * u32::try_from(raft.election_timeout()).unwrap_or(u32::MAX);
            for (id, progress) in raft.prs().iter() {
                let live = self
                    .heard_from
                    .get(id)
                    .is_some_and(|at| at.elapsed() <= recent);
                if *id != raft.id && live {
                    floor = floor.min(progress.matched + 1);
                }
            }
        }
        let mut s = write(&self.p.store);
        match s.delete_prefix(floor) {
            Ok(outcome) if outcome.segments_deleted > 0 => tracing::info!(
                stream = %self.p.name,
                segments = outcome.segments_deleted,
                bytes = outcome.bytes_deleted,
                first_index = outcome.first_index,
                snapshot_index = self.snapshot_index,
                "compacted the log below the snapshot"
            ),
            Ok(_) | Err(logstore::LogStoreError::DeletionForbidden) => {}
            Err(e) => tracing::warn!(stream = %self.p.name, "compacting the log failed: {e}"),
        }
    }

    /// Takes one input; false means stop.
    fn take(&mut self, input: GroupInput) -> bool {
        match input {
            GroupInput::Raft(mut m) => {
                if self.leaving && m.get_msg_type() == raft::prelude::MessageType::MsgTimeoutNow {
                    tracing::debug!(stream = %self.p.name, "leaving: not taking leadership back");
                    return true;
                }
                let quiesce = crate::runtime::quiesce::is_quiesce_heartbeat(&m);
                // Followers answer the quiesce heartbeat: a quiesced leader stays quiesced
                // unless the answer shows the group is not idle after all.
                let answer = self.visible.quiesced
                    && m.get_msg_type() == raft::prelude::MessageType::MsgHeartbeatResponse;
                if quiesce {
                    // Stepped as a plain heartbeat; the mark is for this layer only.
                    m.context = Default::default();
                } else if !answer {
                    self.set_quiesced(false);
                }
                if m.context.as_ref() != TERM_QUERY_CONTEXT {
                    self.note_term_heard(&m);
                }
                if self.term_query_answered(&m) {
                    self.rebuild_hard_state();
                    return true;
                }
                if self.lost_entries_reported(&m) {
                    return true;
                }
                if self.rejoin_allows(&m) && self.repair_allows(&m) {
                    let heartbeat = quiesce.then(|| m.clone());
                    let repair_input = self.may_not_vote().then(|| {
                        (
                            m.get_msg_type(),
                            m.from,
                            m.term,
                            m.commit,
                            // A snapshot at or below the commit index restores nothing (raft-rs
                            // only answers it): no repair target.
                            Some(m.get_snapshot().get_metadata().index)
                                .filter(|i| *i > self.p.node.raft.raft_log.committed)
                                .unwrap_or(0),
                        )
                    });
                    self.step_peer_message(m);
                    if let Some(input) = repair_input {
                        self.after_repair_input(input);
                    }
                    self.rebuild_hard_state();
                    if let Some(hb) = heartbeat {
                        // A replica waiting for its rejoin target keeps ticking so that it
                        // asks again: a leader that has not committed in its term yet drops
                        // the read-index request (raft-rs), and a quiesced group would not
                        // ask again until some input came.
                        let agree = !self.p.forward_proposals
                            && self.rejoin_epoch_pending().is_none()
                            && crate::runtime::quiesce::follower_may_quiesce(
                                &self.p.node.raft,
                                &hb,
                            );
                        self.set_quiesced(agree);
                    }
                    if answer && !crate::runtime::quiesce::leader_may_quiesce(&self.p.node.raft) {
                        self.set_quiesced(false);
                    }
                }
            }
            GroupInput::PeerDown(peer) => {
                if self.concerns(peer) {
                    self.set_quiesced(false);
                }
            }
            GroupInput::PeerReplaced(peer) => {
                self.set_quiesced(false);
                // Only a voter of this group has progress (raft-rs's send_append panics for
                // others); with replica placement most peers are not voters of most groups.
                if self.p.node.raft.state == StateRole::Leader {
                    if let Some(pr) = self.p.node.raft.mut_prs().get_mut(peer) {
                        pr.matched = 0;
                        pr.become_probe();
                        self.p.node.raft.send_append(peer);
                    }
                }
            }
            GroupInput::Propose(p) => {
                self.set_quiesced(false);
                if self.pending_count + self.queued.len() >= MAX_PENDING_PROPOSALS {
                    let _ = p.reply.send(Err(AppendError::Busy));
                } else {
                    self.queued.push(p);
                }
            }
            GroupInput::Unreachable(peer) => {
                if self.concerns(peer) {
                    self.set_quiesced(false);
                }
                self.p.node.report_unreachable(peer);
            }
            GroupInput::Campaign => {
                self.set_quiesced(false);
                if !self.may_not_campaign() {
                    let _ = self.p.node.campaign();
                }
            }
            GroupInput::CheckDamage => self.set_quiesced(false),
            GroupInput::TransferLeader(to) => {
                self.set_quiesced(false);
                self.p.node.transfer_leader(to);
            }
            GroupInput::RecordsFloorRaised => {
                let start = read(&self.p.store).first_readable_offset();
                if start != self.visible.log_start_offset {
                    self.visible.log_start_offset = start;
                    self.publish();
                }
                self.apply_retention();
            }
            GroupInput::DescribeProducers(reply) => {
                let producers = self
                    .p
                    .producers
                    .as_ref()
                    .map(ProducerTable::describe)
                    .unwrap_or_default();
                let _ = reply.send(producers);
            }
            GroupInput::ReadIndex(reply) => self.ask_read_index(reply),
            GroupInput::SetVoters(mut voters) => {
                self.set_quiesced(false);
                voters.sort_unstable();
                voters.dedup();
                if !voters.is_empty() && voters.len() <= MAX_TRACKED_VOTERS {
                    self.target_voters = Some(voters);
                }
            }
            GroupInput::HandOff(tried, reply) => {
                self.leaving = true;
                let _ = reply.send(self.hand_off(&tried));
            }
            GroupInput::DescribeReplicas(reply) => {
                let _ = reply.send(self.describe_replicas());
            }
            GroupInput::Stop => return false,
        }
        true
    }

    /// Starts a read barrier: raft-rs confirms this leader's commit index with a quorum (its
    /// safe read-only mode) and reports it as a read state in a later Ready.
    fn ask_read_index(&mut self, reply: oneshot::Sender<Result<u64, AppendError>>) {
        if self.p.node.raft.state != StateRole::Leader {
            let _ = reply.send(Err(AppendError::NotLeader {
                leader: self.leader_hint(),
            }));
            return;
        }
        if self.reads_asked.len() >= MAX_PENDING_READS {
            // Barriers raft-rs dropped (a leader without a commit of its term yet) leave
            // closed replies behind once their callers gave up.
            self.reads_asked.retain(|_, r| !r.is_closed());
            if self.reads_asked.len() >= MAX_PENDING_READS {
                let _ = reply.send(Err(AppendError::Busy));
                return;
            }
        }
        self.set_quiesced(false);
        let id = self.next_read_id;
        self.next_read_id = self.next_read_id.wrapping_add(1);
        self.reads_asked.insert(id, reply);
        self.p.node.read_index(id.to_be_bytes().to_vec());
    }

    /// Takes the read states raft-rs confirmed, then answers every confirmed barrier this
    /// replica has applied through.
    fn answer_reads(&mut self, states: Vec<raft::ReadState>) {
        for rs in states {
            if let Some(epoch) = rejoin_read_epoch(&rs.request_ctx) {
                if self.rejoin_epoch_pending() == Some(epoch) {
                    tracing::info!(stream = %self.p.name, target = rs.index, "rejoin target confirmed by the leader");
                    self.rejoin_target = Some((epoch, rs.index));
                }
                continue;
            }
            let id = <[u8; 8]>::try_from(rs.request_ctx.as_slice()).map(u64::from_be_bytes);
            if let Some(reply) = id.ok().and_then(|id| self.reads_asked.remove(&id)) {
                self.reads_confirmed.push((rs.index, reply));
            }
        }
        let applied = self.visible.applied_index;
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.reads_confirmed)
            .into_iter()
            .partition(|(index, _)| *index <= applied);
        self.reads_confirmed = waiting;
        for (index, reply) in done {
            let _ = reply.send(Ok(index));
        }
    }

    /// Whether this replica must not vote or campaign: its log lacks entries it lost to
    /// corruption, or its term and vote were lost with a damaged hard state.
    fn may_not_vote(&self) -> bool {
        self.repair.is_some() || self.hard_state_unknown
    }

    /// Whether this replica must not campaign (nor take leadership handed to it): it may not
    /// vote (above), or it is rejoining after a replaced disk and has not applied its rejoin
    /// target yet. A rejoining replica's own vote counts for a log that may lack committed
    /// entries: with one voter that also lacks them it would win, and the entries are lost;
    /// and a rejoining leader never ends rejoin mode (its target comes from a leader). Found
    /// by the simulation (tests/simulation with `SIM_DISKS=1 SIM_MEMBERSHIP=1`, retention
    /// seed 1001 in one run: a rejoining node led seven groups and stayed rejoining).
    /// Except in a group of two voters ([`Group::other_of_two_voters`]): there it wins only
    /// with the other voter's vote, which proves its log holds every committed entry, and it
    /// asks itself for its target. Without that, a rejoining replica holding an uncommitted
    /// entry the other voter lacks refused the other's (pre-)vote as less up to date and the
    /// group had no leader for good (the simulation with the metadata group: retention seed
    /// 1006 and seed 2010 with `SIM_DISKS=1 SIM_MEMBERSHIP=1`).
    fn may_not_campaign(&self) -> bool {
        self.may_not_vote()
            || (self.rejoin_epoch_pending().is_some() && self.other_of_two_voters().is_none())
    }

    /// Protocol-aware recovery (see the README, "Storage faults"): while repairing, a vote
    /// or pre-vote is considered only for a candidate whose log is at least as up to date as
    /// this replica's log was *before* the cut, so it never helps elect a leader lacking an
    /// entry it had (and may have acknowledged); raft-rs then applies its usual rules. With
    /// the hard state lost, no vote at all (it may have voted in this term already). A
    /// leadership transfer to a damaged replica is refused.
    fn repair_allows(&mut self, m: &Message) -> bool {
        use raft::prelude::MessageType;
        match m.get_msg_type() {
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote => {
                if self.hard_state_unknown {
                    return false;
                }
                self.repair
                    .is_none_or(|r| r.marker.covered_by(m.index, m.log_term))
            }
            MessageType::MsgTimeoutNow => !self.may_not_campaign(),
            _ => true,
        }
    }

    /// With the hard state lost, records the highest term heard from each peer (see
    /// [`Group::rebuild_hard_state`]).
    fn note_term_heard(&mut self, m: &Message) {
        use raft::prelude::MessageType;
        if !self.hard_state_unknown || m.term == 0 {
            return;
        }
        let term = match m.get_msg_type() {
            // A pre-vote asks for the term after the candidate's own.
            MessageType::MsgRequestPreVote => m.term - 1,
            // Answers to pre-votes this replica never sent (it does not campaign meanwhile).
            MessageType::MsgRequestPreVoteResponse => return,
            _ => m.term,
        };
        let heard = self.terms_heard.entry(m.from).or_insert(0);
        *heard = (*heard).max(term);
    }

    /// Ends the no-vote state of a replica whose hard state was lost, once every other voter
    /// of its configuration has been heard from since it started: the terms it may have voted
    /// in before are at most the highest of their current terms (the candidate it voted for is
    /// one of them, and its term only grows; its messages arrive in order, so any sent after
    /// that vote request carries that term or a higher one). The replica takes that term with
    /// a vote that grants nothing (its own id) unless it already follows that term's leader,
    /// so it votes only in later terms. Hearing only a leader is not enough: a deposed leader
    /// of an old term, taken as the vote, let the replica vote again in a term it had voted
    /// in. A voter that stays silent keeps the replica from voting (never from following).
    fn rebuild_hard_state(&mut self) {
        if !self.hard_state_unknown {
            return;
        }
        let raft = &self.p.node.raft;
        let me = raft.id;
        let conf = raft.prs().conf().to_conf_state();
        let mut floor = raft.term;
        for id in conf.voters.iter().chain(conf.voters_outgoing.iter()) {
            if *id == me {
                continue;
            }
            match self.terms_heard.get(id) {
                Some(term) => floor = floor.max(*term),
                None => return,
            }
        }
        let raft = &mut self.p.node.raft;
        if floor > raft.term {
            raft.become_follower(floor, raft::INVALID_ID);
        }
        if raft.vote == raft::INVALID_ID {
            raft.vote = me;
        }
        // Durable before the marker goes: a restart in between finds the marker again.
        let state = logstore::HardState {
            term: raft.term,
            vote: raft.vote,
            commit: raft.raft_log.committed.min(self.visible.applied_index),
        };
        let (term, vote) = (state.term, state.vote);
        let saved = {
            let mut s = write(&self.p.store);
            s.save_hard_state(&state)
                .unwrap_or_else(|e| panic!("persisting hard state failed: {e}"));
            s.clear_vote_unknown()
        };
        if let Err(e) = saved {
            tracing::warn!(stream = %self.p.name, "removing the vote-unknown marker failed (retried later): {e}");
            return;
        }
        self.persisted_term = term;
        self.persisted_vote = vote;
        tracing::info!(stream = %self.p.name, term, vote, "hard state rebuilt: votes only in terms above every voter's current term");
        self.hard_state_unknown = false;
        self.terms_heard.clear();
        if self.repair.is_none() {
            self.p.faults.mark_repaired(&self.p.name);
        }
    }

    /// After a message from a peer was stepped into a damaged replica: learns the leader's
    /// commit index (the repair target) from its first append, takes the term (and counts
    /// the leader as its vote) when the hard state was lost, and tells a leader that still
    /// believes it holds its lost entries (see [`Group::lost_entries_reported`]).
    fn after_repair_input(
        &mut self,
        (kind, from, term, commit, snap_index): (raft::prelude::MessageType, u64, u64, u64, u64),
    ) {
        use raft::prelude::MessageType;
        let from_leader = matches!(
            kind,
            MessageType::MsgAppend | MessageType::MsgHeartbeat | MessageType::MsgSnapshot
        ) && self.p.node.raft.leader_id == from
            && self.p.node.raft.term == term;
        if !from_leader {
            return;
        }
        if self.hard_state_unknown && self.p.node.raft.vote == 0 {
            // The leader of `term` won its election: this replica's vote in that term (if it
            // cast one) could only matter to it, so recording it as the vote never lets a
            // second candidate win the same term. Later terms: see `rebuild_hard_state`.
            self.p.node.raft.vote = from;
        }
        let Some(repair) = self.repair.as_mut() else {
            return;
        };
        match kind {
            MessageType::MsgAppend if repair.target.is_none() => repair.target = Some(commit),
            MessageType::MsgSnapshot if repair.target.is_none() && snap_index > 0 => {
                repair.target = Some(snap_index)
            }
            MessageType::MsgHeartbeat => {
                // A quiet leader sends no appends; tell it where this log ends.
                let last = read(&self.p.store).last_index();
                self.send_lost_entries(from, last);
            }
            _ => {}
        }
    }

    /// Tells `leader` that this replica's log ends at `last` (a rejected append with that
    /// hint and the marker context), so a leader that still believes it holds more sends
    /// the lost entries again.
    fn send_lost_entries(&self, leader: u64, last: u64) {
        let mut m = Message::default();
        m.set_msg_type(raft::prelude::MessageType::MsgAppendResponse);
        m.to = leader;
        m.from = self.p.node.raft.id;
        // Peers refuse term 0 (a replica whose hard state was lost starts there); a term
        // other than the leader's only wakes it (see `lost_entries_reported`).
        m.term = self.p.node.raft.term.max(1);
        m.reject = true;
        m.index = last;
        m.reject_hint = last;
        m.context = LOST_ENTRIES_CONTEXT.to_vec().into();
        self.p.peers.send(self.p.id, m);
    }

    /// On the leader: a follower rejected an append with a hint below what it acknowledged
    /// before (it lost entries to corruption and cut its log). raft-rs ignores such a
    /// rejection in replicate state (it takes it for a stale one), so the follower's
    /// progress restarts from its hint here (its log up to the hint matched this leader's:
    /// it matched further before, and a cut changes no entry it keeps) and the rest is sent
    /// again. The marked message (from [`Group::send_lost_entries`]) is consumed here: true.
    fn lost_entries_reported(&mut self, m: &Message) -> bool {
        if m.get_msg_type() != raft::prelude::MessageType::MsgAppendResponse || !m.reject {
            return false;
        }
        let marked = m.context.as_ref() == LOST_ENTRIES_CONTEXT;
        let raft = &mut self.p.node.raft;
        if raft.state != StateRole::Leader || m.term != raft.term {
            return marked;
        }
        let Some(pr) = raft.mut_prs().get_mut(m.from) else {
            return marked;
        };
        if m.reject_hint < pr.matched {
            tracing::warn!(stream = %self.p.name, follower = m.from, matched = pr.matched, follower_last = m.reject_hint, "follower lost entries it had acknowledged; sending them again");
            pr.matched = m.reject_hint;
            pr.become_probe();
            self.set_quiesced(false);
            self.p.node.raft.send_append(m.from);
        }
        marked
    }

    /// With the hard state lost: once per election timeout, asks every voter not heard from
    /// yet for its current term (a follower of a healthy group sends this replica nothing
    /// until an election).
    fn ask_terms(&mut self) {
        if !self.hard_state_unknown {
            return;
        }
        let raft = &self.p.node.raft;
        let timeout = self.p.tick * u32::try_from(raft.election_timeout()).unwrap_or(u32::MAX);
        if self.terms_asked.is_some_and(|at| at.elapsed() < timeout) {
            return;
        }
        self.terms_asked = Some(Instant::now());
        let me = raft.id;
        let conf = raft.prs().conf().to_conf_state();
        for id in conf.voters.iter().chain(conf.voters_outgoing.iter()) {
            if *id != me && !self.terms_heard.contains_key(id) {
                let mut m = Message::default();
                m.set_msg_type(raft::prelude::MessageType::MsgHeartbeatResponse);
                m.to = *id;
                m.from = me;
                m.term = 1;
                m.context = TERM_QUERY_CONTEXT.to_vec().into();
                self.p.peers.send(self.p.id, m);
            }
        }
    }

    /// Consumes a term query or report (see [`TERM_QUERY_CONTEXT`]): answers a query with
    /// this replica's term; a report was noted already. True: consumed.
    fn term_query_answered(&mut self, m: &Message) -> bool {
        if m.get_msg_type() != raft::prelude::MessageType::MsgHeartbeatResponse {
            return false;
        }
        let context = m.context.as_ref();
        if context == TERM_REPORT_CONTEXT {
            return true;
        }
        if context != TERM_QUERY_CONTEXT {
            return false;
        }
        let raft = &self.p.node.raft;
        if raft.term > 0 {
            let mut answer = Message::default();
            answer.set_msg_type(raft::prelude::MessageType::MsgHeartbeatResponse);
            answer.to = m.from;
            answer.from = raft.id;
            answer.term = raft.term;
            answer.context = TERM_REPORT_CONTEXT.to_vec().into();
            self.p.peers.send(self.p.id, answer);
        }
        true
    }

    /// A damaged replica that knows no leader asks every other voter, once per election
    /// timeout, with the marked rejection of [`Group::send_lost_entries`]: a quiesced leader
    /// wakes on it and its heartbeats start the repair (other replicas drop it).
    fn call_for_leader(&mut self) {
        if !self.may_not_vote() || self.p.node.raft.leader_id != 0 {
            return;
        }
        let timeout =
            self.p.tick * u32::try_from(self.p.node.raft.election_timeout()).unwrap_or(u32::MAX);
        if self
            .called_for_leader
            .is_some_and(|at| at.elapsed() < timeout)
        {
            return;
        }
        self.called_for_leader = Some(Instant::now());
        let last = read(&self.p.store).last_index();
        let me = self.p.node.raft.id;
        let voters: Vec<u64> = self
            .p
            .node
            .raft
            .prs()
            .conf()
            .voters()
            .ids()
            .iter()
            .filter(|id| *id != me)
            .collect();
        for id in voters {
            self.send_lost_entries(id, last);
        }
    }

    /// raft-rs reads committed entries from the store to apply them and panics on any read
    /// error, so the committed entries that were on disk when the group started are read
    /// back (CRC-checked) before raft-rs gets to them. Damage there is repaired at once (a
    /// leader steps down without a handover: it cannot go on). False: do not handle a Ready
    /// this turn.
    fn verify_committed(&mut self) -> bool {
        let committed = self
            .p
            .node
            .raft
            .raft_log
            .committed
            .min(self.unverified_through);
        if committed <= self.verified_through {
            return true;
        }
        let mut lo = self.verified_through + 1;
        let bad = {
            let s = read(&self.p.store);
            lo = lo.max(s.first_index());
            let mut bad = None;
            while lo <= committed {
                match s.entries(lo, committed + 1, 4 << 20) {
                    Ok(v) => lo += v.len().max(1) as u64,
                    Err(logstore::LogStoreError::Corruption { .. }) => {
                        bad = Some(s.damaged_from().unwrap_or(lo));
                        break;
                    }
                    Err(_) => break,
                }
            }
            bad
        };
        match bad {
            None => {
                self.verified_through = committed;
                true
            }
            Some(suspect) => {
                self.repair_now(suspect);
                self.verified_through = self.verified_through.min(read(&self.p.store).last_index());
                false
            }
        }
    }

    /// Acts on damage the store found. A follower cuts its log before the first damaged entry
    /// (durably, with a repair marker), raft-rs is rebuilt over the shorter log, and the
    /// repair rules apply until the lost range is back. A leader never cuts: its copy may be
    /// one of the majority that made damaged entries committed, and no other replica may
    /// hold them yet. It first checks the damage is on disk, then hands leadership to the
    /// live voter holding every committed entry with the highest matched index (raft-rs sends
    /// it what it lacks, then TimeoutNow), trying again each election timeout until one takes
    /// over; as a follower it then repairs. With no such voter it goes on leading over the
    /// damaged log (reads of the damaged entries fail) rather than lose a committed copy.
    fn check_damage(&mut self) {
        if self.p.node.raft.state == StateRole::Leader {
            self.hand_over_damaged_leadership();
            return;
        }
        self.handover_since = None;
        let Some(suspect) = read(&self.p.store).damaged_from() else {
            self.check_repaired();
            return;
        };
        self.repair_now(suspect);
    }

    /// On a leader whose store noted damage (see [`Group::check_damage`]).
    fn hand_over_damaged_leadership(&mut self) {
        let timeout =
            self.p.tick * u32::try_from(self.p.node.raft.election_timeout()).unwrap_or(u32::MAX);
        if self.handover_since.is_some_and(|at| at.elapsed() < timeout) {
            return;
        }
        if self.handover_since.is_none() {
            let suspect = {
                let s = read(&self.p.store);
                match s.damaged_from() {
                    None => return,
                    Some(suspect) => s.confirm_damage(suspect),
                }
            };
            match suspect {
                Ok(Some(first_bad)) => {
                    // Noted again, for the repair once this replica follows.
                    read(&self.p.store).report_damage(first_bad);
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(stream = %self.p.name, "checking damage on the leader failed: {e}");
                    return;
                }
            }
        }
        self.handover_since = Some(Instant::now());
        let raft = &self.p.node.raft;
        let committed = raft.raft_log.committed;
        let me = raft.id;
        let voters = raft.prs().conf().voters();
        let healthy = raft
            .prs()
            .iter()
            .filter(|(id, pr)| {
                **id != me && voters.contains(**id) && pr.recent_active && pr.matched >= committed
            })
            .max_by_key(|(id, pr)| (pr.matched, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id);
        match healthy {
            Some(to) => {
                tracing::warn!(stream = %self.p.name, to, "damaged log on the leader: handing leadership over");
                self.p.node.transfer_leader(to);
            }
            None => {
                tracing::error!(stream = %self.p.name, "damaged log on the leader and no live voter holds every committed entry: leading on without cutting the log");
            }
        }
    }

    /// Cuts the log before the damage at or before `suspect`, rebuilds raft-rs as a follower
    /// over the shorter log and starts the repair.
    fn repair_now(&mut self, suspect: u64) {
        self.handover_since = None;
        let leader = self.p.node.raft.leader_id;
        let marker = match write(&self.p.store).repair(suspect) {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(stream = %self.p.name, "cutting the damaged log failed: {e}");
                return;
            }
        };
        tracing::warn!(stream = %self.p.name, first_bad_index = marker.first_bad_index, lost_last_index = marker.lost_last_index, "damaged entries found; log cut before them, repairing from the leader");
        self.p
            .faults
            .mark_damaged(crate::storage_faults::DamagedReplica {
                stream: self.p.name.clone(),
                first_bad_index: marker.first_bad_index,
                lost_last_index: marker.lost_last_index,
                detail: "found while running".into(),
            });
        self.rebuild_raft(AppendError::NotLeader { leader: None });
        self.repair = Some(Repair {
            marker,
            target: None,
        });
        if leader != 0 && leader != self.p.node.raft.id {
            let last = read(&self.p.store).last_index();
            self.send_lost_entries(leader, last);
        }
    }

    /// Ends the repair once the log holds what it lost: this replica applied the commit
    /// index a leader announced after the cut, and its log is at least as up to date as it
    /// was before the cut.
    fn check_repaired(&mut self) {
        let Some(r) = self.repair else {
            return;
        };
        let Some(target) = r.target else {
            return;
        };
        let (last_index, last_term) = {
            let s = read(&self.p.store);
            (s.last_index(), s.last_term())
        };
        if self.visible.applied_index < target || !r.marker.covered_by(last_index, last_term) {
            return;
        }
        if let Err(e) = write(&self.p.store).finish_repair() {
            tracing::error!(stream = %self.p.name, "removing the repair marker failed: {e}");
            return;
        }
        self.repair = None;
        if !self.hard_state_unknown {
            self.p.faults.mark_repaired(&self.p.name);
        }
        tracing::info!(stream = %self.p.name, last_index, target, "log repaired from the leader");
    }

    /// Rebuilds raft-rs over the store's log (cut by a repair, or missing entries a write
    /// failed to take): a follower in the same term with the same vote, its commit and
    /// applied index at most the last index. Proposals waiting here fail with `why`.
    fn rebuild_raft(&mut self, why: AppendError) {
        let storage = self.p.node.store().clone();
        let commit = match raft::Storage::initial_state(&storage) {
            Ok(st) => st.hard_state.commit,
            Err(_) => 0,
        };
        let mut cfg = self.p.raft_config.clone();
        cfg.applied = commit;
        let logger = crate::replication::raft_log::group_logger(&self.p.name);
        match RawNode::new(&cfg, storage, &logger) {
            Ok(node) => self.p.node = node,
            Err(e) => {
                tracing::error!(stream = %self.p.name, "rebuilding raft after a repair failed: {e}");
                return;
            }
        }
        self.fail_all(why);
        if let Some(t) = self.p.producers.as_mut() {
            *t = crate::replication::producer_snapshot::rebuild_producers(&self.p.store, commit);
        }
        let s = read(&self.p.store);
        self.visible.leader = 0;
        self.visible.applied_index = commit;
        self.visible.high_watermark = s
            .next_offset_after_index(commit)
            .unwrap_or(self.visible.high_watermark.min(s.next_offset()));
        self.visible.leader_ready = false;
        self.visible.in_sync = [0; MAX_TRACKED_VOTERS];
        self.p.durable_copies.send_replace([0; MAX_TRACKED_VOTERS]);
        drop(s);
        self.ready_term = 0;
        self.publish();
    }

    /// Steps a message from a peer into raft-rs if [`check_in_group`] admits it; otherwise
    /// drops and counts it.
    fn step_peer_message(&mut self, mut m: Message) {
        let (max_entry, max_entries, max_bytes) = self.store_limits;
        let limits = GroupLimits {
            forward_proposals: self.p.forward_proposals,
            // A state machine's snapshot is checked below, before raft-rs takes it.
            snapshots: true,
            max_entry_bytes: max_entry,
            batch_entries_left: max_entries.saturating_sub(self.unpersisted.0),
            batch_bytes_left: max_bytes.saturating_sub(self.unpersisted.1),
        };
        if let Err(why) = check_in_group(&self.p.node.raft, &limits, &mut m) {
            self.p.peer_stats.refuse_message(self.p.id, &why);
            return;
        }
        if m.get_msg_type() == raft::prelude::MessageType::MsgSnapshot {
            if let Some(sm) = self.p.state_machine.as_ref() {
                let snap = m.get_snapshot();
                if let Err(e) = sm.check_snapshot(snap.get_metadata().index, &snap.data) {
                    tracing::warn!(stream = %self.p.name, from = m.from, "snapshot refused: {e}");
                    self.p.peer_stats.refuse_message(
                        self.p.id,
                        &crate::replication::peer_guard::Refusal::BadSnapshot(
                            "state does not decode",
                        ),
                    );
                    return;
                }
            }
        }
        if matches!(
            m.get_msg_type(),
            raft::prelude::MessageType::MsgAppend | raft::prelude::MessageType::MsgPropose
        ) {
            let (entries, bytes) = GroupLimits::append_cost(&m);
            self.unpersisted.0 += entries;
            self.unpersisted.1 += bytes;
        }
        let from = m.from;
        // Errors here are stale or foreign messages; raft-rs already ignores them.
        let _ = self.p.node.step(m);
        if self.p.node.raft.state == StateRole::Leader {
            self.heard_from.insert(from, Instant::now());
            // An answer may put a follower back in sync without producing a Ready.
            self.update_in_sync();
        }
    }

    /// On the leader, one step towards the voters asked by [`GroupInput::SetVoters`] when no
    /// configuration change is in flight (see [`crate::replication::membership`] for the order).
    /// Returns whether a change was proposed or leadership handed over.
    fn change_membership(&mut self) -> bool {
        let Some(target) = self.target_voters.clone() else {
            return false;
        };
        let raft = &self.p.node.raft;
        if raft.state != StateRole::Leader
            || raft.lead_transferee.is_some()
            || raft.pending_conf_index > raft.raft_log.applied
            || !raft.commit_to_current_term()
        {
            return false;
        }
        let conf = raft.prs().conf();
        let step = crate::replication::membership::next_step(
            raft.id,
            &target,
            &conf.voters().ids().iter().collect::<Vec<u64>>(),
            &conf.learners().iter().copied().collect::<Vec<u64>>(),
            |id| {
                raft.prs()
                    .get(id)
                    .is_some_and(|pr| pr.recent_active && pr.matched >= raft.raft_log.committed)
            },
        );
        let Some(step) = step else {
            return false;
        };
        tracing::info!(stream = %self.p.name, ?step, "membership change");
        match step {
            crate::replication::membership::Step::TransferTo(to) => {
                self.p.node.transfer_leader(to);
                true
            }
            crate::replication::membership::Step::Change(kind, id) => {
                let cc = crate::replication::membership::conf_change(kind, id);
                if let Err(e) = self.p.node.propose_conf_change(Vec::new(), cc) {
                    tracing::warn!(stream = %self.p.name, "proposing a membership change failed: {e}");
                    return false;
                }
                true
            }
        }
    }

    /// Publishes the configuration's voters and whether the asked membership is reached.
    fn publish_membership(&mut self) {
        let raft = &self.p.node.raft;
        let conf = raft.prs().conf();
        let mut ids: Vec<u64> = conf.voters().ids().iter().collect();
        ids.sort_unstable();
        let mut voters = [0u64; MAX_TRACKED_VOTERS];
        for (slot, id) in voters.iter_mut().zip(ids.iter()) {
            *slot = *id;
        }
        let settled = raft.state == StateRole::Leader
            && conf.learners().is_empty()
            && raft.pending_conf_index <= raft.raft_log.applied
            && self.target_voters.as_ref().is_none_or(|t| *t == ids);
        if voters != self.visible.voters || settled != self.visible.membership_settled {
            self.visible.voters = voters;
            self.visible.membership_settled = settled;
            self.publish();
        }
    }

    fn leader_hint(&self) -> Option<u64> {
        match self.p.node.raft.leader_id {
            0 => None,
            id => Some(id),
        }
    }

    /// Answers NOT_LEADER to every [`ProposalData::MetaAsLeader`] whose term this replica does not
    /// lead in; the others become plain `Meta` proposals for this leader.
    fn refuse_stale_leader_proposals(&mut self) {
        if !self
            .queued
            .iter()
            .any(|p| matches!(p.data, ProposalData::MetaAsLeader { .. }))
        {
            return;
        }
        let leading = self.p.node.raft.state == StateRole::Leader;
        let current = self.p.node.raft.term;
        let leader = self.leader_hint();
        let queued = std::mem::take(&mut self.queued);
        for p in queued {
            match p.data {
                ProposalData::MetaAsLeader { data, term } if leading && term == current => {
                    self.queued.push(Proposal {
                        data: ProposalData::Meta(data),
                        reply: p.reply,
                    })
                }
                ProposalData::MetaAsLeader { .. } => {
                    let _ = p.reply.send(Err(AppendError::NotLeader { leader }));
                }
                data => self.queued.push(Proposal {
                    data,
                    reply: p.reply,
                }),
            }
        }
    }

    /// Turns queued proposals into raft-rs proposals: Records proposals are merged into entries
    /// of up to [`MAX_MERGED_ENTRY_BYTES`] (group commit), each entry's context listing the
    /// proposals it holds.
    fn propose_queued(&mut self) {
        if self.queued.is_empty() {
            return;
        }
        self.refuse_stale_leader_proposals();
        if self.queued.is_empty() {
            return;
        }
        let can_forward = self.p.forward_proposals && self.leader_hint().is_some();
        if self.p.node.raft.state != StateRole::Leader && !can_forward {
            let leader = self.leader_hint();
            for p in self.queued.drain(..) {
                let _ = p.reply.send(Err(AppendError::NotLeader { leader }));
            }
            return;
        }
        let queued = std::mem::take(&mut self.queued);
        let queued = self.check_producers(queued);
        let mut iter = queued.into_iter().peekable();
        while let Some(first) = iter.next() {
            match first.data {
                ProposalData::Meta(data) | ProposalData::MetaAsLeader { data, .. } => {
                    let id = self.next_id();
                    let ctx = self.context(CTX_META, id);
                    self.propose_entry(id, ctx, data, vec![(first.reply, 0)]);
                }
                ProposalData::Records {
                    batches,
                    offset_span,
                } => {
                    let mut members = vec![(first.reply, offset_span)];
                    let mut parts = vec![batches];
                    let mut size = parts[0].len();
                    // Group commit: merge the Records proposals queued behind this one.
                    let merge = self.p.group_commit;
                    while let Some(next) = iter.next_if(|p| match &p.data {
                        ProposalData::Records { batches, .. } => {
                            merge && size + batches.len() <= MAX_MERGED_ENTRY_BYTES
                        }
                        ProposalData::Meta(_) | ProposalData::MetaAsLeader { .. } => false,
                    }) {
                        if let ProposalData::Records {
                            batches,
                            offset_span,
                        } = next.data
                        {
                            size += batches.len();
                            parts.push(batches);
                            members.push((next.reply, offset_span));
                        }
                    }
                    let data = if parts.len() == 1 {
                        parts.pop().unwrap_or_default()
                    } else {
                        let mut buf = BytesMut::with_capacity(size);
                        for p in &parts {
                            buf.put_slice(p);
                        }
                        buf.freeze()
                    };
                    let id = self.next_id();
                    let ctx = self.context(CTX_RECORDS, id);
                    self.propose_entry(id, ctx, data, members);
                }
            }
            if !self.p.group_commit {
                // One proposal per Ready: each gets its own entry and its own fsync.
                self.queued.extend(iter);
                return;
            }
        }
    }

    /// Checks idempotent producers' batches in arrival order (see
    /// [`crate::replication::producers`]): retries of committed batches are answered with their
    /// original offsets, batches out of sequence are refused, the rest go on to be proposed.
    fn check_producers(&mut self, queued: Vec<Proposal>) -> Vec<Proposal> {
        let Some(table) = self.p.producers.as_mut() else {
            return queued;
        };
        let mut out = Vec::with_capacity(queued.len());
        for p in queued {
            let ProposalData::Records {
                batches,
                offset_span,
            } = &p.data
            else {
                out.push(p);
                continue;
            };
            let infos = batch_infos(batches);
            match table.check(&infos) {
                SequenceCheck::Append => out.push(p),
                SequenceCheck::Duplicate { base_offset } => {
                    let _ = p.reply.send(Ok(Appended {
                        raft_index: 0,
                        base_offset,
                        offset_count: *offset_span,
                    }));
                }
                SequenceCheck::Reject(e) => {
                    let _ = p.reply.send(Err(AppendError::Sequence(e)));
                }
            }
        }
        out
    }

    /// Entry context: kind tag, proposing node, proposal id (see [`proposal_id`]).
    fn context(&self, tag: u8, id: u64) -> Bytes {
        let mut ctx = BytesMut::with_capacity(17);
        ctx.put_u8(tag);
        ctx.put_u64(self.p.node.raft.id);
        ctx.put_u64(id);
        ctx.freeze()
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_proposal_id;
        self.next_proposal_id = self.next_proposal_id.wrapping_add(1);
        id
    }

    fn propose_entry(
        &mut self,
        id: u64,
        ctx: Bytes,
        data: Bytes,
        members: Vec<(AppendReply, u32)>,
    ) {
        let term = self.p.node.raft.term;
        match self.p.node.propose(ctx.to_vec(), data.to_vec()) {
            Ok(()) => {
                self.pending_count += members.len();
                self.proposed.insert(
                    id,
                    Waiting {
                        term,
                        proposals: members,
                        proposed_at: Instant::now(),
                        records: ctx.first() == Some(&CTX_RECORDS),
                    },
                );
            }
            Err(e) => {
                let err = match e {
                    raft::Error::ProposalDropped => {
                        self.p
                            .metrics
                            .proposals_dropped
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        AppendError::NotLeader {
                            leader: self.leader_hint(),
                        }
                    }
                    other => AppendError::Invalid(other.to_string()),
                };
                for (reply, _) in members {
                    let _ = reply.send(Err(err.clone()));
                }
            }
        }
    }

    /// Proposals made in an earlier term and never appended will not be: their leader is gone
    /// (a forwarded proposal dies with it). They are answered `Lost`.
    fn fail_stale_proposals(&mut self, term: u64) {
        let stale: Vec<u64> = self
            .proposed
            .iter()
            .filter(|(_, w)| w.term < term)
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            if let Some(w) = self.proposed.remove(&id) {
                self.pending_count -= w.proposals.len();
                for (reply, _) in w.proposals {
                    let _ = reply.send(Err(AppendError::Lost));
                }
            }
        }
    }

    /// A new leader: the producer batches of entries it holds beyond its applied index (from
    /// earlier terms, committed only with its first entry) are pending in its producer table,
    /// so a retry of one of them is refused as in flight instead of being written twice.
    fn mark_unapplied_pending(&mut self) {
        let Some(table) = self.p.producers.as_mut() else {
            return;
        };
        let s = read(&self.p.store);
        let mut lo = self.visible.applied_index + 1;
        let hi = s.last_index() + 1;
        while lo < hi {
            let Ok(entries) = s.entries(lo, hi, 4 << 20) else {
                break;
            };
            let Some(last) = entries.last().map(|e| e.index) else {
                break;
            };
            for e in entries {
                if e.kind == logstore::EntryKind::Records {
                    table.mark_pending(&batch_infos(&e.payload));
                }
            }
            lo = last + 1;
        }
    }

    /// This node stopped leading: the proposals it appended as leader are answered at once with
    /// [`AppendError::NotLeader`] instead of waiting for the caller's deadline (an entry may
    /// still commit under the new leader, as after a timeout: clients retry, and idempotent
    /// producers' retries are deduplicated). A group that forwards proposals keeps its
    /// forwarded ones waiting: the new leader may append them.
    fn fail_deposed(&mut self, leader: u64) {
        let err = AppendError::NotLeader {
            leader: (leader != 0).then_some(leader),
        };
        let reads = std::mem::take(&mut self.reads_asked).into_values().chain(
            std::mem::take(&mut self.reads_confirmed)
                .into_iter()
                .map(|(_, r)| r),
        );
        for reply in reads {
            let _ = reply.send(Err(err.clone()));
        }
        let mut waits: Vec<Waiting> = std::mem::take(&mut self.appended).into_values().collect();
        if !self.p.forward_proposals {
            waits.extend(self.proposed.drain().map(|(_, w)| w));
        }
        for w in waits {
            self.pending_count -= w.proposals.len();
            for (reply, _) in w.proposals {
                let _ = reply.send(Err(err.clone()));
            }
        }
    }

    fn send_all(&self, msgs: Vec<Message>) {
        for mut m in msgs {
            if self.mark_quiesce_heartbeats
                && m.get_msg_type() == raft::prelude::MessageType::MsgHeartbeat
            {
                m.context = crate::runtime::quiesce::QUIESCE_CONTEXT.to_vec().into();
            }
            self.p.peers.send(self.p.id, m);
        }
    }

    fn handle_ready(&mut self) {
        // Whatever peers appended is persisted below (or there is nothing unpersisted).
        self.unpersisted = (0, 0);
        if !self.p.node.has_ready() {
            // A follower's acknowledgement that commits nothing new makes no Ready, but may
            // complete a produce that waits for more copies than a majority.
            if self.p.node.raft.state == StateRole::Leader {
                let copies = durable_copies(&self.p.node.raft);
                self.p.durable_copies.send_if_modified(|held| {
                    let changed = *held != copies;
                    *held = copies;
                    changed
                });
            }
            return;
        }
        let mut ready = self.p.node.ready();
        if let Some(ss) = ready.ss() {
            if ss.leader_id != self.visible.leader {
                self.p
                    .metrics
                    .leader_changes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // One info line per change, from the new leader; the others at debug.
                if ss.leader_id == self.p.node.raft.id {
                    tracing::info!(
                        stream = %self.p.name,
                        group = self.p.id,
                        from = self.visible.leader,
                        to = ss.leader_id,
                        term = self.p.node.raft.term,
                        "became leader"
                    );
                } else {
                    tracing::debug!(
                        stream = %self.p.name,
                        group = self.p.id,
                        from = self.visible.leader,
                        to = ss.leader_id,
                        "leader changed"
                    );
                }
            }
            self.visible.leader = ss.leader_id;
            if let Some(t) = self.p.producers.as_mut() {
                t.clear_pending();
            }
            if ss.raft_state == StateRole::Leader {
                self.leading_since.get_or_insert_with(Instant::now);
                self.mark_unapplied_pending();
            } else {
                self.leading_since = None;
                self.commit_history.clear();
                self.fail_deposed(ss.leader_id);
            }
            self.publish();
        }
        let early = if self.p.pipeline {
            let appends = ready.take_messages();
            if !appends.is_empty() {
                timeline::stamp(Hop::AppendsQueued, self.p.id);
                self.send_all(appends);
            }
            Vec::new()
        } else {
            ready.take_messages()
        };
        if !ready.snapshot().is_empty() {
            let snap = ready.snapshot().clone();
            let meta = snap.get_metadata();
            let next_offset = if let Some(sm) = self.p.state_machine.as_mut() {
                // The state first (durable when this returns), then the log restarts after
                // it: a crash in between finds the snapshot and an older log, which the node
                // reconciles at start.
                sm.install_snapshot(meta.index, meta.term, &snap.data);
                self.snapshot_index = meta.index;
                read(&self.p.store).next_offset()
            } else {
                decode_snapshot_data(&snap.data).unwrap_or(0)
            };
            let mut s = write(&self.p.store);
            if let Err(e) = s.install_snapshot(meta.index, meta.term, next_offset) {
                if self.p.state_machine.is_some() {
                    // Its state was replaced already: the log must follow, or stop here.
                    panic!("installing a snapshot failed: {e}");
                }
                // A full disk: the log is as it was; raft-rs forgets the snapshot and the
                // leader sends another (see `retry_lost_snapshots`) once this one goes
                // unanswered.
                drop(s);
                tracing::error!(stream = %self.p.name, index = meta.index, "installing a snapshot failed: {e}; waiting for the leader to send it again");
                self.rebuild_raft(AppendError::Storage(e.to_string()));
                return;
            }
            s.save_conf_state(&from_raft_conf(meta.get_conf_state()))
                .unwrap_or_else(|e| panic!("persisting conf state failed: {e}"));
            // The snapshot's index is committed and everything up to it is now in place (a
            // state machine's state, or a stream's log start): applied, so a rejoin target at
            // or below it is reached without waiting for later entries.
            if meta.index > self.visible.applied_index {
                self.visible.applied_index = meta.index;
                self.visible.high_watermark = s.next_offset();
                self.visible.log_start_offset = s.first_readable_offset();
                drop(s);
                self.publish();
            }
        }
        self.apply(ready.take_committed_entries());
        let read_states = ready.take_read_states();
        if !ready.entries().is_empty() && !self.append(ready.entries()) {
            // raft-rs was rebuilt without the entries the store could not take; this Ready
            // belonged to the old one.
            return;
        }
        if let Some(hs) = ready.hs() {
            if hs.term != self.persisted_term || hs.vote != self.persisted_vote {
                // The commit index saved is at most what is applied: a restart takes the saved
                // commit as applied (raft-rs delivers only entries after it again), and a
                // configuration change is made durable only when applied (`save_conf_state`).
                // This Ready's own committed entries are applied only after `advance` below; a
                // crash before that, with their commit saved, would skip a configuration
                // change in them for good (two missed changes give majorities that need not
                // overlap). A saved commit below the real one is always safe: raft-rs learns
                // the rest from the leader.
                let state = logstore::HardState {
                    term: hs.term,
                    vote: hs.vote,
                    commit: hs.commit.min(self.visible.applied_index),
                };
                write(&self.p.store)
                    .save_hard_state(&state)
                    .unwrap_or_else(|e| panic!("persisting hard state failed: {e}"));
                self.persisted_term = hs.term;
                self.persisted_vote = hs.vote;
            }
            self.visible.term = hs.term;
            self.fail_stale_proposals(hs.term);
        }
        self.send_all(early);
        let acks = ready.take_persisted_messages();
        if !acks.is_empty() {
            timeline::stamp(Hop::AcksQueued, self.p.id);
            self.send_all(acks);
        }
        let mut light = self.p.node.advance(ready);
        self.send_all(light.take_messages());
        self.apply(light.take_committed_entries());
        self.p.node.advance_apply();
        if !read_states.is_empty() || !self.reads_confirmed.is_empty() {
            self.answer_reads(read_states);
        }
        self.update_in_sync();
        self.check_rejoined();
        self.mark_quiesce_heartbeats = false;
        self.p.metrics.commit_index.store(
            self.p.node.raft.raft_log.committed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// On the leader, the voters that are in sync (Kafka's ISR, in Raft terms): holding
    /// everything committed `in_sync_max_lag` ago (Kafka's `replica.lag.time.max.ms`; see
    /// [`CommitHistory`]), and heard from recently: since raft-rs's last quorum check, or
    /// within two election timeouts (the quorum check clears raft-rs's flag every election
    /// timeout, before the followers' next answers), or at all while the group is quiesced (it
    /// quiesced with every voter holding the whole log; a voter reported down wakes it, and it
    /// then drops out once silent for two election timeouts). Also publishes how many voters
    /// hold each index durably ([`Visible::durable_on`]).
    fn update_in_sync(&mut self) {
        let mut in_sync = [0u64; MAX_TRACKED_VOTERS];
        let mut durable_on: DurableCopies = [0; MAX_TRACKED_VOTERS];
        let raft = &self.p.node.raft;
        if raft.state == StateRole::Leader {
            let committed = raft.raft_log.committed;
            let lagging_below =
                self.commit_history
                    .note(Instant::now(), committed, self.p.in_sync_max_lag);
            let me = raft.id;
            durable_on = durable_copies(raft);
            let recent =
                self.p.tick * 2 * u32::try_from(raft.election_timeout()).unwrap_or(u32::MAX);
            let quiesced = self.visible.quiesced;
            let heard = |id: &u64| {
                self.heard_from
                    .get(id)
                    .is_some_and(|at| at.elapsed() <= recent)
            };
            let mut ids: Vec<u64> = raft
                .prs()
                .iter()
                .filter(|(id, pr)| {
                    // Voters only: a learner catching up is not a replica clients count on.
                    let voter = raft.prs().conf().voters().contains(**id);
                    **id == me
                        || (voter
                            && pr.matched >= lagging_below
                            && (pr.recent_active || quiesced || heard(id)))
                })
                .map(|(id, _)| *id)
                .collect();
            ids.sort_unstable();
            for (slot, id) in in_sync.iter_mut().zip(ids) {
                *slot = id;
            }
        }
        // Committed in its own term and applied up to the commit index: from then on the
        // high watermark this leader publishes is at least every one published before.
        let leader_ready = raft.state == StateRole::Leader
            && (self.ready_term == raft.term
                || (raft.commit_to_current_term()
                    && self.visible.applied_index >= raft.raft_log.committed));
        if leader_ready {
            self.ready_term = raft.term;
        }
        self.p.durable_copies.send_if_modified(|copies| {
            let changed = *copies != durable_on;
            *copies = durable_on;
            changed
        });
        if in_sync != self.visible.in_sync || leader_ready != self.visible.leader_ready {
            self.visible.in_sync = in_sync;
            self.visible.leader_ready = leader_ready;
            self.publish();
        }
    }

    /// Runs a sync prepared by the store (see [`Group::append`]). The fsync runs without the
    /// store's lock, so consumers keep reading committed data meanwhile; this thread is the
    /// only writer, so nothing changes the log in between.
    fn run_sync(&self, pending: Option<logstore::PendingSync>) {
        if let Some(pending) = pending {
            let started = Instant::now();
            pending.run();
            self.p.node_metrics.fsync.observe(started.elapsed());
            write(&self.p.store)
                .complete_sync(pending)
                .unwrap_or_else(|e| panic!("completing a log sync failed: {e}"));
            timeline::stamp(Hop::FsyncDone, self.p.id);
        }
    }

    /// Under `sync = "interval"`, the fsync that falls due with no append to carry it (the
    /// last appends of a burst). Returns when the next one falls due, if any, so the turn
    /// wakes for it.
    fn sync_when_due(&mut self) -> Option<Instant> {
        let due = read(&self.p.store).sync_due_at()?;
        if due > Instant::now() {
            return Some(due);
        }
        let pending = write(&self.p.store)
            .prepare_due_sync()
            .unwrap_or_else(|e| panic!("preparing a log sync failed: {e}"));
        self.run_sync(pending);
        None
    }

    /// Appends entries (truncating a conflicting suffix first) and makes them durable as the
    /// store's sync policy says: with one fsync under `always` (group commit); then records the indexes of this node's proposals. A write the store refuses
    /// with an I/O error (a full disk) leaves nothing in the store (it cuts what it wrote);
    /// raft-rs is then rebuilt from the store, which drops the entries as a crash before
    /// persisting them would, and the proposals waiting here fail with a storage error: false.
    /// (An fsync failure stays fail-stop: see the logstore README.)
    fn append(&mut self, entries: &[Entry]) -> bool {
        let converted: Vec<_> = entries.iter().map(to_store_entry).collect();
        let first = entries[0].index;
        let pending = {
            let mut s = write(&self.p.store);
            if first <= s.last_index() {
                if let Err(e) = s.truncate_suffix(first) {
                    // A full disk (the copy of a sealed segment's kept prefix needs space):
                    // nothing was cut; as with a refused append, raft-rs forgets the entries
                    // and the leader sends them again later.
                    drop(s);
                    tracing::error!(stream = %self.p.name, first, "truncating the log failed: {e}; the entries are dropped and sent again later");
                    self.rebuild_raft(AppendError::Storage(e.to_string()));
                    return false;
                }
            }
            let segments_before = s.segment_count();
            if let Err(e) = s.append_unsynced(&converted) {
                drop(s);
                tracing::error!(stream = %self.p.name, first, "appending to the log failed: {e}; the entries are dropped and their proposals fail");
                self.rebuild_raft(AppendError::Storage(e.to_string()));
                return false;
            }
            if s.segment_count() > segments_before {
                tracing::info!(
                    stream = %self.p.name,
                    group = self.p.id,
                    segments = s.segment_count(),
                    first_index = first,
                    "segment rolled"
                );
            }
            // The store's sync policy (the node's `sync`) decides whether this Ready fsyncs:
            // `always` does, `interval` once the interval has passed, `never` does not.
            s.prepare_due_sync()
                .unwrap_or_else(|e| panic!("preparing a log sync failed: {e}"))
        };
        self.run_sync(pending);
        let durable_at = Instant::now();
        for e in entries {
            let Some(id) = proposal_id(&e.context, self.p.node.raft.id) else {
                continue;
            };
            if let Some(mut w) = self.proposed.remove(&id) {
                if w.term == e.term {
                    if w.records {
                        self.p.node_metrics.observe_request(
                            kafka_proto::api::ApiKey::Produce.as_i16(),
                            crate::metrics::Stage::Local,
                            durable_at.saturating_duration_since(w.proposed_at),
                        );
                    }
                    // From now on: the wait for a majority (the remote stage).
                    w.proposed_at = durable_at;
                    // An entry at this index from an earlier attempt is replaced: it is lost.
                    if let Some(old) = self.appended.insert(e.index, w) {
                        self.pending_count -= old.proposals.len();
                        for (reply, _) in old.proposals {
                            let _ = reply.send(Err(AppendError::Lost));
                        }
                    }
                } else {
                    self.pending_count -= w.proposals.len();
                    for (reply, _) in w.proposals {
                        let _ = reply.send(Err(AppendError::Lost));
                    }
                }
            }
        }
        true
    }

    fn apply(&mut self, committed: Vec<Entry>) {
        let Some(last) = committed.last() else {
            return;
        };
        let last_index = last.index;
        self.producers_unsaved += committed.len() as u64;
        for e in &committed {
            match e.get_entry_type() {
                EntryType::EntryConfChange => {
                    let mut cc = ConfChange::default();
                    if protobuf::Message::merge_from_bytes(&mut cc, &e.data).is_ok() {
                        let cs = self.p.node.apply_conf_change(&cc);
                        self.save_conf_state(cs);
                    }
                }
                EntryType::EntryConfChangeV2 => {
                    let mut cc = ConfChangeV2::default();
                    if protobuf::Message::merge_from_bytes(&mut cc, &e.data).is_ok() {
                        let cs = self.p.node.apply_conf_change(&cc);
                        self.save_conf_state(cs);
                    }
                }
                EntryType::EntryNormal => {
                    if e.context.first() == Some(&CTX_META) && !e.data.is_empty() {
                        if let Some(sm) = self.p.state_machine.as_mut() {
                            sm.apply(e.index, &e.data);
                        }
                    }
                    if e.context.first() == Some(&CTX_RECORDS) {
                        self.apply_producers(e);
                    }
                }
            }
        }
        let s = read(&self.p.store);
        self.visible.applied_index = last_index;
        self.visible.high_watermark = s
            .next_offset_after_index(last_index)
            .unwrap_or_else(|e| panic!("committed index {last_index} not in the log: {e}"));
        self.visible.log_start_offset = s.first_readable_offset();
        drop(s);
        self.publish();
        // Answered only once readers can see the entries: a client that reads (ListOffsets,
        // Fetch) right after its acknowledged write finds it. Answering reads each entry's
        // offsets from the log, so it comes before a snapshot lets the log be compacted below
        // these entries (found by the simulation's metadata group: a proposal committed in the
        // batch that a snapshot covered could not be answered).
        for e in &committed {
            self.answer_committed(e);
        }
        if let Some(sm) = self.p.state_machine.as_mut() {
            let term = read(&self.p.store)
                .term(last_index)
                .unwrap_or_else(|e| panic!("committed index {last_index} not in the log: {e}"));
            let newest = sm.after_apply(last_index, term);
            if newest > self.snapshot_index {
                self.snapshot_index = newest;
                self.compact_below_snapshot();
                let log_start = read(&self.p.store).first_readable_offset();
                if log_start != self.visible.log_start_offset {
                    self.visible.log_start_offset = log_start;
                    self.publish();
                }
            }
        }
        self.save_producers(false);
    }

    /// Updates the producer table with a committed entry's batches.
    fn apply_producers(&mut self, e: &Entry) {
        let Some(table) = self.p.producers.as_mut() else {
            return;
        };
        let infos = batch_infos(&e.data);
        if infos.is_empty() {
            return;
        }
        let end = read(&self.p.store)
            .next_offset_after_index(e.index)
            .unwrap_or_else(|err| panic!("committed index {} not in the log: {err}", e.index));
        table.on_committed_at(e.index, &infos, end - total_span(&e.data));
    }

    /// Saves the producer table (see [`crate::replication::producer_snapshot`]) when it knows
    /// a producer and [`crate::replication::producer_snapshot::SNAPSHOT_EVERY_ENTRIES`] entries
    /// were applied since the last save, or, with `stopping`, when any were. A failed save (a
    /// full disk) is retried at the next one due; the log still holds what it would say.
    fn save_producers(&mut self, stopping: bool) {
        use crate::replication::producer_snapshot;
        let Some(table) = self.p.producers.as_ref() else {
            return;
        };
        let due = if stopping {
            self.producers_unsaved > 0
        } else {
            self.producers_unsaved >= producer_snapshot::SNAPSHOT_EVERY_ENTRIES
        };
        if !due || table.is_empty() {
            return;
        }
        let dir = read(&self.p.store).dir().to_path_buf();
        match producer_snapshot::save(&dir, table) {
            Ok(()) => self.producers_unsaved = 0,
            Err(e) => {
                tracing::warn!(stream = %self.p.name, "saving the producer table failed: {e}")
            }
        }
    }

    /// Persists the configuration a conf change produced (raft-rs rejects invalid ones).
    fn save_conf_state(&mut self, cs: raft::Result<raft::prelude::ConfState>) {
        if let Ok(cs) = cs {
            write(&self.p.store)
                .save_conf_state(&from_raft_conf(&cs))
                .unwrap_or_else(|e| panic!("persisting conf state failed: {e}"));
        }
    }

    /// Answers the proposals waiting on committed entry `e` (and fails those whose index was
    /// taken by another leader's entry).
    fn answer_committed(&mut self, e: &Entry) {
        while let Some((&index, _)) = self.appended.first_key_value() {
            if index > e.index {
                break;
            }
            let Some(w) = self.appended.remove(&index) else {
                break;
            };
            self.pending_count -= w.proposals.len();
            if index == e.index && w.term == e.term {
                if w.records {
                    self.p.node_metrics.observe_request(
                        kafka_proto::api::ApiKey::Produce.as_i16(),
                        crate::metrics::Stage::Remote,
                        w.proposed_at.elapsed(),
                    );
                }
                let next = read(&self.p.store)
                    .next_offset_after_index(index)
                    .unwrap_or_else(|err| panic!("committed index {index} not in the log: {err}"));
                let total: u64 = w.proposals.iter().map(|(_, n)| u64::from(*n)).sum();
                let mut base = next - total;
                // Stamped before the replies: a reply may write the client's response itself.
                timeline::stamp(Hop::Answered, self.p.id);
                for (reply, n) in w.proposals {
                    let _ = reply.send(Ok(Appended {
                        raft_index: index,
                        base_offset: base,
                        offset_count: n,
                    }));
                    base += u64::from(n);
                }
            } else {
                for (reply, _) in w.proposals {
                    let _ = reply.send(Err(AppendError::Lost));
                }
            }
        }
    }

    fn publish(&self) {
        self.p.visible.send_if_modified(|v| {
            if *v == self.visible {
                false
            } else {
                *v = self.visible;
                true
            }
        });
    }

    fn fail_all(&mut self, err: AppendError) {
        for p in self.queued.drain(..) {
            let _ = p.reply.send(Err(err.clone()));
        }
        for (_, w) in self
            .proposed
            .drain()
            .chain(std::mem::take(&mut self.appended))
        {
            for (reply, _) in w.proposals {
                let _ = reply.send(Err(err.clone()));
            }
        }
        self.pending_count = 0;
    }
}

/// The proposal id in an entry context written by [`Group::context`], if `node` proposed it.
/// Context layout: tag u8 (CTX_RECORDS or CTX_META) | proposing node u64 | proposal id u64.
fn proposal_id(ctx: &[u8], node: u64) -> Option<u64> {
    match ctx {
        [tag, rest @ ..] if (*tag == CTX_RECORDS || *tag == CTX_META) && rest.len() >= 16 => {
            let proposer = u64::from_be_bytes(rest[..8].try_into().ok()?);
            let id = u64::from_be_bytes(rest[8..16].try_into().ok()?);
            (proposer == node).then_some(id)
        }
        _ => None,
    }
}

/// Sends `input` to a group without blocking; a full inbox drops the input and returns false
/// (for Raft messages that is a lost message, which Raft tolerates).
pub fn try_deliver(inbox: &InboxSender<GroupInput>, input: GroupInput) -> bool {
    match inbox.try_send(input) {
        Ok(()) => true,
        Err(TrySendError::Full(GroupInput::Propose(p))) => {
            let _ = p.reply.send(Err(AppendError::Busy));
            false
        }
        Err(TrySendError::Disconnected(GroupInput::Propose(p))) => {
            let _ = p.reply.send(Err(AppendError::Stopped));
            false
        }
        Err(_) => false,
    }
}
