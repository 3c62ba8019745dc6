//! Data directory identity, and a node rejoining after its disk was replaced.
//!
//! Every data directory gets a random id when it is created (`directory_id`), as KRaft's
//! directory ids (KIP-853). Nodes announce it in their peer hello, and every node remembers the
//! id it last saw for each peer (`peer_directories`). A known node id coming back with a new
//! directory id has lost its disk: what it acknowledged is gone, while the leaders still count
//! it as holding it. Then:
//! - every leader resets that peer's replication progress, so its log is sent again from the
//!   start (or as a snapshot) instead of being assumed present;
//! - the peer is told in the hellos it receives ("I knew you with another directory", or "you
//!   are rejoining") and enters *rejoin mode*: in each Raft group it grants no vote and does
//!   not campaign until it has applied the commit index the leader announced to it, so a node
//!   with an empty log can never elect a leader that lacks acknowledged entries. The mode is kept in a marker file
//!   (`rejoining`) across restarts and ends when every group has caught up; the node then
//!   reconnects to its peers with a hello that says it is settled, and they stop calling it
//!   rejoining.
//!
//! Files (each replaced atomically: temp file, fsync, rename):
//! - `directory_id`: 32 hex digits.
//! - `peer_directories`: JSON `{"<peer id>": {"dir": "<32 hex>", "rejoining": bool}, ...}`.
//! - `rejoining`: present while this node is in rejoin mode (empty).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// File holding this data directory's id.
const DIRECTORY_ID_FILE: &str = "directory_id";
/// File holding the directory ids last seen for each peer.
const PEER_DIRECTORIES_FILE: &str = "peer_directories";
/// Marker present while this node is rejoining after a replaced disk.
const REJOINING_FILE: &str = "rejoining";

/// Writes `data` to `dir/name` atomically and durably (the log store's own file replacement).
fn atomic_write(dir: &Path, name: &str, data: &[u8]) -> std::io::Result<()> {
    logstore::atomic_write(dir, name, data).map_err(|e| std::io::Error::other(e.to_string()))
}

/// 128 random bits from the operating system.
fn random_u128() -> std::io::Result<u128> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))?;
    Ok(u128::from_be_bytes(b))
}

/// Reads this data directory's id, creating it (random, never 0) on first use.
pub fn load_or_create_directory_id(data_dir: &Path) -> std::io::Result<u128> {
    let path = data_dir.join(DIRECTORY_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => u128::from_str_radix(text.trim(), 16)
            .ok()
            .filter(|id| *id != 0)
            .ok_or_else(|| {
                std::io::Error::other(format!("{} does not hold a directory id", path.display()))
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(data_dir)?;
            let id = random_u128()?.max(1);
            atomic_write(
                data_dir,
                DIRECTORY_ID_FILE,
                format!("{id:032x}\n").as_bytes(),
            )?;
            Ok(id)
        }
        Err(e) => Err(e),
    }
}

/// What a node last knew of a peer's data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerDirectory {
    /// The peer's directory id, as 32 hex digits.
    #[serde(with = "hex_u128")]
    pub dir: u128,
    /// The peer came back with a new directory and has not said it caught up since.
    pub rejoining: bool,
}

mod hex_u128 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:032x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        let text = String::deserialize(d)?;
        u128::from_str_radix(&text, 16).map_err(serde::de::Error::custom)
    }
}

/// What a hello from a peer said about directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HelloDirs {
    /// The sender's directory id (0: a peer of an older version, which sends none).
    pub dir: u128,
    /// The directory id the sender knows for the receiver (0: none).
    pub known_dir_of_receiver: u128,
    /// The sender considers the receiver to be rejoining.
    pub receiver_rejoining: bool,
    /// The sender is not in rejoin mode itself.
    pub sender_settled: bool,
}

/// What the node must do after a peer's hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloOutcome {
    /// Nothing changes.
    Nothing,
    /// The peer came back with a new directory: its leaders must send its log again.
    PeerReplaced,
}

/// This node's directory identity, what it knows of its peers' directories, and its own rejoin
/// mode.
pub struct Directories {
    data_dir: PathBuf,
    own: u128,
    peers: Mutex<BTreeMap<u64, PeerDirectory>>,
    rejoin: Rejoin,
    /// This process ended rejoin mode: a later hello that still calls it rejoining was written
    /// before the peer read its "settled" hello (the two cross on reconnection) and is stale.
    settled_here: AtomicBool,
}

