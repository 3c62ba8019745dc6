//! Segmented log storage for replicated log streams. No networking, no Raft library types.
//!
//! A [`LogStore`] is one directory holding one log stream: the Raft log and the Kafka record
//! batches in the same entries, written once. Terms and indexes are plain integers so the
//! store can be tested, benchmarked and embedded on its own.
//!
//! - **Segments** (`<first index, 20 digits>.log`) hold entry frames back to back, each
//!   with a length and a CRC-32C. The active segment rolls at `segment_bytes`.
//! - **Indexes** (`<first index>.index`): sparse Raft index -> position, Kafka offset ->
//!   position, and max timestamp -> offset. Derived data, written lazily, rebuilt when
//!   missing or inconsistent.
//! - **Offsets**: only [`EntryKind::Records`] entries take Kafka offsets; the store assigns
//!   them on append (so all replicas agree) and writes them into the batches' baseOffset.
//! - **Cache**: the newest entries stay in memory and serve both Raft reads and consumer
//!   reads without touching the disk. Bounded per store (`cache_bytes`) and by a
//!   [`CacheBudget`] shared by the stores of a node ([`StoreResources`]); a read that misses
//!   it reads the disk.
//! - **Open files**: the active segment's descriptor is kept in a node-wide bounded set
//!   ([`ActiveFiles`]) that closes idle stores' descriptors once synced and reopens them on
//!   use; sealed segments are memory-mapped on demand and at most [`OpenSegments::capacity`]
//!   of them stay mapped per node (no file descriptor is kept for them).
//! - **Durability**: see [`LogStore`] and [`SyncPolicy`]. An fsync failure panics: after a
//!   failed fsync the kernel may have dropped the dirty pages and cleared the error, so
//!   continuing could acknowledge lost data (PostgreSQL "fsyncgate"). Restart and recover.
//! - **Recovery** on open scans only the tail after the last checkpoint, truncates a torn
//!   tail (everything past the last completed sync from the first bad frame on), rebuilds bad
//!   indexes, and cuts damaged synced data after writing a repair marker ([`RepairMarker`]).
//!   See `README.md` of the crate for the on-disk format.
//! - **Compaction** ([`LogStore::compact`], Kafka's `cleanup.policy=compact`): rewrites sealed
//!   segments below a caller-given Raft index keeping the latest record of every key; every
//!   entry keeps its index, term and offsets (only payloads shrink), so the Raft log stays
//!   whole. The record format is the caller's ([`RecordCompactor`]).

mod active_files;
mod batch;
mod budget;
mod cache;
pub mod clock;
mod compaction;
mod config;
mod entry;
mod error;
pub mod fs;
mod fsutil;
mod hard_state;
mod index;
mod open_segments;
mod recovery;
mod repair;
mod reserve;
mod resources;
mod retention;
mod root_lock;
mod scrub;
mod segment;
mod store;

pub use active_files::{ActiveFiles, DEFAULT_MAX_OPEN_ACTIVE_FILES};
pub use budget::CacheBudget;
pub use compaction::{
    AbortedRange, CleanerStats, CompactionPlan, CompactionReport, CompactionSource, KeyMap,
    KeyMapFull, PreparedCompaction, RecordCompactor, RecordView, RetainOutcome, TxnBatch,
    KEY_MAP_SLOT_BYTES, MAX_PRODUCERS_MAPPED,
};
pub use config::{RetentionPolicy, StoreConfig, SyncPolicy, MAX_ENTRY_BYTES_LIMIT};
pub use entry::{Entry, EntryKind, NewEntry};
pub use error::{LogStoreError, Result};
pub use fs::{install_file_system, simulate_power_cut, FaultInjectingFs, FileSystem, RealFs};
pub use fsutil::atomic_write;
pub use hard_state::{ConfState, HardState};
pub use open_segments::{OpenSegments, DEFAULT_MAX_OPEN_SEGMENT_FILES};
pub use recovery::{DamageFound, RecoveryReport};
pub use repair::RepairMarker;
pub use reserve::{open_reserve_handles, MAX_OPEN_RESERVE_HANDLES};
pub use resources::StoreResources;
pub use retention::RetentionOutcome;
pub use root_lock::{RootLock, ROOT_LOCK_FILE};
pub use scrub::{ScrubOutcome, ScrubTarget, SCRUB_STEP_BYTES};
pub use store::{AppendResult, LogStore, PendingSync, RecordsRead, SegmentSummary, StoreStats};

/// Checks `payload` as [`LogStore::append`] checks a [`EntryKind::Records`] entry's payload (a
/// whole number, at least one, of magic-2 record batches with non-negative lastOffsetDelta)
/// and returns the number of offsets it takes; `Err` says what is wrong. Never panics.
pub fn records_offset_count(payload: &[u8]) -> std::result::Result<u64, String> {
    let infos = batch::walk(payload).map_err(|(at, reason)| format!("at byte {at}: {reason}"))?;
    Ok(infos.iter().map(|b| u64::from(b.offset_count)).sum())
}

/// Size of the fixed part of an entry frame on disk (what [`Entry::size`] adds to payload
/// and context).
pub const ENTRY_OVERHEAD_BYTES: usize = entry::FRAME_HEADER_LEN;
