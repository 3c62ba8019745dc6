//! Raft hard state and configuration state, each in a small file replaced atomically.

use std::path::Path;

use crate::error::{corruption, io_err, LogStoreError, Result};
use crate::fsutil::{atomic_write, fdatasync};

/// Raft's persistent vote state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HardState {
    /// Current term.
    pub term: u64,
    /// Candidate voted for in the current term (0: none).
    pub vote: u64,
    /// Highest index known committed.
    pub commit: u64,
}

/// Raft's membership configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfState {
    /// Voting members.
    pub voters: Vec<u64>,
    /// Non-voting members.
    pub learners: Vec<u64>,
    /// Voters of the outgoing configuration during a joint change.
    pub voters_outgoing: Vec<u64>,
    /// Learners to add when the joint change is left.
    pub learners_next: Vec<u64>,
    /// Whether the joint configuration is left automatically.
    pub auto_leave: bool,
}

pub(crate) const HARD_STATE_FILE: &str = "hardstate";
pub(crate) const CONF_STATE_FILE: &str = "confstate";
/// Present (empty) while the votes of a replica whose `hardstate` was damaged are unknown.
pub(crate) const VOTE_UNKNOWN_FILE: &str = "vote_unknown";
const HS_MAGIC: &[u8; 4] = b"VDLH";
const CS_MAGIC: &[u8; 4] = b"VDLC";
/// Version of the `confstate` file, and of the `hardstate` files the old format wrote.
const VERSION: u16 = 1;
/// Version of the `hardstate` file's slots.
const HS_VERSION: u16 = 2;

/// `hardstate` file, version 2: 1,024 bytes, two slots of 512 bytes (a disk sector each),
/// little-endian:
/// `"VDLH" | version u16 = 2 | flags u16 = 0 | seq u64 | term u64 | vote u64 | commit u64 |
///  crc u32 | zeros to 512 bytes`, the CRC-32C over the 40 bytes before it.
///
/// Saves alternate between the slots (save `seq` goes to slot `(seq - 1) % 2`) and overwrite
/// it in place (pwrite + fdatasync), so a save never needs new disk space: a full disk, which
/// fills on every replica at about the same time since they hold the same data, must not
/// stop a node from recording a new term or vote (it used to: the replacement file could not
/// be written, the node stopped, and a cluster whose disks filled together lost its quorum).
/// That holds on file systems that overwrite in place (ext4, XFS), not on copy-on-write ones.
/// The slot with the higher `seq` is the state. A slot of zeros was never written; any other
/// slot that fails its checks is damage, even the older one: a torn write cannot cause it
/// (a sector is written whole or not at all), so it is a changed byte, and which slot held
/// the newer state is then unknown (see [`crate::LogStore::hard_state_damage`]).
///
/// Version 1, 36 bytes (`"VDLH" | version u16 = 1 | flags u16 | term | vote | commit |
/// crc`), replaced atomically on every save, is still read; the first save after it writes a
/// version-2 file (temp, fsync, rename, fsync dir: new space once), as does a save after
/// damage.
pub(crate) fn save_hard_state(dir: &Path, hs: &HardState, seq: u64, in_place: bool) -> Result<()> {
    assert!(seq > 0, "hard-state saves count from 1");
    write_slot(
        dir,
        HARD_STATE_FILE,
        &hard_state_slot(hs, seq),
        seq,
        in_place,
    )
}

