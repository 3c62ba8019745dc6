//! The public [`LogStore`].

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::batch;
use crate::cache::StoreCache;
use crate::config::{StoreConfig, SyncPolicy};
use crate::entry::FRAME_HEADER_LEN;
use crate::entry::{
    encode_frame, encode_sync_lag, entry_from_frame, Entry, EntryKind, FrameMeta, NewEntry,
};
use crate::error::{corruption, io_err, LogStoreError, Result};
use crate::fsutil::{fdatasync, fsync_dir, lock_dir, remove_if_exists};
use crate::hard_state::{self, ConfState, HardState};
use crate::index::write_index_file;
use crate::open_segments::{OpenSegments, DEFAULT_MAX_OPEN_SEGMENT_FILES};
use crate::recovery::{recover, scan, RecoveryReport};
use crate::repair::{self, RepairMarker};
use crate::reserve::ZeroReserve;
use crate::resources::StoreResources;
use crate::retention::{segments_to_delete, RetentionOutcome, SegmentInfo};
use crate::segment::{
    create_segment_file, now_ms, open_rw, Segment, SegmentHeader, SEGMENT_HEADER_LEN,
};

/// An fsync to run outside the store (see [`LogStore::prepare_sync`]).
#[derive(Debug)]
pub struct PendingSync {
    file: Arc<std::fs::File>,
    path: std::path::PathBuf,
    base_index: u64,
    len: u64,
    last_index: u64,
}

impl PendingSync {
    /// fdatasyncs the segment. Panics when the fsync fails: after a failed fsync the page
    /// cache's state is unknown and acknowledging anything could lose it (see the crate docs).
    pub fn run(&self) {
        fdatasync(&self.file, &self.path);
    }

    /// The last Raft index this sync makes durable.
    pub fn last_index(&self) -> u64 {
        self.last_index
    }
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    /// Last Raft index after the append.
    pub last_index: u64,
    /// Next Kafka offset after the append.
    pub next_offset: u64,
    /// Whether everything appended so far was durable when the call returned.
    pub durable: bool,
}

/// Whole record batches read for a consumer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordsRead {
    /// Batches, in offset order, as zero-copy slices (of the cache, of a memory-mapped sealed
    /// segment, or of one read buffer for the active segment). Consecutive batches of one
    /// entry share a chunk. Concatenated, they form a valid Kafka `records` field.
    pub chunks: Vec<Bytes>,
    /// Base offset of the first returned batch (it may be below the requested offset: the
    /// batch holding the requested offset is returned whole). `None` when nothing returned.
    pub first_batch_offset: Option<u64>,
    /// Offset after the last returned batch (the requested offset when nothing returned).
    pub next_offset: u64,
    /// Total bytes in `chunks`.
    pub bytes: u64,
}

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
/// - [`LogStore::append`] follows the [`SyncPolicy`]: under `Always` it returns after the
///   appended entries are durable. [`LogStore::append_unsynced`] never syncs, so many appends
///   can share one `sync` (group commit).
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
/// An open store holds two file descriptors (the directory lock and the active segment),
/// plus one for its zero reserve while it is being written. Sealed segments hold none; they
/// are mapped on demand into the [`OpenSegments`] set of its [`StoreResources`]. Its cache is
/// charged to their [`crate::CacheBudget`].
pub struct LogStore {
    dir: PathBuf,
    config: StoreConfig,
    _lock: File,
    /// Zeroed space ahead of the active segment (see `reserve.rs`).
    reserve: ZeroReserve,
    /// Sorted by base index; never empty; the last one is the active segment.
    segments: Vec<Segment>,
    /// Where sealed segments are kept open (shared with the node's other stores).
    open_segments: Arc<OpenSegments>,
    /// The newest entries (charged to the node's budget; other stores may shrink it).
    cache: Arc<StoreCache>,
    generation: u64,
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
    /// Opens the log in `dir` (creating the directory and an empty log when missing),
    /// recovering from any crash as described in the crate docs. Fails on corruption of
    /// synced data, on files of a newer format, and when another store holds the directory.
    /// The store gets resources of its own: a cache budget of `config.cache_bytes` and at
    /// most [`DEFAULT_MAX_OPEN_SEGMENT_FILES`] open sealed segments. A process opening many
    /// stores should share one [`StoreResources`] with [`LogStore::open_shared`].
    pub fn open(dir: &Path, config: StoreConfig) -> Result<LogStore> {
        let resources =
            StoreResources::new(config.cache_bytes as u64, DEFAULT_MAX_OPEN_SEGMENT_FILES);
        LogStore::open_shared(dir, config, &resources)
    }

