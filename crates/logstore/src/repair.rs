//! The repair marker: what a store lost to corruption, kept until the lost range is back.
//!
//! When a store finds a bad frame in data it had synced (a sealed segment, or the active
//! segment where a later frame records a sync past it or the saved commit covers it; see
//! `recovery.rs`), it keeps the intact prefix and cuts the log before the first bad entry, so
//! the Raft layer can fetch the rest again from a healthy replica. Before cutting, it writes
//! `repair` (atomically and durably) naming the first bad index and the end of the log as it
//! was (`lost_last_index`, `lost_last_term`). The Raft layer uses that end to vote as the
//! undamaged log would have (see the server README, "Storage faults") and removes the marker
//! once the log is whole again. A crash between the marker and the cut finds the damage
//! again at the next open; the marker is then merged.
//!
//! File, little-endian, 36 bytes:
//! `"VDLR" | version u16 = 1 | flags u16 = 0 | first_bad_index u64 | lost_last_index u64 |
//!  lost_last_term u64 | crc u32` (CRC-32C over the preceding 32 bytes).

use std::path::Path;

use crate::error::{corruption, io_err, Result};
use crate::fsutil::{atomic_write, fsync_dir, remove_if_exists};

pub(crate) const REPAIR_FILE: &str = "repair";
const MAGIC: &[u8; 4] = b"VDLR";
const VERSION: u16 = 1;
const LEN: usize = 36;

/// What a store lost to corruption and has not got back yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairMarker {
    /// The first entry that was damaged (the log was cut before it).
    pub first_bad_index: u64,
    /// The last index of the log before the cut.
    pub lost_last_index: u64,
    /// The term of that entry.
    pub lost_last_term: u64,
}

impl RepairMarker {
    /// Whether a log ending at (`last_index`, `last_term`) is at least as up to date as the
    /// log was before the cut (Raft's comparison: later last term, or same term and at least
    /// as long).
    pub fn covered_by(&self, last_index: u64, last_term: u64) -> bool {
        last_term > self.lost_last_term
            || (last_term == self.lost_last_term && last_index >= self.lost_last_index)
    }

    /// The marker covering both damages: the earlier first bad index and the more up to
    /// date lost end.
    pub fn merge(self, other: RepairMarker) -> RepairMarker {
        let newer = if other.covered_by(self.lost_last_index, self.lost_last_term) {
            self
        } else {
            other
        };
        RepairMarker {
            first_bad_index: self.first_bad_index.min(other.first_bad_index),
            lost_last_index: newer.lost_last_index,
            lost_last_term: newer.lost_last_term,
        }
    }
}

/// Writes the marker durably (merged with one already there).
pub(crate) fn save(dir: &Path, marker: RepairMarker) -> Result<RepairMarker> {
    let marker = match load(dir)? {
        Some(old) => old.merge(marker),
        None => marker,
    };
    let mut b = Vec::with_capacity(LEN);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&marker.first_bad_index.to_le_bytes());
    b.extend_from_slice(&marker.lost_last_index.to_le_bytes());
    b.extend_from_slice(&marker.lost_last_term.to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    atomic_write(dir, REPAIR_FILE, &b)?;
    Ok(marker)
}

/// Reads the marker; `None` when there is none. A damaged marker is an error naming the file:
/// without it the store cannot tell what it lost, and guessing could make it vote as if it
/// held entries it does not.
pub(crate) fn load(dir: &Path) -> Result<Option<RepairMarker>> {
    let path = dir.join(REPAIR_FILE);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path)(e)),
    };
    if data.len() != LEN || &data[0..4] != MAGIC {
        return Err(corruption(&path, 0, "repair marker: bad magic or length"));
    }
    let stored = u32::from_le_bytes([data[32], data[33], data[34], data[35]]);
    if crc32c::crc32c(&data[..32]) != stored {
        return Err(corruption(&path, 32, "repair marker: CRC mismatch"));
    }
    let u = |at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&data[at..at + 8]);
        u64::from_le_bytes(a)
    };
    Ok(Some(RepairMarker {
        first_bad_index: u(8),
        lost_last_index: u(16),
        lost_last_term: u(24),
    }))
}

/// Removes the marker durably.
pub(crate) fn remove(dir: &Path) -> Result<()> {
    remove_if_exists(&dir.join(REPAIR_FILE))?;
    fsync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_merge_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        let a = RepairMarker {
            first_bad_index: 50,
            lost_last_index: 100,
            lost_last_term: 3,
        };
        assert_eq!(save(dir.path(), a).unwrap(), a);
        let b = RepairMarker {
            first_bad_index: 70,
            lost_last_index: 90,
            lost_last_term: 4,
        };
        let m = save(dir.path(), b).unwrap();
        assert_eq!(
            m,
            RepairMarker {
                first_bad_index: 50,
                lost_last_index: 90,
                lost_last_term: 4
            }
        );
        assert_eq!(load(dir.path()).unwrap(), Some(m));
        assert!(m.covered_by(90, 4) && m.covered_by(1, 5) && !m.covered_by(200, 3));
        let path = dir.path().join(REPAIR_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[10] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(load(dir.path()).is_err());
        remove(dir.path()).unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
    }
}
