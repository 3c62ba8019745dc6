//! What a leader knows of its voters' copies: the highest index at least k voters hold
//! ([`durable_copies`], for acks=all with `min.insync.replicas` above a majority, and the
//! highest one every replica holds, for the log cleaner's tombstones) and the
//! commit index the lag time ago ([`CommitHistory`], Kafka's in-sync rule). Both run at every
//! turn of a leading group and allocate nothing beyond their bounds.

use std::time::{Duration, Instant};

use crate::replication::group::{DurableCopies, MAX_TRACKED_VOTERS};
use crate::replication::raft_storage::RaftStorage;

/// On a leader: the highest index at least k voters hold, for k = 1.., and the highest one
/// every replica in its progress holds (see [`DurableCopies`]), in its term; no
/// allocation, it runs at every turn. Progress `matched` is durable: raft-rs counts the
/// leader's own entries once persisted, a follower acknowledges after its sync, and a
/// follower that lost acknowledged entries, or came back with a new disk, has it lowered
/// (`repair.rs`, `replicas.rs`).
pub(crate) fn durable_copies(raft: &raft::Raft<RaftStorage>) -> DurableCopies {
    let mut copies = DurableCopies {
        term: raft.term,
        on_every_replica: u64::MAX,
        ..DurableCopies::default()
    };
    let mut n = 0;
    let mut total = 0;
    let voters = raft.prs().conf().voters();
    for (id, pr) in raft.prs().iter() {
        if n < MAX_TRACKED_VOTERS && voters.contains(*id) {
            copies.by_count[n] = pr.matched;
            n += 1;
        }
        copies.on_every_replica = copies.on_every_replica.min(pr.matched);
        if let Some(slot) = copies.replicas.get_mut(total) {
            *slot = *id;
        }
        total += 1;
    }
    copies.by_count[..n].sort_unstable_by(|a, b| b.cmp(a));
    if total == 0 {
        copies.on_every_replica = 0;
    }
    if total > MAX_TRACKED_VOTERS {
        // More replicas than listed: the cleaner cannot tell them all, so it removes no
        // tombstone (see the field's documentation).
        copies.replicas = [0; MAX_TRACKED_VOTERS];
    } else {
        copies.replicas[..total].sort_unstable();
    }
    copies
}

/// Commit-index samples kept for the in-sync rule (see [`CommitHistory`]).
const COMMIT_HISTORY_SAMPLES: usize = 256;

/// The leader's commit index over the last `replica_lag_time_max`, sampled: a follower is in
/// sync while it holds what was committed that long ago (Kafka's rule: caught up with the
/// leader within `replica.lag.time.max.ms`). At most [`COMMIT_HISTORY_SAMPLES`] samples, at
/// least `lag / COMMIT_HISTORY_SAMPLES` apart, so the answer errs by at most that much time.
#[derive(Debug, Default)]
pub(crate) struct CommitHistory {
    samples: std::collections::VecDeque<(Instant, u64)>,
}

impl CommitHistory {
    /// Records the commit index now; returns the highest commit index known to be at least
    /// `lag` old (or, when leading for less than `lag`, the oldest sample: what was committed
    /// when this leader started).
    pub(crate) fn note(&mut self, now: Instant, committed: u64, lag: Duration) -> u64 {
        let spacing = lag / COMMIT_HISTORY_SAMPLES as u32;
        let due = self
            .samples
            .back()
            .is_none_or(|(at, c)| *c != committed && now.saturating_duration_since(*at) >= spacing);
        if due {
            self.samples.push_back((now, committed));
        }
        // Keep one sample at least `lag` old: the newest such is the answer.
        while self.samples.len() > 1
            && self
                .samples
                .get(1)
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= lag)
        {
            self.samples.pop_front();
        }
        while self.samples.len() > COMMIT_HISTORY_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.front().map_or(committed, |(_, c)| *c)
    }

    pub(crate) fn clear(&mut self) {
        self.samples.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_sync_means_holding_what_was_committed_the_lag_time_ago() {
        let lag = Duration::from_secs(30);
        let start = Instant::now();
        let mut history = CommitHistory::default();
        // A new leader: the bar is what was committed when it started.
        assert_eq!(history.note(start, 100, lag), 100);
        assert_eq!(history.note(start + Duration::from_secs(10), 500, lag), 100);
        assert_eq!(history.note(start + Duration::from_secs(20), 900, lag), 100);
        // 31 s on, 100 (at 0 s) is the newest sample at least 30 s old; 500 (at 10 s) becomes
        // the bar once 30 s old.
        assert_eq!(history.note(start + Duration::from_secs(31), 950, lag), 100);
        assert_eq!(history.note(start + Duration::from_secs(41), 960, lag), 500);
        assert_eq!(history.note(start + Duration::from_secs(51), 970, lag), 900);
        // Bounded, however often it is told.
        for i in 0..10_000u64 {
            history.note(
                start + Duration::from_secs(60) + Duration::from_millis(i),
                1000 + i,
                lag,
            );
        }
        assert!(history.samples.len() <= COMMIT_HISTORY_SAMPLES);
    }
}
