//! Segment files: naming, header, and reading frames back.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::active_files::ActiveFile;
use crate::config::MAX_ENTRY_BYTES_LIMIT;
use crate::entry::{check_frame, parse_header, FrameError, FrameHeader, FRAME_HEADER_LEN};
use crate::error::{corruption, io_err, LogStoreError, Result};
use crate::fsutil::{fdatasync, fsync_dir};
use crate::index::{read_index_file, write_index_file, IndexSummary, SparseIndexes};
use crate::open_segments::{OpenSegments, SegmentHandle};

/// Segment header, the first 64 bytes of every segment file, little-endian:
///
/// ```text
/// @0  magic       "VDLS"
/// @4  version     u16 = 2   (a higher version is refused with UnsupportedVersion; 1 is
///                           still read: its frames carry no sync lag, see `entry.rs`; the
///                           store never appends to a version-1 segment)
/// @6  flags       u16 = 0
/// @8  base_index  u64   first Raft index the segment holds (also the file name)
/// @16 base_offset u64   next Kafka offset at the start of the segment
/// @24 prev_term   u64   term of base_index - 1 (so term(first_index - 1) survives deletion)
/// @32 generation  u64   bumped by install_snapshot; recovery drops older generations
/// @40 created_ms  u64   wall-clock creation time, ms since the Unix epoch
/// @48 reserved    12 zero bytes
/// @60 header_crc  u32   CRC-32C of @0..60
/// ```
///
/// Entry frames (see `entry.rs`) follow back to back from byte 64. A segment file is named
/// `<base_index as 20 zero-padded digits>.log`; it is created under a `.tmp` name, fsynced
/// and renamed, so a segment file always has a complete header.
pub(crate) const SEGMENT_HEADER_LEN: u64 = 64;
pub(crate) const SEGMENT_MAGIC: &[u8; 4] = b"VDLS";
/// The version new segments are written with. Version 2 added the frames' sync lag (@25 of
/// the frame, where version 1 has `flags u8` and `reserved u16`, both zero).
pub(crate) const SEGMENT_VERSION: u16 = 2;
/// The first version whose frames carry a sync lag.
const FIRST_VERSION_WITH_SYNC_LAG: u16 = 2;
/// Largest frame length accepted when parsing (independent of the configured entry limit,
/// so that lowering the limit never makes existing data unreadable).
pub(crate) const MAX_FRAME_LEN: u64 = MAX_ENTRY_BYTES_LIMIT + FRAME_HEADER_LEN as u64;

/// The decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    /// Format version of the file (new segments: [`SEGMENT_VERSION`]).
    pub version: u16,
    pub base_index: u64,
    pub base_offset: u64,
    pub prev_term: u64,
    pub generation: u64,
    pub created_ms: u64,
}

impl SegmentHeader {
    /// The header of a new segment (current format version).
    pub fn new(
        base_index: u64,
        base_offset: u64,
        prev_term: u64,
        generation: u64,
        created_ms: u64,
    ) -> SegmentHeader {
        SegmentHeader {
            version: SEGMENT_VERSION,
            base_index,
            base_offset,
            prev_term,
            generation,
            created_ms,
        }
    }

