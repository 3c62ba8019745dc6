//! A handle on one partition's log stream on a running node ([`LogStream`]): append, read,
//! await commits and copies, ask its group for elections, hand-offs and reports; and an append
//! not yet answered ([`PendingAppend`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use logstore::RecordsRead;
use tokio::sync::{oneshot, watch};

use crate::replication::group::{
    try_deliver, AnswerHook, AppendError, AppendReply, Appended, GroupInput, Proposal,
    ProposalData, Visible,
};
use crate::replication::raft_storage::{read, SharedStore};
use crate::runtime::inbox::InboxSender;
use crate::runtime::timeline::{self, Stage as Hop};

/// A handle on one log stream of a running node: append, read, await commits.
#[derive(Clone)]
pub struct LogStream {
    /// The stream's name (its topic's, or a stream configured at start).
    pub(crate) name: Arc<str>,
    /// The partition of the topic this stream holds.
    pub(crate) partition: u32,
    /// The Raft group id (see [`crate::replication::ids`]).
    pub(crate) group: u64,
    /// The topic's incarnation (0 for a stream configured at start).
    pub(crate) incarnation: u64,
    /// The group's inbox: proposals and Raft messages.
    pub(crate) inbox: InboxSender<GroupInput>,
    /// The stream's log store, shared with its group.
    pub(crate) store: SharedStore,
    /// What the group last published: leader, term, commit and high watermark.
    pub(crate) visible: watch::Receiver<Visible>,
    /// How many voters hold each index, on the leader (see
    /// [`crate::replication::group::DurableCopies`]).
    pub(crate) durable_copies: watch::Receiver<crate::replication::group::DurableCopies>,
    /// The partition's aborted transactions, as its group last published them.
    pub(crate) aborted: watch::Receiver<crate::replication::group::AbortedList>,
    /// This replica's counters.
    pub(crate) metrics: Arc<crate::metrics::PartitionMetrics>,
}

impl LogStream {
    /// This replica's counters (produce and fetch traffic, leader changes, ...).
    pub fn metrics(&self) -> &crate::metrics::PartitionMetrics {
        &self.metrics
    }