/// Writes save `seq`'s slot (`slot`, one slot's bytes) of a two-slot file: slot `(seq - 1) % 2`
/// overwritten in place (pwrite + fdatasync, no new space) when `in_place`, else a new file
/// with that slot and zeros in the other, replaced atomically.
fn write_slot(dir: &Path, name: &str, slot: &[u8], seq: u64, in_place: bool) -> Result<()> {
    let at = slot.len() * ((seq - 1) % 2) as usize;
    if in_place {
        let path = dir.join(name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        crate::fs::fs()
            .write_all_at(&file, &path, slot, at as u64)
            .map_err(io_err(&path))?;
        fdatasync(&file, &path);
        return Ok(());
    }
    let mut file = vec![0u8; 2 * slot.len()];
    file[at..at + slot.len()].copy_from_slice(slot);
    atomic_write(dir, name, &file)
}

/// Bytes of one slot of a version-2 `hardstate` file.
const HS_SLOT_BYTES: usize = 512;

/// Bytes of a slot before its padding (the record and its CRC).
const HS_RECORD_BYTES: usize = 44;

/// Bytes of a version-1 `hardstate` file.
const HS_V1_BYTES: usize = 36;

fn hard_state_slot(hs: &HardState, seq: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(HS_SLOT_BYTES);
    b.extend_from_slice(HS_MAGIC);
    b.extend_from_slice(&HS_VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(&hs.term.to_le_bytes());
    b.extend_from_slice(&hs.vote.to_le_bytes());
    b.extend_from_slice(&hs.commit.to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(b.len(), HS_RECORD_BYTES);
    b.resize(HS_SLOT_BYTES, 0);
    b
}

/// `confstate` file, version 2: 2,048 bytes, two slots of 1,024 bytes, little-endian:
/// `"VDLC" | version u16 = 2 | flags u16 = 0 | seq u64 | auto_leave u8 | 3 zero bytes |
///  n_voters u32 | n_learners u32 | n_voters_outgoing u32 | n_learners_next u32 |
///  the ids (u64 each) in that order | crc u32 | zeros to 1,024 bytes`, the CRC-32C over the
/// record before it. As the `hardstate` file's slots: saves alternate between the slots
/// (save `seq` goes to slot `(seq - 1) % 2`) and overwrite them in place (pwrite +
/// fdatasync), so saving a configuration change at apply never needs new disk space (with a
/// full disk it used to fail and stop the node at every restart); the higher `seq` wins; a
/// slot of zeros was never written, any other bad slot is damage (the open fails).
///
/// Version 1 (`"VDLC" | version u16 = 1 | flags u16 | auto_leave u8 | 3 zero bytes | the
/// four counts | the ids | crc`, replaced atomically on every save) is still read; the first
/// save after it writes a version-2 file through a temp file (new space once).
pub(crate) fn save_conf_state(dir: &Path, cs: &ConfState, seq: u64, in_place: bool) -> Result<()> {
    assert!(seq > 0, "conf-state saves count from 1");
    let slot = conf_state_slot(dir, cs, seq)?;
    debug_assert_eq!(slot.len(), CS_SLOT_BYTES);
    write_slot(dir, CONF_STATE_FILE, &slot, seq, in_place)
}

/// Bytes of one slot of a version-2 `confstate` file.
const CS_SLOT_BYTES: usize = 1024;
/// Version of the `confstate` file's slots.
const CS_VERSION: u16 = 2;
/// Bytes of a version-2 slot's record before the ids.
const CS_HEAD_BYTES: usize = 36;

fn conf_state_slot(dir: &Path, cs: &ConfState, seq: u64) -> Result<Vec<u8>> {
    let lists = [
        &cs.voters,
        &cs.learners,
        &cs.voters_outgoing,
        &cs.learners_next,
    ];
    let ids: usize = lists.iter().map(|l| l.len()).sum();
    if CS_HEAD_BYTES + 8 * ids + 4 > CS_SLOT_BYTES {
        return Err(LogStoreError::InvalidArgument(format!(
            "{}: a configuration of {ids} ids does not fit a {CS_SLOT_BYTES}-byte slot",
            dir.display()
        )));
    }
    let mut b = Vec::with_capacity(CS_SLOT_BYTES);
    b.extend_from_slice(CS_MAGIC);
    b.extend_from_slice(&CS_VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    b.push(u8::from(cs.auto_leave));
    b.extend_from_slice(&[0, 0, 0]);
    for l in lists {
        b.extend_from_slice(&(l.len() as u32).to_le_bytes());
    }
    for l in lists {
        for id in l.iter() {
            b.extend_from_slice(&id.to_le_bytes());
        }
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b.resize(CS_SLOT_BYTES, 0);
    Ok(b)
}

fn read_checked(
    dir: &Path,
    name: &str,
    magic: &[u8; 4],
    min_len: usize,
) -> Result<Option<Vec<u8>>> {
    let path = dir.join(name);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path)(e)),
    };
    if data.len() < 12 || &data[0..4] != magic {
        return Err(corruption(&path, 0, "bad magic or file too short"));
    }
    let version = u16::from_le_bytes([data[4], data[5]]);
    if version > VERSION {
        return Err(LogStoreError::UnsupportedVersion {
            path,
            found: version,
            supported: VERSION,
        });
    }
    if data.len() < min_len {
        return Err(corruption(&path, data.len() as u64, "file too short"));
    }
    let body = data.len() - 4;
    let stored = u32::from_le_bytes([data[body], data[body + 1], data[body + 2], data[body + 3]]);
    if crc32c::crc32c(&data[..body]) != stored {
        return Err(corruption(&path, body as u64, "CRC mismatch"));
    }
    Ok(Some(data))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// What a `hardstate` file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LoadedHardState {
    /// The state (the default when there is no file).
    pub state: HardState,
    /// Its save's sequence number (0: no file, or a version-1 file).
    pub seq: u64,
    /// Whether the file is a version-2 file the next save can overwrite in place.
    pub in_place: bool,
}

/// Loads the hard state; the default when the file does not exist. A file that fails its
/// checks is [`LogStoreError::Corruption`] (see [`save_hard_state`] for what counts).
pub(crate) fn load_hard_state(dir: &Path) -> Result<LoadedHardState> {
    let path = dir.join(HARD_STATE_FILE);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LoadedHardState::default()),
        Err(e) => return Err(io_err(&path)(e)),
    };
    if data.len() == 2 * HS_SLOT_BYTES {
        let mut written: Vec<(u64, HardState)> = Vec::with_capacity(2);
        for (i, slot) in data.chunks(HS_SLOT_BYTES).enumerate() {
            let at = (i * HS_SLOT_BYTES) as u64;
            if slot.iter().all(|&b| b == 0) {
                continue;
            }
            let (seq, hs) = parse_slot(&path, at, slot)?;
            if (seq - 1) % 2 != i as u64 {
                return Err(corruption(
                    &path,
                    at + 8,
                    "a save in the other slot's place",
                ));
            }
            written.push((seq, hs));
        }
        if let [(a, _), (b, _)] = written[..] {
            if a.abs_diff(b) != 1 {
                return Err(corruption(&path, 8, "the slots are not consecutive saves"));
            }
        }
        let Some(&(seq, state)) = written.iter().max_by_key(|(seq, _)| *seq) else {
            return Err(corruption(&path, 0, "no hard-state slot was ever written"));
        };
        return Ok(LoadedHardState {
            state,
            seq,
            in_place: true,
        });
    }
    let Some(d) = read_checked(dir, HARD_STATE_FILE, HS_MAGIC, HS_V1_BYTES)? else {
        return Ok(LoadedHardState::default());
    };
    if d.len() != HS_V1_BYTES {
        return Err(corruption(&path, 0, "wrong file length"));
    }
    Ok(LoadedHardState {
        state: HardState {
            term: u64_at(&d, 8),
            vote: u64_at(&d, 16),
            commit: u64_at(&d, 24),
        },
        seq: 0,
        in_place: false,
    })
}

