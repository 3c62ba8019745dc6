//! The public [`LogStore`]: the struct, opening and closing it, and what it reports about
//! itself. Each kind of operation has a file of its own: `open.rs` (open, close, the active
//! segment's format upgrade), `append.rs` (the append path, rolling), `sync.rs` (making appends
//! durable), `truncate.rs` (suffix truncation, snapshot install), `retention.rs` (deleting the
//! front, the records floor), `state.rs` (hard state, configuration state), `damage.rs`
//! (damage notes and repair), `read_index.rs` (reads by Raft index) and `read_records.rs`
//! (reads by Kafka offset).

mod append;
mod damage;
mod open;
mod read_index;
mod read_records;
mod retention;
mod state;
mod sync;
mod truncate;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use crate::cache::StoreCache;
use crate::config::StoreConfig;
use crate::error::{LogStoreError, Result};
use crate::hard_state::{ConfState, HardState};
use crate::open_segments::OpenSegments;
use crate::recovery::RecoveryReport;
use crate::repair::RepairMarker;
use crate::reserve::ZeroReserve;
use crate::root_lock::StoreLock;
use crate::segment::Segment;

pub use append::AppendResult;
pub use read_records::RecordsRead;
pub use sync::PendingSync;

/// Sizes, for monitoring and the memory benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreStats {
    /// Number of segment files.
    pub segments: usize,
    /// Total bytes of segment files.
    pub total_bytes: u64,
    /// Bytes of entries held by this store's cache.
    pub cache_bytes: u64,
    /// Heap bytes of the indexes currently loaded.
    pub index_bytes: u64,
}

/// One segment file as [`LogStore::segment_summaries`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSummary {
    /// Raft index of its first entry.
    pub base_index: u64,
    /// Raft index of its last entry (`base_index - 1` when empty).
    pub last_index: u64,
    /// Kafka offset of its first record (for the oldest segment: the log start offset).
    pub first_offset: u64,
    /// Kafka offset after its last record.
    pub next_offset: u64,
    /// Bytes of the file.
    pub bytes: u64,
    /// Whether it is the active (last, still written) segment.
    pub active: bool,
}

