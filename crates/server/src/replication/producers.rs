//! Idempotent producers: per-stream producer state, derived from the replicated log.
//!
//! Every replica applies the same committed record batches, so every replica derives the same
//! table: for each producer id its epoch and its last five batches (first and last sequence,
//! offsets), as Kafka keeps. The leader checks each new batch against that table plus the
//! batches it has proposed but not yet seen committed:
//! - the batch repeats one of the last five committed batches (a client retry whose first
//!   attempt did commit): it is not written again, and the client gets the original offset;
//! - it continues the sequence (or starts a new epoch at 0, or comes from a producer the table
//!   does not know): it is appended;
//! - otherwise it is refused: OUT_OF_ORDER_SEQUENCE_NUMBER, or INVALID_PRODUCER_EPOCH for an
//!   older epoch, or a retriable error when it repeats a batch still in flight (any of the
//!   producer's last five proposed, uncommitted batches: a client retries from its oldest).
//!
//! A batch counts as proposed only if raft-rs took the proposal: one it dropped (during a leader
//! transfer) is forgotten ([`ProducerTable::roll_back_to`]), so the client's retry continues the
//! sequence. librdkafka treats OUT_OF_ORDER_SEQUENCE_NUMBER for the batch it expects to be next
//! as fatal, so a wrong refusal here stops the producer.
//!
//! Because the table is rebuilt from the log, it survives failover: a new leader has applied the
//! same batches. It also survives restarts: each replica saves it to its stream directory every
//! [`crate::producer_snapshot::SNAPSHOT_EVERY_ENTRIES`] applied entries and when it stops (as
//! Kafka writes producer-state snapshots), and a restart loads the newest and replays the log
//! after it (bounded: see [`REBUILD_MAX_ENTRIES`]). Without it, a producer not seen in the last
//! [`REBUILD_MAX_ENTRIES`] entries was unknown after a restart, so a retry of its last batch was
//! accepted at any sequence and written twice. Producers forgotten anyway (beyond
//! [`MAX_PRODUCERS`], or never saved before a crash and older than the replayed part) are
//! treated as new, as Kafka does for producers whose state expired.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use kafka_proto::records::{split_batches, RecordBatch};

use super::transactions::{
    marker_epoch_allowed, marker_fence_allows, marker_of, Transactions, TxnMarker,
};

/// Batches remembered per producer for duplicate detection (Kafka's number).
const BATCHES_PER_PRODUCER: usize = 5;
/// Producers remembered per stream; the least recently written are forgotten beyond this.
pub const MAX_PRODUCERS: usize = 100_000;
/// Entries read back from the end of the log to rebuild the table after a restart.
pub const REBUILD_MAX_ENTRIES: u64 = 100_000;

/// The producer fields of one record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    /// Producer id (>= 0 for idempotent producers).
    pub producer_id: i64,
    /// Producer epoch.
    pub epoch: i16,
    /// Sequence of the first record.
    pub first_seq: i32,
    /// Sequence of the last record.
    pub last_seq: i32,
    /// Offsets the batch takes (lastOffsetDelta + 1).
    pub span: u32,
    /// Part of a transaction (attributes bit 4).
    pub transactional: bool,
    /// A control batch (attributes bit 5): no sequence, never a duplicate.
    pub control: bool,
    /// The transaction marker a control batch carries (see [`super::transactions`]).
    pub marker: Option<TxnMarker>,
}

impl BatchInfo {
    fn of(b: &RecordBatch) -> BatchInfo {
        BatchInfo {
            producer_id: b.producer_id(),
            epoch: b.producer_epoch(),
            first_seq: b.base_sequence(),
            last_seq: b.last_sequence(),
            span: b.last_offset_delta() as u32 + 1,
            transactional: b.is_transactional(),
            control: b.is_control(),
            marker: marker_of(b),
        }
    }
}

