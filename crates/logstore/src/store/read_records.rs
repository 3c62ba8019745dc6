//! Reading by Kafka offset: whole record batches for consumers, and the offset for a
//! timestamp.

use std::path::Path;

use bytes::Bytes;

use super::LogStore;
use crate::batch;
use crate::entry::{entry_from_frame, Entry};
use crate::error::{corruption, LogStoreError, Result};
use crate::segment::SEGMENT_HEADER_LEN;

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

impl LogStore {
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
                    // A compacted entry may hold fewer batches than offsets, or none.
                    let stored = batch::stored_batches(&e.payload, e.first_offset, e.next_offset())
                        .map_err(|(at, r)| corruption(&seg.path, pos + at as u64, r))?;
                    for b in stored {
                        if b.info.max_timestamp >= timestamp_ms {
                            // Records below the records floor are deleted: the first one
                            // still readable stands in for them.
                            return Ok(Some(b.base.max(self.records_floor)));
                        }
                    }
                }
                pos += h.total_len();
            }
        }
        Ok(None)
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
    // A compacted entry may hold fewer batches than offsets (gaps), or none at all.
    let stored =
        batch::stored_batches(&e.payload, e.first_offset, e.next_offset()).map_err(|(at, r)| {
            corruption(
                path,
                at as u64,
                format!("entry {}: stored record batches: {r}", e.index),
            )
        })?;
    let mut run: Option<(usize, usize)> = None;
    let mut keep_going = true;
    for sb in stored {
        let b = sb.info;
        let first = sb.base;
        let last = sb.end() - 1;
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