impl Directories {
    /// Loads (or creates) the files under `data_dir`.
    pub fn open(data_dir: &Path) -> std::io::Result<Directories> {
        let own = load_or_create_directory_id(data_dir)?;
        let peers = match std::fs::read(data_dir.join(PEER_DIRECTORIES_FILE)) {
            Ok(bytes) => {
                let by_name: BTreeMap<String, PeerDirectory> = serde_json::from_slice(&bytes)
                    .map_err(|e| {
                        std::io::Error::other(format!("{PEER_DIRECTORIES_FILE} is unreadable: {e}"))
                    })?;
                by_name
                    .into_iter()
                    .filter_map(|(k, v)| k.parse().ok().map(|id| (id, v)))
                    .collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        let rejoining = data_dir.join(REJOINING_FILE).exists();
        let d = Directories {
            data_dir: data_dir.to_owned(),
            own,
            peers: Mutex::new(peers),
            rejoin: Rejoin::default(),
            settled_here: AtomicBool::new(false),
        };
        if rejoining {
            d.rejoin.active.store(true, Ordering::SeqCst);
            d.rejoin.epoch.store(1, Ordering::SeqCst);
            tracing::warn!(
                "this node is rejoining after a replaced disk: it votes again once caught up"
            );
        }
        Ok(d)
    }

    /// This data directory's id.
    pub fn own(&self) -> u128 {
        self.own
    }

    /// The rejoin state the groups consult.
    pub fn rejoin(&self) -> &Rejoin {
        &self.rejoin
    }

    /// What this node's hello to `peer` says: (own directory, the one known for the peer,
    /// whether the peer is rejoining in this node's view, whether this node is settled).
    pub fn hello_for(&self, peer: u64) -> HelloDirs {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let known = peers.get(&peer).copied();
        HelloDirs {
            dir: self.own,
            known_dir_of_receiver: known.map_or(0, |p| p.dir),
            receiver_rejoining: known.is_some_and(|p| p.rejoining),
            sender_settled: !self.rejoin.is_active(),
        }
    }

    /// Takes a peer's hello into account: records its directory, notices a replaced disk, and
    /// enters rejoin mode when the peer knew this node with another directory.
    pub fn on_hello(&self, peer: u64, hello: HelloDirs) -> HelloOutcome {
        if hello.dir == 0 {
            return HelloOutcome::Nothing; // an older peer: no directory ids
        }
        // "You are rejoining" after this process settled is the peer's view from before it
        // read this node's settled hello (the hellos of a reconnection cross): taking it
        // would put the node back into rejoin mode at every reconnection (found by the
        // simulation, `SIM_DISKS=1`). A directory the peer knows differently always counts.
        if (hello.known_dir_of_receiver != 0 && hello.known_dir_of_receiver != self.own)
            || (hello.receiver_rejoining && !self.settled_here.load(Ordering::SeqCst))
        {
            self.enter_rejoin();
        }
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let before = peers.get(&peer).copied();
        let (after, outcome) = match before {
            None => (
                PeerDirectory {
                    dir: hello.dir,
                    rejoining: false,
                },
                HelloOutcome::Nothing,
            ),
            Some(p) if p.dir != hello.dir => {
                tracing::warn!(
                    peer,
                    known = %format!("{:032x}", p.dir),
                    new = %format!("{:032x}", hello.dir),
                    "a peer came back with a new data directory (a replaced disk): it catches up \
                     without voting, and its log is sent again"
                );
                (
                    PeerDirectory {
                        dir: hello.dir,
                        rejoining: true,
                    },
                    HelloOutcome::PeerReplaced,
                )
            }
            Some(p) => (
                PeerDirectory {
                    dir: p.dir,
                    rejoining: p.rejoining && !hello.sender_settled,
                },
                HelloOutcome::Nothing,
            ),
        };
        if before != Some(after) {
            peers.insert(peer, after);
            let by_name: BTreeMap<String, PeerDirectory> =
                peers.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            let json = serde_json::to_vec_pretty(&by_name).unwrap_or_default();
            // A failure to write means the disk is failing: stop, as for any metadata write.
            atomic_write(&self.data_dir, PEER_DIRECTORIES_FILE, &json)
                .unwrap_or_else(|e| panic!("persisting {PEER_DIRECTORIES_FILE} failed: {e}"));
        }
        outcome
    }

    fn enter_rejoin(&self) {
        if self.rejoin.active.swap(true, Ordering::SeqCst) {
            return;
        }
        self.rejoin.epoch.fetch_add(1, Ordering::SeqCst);
        // Groups caught up in an earlier epoch must catch up again.
        self.rejoin
            .caught_up
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.settled_here.store(false, Ordering::SeqCst);
        atomic_write(&self.data_dir, REJOINING_FILE, b"")
            .unwrap_or_else(|e| panic!("persisting {REJOINING_FILE} failed: {e}"));
        tracing::warn!(
            "a peer knew this node with another data directory (its disk was replaced): \
             rejoining, no votes until every Raft group has caught up"
        );
    }

    /// Ends rejoin mode once every group in `groups` has caught up in the current epoch;
    /// returns true when it ended now (the caller then reconnects to its peers, so they hear
    /// that it is settled).
    pub fn maybe_settle(&self, groups: &[u64]) -> bool {
        if !self.rejoin.is_active() {
            return false;
        }
        let done = self
            .rejoin
            .caught_up
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !groups.iter().all(|g| done.contains(g)) {
            return false;
        }
        drop(done);
        if let Err(e) = std::fs::remove_file(self.data_dir.join(REJOINING_FILE)) {
            if e.kind() != std::io::ErrorKind::NotFound {
                panic!("removing {REJOINING_FILE} failed: {e}");
            }
        }
        self.rejoin.active.store(false, Ordering::SeqCst);
        self.settled_here.store(true, Ordering::SeqCst);
        tracing::info!("every Raft group caught up after the replaced disk: this node votes again");
        true
    }
}

/// Rejoin mode as the Raft groups see it.
#[derive(Default)]
pub struct Rejoin {
    active: AtomicBool,
    /// Bumped each time rejoin mode starts; a group caught up in an earlier epoch must catch
    /// up again.
    epoch: AtomicU64,
    /// Groups caught up in the current epoch.
    caught_up: Mutex<HashSet<u64>>,
}

impl Rejoin {
    /// Whether this node is rejoining (grants no votes in groups not caught up).
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }

    /// The current rejoin epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Group `group` has applied what its leader had committed when it first heard from it in
    /// epoch `epoch`.
    pub fn caught_up(&self, group: u64, epoch: u64) {
        if epoch == self.epoch() {
            self.caught_up
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(group);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(dir: u128, known: u128) -> HelloDirs {
        HelloDirs {
            dir,
            known_dir_of_receiver: known,
            receiver_rejoining: false,
            sender_settled: true,
        }
    }

    #[test]
    fn a_new_directory_of_a_known_peer_is_a_replaced_disk() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Directories::open(tmp.path()).unwrap();
        assert_ne!(d.own(), 0);
        assert_eq!(d.on_hello(2, hello(7, 0)), HelloOutcome::Nothing);
        assert_eq!(d.on_hello(2, hello(7, d.own())), HelloOutcome::Nothing);
        assert_eq!(d.on_hello(2, hello(8, d.own())), HelloOutcome::PeerReplaced);
        assert!(d.hello_for(2).receiver_rejoining);
        // Until it says it is settled, it stays rejoining, across a restart too.
        let d = Directories::open(tmp.path()).unwrap();
        assert_eq!(d.hello_for(2).known_dir_of_receiver, 8);
        assert!(d.hello_for(2).receiver_rejoining);
        let mut h = hello(8, d.own());
        h.sender_settled = false;
        d.on_hello(2, h);
        assert!(d.hello_for(2).receiver_rejoining);
        d.on_hello(2, hello(8, d.own()));
        assert!(!d.hello_for(2).receiver_rejoining);
        assert!(!d.rejoin().is_active());
    }

    #[test]
    fn a_stale_rejoining_hello_after_settling_does_not_restart_rejoin() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Directories::open(tmp.path()).unwrap();
        d.on_hello(3, hello(5, 12345));
        assert!(d.rejoin().is_active());
        d.rejoin().caught_up(1, d.rejoin().epoch());
        assert!(d.maybe_settle(&[1]));
        // The peer's hello of the reconnection, written before it read "settled".
        let mut stale = hello(5, d.own());
        stale.receiver_rejoining = true;
        d.on_hello(3, stale);
        assert!(
            !d.rejoin().is_active(),
            "settled nodes ignore a stale 'rejoining'"
        );
        // A directory the peer knows differently still starts rejoin mode, and groups caught
        // up before must catch up again.
        d.on_hello(3, hello(5, 999));
        assert!(d.rejoin().is_active());
        assert!(!d.maybe_settle(&[1]));
    }

    #[test]
    fn a_peer_that_knew_another_directory_starts_rejoin_until_every_group_caught_up() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Directories::open(tmp.path()).unwrap();
        d.on_hello(3, hello(5, 12345));
        assert!(d.rejoin().is_active());
        assert!(!d.hello_for(3).sender_settled);
        let d = Directories::open(tmp.path()).unwrap();
        assert!(d.rejoin().is_active(), "rejoin mode survives a restart");
        let epoch = d.rejoin().epoch();
        d.rejoin().caught_up(1, epoch);
        assert!(!d.maybe_settle(&[1, 9]));
        d.rejoin().caught_up(9, epoch);
        assert!(d.maybe_settle(&[1, 9]));
        assert!(!d.rejoin().is_active());
        assert!(!Directories::open(tmp.path()).unwrap().rejoin().is_active());
    }
}