/// The producer batches of concatenated record batches (batches without a producer id are
/// skipped; malformed data yields nothing, it was validated before proposing).
pub fn batch_infos(data: &Bytes) -> Vec<BatchInfo> {
    split_batches(data.clone())
        .map_while(Result::ok)
        .filter(|b| b.has_producer_id())
        .map(|b| BatchInfo::of(&b))
        .collect()
}

/// The producer batches of a committed entry whose first record is at `base_offset`, each
/// placed at its own offset: the batches without a producer id before it count too (group
/// commit merges several clients' batches into one entry).
pub fn positioned_batch_infos(data: &Bytes, mut base_offset: u64) -> Vec<(u64, BatchInfo)> {
    let mut out = Vec::new();
    for b in split_batches(data.clone()).map_while(Result::ok) {
        let span = u64::from(b.last_offset_delta() as u32) + 1;
        if b.has_producer_id() {
            out.push((base_offset, BatchInfo::of(&b)));
        }
        base_offset += span;
    }
    out
}

/// The idempotent batches of a payload read from a store, each with the base offset it
/// carries (the store writes it on append and compaction keeps it), so a compacted payload
/// (gaps between batches) places every batch at its own offset.
pub fn placed_batch_infos(data: &Bytes) -> Vec<(u64, BatchInfo)> {
    split_batches(data.clone())
        .map_while(Result::ok)
        .filter(|b| b.has_producer_id() && b.base_offset() >= 0)
        .map(|b| (b.base_offset() as u64, BatchInfo::of(&b)))
        .collect()
}

/// Total offsets taken by concatenated record batches.
pub fn total_span(data: &Bytes) -> u64 {
    split_batches(data.clone())
        .map_while(Result::ok)
        .map(|b| u64::from(b.last_offset_delta() as u32) + 1)
        .sum()
}

/// One idempotent producer as DescribeProducers reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerSummary {
    /// The producer id.
    pub producer_id: i64,
    /// Its current epoch.
    pub epoch: i16,
    /// The last sequence number of its newest committed batch.
    pub last_sequence: i32,
    /// The first offset of its open transaction in this partition, if one is open.
    pub txn_start_offset: Option<u64>,
}

/// Why a batch was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceError {
    /// The sequence does not continue the producer's last one.
    OutOfOrder,
    /// The epoch is older than the producer's current one (a zombie producer).
    InvalidEpoch,
    /// The same batch is still waiting for commit; retry later.
    DuplicateInFlight,
}

#[derive(Debug, Clone, Copy)]
struct CommittedBatch {
    first_seq: i32,
    last_seq: i32,
    base_offset: u64,
}

#[derive(Debug, Default)]
struct Producer {
    epoch: i16,
    batches: VecDeque<CommittedBatch>,
    /// Write order stamp, for forgetting the least recently used.
    stamp: u64,
}

/// What the leader should do with a proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Append,
    /// Already committed: answer with this base offset, write nothing.
    Duplicate {
        /// Offset the batch got when it was first written.
        base_offset: u64,
    },
    /// Refuse it.
    Reject(SequenceError),
}

/// A producer's newest batch proposed but not committed: epoch, first and last sequence.
type PendingBatch = (i16, i32, i32);

/// A stream's producer table (see the module docs).
#[derive(Debug, Default)]
pub struct ProducerTable {
    committed: HashMap<i64, Producer>,
    /// Per producer: its last (at most five) batches proposed in this term or held unapplied
    /// by a new leader, not yet committed, oldest first.
    pending: HashMap<i64, VecDeque<PendingBatch>>,
    /// What [`ProducerTable::check`] added to `pending` since [`ProducerTable::start_undo`],
    /// oldest first, for [`ProducerTable::roll_back_to`]: the producer whose batch was pushed
    /// and the oldest batch that push dropped, if any.
    undo: Vec<(i64, Option<PendingBatch>)>,
    stamp: u64,
    /// The Raft index of the last committed entry the table holds (0: none known): an entry
    /// at or below it is applied again after a restart (the saved commit lags) and skipped.
    applied_through: u64,
    /// The partition's open and aborted transactions (kept apart from `committed`: forgetting
    /// a producer's sequences never forgets its open transaction).
    txns: Transactions,
    /// Committed markers refused by the epoch rule ([`ProducerTable::refused_markers`]).
    refused_markers: u64,
}