    /// Like [`LogStore::open`], with the tail cache charged to `resources.cache_budget` and
    /// sealed segments kept open in `resources.open_segments`, both shared with every other
    /// store opened with the same resources.
    pub fn open_shared(
        dir: &Path,
        config: StoreConfig,
        resources: &StoreResources,
    ) -> Result<LogStore> {
        config.validate().map_err(LogStoreError::InvalidArgument)?;
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fsync_dir(parent)?;
            }
        }
        let lock = lock_dir(dir)?;
        // Retention's clock is anchored before any wall-clock jump can make data look old.
        crate::clock::anchor_retention_clock();
        // A damaged hard state is reported, not guessed: the store starts with the default
        // (term 0, no vote) and the caller decides how to rebuild it (vdl: from its peers).
        let (loaded_hard_state, hard_state_damage) = match hard_state::load_hard_state(dir) {
            Ok(loaded) => (loaded, None),
            Err(e @ LogStoreError::Corruption { .. }) => {
                (hard_state::LoadedHardState::default(), Some(e.to_string()))
            }
            Err(e) => return Err(e),
        };
        // A lost vote stays lost until the caller rebuilt it (`clear_vote_unknown`), across
        // restarts: the next saved hard state no longer looks damaged.
        let vote_unknown_path = dir.join(hard_state::VOTE_UNKNOWN_FILE);
        let vote_unknown = hard_state_damage.is_some() || vote_unknown_path.exists();
        if hard_state_damage.is_some() && !vote_unknown_path.exists() {
            crate::fsutil::atomic_write(dir, hard_state::VOTE_UNKNOWN_FILE, b"")?;
        }
        let loaded_conf_state = hard_state::load_conf_state(dir)?;
        // Recovery treats a bad frame holding a committed entry as damage (a damaged hard
        // state tells no commit: 0).
        let saved_commit = loaded_hard_state.state.commit;
        let rec = recover(dir, &config, &resources.open_segments, saved_commit)?;
        let repair_marker = repair::load(dir)?;
        let active = rec
            .segments
            .last()
            .expect("recovery returns at least one segment");
        let synced_len = active.len;
        let checkpoint_len = if rec.report.tail_bytes_scanned >= config.checkpoint_bytes {
            active.len
        } else {
            active.len - rec.report.tail_bytes_scanned.min(active.len)
        };
        let durable_index = active.last_index;
        let reserve = ZeroReserve::new(config.preallocate_bytes, config.preallocate_idle_release);
        // Recovery keeps an all-zero tail (reserve left by the previous run).
        let file_len = active
            .active_file()
            .metadata()
            .map_err(io_err(&active.path))?
            .len();
        reserve.attach(&active.path, active.len, file_len, config.segment_bytes);
        let mut store = LogStore {
            dir: dir.to_path_buf(),
            cache: StoreCache::new(&resources.cache_budget, config.cache_bytes as u64),
            open_segments: Arc::clone(&resources.open_segments),
            config,
            _lock: lock,
            reserve,
            segments: rec.segments,
            generation: rec.generation,
            synced_len,
            checkpoint_len,
            durable_index,
            last_sync: Instant::now(),
            hard_state: loaded_hard_state.state,
            hard_state_seq: loaded_hard_state.seq,
            hard_state_in_place: loaded_hard_state.in_place,
            conf_state: loaded_conf_state.state,
            conf_state_seq: loaded_conf_state.seq,
            conf_state_in_place: loaded_conf_state.in_place,
            report: rec.report,
            records_floor: 0,
            damaged_from: AtomicU64::new(u64::MAX),
            repair_marker,
            hard_state_damage,
            vote_unknown,
        };
        store.upgrade_active_segment();
        Ok(store)
    }

    /// Makes the active segment a version-2 one when it is a version-1 segment (written by an
    /// older build, or made active again by a truncation into it), so that appends from now
    /// on record their sync lag (see `recovery.rs`; a version-1 tail has only the old rule):
    /// a non-empty one is sealed (a roll), an empty one is replaced by an empty version-2
    /// file with the same header fields. Best effort: when that fails (a full disk), the
    /// version-1 segment stays active until it rolls, as before this format existed.
    fn upgrade_active_segment(&mut self) {
        if self.active().header.has_sync_lag() {
            return;
        }
        let _ = if self.active().is_empty() {
            self.replace_empty_active()
        } else {
            self.roll()
        };
    }

    /// Replaces the empty active segment by a new file holding only its header, in the
    /// current format version (atomically: temp file, fsync, rename, fsync directory).
    fn replace_empty_active(&mut self) -> Result<()> {
        debug_assert!(self.active().is_empty());
        self.reserve.detach();
        let old = self.active().header;
        let header = SegmentHeader::new(
            old.base_index,
            old.base_offset,
            old.prev_term,
            old.generation,
            old.created_ms,
        );
        let created = create_segment_file(&self.dir, &header).map(|(path, file)| {
            *self.active_mut() =
                Segment::new_empty(header, path, file, &self.dir, &self.open_segments);
            self.synced_len = SEGMENT_HEADER_LEN;
            self.checkpoint_len = 0;
        });
        self.attach_reserve_to_active()?;
        created
    }

    /// Attaches the reserve to the active segment as its file is now (zeros after the data
    /// included).
    fn attach_reserve_to_active(&self) -> Result<()> {
        let active = self.active();
        let file_len = active
            .active_file()
            .metadata()
            .map_err(io_err(&active.path))?
            .len();
        self.reserve.attach(
            &active.path,
            active.len,
            file_len,
            self.config.segment_bytes,
        );
        Ok(())
    }

    /// Syncs, writes the active segment's checkpoint (so the next open scans nothing) and
    /// closes the store.
    pub fn close(mut self) -> Result<()> {
        self.sync()?;
        self.reserve.detach();
        self.trim_active()?;
        let active = self.active();
        let idx = active.indexes(self.config.index_interval_bytes)?;
        let _ = write_index_file(&active.index_path, &active.summary(), &idx);
        Ok(())
    }

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

    /// Deletes the records below `offset` as far as readers are concerned (Kafka's
    /// DeleteRecords): reads below it fail with [`LogStoreError::OffsetOutOfRange`] and
    /// [`LogStore::apply_retention`] removes the segments lying wholly below it. Never lowers
    /// the floor. Not persisted (see the field).
    pub fn raise_records_floor(&mut self, offset: u64) {
        self.records_floor = self.records_floor.max(offset);
    }

    /// Changes the retention policy (a topic's retention configs changed); the next
    /// [`LogStore::apply_retention`] follows it.
    pub fn set_retention(&mut self, policy: crate::RetentionPolicy) {
        self.config.retention = policy;
    }

    /// Changes the size at which the active segment rolls (a topic's `segment.bytes` changed);
    /// the current active segment rolls by the new size too. At least 1024 bytes.
    pub fn set_segment_bytes(&mut self, segment_bytes: u64) {
        self.config.segment_bytes = segment_bytes.max(1024);
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

    // ----------------------------------------------------------------------------------
    // Writing

    /// Appends entries (indexes `last_index()+1, +2, ...`) in one write, then syncs if the
    /// [`SyncPolicy`] says so: under `Always`, the entries are durable when this returns.
    /// On error nothing was appended. Records payloads get their offsets assigned here.
    pub fn append(&mut self, entries: &[NewEntry]) -> Result<AppendResult> {
        self.append_unsynced(entries)?;
        match self.config.sync_policy {
            SyncPolicy::Always => self.sync()?,
            SyncPolicy::Interval(_) => self.sync_if_due()?,
            SyncPolicy::Never => {}
        }
        Ok(self.append_result())
    }

    /// Like [`LogStore::append`], but when the first entry's index is already in the log,
    /// first truncates the log from there (raft-rs semantics: new entries replace the
    /// conflicting suffix).
    pub fn append_replacing(&mut self, entries: &[NewEntry]) -> Result<AppendResult> {
        if let Some(first) = entries.first() {
            if first.index <= self.last_index() {
                self.truncate_suffix(first.index)?;
            }
        }
        self.append(entries)
    }

    fn append_result(&self) -> AppendResult {
        AppendResult {
            last_index: self.last_index(),
            next_offset: self.next_offset(),
            durable: self.durable_index == self.last_index(),
        }
    }

    /// Appends entries in one write without syncing (whatever the policy). They are
    /// readable at once and durable after the next [`LogStore::sync`]. On error nothing was
    /// appended.
    pub fn append_unsynced(&mut self, entries: &[NewEntry]) -> Result<AppendResult> {
        if entries.is_empty() {
            return Ok(self.append_result());
        }
        let cfg = &self.config;
        // Validate everything before writing anything.
        let mut prev_term = self.last_term();
        let mut total: u64 = 0;
        let mut batches: Vec<Option<Vec<batch::BatchInfo>>> = Vec::with_capacity(entries.len());
        for (expected, e) in (self.last_index() + 1..).zip(entries) {
            if e.index != expected {
                return Err(LogStoreError::NonContiguous {
                    expected,
                    got: e.index,
                });
            }
            if e.term < prev_term {
                return Err(LogStoreError::TermRegression {
                    index: e.index,
                    term: e.term,
                    prev_term,
                });
            }
            let size = (e.payload.len() + e.context.len()) as u64;
            if size > cfg.max_entry_bytes {
                return Err(LogStoreError::EntryTooLarge {
                    index: e.index,
                    size,
                    limit: cfg.max_entry_bytes,
                });
            }
            if e.kind == EntryKind::Records {
                let infos = batch::walk(&e.payload).map_err(|(at, reason)| {
                    LogStoreError::InvalidRecords {
                        index: e.index,
                        at,
                        reason,
                    }
                })?;
                let count: u64 = infos.iter().map(|b| u64::from(b.offset_count)).sum();
                if count > u64::from(u32::MAX) {
                    return Err(LogStoreError::InvalidRecords {
                        index: e.index,
                        at: 0,
                        reason: format!("{count} offsets in one entry"),
                    });
                }
                batches.push(Some(infos));
            } else {
                batches.push(None);
            }
            total += FRAME_HEADER_LEN as u64 + size;
            prev_term = e.term;
        }
        if entries.len() > cfg.max_batch_entries || total > cfg.max_batch_bytes {
            return Err(LogStoreError::BatchTooLarge {
                entries: entries.len(),
                bytes: total,
            });
        }
        let active_len = self.active().len;
        if active_len > SEGMENT_HEADER_LEN && active_len + total > self.config.segment_bytes {
            self.roll()?;
        }

        // Encode all frames into one buffer: one write per append batch.
        let mut buf = Vec::with_capacity(total as usize);
        let mut next_offset = self.next_offset();
        let sync_lags = SyncLags::for_append(self.active(), self.synced_len);
        let mut metas = Vec::with_capacity(entries.len());
        for (e, infos) in entries.iter().zip(&batches) {
            let (count, max_ts) = match infos {
                Some(infos) => (
                    infos.iter().map(|b| b.offset_count).sum::<u32>(),
                    infos.iter().map(|b| b.max_timestamp).max().unwrap_or(-1),
                ),
                None => (0, -1),
            };
            let m = FrameMeta {
                index: e.index,
                term: e.term,
                kind: e.kind,
                sync_lag: sync_lags.at(buf.len() as u64),
                first_offset: next_offset,
                record_count: count,
                max_timestamp: max_ts,
            };
            let start = buf.len();
            encode_frame(&mut buf, &m, &e.context, &e.payload, |p| {
                if let Some(infos) = infos {
                    let mut o = m.first_offset;
                    for b in infos {
                        batch::set_base_offset(p, b.pos, o);
                        o += u64::from(b.offset_count);
                    }
                }
            });
            next_offset += u64::from(count);
            metas.push((m, start, e.context.len(), e.payload.len()));
        }
        debug_assert_eq!(buf.len() as u64, total);

        let interval = self.config.index_interval_bytes;
        let active = self
            .segments
            .last_mut()
            .expect("a store always has an active segment");
        let pos0 = active.len;
        debug_assert_eq!(pos0, sync_lags.append_pos);
        let written = self.reserve.write_below(pos0 + total, || {
            crate::fs::fs().write_all_at(active.active_file(), &active.path, &buf, pos0)
        });
        if let Err(e) = written {
            // Best effort: remove a partial write so the next append starts clean. Recovery
            // would cut it anyway (it cannot be a valid continuation of the log).
            self.reserve.detach();
            let _ = active.active_file().set_len(pos0);
            let limit = self.config.segment_bytes;
            self.reserve.attach(&active.path, pos0, pos0, limit);
            return Err(io_err(&active.path)(e));
        }
        let bytes = Bytes::from(buf);
        for (m, start, ctx_len, payload_len) in &metas {
            let abs = pos0 + *start as u64;
            let records =
                (m.kind == EntryKind::Records).then_some((m.first_offset, m.max_timestamp));
            active
                .indexes_mut()
                .on_append(m.index, abs, records, interval);
            if records.is_some() {
                active.max_timestamp = active.max_timestamp.max(m.max_timestamp);
            }
            active.last_entry_pos = abs;
            let ctx_start = start + FRAME_HEADER_LEN;
            let end = ctx_start + ctx_len + payload_len;
            self.cache.push(Entry {
                index: m.index,
                term: m.term,
                kind: m.kind,
                context: bytes.slice(ctx_start..ctx_start + ctx_len),
                payload: bytes.slice(ctx_start + ctx_len..end),
                first_offset: m.first_offset,
                record_count: m.record_count,
            });
        }
        let last = metas
            .last()
            .map(|(m, ..)| *m)
            .expect("entries is not empty");
        assert!(last.index > active.last_index, "log indexes must ascend");
        assert!(
            next_offset >= active.next_offset,
            "offsets must not go back"
        );
        active.len = pos0 + total;
        active.last_index = last.index;
        active.last_term = last.term;
        active.next_offset = next_offset;
        Ok(self.append_result())
    }

    /// Makes everything appended so far durable (fdatasync of the active segment; earlier
    /// segments were synced when they were sealed). Writes a checkpoint when the active
    /// segment grew by `checkpoint_bytes` since the last one. Panics if fdatasync fails.
    pub fn sync(&mut self) -> Result<()> {
        match self.prepare_sync()? {
            Some(pending) => {
                pending.run();
                self.complete_sync(pending)
            }
            None => self.complete_sync_at(self.active().len, self.active().last_index),
        }
    }

    /// The first half of a [`LogStore::sync`] that can run without holding the store: returns
    /// what to fdatasync (a shared handle on the active segment and the length and index it
    /// covers), or `None` when everything appended is already durable. Run it with
    /// [`PendingSync::run`] (no access to the store needed, so readers are not blocked during
    /// the fsync), then call [`LogStore::complete_sync`]. No other write may happen in between.
    pub fn prepare_sync(&self) -> Result<Option<PendingSync>> {
        let active = self.active();
        if self.synced_len >= active.len {
            return Ok(None);
        }
        let file = active.active_file_shared();
        Ok(Some(PendingSync {
            file,
            path: active.path.clone(),
            base_index: active.header.base_index,
            len: active.len,
            last_index: active.last_index,
        }))
    }

    /// The sync the [`SyncPolicy`] asks for now, prepared as [`LogStore::prepare_sync`] does
    /// (run it, then [`LogStore::complete_sync`]): under `Always`, whatever is not durable
    /// yet; under `Interval(d)`, the same once `d` has passed since the last sync, else
    /// `None`; under `Never`, `None`. For a caller that appends with
    /// [`LogStore::append_unsynced`] and fsyncs outside the store's lock (the server's Raft
    /// groups): the policy is decided here, and only here.
    pub fn prepare_due_sync(&self) -> Result<Option<PendingSync>> {
        match self.config.sync_policy {
            SyncPolicy::Always => self.prepare_sync(),
            SyncPolicy::Interval(d) if self.last_sync.elapsed() >= d => self.prepare_sync(),
            SyncPolicy::Interval(_) | SyncPolicy::Never => Ok(None),
        }
    }

    /// When [`LogStore::prepare_due_sync`] will next return a sync, given no more appends:
    /// `None` when everything appended is durable or under `Never`; under `Interval(d)`, the
    /// last sync plus `d`; under `Always`, now. A caller wakes by then, so the last appends
    /// of a burst become durable within one interval even when no append follows.
    pub fn sync_due_at(&self) -> Option<Instant> {
        if self.synced_len >= self.active().len {
            return None;
        }
        match self.config.sync_policy {
            SyncPolicy::Always => Some(Instant::now()),
            SyncPolicy::Interval(d) => Some(self.last_sync + d),
            SyncPolicy::Never => None,
        }
    }

    /// Records that `pending` ran: everything up to its length is durable.
    pub fn complete_sync(&mut self, pending: PendingSync) -> Result<()> {
        let active = self.active();
        assert_eq!(
            active.header.base_index, pending.base_index,
            "the active segment changed between prepare_sync and complete_sync"
        );
        assert!(
            pending.len <= active.len,
            "the log shrank between prepare_sync and complete_sync"
        );
        self.complete_sync_at(pending.len, pending.last_index)
    }

    fn complete_sync_at(&mut self, len: u64, last_index: u64) -> Result<()> {
        let interval = self.config.index_interval_bytes;
        let checkpoint_bytes = self.config.checkpoint_bytes;
        self.synced_len = len;
        self.durable_index = last_index;
        self.last_sync = Instant::now();
        if len - self.checkpoint_len.min(len) >= checkpoint_bytes {
            let active = self.active();
            let idx = active.indexes(interval)?;
            // Derived data: a failed write only means a longer scan at the next open.
            if write_index_file(&active.index_path, &active.summary(), &idx).is_ok() {
                self.checkpoint_len = len;
            }
        }
        Ok(())
    }

    /// Under [`SyncPolicy::Interval`], syncs if the interval has passed since the last sync
    /// (call it from a timer). Under the other policies it does nothing.
    pub fn sync_if_due(&mut self) -> Result<()> {
        if let SyncPolicy::Interval(d) = self.config.sync_policy {
            if self.durable_index != self.last_index() && self.last_sync.elapsed() >= d {
                self.sync()?;
            }
        }
        Ok(())
    }

    /// Seals the active segment (fdatasync, index file) and starts a new one. The new
    /// segment's file is created before the old one is sealed: when that fails (a full
    /// disk), the old segment stays active and the store is as before (the error is the
    /// append's).
    fn roll(&mut self) -> Result<()> {
        let interval = self.config.index_interval_bytes;
        let generation = self.generation;
        let synced_len = self.synced_len;
        let segment_bytes = self.config.segment_bytes;
        self.reserve.detach();
        let trimmed = self.trim_active()?;
        let active = self.active();
        if synced_len < active.len && !trimmed {
            fdatasync(active.active_file(), &active.path);
        }
        let s = active.summary();
        let idx = active.indexes(interval)?;
        let header = SegmentHeader::new(
            s.last_index + 1,
            s.next_offset,
            s.last_term,
            generation,
            now_ms(),
        );
        let (path, file) = match create_segment_file(&self.dir, &header) {
            Ok(created) => created,
            Err(e) => {
                // Still the active segment (trimmed to its data): reserve for it again.
                self.reserve
                    .attach(&active.path, active.len, active.len, segment_bytes);
                return Err(e);
            }
        };
        let active = self.active_mut();
        let _ = write_index_file(&active.index_path, &s, &idx);
        active.seal();
        self.reserve.attach(
            &path,
            SEGMENT_HEADER_LEN,
            SEGMENT_HEADER_LEN,
            self.config.segment_bytes,
        );
        self.segments.push(Segment::new_empty(
            header,
            path,
            file,
            &self.dir,
            &self.open_segments,
        ));
        self.synced_len = SEGMENT_HEADER_LEN;
        self.checkpoint_len = 0;
        self.durable_index = s.last_index;
        Ok(())
    }

    /// Cuts the reserve's zeros off the active segment (the reserve must be detached) and
    /// makes the cut durable; returns whether there was anything to cut. Sealed segments
    /// end exactly at their last frame, which recovery relies on.
    fn trim_active(&mut self) -> Result<bool> {
        let active = self.active();
        let file = active.active_file();
        let file_len = file.metadata().map_err(io_err(&active.path))?.len();
        assert!(file_len >= active.len, "the active segment lost data");
        if file_len == active.len {
            return Ok(false);
        }
        file.set_len(active.len).map_err(io_err(&active.path))?;
        // fdatasync covers the new size (and any data appended before it).
        fdatasync(file, &active.path);
        let len = active.len;
        let last_index = active.last_index;
        self.synced_len = self.synced_len.max(len);
        self.durable_index = self.durable_index.max(last_index);
        Ok(true)
    }

    /// Removes entries `from_index..=last_index()` (conflicting entries, raft-rs semantics).
    /// Durable when it returns. `from_index > last_index()` does nothing; below
    /// `first_index()` is an error.
    pub fn truncate_suffix(&mut self, from_index: u64) -> Result<()> {
        if from_index > self.last_index() {
            return Ok(());
        }
        if from_index < self.first_index() {
            return Err(LogStoreError::Compacted {
                index: from_index,
                first_index: self.first_index(),
            });
        }
        let interval = self.config.index_interval_bytes;
        let k = self.segment_for_index(from_index);
        let seg = &self.segments[k];
        let (pos, h) = seg.locate_index(from_index, interval)?;
        let new_next_offset = h.first_offset;
        let (new_last_term, new_last_pos) = if from_index == seg.header.base_index {
            (seg.header.prev_term, 0)
        } else {
            let (p, hh) = seg.locate_index(from_index - 1, interval)?;
            (hh.term, p)
        };
        let mut idx = (*seg.indexes(interval)?).clone();
        idx.truncate(pos, new_next_offset);
        // Exact max timestamp of what remains: the time index bounds everything before the
        // last offset-index entry; scan from there.
        let mut max_ts = idx.time.last().map_or(i64::MIN, |&(t, _)| t);
        let mut p = idx.offset.last().map_or(SEGMENT_HEADER_LEN, |&(_, p)| p);
        while p < pos {
            let hh = seg.read_frame_header(p)?;
            if hh.kind == EntryKind::Records {
                max_ts = max_ts.max(hh.max_timestamp);
            }
            p += hh.total_len();
        }
        idx.max_timestamp = max_ts;
        // The one step that needs new disk space goes first, so a full disk fails the
        // truncation with nothing changed (the caller retries once space returns): a sealed
        // segment is never truncated in place (readers may hold slices of its map), its kept
        // prefix is copied to a temp file that replaces it below.
        let prefix_copy = if seg.sealed() {
            let tmp = seg.path.with_extension("log.tmp");
            let written = seg.map().and_then(|data| {
                let f = File::create(&tmp).map_err(io_err(&tmp))?;
                crate::fs::fs()
                    .write_all_at(&f, &tmp, &data[..pos as usize], 0)
                    .map_err(io_err(&tmp))?;
                fdatasync(&f, &tmp);
                Ok(())
            });
            if let Err(e) = written {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            Some(tmp)
        } else {
            None
        };

        self.reserve.detach();
        self.cache.truncate_from(from_index);
        // Later segments go first, newest first, so a crash leaves a contiguous prefix.
        while self.segments.len() > k + 1 {
            let s = self.segments.pop().expect("len > k + 1");
            remove_if_exists(&s.index_path)?;
            remove_if_exists(&s.path)?;
        }
        // The index file of the segment being cut would claim entries that no longer exist.
        remove_if_exists(&self.segments[k].index_path)?;
        fsync_dir(&self.dir)?;
        let dir = self.dir.clone();
        let seg = &mut self.segments[k];
        if let Some(tmp) = prefix_copy {
            // The kept prefix, written above, replaces the sealed segment.
            crate::fs::fs()
                .rename(&tmp, &seg.path)
                .map_err(io_err(&seg.path))?;
            fsync_dir(&dir)?;
            seg.reactivate(open_rw(&seg.path)?);
        } else {
            let file = seg.active_file();
            file.set_len(pos).map_err(io_err(&seg.path))?;
            fdatasync(file, &seg.path);
        }
        seg.len = pos;
        seg.last_index = from_index - 1;
        seg.last_term = new_last_term;
        seg.next_offset = new_next_offset;
        seg.last_entry_pos = new_last_pos;
        seg.max_timestamp = max_ts;
        seg.set_indexes(idx);
        self.reserve
            .attach(&seg.path, pos, pos, self.config.segment_bytes);
        self.synced_len = pos;
        self.checkpoint_len = 0;
        self.durable_index = self.durable_index.min(from_index - 1);
        // A truncation into a version-1 segment made it active again.
        self.upgrade_active_segment();
        Ok(())
    }

    /// Discards the whole log and restarts it right after `index` (a Raft snapshot at
    /// `index`/`term` was installed): afterwards `first_index() == index + 1`,
    /// `term(index) == term`, and the next record gets offset `next_offset`. Durable when it
    /// returns; atomic across crashes (recovery drops whichever generation is older).
    pub fn install_snapshot(&mut self, index: u64, term: u64, next_offset: u64) -> Result<()> {
        if index == u64::MAX {
            return Err(LogStoreError::InvalidArgument(
                "snapshot index u64::MAX".into(),
            ));
        }
        self.reserve.detach();
        for s in &self.segments {
            remove_if_exists(&s.index_path)?;
        }
        let generation = self.generation + 1;
        let header = SegmentHeader::new(index + 1, next_offset, term, generation, now_ms());
        // Commit point: the new-generation segment exists durably.
        let (path, file) = create_segment_file(&self.dir, &header)?;
        self.reserve.attach(
            &path,
            SEGMENT_HEADER_LEN,
            SEGMENT_HEADER_LEN,
            self.config.segment_bytes,
        );
        self.generation = generation;
        let old = std::mem::take(&mut self.segments);
        self.segments.push(Segment::new_empty(
            header,
            path.clone(),
            file,
            &self.dir,
            &self.open_segments,
        ));
        for s in old {
            if s.path != path {
                remove_if_exists(&s.path)?;
            }
        }
        fsync_dir(&self.dir)?;
        self.cache.clear();
        self.synced_len = SEGMENT_HEADER_LEN;
        self.checkpoint_len = 0;
        self.durable_index = index;
        Ok(())
    }

    /// Applies the configured [`crate::RetentionPolicy`]: deletes whole sealed segments from
    /// the front, never the active one, never one holding an index >= `floor_index`.
    /// Returns [`LogStoreError::DeletionForbidden`] when `deletion_allowed` is false.
    pub fn apply_retention(&mut self, floor_index: u64) -> Result<RetentionOutcome> {
        self.delete_front(floor_index, false)
    }

    /// Deletes every sealed segment that lies entirely below `floor_index` (Raft log
    /// compaction after a snapshot). `first_index()` afterwards is at most `floor_index`.
    /// Returns [`LogStoreError::DeletionForbidden`] when `deletion_allowed` is false.
    pub fn delete_prefix(&mut self, floor_index: u64) -> Result<RetentionOutcome> {
        self.delete_front(floor_index, true)
    }

    /// Where retention may cut while a replica still needs the entries from `needed_index` on,
    /// holding back at most `max_held_bytes` for it: the floor index to pass to
    /// [`LogStore::apply_retention`] instead of `floor_index`. The segments retention would
    /// delete with `floor_index` that hold an index at or above `needed_index` are kept, newest
    /// first, while they add up to at most `max_held_bytes`; older ones go as the policy says
    /// (the replica then catches up from a snapshot). Never above `floor_index`.
    pub fn retention_floor_holding(
        &self,
        floor_index: u64,
        needed_index: u64,
        max_held_bytes: u64,
    ) -> u64 {
        let infos = self.segment_infos();
        let now = crate::clock::retention_now_ms();
        let n = segments_to_delete(&infos, &self.config.retention, floor_index, now, false);
        let keep_from =
            crate::retention::first_held_segment(&infos[..n], needed_index, max_held_bytes);
        match keep_from {
            Some(j) => floor_index.min(self.segments[j].header.base_index),
            None => floor_index,
        }
    }

    /// What retention needs to know about each segment, oldest first.
    fn segment_infos(&self) -> Vec<SegmentInfo> {
        let floor = self.records_floor;
        self.segments
            .iter()
            .enumerate()
            .map(|(i, s)| SegmentInfo {
                below_records_floor: self
                    .segments
                    .get(i + 1)
                    .is_some_and(|next| next.header.base_offset <= floor),
                len: s.len,
                last_index: s.last_index,
                newest_ms: if s.max_timestamp != i64::MIN {
                    s.max_timestamp.max(0) as u64
                } else {
                    file_mtime_ms(&s.path).unwrap_or(s.header.created_ms)
                },
            })
            .collect()
    }

    fn delete_front(&mut self, floor_index: u64, all: bool) -> Result<RetentionOutcome> {
        if !self.config.deletion_allowed {
            return Err(LogStoreError::DeletionForbidden);
        }
        let infos = self.segment_infos();
        // Never ahead of the monotonic clock: a wall clock jumping forward deletes nothing early.
        let now = crate::clock::retention_now_ms();
        let n = segments_to_delete(&infos, &self.config.retention, floor_index, now, all);
        let mut bytes = 0;
        for s in self.segments.drain(..n) {
            assert!(
                s.last_index < floor_index && s.sealed(),
                "retention deletes sealed segments"
            );
            bytes += s.len;
            remove_if_exists(&s.index_path)?;
            remove_if_exists(&s.path)?;
        }
        if n > 0 {
            fsync_dir(&self.dir)?;
            let first = self.first_index();
            self.cache.drop_before(first);
        }
        Ok(RetentionOutcome {
            segments_deleted: n,
            bytes_deleted: bytes,
            first_index: self.first_index(),
            log_start_offset: self.log_start_offset(),
        })
    }

    /// Durably replaces the hard state: in place (one slot of the `hardstate` file, pwrite +
    /// fdatasync), so it needs no new disk space, except for the first save and the first
    /// after damage or after a version-1 file (temp file, fsync, rename, fsync dir).
    pub fn save_hard_state(&mut self, hs: &HardState) -> Result<()> {
        let seq = self.hard_state_seq + 1;
        hard_state::save_hard_state(&self.dir, hs, seq, self.hard_state_in_place)?;
        self.hard_state_seq = seq;
        self.hard_state_in_place = true;
        self.hard_state = *hs;
        self.hard_state_damage = None;
        Ok(())
    }

    /// The last saved hard state (default when never saved, or when the file was damaged:
    /// see [`LogStore::hard_state_damage`]).
    pub fn hard_state(&self) -> HardState {
        self.hard_state
    }

    /// Why the `hardstate` file could not be read at open (a CRC mismatch, bad magic, ...),
    /// naming the file; `None` when it was intact or missing. Cleared by the next
    /// [`LogStore::save_hard_state`]. The caller must not guess the lost term and vote: vdl
    /// takes them from the current leader before this replica votes again.
    pub fn hard_state_damage(&self) -> Option<&str> {
        self.hard_state_damage.as_deref()
    }

    /// Whether the votes this replica cast are unknown: its `hardstate` file was found
    /// damaged, at this open or at an earlier one, and the caller has not said it rebuilt
    /// them ([`LogStore::clear_vote_unknown`]). Kept in a marker file (`vote_unknown`),
    /// written when the damage is found, so a hard state saved meanwhile (the term of a
    /// leader followed) does not make a restart forget it.
    pub fn vote_unknown(&self) -> bool {
        self.vote_unknown
    }

    /// The caller rebuilt the votes (and saved the hard state that says so): removes the
    /// marker, durably.
    pub fn clear_vote_unknown(&mut self) -> Result<()> {
        if self.vote_unknown {
            remove_if_exists(&self.dir.join(hard_state::VOTE_UNKNOWN_FILE))?;
            fsync_dir(&self.dir)?;
            self.vote_unknown = false;
        }
        Ok(())
    }

    // ----------------------------------------------------------------------------------
    // Damage and repair

    /// Notes that a read found entry `index` (or one before it in its segment) damaged, and
    /// returns the error unchanged. Only corruption is noted.
    fn note_damage(&self, e: LogStoreError, index: u64) -> LogStoreError {
        if matches!(e, LogStoreError::Corruption { .. }) {
            self.damaged_from.fetch_min(index, Ordering::AcqRel);
        }
        e
    }

    /// Notes damage found outside the store's own reads (a scrubber's verification).
    pub fn report_damage(&self, index: u64) {
        self.damaged_from.fetch_min(index, Ordering::AcqRel);
    }

    /// The lowest Raft index a read (or [`LogStore::report_damage`]) found damaged since the
    /// last [`LogStore::repair`]; the damaged entry is at or after it in its segment.
    pub fn damaged_from(&self) -> Option<u64> {
        match self.damaged_from.load(Ordering::Acquire) {
            u64::MAX => None,
            i => Some(i),
        }
    }

    /// What the log lost to corruption and has not got back (written by recovery or by
    /// [`LogStore::repair`], removed by [`LogStore::finish_repair`]).
    pub fn repair_marker(&self) -> Option<RepairMarker> {
        self.repair_marker
    }

    /// Cuts the log before its first damaged entry, so that what is left is intact and the
    /// Raft layer can fetch the rest again from a healthy replica. The segment holding
    /// `suspect_index` is scanned (CRC of every frame) to find the first bad frame; the cut
    /// is at that frame or at `suspect_index`, whichever is lower. Writes the repair marker
    /// (durably, before the cut) with the end the log had. Returns `None`, and cuts nothing,
    /// when `suspect_index` is no longer in the log (retention deleted its segment, or an
    /// earlier repair or a truncation removed it) or when the scan finds every frame of its
    /// segment intact (a read error that did not come from the bytes on disk): a repair never
    /// cuts entries it cannot show damaged, which may be committed ones this replica counts
    /// for. Durable when it returns.
    pub fn repair(&mut self, suspect_index: u64) -> Result<Option<RepairMarker>> {
        let Some((k, first_bad, indexes)) = self.scan_for_damage(suspect_index)? else {
            return Ok(None);
        };
        // The indexes loaded for this segment may point into the damage; the scan's are
        // exact up to it.
        self.segments[k].replace_indexes(indexes);
        let marker = repair::save(
            &self.dir,
            RepairMarker {
                first_bad_index: first_bad,
                lost_last_index: self.last_index(),
                lost_last_term: self.last_term(),
            },
        )?;
        self.repair_marker = Some(marker);
        self.truncate_suffix(first_bad)?;
        Ok(Some(marker))
    }

    /// Whether the bytes on disk show the damage a read or the scrubber noted at
    /// `suspect_index` ([`LogStore::damaged_from`]): the first damaged Raft index, found by
    /// scanning (CRC of every frame) the segment holding the suspect; `None` when the suspect
    /// is no longer in the log or its segment scans intact. Clears the note either way; cuts
    /// nothing.
    pub fn confirm_damage(&self, suspect_index: u64) -> Result<Option<u64>> {
        Ok(self
            .scan_for_damage(suspect_index)?
            .map(|(_, first_bad, _)| first_bad))
    }

    /// Clears the damage note and scans the segment holding `suspect_index`: (the segment's
    /// position, the first bad index, the scan's indexes) when a frame in it is bad.
    fn scan_for_damage(
        &self,
        suspect_index: u64,
    ) -> Result<Option<(usize, u64, crate::index::SparseIndexes)>> {
        self.damaged_from.store(u64::MAX, Ordering::Release);
        if suspect_index > self.last_index() || suspect_index < self.first_index() {
            return Ok(None);
        }
        let k = self.segment_for_index(suspect_index);
        let seg = &self.segments[k];
        let data = seg.read_all()?;
        let sc = scan(
            &data,
            0,
            &seg.header,
            None,
            self.config.index_interval_bytes,
        );
        drop(data);
        Ok(sc.stop.map(|_| {
            (
                k,
                (sc.summary.last_index + 1).min(suspect_index),
                sc.indexes,
            )
        }))
    }

    /// Removes the repair marker: the log is whole again (the caller checked it holds what
    /// the marker says was lost, fetched from a healthy replica). Durable when it returns.
    pub fn finish_repair(&mut self) -> Result<()> {
        if self.repair_marker.take().is_some() {
            repair::remove(&self.dir)?;
        }
        Ok(())
    }

    /// Durably replaces the configuration state: overwrites one of the `confstate` file's two
    /// slots in place (pwrite + fdatasync, no new disk space), except for the first save of a
    /// store and the first after a version-1 file (temp file, fsync, rename, fsync dir).
    pub fn save_conf_state(&mut self, cs: &ConfState) -> Result<()> {
        let seq = self.conf_state_seq + 1;
        hard_state::save_conf_state(&self.dir, cs, seq, self.conf_state_in_place)?;
        self.conf_state_seq = seq;
        self.conf_state_in_place = true;
        self.conf_state = cs.clone();
        Ok(())
    }

    /// The last saved configuration state (default when never saved).
    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    // ----------------------------------------------------------------------------------
    // Reading by Raft index

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

    /// Entries `[lo, hi)`, stopping before the total size would exceed `max_bytes` but
    /// always at least one entry when `lo < hi` (raft-rs semantics; sizes are
    /// [`Entry::size`]). Errors when `lo < first_index()` or `hi > last_index() + 1`.
    pub fn entries(&self, lo: u64, hi: u64, max_bytes: u64) -> Result<Vec<Entry>> {
        if lo < self.first_index() {
            return Err(LogStoreError::Compacted {
                index: lo,
                first_index: self.first_index(),
            });
        }
        if hi > self.last_index() + 1 {
            return Err(LogStoreError::Unavailable {
                index: hi - 1,
                last_index: self.last_index(),
            });
        }
        let mut out: Vec<Entry> = Vec::new();
        let mut size = 0u64;
        let mut push = |e: Entry, out: &mut Vec<Entry>| -> bool {
            let s = e.size();
            if !out.is_empty() && size + s > max_bytes {
                return false;
            }
            size += s;
            out.push(e);
            true
        };
        let interval = self.config.index_interval_bytes;
        let mut i = lo;
        while i < hi {
            // From the cache when it holds `i` (asked again each round: other stores' appends
            // may take its oldest entries at any time), else from the disk up to where the
            // cache began when asked.
            let cache_first = {
                let cache = self.cache.lock();
                if let Some(mut p) = cache.position_of_index(i) {
                    while i < hi {
                        let e = cache
                            .entry_at(p)
                            .expect("the cache holds a suffix of the log")
                            .clone();
                        if !push(e, &mut out) {
                            break;
                        }
                        i += 1;
                        p += 1;
                    }
                    return Ok(out);
                }
                cache.first_index().unwrap_or(u64::MAX)
            };
            let seg = &self.segments[self.segment_for_index(i)];
            let (mut pos, _) = seg
                .locate_index(i, interval)
                .map_err(|e| self.note_damage(e, i))?;
            while i < hi && i <= seg.last_index && i < cache_first {
                let (h, frame) = seg.read_frame(pos).map_err(|e| self.note_damage(e, i))?;
                if h.index != i {
                    return Err(self.note_damage(
                        corruption(
                            &seg.path,
                            pos,
                            format!("expected index {i}, found {}", h.index),
                        ),
                        i,
                    ));
                }
                if !push(entry_from_frame(&h, &frame), &mut out) {
                    return Ok(out);
                }
                pos += h.total_len();
                i += 1;
            }
        }
        Ok(out)
    }

    /// One entry.
    pub fn entry(&self, index: u64) -> Result<Entry> {
        self.check_index(index)?;
        let mut v = self.entries(index, index + 1, u64::MAX)?;
        v.pop().ok_or(LogStoreError::Unavailable {
            index,
            last_index: self.last_index(),
        })
    }

    /// Term of entry `index`, also for `first_index() - 1` (remembered across prefix
    /// deletion and snapshots).
    pub fn term(&self, index: u64) -> Result<u64> {
        if index == self.last_index() {
            return Ok(self.last_term());
        }
        if index + 1 == self.first_index() {
            return Ok(self.segments[0].header.prev_term);
        }
        self.check_index(index)?;
        if let Some(term) = self.cache.lock().get(index).map(|e| e.term) {
            return Ok(term);
        }
        let seg = &self.segments[self.segment_for_index(index)];
        if index == seg.last_index {
            return Ok(seg.last_term);
        }
        Ok(seg
            .locate_index(index, self.config.index_interval_bytes)
            .map_err(|e| self.note_damage(e, index))?
            .1
            .term)
    }

    /// The Kafka offset after entry `index` (`first_offset + record_count`), also for
    /// `first_index() - 1`. Turns a Raft commit index into a high watermark.
    pub fn next_offset_after_index(&self, index: u64) -> Result<u64> {
        if index == self.last_index() {
            return Ok(self.next_offset());
        }
        if index + 1 == self.first_index() {
            return Ok(self.log_start_offset());
        }
        self.check_index(index)?;
        if let Some(next) = self.cache.lock().get(index).map(|e| e.next_offset()) {
            return Ok(next);
        }
        let seg = &self.segments[self.segment_for_index(index)];
        if index == seg.last_index {
            return Ok(seg.next_offset);
        }
        Ok(seg
            .locate_index(index, self.config.index_interval_bytes)
            .map_err(|e| self.note_damage(e, index))?
            .1
            .next_offset())
    }

    // ----------------------------------------------------------------------------------
    // Reading by Kafka offset

    /// Reads whole record batches starting with the batch that holds `from_offset`, up to
    /// `max_bytes` (at least one batch when one is visible, even a larger one), never
    /// including a batch with an offset at or beyond `visible_end_offset` (the high
    /// watermark). Reading at the visible end returns nothing; outside
    /// `[log_start_offset(), next_offset()]` is [`LogStoreError::OffsetOutOfRange`].
    pub fn read_records(
        &self,
        from_offset: u64,
        max_bytes: u64,
        visible_end_offset: u64,
    ) -> Result<RecordsRead> {
        let start = self.first_readable_offset();
        let next = self.next_offset();
        if from_offset < start || from_offset > next {
            return Err(LogStoreError::OffsetOutOfRange {
                offset: from_offset,
                log_start_offset: start,
                next_offset: next,
            });
        }
        let end = visible_end_offset.min(next);
        let mut out = RecordsRead {
            next_offset: from_offset,
            ..Default::default()
        };
        if from_offset >= end {
            return Ok(out);
        }
        let interval = self.config.index_interval_bytes;
        // Where a disk walk starts: at `from_offset` first; at a Raft index when the walk
        // reached the cache but other stores' appends took those entries before they were read.
        let mut resume_index: Option<u64> = None;
        loop {
            let cache_first = {
                let cache = self.cache.lock();
                let start = match resume_index {
                    None => cache.position_of_offset(from_offset),
                    Some(i) => cache.position_of_index(i),
                };
                if let Some(mut p) = start {
                    while let Some(e) = cache.entry_at(p) {
                        if e.record_count > 0
                            && !add_batches(e, from_offset, end, max_bytes, &mut out, &self.dir)?
                        {
                            break;
                        }
                        p += 1;
                    }
                    return Ok(out);
                }
                cache.first_index().unwrap_or(u64::MAX)
            };
            // From disk until the entries reach the cache (as it was just now).
            let (k, mut pos) = match resume_index.take() {
                None => {
                    let k = self
                        .segments
                        .partition_point(|s| s.next_offset <= from_offset);
                    let seg = &self.segments[k];
                    let found = seg
                        .locate_offset(from_offset, interval)
                        .map_err(|e| self.note_damage(e, seg.header.base_index))?;
                    (k, found.0)
                }
                Some(i) => {
                    let k = self.segment_for_index(i);
                    let found = self.segments[k]
                        .locate_index(i, interval)
                        .map_err(|e| self.note_damage(e, i))?;
                    (k, found.0)
                }
            };
            'segments: for seg in &self.segments[k..] {
                // The entry a failed read is blamed on: the last intact one's successor (the
                // repair scans the segment for the exact frame).
                let mut at = seg.header.base_index;
                while pos < seg.len {
                    let h = seg
                        .read_frame_header(pos)
                        .map_err(|e| self.note_damage(e, at))?;
                    if h.index >= cache_first {
                        resume_index = Some(h.index);
                        break 'segments;
                    }
                    if h.record_count > 0 {
                        let (h, frame) =
                            seg.read_frame(pos).map_err(|e| self.note_damage(e, at))?;
                        let e = entry_from_frame(&h, &frame);
                        if !add_batches(&e, from_offset, end, max_bytes, &mut out, &seg.path)? {
                            return Ok(out);
                        }
                    }
                    at = h.index;
                    pos += h.total_len();
                }
                pos = SEGMENT_HEADER_LEN;
            }
            if resume_index.is_none() {
                return Ok(out);
            }
        }
    }

    /// The base offset of the first batch whose maxTimestamp is >= `timestamp_ms` (Kafka
    /// ListOffsets by time, at batch granularity: records before it in that batch may be
    /// older). `None` when no stored batch is that new. Does not apply a visible limit.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<u64>> {
        let interval = self.config.index_interval_bytes;
        for seg in &self.segments {
            if seg.is_empty() || seg.max_timestamp == i64::MIN || seg.max_timestamp < timestamp_ms {
                continue;
            }
            let idx = seg.indexes(interval)?;
            let mut pos = idx
                .time_floor(timestamp_ms)
                .and_then(|o| idx.offset_floor(o))
                .unwrap_or(SEGMENT_HEADER_LEN);
            while pos < seg.len {
                let h = seg.read_frame_header(pos)?;
                if h.record_count > 0 && h.max_timestamp >= timestamp_ms {
                    let (h, frame) = seg.read_frame(pos)?;
                    let e = entry_from_frame(&h, &frame);
                    let infos = batch::walk(&e.payload)
                        .map_err(|(at, r)| corruption(&seg.path, pos + at as u64, r))?;
                    let mut o = e.first_offset;
                    for b in infos {
                        if b.max_timestamp >= timestamp_ms {
                            // Records below the records floor are deleted: the first one
                            // still readable stands in for them.
                            return Ok(Some(o.max(self.records_floor)));
                        }
                        o += u64::from(b.offset_count);
                    }
                }
                pos += h.total_len();
            }
        }
        Ok(None)
    }
}

