//! Opening a log directory: what is trusted, what is scanned, what is repaired.
//!
//! Rules:
//! - Leftover `*.tmp` files are deleted (unfinished atomic writes, and segments compaction
//!   was rewriting but had not swapped in: `*.log.cleaned.tmp`), and so are index files
//!   without a segment. A missing index file is rebuilt by scanning its segment (compaction
//!   removes a segment's index before swapping the rewritten file in).
//! - Every segment header is read (64 bytes per segment): bad magic, a header CRC mismatch, a
//!   file shorter than the header, a newer format version or a name that does not match the
//!   header's first index are errors. Segments of an older generation than the newest are
//!   leftovers of an interrupted `install_snapshot` and are deleted.
//! - Sealed segments (all but the last) were fsynced before the next one was created, so they
//!   are trusted when their index file's header agrees with the segment (same base index and
//!   generation, covered length = file length, and the frame at the recorded last position is
//!   a valid frame of the recorded last index ending exactly at the end of the file). Their
//!   index bodies are loaded lazily on first use. When the index file is missing or does not
//!   agree, the segment is scanned completely; a bad frame in a sealed segment is damage
//!   (it was synced before the segment was sealed): the log is cut before it after a repair
//!   marker is written (`cut_at_damage`, `repair.rs`).
//! - The active (last) segment is scanned from its checkpoint (the covered length of its
//!   index file, written only for synced data) or from its header when there is no valid
//!   checkpoint. The scan stops at the first frame that is incomplete, fails its CRC, or does
//!   not continue the log (index, term, offset); the file is truncated there and fsynced,
//!   unless everything after that point is zeros: that is the reserve written ahead of the
//!   data (`reserve.rs`) and is kept.
//! - Consecutive segments must continue each other (index, offset and term), else corruption.
//!
//! # Torn tail or damage (the active segment)
//!
//! Only bytes a completed fdatasync covered can be *damage*; everything past the last
//! completed sync was never acknowledged, and a power cut may persist any subset of its pages
//! (page k+1 and not page k). So where the tail scan stops at a bad frame:
//! - **Damage** (repair marker, then the same cut) when the bad frame was synced:
//!   - version-2 segments: every frame records its *sync lag* (`entry.rs`): how far its
//!     position was past the segment length that a completed fdatasync covered when it was
//!     written. An intact frame after the bad one that continues the log (found as before:
//!     where the bad frame's length points, else at any byte) and whose lag puts that synced
//!     length past the bad frame's position proves the bad frame was synced;
//!   - version-1 segments (no lag; written before it existed): any intact continuing frame
//!     after the bad one, the rule those files were always read with (`LogStore` then seals
//!     such a segment and goes on in a version-2 one, so this applies only to what an older
//!     build wrote);
//!   - any version: the bad frame's index (the last intact index + 1) is at or below the
//!     hard state's saved commit: the entry was committed and acknowledged. The marker's lost
//!     end is then at least the commit (with the last intact term when no later frame tells
//!     the term: a lower bound, as for a damaged sealed segment's last frame).
//! - **Torn tail** (cut, no marker) otherwise, including every intact frame after the bad
//!   one: none of them was synced, so nobody was told they exist, and a marker naming them
//!   would make the replica vote only for logs holding entries no healthy replica may have
//!   (two such replicas and one without them elect nobody, ever).
//!
//! The lag is taken from `LogStore`'s synced length, which grows only after an fdatasync of
//! the active segment has returned (`complete_sync`, `trim_active`, recovery's own sync at
//! open): a sync only prepared (`prepare_sync`, its fdatasync still running outside the lock)
//! is not counted, and the reserve's filler syncs (zeros, another handle) are not either.
//! A frame's recorded synced length never exceeds its own position, and a truncation below
//! it removes the frame with it, so a surviving intact frame never vouches for bytes that
//! were rewritten after its sync.
//!
//! **The remaining window.** A synced frame is known to be synced only through a *later*
//! frame's lag, or through the saved commit. So a bad frame among the appends written since
//! the sync that the last intact frame records (for an idle log: its last synced append or
//! group commit), whose index is above the saved commit, cannot be told from a torn write and
//! is cut as a torn tail without a marker. This needs a device that changed synced bytes
//! (not a power cut), in the newest few appends, before the replica learned and saved their
//! commit. It is not safe: the replica may have been part of the majority that committed
//! such an entry; voting with its cut log, without the repair marker's voting rule, it can
//! help elect a candidate lacking the entry, which is then lost. On disk the window closes
//! for a frame once a later append records a sync past it or the replica saves a commit
//! covering it; after such a cut it closes when the leader sends the entry again (the replica
//! rejects its next append). Likewise, damage spanning the bad frame *and* the frame after it
//! hides the later frames' lags (the search looks for the very next index), and a synced
//! tail that reads back as all zeros is taken for the reserve; the saved commit still catches
//! both when it covers the first lost index. A damaged hard state gives no commit (0).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::StoreConfig;
use crate::entry::{check_frame, parse_header, EntryKind};
use crate::error::{corruption, io_err, Result};
use crate::fsutil::{fdatasync, fsync_dir, remove_if_exists};
use crate::index::{
    read_index_file, read_index_summary, write_index_file, IndexSummary, SparseIndexes,
};
use crate::open_segments::OpenSegments;
use crate::repair::RepairMarker;
use crate::segment::{
    create_segment_file, index_file_name, now_ms, open_rw, parse_file_name, Segment, SegmentHeader,
    MAX_FRAME_LEN, SEGMENT_HEADER_LEN,
};