/// One producer as the table's snapshot holds it (see [`crate::producer_snapshot`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerState {
    /// The producer id.
    pub producer_id: i64,
    /// Its current epoch.
    pub epoch: i16,
    /// When it last wrote, in the table's write order (for forgetting the least recent).
    pub stamp: u64,
    /// Its last committed batches, oldest first: (first sequence, last sequence, base offset);
    /// at most five.
    pub batches: Vec<(i32, i32, u64)>,
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

impl ProducerTable {
    /// Checks a proposal's batches in order and, when they are to be appended, records them as
    /// pending.
    pub fn check(&mut self, batches: &[BatchInfo]) -> SequenceCheck {
        if batches.is_empty() {
            return SequenceCheck::Append;
        }
        // A single batch that repeats a committed one is a retry: answer it from the table.
        if let [b] = batches {
            if let Some(p) = self.committed.get(&b.producer_id) {
                if p.epoch == b.epoch {
                    if let Some(c) = p
                        .batches
                        .iter()
                        .find(|c| c.first_seq == b.first_seq && c.last_seq == b.last_seq)
                    {
                        return SequenceCheck::Duplicate {
                            base_offset: c.base_offset,
                        };
                    }
                }
            }
        }
        let mut staged: Vec<(i64, PendingBatch)> = Vec::new();
        for b in batches {
            let committed_epoch = self.committed.get(&b.producer_id).map(|p| p.epoch);
            if b.control {
                // A transaction marker: no sequence, never staged as pending. Its epoch is
                // checked by the rule the replicas apply it with ([`marker_epoch_allowed`]),
                // against the producer's newest epoch counting the batches ahead of it in the
                // log that are not committed yet, any of which (transactional data on its
                // way) counts as an open transaction: so a marker the replicas would refuse
                // is refused here, before it takes an offset.
                let ahead = self
                    .pending
                    .get(&b.producer_id)
                    .and_then(|q| q.back().map(|p| p.0))
                    .into_iter()
                    .chain(
                        staged
                            .iter()
                            .filter(|(id, _)| *id == b.producer_id)
                            .map(|(_, p)| p.0),
                    )
                    .max();
                let newest = ahead.into_iter().chain(committed_epoch).max();
                let open_first = self.txns.open_first_offset(b.producer_id);
                let open = ahead.is_some() || open_first.is_some();
                let version = b.marker.map_or(0, |m| m.transaction_version);
                let opened_below = b.marker.and_then(|m| m.opened_below);
                if !marker_epoch_allowed(b.epoch, version, newest, open)
                    || !marker_fence_allows(opened_below, open_first, ahead.is_some())
                {
                    return SequenceCheck::Reject(SequenceError::InvalidEpoch);
                }
                continue;
            }
            if committed_epoch.is_some_and(|e| b.epoch < e) {
                return SequenceCheck::Reject(SequenceError::InvalidEpoch);
            }
            // A retry of any batch still in flight (not only the newest: a client retries from
            // its oldest unanswered batch) is refused as retriable.
            let in_flight = self.pending.get(&b.producer_id).is_some_and(|q| {
                q.iter()
                    .any(|&(e, first, last)| (e, first, last) == (b.epoch, b.first_seq, b.last_seq))
            });
            if in_flight {
                return SequenceCheck::Reject(SequenceError::DuplicateInFlight);
            }
            let last = staged
                .iter()
                .rev()
                .find(|(id, _)| *id == b.producer_id)
                .map(|(_, last)| *last)
                .or_else(|| {
                    self.pending
                        .get(&b.producer_id)
                        .and_then(|q| q.back().copied())
                })
                .or_else(|| {
                    // A producer whose epoch a marker bumped has no batch of it yet: its next
                    // batch starts at sequence 0.
                    self.committed.get(&b.producer_id).map(|p| {
                        p.batches
                            .back()
                            .map_or((p.epoch, -1, -1), |c| (p.epoch, c.first_seq, c.last_seq))
                    })
                });
            match last {
                None => {} // a producer we do not know (new, or its state expired): accept
                Some((epoch, first, last_seq)) => {
                    if b.epoch < epoch {
                        return SequenceCheck::Reject(SequenceError::InvalidEpoch);
                    }
                    if b.epoch > epoch {
                        if b.first_seq != 0 {
                            return SequenceCheck::Reject(SequenceError::OutOfOrder);
                        }
                    } else if b.first_seq == first && b.last_seq == last_seq {
                        return SequenceCheck::Reject(SequenceError::DuplicateInFlight);
                    } else if b.first_seq != next_seq(last_seq) {
                        return SequenceCheck::Reject(SequenceError::OutOfOrder);
                    }
                }
            }
            staged.push((b.producer_id, (b.epoch, b.first_seq, b.last_seq)));
        }
        for (id, batch) in staged {
            let dropped = self.push_pending(id, batch);
            self.undo.push((id, dropped));
        }
        SequenceCheck::Append
    }

