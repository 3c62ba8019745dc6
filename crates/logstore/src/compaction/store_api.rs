//! The compaction methods of [`LogStore`]: one pass in two steps, so a server can run the
//! long part without blocking appends: [`LogStore::prepare_compaction`] (`&self`: builds the
//! key map, writes the rewritten segments to durable temporary files) and
//! [`LogStore::install_compaction`] (`&mut self`: swaps them in, a few fsyncs per segment,
//! and saves the checkpoint). [`LogStore::compact`] does both. The long part can also run
//! with no borrow of the store at all: [`LogStore::compaction_source`] (`&self`, quick: maps
//! the cleanable sealed segments) then [`CompactionSource::prepare`] (owns its maps: a server
//! runs it with the store's lock released, so appends and reads go on).
//!
//! Which records go (`keep` below): a keyed, non-control record whose key the map holds
//! with a later offset (a newer value was written); a tombstone that is the latest of its
//! key, lies below the first dirty offset of the pass (an earlier pass kept it already, so
//! every older value of its key is gone: passes swap segments oldest first), is older
//! than `now - delete_retention_ms`, and lies in an entry below the plan's
//! `tombstone_limit` (vdl: held by every replica; see [`CompactionPlan::tombstone_limit`]).
//! Everything else stays: records without a key (the
//! server refuses them for compacted topics), control records, and the latest record of
//! every key. A data batch of an idempotent producer that keeps no record goes whole unless
//! it is the latest batch of its producer the pass mapped (`producers.rs`); that one stays
//! as an empty header, so the producer state rebuilt from the log keeps its last sequence.
//!
//! Transactions (the caller's aborted list, [`CompactionSource::with_aborted_transactions`];
//! see the module docs of `compaction`): a data batch of an aborted transaction loses every
//! record (and goes whole unless it is its producer's last batch) and its records are not
//! mapped. A marker is kept while a data batch of its producer comes before it since its
//! producer's previous marker (a batch of its transaction is still in the log); once a pass
//! finds none, it is rewritten with a delete horizon of `now + delete_retention_ms`; a later
//! pass removes it whole once `now` has reached that horizon, it lies below the pass's first
//! dirty offset (so the pass that set the horizon, or an earlier one, saved a checkpoint past
//! it) and in an entry below the plan's `tombstone_limit` (every copy of the log holds it: a
//! replica that still holds the transaction's data gets its marker), and below the caller's
//! marker limit ([`CompactionSource::with_marker_limit`]).

use crate::compaction::checkpoint::CleanerCheckpoint;
use crate::compaction::dirty::build_map;
use crate::compaction::segment_rewrite::{
    discard, rewrite_segment, swap_in, BatchFate, RewrittenSegment, SegmentSource,
};
use crate::compaction::transactions::{AbortedIndex, MarkerTracker};
use crate::compaction::{
    AbortedRange, CompactionPlan, CompactionReport, KeyMap, RecordCompactor, RecordView, TxnBatch,
};
use crate::error::Result;
use crate::index::write_index_file;
use crate::segment::SegmentHeader;
use crate::store::LogStore;
use bytes::Bytes;
use std::path::PathBuf;

/// A sealed segment as a pass reads it: its identity when the source was taken and its
/// mapped bytes (sealed files are never written in place, so the map stays valid whatever
/// the store does meanwhile: a rewrite or truncation renames a new file over it).
pub(crate) struct SealedView {
    pub path: PathBuf,
    pub header: SegmentHeader,
    pub len: u64,
    pub next_offset: u64,
    pub data: Bytes,
}

/// What a pass reads, taken from the store ([`LogStore::compaction_source`]): the cleanable
/// sealed segments, mapped, and where the dirty part starts. Holds no borrow of the store.
pub struct CompactionSource {
    dir: PathBuf,
    generation: u64,
    first_dirty: u64,
    /// The plan's `tombstone_limit` as an offset: the first offset of the entry at that
    /// index (a tombstone goes only below it).
    tombstone_offsets: u64,
    index_interval: u64,
    cleanable: Vec<SealedView>,
    /// The aborted transactions the caller gave (none by default).
    aborted: Vec<AbortedRange>,
    /// Markers go only below this offset (`u64::MAX` by default: the other rules only).
    marker_offsets: u64,
}