/// Checks and decodes one slot of a version-2 file (at byte `at` of `path`).
fn parse_slot(path: &Path, at: u64, slot: &[u8]) -> Result<(u64, HardState)> {
    if &slot[0..4] != HS_MAGIC {
        return Err(corruption(path, at, "bad magic in a hard-state slot"));
    }
    let version = u16::from_le_bytes([slot[4], slot[5]]);
    if version > HS_VERSION {
        return Err(LogStoreError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: HS_VERSION,
        });
    }
    if version != HS_VERSION {
        return Err(corruption(
            path,
            at + 4,
            "wrong version in a hard-state slot",
        ));
    }
    let body = HS_RECORD_BYTES - 4;
    let stored = u32::from_le_bytes([slot[body], slot[body + 1], slot[body + 2], slot[body + 3]]);
    if crc32c::crc32c(&slot[..body]) != stored {
        return Err(corruption(path, at + body as u64, "CRC mismatch"));
    }
    if slot[HS_RECORD_BYTES..].iter().any(|&b| b != 0) {
        return Err(corruption(
            path,
            at + HS_RECORD_BYTES as u64,
            "bytes after the record",
        ));
    }
    let seq = u64_at(slot, 8);
    if seq == 0 {
        return Err(corruption(path, at + 8, "sequence number 0"));
    }
    Ok((
        seq,
        HardState {
            term: u64_at(slot, 16),
            vote: u64_at(slot, 24),
            commit: u64_at(slot, 32),
        },
    ))
}