    /// Adds a batch to a producer's pending ones; returns the oldest it drops beyond five.
    fn push_pending(&mut self, id: i64, batch: PendingBatch) -> Option<PendingBatch> {
        let q = self.pending.entry(id).or_default();
        q.push_back(batch);
        if q.len() > BATCHES_PER_PRODUCER {
            q.pop_front()
        } else {
            None
        }
    }

    /// Starts recording what [`ProducerTable::check`] stages (forgetting earlier records); the
    /// mark of this point is 0.
    pub fn start_undo(&mut self) {
        self.undo.clear();
    }

    /// The mark of the current point in the record started by [`ProducerTable::start_undo`].
    pub fn undo_mark(&self) -> usize {
        self.undo.len()
    }

    /// Forgets the batches [`ProducerTable::check`] staged as pending since `mark`: their
    /// proposals were not appended (raft-rs dropped them, as it does during a leader transfer),
    /// so the producers' retries must continue from what was pending before. Without it, a
    /// leader that stays leader (a transfer given up) refused those retries as out of order or
    /// in flight.
    pub fn roll_back_to(&mut self, mark: usize) {
        while self.undo.len() > mark {
            let Some((id, dropped)) = self.undo.pop() else {
                break;
            };
            if let Some(q) = self.pending.get_mut(&id) {
                q.pop_back();
                if let Some(oldest) = dropped {
                    q.push_front(oldest);
                }
                if q.is_empty() {
                    self.pending.remove(&id);
                }
            }
        }
    }

    /// Applies the batches of the committed entry at Raft index `index` (on every replica),
    /// whose first offset is `base_offset`; nothing when the table holds that entry already
    /// (loaded from a snapshot taken after it).
    pub fn on_committed_at(&mut self, index: u64, batches: &[BatchInfo], base_offset: u64) {
        if index <= self.applied_through {
            return;
        }
        self.applied_through = index;
        self.on_committed(batches, base_offset);
    }

    /// The Raft index of the last committed entry the table holds (0: none known).
    pub fn applied_through(&self) -> u64 {
        self.applied_through
    }

    /// The table's committed state, for a snapshot: its write-order stamp and every producer
    /// (pending proposals are not part of it).
    pub fn export(&self) -> (u64, Vec<ProducerState>) {
        let mut producers: Vec<ProducerState> = self
            .committed
            .iter()
            .map(|(id, p)| ProducerState {
                producer_id: *id,
                epoch: p.epoch,
                stamp: p.stamp,
                batches: p
                    .batches
                    .iter()
                    .map(|b| (b.first_seq, b.last_seq, b.base_offset))
                    .collect(),
            })
            .collect();
        producers.sort_by_key(|p| p.producer_id);
        (self.stamp, producers)
    }