/// One log stream's storage: a directory of segment files with their indexes, the hard
/// state and the configuration state.
///
/// # Durability contract
/// - After [`LogStore::sync`] returns, every entry appended before the call survives a crash
///   (process or power), as do all truncations and deletions that returned before it.
/// - [`LogStore::append`] follows the [`SyncPolicy`](crate::SyncPolicy): under `Always` it
///   returns after the appended entries are durable. [`LogStore::append_unsynced`] never
///   syncs, so many appends can share one `sync` (group commit).
/// - `truncate_suffix`, `install_snapshot`, `delete_prefix`/`apply_retention`,
///   `save_hard_state` and `save_conf_state` are durable when they return.
/// - Rolling to a new segment syncs the old one first (under every policy).
/// - An fsync failure panics (see the crate docs): the process must restart and recover.
/// - Dropping the store does not sync; [`LogStore::close`] does.
///
/// Reads take `&self`; the store is `Send + Sync`, so a lock around it can share it between
/// an appending thread and reading threads.
///
/// # Resources
/// An open store holds its lock (a `LOCK` descriptor, or none under the node's
/// [`crate::RootLock`]), its active segment's descriptor while the node's
/// [`crate::ActiveFiles`] set keeps it open (always while it holds unsynced appends), and one
/// for its zero reserve while it is being written. Sealed segments hold none; they are mapped
/// on demand into the [`OpenSegments`] set of its [`StoreResources`](crate::StoreResources).
/// Its cache is charged to their [`crate::CacheBudget`].
pub struct LogStore {
    pub(crate) dir: PathBuf,
    config: StoreConfig,
    /// Keeps other openers out (its own `LOCK`, or its place under the node's root lock).
    _lock: StoreLock,
    /// Zeroed space ahead of the active segment (see `reserve.rs`).
    reserve: ZeroReserve,
    /// Sorted by base index; never empty; the last one is the active segment.
    pub(crate) segments: Vec<Segment>,
    /// Where sealed segments are kept open (shared with the node's other stores).
    open_segments: Arc<OpenSegments>,
    /// The newest entries (charged to the node's budget; other stores may shrink it).
    pub(crate) cache: Arc<StoreCache>,
    pub(crate) generation: u64,
    synced_len: u64,
    checkpoint_len: u64,
    durable_index: u64,
    last_sync: Instant,
    hard_state: HardState,
    /// Sequence number of the last hard-state save (see `hard_state.rs`).
    hard_state_seq: u64,
    /// Whether the `hardstate` file can be overwritten in place (an intact version-2 file).
    hard_state_in_place: bool,
    conf_state: ConfState,
    /// Sequence number of the last `confstate` save (see `hard_state::save_conf_state`).
    conf_state_seq: u64,
    /// The `confstate` file has two slots: the next save overwrites one in place.
    conf_state_in_place: bool,
    report: RecoveryReport,
    /// Records below this Kafka offset are deleted (DeleteRecords) even where their segment
    /// still exists: not readable, and their segments go at the next retention pass. Kept in
    /// memory only: the caller sets it again after a restart (vdl keeps it in its replicated
    /// metadata).
    records_floor: u64,
    /// The lowest Raft index a read found damaged since the last repair (`u64::MAX`: none).
    /// Reads take `&self`, so they only note it; [`LogStore::repair`] acts on it.
    damaged_from: AtomicU64,
    /// What the log lost to corruption and has not got back (see [`RepairMarker`]).
    repair_marker: Option<RepairMarker>,
    /// Roll the active segment once it is this old (see [`LogStore::set_roll_age`]); in
    /// memory only, set by the caller after opening.
    roll_age: Option<std::time::Duration>,
    /// Why the `hardstate` file could not be read, when it was damaged (the store then
    /// reports the default hard state: the caller must rebuild it, see
    /// [`LogStore::hard_state_damage`]).
    hard_state_damage: Option<String>,
    /// The votes this replica cast are unknown (see [`LogStore::vote_unknown`]).
    vote_unknown: bool,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("dir", &self.dir)
            .field("first_index", &self.first_index())
            .field("last_index", &self.last_index())
            .field("next_offset", &self.next_offset())
            .finish()
    }
}
impl LogStore {
    /// The sealed segments (all but the active one), oldest first.
    pub(crate) fn sealed_segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments[..self.segments.len() - 1].iter()
    }

    fn active(&self) -> &Segment {
        self.segments
            .last()
            .expect("a store always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .last_mut()
            .expect("a store always has an active segment")
    }

    /// The directory of this log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// What recovery did when the store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// First Raft index stored (`last_index() + 1` when the log is empty).
    pub fn first_index(&self) -> u64 {
        self.segments[0].header.base_index
    }

    /// Last Raft index stored (`first_index() - 1` when the log is empty).
    pub fn last_index(&self) -> u64 {
        self.active().last_index
    }

    /// Term of the last entry (of `first_index() - 1` when the log is empty).
    pub fn last_term(&self) -> u64 {
        self.active().last_term
    }

    /// The offset the next record will get (the log end offset).
    pub fn next_offset(&self) -> u64 {
        self.active().next_offset
    }

    /// The first Kafka offset still stored.
    pub fn log_start_offset(&self) -> u64 {
        self.segments[0].header.base_offset
    }

    /// The first Kafka offset readers may see: the log start offset, or the records floor set
    /// by [`LogStore::raise_records_floor`] when that is higher (Kafka's log start offset).
    pub fn first_readable_offset(&self) -> u64 {
        self.log_start_offset().max(self.records_floor)
    }

    /// Changes the size at which the active segment rolls (a topic's `segment.bytes` changed);
    /// the current active segment rolls by the new size too. At least 1024 bytes.
    pub fn set_segment_bytes(&mut self, segment_bytes: u64) {
        self.config.segment_bytes = segment_bytes.max(1024);
    }

    /// Sets the age at which the writer's [`LogStore::roll_if_older_than`] calls roll the
    /// active segment (a topic's `segment.ms`); `None`: never by age. The store only keeps it
    /// for its writer ([`LogStore::roll_age`]).
    pub fn set_roll_age(&mut self, age: Option<std::time::Duration>) {
        self.roll_age = age;
    }

    /// The age set by [`LogStore::set_roll_age`].
    pub fn roll_age(&self) -> Option<std::time::Duration> {
        self.roll_age
    }

    /// The highest index known durable (everything up to it survives a crash).
    pub fn durable_index(&self) -> u64 {
        self.durable_index
    }

    /// Sizes of the store.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            segments: self.segments.len(),
            total_bytes: self.segments.iter().map(|s| s.len).sum(),
            cache_bytes: self.cache.bytes(),
            index_bytes: self
                .segments
                .iter()
                .map(|s| s.index_heap_bytes() as u64)
                .sum(),
        }
    }

    /// Number of segment files (cheap: for noticing a roll).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Every segment file, oldest first, with the Raft indexes and Kafka offsets it holds
    /// (the last one is the active segment, still written to).
    pub fn segment_summaries(&self) -> Vec<SegmentSummary> {
        let mut first_offset = self.log_start_offset();
        let count = self.segments.len();
        self.segments
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let summary = SegmentSummary {
                    base_index: s.header.base_index,
                    last_index: s.last_index,
                    first_offset,
                    next_offset: s.next_offset,
                    bytes: s.len,
                    active: i + 1 == count,
                };
                first_offset = s.next_offset;
                summary
            })
            .collect()
    }

    fn segment_for_index(&self, index: u64) -> usize {
        let i = self
            .segments
            .partition_point(|s| s.header.base_index <= index);
        debug_assert!(i > 0, "index below the first segment");
        i.saturating_sub(1)
    }

    fn check_index(&self, index: u64) -> Result<()> {
        if index < self.first_index() {
            return Err(LogStoreError::Compacted {
                index,
                first_index: self.first_index(),
            });
        }
        if index > self.last_index() {
            return Err(LogStoreError::Unavailable {
                index,
                last_index: self.last_index(),
            });
        }
        Ok(())
    }
}
