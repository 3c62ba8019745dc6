//! The limit on catch-up replication: Raft appends that carry entries the leader has already
//! committed (a follower that was down, or a new member catching up), so that such a replica
//! cannot take the bandwidth and disk that produce latency needs.
//!
//! An append is catch-up traffic when its first entry is at or below the commit index the
//! leader sends with it: new entries are not committed yet when first sent. When the node-wide
//! `catchup_replication_bytes_per_sec` is set and the bucket is in debt, such an append is not
//! sent (counted in [`ReplicationLimiter::deferred`]); Raft sends it again after the follower's
//! next heartbeat response, so the follower catches up at about the limit. Nothing else is
//! ever held back: new entries, votes, heartbeats and responses go out as before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use raft::prelude::{Message, MessageType};

use crate::flow::token_bucket::TokenBucket;

/// The node's catch-up replication limit and its bucket.
#[derive(Debug, Default)]
pub struct ReplicationLimiter {
    /// Bytes per second (0: unlimited, the default).
    rate: AtomicU64,
    bucket: Mutex<Option<TokenBucket>>,
    deferred: AtomicU64,
    sent_bytes: AtomicU64,
}

impl ReplicationLimiter {
    /// Sets the limit (`None` or 0: unlimited).
    pub fn set_rate(&self, bytes_per_sec: Option<u64>) {
        self.rate
            .store(bytes_per_sec.unwrap_or(0), Ordering::Relaxed);
    }

    /// Whether `msg` may be sent now; charges it when it is catch-up traffic that is sent.
    pub fn admit(&self, msg: &Message) -> bool {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 || msg.get_msg_type() != MessageType::MsgAppend {
            return true;
        }
        let Some(first) = msg.entries.first() else {
            return true;
        };
        if first.index > msg.commit {
            return true;
        }
        let bytes: u64 = msg
            .entries
            .iter()
            .map(|e| (e.data.len() + e.context.len()) as u64 + 32)
            .sum();
        let now = Instant::now();
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let b = bucket.get_or_insert_with(|| TokenBucket::new(rate as f64, now));
        if b.rate_per_sec() != rate as f64 {
            b.set_rate(rate as f64, now);
        }
        if !b.charge(0.0, now).is_zero() {
            self.deferred.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        b.charge(bytes as f64, now);
        self.sent_bytes.fetch_add(bytes, Ordering::Relaxed);
        true
    }

    /// Catch-up appends not sent because the limit was reached, since start.
    pub fn deferred(&self) -> u64 {
        self.deferred.load(Ordering::Relaxed)
    }

    /// Catch-up bytes sent while a limit was set, since start.
    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::prelude::Entry;

    fn append(first: u64, commit: u64, bytes: usize) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.commit = commit;
        let e = Entry {
            index: first,
            data: vec![0u8; bytes].into(),
            ..Default::default()
        };
        m.entries = vec![e].into();
        m
    }

    #[test]
    fn only_catch_up_appends_are_limited() {
        let l = ReplicationLimiter::default();
        // Unlimited by default.
        assert!(l.admit(&append(1, 100, 1 << 20)));
        l.set_rate(Some(1000));
        // New entries (above the commit index) always go.
        assert!(l.admit(&append(101, 100, 1 << 20)));
        // Catch-up: the first goes (the bucket starts full), then the debt defers the next.
        assert!(l.admit(&append(5, 100, 5000)));
        assert!(!l.admit(&append(6, 100, 10)));
        assert_eq!(l.deferred(), 1);
        // Heartbeats and other messages are never held back.
        let mut hb = Message::default();
        hb.set_msg_type(MessageType::MsgHeartbeat);
        assert!(l.admit(&hb));
        l.set_rate(None);
        assert!(l.admit(&append(6, 100, 10)));
    }
}