/// The `confstate` file as loaded: the state, its save sequence number (0: none, or a
/// version-1 file) and whether the next save may overwrite a slot in place.
#[derive(Debug, Default)]
pub(crate) struct LoadedConfState {
    pub state: ConfState,
    pub seq: u64,
    pub in_place: bool,
}

/// Reads the `confstate` file, version 2 or 1 (see [`save_conf_state`]); a missing file is
/// the default (empty) configuration.
pub(crate) fn load_conf_state(dir: &Path) -> Result<LoadedConfState> {
    let path = dir.join(CONF_STATE_FILE);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LoadedConfState::default()),
        Err(e) => return Err(io_err(&path)(e)),
    };
    if data.len() < 6 || &data[0..4] != CS_MAGIC {
        return Err(corruption(&path, 0, "bad magic or file too short"));
    }
    match u16::from_le_bytes([data[4], data[5]]) {
        VERSION => Ok(LoadedConfState {
            state: load_conf_state_v1(dir)?,
            seq: 0,
            in_place: false,
        }),
        CS_VERSION => {
            if data.len() != 2 * CS_SLOT_BYTES {
                return Err(corruption(&path, 0, "not two slots long"));
            }
            let mut newest: Option<(u64, ConfState)> = None;
            for (i, slot) in data.chunks(CS_SLOT_BYTES).enumerate() {
                if slot.iter().all(|b| *b == 0) {
                    continue;
                }
                let at = (i * CS_SLOT_BYTES) as u64;
                let (seq, state) = parse_conf_slot(&path, at, slot)?;
                if newest.as_ref().is_none_or(|(s, _)| seq > *s) {
                    newest = Some((seq, state));
                }
            }
            let Some((seq, state)) = newest else {
                return Err(corruption(&path, 0, "no slot written"));
            };
            Ok(LoadedConfState {
                state,
                seq,
                in_place: true,
            })
        }
        found => Err(LogStoreError::UnsupportedVersion {
            path,
            found,
            supported: CS_VERSION,
        }),
    }
}

fn parse_conf_slot(path: &Path, at: u64, slot: &[u8]) -> Result<(u64, ConfState)> {
    if &slot[0..4] != CS_MAGIC || u16::from_le_bytes([slot[4], slot[5]]) != CS_VERSION {
        return Err(corruption(path, at, "bad slot header"));
    }
    let count = |i: usize| u32::from_le_bytes([slot[i], slot[i + 1], slot[i + 2], slot[i + 3]]);
    let counts = [count(20), count(24), count(28), count(32)];
    let total: u64 = counts.iter().map(|c| u64::from(*c)).sum();
    let record = CS_HEAD_BYTES as u64 + total * 8;
    if record + 4 > CS_SLOT_BYTES as u64 {
        return Err(corruption(path, at + 20, "id counts beyond the slot"));
    }
    let record = record as usize;
    let stored = u32::from_le_bytes([
        slot[record],
        slot[record + 1],
        slot[record + 2],
        slot[record + 3],
    ]);
    if crc32c::crc32c(&slot[..record]) != stored {
        return Err(corruption(path, at + record as u64, "CRC mismatch"));
    }
    Ok((
        u64_at(slot, 8),
        conf_state_from_ids(slot, CS_HEAD_BYTES, counts, slot[16] != 0),
    ))
}

/// Reads a version-1 `confstate` file.
fn load_conf_state_v1(dir: &Path) -> Result<ConfState> {
    let Some(d) = read_checked(dir, CONF_STATE_FILE, CS_MAGIC, 32)? else {
        return Ok(ConfState::default());
    };
    let path = dir.join(CONF_STATE_FILE);
    let count = |at: usize| u32::from_le_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]) as u64;
    let counts = [count(12), count(16), count(20), count(24)];
    let total: u64 = counts.iter().sum();
    if 28 + total * 8 + 4 != d.len() as u64 {
        return Err(corruption(
            &path,
            12,
            "id counts do not match the file length",
        ));
    }
    Ok(conf_state_from_ids(&d, 28, counts, d[8] != 0))
}