/// What happened while opening a store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Number of segment files after recovery.
    pub segments: usize,
    /// Bytes of the active segment scanned and CRC-checked (the tail after the checkpoint).
    pub tail_bytes_scanned: u64,
    /// Bytes cut from the end of the active segment (a torn or partially written tail).
    pub truncated_bytes: u64,
    /// All-zero bytes after the last frame of the active segment: space written ahead of the
    /// data (see [`crate::StoreConfig::preallocate_bytes`]); kept, not counted as truncated.
    pub preallocated_bytes: u64,
    /// Why the tail scan stopped before the end of the file, with the byte position.
    pub truncation_reason: Option<(u64, String)>,
    /// Index files that were missing or inconsistent and were rebuilt by scanning.
    pub rebuilt_indexes: usize,
    /// Leftover files deleted (temporary files, orphan indexes, older generations).
    pub removed_files: usize,
    /// Synced data found damaged (a bad frame in a sealed segment, or in the active segment
    /// where a later frame records a sync past it or the saved commit covers its index; see
    /// the module docs): the log was cut before it and a repair marker written (see
    /// [`crate::RepairMarker`]).
    pub damage: Option<DamageFound>,
}

/// Where recovery found damaged data, and what it cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamageFound {
    /// The damaged file.
    pub path: PathBuf,
    /// Byte position of the first bad frame in it.
    pub offset: u64,
    /// What was wrong there.
    pub reason: String,
    /// The first Raft index lost (the log now ends before it).
    pub first_bad_index: u64,
    /// The marker as written (merged with an earlier one).
    pub marker: RepairMarker,
}

/// Result of a scan: summary and indexes of the valid frames, and where/why it stopped early.
pub(crate) struct Scan {
    pub summary: IndexSummary,
    pub indexes: SparseIndexes,
    pub stop: Option<(u64, String)>,
}