    /// A table holding `producers` as of the committed entry at `applied_through` (from a
    /// snapshot); at most [`MAX_PRODUCERS`] producers and five batches each are kept.
    pub fn import(stamp: u64, applied_through: u64, producers: Vec<ProducerState>) -> Self {
        let mut table = ProducerTable {
            stamp,
            applied_through,
            ..ProducerTable::default()
        };
        for p in producers {
            let skip = p.batches.len().saturating_sub(BATCHES_PER_PRODUCER);
            let batches = p
                .batches
                .into_iter()
                .skip(skip)
                .map(|(first_seq, last_seq, base_offset)| CommittedBatch {
                    first_seq,
                    last_seq,
                    base_offset,
                })
                .collect();
            table.committed.insert(
                p.producer_id,
                Producer {
                    epoch: p.epoch,
                    batches,
                    stamp: p.stamp.min(stamp),
                },
            );
        }
        if table.committed.len() > MAX_PRODUCERS {
            table.forget_oldest();
        }
        table
    }

    /// Applies a committed entry's batches (on every replica), whose first offset is
    /// `base_offset`.
    pub fn on_committed(&mut self, batches: &[BatchInfo], mut base_offset: u64) {
        for b in batches {
            self.commit_batch(b, base_offset);
            base_offset += u64::from(b.span);
        }
        if self.committed.len() > MAX_PRODUCERS {
            self.forget_oldest();
        }
    }

    /// As [`ProducerTable::on_committed_at`], for batches placed at their own base offsets
    /// ([`placed_batch_infos`]: an entry read from a store, compacted or not).
    pub fn on_committed_placed_at(&mut self, index: u64, batches: &[(u64, BatchInfo)]) {
        if index <= self.applied_through {
            return;
        }
        self.applied_through = index;
        for (base_offset, b) in batches {
            self.commit_batch(b, *base_offset);
        }
        if self.committed.len() > MAX_PRODUCERS {
            self.forget_oldest();
        }
    }

    /// Records one committed batch of a producer at `base_offset`.
    fn commit_batch(&mut self, b: &BatchInfo, base_offset: u64) {
        self.stamp += 1;
        if b.control {
            self.commit_control(b, base_offset);
            return;
        }
        if b.transactional {
            self.txns.on_transactional_batch(b.producer_id, base_offset);
        }
        let p = self.committed.entry(b.producer_id).or_default();
        if b.epoch != p.epoch {
            p.epoch = b.epoch;
            p.batches.clear();
        }
        p.batches.push_back(CommittedBatch {
            first_seq: b.first_seq,
            last_seq: b.last_seq,
            base_offset,
        });
        while p.batches.len() > BATCHES_PER_PRODUCER {
            p.batches.pop_front();
        }
        p.stamp = self.stamp;
        if let Some(q) = self.pending.get_mut(&b.producer_id) {
            // The batch and any older ones (committed before it, in log order) are done.
            if let Some(at) = q
                .iter()
                .position(|&(e, _, last)| e == b.epoch && last == b.last_seq)
            {
                q.drain(..=at);
                if q.is_empty() {
                    self.pending.remove(&b.producer_id);
                }
            }
        }
    }