/// The sync lag each frame of one append records (see `entry.rs`): how far the frame's
/// position is past the length of the active segment that a completed fdatasync made durable
/// before the append was written. `synced_len` only grows when an fdatasync of the active
/// segment has returned (`complete_sync_at`, `trim_active`, recovery's own sync at open),
/// never when a sync is merely prepared, so the lag never claims an unfinished sync.
struct SyncLags {
    /// Where the append's first frame goes (the active segment's length).
    append_pos: u64,
    /// The synced length of the active segment; `None`: a version-1 segment (no lag field).
    synced_len: Option<u64>,
}

impl SyncLags {
    fn for_append(active: &Segment, synced_len: u64) -> SyncLags {
        SyncLags {
            append_pos: active.len,
            synced_len: active
                .header
                .has_sync_lag()
                .then_some(synced_len.min(active.len)),
        }
    }

    /// The field for the frame at `offset_in_append` bytes into the append's buffer.
    fn at(&self, offset_in_append: u64) -> u32 {
        match self.synced_len {
            Some(synced) => encode_sync_lag(self.append_pos + offset_in_append - synced),
            None => 0,
        }
    }
}

/// Adds the batches of `e` that hold offsets >= `from` to `out`. Returns false when reading
/// must stop (a batch not fully visible, or the byte limit reached).
fn add_batches(
    e: &Entry,
    from: u64,
    end: u64,
    max_bytes: u64,
    out: &mut RecordsRead,
    path: &Path,
) -> Result<bool> {
    let infos = batch::walk(&e.payload).map_err(|(at, r)| {
        corruption(
            path,
            at as u64,
            format!("entry {}: stored record batches: {r}", e.index),
        )
    })?;
    let mut o = e.first_offset;
    let mut run: Option<(usize, usize)> = None;
    let mut keep_going = true;
    for b in infos {
        let first = o;
        let last = o + u64::from(b.offset_count) - 1;
        o = last + 1;
        if last < from {
            continue;
        }
        if last >= end || (out.bytes > 0 && out.bytes + b.len as u64 > max_bytes) {
            keep_going = false;
            break;
        }
        if out.first_batch_offset.is_none() {
            out.first_batch_offset = Some(first);
        }
        run = Some(match run {
            Some((s, _)) => (s, b.pos + b.len),
            None => (b.pos, b.pos + b.len),
        });
        out.bytes += b.len as u64;
        out.next_offset = last + 1;
    }
    if let Some((s, t)) = run {
        out.chunks.push(e.payload.slice(s..t));
    }
    Ok(keep_going && out.next_offset < end)
}

fn file_mtime_ms(path: &Path) -> Option<u64> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    m.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as u64)
}