/// Scans frames starting after `start` (or after the header). `data` holds the segment
/// file's bytes from position `data_base` on; all positions are file positions.
pub(crate) fn scan(
    data: &[u8],
    data_base: u64,
    header: &SegmentHeader,
    start: Option<(IndexSummary, SparseIndexes)>,
    interval: u64,
) -> Scan {
    let (mut s, mut idx) = start.unwrap_or_else(|| {
        (
            IndexSummary {
                base_index: header.base_index,
                generation: header.generation,
                covered_len: SEGMENT_HEADER_LEN,
                last_index: header.base_index - 1,
                last_term: header.prev_term,
                next_offset: header.base_offset,
                last_entry_pos: 0,
                max_timestamp: i64::MIN,
            },
            SparseIndexes::new(),
        )
    });
    let mut pos = s.covered_len;
    assert!(pos >= data_base, "scan must start inside the data");
    let end = data_base + data.len() as u64;
    let mut stop = None;
    while pos < end {
        let h = match check_frame(&data[(pos - data_base) as usize..], MAX_FRAME_LEN) {
            Ok(h) => h,
            Err(crate::entry::FrameError::Incomplete) => {
                stop = Some((pos, "incomplete frame at the end of the file".to_string()));
                break;
            }
            Err(crate::entry::FrameError::Invalid(r)) => {
                stop = Some((pos, r));
                break;
            }
        };
        let problem = if s.last_index.checked_add(1) != Some(h.index) {
            Some(format!(
                "frame has index {}, expected {}",
                h.index,
                s.last_index.saturating_add(1)
            ))
        } else if h.term < s.last_term {
            Some(format!(
                "frame term {} is below the previous term {}",
                h.term, s.last_term
            ))
        } else if h.first_offset != s.next_offset {
            Some(format!(
                "frame first offset {}, expected {}",
                h.first_offset, s.next_offset
            ))
        } else if (h.kind == EntryKind::Records) != (h.record_count > 0) {
            Some("record count does not match the entry kind".to_string())
        } else {
            None
        };
        if let Some(p) = problem {
            stop = Some((pos, p));
            break;
        }
        let records = (h.kind == EntryKind::Records).then_some((h.first_offset, h.max_timestamp));
        idx.on_append(h.index, pos, records, interval);
        s.last_index = h.index;
        s.last_term = h.term;
        s.next_offset = h.next_offset();
        s.last_entry_pos = pos;
        pos += h.total_len();
        s.covered_len = pos;
    }
    s.max_timestamp = idx.max_timestamp;
    Scan {
        summary: s,
        indexes: idx,
        stop,
    }
}

/// Scans a whole sealed segment; any bad frame is corruption.
pub(crate) fn scan_strict(
    path: &Path,
    data: &[u8],
    header: &SegmentHeader,
    interval: u64,
) -> Result<(IndexSummary, SparseIndexes)> {
    let sc = scan(data, 0, header, None, interval);
    if let Some((pos, reason)) = sc.stop {
        return Err(corruption(
            path,
            pos,
            format!("in a sealed segment: {reason}"),
        ));
    }
    Ok((sc.summary, sc.indexes))
}

/// Checks an index summary against its segment cheaply: identity, lengths, and the last
/// frame (read and CRC-checked).
fn summary_matches(
    s: &IndexSummary,
    header: &SegmentHeader,
    file: &std::fs::File,
    file_len: u64,
    sealed: bool,
) -> bool {
    if s.base_index != header.base_index || s.generation != header.generation {
        return false;
    }
    if (sealed && s.covered_len != file_len) || s.covered_len > file_len {
        return false;
    }
    if s.last_index < header.base_index {
        return s.last_index == header.base_index - 1
            && s.covered_len == SEGMENT_HEADER_LEN
            && s.next_offset == header.base_offset
            && s.last_term == header.prev_term;
    }
    if s.last_entry_pos < SEGMENT_HEADER_LEN || s.last_entry_pos >= s.covered_len {
        return false;
    }
    let len = (s.covered_len - s.last_entry_pos) as usize;
    if len as u64 > MAX_FRAME_LEN + 4 {
        return false;
    }
    let mut buf = vec![0u8; len];
    if file.read_exact_at(&mut buf, s.last_entry_pos).is_err() {
        return false;
    }
    match check_frame(&buf, MAX_FRAME_LEN) {
        Ok(h) => {
            h.total_len() as usize == len
                && h.index == s.last_index
                && h.term == s.last_term
                && h.next_offset() == s.next_offset
        }
        Err(_) => false,
    }
}

/// Everything `LogStore::open` needs from the directory.
pub(crate) struct Recovered {
    pub segments: Vec<Segment>,
    pub generation: u64,
    pub report: RecoveryReport,
}

/// A segment file found in the directory (its descriptor is not kept: a directory may hold
/// more segments than a process may have open files).
struct Found {
    path: PathBuf,
    header: SegmentHeader,
    len: u64,
}