/// A compaction pass whose rewritten segments are written and synced but not yet swapped
/// in ([`LogStore::install_compaction`]). Dropping it removes its temporary files.
#[derive(Debug)]
pub struct PreparedCompaction {
    generation: u64,
    /// Rewritten segments, oldest first: base index, the old file's length, the new file.
    rewritten: Vec<(u64, u64, RewrittenSegment)>,
    report: CompactionReport,
    now_ms: i64,
    /// Whether the pass mapped anything (else it saves no checkpoint).
    advanced: bool,
}

impl PreparedCompaction {
    /// What the pass did so far (the swaps not yet counted in `segments_rewritten`).
    pub fn report(&self) -> CompactionReport {
        self.report
    }
}

impl Drop for PreparedCompaction {
    fn drop(&mut self) {
        for (_, _, r) in self.rewritten.drain(..) {
            discard(&r.tmp_path);
        }
    }
}

/// The cleaner's view of a store, for metrics ([`LogStore::cleaner_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CleanerStats {
    /// Bytes of sealed segments wholly below the first dirty offset (compacted already).
    pub clean_bytes: u64,
    /// Bytes of sealed segments a pass could clean now (from the one holding the first
    /// dirty offset, within the plan's clean limit and compaction lag).
    pub cleanable_bytes: u64,
    /// The first dirty offset (from the checkpoint; the log start without one).
    pub first_dirty_offset: u64,
    /// Wall clock of the last pass that saved a checkpoint, ms since the Unix epoch.
    pub last_clean_ms: Option<i64>,
    /// When the oldest dirty data of the sealed segments was written, at the latest: the
    /// creation time (wall clock, ms since the Unix epoch, from its header, kept by
    /// rewrites) of the first sealed segment holding an offset at or past the first dirty
    /// offset, whatever the clean limit and compaction lag. Every dirty record of the sealed
    /// segments was appended at or after it, so `now - oldest_dirty_ms` bounds how long the
    /// oldest of them has waited (Kafka's `max.compaction.lag.ms` is measured from it).
    /// `None` when no sealed segment holds dirty data.
    pub oldest_dirty_ms: Option<i64>,
}

impl CleanerStats {
    /// `cleanable / (clean + cleanable)` (Kafka's dirty ratio); 0 when both are 0.
    pub fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.cleanable_bytes;
        if total == 0 {
            0.0
        } else {
            self.cleanable_bytes as f64 / total as f64
        }
    }
}

impl LogStore {
    /// The saved checkpoint when it belongs to this log (same generation, inside the log).
    fn cleaner_checkpoint(&self) -> Option<CleanerCheckpoint> {
        CleanerCheckpoint::load(self.dir()).filter(|c| {
            c.generation == self.generation && c.first_dirty_offset <= self.next_offset()
        })
    }

    /// Before a cut of the log at `next_offset` (a truncation, a repair after damage):
    /// lowers a checkpoint whose first dirty offset lies above it to `next_offset`, durably
    /// ([`CleanerCheckpoint::lower`]: the entries written again from there on, fetched from
    /// the leader, whose copy may be compacted less or not at all, were never mapped here).
    pub(crate) fn lower_cleaner_checkpoint(&self, next_offset: u64) -> Result<()> {
        CleanerCheckpoint::lower(self.dir(), next_offset)
    }

    /// The first offset of the entry at Raft index `index`, or the one the next entry takes
    /// when `index` is past the last: the records of entries below `index` lie below it,
    /// those of entries at or above `index` at or above it. Entries below the first stored
    /// index are gone: the log start then.
    pub fn first_offset_at_index(&self, index: u64) -> Result<u64> {
        if index <= self.first_index() {
            Ok(self.log_start_offset())
        } else if index > self.last_index() {
            Ok(self.next_offset())
        } else {
            self.next_offset_after_index(index - 1)
        }
    }

    /// The first dirty offset: offsets below it were compacted by an earlier pass.
    fn first_dirty_offset(&self) -> u64 {
        let start = self.log_start_offset();
        self.cleaner_checkpoint()
            .map_or(start, |c| c.first_dirty_offset.max(start))
    }

