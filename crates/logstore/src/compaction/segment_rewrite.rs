//! Rewriting one sealed segment without the records the cleaner drops, and swapping the new
//! file in, crash-safe.
//!
//! Every frame is kept (index, term, kind, context, first offset, record count and max
//! timestamp unchanged); a `Records` frame whose batches lose records gets the shrunk
//! payload, possibly empty, and a new CRC. Frames that lose nothing are copied byte for byte.
//! The new file has the old 64-byte header and is written under a temporary name through the
//! file-system seam, then fdatasynced; it is only created once the first change is found, so
//! a segment with nothing to remove costs a read and no write.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::batch::{stored_batches, walk};
use crate::compaction::producers::ProducerLastBatches;
use crate::compaction::{RecordCompactor, RecordView, RetainOutcome};
use crate::entry::{check_frame, encode_frame, EntryKind, FrameMeta, FRAME_HEADER_LEN};
use crate::error::{corruption, io_err, LogStoreError, Result};
use crate::fsutil::{fdatasync, fsync_dir, remove_if_exists};
use crate::index::{IndexSummary, SparseIndexes};
use crate::segment::{SegmentHeader, MAX_FRAME_LEN, SEGMENT_HEADER_LEN};

/// Suffix of a rewritten segment's temporary file (`<segment>.log.cleaned.tmp`); recovery
/// deletes every `*.tmp` file at open.
const TMP_SUFFIX: &str = ".cleaned.tmp";
/// Bytes collected before one write (and one throttle call).
const WRITE_CHUNK: usize = 1 << 20;

/// A segment rewritten into a temporary file, durable, not yet swapped in.
#[derive(Debug)]
pub(crate) struct RewrittenSegment {
    /// The temporary file holding the new segment.
    pub tmp_path: PathBuf,
    /// Summary of the new file (only its length and last frame position differ from the
    /// old one's).
    pub summary: IndexSummary,
    /// Sparse indexes of the new file.
    pub indexes: SparseIndexes,
    /// Records removed.
    pub records_removed: u64,
}

/// What a pass does with one batch, decided from its header before its records are read
/// (`store_api.rs` decides: aborted transactions and markers, see `transactions.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchFate {
    /// Its records are kept or removed one by one (`keep`).
    Records,
    /// A data batch of an aborted transaction: every record goes (the header of its
    /// producer's last batch stays, as for any batch that loses every record).
    Aborted,
    /// A marker whose transaction has no batch left: given this delete horizon.
    SetHorizon(i64),
    /// A marker past its delete horizon: removed whole.
    Remove,
}

/// What [`rewrite_segment`] is given about the segment.
pub(crate) struct SegmentSource<'a> {
    pub dir: &'a Path,
    pub path: &'a Path,
    pub header: &'a SegmentHeader,
    /// The whole segment file (its `len` bytes).
    pub data: &'a [u8],
    pub index_interval: u64,
}

/// Writes the new file as it is produced: nothing until the first change, then the
/// unchanged prefix and everything after it, in chunks of [`WRITE_CHUNK`].
struct Output<'a> {
    tmp_path: PathBuf,
    file: Option<File>,
    buf: Vec<u8>,
    /// Length of the new file so far (written or buffered).
    len: u64,
    /// Bytes written to the file.
    written: u64,
    throttle: &'a mut dyn FnMut(u64),
}