/// Opens (and repairs) the segments of `dir`; creates the first segment when there is none.
/// Only the active segment's file stays open; sealed ones join `open` when read.
///
/// `saved_commit` is the commit index of the hard state (0 when there is none or it is
/// damaged): a bad frame at or below it held a committed entry, so it is damage, never a torn
/// tail.
pub(crate) fn recover(
    dir: &Path,
    cfg: &StoreConfig,
    open: &Arc<OpenSegments>,
    saved_commit: u64,
) -> Result<Recovered> {
    let mut report = RecoveryReport::default();
    let mut seg_bases = Vec::new();
    let mut index_bases = Vec::new();
    for ent in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let ent = ent.map_err(io_err(dir))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".tmp") {
            remove_if_exists(&ent.path())?;
            report.removed_files += 1;
            continue;
        }
        match parse_file_name(name) {
            Some((b, true)) => seg_bases.push(b),
            Some((b, false)) => index_bases.push(b),
            None => {}
        }
    }
    seg_bases.sort_unstable();
    let mut dir_dirty = false;
    for b in &index_bases {
        if seg_bases.binary_search(b).is_err() {
            remove_if_exists(&dir.join(index_file_name(*b)))?;
            report.removed_files += 1;
            dir_dirty = true;
        }
    }

    let mut found = Vec::with_capacity(seg_bases.len());
    for &b in &seg_bases {
        let path = dir.join(crate::segment::segment_file_name(b));
        let file = File::open(&path).map_err(io_err(&path))?;
        let len = file.metadata().map_err(io_err(&path))?.len();
        let mut buf = vec![0u8; (SEGMENT_HEADER_LEN.min(len)) as usize];
        file.read_exact_at(&mut buf, 0).map_err(io_err(&path))?;
        let header = SegmentHeader::decode(&buf, &path)?;
        if header.base_index != b {
            return Err(crate::LogStoreError::SegmentNameMismatch {
                path,
                name_index: b,
                header_index: header.base_index,
            });
        }
        if header.base_index == 0 {
            return Err(corruption(
                &path,
                8,
                "base index 0 (Raft indexes start at 1)",
            ));
        }
        found.push(Found { path, header, len });
    }

    if found.is_empty() {
        let header = SegmentHeader::new(1, 0, 0, 0, now_ms());
        let (path, file) = create_segment_file(dir, &header)?;
        report.segments = 1;
        return Ok(Recovered {
            segments: vec![Segment::new_empty(header, path, file, dir, open)],
            generation: 0,
            report,
        });
    }

    let generation = found.iter().map(|f| f.header.generation).max().unwrap_or(0);
    let mut kept = Vec::with_capacity(found.len());
    for f in found {
        if f.header.generation < generation {
            remove_if_exists(&dir.join(index_file_name(f.header.base_index)))?;
            remove_if_exists(&f.path)?;
            report.removed_files += 1;
            dir_dirty = true;
        } else {
            kept.push(f);
        }
    }
    if dir_dirty {
        fsync_dir(dir)?;
    }

    let n = kept.len();
    let mut segments: Vec<Segment> = Vec::with_capacity(n);
    let mut kept = kept.into_iter().enumerate().peekable();
    while let Some((i, f)) = kept.next() {
        let index_path = dir.join(index_file_name(f.header.base_index));
        let seg = if i + 1 < n {
            match open_sealed(dir, f, &index_path, cfg, open, &mut report)? {
                Sealed::Intact(seg) => seg,
                Sealed::Damaged { f, scan } => {
                    // Keep the intact prefix: cut the log before the first bad entry, remove
                    // the segments after it, and let the Raft layer fetch the rest again.
                    let later: Vec<Found> = kept.by_ref().map(|(_, f)| f).collect();
                    let seg = cut_at_damage(dir, f, later, scan, cfg, open, &mut report)?;
                    segments.push(seg);
                    break;
                }
            }
        } else {
            open_active(dir, f, &index_path, cfg, open, saved_commit, &mut report)?
        };
        if let Some(prev) = segments.last() {
            let h = &seg.header;
            if h.base_index != prev.last_index + 1
                || h.base_offset != prev.next_offset
                || h.prev_term != prev.last_term
            {
                return Err(corruption(
                    &seg.path,
                    0,
                    format!(
                        "segment does not continue {}: starts at index {} offset {} (prev term \
                         {}), previous ends at index {} offset {} term {}",
                        prev.path.display(),
                        h.base_index,
                        h.base_offset,
                        h.prev_term,
                        prev.last_index,
                        prev.next_offset,
                        prev.last_term
                    ),
                ));
            }
        }
        segments.push(seg);
    }
    report.segments = segments.len();
    Ok(Recovered {
        segments,
        generation,
        report,
    })
}

