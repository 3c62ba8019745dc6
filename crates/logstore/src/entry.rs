//! Log entries and their on-disk frame.

use bytes::{BufMut, Bytes};

/// What an entry is. Only [`EntryKind::Records`] takes Kafka offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// Client data: the payload is one or more Kafka record batches (magic 2).
    Records,
    /// A Raft configuration change (v1), payload opaque to the store.
    ConfChange,
    /// A Raft configuration change (v2), payload opaque to the store.
    ConfChangeV2,
    /// An empty entry (e.g. the one a new leader appends).
    Noop,
    /// Opaque replicated application metadata (consumer-group offsets, producer ids, ...).
    Meta,
}

impl EntryKind {
    /// The byte stored in the frame.
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            EntryKind::Records => 1,
            EntryKind::ConfChange => 2,
            EntryKind::ConfChangeV2 => 3,
            EntryKind::Noop => 4,
            EntryKind::Meta => 5,
        }
    }

    /// Parses the frame byte.
    pub(crate) fn from_byte(b: u8) -> Option<EntryKind> {
        Some(match b {
            1 => EntryKind::Records,
            2 => EntryKind::ConfChange,
            3 => EntryKind::ConfChangeV2,
            4 => EntryKind::Noop,
            5 => EntryKind::Meta,
            _ => return None,
        })
    }
}

/// An entry handed to [`crate::LogStore::append`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEntry {
    /// Raft index; must continue the log.
    pub index: u64,
    /// Raft term; must not be lower than the previous entry's term.
    pub term: u64,
    /// Entry type.
    pub kind: EntryKind,
    /// For `Records`: whole Kafka record batches (their baseOffset fields are overwritten by
    /// the store). Otherwise opaque bytes.
    pub payload: Bytes,
    /// Opaque bytes stored alongside (raft-rs `Entry::context`).
    pub context: Bytes,
}

/// An entry read back from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Raft index.
    pub index: u64,
    /// Raft term.
    pub term: u64,
    /// Entry type.
    pub kind: EntryKind,
    /// Payload; for `Records` the batches carry their assigned base offsets.
    pub payload: Bytes,
    /// The context bytes given on append.
    pub context: Bytes,
    /// For `Records`: the offset of the first record. For every other kind: the offset the
    /// next record will get at this point of the log. So `first_offset + record_count` is
    /// always the next offset after this entry.
    pub first_offset: u64,
    /// Number of offsets the entry takes (sum of lastOffsetDelta + 1 over its batches);
    /// 0 for non-`Records` entries.
    pub record_count: u32,
}

impl Entry {
    /// Size used for `max_bytes` accounting: the entry's frame size on disk.
    pub fn size(&self) -> u64 {
        (FRAME_HEADER_LEN + self.payload.len() + self.context.len()) as u64
    }

    /// The offset after this entry's records (`first_offset + record_count`).
    pub fn next_offset(&self) -> u64 {
        self.first_offset + u64::from(self.record_count)
    }
}

/// Entry frame, little-endian, one per entry, back to back in a segment:
///
/// ```text
/// @0  frame_len     u32  bytes after this field: 48 + context_len + payload_len
/// @4  crc           u32  CRC-32C (Castagnoli) over bytes @8 .. end of frame
/// @8  index         u64  Raft index
/// @16 term          u64  Raft term
/// @24 kind          u8   1 Records, 2 ConfChange, 3 ConfChangeV2, 4 Noop, 5 Meta
/// @25 sync_lag      u24  segment version >= 2: how far the completed syncs lagged behind
///                        this frame when it was written (see `encode_sync_lag`);
///                        version 1: `flags u8` = 0 and `reserved u16` = 0, ignored
/// @28 context_len   u32
/// @32 first_offset  u64  see `Entry::first_offset`
/// @40 record_count  u32
/// @44 max_timestamp i64  max of the batches' maxTimestamp; -1 for non-Records entries
/// @52 context bytes, then payload bytes
/// ```
pub(crate) const FRAME_HEADER_LEN: usize = 52;
/// Size of the frame's length prefix (`frame_len` counts the bytes after it).
const LEN_PREFIX: usize = 4;

/// The fixed-size fields of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub frame_len: u32,
    pub crc: u32,
    pub index: u64,
    pub term: u64,
    pub kind: EntryKind,
    /// The raw 24-bit sync lag at @25 (meaningful in version-2 segments only).
    pub sync_lag: u32,
    pub context_len: u32,
    pub first_offset: u64,
    pub record_count: u32,
    pub max_timestamp: i64,
}

impl FrameHeader {
    /// Total bytes of the frame including the length prefix.
    pub fn total_len(&self) -> u64 {
        LEN_PREFIX as u64 + u64::from(self.frame_len)
    }

    /// Offset after this entry.
    pub fn next_offset(&self) -> u64 {
        self.first_offset + u64::from(self.record_count)
    }

