//! Snapshots of the cluster metadata ([`crate::metadata::ClusterMeta`]), so a node's restart
//! does not replay the metadata log from its first entry.
//!
//! **What a snapshot is.** The state after applying every entry up to and including Raft index
//! `index` (term `term`), encoded by [`crate::metadata::codec::encode_snapshot`] (format byte,
//! CRC-32C, protobuf). The same bytes are the file on disk and the `data` of the Raft snapshot
//! a leader sends a follower whose needed entries were compacted.
//!
//! **Why replaying after it equals a full replay.** `ClusterMeta::apply` is a function of the
//! state and the command (plus the entry's index, which the log after the snapshot still
//! carries). The snapshot holds every field `apply` reads or writes: the topics (incarnation,
//! partitions, replica lists, config overrides, DeleteRecords floors), the next producer id,
//! the remembered allocations (in order, so the bound evicts the same ones), the committed
//! offsets and those pending in transactions (with the index that wrote each), the stored
//! group memberships, the groups' activity times, and the remembered request ids in order (so
//! a retried command after the snapshot is refused exactly when a full replay would refuse it,
//! and the bound evicts the same ids). The one field it leaves out,
//! `members`, is not changed by any command: it comes from the node's configuration in both
//! cases. So the state after loading a snapshot at `S` and applying entries `S+1..` equals the
//! state after applying `1..` (checked by a unit test built from commands).
//!
//! **Deleted incarnations.** At start, [`crate::node::Node`] reads every `DeleteTopic` still in
//! the log so a replayed `CreateTopic` of an incarnation deleted later is not opened again. With
//! a snapshot at `S`, the incarnations opened at start are those alive at `S` (from the
//! snapshot) and those created after `S` (replayed). A delete of either has an index above `S`
//! (an incarnation alive at `S` was not deleted by then), so it is in the log kept after the
//! snapshot; incarnations deleted at or before `S` are in neither set. The snapshot needs no
//! list of deleted incarnations.
//!
//! **Files.** `meta-snapshot-<index, 20 digits>.snap` in the metadata group's directory: written
//! to a `.tmp` file, fsynced, renamed, the directory fsynced; only then are older snapshot
//! files removed (and only then may the log be compacted below the new index). At start the
//! newest is loaded; a damaged one is an error naming the file, never skipped for an older one.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::metadata::codec::SnapshotDecodeError;

/// Largest snapshot written or read: it must fit one peer frame to reach a follower (with room
/// for the Raft message around it).
pub const MAX_SNAPSHOT_BYTES: usize = crate::replication::transport::MAX_FRAME_BYTES - (1 << 20);

const PREFIX: &str = "meta-snapshot-";
const SUFFIX: &str = ".snap";

/// Why a snapshot could not be written or read.
#[derive(Debug, Error)]
pub enum SnapshotFileError {
    /// A file system operation failed.
    #[error("metadata snapshot {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is damaged (bad format byte, CRC or protobuf) or its index disagrees with its
    /// name.
    #[error("metadata snapshot {path} is damaged: {reason} (move it away only if the log before it is complete)")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Larger than [`MAX_SNAPSHOT_BYTES`].
    #[error("metadata snapshot {path} has {bytes} bytes, more than the {max} a snapshot may have")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
        /// The limit.
        max: usize,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotFileError + '_ {
    move |source| SnapshotFileError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The file name of the snapshot at `index`.
pub fn file_name(index: u64) -> String {
    format!("{PREFIX}{index:020}{SUFFIX}")
}

fn index_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    (digits.len() == 20).then(|| digits.parse().ok())?
}

/// The snapshot files in `dir`, by index ascending.
fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>, SnapshotFileError> {
    let mut out = Vec::new();
    for ent in fs::read_dir(dir).map_err(io(dir))? {
        let ent = ent.map_err(io(dir))?;
        if let Some(index) = ent.file_name().to_str().and_then(index_of) {
            out.push((index, ent.path()));
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Durably writes `bytes` as the snapshot at `index` in `dir` (temp file, fsync, rename, fsync
/// of the directory), then removes the older snapshot files. When this returns Ok the log may
/// be compacted below `index + 1`.
pub fn write(dir: &Path, index: u64, bytes: &[u8]) -> Result<PathBuf, SnapshotFileError> {
    let path = dir.join(file_name(index));
    let tmp = dir.join(format!("{}.tmp", file_name(index)));
    {
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    fs::rename(&tmp, &path).map_err(io(&path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    for (old, old_path) in list(dir)? {
        if old < index {
            fs::remove_file(&old_path).map_err(io(&old_path))?;
        }
    }
    Ok(path)
}

/// The newest snapshot in `dir`: (index, its bytes, checked: format byte, CRC, protobuf, and
/// the index inside equals the one in the name). None when there is none. A damaged newest
/// snapshot is an error; an older one is never used instead.
pub fn load_newest(
    dir: &Path,
) -> Result<Option<(crate::metadata::codec::MetaSnapshotWire, Vec<u8>)>, SnapshotFileError> {
    let Some((index, path)) = list(dir)?.pop() else {
        return Ok(None);
    };
    let mut f = File::open(&path).map_err(io(&path))?;
    let len = f.metadata().map_err(io(&path))?.len();
    if len > MAX_SNAPSHOT_BYTES as u64 {
        return Err(SnapshotFileError::TooLarge {
            path,
            bytes: len,
            max: MAX_SNAPSHOT_BYTES,
        });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.read_to_end(&mut bytes).map_err(io(&path))?;
    let damaged = |reason: String| SnapshotFileError::Damaged {
        path: path.clone(),
        reason,
    };
    let wire = crate::metadata::codec::decode_snapshot(&bytes)
        .map_err(|e: SnapshotDecodeError| damaged(e.to_string()))?;
    if wire.index != index {
        return Err(damaged(format!(
            "holds index {} under the name of index {index}",
            wire.index
        )));
    }
    Ok(Some((wire, bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::ClusterMeta;

    #[test]
    fn files_are_replaced_durably_and_damage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load_newest(dir.path()).unwrap().is_none());
        let meta = ClusterMeta::new(vec![1, 2, 3]);
        let bytes = |index| crate::metadata::codec::encode_snapshot(&meta.to_snapshot(index, 2));
        write(dir.path(), 10, &bytes(10)).unwrap();
        let second = write(dir.path(), 20, &bytes(20)).unwrap();
        let (wire, _) = load_newest(dir.path()).unwrap().unwrap();
        assert_eq!((wire.index, wire.term), (20, 2));
        assert_eq!(list(dir.path()).unwrap().len(), 1, "the older file is gone");
        // One flipped byte: an error naming the file, not the state of an older snapshot.
        let mut data = fs::read(&second).unwrap();
        let last = data.len() - 1;
        data[last] ^= 0x40;
        fs::write(&second, &data).unwrap();
        let err = load_newest(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(&file_name(20)) && err.contains("checksum"),
            "{err}"
        );
        // A file whose name and contents disagree.
        fs::write(dir.path().join(file_name(30)), bytes(31)).unwrap();
        let err = load_newest(dir.path()).unwrap_err().to_string();
        assert!(err.contains("holds index 31"), "{err}");
    }
}