    /// What the group's leader last published of its log's durable copies (when this replica
    /// leads; all zero on a follower): see [`crate::replication::group::DurableCopies`].
    pub fn durable_copies(&self) -> crate::replication::group::DurableCopies {
        *self.durable_copies.borrow()
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The partition of the topic this stream holds (0 for a stream configured at start).
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The Raft group id.
    pub fn group_id(&self) -> u64 {
        self.group
    }

    /// The topic's incarnation (the Raft index of the metadata command that created it); 0 for
    /// a stream configured at start.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The Raft indexes of the first and last entries stored on this node (entries below the
    /// first were removed by retention or compaction below a snapshot).
    pub fn stored_index_range(&self) -> (u64, u64) {
        let s = read(&self.store);
        (s.first_index(), s.last_index())
    }

    /// The offset after the last record stored on this node (committed or not): the log end
    /// offset. At least the high watermark.
    pub fn log_end_offset(&self) -> u64 {
        read(&self.store).next_offset()
    }

    /// What is committed and who leads, as of now.
    pub fn visible(&self) -> Visible {
        *self.visible.borrow()
    }

    /// The partition's aborted transactions still in its log, oldest marker first (see
    /// [`crate::replication::transactions`]); published by the group after the entries
    /// holding their markers are applied, so with [`Visible::last_stable_offset`] read after
    /// it, every abort below that offset is in the list.
    pub fn aborted_transactions(&self) -> crate::replication::group::AbortedList {
        self.aborted.borrow().clone()
    }

    /// Appends record batches (magic 2, already validated by the caller) that take
    /// `offset_span` offsets. Resolves once they are committed (fsynced on a majority) with the
    /// offsets they got, or fails: [`AppendError::NotLeader`] on a follower,
    /// [`AppendError::Timeout`] when not committed within `timeout` (the data may still commit
    /// later).
    pub async fn append(
        &self,
        batches: Bytes,
        offset_span: u32,
        timeout: Duration,
    ) -> Result<Appended, AppendError> {
        self.propose(
            ProposalData::Records {
                batches,
                offset_span,
            },
            timeout,
        )
        .await
    }

    /// Appends opaque metadata (applied by the group's state machine), resolving on commit.
    pub async fn append_meta(
        &self,
        data: Bytes,
        timeout: Duration,
    ) -> Result<Appended, AppendError> {
        self.propose(ProposalData::Meta(data), timeout).await
    }

    /// Appends opaque metadata only while this replica leads in Raft term `term` (see
    /// [`ProposalData::MetaAsLeader`]), resolving on commit.
    pub async fn append_meta_as_leader(
        &self,
        data: Bytes,
        term: u64,
        timeout: Duration,
    ) -> Result<Appended, AppendError> {
        self.propose(ProposalData::MetaAsLeader { data, term }, timeout)
            .await
    }

    async fn propose(
        &self,
        data: ProposalData,
        timeout: Duration,
    ) -> Result<Appended, AppendError> {
        self.submit(data).wait(timeout).await
    }

    /// Queues record batches for appending without waiting: proposals submitted one after
    /// another from one task reach the Raft group in that order (so they are committed in that
    /// order, if at all). Await the outcome with [`PendingAppend::wait`].
    pub fn submit_records(&self, batches: Bytes, offset_span: u32) -> PendingAppend {
        self.submit_records_answering(batches, offset_span, None)
    }

    /// [`LogStream::submit_records`] with an [`AnswerHook`] that runs with the outcome on the
    /// thread that learns it, before the returned [`PendingAppend`] gets it.
    pub fn submit_records_answering(
        &self,
        batches: Bytes,
        offset_span: u32,
        hook: Option<AnswerHook>,
    ) -> PendingAppend {
        self.submit_with(
            ProposalData::Records {
                batches,
                offset_span,
            },
            hook,
        )
    }

    fn submit(&self, data: ProposalData) -> PendingAppend {
        self.submit_with(data, None)
    }

    fn submit_with(&self, data: ProposalData, hook: Option<AnswerHook>) -> PendingAppend {
        let (tx, rx) = oneshot::channel();
        let reply = AppendReply::new(tx, hook);
        // On a full or closed inbox, try_deliver answers on `reply` itself (Busy / Stopped).
        try_deliver(&self.inbox, GroupInput::Propose(Proposal { data, reply }));
        timeline::stamp(Hop::ProposalQueued, self.group);
        PendingAppend { rx }
    }

    /// Reads whole record batches from `offset`, at most about `max_bytes` (at least one batch
    /// when one exists), never beyond the high watermark.
    pub fn read(
        &self,
        offset: u64,
        max_bytes: u64,
    ) -> Result<RecordsRead, logstore::LogStoreError> {
        self.read_below(offset, max_bytes, self.visible().high_watermark)
    }

    /// As [`LogStream::read`], never reaching `end` (at most the high watermark: a
    /// read_committed fetch passes the last stable offset).
    pub fn read_below(
        &self,
        offset: u64,
        max_bytes: u64,
        end: u64,
    ) -> Result<RecordsRead, logstore::LogStoreError> {
        let end = end.min(self.visible().high_watermark);
        let out = read(&self.store).read_records(offset, max_bytes, end);
        if let Err(logstore::LogStoreError::Corruption { .. }) = &out {
            // The store noted the damage; the group repairs it (a leader hands over first).
            // The client gets a retriable error (KAFKA_STORAGE_ERROR), never the bad bytes.
            try_deliver(&self.inbox, GroupInput::CheckDamage);
        }
        out
    }

    /// Asks the group to act on damage its store noted (the scrubber found some).
    pub fn check_damage(&self) {
        try_deliver(&self.inbox, GroupInput::CheckDamage);
    }

    /// The stream's store, for the scrubber (reads only).
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// The first offset whose batch has a max timestamp at or after `timestamp_ms` (None when
    /// no stored batch is that recent).
    pub fn offset_for_timestamp(
        &self,
        timestamp_ms: i64,
    ) -> Result<Option<u64>, logstore::LogStoreError> {
        read(&self.store).offset_for_timestamp(timestamp_ms)
    }

    /// Waits until the high watermark moves past `known`, or `timeout` passes; returns the
    /// visibility then.
    pub async fn wait_for_high_watermark_above(&self, known: u64, timeout: Duration) -> Visible {
        let mut rx = self.visible.clone();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|v| v.high_watermark > known)).await;
        let v = *rx.borrow();
        v
    }

    /// Waits until this replica publishes a log start offset of at least `offset` (a
    /// DeleteRecords applied here), or `timeout` passes; returns the visibility then.
    pub async fn wait_for_log_start_at_least(&self, offset: u64, timeout: Duration) -> Visible {
        let mut rx = self.visible.clone();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|v| v.log_start_offset >= offset)).await;
        let v = *rx.borrow();
        v
    }

    /// Waits until at least `copies` voters hold the entry at `raft_index` durably (this
    /// replica, node `me`, leading): for an acks=all produce whose topic's min.insync.replicas asks for
    /// more copies than the majority the commit waited for. Fails with
    /// [`AppendError::TooFewInSync`] once fewer than `copies` replicas are in sync (the data
    /// stays in the log), [`AppendError::NotLeader`] when leadership moves, and
    /// [`AppendError::Timeout`] after `timeout`.
    pub async fn wait_for_copies(
        &self,
        me: u64,
        raft_index: u64,
        copies: usize,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        let mut rx = self.visible.clone();
        let mut durable = self.durable_copies.clone();
        let outcome = tokio::time::timeout(timeout, async {
            loop {
                let verdict = {
                    let held = *durable.borrow_and_update();
                    let v = rx.borrow_and_update();
                    let in_sync = v.in_sync.iter().filter(|id| **id != 0).count();
                    if v.leader != me {
                        Some(Err(AppendError::NotLeader {
                            leader: (v.leader != 0).then_some(v.leader),
                        }))
                    } else if copies == 0
                        || held
                            .by_count
                            .get(copies - 1)
                            .is_some_and(|i| *i >= raft_index)
                    {
                        Some(Ok(()))
                    } else if in_sync < copies {
                        Some(Err(AppendError::TooFewInSync {
                            in_sync,
                            required: copies,
                        }))
                    } else {
                        None
                    }
                };
                if let Some(verdict) = verdict {
                    return verdict;
                }
                let changed = tokio::select! {
                    r = rx.changed() => r,
                    r = durable.changed() => r,
                };
                if changed.is_err() {
                    return Err(AppendError::Stopped);
                }
            }
        })
        .await;
        outcome.unwrap_or(Err(AppendError::Timeout))
    }

    /// A linearizable read barrier without a log entry (Raft's ReadIndex): resolves, on the
    /// leader, once a quorum confirmed its leadership and this replica applied everything
    /// committed before the call; fails with [`AppendError::NotLeader`] on a follower or when
    /// leadership is lost first, [`AppendError::Timeout`] after `timeout` (a leader that has
    /// not committed an entry of its term yet answers no barrier), [`AppendError::Busy`] when
    /// too many wait.
    pub async fn read_index(&self, timeout: Duration) -> Result<u64, AppendError> {
        let (reply, rx) = oneshot::channel();
        try_deliver(&self.inbox, GroupInput::ReadIndex(reply));
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            // The inbox was full or closed: the input (and its reply) was dropped.
            Ok(Err(_)) => Err(AppendError::Busy),
            Err(_) => Err(AppendError::Timeout),
        }
    }

    /// Asks this node to start an election for the stream.
    pub fn campaign(&self) {
        try_deliver(&self.inbox, GroupInput::Campaign);
    }

    /// Asks the group to hand leadership to replica `to` (raft-rs forwards the request from a
    /// follower to the leader). Whether it happened shows in [`LogStream::visible`].
    pub fn transfer_leader(&self, to: u64) {
        try_deliver(&self.inbox, GroupInput::TransferLeader(to));
    }

    /// The idempotent producers this replica knows from its committed log (empty when the
    /// group is stopped or busy).
    pub async fn producers(&self) -> Vec<crate::replication::producers::ProducerSummary> {
        let (tx, rx) = oneshot::channel();
        try_deliver(&self.inbox, GroupInput::DescribeProducers(tx));
        rx.await.unwrap_or_default()
    }

    /// This node is leaving: on the leader, starts a leader transfer to the most caught-up
    /// voter not in `tried` and returns its id (None: not leading, no other voter left to try,
    /// or the group stopped). The group will not take leadership back.
    pub async fn hand_off(&self, tried: Vec<u64>) -> Option<u64> {
        let (tx, rx) = oneshot::channel();
        try_deliver(&self.inbox, GroupInput::HandOff(tried, tx));
        rx.await.ok().flatten()
    }

    /// This replica's Raft role, term, commit and last index, and on the leader every voter's
    /// progress (None when the group is stopped or its inbox full).
    pub async fn describe_replicas(&self) -> Option<crate::replication::group::ReplicaReport> {
        let (tx, rx) = oneshot::channel();
        try_deliver(&self.inbox, GroupInput::DescribeReplicas(tx));
        rx.await.ok()
    }

    /// This replica's segment files, oldest first.
    pub fn segments(&self) -> Vec<logstore::SegmentSummary> {
        read(&self.store).segment_summaries()
    }

    /// This replica's storage: (segment files, their bytes).
    pub fn storage_size(&self) -> (usize, u64) {
        let stats = read(&self.store).stats();
        (stats.segments, stats.total_bytes)
    }
}

/// An append submitted to a group, not yet answered.
pub struct PendingAppend {
    /// Answered once the append commits or fails.
    pub(crate) rx: oneshot::Receiver<Result<Appended, AppendError>>,
}

impl PendingAppend {
    /// Waits for the outcome: the offsets once committed, or why not. After `timeout` it gives
    /// up with [`AppendError::Timeout`] (the data may still commit later).
    pub async fn wait(self, timeout: Duration) -> Result<Appended, AppendError> {
        match tokio::time::timeout(timeout, self.rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(AppendError::Stopped),
            Err(_) => Err(AppendError::Timeout),
        }
    }
}