    /// Whether the segment's frames carry a sync lag (version 2 on; see `entry.rs`).
    pub fn has_sync_lag(&self) -> bool {
        self.version >= FIRST_VERSION_WITH_SYNC_LAG
    }

    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN as usize] {
        let mut b = [0u8; SEGMENT_HEADER_LEN as usize];
        b[0..4].copy_from_slice(SEGMENT_MAGIC);
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[8..16].copy_from_slice(&self.base_index.to_le_bytes());
        b[16..24].copy_from_slice(&self.base_offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.prev_term.to_le_bytes());
        b[32..40].copy_from_slice(&self.generation.to_le_bytes());
        b[40..48].copy_from_slice(&self.created_ms.to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates a header read from `path` (`buf` may be shorter than 64 bytes
    /// when the file is).
    pub fn decode(buf: &[u8], path: &Path) -> Result<SegmentHeader> {
        if buf.len() < 6 || &buf[0..4] != SEGMENT_MAGIC {
            return Err(corruption(
                path,
                0,
                format!("not a segment file: {} bytes, no \"VDLS\" magic", buf.len()),
            ));
        }
        let version = u16::from_le_bytes([buf[4], buf[5]]);
        if version > SEGMENT_VERSION {
            return Err(LogStoreError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                supported: SEGMENT_VERSION,
            });
        }
        if version == 0 {
            return Err(corruption(path, 4, "format version 0"));
        }
        if buf.len() < SEGMENT_HEADER_LEN as usize {
            return Err(corruption(
                path,
                buf.len() as u64,
                format!(
                    "file is {} bytes, shorter than the segment header",
                    buf.len()
                ),
            ));
        }
        let crc = u32::from_le_bytes([buf[60], buf[61], buf[62], buf[63]]);
        if crc32c::crc32c(&buf[..60]) != crc {
            return Err(corruption(path, 60, "segment header CRC mismatch"));
        }
        let u = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&buf[at..at + 8]);
            u64::from_le_bytes(a)
        };
        Ok(SegmentHeader {
            version,
            base_index: u(8),
            base_offset: u(16),
            prev_term: u(24),
            generation: u(32),
            created_ms: u(40),
        })
    }
}

/// `<20 digits>.log`
pub(crate) fn segment_file_name(base_index: u64) -> String {
    format!("{base_index:020}.log")
}

/// `<20 digits>.index`
pub(crate) fn index_file_name(base_index: u64) -> String {
    format!("{base_index:020}.index")
}

/// Parses a segment or index file name: returns the base index and whether it is a segment.
pub(crate) fn parse_file_name(name: &str) -> Option<(u64, bool)> {
    let (stem, is_segment) = if let Some(s) = name.strip_suffix(".log") {
        (s, true)
    } else if let Some(s) = name.strip_suffix(".index") {
        (s, false)
    } else {
        return None;
    };
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok().map(|n| (n, is_segment))
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Creates a segment file holding only `header`, durably: written under a temporary name,
/// fsynced, renamed into place, directory fsynced. Replaces a file of the same name.
pub(crate) fn create_segment_file(dir: &Path, header: &SegmentHeader) -> Result<(PathBuf, File)> {
    let path = dir.join(segment_file_name(header.base_index));
    let tmp = dir.join(format!("{}.tmp", segment_file_name(header.base_index)));
    {
        let f = File::create(&tmp).map_err(io_err(&tmp))?;
        if let Err(e) = crate::fs::fs().write_all_at(&f, &tmp, &header.encode(), 0) {
            // Best effort (a full disk): no half-written file left behind.
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(&tmp)(e));
        }
        fdatasync(&f, &tmp);
    }
    crate::fs::fs().rename(&tmp, &path).map_err(io_err(&path))?;
    fsync_dir(dir)?;
    let f = open_rw(&path)?;
    Ok((path, f))
}

/// Opens a file for reading and writing.
pub(crate) fn open_rw(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err(path))
}

/// Owner of a segment's memory map, so `Bytes` can point into it.
struct MapOwner(memmap2::Mmap);

