//! The few fields of a Kafka record batch (magic 2) that the store reads or writes.
//!
//! Layout (big-endian), offsets from the start of the batch:
//!
//! ```text
//! @0  baseOffset            i64   rewritten by the store on append (outside the batch CRC)
//! @8  batchLength           i32   bytes after this field; the batch is 12 + batchLength long
//! @12 partitionLeaderEpoch  i32
//! @16 magic                 i8    must be 2
//! @17 crc                   u32   CRC-32C over @21..end (not checked here; the server does)
//! @21 attributes            i16
//! @23 lastOffsetDelta       i32   the batch covers offsets base ..= base + lastOffsetDelta
//! @27 baseTimestamp         i64
//! @35 maxTimestamp          i64
//! @43 producerId            i64
//! @51 producerEpoch         i16
//! @53 baseSequence          i32
//! @57 recordCount           i32
//! @61 records ...
//! ```
//!
//! No dependency on the `kafka-proto` crate: the store only needs these fields.

/// Size of the fixed batch header.
pub(crate) const BATCH_HEADER_LEN: usize = 61;
const LENGTH_OFFSET: usize = 8;
const MAGIC_OFFSET: usize = 16;
const LAST_OFFSET_DELTA_OFFSET: usize = 23;
const MAX_TIMESTAMP_OFFSET: usize = 35;

/// What the store knows about one batch inside a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchInfo {
    /// Byte position of the batch inside the payload.
    pub pos: usize,
    /// Total length of the batch in bytes (12 + batchLength).
    pub len: usize,
    /// Number of offsets the batch takes: lastOffsetDelta + 1.
    pub offset_count: u32,
    /// The batch's maxTimestamp field.
    pub max_timestamp: i64,
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// Reads the base offset of the batch starting at `pos`. The caller guarantees `pos + 8 <= len`.
pub(crate) fn base_offset(payload: &[u8], pos: usize) -> i64 {
    be_i64(payload, pos)
}

/// Walks a payload that must be a whole number (at least one) of magic-2 batches.
///
/// Returns `Err((byte position, reason))` on anything else; never panics on arbitrary bytes.
pub(crate) fn walk(payload: &[u8]) -> Result<Vec<BatchInfo>, (usize, String)> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    if payload.is_empty() {
        return Err((0, "a Records entry needs at least one record batch".into()));
    }
    while pos < payload.len() {
        let rest = payload.len() - pos;
        if rest < BATCH_HEADER_LEN {
            return Err((
                pos,
                format!("{rest} trailing bytes are shorter than a batch header"),
            ));
        }
        let batch_length = be_i32(payload, pos + LENGTH_OFFSET);
        let total = 12i64 + i64::from(batch_length);
        if batch_length < 0 || (total as u64) < BATCH_HEADER_LEN as u64 {
            return Err((pos, format!("batchLength {batch_length} is too small")));
        }
        if total as u64 > rest as u64 {
            return Err((
                pos,
                format!("batch of {total} bytes overruns the payload ({rest} left)"),
            ));
        }
        let magic = payload[pos + MAGIC_OFFSET] as i8;
        if magic != 2 {
            return Err((pos, format!("magic {magic}, only magic 2 is supported")));
        }
        let delta = be_i32(payload, pos + LAST_OFFSET_DELTA_OFFSET);
        if delta < 0 {
            return Err((pos, format!("negative lastOffsetDelta {delta}")));
        }
        out.push(BatchInfo {
            pos,
            len: total as usize,
            offset_count: delta as u32 + 1,
            max_timestamp: be_i64(payload, pos + MAX_TIMESTAMP_OFFSET),
        });
        pos += total as usize;
    }
    Ok(out)
}

/// One stored batch of an entry, placed at its offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredBatch {
    /// Where the batch is inside the payload, its length, offset count and max timestamp.
    pub info: BatchInfo,
    /// Its baseOffset (written by the store on append; kept by compaction).
    pub base: u64,
}

impl StoredBatch {
    /// The offset after the batch's last offset.
    pub fn end(&self) -> u64 {
        self.base + u64::from(self.info.offset_count)
    }
}

