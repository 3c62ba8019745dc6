//! `<data_dir>/known_peers`: the peer addresses of members added at runtime (see
//! [`crate::replication::membership`]), so a restarted node admits and dials them before its
//! metadata replay reaches their `AddMember` command. Without it, nodes that all restart at once
//! could each refuse the others' connections (their saved commit index, written only with term and
//! vote, may predate the command) and no group could elect a leader.
//!
//! Format: one `ID IP:PORT` line per member, replaced atomically (temp file, fsync, rename).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use thiserror::Error;

/// The file's name in the data directory.
pub const KNOWN_PEERS_FILE: &str = "known_peers";

/// Largest file read (a line per member: far below this).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Why the file could not be read.
#[derive(Debug, Error)]
pub enum KnownPeersError {
    /// Reading failed.
    #[error("reading {KNOWN_PEERS_FILE}: {0}")]
    Io(#[from] std::io::Error),
    /// A line is not `ID IP:PORT`, or the file is too large.
    #[error("{KNOWN_PEERS_FILE} is damaged: {0}")]
    Damaged(String),
}

/// The peers saved in `dir` (none when the file does not exist).
pub fn load(dir: &Path) -> Result<BTreeMap<u64, SocketAddr>, KnownPeersError> {
    let path = dir.join(KNOWN_PEERS_FILE);
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e.into()),
    };
    if meta.len() > MAX_FILE_BYTES {
        return Err(KnownPeersError::Damaged(format!("{} bytes", meta.len())));
    }
    let text = std::fs::read_to_string(&path)?;
    let mut peers = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.split_whitespace();
        let parsed = match (parts.next(), parts.next(), parts.next()) {
            (Some(id), Some(addr), None) => id.parse::<u64>().ok().zip(addr.parse().ok()),
            _ => None,
        };
        match parsed {
            Some((id, addr)) if id != 0 => {
                peers.insert(id, addr);
            }
            _ => return Err(KnownPeersError::Damaged(format!("line {line:?}"))),
        }
    }
    Ok(peers)
}

/// Replaces the file in `dir` with `peers`, durably.
pub fn save(dir: &Path, peers: &BTreeMap<u64, SocketAddr>) -> std::io::Result<()> {
    let text: String = peers
        .iter()
        .map(|(id, addr)| format!("{id} {addr}\n"))
        .collect();
    logstore::atomic_write(dir, KNOWN_PEERS_FILE, text.as_bytes())
        .map_err(|e| std::io::Error::other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_round_trip_and_damage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_empty());
        let peers: BTreeMap<u64, SocketAddr> = [
            (4, "127.0.0.1:9195".parse().unwrap()),
            (5, "[::1]:9196".parse().unwrap()),
        ]
        .into();
        save(dir.path(), &peers).unwrap();
        assert_eq!(load(dir.path()).unwrap(), peers);
        for bad in [
            "4",
            "x 127.0.0.1:1",
            "4 nowhere",
            "0 127.0.0.1:1",
            "4 127.0.0.1:1 extra",
        ] {
            std::fs::write(dir.path().join(KNOWN_PEERS_FILE), bad).unwrap();
            assert!(load(dir.path()).is_err(), "{bad}");
        }
    }
}