impl AsRef<[u8]> for MapOwner {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// One segment file and what the store knows about it.
///
/// The active segment (the last of a store) reads and writes its file through a descriptor
/// kept in the node's bounded [`crate::ActiveFiles`] set (closed while idle and synced,
/// reopened on use; see `active_files.rs`). A sealed segment holds no descriptor: it is immutable (never written or truncated in place
/// again; a truncation into it rewrites it through a new file), which is what makes
/// memory-mapping it safe, and it is read through a map opened on demand and kept, with its
/// sparse indexes once loaded, in the node's bounded [`OpenSegments`] set (see
/// `open_segments.rs`).
pub(crate) struct Segment {
    pub header: SegmentHeader,
    pub path: PathBuf,
    pub index_path: PathBuf,
    /// The file's descriptor while the segment is active; `None` once sealed.
    file: Option<ActiveFile>,
    /// This segment's key in the set of open sealed segments.
    open: SegmentHandle,
    /// File length = write position.
    pub len: u64,
    /// Last Raft index held (base_index - 1 when empty).
    pub last_index: u64,
    /// Term of `last_index` (prev_term when empty).
    pub last_term: u64,
    /// Offset after the last entry (base_offset when empty).
    pub next_offset: u64,
    /// Position of the last frame (0 when empty).
    pub last_entry_pos: u64,
    /// Max record timestamp (i64::MIN when no records).
    pub max_timestamp: i64,
    /// The active segment's sparse indexes (a sealed segment's live in `open`).
    indexes: Mutex<Option<Arc<SparseIndexes>>>,
}

impl Segment {
    /// An active segment with nothing but its header.
    pub fn new_empty(
        header: SegmentHeader,
        path: PathBuf,
        file: File,
        dir: &Path,
        open: &Arc<OpenSegments>,
    ) -> Segment {
        let index_path = dir.join(index_file_name(header.base_index));
        Segment {
            header,
            file: Some(ActiveFile::new(file, &path, open.active_files())),
            path,
            index_path,
            open: open.handle(),
            len: SEGMENT_HEADER_LEN,
            last_index: header.base_index - 1,
            last_term: header.prev_term,
            next_offset: header.base_offset,
            last_entry_pos: 0,
            max_timestamp: i64::MIN,
            indexes: Mutex::new(Some(Arc::new(SparseIndexes::new()))),
        }
    }

    /// A segment whose stats come from an index summary (or a scan): active with its open
    /// `file`, sealed without one.
    pub fn from_summary(
        header: SegmentHeader,
        path: PathBuf,
        file: Option<File>,
        dir: &Path,
        open: &Arc<OpenSegments>,
        s: &IndexSummary,
        indexes: Option<SparseIndexes>,
    ) -> Segment {
        let sealed = file.is_none();
        let mut indexes = indexes.map(Arc::new);
        let open_set = open;
        let open = open.handle();
        if sealed {
            if let Some(idx) = indexes.take() {
                open.insert_indexes(idx);
            }
        }
        Segment {
            header,
            index_path: dir.join(index_file_name(header.base_index)),
            file: file.map(|f| ActiveFile::new(f, &path, open_set.active_files())),
            path,
            open,
            len: s.covered_len,
            last_index: s.last_index,
            last_term: s.last_term,
            next_offset: s.next_offset,
            last_entry_pos: s.last_entry_pos,
            max_timestamp: s.max_timestamp,
            indexes: Mutex::new(indexes),
        }
    }

    /// Whether the segment is sealed (immutable, read through maps).
    pub fn sealed(&self) -> bool {
        self.file.is_none()
    }

    /// The active segment's descriptor (opened on use; see [`ActiveFile`]).
    pub fn active_file(&self) -> &ActiveFile {
        self.file
            .as_ref()
            .expect("only the active segment is written")
    }

    /// Seals the segment: closes its file (the caller synced it) and hands its indexes to
    /// the open set.
    pub fn seal(&mut self) {
        self.file = None;
        if let Some(idx) = self
            .indexes
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            self.open.insert_indexes(idx);
        }
    }

    /// Makes a sealed segment active again with `file` (its rewritten file), closing its map.
    pub fn reactivate(&mut self, file: File) {
        self.open.close();
        self.file = Some(ActiveFile::new(
            file,
            &self.path,
            self.open.set().active_files(),
        ));
    }

    pub fn is_empty(&self) -> bool {
        self.last_index < self.header.base_index
    }

    pub fn summary(&self) -> IndexSummary {
        IndexSummary {
            base_index: self.header.base_index,
            generation: self.header.generation,
            covered_len: self.len,
            last_index: self.last_index,
            last_term: self.last_term,
            next_offset: self.next_offset,
            last_entry_pos: self.last_entry_pos,
            max_timestamp: self.max_timestamp,
        }
    }

