//! Raft hard state and configuration state, each in a small file replaced atomically.

use std::path::Path;

use crate::error::{corruption, io_err, LogStoreError, Result};
use crate::fsutil::atomic_write;

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
const HS_MAGIC: &[u8; 4] = b"VDLH";
const CS_MAGIC: &[u8; 4] = b"VDLC";
const VERSION: u16 = 1;

/// `hardstate` file, little-endian, 40 bytes:
/// `"VDLH" | version u16 = 1 | flags u16 = 0 | term u64 | vote u64 | commit u64 | crc u32`
/// with the CRC-32C over the preceding 32 bytes. Replaced atomically (temp, fsync, rename,
/// fsync dir).
pub(crate) fn save_hard_state(dir: &Path, hs: &HardState) -> Result<()> {
    let mut b = Vec::with_capacity(40);
    b.extend_from_slice(HS_MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&hs.term.to_le_bytes());
    b.extend_from_slice(&hs.vote.to_le_bytes());
    b.extend_from_slice(&hs.commit.to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    atomic_write(dir, HARD_STATE_FILE, &b)
}

/// `confstate` file, little-endian:
/// `"VDLC" | version u16 = 1 | flags u16 = 0 | auto_leave u8 | 3 zero bytes |
///  n_voters u32 | n_learners u32 | n_voters_outgoing u32 | n_learners_next u32 |
///  the ids (u64 each) in that order | crc u32` (CRC-32C over everything before it).
pub(crate) fn save_conf_state(dir: &Path, cs: &ConfState) -> Result<()> {
    let mut b = Vec::new();
    b.extend_from_slice(CS_MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.push(u8::from(cs.auto_leave));
    b.extend_from_slice(&[0, 0, 0]);
    let lists = [
        &cs.voters,
        &cs.learners,
        &cs.voters_outgoing,
        &cs.learners_next,
    ];
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
    atomic_write(dir, CONF_STATE_FILE, &b)
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

/// Loads the hard state; the default when the file does not exist.
pub(crate) fn load_hard_state(dir: &Path) -> Result<HardState> {
    let Some(d) = read_checked(dir, HARD_STATE_FILE, HS_MAGIC, 36)? else {
        return Ok(HardState::default());
    };
    if d.len() != 36 {
        return Err(corruption(
            dir.join(HARD_STATE_FILE),
            0,
            "wrong file length",
        ));
    }
    Ok(HardState {
        term: u64_at(&d, 8),
        vote: u64_at(&d, 16),
        commit: u64_at(&d, 24),
    })
}

/// Loads the configuration state; the default when the file does not exist.
pub(crate) fn load_conf_state(dir: &Path) -> Result<ConfState> {
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
    let mut at = 28;
    let mut lists: Vec<Vec<u64>> = Vec::with_capacity(4);
    for n in counts {
        let mut l = Vec::with_capacity(n as usize);
        for _ in 0..n {
            l.push(u64_at(&d, at));
            at += 8;
        }
        lists.push(l);
    }
    let learners_next = lists.pop().unwrap_or_default();
    let voters_outgoing = lists.pop().unwrap_or_default();
    let learners = lists.pop().unwrap_or_default();
    let voters = lists.pop().unwrap_or_default();
    Ok(ConfState {
        voters,
        learners,
        voters_outgoing,
        learners_next,
        auto_leave: d[8] != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_hard_state(dir.path()).unwrap(), HardState::default());
        let hs = HardState {
            term: 3,
            vote: 2,
            commit: 99,
        };
        save_hard_state(dir.path(), &hs).unwrap();
        assert_eq!(load_hard_state(dir.path()).unwrap(), hs);
        let cs = ConfState {
            voters: vec![1, 2, 3],
            learners: vec![4],
            voters_outgoing: vec![],
            learners_next: vec![5, 6],
            auto_leave: true,
        };
        save_conf_state(dir.path(), &cs).unwrap();
        assert_eq!(load_conf_state(dir.path()).unwrap(), cs);
        let p = dir.path().join(HARD_STATE_FILE);
        let mut d = std::fs::read(&p).unwrap();
        d[10] ^= 1;
        std::fs::write(&p, &d).unwrap();
        assert!(matches!(
            load_hard_state(dir.path()),
            Err(LogStoreError::Corruption { .. })
        ));
        std::fs::write(&p, b"garbage").unwrap();
        assert!(load_hard_state(dir.path()).is_err());
    }
}
