//! What the peer port refused and delivered, counted, and refused connections logged at a
//! bounded rate.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::Refusal;

/// Refused connections logged at warn per second at most; the rest go to debug.
const WARNINGS_PER_SECOND: u64 = 5;

/// Counters of what the peer port refused. Shared by the listener, the registry and the groups.
#[derive(Debug)]
pub struct PeerStats {
    refused_connections: AtomicU64,
    refused_messages: AtomicU64,
    delivered_messages: AtomicU64,
    dropped_messages: AtomicU64,
    /// Start of the current warning second (ms since `epoch`) and warnings logged in it.
    warn_second: AtomicU64,
    warned: AtomicU64,
    epoch: Instant,
}

impl Default for PeerStats {
    fn default() -> PeerStats {
        PeerStats {
            refused_connections: AtomicU64::new(0),
            refused_messages: AtomicU64::new(0),
            delivered_messages: AtomicU64::new(0),
            dropped_messages: AtomicU64::new(0),
            warn_second: AtomicU64::new(0),
            warned: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl PeerStats {
    /// Connections closed because of a [`Refusal`] (source, hello, limit) or a hello that did
    /// not arrive in time, so far.
    pub fn refused_connections(&self) -> u64 {
        self.refused_connections.load(Ordering::Relaxed)
    }

    /// Raft messages dropped because of a [`Refusal`], so far.
    pub fn refused_messages(&self) -> u64 {
        self.refused_messages.load(Ordering::Relaxed)
    }

    /// Raft messages admitted by [`super::check_message`] and queued for their group (which
    /// may still refuse them with [`super::check_in_group`]), so far.
    pub fn delivered_messages(&self) -> u64 {
        self.delivered_messages.load(Ordering::Relaxed)
    }

    /// Raft messages admitted but dropped because their group's inbox was full, so far.
    pub fn dropped_messages(&self) -> u64 {
        self.dropped_messages.load(Ordering::Relaxed)
    }

    /// Counts a message queued for its group (`queued`) or dropped on a full inbox.
    pub fn count_delivery(&self, queued: bool) {
        if queued {
            self.delivered_messages.fetch_add(1, Ordering::Relaxed);
        } else {
            self.dropped_messages.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a refused connection and logs it: at warn, at most 5 a second, otherwise at debug.
    pub fn refuse_connection(&self, source: SocketAddr, why: &dyn std::fmt::Display) {
        self.refused_connections.fetch_add(1, Ordering::Relaxed);
        if self.may_warn() {
            tracing::warn!(%source, "peer connection refused: {why}");
        } else {
            tracing::debug!(%source, "peer connection refused: {why}");
        }
    }

    /// Counts a dropped message and logs it at debug.
    pub fn refuse_message(&self, group: u64, why: &Refusal) {
        self.refused_messages.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(group, "peer message refused: {why}");
    }

    fn may_warn(&self) -> bool {
        let now = self.epoch.elapsed().as_millis() as u64;
        let second = self.warn_second.load(Ordering::Relaxed);
        if now >= second + 1000
            && self
                .warn_second
                .compare_exchange(second, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.warned.store(0, Ordering::Relaxed);
        }
        self.warned.fetch_add(1, Ordering::Relaxed) < WARNINGS_PER_SECOND
    }
}