    /// Records a committed control batch at `offset`: a marker closes the producer's open
    /// transaction, and a newer epoch becomes the producer's (its sequences start again).
    ///
    /// A marker whose epoch fails [`marker_epoch_allowed`] against the table as it stands,
    /// or whose bound fails [`marker_fence_allows`] (a stale marker of an earlier
    /// transaction), changes nothing: it closes no transaction and moves no epoch. The check
    /// is a function of the log (the table is), so every replica, and a restart replaying the
    /// log, refuses the same markers. The leader refuses
    /// such a marker before proposing it ([`ProducerTable::check`]), so this is the second
    /// line: a refused marker still takes its offset in the log (see the transactions
    /// section of `docs/reliability.md` for what that means to a read_committed consumer).
    fn commit_control(&mut self, b: &BatchInfo, offset: u64) {
        if let Some(marker) = b.marker {
            let current = self.committed.get(&b.producer_id).map(|p| p.epoch);
            let open_first = self.txns.open_first_offset(b.producer_id);
            if !marker_epoch_allowed(
                b.epoch,
                marker.transaction_version,
                current,
                open_first.is_some(),
            ) || !marker_fence_allows(marker.opened_below, open_first, false)
            {
                self.refused_markers += 1;
                tracing::warn!(
                    producer_id = b.producer_id,
                    marker_epoch = b.epoch,
                    producer_epoch = ?current,
                    transaction_version = marker.transaction_version,
                    offset,
                    "a stale transaction marker was refused: it ends nothing"
                );
                return;
            }
            self.txns.on_marker(b.producer_id, marker, offset);
        }
        let p = self.committed.entry(b.producer_id).or_default();
        if b.epoch > p.epoch {
            p.epoch = b.epoch;
            p.batches.clear();
        }
        p.stamp = self.stamp;
    }

    /// How many committed markers this table refused since it was built (stale markers; see
    /// [`ProducerTable::commit_control`]); not saved with the table.
    pub fn refused_markers(&self) -> u64 {
        self.refused_markers
    }

    /// The partition's open and aborted transactions.
    pub fn transactions(&self) -> &Transactions {
        &self.txns
    }

    /// The last stable offset given the high watermark (see [`super::transactions`]).
    pub fn last_stable_offset(&self, high_watermark: u64) -> u64 {
        self.txns.last_stable_offset(high_watermark)
    }

    /// Forgets aborted transactions that end below the log start offset.
    pub fn trim_aborted_below(&mut self, log_start_offset: u64) {
        self.txns.trim_below(log_start_offset);
    }

    /// Replaces the transactions (loaded from a snapshot with the producers).
    pub fn set_transactions(&mut self, txns: Transactions) {
        self.txns = txns;
    }

    /// Forgets what was proposed but not committed (leadership changed: those proposals are
    /// answered or lost, and the next leader starts from the committed table).
    pub fn clear_pending(&mut self) {
        self.pending.clear();
        self.undo.clear();
    }

    /// Records batches that are in this node's log but not applied yet as pending. A new
    /// leader calls it for the entries of earlier terms it holds beyond its applied index:
    /// they commit with its first entry, so until then a client's retry of one of them must be
    /// seen as in flight (a retriable refusal), not as the next batch of its sequence (which
    /// would write it twice).
    /// Markers (control batches) have no sequence: they are not pending.
    pub fn mark_pending(&mut self, batches: &[BatchInfo]) {
        for b in batches.iter().filter(|b| !b.control) {
            self.push_pending(b.producer_id, (b.epoch, b.first_seq, b.last_seq));
        }
    }

    fn forget_oldest(&mut self) {
        let mut stamps: Vec<u64> = self.committed.values().map(|p| p.stamp).collect();
        stamps.sort_unstable();
        let cut = stamps[stamps.len() - MAX_PRODUCERS * 9 / 10];
        self.committed.retain(|_, p| p.stamp >= cut);
    }

    /// The producers known from the committed log, by id (DescribeProducers): each one's epoch
    /// and the last sequence number committed.
    pub fn describe(&self) -> Vec<ProducerSummary> {
        let mut out: Vec<ProducerSummary> = self
            .committed
            .iter()
            .map(|(id, p)| ProducerSummary {
                producer_id: *id,
                epoch: p.epoch,
                last_sequence: p.batches.back().map_or(-1, |b| b.last_seq),
                txn_start_offset: self.txns.open_first_offset(*id),
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }

    /// Number of producers known.
    pub fn len(&self) -> usize {
        self.committed.len()
    }

    /// True when no producer is known.
    pub fn is_empty(&self) -> bool {
        self.committed.is_empty()
    }
}

#[cfg(test)]
#[path = "producers_tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
#[path = "producers_txn_tests.rs"]
mod txn_tests;