    /// For a frame of a version-2 segment at file position `frame_pos`: a length of the
    /// segment file that a completed fdatasync had made durable before this frame was
    /// written (a lower bound; see [`encode_sync_lag`]).
    pub fn synced_through(&self, frame_pos: u64) -> u64 {
        frame_pos.saturating_sub(decode_sync_lag(self.sync_lag))
    }
}

/// Largest value of the 24-bit sync lag field.
const SYNC_LAG_MAX: u32 = (1 << 24) - 1;
/// Top bit of the field: the lag is counted in [`SYNC_LAG_COARSE_UNIT_BYTES`] units.
const SYNC_LAG_COARSE: u32 = 1 << 23;
/// Unit of a coarse lag (rounded up, so the synced length it implies rounds down).
const SYNC_LAG_COARSE_UNIT_BYTES: u64 = 4096;

/// Encodes `lag_bytes` (a frame's position minus the segment length a completed sync covered
/// when it was written) into the 24-bit field: exact below 8 MiB; above, in 4 KiB units
/// rounded up (up to 32 GiB); beyond, the field's maximum, which decodes as "the whole
/// frame position", i.e. nothing known synced. Decoding never yields less lag than the
/// truth, so [`FrameHeader::synced_through`] never claims more than was synced.
pub(crate) fn encode_sync_lag(lag_bytes: u64) -> u32 {
    if lag_bytes < u64::from(SYNC_LAG_COARSE) {
        return lag_bytes as u32;
    }
    let units = lag_bytes.div_ceil(SYNC_LAG_COARSE_UNIT_BYTES);
    if units < u64::from(SYNC_LAG_MAX - SYNC_LAG_COARSE) {
        SYNC_LAG_COARSE | units as u32
    } else {
        SYNC_LAG_MAX
    }
}

/// The lag in bytes the field stands for (`u64::MAX`: unknown, nothing known synced).
fn decode_sync_lag(field: u32) -> u64 {
    let field = field & SYNC_LAG_MAX;
    if field == SYNC_LAG_MAX {
        u64::MAX
    } else if field & SYNC_LAG_COARSE != 0 {
        u64::from(field & !SYNC_LAG_COARSE) * SYNC_LAG_COARSE_UNIT_BYTES
    } else {
        u64::from(field)
    }
}

/// Why bytes do not hold a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// Fewer bytes than the frame needs (a torn tail, or a read that was too short).
    Incomplete,
    /// The bytes are not a valid frame.
    Invalid(String),
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Parses the fixed header at the start of `buf` and checks that its lengths are sane
/// (`max_frame_len` bounds `frame_len`). Does not check the CRC.
pub(crate) fn parse_header(buf: &[u8], max_frame_len: u64) -> Result<FrameHeader, FrameError> {
    if buf.len() < FRAME_HEADER_LEN {
        return Err(FrameError::Incomplete);
    }
    let frame_len = le_u32(buf, 0);
    if (frame_len as usize) < FRAME_HEADER_LEN - LEN_PREFIX {
        return Err(FrameError::Invalid(format!(
            "frame length {frame_len} is too small"
        )));
    }
    if u64::from(frame_len) > max_frame_len {
        return Err(FrameError::Invalid(format!(
            "frame length {frame_len} exceeds the limit {max_frame_len}"
        )));
    }
    let kind = EntryKind::from_byte(buf[24])
        .ok_or_else(|| FrameError::Invalid(format!("unknown entry kind {}", buf[24])))?;
    let sync_lag = u32::from_le_bytes([buf[25], buf[26], buf[27], 0]);
    let context_len = le_u32(buf, 28);
    if context_len as usize > frame_len as usize + LEN_PREFIX - FRAME_HEADER_LEN {
        return Err(FrameError::Invalid(format!(
            "context length {context_len} overruns frame"
        )));
    }
    let h = FrameHeader {
        frame_len,
        crc: le_u32(buf, 4),
        index: le_u64(buf, 8),
        term: le_u64(buf, 16),
        kind,
        sync_lag,
        context_len,
        first_offset: le_u64(buf, 32),
        record_count: le_u32(buf, 40),
        max_timestamp: le_u64(buf, 44) as i64,
    };
    if h.kind != EntryKind::Records && h.record_count != 0 {
        return Err(FrameError::Invalid(
            "non-Records entry with a record count".into(),
        ));
    }
    Ok(h)
}

/// Parses and CRC-checks a whole frame at the start of `buf`.
pub(crate) fn check_frame(buf: &[u8], max_frame_len: u64) -> Result<FrameHeader, FrameError> {
    let h = parse_header(buf, max_frame_len)?;
    let total = h.total_len() as usize;
    if buf.len() < total {
        return Err(FrameError::Incomplete);
    }
    let crc = crc32c::crc32c(&buf[8..total]);
    if crc != h.crc {
        return Err(FrameError::Invalid(format!(
            "CRC mismatch: stored {:#010x}, computed {crc:#010x}",
            h.crc
        )));
    }
    Ok(h)
}