    fn loaded_indexes(&self) -> MutexGuard<'_, Option<Arc<SparseIndexes>>> {
        // A poisoned lock only means another reader panicked; the data is still consistent
        // (it is only ever replaced whole).
        self.indexes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Mutable access to the in-memory indexes of the active segment.
    pub fn indexes_mut(&mut self) -> &mut SparseIndexes {
        let idx = self.indexes.get_mut().unwrap_or_else(|p| p.into_inner());
        Arc::make_mut(idx.get_or_insert_with(|| Arc::new(SparseIndexes::new())))
    }

    /// Replaces the in-memory indexes.
    pub fn set_indexes(&mut self, idx: SparseIndexes) {
        *self.indexes.get_mut().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(idx));
    }

    /// Replaces the in-memory indexes of an active or sealed segment (after a scan found
    /// the loaded ones cannot be trusted).
    pub fn replace_indexes(&mut self, idx: SparseIndexes) {
        if self.sealed() {
            self.open.close();
            self.open.insert_indexes(Arc::new(idx));
        } else {
            self.set_indexes(idx);
        }
    }

    /// The whole segment's bytes (`len` of them): the map of a sealed segment, a read of the
    /// active one.
    pub fn read_all(&self) -> Result<Bytes> {
        if self.sealed() {
            return self.map();
        }
        self.read_bytes(0, self.len as usize)
    }

    /// The indexes when loaded (a sealed segment's only while it is in the open set).
    fn indexes_if_loaded(&self) -> Option<Arc<SparseIndexes>> {
        if self.sealed() {
            self.open.indexes()
        } else {
            self.loaded_indexes().clone()
        }
    }

    /// Heap bytes used by loaded indexes.
    pub fn index_heap_bytes(&self) -> usize {
        self.indexes_if_loaded().map_or(0, |i| i.heap_bytes())
    }

    /// The indexes, loading them from the index file or rebuilding them by scanning the
    /// (sealed) segment when needed. A scan that finds a bad frame fails with corruption.
    pub fn indexes(&self, interval: u64) -> Result<Arc<SparseIndexes>> {
        if let Some(i) = self.indexes_if_loaded() {
            return Ok(i);
        }
        let loaded = match read_index_file(&self.index_path) {
            Some((s, idx)) if s == self.summary() => idx,
            _ => {
                let data = self.map()?;
                let scanned =
                    crate::recovery::scan_strict(&self.path, &data, &self.header, interval)?;
                if scanned.0 != self.summary() {
                    return Err(corruption(
                        &self.path,
                        scanned.0.covered_len,
                        "segment content changed since it was opened",
                    ));
                }
                // Derived data: failing to write it only costs another scan later.
                let _ = write_index_file(&self.index_path, &scanned.0, &scanned.1);
                scanned.1
            }
        };
        let arc = Arc::new(loaded);
        if self.sealed() {
            return Ok(self.open.insert_indexes(arc));
        }
        *self.loaded_indexes() = Some(arc.clone());
        Ok(arc)
    }

    /// The whole (sealed) file, memory-mapped. `Bytes` slices of it are zero-copy. Opens the
    /// file (and closes its descriptor at once) when the map is not in the open set.
    pub fn map(&self) -> Result<Bytes> {
        debug_assert!(self.sealed(), "only sealed segments are memory-mapped");
        if let Some(m) = self.open.map() {
            return Ok(m);
        }
        let file = File::open(&self.path).map_err(io_err(&self.path))?;
        // SAFETY: sealed segment files are never written or truncated while the store has
        // them open (truncation into a sealed segment writes a new file and renames it over
        // the old one, so existing maps keep the old inode). Modification by other processes
        // is outside the contract (it would be corruption anyway).
        let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(&self.path))?;
        drop(file);
        if (mmap.len() as u64) < self.len {
            return Err(corruption(
                &self.path,
                mmap.len() as u64,
                "segment file shrank",
            ));
        }
        let bytes = Bytes::from_owner(MapOwner(mmap)).slice(..self.len as usize);
        Ok(self.open.insert_map(bytes))
    }

    /// Reads `len` bytes at `pos` (must lie inside `self.len`).
    fn read_bytes(&self, pos: u64, len: usize) -> Result<Bytes> {
        debug_assert!(pos + len as u64 <= self.len);
        let Some(file) = &self.file else {
            let m = self.map()?;
            return Ok(m.slice(pos as usize..pos as usize + len));
        };
        let mut buf = vec![0u8; len];
        file.read(|f| f.read_exact_at(&mut buf, pos))?
            .map_err(io_err(&self.path))?;
        Ok(Bytes::from(buf))
    }

    fn frame_error(&self, pos: u64, e: FrameError) -> LogStoreError {
        match e {
            FrameError::Incomplete => corruption(&self.path, pos, "frame runs past the end"),
            FrameError::Invalid(r) => corruption(&self.path, pos, r),
        }
    }

    /// Reads the fixed header of the frame at `pos` (no CRC check).
    pub fn read_frame_header(&self, pos: u64) -> Result<FrameHeader> {
        if pos + FRAME_HEADER_LEN as u64 > self.len {
            return Err(corruption(
                &self.path,
                pos,
                "frame header past the end of the data",
            ));
        }
        let h = match &self.file {
            None => {
                let m = self.map()?;
                parse_header(&m[pos as usize..], MAX_FRAME_LEN)
            }
            Some(file) => {
                let mut buf = [0u8; FRAME_HEADER_LEN];
                file.read(|f| f.read_exact_at(&mut buf, pos))?
                    .map_err(io_err(&self.path))?;
                parse_header(&buf, MAX_FRAME_LEN)
            }
        }
        .map_err(|e| self.frame_error(pos, e))?;
        if pos + h.total_len() > self.len {
            return Err(corruption(
                &self.path,
                pos,
                "frame runs past the end of the data",
            ));
        }
        Ok(h)
    }

    /// Reads and CRC-checks the frame at `pos`; returns its header and its bytes.
    pub fn read_frame(&self, pos: u64) -> Result<(FrameHeader, Bytes)> {
        let h = self.read_frame_header(pos)?;
        let bytes = self.read_bytes(pos, h.total_len() as usize)?;
        let h2 = check_frame(&bytes, MAX_FRAME_LEN).map_err(|e| self.frame_error(pos, e))?;
        debug_assert_eq!(h, h2);
        Ok((h2, bytes))
    }

    /// Finds the frame of Raft index `index` (which must be in this segment).
    pub fn locate_index(&self, index: u64, interval: u64) -> Result<(u64, FrameHeader)> {
        debug_assert!(index >= self.header.base_index && index <= self.last_index);
        let idx = self.indexes(interval)?;
        let mut pos = idx.raft_floor(index).unwrap_or(SEGMENT_HEADER_LEN);
        loop {
            let h = self.read_frame_header(pos)?;
            if h.index == index {
                return Ok((pos, h));
            }
            if h.index > index {
                return Err(corruption(
                    &self.path,
                    pos,
                    format!(
                        "looking for index {index}, found {} (index file wrong?)",
                        h.index
                    ),
                ));
            }
            pos += h.total_len();
        }
    }

    /// Finds the Records frame holding `offset` (which must be in this segment).
    pub fn locate_offset(&self, offset: u64, interval: u64) -> Result<(u64, FrameHeader)> {
        debug_assert!(offset >= self.header.base_offset && offset < self.next_offset);
        let idx = self.indexes(interval)?;
        let mut pos = idx.offset_floor(offset).unwrap_or(SEGMENT_HEADER_LEN);
        loop {
            let h = self.read_frame_header(pos)?;
            if h.record_count > 0 && h.next_offset() > offset {
                if h.first_offset > offset {
                    return Err(corruption(
                        &self.path,
                        pos,
                        format!("looking for offset {offset}, found {}", h.first_offset),
                    ));
                }
                return Ok((pos, h));
            }
            pos += h.total_len();
        }
    }
}
