//! The three sparse indexes of a segment and their file.
//!
//! Index files are derived data. They are written lazily (when a segment is sealed, and as a
//! checkpoint of the active segment after a sync) without fsync, and are rebuilt by scanning
//! the segment whenever they are missing, torn or inconsistent with the segment.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

/// Sparse lookup tables for one segment. Positions are byte positions in the segment file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SparseIndexes {
    /// (Raft index, position of its frame), ascending in both.
    pub raft: Vec<(u64, u64)>,
    /// (first offset of a Records entry, position of its frame), ascending in both.
    pub offset: Vec<(u64, u64)>,
    /// (max timestamp of all records *before* the entry, first offset of that entry).
    /// Both strictly ascending: every batch before `offset` has maxTimestamp <= the key.
    pub time: Vec<(i64, u64)>,
    /// Max timestamp over all Records entries of the segment so far (i64::MIN when none).
    pub max_timestamp: i64,
}

impl SparseIndexes {
    /// An empty index.
    pub fn new() -> SparseIndexes {
        SparseIndexes {
            max_timestamp: i64::MIN,
            ..Default::default()
        }
    }

    /// Records an entry whose frame starts at `pos`. `records` is
    /// `Some((first_offset, max_timestamp))` for Records entries.
    pub fn on_append(&mut self, index: u64, pos: u64, records: Option<(u64, i64)>, interval: u64) {
        if let Some(&(last_i, last_p)) = self.raft.last() {
            assert!(
                index > last_i && pos > last_p,
                "raft index entries must ascend"
            );
        }
        if self.raft.last().is_none_or(|&(_, p)| pos - p >= interval) {
            self.raft.push((index, pos));
        }
        if let Some((first_offset, max_ts)) = records {
            if let Some(&(last_o, _)) = self.offset.last() {
                assert!(first_offset > last_o, "offset index entries must ascend");
            }
            if self.offset.last().is_none_or(|&(_, p)| pos - p >= interval) {
                self.offset.push((first_offset, pos));
                let before = self.max_timestamp;
                if before != i64::MIN && self.time.last().is_none_or(|&(t, _)| before > t) {
                    self.time.push((before, first_offset));
                }
            }
            self.max_timestamp = self.max_timestamp.max(max_ts);
        }
    }

    /// Position to start scanning from to find Raft index `index` (None: segment start).
    pub fn raft_floor(&self, index: u64) -> Option<u64> {
        let i = self.raft.partition_point(|&(k, _)| k <= index);
        (i > 0).then(|| self.raft[i - 1].1)
    }

    /// Position to start scanning from to find the entry holding `offset`.
    pub fn offset_floor(&self, offset: u64) -> Option<u64> {
        let i = self.offset.partition_point(|&(k, _)| k <= offset);
        (i > 0).then(|| self.offset[i - 1].1)
    }

    /// An offset such that every batch before it has maxTimestamp < `ts` (None: none known).
    pub fn time_floor(&self, ts: i64) -> Option<u64> {
        let i = self.time.partition_point(|&(t, _)| t < ts);
        (i > 0).then(|| self.time[i - 1].1)
    }

    /// Drops everything at or after position `pos` / offset `next_offset`. The caller
    /// recomputes `max_timestamp`.
    pub fn truncate(&mut self, pos: u64, next_offset: u64) {
        self.raft.retain(|&(_, p)| p < pos);
        self.offset.retain(|&(_, p)| p < pos);
        self.time.retain(|&(_, o)| o < next_offset);
    }

    /// Approximate heap size in bytes.
    pub fn heap_bytes(&self) -> usize {
        (self.raft.capacity() + self.offset.capacity() + self.time.capacity()) * 16
    }
}

/// Summary stored in an index file header; what open needs about a segment without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexSummary {
    /// First Raft index of the segment (must match the segment).
    pub base_index: u64,
    /// Generation of the segment (must match the segment header).
    pub generation: u64,
    /// Segment bytes covered by this index (the whole file for a sealed segment).
    pub covered_len: u64,
    /// Last Raft index in the covered bytes (base_index - 1 when none).
    pub last_index: u64,
    /// Term of `last_index`.
    pub last_term: u64,
    /// Next offset after the covered bytes.
    pub next_offset: u64,
    /// Position of the frame of `last_index` (0 when none).
    pub last_entry_pos: u64,
    /// Max record timestamp in the covered bytes (i64::MIN when none).
    pub max_timestamp: i64,
}

