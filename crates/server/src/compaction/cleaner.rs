//! The node's log cleaner: rounds ([`CleanerRounds`]) that visit, in turn, the partitions
//! hosted here whose topic's `cleanup.policy` includes `compact`, and compact each that is due.
//! The node runs them on one background thread (`node/cleaner.rs`, on
//! `runtime::background`), `storage.cleaner_backoff_ms` apart.
//!
//! What it cleans comes from the node, listed again for every round: a
//! [`CleanTarget`] per partition whose every replica may compact (the node checks the peers'
//! protocol versions), with its store, its clean limit (the group's applied index + 1: only
//! committed, applied entries are rewritten; lower while a transaction is open,
//! [`stable_clean_limit`]), its aborted transactions, its tombstone limit
//! ([`tombstone_limit`]: on the leader, past what every replica holds durably; 0 on a
//! follower; transaction markers are removed under the same limit) and its topic's
//! [`CleanerPolicy`]. This module
//! imports nothing of the crate (a leaf room): the store is the `Arc<RwLock<LogStore>>` the
//! group shares.
//!
//! A partition is due ([`is_due`]) when it has cleanable bytes (sealed segments below the clean
//! limit, past `min.compaction.lag.ms`) and either its dirty ratio is at least
//! `min.cleanable.dirty.ratio`, or its oldest dirty data is older than `max.compaction.lag.ms`,
//! whatever the ratio (Kafka's rule). The age of the oldest dirty data is measured, as Kafka
//! falls back to for a segment without timestamps, from the creation time of the first sealed
//! segment holding dirty data (`CleanerStats::oldest_dirty_ms`): no dirty record there is
//! older, so a record waits at most the lag once it left the active segment (`segment.ms`
//! rolls a quiet partition's active segment; record timestamps are the producers' and may be
//! anything, the segment's creation time is the broker's clock).
//!
//! One partition at a time, so the memory is one key map (`key_map_bytes`, Kafka's
//! `log.cleaner.dedupe.buffer.size`), allocated at the thread's first pass and kept (emptied
//! in place between passes, as Kafka's cleaner thread keeps its dedupe buffer). A pass takes its source (`LogStore::compaction_source`:
//! the cleanable sealed segments, mapped) under the store's read lock, builds the key map and
//! writes the rewritten segments with no lock held (`CompactionSource::prepare`: the group
//! appends and consumers read meanwhile; sealed files are never written in place, so the maps
//! stay valid), and swaps them in under the write lock (`LogStore::install_compaction`: a few
//! fsyncs per rewritten segment). Taking the write lock from this thread is safe: the install
//! changes no index, term or offset (only sealed segments' payloads), skips a segment that
//! changed since the source was taken (truncation, retention, a snapshot), and the lock
//! excludes the group's own writes; it never touches the active segment, so the group's sync
//! (prepared under the lock, run without it) is not disturbed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use logstore::{AbortedRange, CleanerStats, CompactionPlan, CompactionReport, KeyMap, LogStore};

use super::codec::KafkaRecordCompactor;