/// The batches of a stored `Records` entry taking offsets `[first_offset, next_offset)`,
/// with their base offsets. A compacted entry may hold fewer batches than offsets (gaps
/// between and around them) or none at all (an empty payload). The batches must lie inside
/// the range in ascending order, else `Err((byte position, reason))`. Never panics.
pub(crate) fn stored_batches(
    payload: &[u8],
    first_offset: u64,
    next_offset: u64,
) -> Result<Vec<StoredBatch>, (usize, String)> {
    if payload.is_empty() {
        return Ok(Vec::new());
    }
    let mut at = first_offset;
    let mut out = Vec::new();
    for info in walk(payload)? {
        let base = base_offset(payload, info.pos);
        if base < 0 {
            return Err((info.pos, format!("negative base offset {base}")));
        }
        // A non-negative i64 plus a u32 count cannot overflow a u64.
        let b = StoredBatch {
            info,
            base: base as u64,
        };
        if b.base < at || b.end() > next_offset {
            return Err((
                info.pos,
                format!(
                    "batch at offsets {base}..{} lies outside the entry's offsets {at}..{next_offset}",
                    b.end()
                ),
            ));
        }
        at = b.end();
        out.push(b);
    }
    Ok(out)
}

/// Writes `base` into the baseOffset field of the batch at `pos`.
pub(crate) fn set_base_offset(payload: &mut [u8], pos: usize, base: u64) {
    payload[pos..pos + 8].copy_from_slice(&(base as i64).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(records: i32, max_ts: i64, extra: usize) -> Vec<u8> {
        let len = BATCH_HEADER_LEN + extra;
        let mut b = vec![0u8; len];
        b[8..12].copy_from_slice(&((len - 12) as i32).to_be_bytes());
        b[16] = 2;
        b[23..27].copy_from_slice(&(records - 1).to_be_bytes());
        b[35..43].copy_from_slice(&max_ts.to_be_bytes());
        b[57..61].copy_from_slice(&records.to_be_bytes());
        b
    }

    #[test]
    fn walks_and_rewrites() {
        let mut p = batch(3, 10, 5);
        p.extend(batch(2, 20, 0));
        let infos = walk(&p).unwrap();
        assert_eq!(infos.len(), 2);
        assert_eq!(infos[0].offset_count, 3);
        assert_eq!(infos[1].pos, 66);
        assert_eq!(infos[1].max_timestamp, 20);
        set_base_offset(&mut p, 66, 7);
        assert_eq!(base_offset(&p, 66), 7);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(walk(&[]).is_err());
        assert!(walk(&[0u8; 10]).is_err());
        let mut p = batch(1, 0, 0);
        p[16] = 1;
        assert!(walk(&p).is_err());
        let mut p = batch(1, 0, 0);
        p.push(0);
        assert!(walk(&p).is_err());
        let mut p = batch(1, 0, 0);
        p[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(walk(&p).is_err());
        let mut p = batch(1, 0, 0);
        p[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(walk(&p).is_err());
    }

    #[test]
    fn stored_batches_are_placed_by_their_base_offsets() {
        // An entry taking offsets 10..20 whose compaction kept batches at 12..15 and 17..18.
        let mut p = batch(3, 10, 0);
        set_base_offset(&mut p, 0, 12);
        let mut q = batch(1, 20, 4);
        set_base_offset(&mut q, 0, 17);
        p.extend(&q);
        let s = stored_batches(&p, 10, 20).unwrap();
        assert_eq!(
            s.iter().map(|b| (b.base, b.end())).collect::<Vec<_>>(),
            vec![(12, 15), (17, 18)]
        );
        // No batch at all: a compacted entry whose records all went.
        assert_eq!(stored_batches(&[], 10, 20).unwrap(), vec![]);
        // Outside the entry's offsets, overlapping, or out of order: refused.
        assert!(stored_batches(&p, 13, 20).is_err());
        assert!(stored_batches(&p, 10, 17).is_err());
        let mut r = q.clone();
        r.extend(&p[..BATCH_HEADER_LEN]);
        set_base_offset(&mut r, q.len(), 12);
        assert!(stored_batches(&r, 10, 20).is_err());
        let mut neg = batch(1, 0, 0);
        set_base_offset(&mut neg, 0, u64::MAX);
        assert!(stored_batches(&neg, 0, 20).is_err());
        // Bytes that are not batches: refused, no panic.
        assert!(stored_batches(&[1, 2, 3], 0, 20).is_err());
    }
}
