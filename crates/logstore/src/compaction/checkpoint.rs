//! The cleaner's progress file, `cleaner-checkpoint` in the store's directory, so that a
//! restart resumes where the last pass ended instead of mapping the whole log again.
//!
//! Format (36 bytes, little-endian), replaced atomically through the file-system seam (temp
//! file, fsync, rename, directory fsync):
//!
//! ```text
//! @0  "VDLK"                   @4 version u16 = 1   @6 reserved u16 = 0
//! @8  generation u64           the store's generation (install_snapshot bumps it) when saved
//! @16 first_dirty_offset u64   offsets below it were compacted with a map covering them
//! @24 cleaned_at_ms i64        wall clock of that pass (metrics: time of the last clean)
//! @32 CRC-32C of @0..32
//! ```
//!
//! A missing, damaged or newer-version file reads as "no checkpoint": the next pass starts
//! from the log start, which only costs work (no tombstone is removed before a pass has kept
//! it, see `store_api.rs`). A checkpoint of another generation is ignored the same way: the
//! log was replaced by a snapshot and nothing in it is known to be clean.

use std::path::Path;

use crate::error::Result;

/// File name of the checkpoint in the store's directory.
pub(crate) const CHECKPOINT_FILE: &str = "cleaner-checkpoint";
const MAGIC: &[u8; 4] = b"VDLK";
const VERSION: u16 = 1;
const LEN: usize = 36;

/// The cleaner's saved progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CleanerCheckpoint {
    pub generation: u64,
    pub first_dirty_offset: u64,
    pub cleaned_at_ms: i64,
}

impl CleanerCheckpoint {
    fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0..4].copy_from_slice(MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.generation.to_le_bytes());
        b[16..24].copy_from_slice(&self.first_dirty_offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.cleaned_at_ms.to_le_bytes());
        let crc = crc32c::crc32c(&b[..32]);
        b[32..36].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a file's bytes; `None` for anything but an intact version-1 checkpoint.
    fn decode(b: &[u8]) -> Option<CleanerCheckpoint> {
        if b.len() != LEN || &b[0..4] != MAGIC || b[4..6] != VERSION.to_le_bytes() {
            return None;
        }
        let crc = u32::from_le_bytes(b[32..36].try_into().ok()?);
        if crc32c::crc32c(&b[..32]) != crc {
            return None;
        }
        let u =
            |at: usize| -> Option<u64> { Some(u64::from_le_bytes(b[at..at + 8].try_into().ok()?)) };
        Some(CleanerCheckpoint {
            generation: u(8)?,
            first_dirty_offset: u(16)?,
            cleaned_at_ms: u(24)? as i64,
        })
    }

    /// The checkpoint in `dir` (see the module docs for what reads as none).
    pub fn load(dir: &Path) -> Option<CleanerCheckpoint> {
        let bytes = std::fs::read(dir.join(CHECKPOINT_FILE)).ok()?;
        CleanerCheckpoint::decode(&bytes)
    }

    /// Replaces the checkpoint in `dir` atomically and durably.
    pub fn save(&self, dir: &Path) -> Result<()> {
        crate::fsutil::atomic_write(dir, CHECKPOINT_FILE, &self.encode())
    }

    /// Before the log in `dir` is cut at `next_offset` (a truncation, a repair, recovery's
    /// cut at damage): lowers a checkpoint whose first dirty offset lies above it to
    /// `next_offset`, durably. The entries written again after the cut were never mapped by
    /// this replica's cleaner; left "clean", a later pass could remove a tombstone among them
    /// while an older value of its key, written again with it, stayed (the deleted key
    /// visible again). Lowering only makes the next pass map more.
    pub fn lower(dir: &Path, next_offset: u64) -> Result<()> {
        match CleanerCheckpoint::load(dir) {
            Some(c) if c.first_dirty_offset > next_offset => CleanerCheckpoint {
                first_dirty_offset: next_offset,
                ..c
            }
            .save(dir),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(CleanerCheckpoint::load(dir.path()), None);
        let c = CleanerCheckpoint {
            generation: 3,
            first_dirty_offset: 12_345,
            cleaned_at_ms: -7,
        };
        c.save(dir.path()).unwrap();
        assert_eq!(CleanerCheckpoint::load(dir.path()), Some(c));
        let path = dir.path().join(CHECKPOINT_FILE);
        let good = std::fs::read(&path).unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            std::fs::write(&path, &bad).unwrap();
            assert_eq!(CleanerCheckpoint::load(dir.path()), None, "byte {at}");
        }
        std::fs::write(&path, &good[..20]).unwrap();
        assert_eq!(CleanerCheckpoint::load(dir.path()), None);
        std::fs::write(&path, b"").unwrap();
        assert_eq!(CleanerCheckpoint::load(dir.path()), None);
    }
}