impl Output<'_> {
    fn flush(&mut self) -> Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if self.buf.is_empty() {
            return Ok(());
        }
        crate::fs::fs()
            .write_all_at(file, &self.tmp_path, &self.buf, self.written)
            .map_err(io_err(&self.tmp_path))?;
        self.written += self.buf.len() as u64;
        (self.throttle)(self.buf.len() as u64);
        self.buf.clear();
        Ok(())
    }

    fn push(&mut self, bytes: &[u8]) -> Result<()> {
        self.len += bytes.len() as u64;
        if self.file.is_some() {
            self.buf.extend_from_slice(bytes);
            if self.buf.len() >= WRITE_CHUNK {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Starts the file with `prefix` (the unchanged bytes so far, header included).
    fn start(&mut self, prefix: &[u8]) -> Result<()> {
        debug_assert_eq!(prefix.len() as u64, self.len);
        let f = File::create(&self.tmp_path).map_err(io_err(&self.tmp_path))?;
        self.file = Some(f);
        for chunk in prefix.chunks(WRITE_CHUNK) {
            self.buf.extend_from_slice(chunk);
            self.flush()?;
        }
        Ok(())
    }
}

/// Rewrites the sealed segment `src`, each batch as `fate` decides (called once per batch, in
/// log order, with its base offset and bytes), keeping of a [`BatchFate::Records`] batch the
/// records `keep` accepts (see [`RecordCompactor::retain`]); a producer's batch that keeps no
/// record keeps its header only when `producers` knows no later batch of its producer.
/// Returns `None` when no batch changed (no file is left behind), else the new segment in a
/// temporary file, fdatasynced, for [`swap_in`]. `throttle` is called with the bytes of every
/// chunk read and written. On error the temporary file is removed and the segment is as it
/// was.
pub(crate) fn rewrite_segment(
    src: &SegmentSource<'_>,
    codec: &dyn RecordCompactor,
    keep: &mut dyn FnMut(RecordView<'_>) -> bool,
    fate: &mut dyn FnMut(u64, &[u8]) -> BatchFate,
    delete_horizon_ms: Option<i64>,
    producers: &ProducerLastBatches,
    throttle: &mut dyn FnMut(u64),
) -> Result<Option<RewrittenSegment>> {
    let tmp_path = src.dir.join(format!(
        "{}{TMP_SUFFIX}",
        src.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let mut out = Output {
        tmp_path: tmp_path.clone(),
        file: None,
        buf: Vec::with_capacity(WRITE_CHUNK),
        len: 0,
        written: 0,
        throttle,
    };
    let rules = Rules {
        keep,
        fate,
        delete_horizon_ms,
        producers,
    };
    let result = rewrite_into(src, codec, rules, &mut out);
    match result {
        Ok(Some(mut r)) => {
            out.flush()?;
            let file = out.file.take().expect("a rewritten segment has a file");
            fdatasync(&file, &tmp_path);
            r.tmp_path = tmp_path;
            Ok(Some(r))
        }
        Ok(None) => Ok(None),
        Err(e) => {
            drop(out.file.take());
            let _ = std::fs::remove_file(&tmp_path);
            Err(e)
        }
    }
}

/// What decides the fate of the batches and records of a rewrite.
struct Rules<'a, 'b> {
    keep: &'a mut dyn FnMut(RecordView<'_>) -> bool,
    fate: &'a mut dyn FnMut(u64, &[u8]) -> BatchFate,
    delete_horizon_ms: Option<i64>,
    producers: &'b ProducerLastBatches,
}

/// One batch as `rules` make it: the outcome and the records removed.
fn retain_batch(
    codec: &dyn RecordCompactor,
    rules: &mut Rules<'_, '_>,
    base: u64,
    bytes: &[u8],
) -> std::result::Result<(RetainOutcome, u64), String> {
    let producer_last = codec
        .producer_id(bytes)
        .is_some_and(|id| rules.producers.is_last(id, base));
    let mut refused = 0u64;
    let outcome = match (rules.fate)(base, bytes) {
        BatchFate::Records => {
            let keep = &mut *rules.keep;
            let mut counting_keep = |r: RecordView<'_>| {
                let k = r.control || keep(r);
                refused += u64::from(!k);
                k
            };
            codec.retain(
                bytes,
                &mut counting_keep,
                rules.delete_horizon_ms,
                producer_last,
            )?
        }
        BatchFate::Aborted => {
            let mut drop_all = |_: RecordView<'_>| {
                refused += 1;
                false
            };
            codec.retain(bytes, &mut drop_all, None, producer_last)?
        }
        BatchFate::SetHorizon(at) => codec.mark_delete_horizon(bytes, at)?,
        BatchFate::Remove => {
            // Checked whole like any batch, and its records counted.
            codec.visit(bytes, &mut |_| refused += 1)?;
            RetainOutcome::Empty
        }
    };
    Ok((outcome, refused))
}

fn rewrite_into(
    src: &SegmentSource<'_>,
    codec: &dyn RecordCompactor,
    mut rules: Rules<'_, '_>,
    out: &mut Output<'_>,
) -> Result<Option<RewrittenSegment>> {
    let data = src.data;
    let header_len = SEGMENT_HEADER_LEN as usize;
    if data.len() < header_len {
        return Err(corruption(src.path, 0, "segment shorter than its header"));
    }
    out.push(&data[..header_len])?;
    (out.throttle)(header_len as u64);
    let mut summary = IndexSummary {
        base_index: src.header.base_index,
        generation: src.header.generation,
        covered_len: SEGMENT_HEADER_LEN,
        last_index: src.header.base_index - 1,
        last_term: src.header.prev_term,
        next_offset: src.header.base_offset,
        last_entry_pos: 0,
        max_timestamp: i64::MIN,
    };
    let mut indexes = SparseIndexes::new();
    let mut removed = 0u64;
    let mut pos = header_len;
    let mut frame_buf = Vec::new();
    while pos < data.len() {
        let h = check_frame(&data[pos..], MAX_FRAME_LEN)
            .map_err(|e| corruption(src.path, pos as u64, format!("in a sealed segment: {e:?}")))?;
        let frame = &data[pos..pos + h.total_len() as usize];
        (out.throttle)(frame.len() as u64);
        let ctx_end = FRAME_HEADER_LEN + h.context_len as usize;
        let payload = &frame[ctx_end..];
        let mut new_payload: Option<Vec<u8>> = None;
        if h.kind == EntryKind::Records {
            let batches = stored_batches(payload, h.first_offset, h.next_offset())
                .map_err(|(at, r)| corruption(src.path, (pos + ctx_end + at) as u64, r))?;
            let mut rebuilt = Vec::with_capacity(payload.len());
            let mut changed = false;
            for b in &batches {
                let bytes = &payload[b.info.pos..b.info.pos + b.info.len];
                let (outcome, refused) =
                    retain_batch(codec, &mut rules, b.base, bytes).map_err(|reason| {
                        LogStoreError::Compaction {
                            path: src.path.to_path_buf(),
                            offset: (pos + ctx_end + b.info.pos) as u64,
                            reason,
                        }
                    })?;
                match outcome {
                    RetainOutcome::Unchanged => rebuilt.extend_from_slice(bytes),
                    RetainOutcome::Rewritten(nb) => {
                        check_rewritten(&nb, b.base, b.end()).map_err(|reason| {
                            LogStoreError::Compaction {
                                path: src.path.to_path_buf(),
                                offset: (pos + ctx_end + b.info.pos) as u64,
                                reason,
                            }
                        })?;
                        rebuilt.extend_from_slice(&nb);
                        changed = true;
                    }
                    RetainOutcome::Empty => changed = true,
                }
                removed += refused;
            }
            if changed {
                new_payload = Some(rebuilt);
            }
        }
        let new_pos = out.len;
        match new_payload {
            None => out.push(frame)?,
            Some(p) => {
                if out.file.is_none() {
                    out.start(&data[..pos])?;
                }
                frame_buf.clear();
                let m = FrameMeta {
                    index: h.index,
                    term: h.term,
                    kind: h.kind,
                    // The new file is synced whole before it is used.
                    sync_lag: 0,
                    first_offset: h.first_offset,
                    record_count: h.record_count,
                    max_timestamp: h.max_timestamp,
                };
                encode_frame(
                    &mut frame_buf,
                    &m,
                    &frame[FRAME_HEADER_LEN..ctx_end],
                    &p,
                    |_| {},
                );
                out.push(&frame_buf)?;
            }
        }
        let records = (h.kind == EntryKind::Records).then_some((h.first_offset, h.max_timestamp));
        indexes.on_append(h.index, new_pos, records, src.index_interval);
        summary.last_index = h.index;
        summary.last_term = h.term;
        summary.next_offset = h.next_offset();
        summary.last_entry_pos = new_pos;
        summary.covered_len = out.len;
        pos += frame.len();
    }
    summary.max_timestamp = indexes.max_timestamp;
    if out.file.is_none() {
        return Ok(None);
    }
    Ok(Some(RewrittenSegment {
        tmp_path: PathBuf::new(),
        summary,
        indexes,
        records_removed: removed,
    }))
}

/// Checks a batch a codec rewrote: exactly one magic-2 batch whose baseOffset is the old
/// one's and whose offsets stay inside the old batch's `[base, end)`.
fn check_rewritten(nb: &[u8], base: u64, end: u64) -> std::result::Result<(), String> {
    let infos = walk(nb).map_err(|(at, r)| format!("rewritten batch, byte {at}: {r}"))?;
    let [info] = infos.as_slice() else {
        return Err(format!("rewritten into {} batches, not one", infos.len()));
    };
    let nbase = crate::batch::base_offset(nb, 0);
    if nbase < 0 || nbase as u64 != base || base + u64::from(info.offset_count) > end {
        return Err(format!(
            "rewritten batch takes offsets {nbase}..+{}, outside the original {base}..{end}",
            info.offset_count
        ));
    }
    Ok(())
}

/// Swaps the rewritten file `tmp` in for the sealed segment at `seg_path`. Crash-safe at
/// every point: a crash leaves the old segment or the new one, never neither.
///
/// The protocol (the new file was fdatasynced by [`rewrite_segment`] before this runs):
/// 1. Remove the segment's index file and fsync the directory. Index files are derived
///    data: recovery rebuilds a missing one by scanning the segment, so a crash from here on
///    with the old segment in place costs a scan; and no index file of the old segment can
///    ever be found next to the new one. (It would be refused anyway, its covered length
///    differing from the file's, but this does not rely on that.)
/// 2. Rename the temporary file over the segment: atomic, the name holds the old file or
///    the new one, both complete and synced. A crash before it leaves the temporary file,
///    which recovery deletes at open (every `*.tmp`).
/// 3. fsync the directory: the rename is durable. Before it a power cut may bring back
///    either file (the old one and its temporary file, removed at open, or the new one).
///
/// `renamed` runs right after the rename (the store takes the new file in), so that the
/// store's view follows the file even when the last step fails. Readers holding slices of
/// the old file's map keep the old inode until they drop them.
pub(crate) fn swap_in(
    dir: &Path,
    seg_path: &Path,
    index_path: &Path,
    tmp: &Path,
    renamed: impl FnOnce(),
) -> Result<()> {
    remove_if_exists(index_path)?;
    fsync_dir(dir)?;
    crate::fs::fs()
        .rename(tmp, seg_path)
        .map_err(io_err(seg_path))?;
    renamed();
    fsync_dir(dir)
}

/// Removes a temporary file of a rewrite that will not be swapped in (best effort: recovery
/// removes it at the next open anyway).
pub(crate) fn discard(tmp: &Path) {
    let _ = remove_if_exists(tmp);
}
