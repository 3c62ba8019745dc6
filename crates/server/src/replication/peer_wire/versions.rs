//! Which version of the peer protocol each peer speaks, from its last admitted hello: a peer
//! of an earlier release is dialed back in its version; and whether each peer installs
//! metadata snapshots (so the metadata log may be compacted); and whether each peer appends
//! compacted entries (so partition logs may be compacted: [`PeerVersions::compaction_allowed`]).

use std::collections::HashMap;
use std::sync::Mutex;

use super::{CURRENT_VERSION, VERSION_3};

/// The hello version each peer last dialed this node with: a peer of an earlier release
/// (version 1 or 2) is dialed back in its version, everyone else in [`CURRENT_VERSION`].
#[derive(Debug, Default)]
pub struct PeerVersions {
    heard: Mutex<HashMap<u64, u16>>,
    /// Per peer: whether its last hello said it installs metadata snapshots.
    metadata_snapshots: Mutex<HashMap<u64, bool>>,
    /// Per peer: whether its last hello said it appends compacted entries.
    compacted_entries: Mutex<HashMap<u64, bool>>,
}

impl PeerVersions {
    /// Records that `peer`'s admitted hello had `version`; logs when a peer's version changes.
    pub fn heard(&self, peer: u64, version: u16, software_version: &str) {
        let before = self
            .heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(peer, version);
        if before == Some(version) {
            return;
        }
        if version < VERSION_3 {
            tracing::info!(
                peer,
                version,
                "peer speaks peer protocol version {version} (an earlier release): \
                 it is sent version {version} hellos and frames"
            );
        } else if before.is_some() {
            tracing::info!(
                peer,
                version,
                %software_version,
                "peer now speaks peer protocol version {version}"
            );
        }
    }

    /// Records whether `peer`'s last admitted hello said it installs metadata snapshots.
    pub fn heard_metadata_snapshots(&self, peer: u64, installs: bool) {
        self.metadata_snapshots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(peer, installs);
    }

    /// Whether every one of `peers` has said, in its last hello to this node, that it installs
    /// metadata snapshots (a peer not heard from since this node started has not).
    pub fn all_install_metadata_snapshots(&self, peers: &[u64]) -> bool {
        let heard = self
            .metadata_snapshots
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        peers.iter().all(|p| heard.get(p) == Some(&true))
    }

    /// Records whether `peer`'s last admitted hello said it appends compacted entries
    /// (record counts in the entry context, see `replication::raft_storage`).
    pub fn heard_compacted_entries(&self, peer: u64, appends: bool) {
        self.compacted_entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(peer, appends);
    }

    /// Whether a group whose other replicas are `peers` may compact its log (the cleaner asks
    /// before every pass): only when every one of them said, in its last hello to this node,
    /// that it appends compacted entries. A peer of an earlier release (a hello of version 1
    /// or 2, or a version 3 hello without the flag), or one not heard from since this node
    /// started, could not append a compacted entry it is sent, so none is made.
    pub fn compaction_allowed(&self, peers: &[u64]) -> bool {
        let heard = self
            .compacted_entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        peers.iter().all(|p| heard.get(p) == Some(&true))
    }

    /// Whether some peer's last hello was of an earlier release (version 1 or 2).
    pub fn any_earlier_release(&self) -> bool {
        self.heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .any(|v| *v < VERSION_3)
    }

    /// The hello version to dial `peer` with.
    pub fn dial_version(&self, peer: u64) -> u16 {
        let heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        match heard.get(&peer) {
            Some(&v) if v < VERSION_3 => v,
            _ => CURRENT_VERSION,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::peer_wire::{VERSION_1, VERSION_2};

    #[test]
    fn compaction_is_allowed_only_when_every_peer_appends_compacted_entries() {
        let v = PeerVersions::default();
        assert!(v.compaction_allowed(&[]), "a single replica compacts alone");
        assert!(!v.compaction_allowed(&[2, 3]), "peers not heard from");
        v.heard_compacted_entries(2, true);
        assert!(!v.compaction_allowed(&[2, 3]));
        v.heard_compacted_entries(3, true);
        assert!(v.compaction_allowed(&[2, 3]));
        // Peer 3 restarts with an earlier release: its hello lacks the flag.
        v.heard_compacted_entries(3, false);
        assert!(!v.compaction_allowed(&[2, 3]));
        assert!(v.compaction_allowed(&[2]));
    }

    #[test]
    fn peers_heard_in_an_old_version_are_dialed_in_it() {
        let v = PeerVersions::default();
        assert_eq!(v.dial_version(2), VERSION_3);
        assert!(!v.any_earlier_release());
        v.heard(2, VERSION_1, "");
        assert!(v.any_earlier_release());
        assert_eq!(v.dial_version(2), VERSION_1);
        v.heard(2, VERSION_2, "");
        assert_eq!(v.dial_version(2), VERSION_2);
        v.heard(2, VERSION_3, "0.2.0");
        assert_eq!(v.dial_version(2), VERSION_3);
        assert!(!v.any_earlier_release());
        assert_eq!(v.dial_version(3), VERSION_3);
        // Metadata log compaction waits for every peer to have said it installs snapshots.
        assert!(!v.all_install_metadata_snapshots(&[2, 3]));
        v.heard_metadata_snapshots(2, true);
        assert!(!v.all_install_metadata_snapshots(&[2, 3]));
        v.heard_metadata_snapshots(3, true);
        assert!(v.all_install_metadata_snapshots(&[2, 3]));
        v.heard_metadata_snapshots(3, false);
        assert!(!v.all_install_metadata_snapshots(&[2, 3]));
        assert!(v.all_install_metadata_snapshots(&[]));
    }
}