    /// How many sealed segments, from the first, a pass under `plan` may read and rewrite:
    /// every entry below `clean_limit`, no record younger than the compaction lag.
    fn cleanable_segment_count(&self, plan: &CompactionPlan) -> usize {
        let newest_allowed = plan.now_ms.saturating_sub(plan.min_compaction_lag_ms);
        self.sealed_segments()
            .take_while(|s| {
                s.last_index < plan.clean_limit
                    && (s.max_timestamp == i64::MIN || s.max_timestamp <= newest_allowed)
            })
            .count()
    }

    /// Sizes for the cleaner's metrics under `plan` (see [`CleanerStats`]).
    pub fn cleaner_stats(&self, plan: &CompactionPlan) -> CleanerStats {
        let checkpoint = self.cleaner_checkpoint();
        let first_dirty = self.first_dirty_offset();
        let n = self.cleanable_segment_count(plan);
        let mut stats = CleanerStats {
            first_dirty_offset: first_dirty,
            last_clean_ms: checkpoint.map(|c| c.cleaned_at_ms),
            oldest_dirty_ms: self
                .sealed_segments()
                .find(|s| s.next_offset > first_dirty)
                .map(|s| i64::try_from(s.header.created_ms).unwrap_or(i64::MAX)),
            ..Default::default()
        };
        for (i, s) in self.sealed_segments().enumerate() {
            if s.next_offset <= first_dirty {
                stats.clean_bytes += s.len;
            } else if i < n {
                stats.cleanable_bytes += s.len;
            }
        }
        stats
    }

    /// Bytes a pass under `plan` could clean now ([`CleanerStats::cleanable_bytes`]).
    pub fn cleanable_bytes(&self, plan: &CompactionPlan) -> u64 {
        self.cleaner_stats(plan).cleanable_bytes
    }

    /// Kafka's dirty ratio under `plan` ([`CleanerStats::dirty_ratio`]).
    pub fn dirty_ratio(&self, plan: &CompactionPlan) -> f64 {
        self.cleaner_stats(plan).dirty_ratio()
    }

    /// The cleanable sealed segments under `plan` (every entry below `clean_limit`, past the
    /// compaction lag), mapped, with the first dirty offset: what
    /// [`CompactionSource::prepare`] reads. Quick (no segment is read here).
    pub fn compaction_source(&self, plan: &CompactionPlan) -> Result<CompactionSource> {
        let mut cleanable = Vec::new();
        for seg in self
            .sealed_segments()
            .take(self.cleanable_segment_count(plan))
        {
            cleanable.push(SealedView {
                path: seg.path.clone(),
                header: seg.header,
                len: seg.len,
                next_offset: seg.next_offset,
                data: seg.map()?,
            });
        }
        Ok(CompactionSource {
            dir: self.dir().to_path_buf(),
            generation: self.generation,
            first_dirty: self.first_dirty_offset(),
            tombstone_offsets: self.first_offset_at_index(plan.tombstone_limit)?,
            index_interval: self.config().index_interval_bytes,
            cleanable,
            aborted: Vec::new(),
            marker_offsets: u64::MAX,
        })
    }