/// Index file (`<20-digit first index>.index`), little-endian:
///
/// ```text
/// @0  magic          "VDLI"
/// @4  version        u16 = 1
/// @6  flags          u16 = 0
/// @8  covered_len    u64   segment bytes this index describes
/// @16 last_index     u64
/// @24 last_term      u64
/// @32 next_offset    u64
/// @40 last_entry_pos u64
/// @48 max_timestamp  i64
/// @56 n_raft         u32
/// @60 n_offset       u32
/// @64 n_time         u32
/// @68 body_crc       u32   CRC-32C of the body
/// @72 base_index     u64
/// @80 generation     u64
/// @88 header_crc     u32   CRC-32C of @0..88
/// @92 reserved       u32
/// @96 body: n_raft x (index u64, pos u64), n_offset x (offset u64, pos u64),
///           n_time x (timestamp i64, offset u64)
/// ```
pub(crate) const INDEX_MAGIC: &[u8; 4] = b"VDLI";
pub(crate) const INDEX_VERSION: u16 = 1;
pub(crate) const INDEX_HEADER_LEN: usize = 96;

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Writes an index file (to a temporary name, then renamed into place; no fsync: the file
/// is derived data and every reader validates it).
pub(crate) fn write_index_file(
    path: &Path,
    s: &IndexSummary,
    idx: &SparseIndexes,
) -> std::io::Result<()> {
    let n = idx.raft.len() + idx.offset.len() + idx.time.len();
    let mut body = Vec::with_capacity(n * 16);
    for &(k, v) in &idx.raft {
        body.extend_from_slice(&k.to_le_bytes());
        body.extend_from_slice(&v.to_le_bytes());
    }
    for &(k, v) in &idx.offset {
        body.extend_from_slice(&k.to_le_bytes());
        body.extend_from_slice(&v.to_le_bytes());
    }
    for &(k, v) in &idx.time {
        body.extend_from_slice(&k.to_le_bytes());
        body.extend_from_slice(&v.to_le_bytes());
    }
    let mut h = Vec::with_capacity(INDEX_HEADER_LEN + body.len());
    h.extend_from_slice(INDEX_MAGIC);
    h.extend_from_slice(&INDEX_VERSION.to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes());
    h.extend_from_slice(&s.covered_len.to_le_bytes());
    h.extend_from_slice(&s.last_index.to_le_bytes());
    h.extend_from_slice(&s.last_term.to_le_bytes());
    h.extend_from_slice(&s.next_offset.to_le_bytes());
    h.extend_from_slice(&s.last_entry_pos.to_le_bytes());
    h.extend_from_slice(&s.max_timestamp.to_le_bytes());
    h.extend_from_slice(&(idx.raft.len() as u32).to_le_bytes());
    h.extend_from_slice(&(idx.offset.len() as u32).to_le_bytes());
    h.extend_from_slice(&(idx.time.len() as u32).to_le_bytes());
    h.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    h.extend_from_slice(&s.base_index.to_le_bytes());
    h.extend_from_slice(&s.generation.to_le_bytes());
    let hcrc = crc32c::crc32c(&h);
    h.extend_from_slice(&hcrc.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    debug_assert_eq!(h.len(), INDEX_HEADER_LEN);
    h.extend_from_slice(&body);
    let tmp = path.with_extension("index.tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&h)?;
    }
    std::fs::rename(&tmp, path)
}

/// Parsed header: summary plus the counts needed to read the body.
struct RawHeader {
    summary: IndexSummary,
    counts: [usize; 3],
    body_crc: u32,
}

fn parse_header(h: &[u8], file_len: u64) -> Option<RawHeader> {
    if h.len() < INDEX_HEADER_LEN || &h[0..4] != INDEX_MAGIC {
        return None;
    }
    if u16::from_le_bytes([h[4], h[5]]) != INDEX_VERSION {
        return None;
    }
    if crc32c::crc32c(&h[..88]) != u32_at(h, 88) {
        return None;
    }
    let counts = [
        u32_at(h, 56) as usize,
        u32_at(h, 60) as usize,
        u32_at(h, 64) as usize,
    ];
    let body_len = (counts[0] as u64 + counts[1] as u64 + counts[2] as u64) * 16;
    if INDEX_HEADER_LEN as u64 + body_len != file_len {
        return None;
    }
    Some(RawHeader {
        summary: IndexSummary {
            covered_len: u64_at(h, 8),
            last_index: u64_at(h, 16),
            last_term: u64_at(h, 24),
            next_offset: u64_at(h, 32),
            last_entry_pos: u64_at(h, 40),
            max_timestamp: u64_at(h, 48) as i64,
            base_index: u64_at(h, 72),
            generation: u64_at(h, 80),
        },
        counts,
        body_crc: u32_at(h, 68),
    })
}

/// Reads only the header of an index file. `None` when the file is missing or its header is
/// not valid (the caller then rebuilds the index).
pub(crate) fn read_index_summary(path: &Path) -> Option<IndexSummary> {
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let mut h = [0u8; INDEX_HEADER_LEN];
    f.read_exact(&mut h).ok()?;
    parse_header(&h, len).map(|r| r.summary)
}

/// Reads and validates a whole index file. `None` when missing or invalid in any way.
pub(crate) fn read_index_file(path: &Path) -> Option<(IndexSummary, SparseIndexes)> {
    let data = std::fs::read(path).ok()?;
    let raw = parse_header(&data, data.len() as u64)?;
    let body = &data[INDEX_HEADER_LEN..];
    if crc32c::crc32c(body) != raw.body_crc {
        return None;
    }
    let pair = |i: usize| (u64_at(body, i * 16), u64_at(body, i * 16 + 8));
    let [nr, no, nt] = raw.counts;
    let raft: Vec<(u64, u64)> = (0..nr).map(pair).collect();
    let offset: Vec<(u64, u64)> = (nr..nr + no).map(pair).collect();
    let time: Vec<(i64, u64)> = (nr + no..nr + no + nt)
        .map(pair)
        .map(|(t, o)| (t as i64, o))
        .collect();
    // Cheap consistency checks: everything ascending and inside the covered bytes.
    let s = raw.summary;
    let asc = |v: &[(u64, u64)]| v.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1);
    if !asc(&raft) || !asc(&offset) || !time.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1)
    {
        return None;
    }
    if raft
        .iter()
        .chain(offset.iter())
        .any(|&(_, p)| p > s.last_entry_pos)
    {
        return None;
    }
    if raft
        .iter()
        .any(|&(i, _)| i < s.base_index || i > s.last_index)
        || offset.iter().any(|&(o, _)| o >= s.next_offset)
    {
        return None;
    }
    Some((
        s,
        SparseIndexes {
            raft,
            offset,
            time,
            max_timestamp: s.max_timestamp,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_roundtrip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("1.index");
        let mut idx = SparseIndexes::new();
        idx.on_append(1, 48, Some((0, 5)), 100);
        idx.on_append(2, 100, None, 100);
        idx.on_append(3, 160, Some((3, 7)), 100);
        idx.on_append(4, 300, Some((5, 9)), 100);
        assert_eq!(idx.raft, vec![(1, 48), (3, 160), (4, 300)]);
        assert_eq!(idx.offset, vec![(0, 48), (3, 160), (5, 300)]);
        assert_eq!(idx.time, vec![(5, 3), (7, 5)]);
        assert_eq!(idx.time_floor(6), Some(3));
        assert_eq!(idx.time_floor(5), None);
        let s = IndexSummary {
            base_index: 1,
            generation: 0,
            covered_len: 400,
            last_index: 4,
            last_term: 1,
            next_offset: 9,
            last_entry_pos: 300,
            max_timestamp: 9,
        };
        write_index_file(&p, &s, &idx).unwrap();
        let (s2, idx2) = read_index_file(&p).unwrap();
        assert_eq!(s2, s);
        assert_eq!(idx2, idx);
        let mut data = std::fs::read(&p).unwrap();
        let last = data.len() - 1;
        data[last] ^= 1;
        std::fs::write(&p, &data).unwrap();
        assert!(read_index_file(&p).is_none());
        assert!(read_index_summary(&p).is_some());
        std::fs::write(&p, &data[..50]).unwrap();
        assert!(read_index_summary(&p).is_none());
    }
}
