//! Log compaction (Kafka's `cleanup.policy=compact`): keep the latest record of every key.
//!
//! The store's sealed segments are its Raft log, so compaction never removes an entry: it
//! rewrites sealed segments whose entries all lie below a `clean_limit` Raft index the caller
//! gives (an index every replica has committed and applied), and a rewritten entry keeps its
//! frame's index, term, kind, context, `first_offset`, `record_count` (the offsets it took)
//! and `max_timestamp`; only its payload (the Kafka batches) shrinks, possibly to nothing.
//! See the crate README, "Compaction".
//!
//! The record level (Kafka's batch format, compression) is the caller's: it implements
//! [`RecordCompactor`]; this crate does not depend on `kafka-proto`.
//!
//! Modules, one job each: `key_map.rs` (the dedupe buffer: key digest -> latest offset in a
//! fixed budget), `segment_rewrite.rs` (one sealed segment rewritten and swapped in,
//! crash-safe), `checkpoint.rs` (the cleaner's progress file), `dirty.rs` (building the map
//! over the dirty range), `producers.rs` (each producer id's latest batch in that range),
//! `transactions.rs` (which batches are aborted, which markers are no longer needed),
//! `store_api.rs` (the `LogStore` methods).
//!
//! Transactions (Kafka's cleaner, KIP-98): the caller gives the aborted transactions
//! ([`CompactionSource::with_aborted_transactions`]) and a clean limit below its last stable
//! offset (no transaction open below it). The records of aborted transactions never enter the
//! key map (an aborted value never supersedes a committed one) and their batches are removed
//! (the last batch of a producer stays as an empty header, as for any batch). A transaction's
//! marker stays while a batch of its transaction is in the log; once a pass finds none, it
//! gets a delete horizon (now + `delete_retention_ms`), and a later pass removes it once the
//! horizon has passed, it lies below that pass's first dirty offset and below the plan's
//! `tombstone_limit`.

pub(crate) mod checkpoint;
mod dirty;
pub(crate) mod key_map;
mod producers;
pub(crate) mod segment_rewrite;
mod store_api;
mod transactions;

pub use key_map::{KeyMap, KeyMapFull, KEY_MAP_SLOT_BYTES};
pub use producers::MAX_PRODUCERS_MAPPED;
pub use store_api::{CleanerStats, CompactionSource, PreparedCompaction};

/// One record as a [`RecordCompactor`] shows it to the cleaner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The record's absolute Kafka offset (batch base offset + offset delta).
    pub offset: u64,
    /// Its key; `None` for a record without a key.
    pub key: Option<&'a [u8]>,
    /// Whether its value is null (a tombstone: the key is deleted).
    pub tombstone: bool,
    /// Its timestamp (batch base timestamp + timestamp delta), ms since the Unix epoch.
    pub timestamp_ms: i64,
    /// Whether it belongs to a control batch (transaction markers). `keep` never removes
    /// these; a marker goes whole once its transaction has no batch left (module docs).
    pub control: bool,
}

/// A batch's part in a Kafka transaction, as [`RecordCompactor::transaction_batch`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnBatch {
    /// A transactional data batch of the producer.
    Data {
        /// Its producer id.
        producer_id: i64,
    },
    /// A transaction marker (COMMIT or ABORT control batch) of the producer.
    Marker {
        /// Its producer id.
        producer_id: i64,
        /// The delete horizon an earlier pass set in it (ms since the Unix epoch), if any.
        delete_horizon_ms: Option<i64>,
    },
}

/// An aborted transaction, as the caller knows it: the producer's transactional data batches
/// from `first_offset` through `last_offset` (its ABORT marker) were aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedRange {
    /// The producer.
    pub producer_id: i64,
    /// Offset of its first record in the transaction.
    pub first_offset: u64,
    /// Offset of the ABORT marker.
    pub last_offset: u64,
}

/// What [`RecordCompactor::retain`] made of one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetainOutcome {
    /// Every record is kept: the batch stays byte for byte.
    Unchanged,
    /// Some records were removed: the new batch (exactly one magic-2 batch with the same
    /// baseOffset, its offsets inside the old batch's range; Kafka keeps lastOffsetDelta).
    Rewritten(Vec<u8>),
    /// No record is kept: the batch is removed.
    Empty,
}

