//! Building the key map over the dirty part of the log: the latest offset of every key
//! written from the first dirty offset on, in the cleanable sealed segments, until the map's
//! budget is used up; and, over the same batches, each producer id's latest batch. Records
//! of aborted transactions are not mapped: they never supersede anything (Kafka's rule).

use crate::batch::stored_batches;
use crate::compaction::key_map::KeyMap;
use crate::compaction::producers::ProducerLastBatches;
use crate::compaction::store_api::SealedView;
use crate::compaction::transactions::AbortedIndex;
use crate::compaction::{AbortedRange, RecordCompactor, RecordView, TxnBatch};
use crate::entry::{check_frame, EntryKind, FRAME_HEADER_LEN};
use crate::error::{corruption, LogStoreError, Result};
use crate::segment::{MAX_FRAME_LEN, SEGMENT_HEADER_LEN};

/// What one pass mapped (the keys are in the caller's [`KeyMap`]) and the offsets it covers.
pub(crate) struct DirtyMap {
    /// Every keyed record in `[start, end)` is in the map (with the latest offset of its
    /// key); no offset at or past `end` is.
    pub end: u64,
    /// The base offset of each producer's latest data batch among the batches mapped.
    pub producers: ProducerLastBatches,
    /// Segment bytes read.
    pub bytes_read: u64,
}

/// Maps into `map` (emptied first, for a pass of `map_bytes`) the keyed, non-control records
/// from offset `start` on in `segments` (sealed, all cleanable, in log order), except those
/// of the transactional batches `aborted` covers, and the producer of every data batch
/// reaching past `start`.
/// Stops at the first record whose key the full map refuses (`end` is then that record's
/// offset; its batch keeps that record, so recording its producer is sound), else at the end
/// of the last segment.
pub(crate) fn build_map(
    segments: &[SealedView],
    start: u64,
    codec: &dyn RecordCompactor,
    map: &mut KeyMap,
    map_bytes: usize,
    aborted: &[AbortedRange],
    throttle: &mut dyn FnMut(u64),
) -> Result<DirtyMap> {
    map.reset(map_bytes);
    let mut aborted = AbortedIndex::new(aborted);
    let mut producers = ProducerLastBatches::default();
    let mut bytes_read = 0u64;
    let mut full_at: Option<u64> = None;
    let mut end = start;
    for seg in segments.iter().filter(|s| s.next_offset > start) {
        let data = &seg.data;
        let mut pos = SEGMENT_HEADER_LEN as usize;
        while pos < data.len() {
            let h = check_frame(&data[pos..], MAX_FRAME_LEN).map_err(|e| {
                corruption(&seg.path, pos as u64, format!("in a sealed segment: {e:?}"))
            })?;
            let frame = &data[pos..pos + h.total_len() as usize];
            if h.kind == EntryKind::Records && h.next_offset() > start {
                bytes_read += frame.len() as u64;
                throttle(frame.len() as u64);
                let ctx_end = FRAME_HEADER_LEN + h.context_len as usize;
                let payload = &frame[ctx_end..];
                let batches = stored_batches(payload, h.first_offset, h.next_offset())
                    .map_err(|(at, r)| corruption(&seg.path, (pos + ctx_end + at) as u64, r))?;
                for b in batches.iter().filter(|b| b.end() > start) {
                    let bytes = &payload[b.info.pos..b.info.pos + b.info.len];
                    let is_aborted = match codec.transaction_batch(bytes) {
                        Some(TxnBatch::Data { producer_id }) => {
                            aborted.is_aborted(producer_id, b.base)
                        }
                        _ => false,
                    };
                    let mut add = |r: RecordView<'_>| {
                        if full_at.is_some() || is_aborted || r.control || r.offset < start {
                            return;
                        }
                        if let Some(key) = r.key {
                            if map.insert(key, r.offset).is_err() {
                                full_at = Some(r.offset);
                            }
                        }
                    };
                    codec
                        .visit(bytes, &mut add)
                        .map_err(|reason| LogStoreError::Compaction {
                            path: seg.path.clone(),
                            offset: (pos + ctx_end + b.info.pos) as u64,
                            reason,
                        })?;
                    if let Some(id) = codec.producer_id(bytes) {
                        producers.record(id, b.base);
                    }
                    if let Some(at) = full_at {
                        return Ok(DirtyMap {
                            end: at,
                            producers,
                            bytes_read,
                        });
                    }
                }
            }
            pos += frame.len();
        }
        end = seg.next_offset;
    }
    Ok(DirtyMap {
        end: end.max(start),
        producers,
        bytes_read,
    })
}
