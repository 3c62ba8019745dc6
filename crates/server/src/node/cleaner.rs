//! Starting the node's log cleaner ([`crate::compaction::cleaner`]'s rounds, on a
//! [`BackgroundThread`] `storage.cleaner_backoff_ms` apart) and telling it which partitions to
//! visit: those hosted here whose topic's `cleanup.policy` includes `compact`,
//! whose every replica (current, and new ones of a reassignment) speaks a peer protocol that
//! carries record counts (`PeerVersions::compaction_allowed`), each with its group's applied
//! index as the clean limit (lower while a transaction is open: never at or past the last
//! stable offset, [`crate::compaction::cleaner::stable_clean_limit`]), its aborted
//! transactions (their data is removed), the marker limit (what the saved producer state
//! covers) and, as the tombstone limit, what every replica holds durably
//! when this replica leads (0 on a follower: its passes keep every tombstone; see
//! [`crate::compaction::cleaner::tombstone_limit`]).

use std::sync::Arc;

use crate::compaction::cleaner::{
    stable_clean_limit, tombstone_limit, CleanTarget, CleanerCounters, CleanerLimits,
    CleanerPolicy, CleanerRounds, ReplicaCopies,
};
use crate::runtime::background::{BackgroundThread, StopSignal};

use super::Node;

impl Node {
    /// The log cleaner's counters since the node started.
    pub fn cleaner_counters(&self) -> &Arc<CleanerCounters> {
        &self.cleaner_counters
    }

    /// Starts the log cleaner thread (stopped by [`Node::shutdown`]).
    pub(super) fn start_cleaner(self: &Arc<Self>) {
        let s = &self.config.storage;
        let limits = CleanerLimits {
            key_map_bytes: s.cleaner_dedupe_buffer_bytes,
            io_bytes_per_second: s.cleaner_io_bytes_per_second,
            pause: s.cleaner_backoff,
        };
        let node = Arc::downgrade(self);
        let mut rounds = CleanerRounds::new(limits, self.cleaner_counters.clone());
        let round = move |stop: &StopSignal| {
            let targets = node
                .upgrade()
                .map(|n| n.clean_targets())
                .unwrap_or_default();
            rounds.round(targets, &|d| stop.nap(d));
        };
        match BackgroundThread::start(
            format!("vdl{}-cleaner", self.config.id),
            limits.pause,
            round,
        ) {
            Ok(c) => *self.cleaner.lock().unwrap_or_else(|e| e.into_inner()) = Some(c),
            Err(e) => tracing::error!("cannot start the log cleaner thread: {e}"),
        }
    }

    /// The compacted partitions hosted here that may be cleaned now (see the module
    /// documentation).
    fn clean_targets(&self) -> Vec<CleanTarget> {
        let me = self.config.id;
        let handles = self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .handles();
        let mut out = Vec::new();
        for stream in handles.into_iter().filter(|s| s.incarnation() != 0) {
            let settings = self.topic_settings(stream.name());
            if !settings.compact {
                continue;
            }
            let visible = stream.visible();
            let mut replicas = self.replicas_of(&stream);
            replicas.extend(visible.voters.iter().copied().filter(|id| *id != 0));
            if let Some(moving) = self
                .metadata()
                .topics
                .get(stream.name())
                .filter(|t| t.created_at_index == stream.incarnation())
                .and_then(|t| t.moving.get(&stream.partition()))
            {
                replicas.extend(moving.iter().copied());
            }
            replicas.retain(|id| *id != me);
            replicas.sort_unstable();
            replicas.dedup();
            if !self.peer_versions.compaction_allowed(&replicas) {
                continue;
            }
            // Read after `visible`: copies of a later term than `visible.term` do not count,
            // and either way the limit is one every replica held at some point as leader.
            let copies = stream.durable_copies();
            let covered = |id: &u64| copies.replicas.contains(id);
            let tombstones = tombstone_limit(&ReplicaCopies {
                leading: visible.leader == me,
                term: visible.term,
                copies_term: copies.term,
                on_every_replica: copies.on_every_replica,
                covers_every_replica: covered(&me) && replicas.iter().all(covered),
            });
            let c = settings.compaction;
            out.push(CleanTarget {
                label: format!("{}-{}", stream.name(), stream.partition()),
                store: stream.store().clone(),
                // Applied entries are committed: only those are rewritten, and none at or
                // past the last stable offset (a transaction still open). Aborted transactions
                // below it are told apart by the aborted list (read after `visible`: it holds
                // every abort below that last stable offset).
                marker_limit: {
                    let s = crate::replication::raft_storage::read(stream.store());
                    crate::replication::producer_snapshot::saved_applied_through(s.dir())
                        .map_or(0, |a| a + 1)
                },
                clean_limit: {
                    let s = crate::replication::raft_storage::read(stream.store());
                    stable_clean_limit(
                        |i| s.next_offset_after_index(i).ok(),
                        s.first_index(),
                        visible.applied_index,
                        visible.last_stable_offset,
                        visible.high_watermark,
                    )
                },
                aborted: {
                    let stream = stream.clone();
                    Box::new(move || {
                        stream
                            .aborted_transactions()
                            .iter()
                            .map(|a| logstore::AbortedRange {
                                producer_id: a.producer_id,
                                first_offset: a.first_offset,
                                last_offset: a.last_offset,
                            })
                            .collect()
                    })
                },
                // Tombstones only on the leader, below what every replica holds.
                tombstone_limit: tombstones,
                policy: CleanerPolicy {
                    min_lag_ms: c.min_lag_ms,
                    max_lag_ms: c.max_lag_ms,
                    min_cleanable_dirty_ratio: c.min_cleanable_dirty_ratio,
                    delete_retention_ms: c.delete_retention_ms,
                },
            });
        }
        out
    }
}
