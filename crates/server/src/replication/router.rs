//! The peer-message router of a node ([`Registry`]): what the peer transport delivers goes to
//! the group it is for (Raft messages), the liveness book (pings) or the leader book (leader
//! reports); hellos and closed connections update the peers' announced Kafka addresses and
//! data directories.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::replication::group::{try_deliver, GroupInput};
use crate::replication::peer_guard::{PeerStats, Refusal};
use crate::replication::transport::PeerInbox;
use crate::runtime::inbox::InboxSender;

/// Routes what the peer transport receives: Raft messages to their group's inbox, pings to
/// the liveness book, leader reports to the leader book; and keeps each peer's open
/// connections with the Kafka addresses they announced.
pub(crate) struct Registry {
    /// The inbox of every group open on this node, by group id.
    pub(crate) groups: RwLock<HashMap<u64, InboxSender<GroupInput>>>,
    /// This node's directory id, its peers', and its rejoin mode.
    pub(crate) directories: Arc<crate::replication::replicas::Directories>,
    /// What the peer port refused (messages for unknown groups are counted here).
    pub(crate) stats: Arc<PeerStats>,
    /// Per peer: its open admitted connections, oldest first, with the Kafka addresses each
    /// announced. The newest one's addresses are the peer's: a connection's claim lasts only
    /// as long as the connection.
    pub(crate) peers: Mutex<HashMap<u64, Vec<PeerConnection>>>,
    /// When each peer last pinged (see [`crate::replication::liveness`]).
    pub(crate) liveness: Arc<crate::replication::liveness::Liveness>,
    /// Which groups each peer reports leading (see [`crate::replication::leaders`]).
    pub(crate) leaders: crate::replication::leaders::LeaderBook,
    /// Counts the leadership changes of this node's groups (see
    /// [`crate::replication::leaders::LeadershipChanges`]).
    pub(crate) leadership: Arc<crate::replication::leaders::LeadershipChanges>,
}

/// One admitted connection of a peer and the Kafka addresses its hello announced.
pub(crate) struct PeerConnection {
    /// The connection's id (unique on this node).
    pub(crate) id: u64,
    /// The peer's advertised address (its first Kafka listener's).
    pub(crate) advertised: String,
    /// Its Kafka listeners `(name, HOST:PORT)`; empty from releases before listeners.
    pub(crate) listeners: Vec<(String, String)>,
}

impl PeerConnection {
    /// The peer's address on the listener named `listener`: that listener's, or for a peer
    /// that announced no listeners (an earlier release) its one advertised address; `None`
    /// when the peer has no listener of that name (Kafka leaves such brokers out).
    pub(crate) fn address_on(&self, listener: &str) -> Option<&str> {
        if self.listeners.is_empty() {
            return Some(&self.advertised);
        }
        self.listeners
            .iter()
            .find(|(name, _)| name == listener)
            .map(|(_, addr)| addr.as_str())
    }
}

impl Registry {
    /// Sends `input(peer-independent)` to every group.
    pub(crate) fn tell_all_groups(&self, input: impl Fn() -> GroupInput) {
        let groups = self.groups.read().unwrap_or_else(|e| e.into_inner());
        for inbox in groups.values() {
            try_deliver(inbox, input());
        }
    }
}

impl PeerInbox for Registry {
    fn deliver(&self, group: u64, msg: raft::prelude::Message) {
        if group == crate::replication::liveness::LIVENESS_GROUP {
            if self.liveness.heard(msg.from) {
                // Back after being reported down: the quiesced leaders it is a voter of wake
                // to bring it up to date (see `GroupInput::PeerUp`).
                self.tell_all_groups(|| GroupInput::PeerUp(msg.from));
            }
            if let Err(e) = self.leaders.record(msg.from, &msg.context) {
                self.stats
                    .refuse_message(group, &Refusal::BadLeaderReport(e));
            }
            return;
        }
        let groups = self.groups.read().unwrap_or_else(|e| e.into_inner());
        match groups.get(&group) {
            Some(inbox) => self
                .stats
                .count_delivery(try_deliver(inbox, GroupInput::Raft(msg))),
            None => self
                .stats
                .refuse_message(group, &Refusal::UnknownGroup(group)),
        }
    }

    fn peer_unreachable(&self, peer: u64) {
        let groups = self.groups.read().unwrap_or_else(|e| e.into_inner());
        for inbox in groups.values() {
            try_deliver(inbox, GroupInput::Unreachable(peer));
        }
    }

    fn peer_hello(
        &self,
        peer: u64,
        connection: u64,
        advertised: String,
        listeners: Vec<(String, String)>,
        dirs: crate::replication::replicas::HelloDirs,
    ) {
        {
            let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            self.liveness.set_connected(peer, true);
            peers.entry(peer).or_default().push(PeerConnection {
                id: connection,
                advertised,
                listeners,
            });
        }
        if self.directories.on_hello(peer, dirs)
            == crate::replication::replicas::HelloOutcome::PeerReplaced
        {
            let groups = self.groups.read().unwrap_or_else(|e| e.into_inner());
            for inbox in groups.values() {
                try_deliver(inbox, GroupInput::PeerReplaced(peer));
            }
        }
    }

    fn hello_for(&self, peer: u64) -> crate::replication::replicas::HelloDirs {
        self.directories.hello_for(peer)
    }

    fn peer_gone(&self, peer: u64, connection: u64) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(open) = peers.get_mut(&peer) {
            open.retain(|c| c.id != connection);
            if open.is_empty() {
                peers.remove(&peer);
                self.liveness.set_connected(peer, false);
            }
        }
    }
}