/// A topic's compaction configs, as the cleaner acts on them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleanerPolicy {
    /// `min.compaction.lag.ms`.
    pub min_lag_ms: i64,
    /// `max.compaction.lag.ms` (`i64::MAX`: none).
    pub max_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`.
    pub min_cleanable_dirty_ratio: f64,
    /// `delete.retention.ms`.
    pub delete_retention_ms: i64,
}

/// One partition the cleaner may compact now.
pub struct CleanTarget {
    /// For logs: the topic and partition.
    pub label: String,
    /// The partition's store, shared with its group.
    pub store: Arc<RwLock<LogStore>>,
    /// Only entries below this Raft index are rewritten (the group's applied index + 1).
    pub clean_limit: u64,
    /// A tombstone is removed only when its entry's Raft index is below this
    /// ([`tombstone_limit`]; `logstore::CompactionPlan::tombstone_limit`), on top of
    /// `delete.retention.ms`.
    pub tombstone_limit: u64,
    /// The topic's configs.
    pub policy: CleanerPolicy,
    /// The partition's aborted transactions (read when a pass runs): their records are not
    /// mapped and their batches go; see `logstore::compaction`.
    pub aborted: AbortedSource,
    /// Transaction markers are removed only in entries below this Raft index (on top of the
    /// tombstone limit): one past the index the saved producer state covers
    /// (`replication::producer_snapshot::saved_applied_through`), so a restart, which loads
    /// that state and replays the log after it, never needs a removed marker to close a
    /// transaction the state holds open. 0: no marker is removed.
    pub marker_limit: u64,
}

/// Gives the aborted transactions of a partition when a pass needs them (the list is only
/// copied for a partition that is due).
pub type AbortedSource = Box<dyn Fn() -> Vec<AbortedRange> + Send + Sync>;

/// Node-wide limits of the cleaner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanerLimits {
    /// Memory of the key map of one pass (`storage.cleaner_dedupe_buffer_bytes`).
    pub key_map_bytes: usize,
    /// Bytes read and written per second, all partitions together (`None`: unlimited,
    /// Kafka's default; `storage.cleaner_io_max_bytes_per_s`).
    pub io_bytes_per_second: Option<u64>,
    /// Pause between two rounds over the partitions (`storage.cleaner_backoff_ms`).
    pub pause: Duration,
}

/// What the cleaner did since the node started (for metrics).
#[derive(Debug, Default)]
pub struct CleanerCounters {
    /// Passes that installed a result.
    pub passes: AtomicU64,
    /// Segment bytes read by the passes.
    pub bytes_read: AtomicU64,
    /// Bytes of rewritten segments written.
    pub bytes_written: AtomicU64,
    /// Records removed.
    pub records_removed: AtomicU64,
    /// Passes that failed (a damaged batch, an I/O error): logged, retried next round.
    pub failures: AtomicU64,
}

/// What a replica knows of the copies of its log when a pass is planned, for
/// [`tombstone_limit`]: what its group last published (the leader and term of its
/// `Visible`, the leader's `DurableCopies`), read at planning time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaCopies {
    /// The group's published leader is this replica.
    pub leading: bool,
    /// The group's published term.
    pub term: u64,
    /// The term the durable copies were published in (0: by no leader).
    pub copies_term: u64,
    /// The highest Raft index every replica in the leader's progress holds durably.
    pub on_every_replica: u64,
    /// That progress covers every replica the partition has (every id its replica list,
    /// its voters and the new replicas of a reassignment name): a replica outside it (out of
    /// the configuration for a while, with its old log) may hold older values.
    pub covers_every_replica: bool,
}

/// The tombstone limit of a pass planned now ([`CleanTarget::tombstone_limit`]): one past
/// the highest index every replica holds durably, when this replica leads in the term those
/// copies were published in and they cover every replica; else 0, and the pass removes no
/// tombstone (a follower's passes still remove every superseded record, the values a
/// tombstone supersedes included).
///
/// The promise it keeps: a tombstone goes only once every replica of the group holds it
/// durably, so a replica that was away (down, cut off, out of the configuration) for longer
/// than `delete.retention.ms` and still holds an older value of the key receives the
/// tombstone, not its entry without it, and the deleted key never comes back there. Only the
/// leader knows the replicas' progress; the term check keeps a value published in an
/// earlier term as leader from being used. A pass that runs on after leadership moved is
/// still safe: an entry every replica held durably stays on every replica (Raft never
/// truncates it), whoever leads. Not covered: a replica that loses such an entry afterwards
/// while keeping older ones (a cut at damage before it; a replaced disk comes back empty
/// and gets a copy without the older values): see docs/reliability.md.
pub fn tombstone_limit(c: &ReplicaCopies) -> u64 {
    if c.leading && c.term != 0 && c.copies_term == c.term && c.covers_every_replica {
        c.on_every_replica.saturating_add(1)
    } else {
        0
    }
}

/// The clean limit of a partition with an open transaction: the Raft index of the entry that
/// holds the last stable offset `lso` (entries from it on are not rewritten), given
/// `next_offset_after(index)` (the offset after an entry's records; None when the store no
/// longer holds it), the first index stored and the applied index. `applied + 1` when the last
/// stable offset is at the high watermark `hw` (no transaction open).
///
/// So a pass never touches a transaction still open, whose outcome (and so whether its
/// records count) is not known yet: every transactional batch below the limit belongs to a
/// closed transaction, aborted when the partition's aborted list covers it
/// ([`CleanTarget::aborted`]: its records are not mapped and its batches go), else committed.
/// Aborted transactions do not stop the cleaner (as Kafka's, whose clean range ends at the
/// first unstable offset only).
pub fn stable_clean_limit(
    next_offset_after: impl Fn(u64) -> Option<u64>,
    first_index: u64,
    applied: u64,
    lso: u64,
    hw: u64,
) -> u64 {
    if lso >= hw {
        return applied + 1;
    }
    // The first entry whose records reach past the last stable offset: offsets only grow
    // with the index, so a binary search finds it.
    let (mut lo, mut hi) = (first_index, applied + 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match next_offset_after(mid) {
            Some(next) if next <= lso => lo = mid + 1,
            Some(_) => hi = mid,
            // Not stored (compacted or cut meanwhile): rewrite nothing this pass.
            None => return first_index,
        }
    }
    lo
}

/// Whether a partition with `stats` (under its plan) is due for a pass at `now_ms` under
/// `policy` (see the module documentation).
pub fn is_due(stats: &CleanerStats, policy: &CleanerPolicy, now_ms: i64) -> bool {
    if stats.cleanable_bytes == 0 {
        return false;
    }
    if stats.dirty_ratio() >= policy.min_cleanable_dirty_ratio {
        return true;
    }
    policy.max_lag_ms < i64::MAX
        && stats
            .oldest_dirty_ms
            .is_some_and(|at| now_ms.saturating_sub(at) >= policy.max_lag_ms)
}

/// The plan of a pass over `target` at `now_ms`.
pub fn plan_for(target: &CleanTarget, limits: &CleanerLimits, now_ms: i64) -> CompactionPlan {
    CompactionPlan {
        clean_limit: target.clean_limit,
        now_ms,
        min_compaction_lag_ms: target.policy.min_lag_ms,
        delete_retention_ms: target.policy.delete_retention_ms,
        tombstone_limit: target.tombstone_limit,
        key_map_bytes: limits.key_map_bytes,
    }
}

/// Compacts `target` once if it is due: `Ok(None)` when it was not (or its lock is
/// poisoned: the group panicked and the node is going down). `throttle` sees every chunk
/// read or written. The pass uses `key_map` (allocated at the first pass, then reused).
pub fn clean_if_due(
    target: &CleanTarget,
    limits: &CleanerLimits,
    codec: &KafkaRecordCompactor,
    now_ms: i64,
    key_map: &mut Option<KeyMap>,
    throttle: &mut dyn FnMut(u64),
) -> Result<Option<CompactionReport>, logstore::LogStoreError> {
    let plan = plan_for(target, limits, now_ms);
    let source = {
        let Ok(store) = target.store.read() else {
            return Ok(None);
        };
        if !is_due(&store.cleaner_stats(&plan), &target.policy, now_ms) {
            return Ok(None);
        }
        let markers = store.first_offset_at_index(target.marker_limit)?;
        store.compaction_source(&plan)?.with_marker_limit(markers)
    };
    let source = source.with_aborted_transactions((target.aborted)());
    // The long part, with no lock: the group appends and consumers read meanwhile.
    let map = key_map.get_or_insert_with(|| KeyMap::with_budget(plan.key_map_bytes));
    let prepared = source.prepare_with_map(&plan, codec, map, throttle)?;
    let Ok(mut store) = target.store.write() else {
        return Ok(None);
    };
    store.install_compaction(prepared).map(Some)
}

/// The cleaner's rounds over the partitions, one partition at a time: the codec, the
/// counters and the I/O rate limit, which holds over all rounds together. The node runs them on
/// a background thread (`node/cleaner.rs`); this leaf room starts no thread.
pub struct CleanerRounds {
    limits: CleanerLimits,
    codec: KafkaRecordCompactor,
    counters: Arc<CleanerCounters>,
    /// When the rate limit started counting.
    started: Instant,
    /// Bytes read and written since `started`.
    done: u64,
    /// The key map, allocated at the first pass and reused by every later one.
    key_map: Option<KeyMap>,
}

impl CleanerRounds {
    /// Rounds under `limits`, counting in `counters`; the rate limit counts from now.
    pub fn new(limits: CleanerLimits, counters: Arc<CleanerCounters>) -> CleanerRounds {
        CleanerRounds {
            limits,
            codec: KafkaRecordCompactor::default(),
            counters,
            started: Instant::now(),
            done: 0,
            key_map: None,
        }
    }

    /// One round: compacts each of `targets` that is due, in turn, keeping the I/O rate.
    /// `nap(d)` sleeps `d` (for the rate), ended early when the cleaner is stopping, and says
    /// whether to go on: false ends the round before its next target (`nap(Duration::ZERO)`
    /// only asks).
    pub fn round(&mut self, targets: Vec<CleanTarget>, nap: &dyn Fn(Duration) -> bool) {
        let CleanerRounds {
            limits,
            codec,
            counters,
            started,
            done,
            key_map,
        } = self;
        for target in targets {
            if !nap(Duration::ZERO) {
                return;
            }
            let mut throttle = |n: u64| {
                let Some(rate) = limits.io_bytes_per_second.filter(|r| *r > 0) else {
                    return;
                };
                *done += n;
                let due = Duration::from_secs_f64(*done as f64 / rate as f64);
                let elapsed = started.elapsed();
                if due > elapsed {
                    nap(due - elapsed);
                }
            };
            let pass_started = Instant::now();
            match clean_if_due(
                &target,
                limits,
                codec,
                wall_clock_ms(),
                key_map,
                &mut throttle,
            ) {
                Ok(Some(r)) => {
                    counters.passes.fetch_add(1, Ordering::Relaxed);
                    counters
                        .bytes_read
                        .fetch_add(r.bytes_read, Ordering::Relaxed);
                    counters
                        .bytes_written
                        .fetch_add(r.bytes_written, Ordering::Relaxed);
                    counters
                        .records_removed
                        .fetch_add(r.records_removed, Ordering::Relaxed);
                    tracing::info!(
                        partition = %target.label,
                        bytes_read = r.bytes_read,
                        bytes_written = r.bytes_written,
                        records_removed = r.records_removed,
                        segments_rewritten = r.segments_rewritten,
                        first_dirty_offset = r.first_dirty_offset,
                        elapsed_us = u64::try_from(pass_started.elapsed().as_micros()).unwrap_or(u64::MAX),
                        "log cleaner pass"
                    );
                }
                Ok(None) => {}
                Err(e) => {
                    counters.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(partition = %target.label, "log cleaner pass failed: {e}");
                }
            }
        }
    }
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    /// Entries 5..=9 of two records each hold offsets 0..10: a transaction open at offset 4
    /// (entry 7) keeps entries 7 and later out of the pass.
    #[test]
    fn an_open_transaction_caps_the_clean_limit() {
        use super::stable_clean_limit;
        let next_after = |i: u64| (5..=9).contains(&i).then(|| (i - 4) * 2);
        assert_eq!(stable_clean_limit(next_after, 5, 9, 10, 10), 10);
        assert_eq!(stable_clean_limit(next_after, 5, 9, 4, 10), 7);
        assert_eq!(stable_clean_limit(next_after, 5, 9, 5, 10), 7);
        assert_eq!(stable_clean_limit(next_after, 5, 9, 6, 10), 8);
        assert_eq!(stable_clean_limit(next_after, 5, 9, 0, 10), 5);
        // An entry no longer stored: nothing is rewritten.
        assert_eq!(stable_clean_limit(|_| None, 5, 9, 4, 10), 5);
    }

    use super::*;

    fn policy(ratio: f64, max_lag_ms: i64) -> CleanerPolicy {
        CleanerPolicy {
            min_lag_ms: 0,
            max_lag_ms,
            min_cleanable_dirty_ratio: ratio,
            delete_retention_ms: 0,
        }
    }

    fn stats(clean: u64, cleanable: u64, oldest_dirty_ms: Option<i64>) -> CleanerStats {
        CleanerStats {
            clean_bytes: clean,
            cleanable_bytes: cleanable,
            first_dirty_offset: 0,
            last_clean_ms: None,
            oldest_dirty_ms,
        }
    }

    /// Only the leader, in the term its durable copies were published in and with every
    /// replica covered, removes tombstones, and only past what every replica holds.
    #[test]
    fn only_a_leader_whose_copies_cover_every_replica_removes_tombstones() {
        let leader = ReplicaCopies {
            leading: true,
            term: 7,
            copies_term: 7,
            on_every_replica: 41,
            covers_every_replica: true,
        };
        assert_eq!(tombstone_limit(&leader), 42);
        for not_now in [
            ReplicaCopies {
                leading: false,
                ..leader
            },
            // Copies of an earlier term as leader, or of none.
            ReplicaCopies {
                copies_term: 6,
                ..leader
            },
            ReplicaCopies {
                copies_term: 0,
                on_every_replica: 0,
                ..leader
            },
            // A replica out of the leader's progress (out of the configuration).
            ReplicaCopies {
                covers_every_replica: false,
                ..leader
            },
            ReplicaCopies {
                term: 0,
                copies_term: 0,
                ..leader
            },
        ] {
            assert_eq!(tombstone_limit(&not_now), 0, "{not_now:?}");
        }
        // Nothing every replica holds yet: index 0, limit 1 (no entry is below it).
        assert_eq!(
            tombstone_limit(&ReplicaCopies {
                on_every_replica: 0,
                ..leader
            }),
            1
        );
    }

    #[test]
    fn due_by_the_dirty_ratio_or_the_max_lag_and_never_without_cleanable_bytes() {
        let now = 1_000_000;
        // Nothing cleanable: never, whatever the policy.
        assert!(!is_due(&stats(100, 0, None), &policy(0.0, 1), now));
        // Never cleaned: all dirty.
        assert!(is_due(&stats(0, 10, None), &policy(0.5, i64::MAX), now));
        // 10 of 110 dirty: below 0.5, at or above 0.01.
        assert!(!is_due(
            &stats(100, 10, Some(now)),
            &policy(0.5, i64::MAX),
            now
        ));
        assert!(is_due(
            &stats(100, 10, Some(now)),
            &policy(0.01, i64::MAX),
            now
        ));
        assert!(is_due(
            &stats(50, 50, Some(now)),
            &policy(0.5, i64::MAX),
            now
        ));
        // Below the ratio, but the oldest dirty data is older than the max lag.
        assert!(!is_due(
            &stats(100, 10, Some(now - 499)),
            &policy(0.5, 500),
            now
        ));
        assert!(is_due(
            &stats(100, 10, Some(now - 500)),
            &policy(0.5, 500),
            now
        ));
        assert!(!is_due(
            &stats(100, 10, Some(i64::MIN)),
            &policy(0.5, i64::MAX),
            now
        ));
        // No sealed dirty data: the max lag has nothing to measure.
        assert!(!is_due(&stats(100, 10, None), &policy(0.5, 1), now));
    }

    /// `max.compaction.lag.ms` counts from the oldest dirty data, not from the last clean:
    /// a partition cleaned a moment ago whose oldest uncleaned segment is older than the lag
    /// is due whatever its dirty ratio, and one cleaned long ago whose dirty data is young
    /// is not.
    #[test]
    fn the_max_lag_is_measured_from_the_oldest_dirty_data_of_a_real_store() {
        let dir = tempfile::tempdir().unwrap();
        let config = logstore::StoreConfig {
            segment_bytes: 4096,
            preallocate_bytes: 0,
            ..Default::default()
        };
        let mut store = LogStore::open(dir.path(), config).unwrap();
        let created = wall_clock_ms();
        for i in 1..=3u64 {
            let payload = kafka_proto::records::build_batch(
                kafka_proto::records::Compression::None,
                &[
                    kafka_proto::records::NewRecord::new(created, vec![b'v'; 100])
                        .with_key(b"k".to_vec()),
                ],
            )
            .unwrap();
            store
                .append(&[logstore::NewEntry {
                    index: i,
                    term: 1,
                    kind: logstore::EntryKind::Records,
                    payload,
                    context: bytes::Bytes::new(),
                }])
                .unwrap();
            store.roll_if_older_than(Duration::ZERO, u64::MAX).unwrap();
        }
        let clean_limit = store.last_index() + 1;
        let plan = |now_ms| CompactionPlan {
            clean_limit,
            now_ms,
            min_compaction_lag_ms: 0,
            delete_retention_ms: 0,
            tombstone_limit: u64::MAX,
            key_map_bytes: 1 << 20,
        };
        let stats = store.cleaner_stats(&plan(created));
        let oldest = stats.oldest_dirty_ms.expect("sealed dirty segments");
        assert!(
            oldest >= created - 1_000 && oldest <= wall_clock_ms(),
            "{oldest}"
        );
        assert!(stats.cleanable_bytes > 0);
        // A ratio no pass reaches; a max lag of one hour.
        let p = policy(2.0, 3_600_000);
        assert!(!is_due(&stats, &p, oldest + 3_599_999));
        assert!(is_due(&stats, &p, oldest + 3_600_000));
        // Cleaned: nothing sealed is dirty, so the lag has nothing to measure, and a clean
        // long ago does not make new dirty data due.
        store
            .compact(
                &plan(created),
                &KafkaRecordCompactor::default(),
                &mut |_| {},
            )
            .unwrap();
        let stats = store.cleaner_stats(&plan(created));
        assert_eq!(stats.oldest_dirty_ms, None);
        assert!(!is_due(&stats, &p, i64::MAX));
    }
}