    /// The long part of a pass, with `&self` (readers go on meanwhile):
    /// [`LogStore::compaction_source`] then [`CompactionSource::prepare`].
    pub fn prepare_compaction(
        &self,
        plan: &CompactionPlan,
        codec: &dyn RecordCompactor,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<PreparedCompaction> {
        self.compaction_source(plan)?.prepare(plan, codec, throttle)
    }

    /// Swaps in the segments `prepared` rewrote, oldest first (see `segment_rewrite::swap_in`
    /// for the crash-safe protocol), so reads see the new files at once (their maps and
    /// indexes are replaced in the open set, and the tail cache drops the entries they hold),
    /// then saves the checkpoint. A segment that changed or went since (retention,
    /// truncation, a snapshot) is skipped; when one changed, the later ones are dropped too
    /// and no checkpoint is saved (the next pass does the work again). Durable on return.
    pub fn install_compaction(
        &mut self,
        mut prepared: PreparedCompaction,
    ) -> Result<CompactionReport> {
        let mut report = prepared.report;
        if prepared.generation != self.generation {
            return Ok(CompactionReport {
                first_dirty_offset: self.first_dirty_offset(),
                ..report
            });
        }
        // Oldest first; what is left in `prepared` when a swap fails is discarded by its drop.
        prepared.rewritten.reverse();
        let mut intact = true;
        let mut last_swapped = None;
        let mut failed = None;
        while let Some((base, old_len, r)) = prepared.rewritten.pop() {
            if !intact {
                discard(&r.tmp_path);
                continue;
            }
            let Some(k) = self
                .sealed_segments()
                .position(|s| s.header.base_index == base)
            else {
                // Deleted from the front since (retention, `delete_prefix`).
                discard(&r.tmp_path);
                if base >= self.first_index() {
                    intact = false;
                }
                continue;
            };
            let seg = &mut self.segments[k];
            if seg.len != old_len
                || seg.last_index != r.summary.last_index
                || seg.last_term != r.summary.last_term
                || seg.next_offset != r.summary.next_offset
            {
                discard(&r.tmp_path);
                intact = false;
                continue;
            }
            let (path, index_path) = (seg.path.clone(), seg.index_path.clone());
            let RewrittenSegment {
                tmp_path,
                summary,
                indexes,
                ..
            } = r;
            let take_new_file = || {
                seg.len = summary.covered_len;
                seg.last_entry_pos = summary.last_entry_pos;
                seg.max_timestamp = summary.max_timestamp;
                // Derived data: a failed write costs a scan at the next open.
                let _ = write_index_file(&seg.index_path, &summary, &indexes);
                seg.replace_indexes(indexes);
                report.segments_rewritten += 1;
                last_swapped = Some(seg.last_index);
            };
            if let Err(e) = swap_in(&self.dir, &path, &index_path, &tmp_path, take_new_file) {
                discard(&tmp_path);
                failed = Some(e);
                break;
            }
        }
        if let Some(last) = last_swapped {
            // The cache is a suffix of the log: it may still hold entries of a rewritten
            // segment, with their old payloads.
            self.cache.drop_before(last + 1);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if intact && prepared.advanced {
            CleanerCheckpoint {
                generation: self.generation,
                first_dirty_offset: report.first_dirty_offset,
                cleaned_at_ms: prepared.now_ms,
            }
            .save(&self.dir)?;
        } else if !intact {
            report.first_dirty_offset = self.first_dirty_offset();
        }
        Ok(report)
    }

    /// One whole pass: [`LogStore::prepare_compaction`] then
    /// [`LogStore::install_compaction`].
    pub fn compact(
        &mut self,
        plan: &CompactionPlan,
        codec: &dyn RecordCompactor,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<CompactionReport> {
        let prepared = self.prepare_compaction(plan, codec, throttle)?;
        self.install_compaction(prepared)
    }
}

impl CompactionSource {
    /// The source with the log's aborted transactions: every one whose data may lie in the
    /// cleanable segments (vdl: the partition's list of aborts still in the log). The plan's
    /// clean limit must lie at or below the last stable offset (no transaction open below
    /// it): a transactional batch below it that no range covers is taken as committed.
    /// Without a list (the default), no batch is taken as aborted.
    pub fn with_aborted_transactions(mut self, aborted: Vec<AbortedRange>) -> CompactionSource {
        self.aborted = aborted;
        self
    }

    /// The source with one more bound on removing transaction markers: only those below
    /// offset `marker_offsets` may go (on top of the delete horizon, the first dirty offset and
    /// the plan's `tombstone_limit`). vdl passes the offsets its saved producer state covers,
    /// so the state a restart loads never holds open a transaction whose marker is gone.
    pub fn with_marker_limit(mut self, marker_offsets: u64) -> CompactionSource {
        self.marker_offsets = marker_offsets;
        self
    }

    /// The long part of a pass, without the store: maps the keys of the dirty range (from
    /// the first dirty offset in the cleanable sealed segments, until the map's budget is
    /// used), then rewrites every sealed segment from the first one up to the map's end into
    /// a durable temporary file (segments that lose nothing are read, not written). Nothing
    /// the store reads changes. `throttle` is called with the bytes of every chunk read or
    /// written (an I/O rate limit: it may sleep). A pass with nothing new to map does
    /// nothing. `plan` must be the one the source was taken with. Allocates a key map of
    /// the plan's budget for this pass; [`CompactionSource::prepare_with_map`] reuses one.
    pub fn prepare(
        self,
        plan: &CompactionPlan,
        codec: &dyn RecordCompactor,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<PreparedCompaction> {
        let mut map = KeyMap::with_budget(plan.key_map_bytes);
        self.prepare_with_map(plan, codec, &mut map, throttle)
    }

    /// [`CompactionSource::prepare`] with the caller's key map, emptied first
    /// ([`KeyMap::reset`] to the plan's budget: its allocation is kept across passes of the
    /// same budget). What the pass does does not depend on what the map held before.
    pub fn prepare_with_map(
        self,
        plan: &CompactionPlan,
        codec: &dyn RecordCompactor,
        map: &mut KeyMap,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<PreparedCompaction> {
        let first_dirty = self.first_dirty;
        let mut prepared = PreparedCompaction {
            generation: self.generation,
            rewritten: Vec::new(),
            report: CompactionReport {
                first_dirty_offset: first_dirty,
                ..Default::default()
            },
            now_ms: plan.now_ms,
            advanced: false,
        };
        // The cleanable segments are a prefix of the sealed ones (never the active one).
        let cleanable = &self.cleanable;
        let dirty = build_map(
            cleanable,
            first_dirty,
            codec,
            map,
            plan.key_map_bytes,
            &self.aborted,
            throttle,
        )?;
        prepared.report.bytes_read += dirty.bytes_read;
        if dirty.end <= first_dirty {
            return Ok(prepared);
        }
        prepared.advanced = true;
        let map = &*map;
        let horizon = plan.now_ms.saturating_sub(plan.delete_retention_ms);
        let tombstone_offsets = self.tombstone_offsets;
        let mut keep = |r: RecordView<'_>| -> bool {
            if r.control {
                return true;
            }
            let Some(key) = r.key else { return true };
            if map.get(key).is_some_and(|latest| r.offset < latest) {
                return false;
            }
            !(r.tombstone
                && r.offset < first_dirty
                && r.offset < tombstone_offsets
                && r.timestamp_ms < horizon)
        };
        // Batches are decided in log order, from the log's first sealed segment on.
        let mut aborted = AbortedIndex::new(&self.aborted);
        let mut markers = MarkerTracker::default();
        let marker_horizon = plan.now_ms.saturating_add(plan.delete_retention_ms);
        let marker_offsets = self.marker_offsets;
        let mut fate = |base: u64, bytes: &[u8]| -> BatchFate {
            match codec.transaction_batch(bytes) {
                None => BatchFate::Records,
                Some(TxnBatch::Data { producer_id }) => {
                    markers.on_data(producer_id);
                    if aborted.is_aborted(producer_id, base) {
                        BatchFate::Aborted
                    } else {
                        BatchFate::Records
                    }
                }
                Some(TxnBatch::Marker {
                    producer_id,
                    delete_horizon_ms,
                }) => {
                    if !markers.on_marker(producer_id) {
                        return BatchFate::Records;
                    }
                    match delete_horizon_ms {
                        None => BatchFate::SetHorizon(marker_horizon),
                        Some(at)
                            if at <= plan.now_ms
                                && base < first_dirty
                                && base < tombstone_offsets
                                && base < marker_offsets =>
                        {
                            BatchFate::Remove
                        }
                        Some(_) => BatchFate::Records,
                    }
                }
            }
        };
        for seg in cleanable
            .iter()
            .take_while(|s| s.header.base_offset < dirty.end)
        {
            let data = &seg.data;
            prepared.report.bytes_read += data.len() as u64;
            prepared.report.segments_cleaned += 1;
            let src = SegmentSource {
                dir: &self.dir,
                path: &seg.path,
                header: &seg.header,
                data,
                index_interval: self.index_interval,
            };
            let rewritten = rewrite_segment(
                &src,
                codec,
                &mut keep,
                &mut fate,
                Some(horizon),
                &dirty.producers,
                throttle,
            )?;
            if let Some(r) = rewritten {
                prepared.report.bytes_written += r.summary.covered_len;
                prepared.report.records_removed += r.records_removed;
                prepared.rewritten.push((seg.header.base_index, seg.len, r));
            }
        }
        prepared.report.first_dirty_offset = dirty.end;
        Ok(prepared)
    }
}