/// A sealed segment as recovery found it.
enum Sealed {
    Intact(Segment),
    /// Its scan stopped at a bad frame (the scan holds the intact prefix).
    Damaged {
        f: Found,
        scan: Scan,
    },
}

fn open_sealed(
    dir: &Path,
    f: Found,
    index_path: &Path,
    cfg: &StoreConfig,
    open: &Arc<OpenSegments>,
    report: &mut RecoveryReport,
) -> Result<Sealed> {
    let file = File::open(&f.path).map_err(io_err(&f.path))?;
    if let Some(s) = read_index_summary(index_path) {
        if summary_matches(&s, &f.header, &file, f.len, true) {
            return Ok(Sealed::Intact(Segment::from_summary(
                f.header, f.path, None, dir, open, &s, None,
            )));
        }
    }
    // Rebuild by scanning the whole segment (strict: it was synced before it was sealed).
    report.rebuilt_indexes += 1;
    let sc = {
        // SAFETY: a sealed segment is never written or truncated while the store is open
        // (the directory lock keeps other stores out); the map is dropped at the end of the
        // block.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(&f.path))?;
        let data = map.get(..f.len as usize).unwrap_or(&map[..]);
        scan(data, 0, &f.header, None, cfg.index_interval_bytes)
    };
    if sc.stop.is_some() {
        return Ok(Sealed::Damaged { f, scan: sc });
    }
    let _ = write_index_file(index_path, &sc.summary, &sc.indexes);
    Ok(Sealed::Intact(Segment::from_summary(
        f.header,
        f.path,
        None,
        dir,
        open,
        &sc.summary,
        Some(sc.indexes),
    )))
}

/// The last (index, term) of the frames of a segment file read from its header on, as far
/// as they are intact and continue each other.
fn segment_end(f: &Found) -> Result<(u64, u64)> {
    let file = File::open(&f.path).map_err(io_err(&f.path))?;
    // SAFETY: recovery runs under the directory lock before anything writes the file; the
    // map is dropped when this returns.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(&f.path))?;
    let start = (f.header.base_index - 1, f.header.prev_term);
    let end = frames_end(&map, SEGMENT_HEADER_LEN, start);
    Ok((end.last_index, end.last_term))
}

/// Where a run of intact frames that continue each other ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FramesEnd {
    last_index: u64,
    last_term: u64,
    /// The greatest `FrameHeader::synced_through` among the frames walked (meaningful in a
    /// segment whose frames carry a sync lag): the segment was synced at least that far.
    synced_through: u64,
}

/// Walks intact frames from `pos` that continue (`last_index`, `last_term`); returns the last
/// and how far the walked frames say the segment was synced.
fn frames_end(data: &[u8], mut pos: u64, (last_index, last_term): (u64, u64)) -> FramesEnd {
    let mut end = FramesEnd {
        last_index,
        last_term,
        synced_through: 0,
    };
    while let Some(rest) = data.get(pos as usize..) {
        match check_frame(rest, MAX_FRAME_LEN) {
            Ok(h) if end.last_index.checked_add(1) == Some(h.index) && h.term >= end.last_term => {
                end.last_index = h.index;
                end.last_term = h.term;
                end.synced_through = end.synced_through.max(h.synced_through(pos));
                pos += h.total_len();
            }
            _ => break,
        }
    }
    end
}

/// Looks for an intact frame of index `expected` (term at least `min_term`) after the bad
/// frame at `bad_pos`: first where the bad frame's own length points, then at every byte
/// position (a damaged length field). Some: the log continues after damaged data, which is
/// corruption, not a torn tail.
fn continuation(data: &[u8], bad_pos: u64, expected: u64, min_term: u64) -> Option<u64> {
    let fits = |p: usize| -> bool {
        let Some(rest) = data.get(p..) else {
            return false;
        };
        match parse_header(rest, MAX_FRAME_LEN) {
            Ok(h) if h.index == expected && h.term >= min_term => {
                check_frame(rest, MAX_FRAME_LEN).is_ok()
            }
            _ => false,
        }
    };
    let bad = bad_pos as usize;
    if let Ok(h) = parse_header(data.get(bad..)?, MAX_FRAME_LEN) {
        let next = bad + h.total_len() as usize;
        if fits(next) {
            return Some(next as u64);
        }
    }
    (bad + 1..data.len()).find(|&p| fits(p)).map(|p| p as u64)
}

