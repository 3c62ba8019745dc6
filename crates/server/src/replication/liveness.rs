//! Node liveness: one ping per peer per heartbeat interval, whatever the number of Raft groups,
//! so quiesced groups (see [`crate::runtime::quiesce`]) still learn when a peer fails.
//!
//! A ping is a heartbeat-typed Raft message (term 1, so the peer port's checks admit it) sent on
//! the peer transport under group id [`LIVENESS_GROUP`], which no Raft group has; it goes
//! through the same queues, link filters and connections as the groups' messages, so a peer cut
//! off from this node stops being heard exactly when its groups' messages stop arriving. A peer
//! not heard from for an election timeout is reported down once (until heard again); a node
//! that does not know the liveness group (an older version) counts the pings as refused
//! messages for an unknown group and ignores them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use raft::prelude::{Message, MessageType};

/// The transport group id of liveness pings (no Raft group has id 0).
pub const LIVENESS_GROUP: u64 = 0;

/// When each peer was last heard from, and which are reported down.
#[derive(Debug)]
pub struct Liveness {
    /// Per peer: last ping (or the tracker's start), and whether it is reported down.
    peers: Mutex<HashMap<u64, (Instant, bool)>>,
    /// The peers with an admitted connection to this node open now (their process is
    /// running: a dead process's connections are closed by its kernel).
    connected: Mutex<std::collections::HashSet<u64>>,
}

impl Liveness {
    /// A tracker for `peers`, each counted as heard from now (so no peer is reported down
    /// before it had an election timeout to show up).
    pub fn new(peers: &[u64]) -> Liveness {
        let now = Instant::now();
        Liveness {
            peers: Mutex::new(peers.iter().map(|p| (*p, (now, false))).collect()),
            connected: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// Starts tracking a member added at runtime, counted as heard from now; a tracked peer
    /// is left as it is.
    pub fn add_peer(&self, peer: u64) {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(peer)
            .or_insert((Instant::now(), false));
    }

    /// Records a ping from `peer` (unknown ids are ignored). True when `peer` was reported down
    /// until now: it is back.
    pub fn heard(&self, peer: u64) -> bool {
        self.heard_at(peer, Instant::now())
    }

    fn heard_at(&self, peer: u64, at: Instant) -> bool {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        match peers.get_mut(&peer) {
            Some(entry) => {
                let was_down = entry.1;
                *entry = (at, false);
                was_down
            }
            None => false,
        }
    }

    /// Records that `peer` is down as a failure detector other than [`Liveness::newly_down`]
    /// decided (the simulation's, which models the pings): reported down until heard again.
    pub fn mark_down(&self, peer: u64) {
        if let Some(entry) = self
            .peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&peer)
        {
            entry.1 = true;
        }
    }

    /// Records whether `peer` has an admitted connection to this node open (the transport
    /// calls it when the first opens and the last closes).
    pub fn set_connected(&self, peer: u64, connected: bool) {
        let mut set = self.connected.lock().unwrap_or_else(|e| e.into_inner());
        if connected {
            set.insert(peer);
        } else {
            set.remove(&peer);
        }
    }

    /// Whether `peer` is reported down and has no connection to this node open either: its
    /// process is gone (crashed, killed, stopped), not merely slow to answer or cut off
    /// behind an open connection. Failover acts at once only on this (see
    /// `replication/group/succession.rs`).
    pub fn is_gone(&self, peer: u64) -> bool {
        self.is_down(peer)
            && !self
                .connected
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&peer)
    }

    /// Whether `peer` is reported down now (silent for an election timeout and not heard
    /// since). Unknown ids are not down.
    pub fn is_down(&self, peer: u64) -> bool {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&peer)
            .is_some_and(|(_, down)| *down)
    }

    /// The peers silent for longer than `timeout` as of `now` that were not reported down yet;
    /// they are reported down from now on (until heard again).
    pub fn newly_down(&self, now: Instant, timeout: Duration) -> Vec<u64> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let mut down = Vec::new();
        for (peer, (last, reported)) in peers.iter_mut() {
            if !*reported && now.saturating_duration_since(*last) > timeout {
                *reported = true;
                down.push(*peer);
            }
        }
        down.sort_unstable();
        down
    }
}

/// The ping `from` sends `to`.
pub fn ping(from: u64, to: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgHeartbeat);
    m.from = from;
    m.to = to;
    m.term = 1;
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_peer_is_reported_down_once_until_heard_again() {
        let start = Instant::now();
        let l = Liveness::new(&[2, 3]);
        let t = Duration::from_millis(100);
        assert!(l.newly_down(start, t).is_empty());
        l.heard_at(3, start + Duration::from_millis(450));
        let later = start + Duration::from_millis(500);
        assert_eq!(l.newly_down(later, t), vec![2]);
        assert!(l.is_down(2) && !l.is_down(3) && !l.is_down(9));
        assert!(l.newly_down(later, t).is_empty(), "reported once");
        assert!(l.heard_at(2, later), "back from down");
        assert!(!l.is_down(2));
        assert!(!l.heard_at(2, later), "heard again: it was not down");
        assert!(!l.heard_at(9, later)); // not a peer: ignored
                                        // Gone: reported down and no connection open.
        l.mark_down(3);
        l.set_connected(3, true);
        assert!(
            l.is_down(3) && !l.is_gone(3),
            "down but connected: slow, not gone"
        );
        l.set_connected(3, false);
        assert!(l.is_gone(3));
        assert!(l
            .newly_down(later + Duration::from_millis(50), t)
            .is_empty());
    }
}