/// The record level of compaction, implemented by the caller (vdl: over `kafka-proto`).
///
/// Batches handed to it are whole magic-2 batches as stored: their baseOffset is the
/// store-assigned offset. Errors are strings naming what is wrong with the batch; they stop
/// the compaction of that segment (nothing is swapped) and are returned to the caller.
pub trait RecordCompactor: Send + Sync {
    /// Calls `f` once per record of `batch`, in offset order.
    fn visit(&self, batch: &[u8], f: &mut dyn FnMut(RecordView<'_>)) -> Result<(), String>;

    /// The producer id of `batch` when it is a data batch of an idempotent (or
    /// transactional) producer: one whose header the codec keeps when it loses every record
    /// and is its producer's latest batch (see `producer_last` in [`Self::retain`]). `None`
    /// for control batches, batches without a producer id, and bytes too short to hold a
    /// header. Reads the header only, bounds-checked and never panicking (the batch is
    /// checked whole by [`Self::visit`] or [`Self::retain`], which the store calls too).
    fn producer_id(&self, batch: &[u8]) -> Option<i64>;

    /// Keeps the records of `batch` for which `keep` returns true and removes the others
    /// (`keep` is the whole decision, the delete horizon for tombstones included; control
    /// records are kept whatever it says). `delete_horizon_ms` is given so that a codec may
    /// record it in the batch (as Kafka's KIP-534 does); it must not remove records `keep`
    /// kept. A rewritten batch keeps its baseOffset; its CRC is recomputed by the codec.
    ///
    /// `producer_last` is true when the batch has a [`Self::producer_id`] and no later batch
    /// of that producer is known to the pass (Kafka keeps each producer's last batch so the
    /// producer state rebuilt from the log keeps its last sequence): a batch that keeps no
    /// record then stays as an empty batch (its header), `Rewritten` or `Unchanged`. When it
    /// is false, a batch that keeps no record is `Empty`, gone whole.
    fn retain(
        &self,
        batch: &[u8],
        keep: &mut dyn FnMut(RecordView<'_>) -> bool,
        delete_horizon_ms: Option<i64>,
        producer_last: bool,
    ) -> Result<RetainOutcome, String>;

    /// The batch's part in a transaction: `Data` for a transactional data batch, `Marker` for
    /// a COMMIT or ABORT control batch (a control batch of another type is `None`: it is
    /// always kept), `None` for everything else. Never panics on short or bad bytes (`None`).
    /// The default knows no transactions (a codec whose batches have none).
    fn transaction_batch(&self, _batch: &[u8]) -> Option<TxnBatch> {
        None
    }

    /// The marker `batch` (a [`TxnBatch::Marker`]) with its delete horizon set to
    /// `delete_horizon_ms` (Kafka's KIP-534 attribute), its record, offsets and producer fields
    /// unchanged: `Rewritten`, or `Unchanged` when it cannot carry one. The default leaves it
    /// unchanged (such a marker is then never removed).
    fn mark_delete_horizon(
        &self,
        _batch: &[u8],
        _delete_horizon_ms: i64,
    ) -> Result<RetainOutcome, String> {
        Ok(RetainOutcome::Unchanged)
    }
}

/// What one compaction pass does ([`crate::LogStore::compact`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionPlan {
    /// Only sealed segments whose entries all lie below this Raft index are read for the
    /// map or rewritten (vdl: an index every replica has committed and applied).
    pub clean_limit: u64,
    /// The wall clock now, ms since the Unix epoch.
    pub now_ms: i64,
    /// A segment holding a record younger than this (by its max timestamp) is not cleaned
    /// (Kafka's `min.compaction.lag.ms`).
    pub min_compaction_lag_ms: i64,
    /// A tombstone is removed once it is older than this and was already kept by an
    /// earlier pass (Kafka's `delete.retention.ms`), and only below `tombstone_limit`.
    pub delete_retention_ms: i64,
    /// A tombstone is removed only when its entry's Raft index is below this, whatever its
    /// age: every other rule holds too. Promise: a pass never removes a tombstone whose
    /// entry is at or above it, while it still removes the values the tombstone supersedes
    /// (and any superseded record) below `clean_limit`. The caller sets it so that a
    /// tombstone goes only once every other copy of the log holds it: vdl gives 1 + the
    /// highest index every replica of the group holds durably, on the group's leader, and 0
    /// on a follower (no tombstone removed: a replica that was away and still holds an older
    /// value of the key then gets the tombstone, so the deleted key never comes back there).
    /// `u64::MAX`: no bound (a log with no other copy). The store compares record offsets:
    /// the source turns it into the first offset of the entry at this index.
    pub tombstone_limit: u64,
    /// Memory of the key map, bytes ([`KEY_MAP_SLOT_BYTES`] per slot).
    pub key_map_bytes: usize,
}

/// What a compaction pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Segment bytes read (map building and rewriting).
    pub bytes_read: u64,
    /// Bytes of rewritten segment files written.
    pub bytes_written: u64,
    /// Records removed.
    pub records_removed: u64,
    /// Segments replaced by a rewritten file.
    pub segments_rewritten: usize,
    /// Segments read for rewriting, rewritten or not (nothing to remove: left as they were).
    pub segments_cleaned: usize,
    /// The first offset not covered by the clean part of the log after this pass (saved in
    /// the checkpoint); the next pass's map starts here.
    pub first_dirty_offset: u64,
}