/// The configuration whose four id lists (voters, learners, outgoing voters, next learners;
/// `counts` ids each) stand back to back in `b` from `ids_at`; the caller checked the length.
fn conf_state_from_ids<N: Into<u64>>(
    b: &[u8],
    ids_at: usize,
    counts: [N; 4],
    auto_leave: bool,
) -> ConfState {
    let mut pos = ids_at;
    let mut lists = counts.map(|n| {
        let n = n.into();
        let list: Vec<u64> = (0..n).map(|k| u64_at(b, pos + 8 * k as usize)).collect();
        pos += 8 * n as usize;
        list
    });
    ConfState {
        voters: std::mem::take(&mut lists[0]),
        learners: std::mem::take(&mut lists[1]),
        voters_outgoing: std::mem::take(&mut lists[2]),
        learners_next: std::mem::take(&mut lists[3]),
        auto_leave,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hs(term: u64) -> HardState {
        HardState {
            term,
            vote: term % 3 + 1,
            commit: term * 10,
        }
    }

    fn flip(path: &Path, at: usize) {
        let mut d = std::fs::read(path).unwrap();
        d[at] ^= 1;
        std::fs::write(path, &d).unwrap();
    }

    #[test]
    fn saves_alternate_slots_in_place_and_the_newest_wins() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            load_hard_state(dir.path()).unwrap(),
            LoadedHardState::default()
        );
        save_hard_state(dir.path(), &hs(1), 1, false).unwrap();
        let path = dir.path().join(HARD_STATE_FILE);
        let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        for seq in 2..=5 {
            save_hard_state(dir.path(), &hs(seq), seq, true).unwrap();
            let loaded = load_hard_state(dir.path()).unwrap();
            assert_eq!(
                loaded,
                LoadedHardState {
                    state: hs(seq),
                    seq,
                    in_place: true
                }
            );
        }
        // Overwritten in place: the same file, still two slots.
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::ino(&meta), inode);
        assert_eq!(meta.len(), 2 * HS_SLOT_BYTES as u64);
        // Save 5 went to slot 0, save 4 is in slot 1.
        let d = std::fs::read(&path).unwrap();
        assert_eq!(u64_at(&d, 8), 5);
        assert_eq!(u64_at(&d, HS_SLOT_BYTES + 8), 4);
    }

    #[test]
    fn a_changed_byte_in_either_slot_is_damage_and_an_unwritten_slot_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(HARD_STATE_FILE);
        // One save: slot 1 is zeros (never written), which is no damage.
        save_hard_state(dir.path(), &hs(7), 1, false).unwrap();
        assert_eq!(load_hard_state(dir.path()).unwrap().state, hs(7));
        save_hard_state(dir.path(), &hs(8), 2, true).unwrap();
        // The newest slot (1) changed: its state is unknown, so is the node's vote.
        flip(&path, HS_SLOT_BYTES + 20);
        assert!(matches!(
            load_hard_state(dir.path()),
            Err(LogStoreError::Corruption { .. })
        ));
        flip(&path, HS_SLOT_BYTES + 20);
        // The older slot (0) changed: which slot was newer is unknown too.
        flip(&path, 12);
        assert!(matches!(
            load_hard_state(dir.path()),
            Err(LogStoreError::Corruption { .. })
        ));
        flip(&path, 12);
        // Valid slots that are not two consecutive saves (a stale copy of another file).
        let good = std::fs::read(&path).unwrap();
        let mut stale = good.clone();
        stale[HS_SLOT_BYTES..].copy_from_slice(&hard_state_slot(&hs(3), 4));
        std::fs::write(&path, &stale).unwrap();
        assert!(load_hard_state(dir.path()).is_err());
        stale[HS_SLOT_BYTES..].copy_from_slice(&hard_state_slot(&hs(3), 3));
        std::fs::write(&path, &stale).unwrap();
        assert!(
            load_hard_state(dir.path()).is_err(),
            "seq 3 belongs in slot 0"
        );
        std::fs::write(&path, &good).unwrap();
        assert_eq!(load_hard_state(dir.path()).unwrap().state, hs(8));
        // A byte in a slot's padding, and a file of another length.
        flip(&path, HS_SLOT_BYTES - 1);
        assert!(load_hard_state(dir.path()).is_err());
        std::fs::write(&path, b"garbage").unwrap();
        assert!(load_hard_state(dir.path()).is_err());
        std::fs::write(&path, vec![0u8; 2 * HS_SLOT_BYTES]).unwrap();
        assert!(load_hard_state(dir.path()).is_err());
    }

    #[test]
    fn a_version_1_file_is_read_and_replaced_by_the_next_save() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(HARD_STATE_FILE);
        let mut v1 = Vec::new();
        v1.extend_from_slice(HS_MAGIC);
        v1.extend_from_slice(&1u16.to_le_bytes());
        v1.extend_from_slice(&0u16.to_le_bytes());
        for x in [4u64, 2, 33] {
            v1.extend_from_slice(&x.to_le_bytes());
        }
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &v1).unwrap();
        let loaded = load_hard_state(dir.path()).unwrap();
        assert_eq!(
            loaded,
            LoadedHardState {
                state: HardState {
                    term: 4,
                    vote: 2,
                    commit: 33
                },
                seq: 0,
                in_place: false
            }
        );
        save_hard_state(dir.path(), &hs(5), 1, loaded.in_place).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            2 * HS_SLOT_BYTES as u64
        );
        assert_eq!(load_hard_state(dir.path()).unwrap().state, hs(5));
        // A changed byte in a version-1 file is damage as before.
        std::fs::write(&path, &v1).unwrap();
        flip(&path, 10);
        assert!(matches!(
            load_hard_state(dir.path()),
            Err(LogStoreError::Corruption { .. })
        ));
    }

    #[test]
    fn conf_state_roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        let cs = ConfState {
            voters: vec![1, 2, 3],
            learners: vec![4],
            voters_outgoing: vec![],
            learners_next: vec![5, 6],
            auto_leave: true,
        };
        save_conf_state(dir.path(), &cs, 1, false).unwrap();
        assert_eq!(load_conf_state(dir.path()).unwrap().state, cs);
        // Later saves overwrite the slots in place, alternately; the newest wins.
        let path = dir.path().join(CONF_STATE_FILE);
        for seq in 2..6u64 {
            let next = ConfState {
                voters: vec![1, 2, seq],
                ..cs.clone()
            };
            save_conf_state(dir.path(), &next, seq, true).unwrap();
            let loaded = load_conf_state(dir.path()).unwrap();
            assert_eq!(
                (loaded.state, loaded.seq, loaded.in_place),
                (next, seq, true)
            );
            assert_eq!(std::fs::metadata(&path).unwrap().len(), 2048);
        }
        // A changed byte in a slot is damage.
        flip(&path, 1024 + 40);
        assert!(load_conf_state(dir.path()).is_err());
    }

    #[test]
    fn a_version_1_conf_state_is_read_and_replaced_by_the_next_save() {
        let dir = tempfile::tempdir().unwrap();
        // Version 1: the record alone, replaced atomically.
        let mut b = Vec::new();
        b.extend_from_slice(CS_MAGIC);
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&[0, 0, 0, 0]);
        for n in [3u32, 0, 0, 0] {
            b.extend_from_slice(&n.to_le_bytes());
        }
        for id in [1u64, 2, 3] {
            b.extend_from_slice(&id.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        std::fs::write(dir.path().join(CONF_STATE_FILE), &b).unwrap();
        let loaded = load_conf_state(dir.path()).unwrap();
        assert_eq!(loaded.state.voters, vec![1, 2, 3]);
        assert_eq!((loaded.seq, loaded.in_place), (0, false));
        let cs = ConfState {
            voters: vec![1, 2, 4],
            ..Default::default()
        };
        save_conf_state(dir.path(), &cs, 1, loaded.in_place).unwrap();
        let loaded = load_conf_state(dir.path()).unwrap();
        assert_eq!((loaded.state, loaded.seq, loaded.in_place), (cs, 1, true));
    }
}