/// Builds an [`Entry`] from a buffer that holds exactly one CRC-checked frame.
pub(crate) fn entry_from_frame(h: &FrameHeader, frame: &Bytes) -> Entry {
    let ctx_end = FRAME_HEADER_LEN + h.context_len as usize;
    Entry {
        index: h.index,
        term: h.term,
        kind: h.kind,
        context: frame.slice(FRAME_HEADER_LEN..ctx_end),
        payload: frame.slice(ctx_end..h.total_len() as usize),
        first_offset: h.first_offset,
        record_count: h.record_count,
    }
}

/// Fields of a frame other than its bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameMeta {
    pub index: u64,
    pub term: u64,
    pub kind: EntryKind,
    /// The 24-bit sync lag field (0 in version-1 segments; see [`encode_sync_lag`]).
    pub sync_lag: u32,
    pub first_offset: u64,
    pub record_count: u32,
    pub max_timestamp: i64,
}

/// Appends one frame to `out`. `rewrite` is applied to the payload bytes inside `out` before
/// the CRC is computed (the store uses it to write the assigned Kafka base offsets).
/// Returns the position of the payload inside `out`.
pub(crate) fn encode_frame(
    out: &mut Vec<u8>,
    m: &FrameMeta,
    context: &[u8],
    payload: &[u8],
    rewrite: impl FnOnce(&mut [u8]),
) -> usize {
    let start = out.len();
    let frame_len = (FRAME_HEADER_LEN - LEN_PREFIX + context.len() + payload.len()) as u32;
    out.put_u32_le(frame_len);
    out.put_u32_le(0); // CRC, filled below
    out.put_u64_le(m.index);
    out.put_u64_le(m.term);
    out.put_u8(m.kind.to_byte());
    out.extend_from_slice(&(m.sync_lag & SYNC_LAG_MAX).to_le_bytes()[..3]);
    out.put_u32_le(context.len() as u32);
    out.put_u64_le(m.first_offset);
    out.put_u32_le(m.record_count);
    out.put_i64_le(m.max_timestamp);
    out.extend_from_slice(context);
    let payload_pos = out.len();
    out.extend_from_slice(payload);
    rewrite(&mut out[payload_pos..]);
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(out.len() - start, LEN_PREFIX + frame_len as usize);
    payload_pos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut v = Vec::new();
        let m = FrameMeta {
            index: 7,
            term: 3,
            kind: EntryKind::Meta,
            sync_lag: encode_sync_lag(5000),
            first_offset: 42,
            record_count: 0,
            max_timestamp: -1,
        };
        encode_frame(&mut v, &m, b"ctx", b"hello", |_| {});
        let h = check_frame(&v, 1 << 20).unwrap();
        assert_eq!(h.index, 7);
        assert_eq!(h.synced_through(6000), 1000);
        assert_eq!(h.total_len() as usize, v.len());
        let b = Bytes::from(v.clone());
        let e = entry_from_frame(&h, &b);
        assert_eq!(&e.payload[..], b"hello");
        assert_eq!(&e.context[..], b"ctx");
        for i in 0..v.len() {
            let mut w = v.clone();
            w[i] ^= 0x40;
            assert!(check_frame(&w, 1 << 20).is_err(), "flip at {i} undetected");
        }
        assert_eq!(
            check_frame(&v[..v.len() - 1], 1 << 20),
            Err(FrameError::Incomplete)
        );
    }

    #[test]
    fn sync_lag_never_claims_more_than_was_synced() {
        let lags = [
            0,
            1,
            4095,
            (1 << 23) - 1,
            1 << 23,
            (1 << 23) + 1,
            5 << 30,
            (32 << 30) - 1,
            32 << 30,
            1 << 40,
            u64::MAX,
        ];
        for lag in lags {
            let decoded = decode_sync_lag(encode_sync_lag(lag));
            assert!(decoded >= lag, "lag {lag} decoded as {decoded}");
            if lag < 1 << 23 {
                assert_eq!(decoded, lag);
            } else if lag <= 30 << 30 {
                assert!(decoded - lag < SYNC_LAG_COARSE_UNIT_BYTES);
            }
        }
        let h = |field| FrameHeader {
            frame_len: 48,
            crc: 0,
            index: 1,
            term: 1,
            kind: EntryKind::Noop,
            sync_lag: field,
            context_len: 0,
            first_offset: 0,
            record_count: 0,
            max_timestamp: -1,
        };
        assert_eq!(h(0).synced_through(100), 100);
        assert_eq!(h(SYNC_LAG_MAX).synced_through(100), 0);
        assert_eq!(h(encode_sync_lag(200)).synced_through(100), 0);
    }
}