/// Cuts the log before the bad frame of a damaged sealed segment: writes the repair marker
/// (with the end the log had, read from its last segment), removes the later segments
/// (newest first), truncates the damaged one to its intact prefix and opens it as the active
/// segment.
fn cut_at_damage(
    dir: &Path,
    f: Found,
    later: Vec<Found>,
    sc: Scan,
    cfg: &StoreConfig,
    open: &Arc<OpenSegments>,
    report: &mut RecoveryReport,
) -> Result<Segment> {
    let (pos, reason) = sc.stop.clone().expect("a damaged scan stopped");
    let first_bad_index = sc.summary.last_index + 1;
    // Durable before anything is cut, as a truncation does: the cut may lie below the
    // cleaner's checkpoint (a compacted segment damaged), and the range the leader sends
    // again must be mapped before a tombstone in it can go.
    crate::compaction::checkpoint::CleanerCheckpoint::lower(dir, sc.summary.next_offset)?;
    let lost = match later.last() {
        Some(last) => segment_end(last)?,
        None => segment_end(&f)?,
    };
    let marker = crate::repair::save(
        dir,
        RepairMarker {
            first_bad_index,
            lost_last_index: lost.0.max(first_bad_index),
            lost_last_term: lost.1,
        },
    )?;
    for l in later.iter().rev() {
        remove_if_exists(&dir.join(index_file_name(l.header.base_index)))?;
        remove_if_exists(&l.path)?;
        report.removed_files += 1;
    }
    let index_path = dir.join(index_file_name(f.header.base_index));
    remove_if_exists(&index_path)?;
    fsync_dir(dir)?;
    {
        let file = open_rw(&f.path)?;
        file.set_len(pos).map_err(io_err(&f.path))?;
        fdatasync(&file, &f.path);
    }
    report.damage = Some(DamageFound {
        path: f.path.clone(),
        offset: pos,
        reason: format!("in a sealed segment: {reason}"),
        first_bad_index,
        marker,
    });
    let f = Found { len: pos, ..f };
    // What is left is the intact prefix the scan accepted: its tail scan stops nowhere, so
    // there is nothing for the saved commit to decide.
    open_active(dir, f, &index_path, cfg, open, 0, report)
}

/// Bad bytes in the active segment's tail that must be repaired, not cut as a torn tail.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TailDamage {
    /// The end the log had (a lower bound when the frames after the bad one do not tell).
    lost_last_index: u64,
    lost_last_term: u64,
    /// Why the bad frame counts as damage.
    why: String,
}

/// Classes where the tail scan of the active segment stopped (`sc.stop`, at a bad frame):
/// `None` for a torn tail (or the reserve's zeros), to be cut without a marker; `Some` for
/// damage, to be cut after a repair marker.
///
/// Damage is a bad frame that a completed sync covered, or one holding a committed entry:
/// * version 2: an intact frame after it that continues the log says (its sync lag) that the
///   segment was synced past the bad frame's position when it was written;
/// * version 1 (no sync lags): an intact frame after it continues the log at all (the rule
///   before sync lags existed: such a file cannot tell an out-of-order torn write from
///   damage, and keeps being read as it was);
/// * any version: the bad frame's index (the one after the last intact entry) is at or below
///   the hard state's saved commit.
fn tail_damage(
    map: &[u8],
    header: &SegmentHeader,
    sc: &Scan,
    zero_tail: bool,
    saved_commit: u64,
) -> Option<TailDamage> {
    let (bad_pos, _) = sc.stop.as_ref()?;
    if zero_tail {
        return None;
    }
    let first_bad_index = sc.summary.last_index.saturating_add(1);
    let last_term = sc.summary.last_term;
    let after = continuation(map, *bad_pos, first_bad_index.saturating_add(1), last_term)
        .map(|next| frames_end(map, next, (first_bad_index, last_term)));
    let why = match after {
        Some(_) if !header.has_sync_lag() => "in the middle of the active segment".to_string(),
        Some(end) if end.synced_through > *bad_pos => format!(
            "in synced bytes of the active segment (a later entry was written after a sync \
             through byte {})",
            end.synced_through
        ),
        _ if first_bad_index <= saved_commit => format!(
            "in the active segment at index {first_bad_index}, at or below the saved commit \
             {saved_commit}"
        ),
        _ => return None,
    };
    let (end_index, end_term) = after.map_or((first_bad_index, last_term), |e| {
        (e.last_index, e.last_term)
    });
    Some(TailDamage {
        lost_last_index: end_index.max(first_bad_index).max(saved_commit),
        lost_last_term: end_term,
        why,
    })
}

/// Opens the active segment: scans its tail from the checkpoint, cuts a torn tail, and cuts
/// damage after writing a repair marker (see [`tail_damage`]).
fn open_active(
    dir: &Path,
    f: Found,
    index_path: &Path,
    cfg: &StoreConfig,
    open: &Arc<OpenSegments>,
    saved_commit: u64,
    report: &mut RecoveryReport,
) -> Result<Segment> {
    let file = open_rw(&f.path)?;
    let start = match read_index_file(index_path) {
        Some((s, idx)) if summary_matches(&s, &f.header, &file, f.len, false) => Some((s, idx)),
        Some(_) => {
            report.rebuilt_indexes += 1;
            None
        }
        None => {
            if index_path.exists() {
                report.rebuilt_indexes += 1;
            }
            None
        }
    };
    let from = start
        .as_ref()
        .map_or(SEGMENT_HEADER_LEN, |(s, _)| s.covered_len);
    let (sc, zero_tail, damage) = {
        // SAFETY: the directory lock makes this store the only writer, and the file is not
        // written or truncated while this map exists (it is dropped at the end of the block).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(&f.path))?;
        let data = map.get(from as usize..).unwrap_or(&[]);
        let sc = scan(data, from, &f.header, start, cfg.index_interval_bytes);
        let rest = data
            .get((sc.summary.covered_len - from) as usize..)
            .unwrap_or(&[]);
        let zero_tail = rest.iter().all(|&b| b == 0);
        let damage = tail_damage(&map, &f.header, &sc, zero_tail, saved_commit);
        (sc, zero_tail, damage)
    };
    if let (Some(damage), Some((pos, reason))) = (damage, &sc.stop) {
        let first_bad_index = sc.summary.last_index.saturating_add(1);
        let marker = crate::repair::save(
            dir,
            RepairMarker {
                first_bad_index,
                lost_last_index: damage.lost_last_index,
                lost_last_term: damage.lost_last_term,
            },
        )?;
        report.damage = Some(DamageFound {
            path: f.path.clone(),
            offset: *pos,
            reason: format!("{}: {reason}", damage.why),
            first_bad_index,
            marker,
        });
    }
    let end = sc.summary.covered_len;
    report.tail_bytes_scanned = end - from;
    if end < f.len && zero_tail {
        // Zeros written ahead of the data by the reserve (`reserve.rs`), or an append whose
        // bytes never reached the disk: either way nothing to cut, and the zeros stay as
        // reserve for the next appends.
        report.preallocated_bytes = f.len - end;
    } else if end < f.len {
        report.truncated_bytes = f.len - end;
        report.truncation_reason = sc.stop.clone();
        file.set_len(end).map_err(io_err(&f.path))?;
    }
    // Whatever recovery accepted may so far live only in the page cache (after a process
    // crash): make it durable before anything built on it is acknowledged.
    fdatasync(&file, &f.path);
    let covered = sc.summary;
    if report.tail_bytes_scanned >= cfg.checkpoint_bytes {
        // Checkpoint now, so the next open does not scan the same tail again.
        let _ = write_index_file(index_path, &covered, &sc.indexes);
    }
    Ok(Segment::from_summary(
        f.header,
        f.path,
        Some(file),
        dir,
        open,
        &covered,
        Some(sc.indexes),
    ))
}
