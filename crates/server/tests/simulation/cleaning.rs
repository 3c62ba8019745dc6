//! Log compaction in the simulation (issue 35; [`crate::world::SimOptions::compaction`]): the
//! first [`COMPACTED_GROUPS`] bare groups hold keyed record batches (a few keys each, some
//! records tombstones, some batches of several records) on small segments, and the real
//! cleaner (`vdl_server::compaction::cleaner`: its due rule, its plan, `LogStore`'s passes)
//! compacts them at random steps on random nodes, leaders and followers alike, on the
//! simulated clock. A pass is either the cleaner's `clean_if_due` at once, or split as the
//! cleaner thread runs it next to the group: the source taken and the rewritten segments
//! prepared at one step, swapped in some steps later, after the group appended, truncated or
//! took a snapshot meanwhile. Power cuts strike the passes' fsyncs as any other. Each pass
//! gets the tombstone limit the node's cleaner gives (`compaction::cleaner::tombstone_limit`):
//! on the leader, past what every replica (every node hosts every group) holds durably; 0
//! on a follower, whose passes keep every tombstone.
//!
//! The oracle: after every step's turns and before any pass, each compacted group's newly
//! applied entries are read from a replica whose copy is whole (every offset of the entry
//! holds its record; a replica that caught up from a compacted leader may hold less) and
//! kept as the group's committed records by offset. A record is only ever removed on a node
//! whose applied index covers it, and the recorder reads those nodes before the passes of the
//! step, so every committed record is seen whole once ([`Cleaning::check`] asserts no gap).
//!
//! The checks after the heal, per compacted group and replica (what the compaction design
//! promises: replicas compact on their own schedules, so their bytes differ, but every index
//! keeps its term, offsets and record count, and the latest record of every key is the same
//! at the same offset):
//! - every record a replica holds is the committed record at that offset (no value that was
//!   not appended there, no value twice);
//! - for every key, its latest committed record is held by every replica at its offset, and
//!   readable there through the read path; a tombstone may be gone once its
//!   `delete.retention.ms` passed (groups with a short retention), and then the replica holds
//!   no record of that key at all (no older value comes back): checked before and after
//!   every pass too, so a replica that got a tombstone's entry without the tombstone while it
//!   held an older value (Kafka's `delete.retention.ms` hazard, which the tombstone limit
//!   closes) fails the run as soon as a pass runs there;
//! - after the heal, a last pass on every replica leaves no superseded record;
//! - every acknowledged record is the committed record at the offset it was acknowledged
//!   with: a superseded one may be gone, the latest of its key is on every replica.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use bytes::Bytes;
use logstore::{EntryKind, KeyMap, PreparedCompaction, KEY_MAP_SLOT_BYTES};
use vdl_server::compaction::cleaner::{
    clean_if_due, is_due, plan_for, tombstone_limit, CleanTarget, CleanerLimits, CleanerPolicy,
    ReplicaCopies,
};
use vdl_server::compaction::KafkaRecordCompactor;
use vdl_server::replication::raft_storage::{read, SharedStore};

use crate::common::compacted::{self, Table};
use crate::disk::SimCrash;
use crate::world::{SimGroup, World, NODES};

/// Compacted groups: 100, 101, ... (of the bare groups).
pub const COMPACTED_GROUPS: u64 = 4;
/// Segment size of a compacted group: small, so that segments seal (and are cleanable) often.
pub const COMPACTED_SEGMENT_BYTES: u64 = 1 << 10;
/// Keys per compacted group: few, so that most records are superseded; more in the groups
/// whose tombstones go, so that a tombstone stays the latest record of its key while later
/// passes run (a tombstone goes only in a pass after the one that kept it).
const KEYS: u64 = 6;
const KEYS_SHORT_RETENTION: u64 = 24;
/// The simulated clock: ms since the Unix epoch at step 0, and per step (a tick is two steps
/// of the group's 50 ms).
const EPOCH_MS: i64 = 1_700_000_000_000;
const MS_PER_STEP: i64 = 25;
/// `delete.retention.ms` of the groups that keep tombstones (longer than any run) and of
/// those whose tombstones go (the real rule: a tombstone kept by one pass and older than
/// this is removed by a later one).
const KEEP_TOMBSTONES_MS: i64 = 1 << 40;
const SHORT_RETENTION_MS: i64 = 1_000;
/// A prepared pass is swapped in within this many steps.
const INSTALL_WITHIN_STEPS: u64 = 30;

/// A record of a compacted group: key and value (`None`: a tombstone).
pub type Record = (String, Option<String>);

/// Whether `group` is compacted in a run with compaction.
pub fn compacted_group(group: u64) -> bool {
    (100..100 + COMPACTED_GROUPS).contains(&group)
}

/// `delete.retention.ms` of compacted group `group`: the odd ones remove tombstones.
fn delete_retention_ms(group: u64) -> i64 {
    if group % 2 == 1 {
        SHORT_RETENTION_MS
    } else {
        KEEP_TOMBSTONES_MS
    }
}

/// The simulated clock at `step`, ms since the Unix epoch.
pub fn now_ms(step: u64) -> i64 {
    EPOCH_MS + step as i64 * MS_PER_STEP
}

/// A pass's outcome: its report (`None`: not due, or nothing prepared yet), or a panic (a
/// power cut at one of its fsyncs).
type PassResult =
    std::thread::Result<Result<Option<logstore::CompactionReport>, logstore::LogStoreError>>;

/// A pass prepared on a node and not swapped in yet.
struct PendingPass {
    group: u64,
    store: SharedStore,
    prepared: PreparedCompaction,
    install_at: u64,
}

/// What compaction did in a run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CleaningCounts {
    /// Passes that installed a result.
    pub passes: u64,
    /// Of those, passes prepared at one step and swapped in at a later one.
    pub split_passes: u64,
    /// Records removed.
    pub records_removed: u64,
    /// Prepared passes lost to a crash of their node before the swap.
    pub lost_to_crashes: u64,
    /// Power cuts that struck a pass.
    pub power_cuts: u64,
    /// Committed records of the compacted groups.
    pub committed_records: u64,
    /// Latest records of their keys that were tombstones and were gone at the end (summed
    /// over replicas: only leaders remove tombstones, so mostly on the last leader).
    pub tombstones_removed: u64,
    /// Passes tried (due or not) on a leader with a tombstone limit past index 1, that could
    /// remove a tombstone; every other pass keeps them all.
    pub leader_passes: u64,
    /// Superseded records still held at the end (summed over replicas; 0 after the final
    /// sweep).
    pub superseded_left: u64,
}

/// The compaction side of a run (see the module docs).
#[derive(Default)]
pub struct Cleaning {
    pending: BTreeMap<u64, PendingPass>,
    /// Per compacted group: the first Raft index not recorded, and the committed records.
    truth: BTreeMap<u64, (u64, BTreeMap<u64, Record>)>,
    /// Acknowledged records: (group, offset, record).
    pub acked: Vec<(u64, u64, Record)>,
    /// What the passes did.
    pub counts: CleaningCounts,
    key_map: Option<KeyMap>,
    codec: KafkaRecordCompactor,
    /// Whether [`World::final_sweep`] ran (then no superseded record may be left).
    swept: bool,
}

impl Cleaning {
    /// A node crashed: a pass it had prepared is lost with it (its temporary files stay for
    /// recovery to remove, as after a real crash).
    pub fn node_crashed(&mut self, node: u64) {
        if let Some(p) = self.pending.remove(&node) {
            std::mem::forget(p.prepared);
            self.counts.lost_to_crashes += 1;
        }
    }
}

/// The batch of a client's append to compacted group `group` now: one record, or now
/// and then several; each of a random key, some tombstones; values unique in the run.
pub fn keyed_batch(w: &mut World, group: u64) -> (Bytes, Vec<Record>) {
    let n = if w.rng.chance(200) {
        2 + w.rng.below(3)
    } else {
        1
    };
    let mut records = Vec::new();
    for _ in 0..n {
        let keys = if delete_retention_ms(group) == SHORT_RETENTION_MS {
            KEYS_SHORT_RETENTION
        } else {
            KEYS
        };
        let key = format!("k{}", w.rng.below(keys));
        let value = if w.rng.chance(150) {
            None
        } else {
            w.next_value += 1;
            Some(format!("g{group}-v{}", w.next_value))
        };
        records.push((key, value));
    }
    let refs: Vec<(Option<&str>, Option<&str>)> = records
        .iter()
        .map(|(k, v)| (Some(k.as_str()), v.as_deref()))
        .collect();
    (compacted::batch_at(now_ms(w.step), &refs), records)
}

/// The tombstone limit of a pass planned now on node `node`'s replica `sg`, as the node's
/// cleaner sets it (`node/cleaner.rs`): every node hosts every bare group, so the leader's
/// durable copies must cover all of them (a node out of the configuration keeps its log and
/// may come back).
fn tombstone_limit_of(node: u64, sg: &SimGroup) -> u64 {
    let v = *sg.visible.borrow();
    let copies = *sg.durable_copies.borrow();
    tombstone_limit(&ReplicaCopies {
        leading: v.leader == node,
        term: v.term,
        copies_term: copies.term,
        on_every_replica: copies.on_every_replica,
        covers_every_replica: NODES.iter().all(|id| copies.replicas.contains(id)),
    })
}

/// The records of a records payload by offset (every record of a compacted group has a key).
fn records_of(payload: &Bytes) -> Table {
    let mut out = Table::new();
    compacted::parse(payload.clone(), &mut out);
    out
}

/// The records an entry holds, as values for the run's outcome.
pub fn record_values(payload: &Bytes) -> Vec<Vec<u8>> {
    records_of(payload)
        .into_iter()
        .map(|(o, (k, v))| format!("{o}:{k}={v:?}").into_bytes())
        .collect()
}

impl World {
    /// Records the newly applied entries of every compacted group from a replica whose copy
    /// of them is whole (see the module docs).
    pub(crate) fn record_committed(&mut self) {
        if !self.options.compaction {
            return;
        }
        for g in (0..COMPACTED_GROUPS).map(|g| 100 + g) {
            let (next, records) = self.cleaning.truth.entry(g).or_insert((1, BTreeMap::new()));
            for n in self.nodes.iter().filter(|n| n.up) {
                let Some(sg) = n.groups.get(&g) else { continue };
                let applied = sg.visible.borrow().applied_index;
                let s = read(&sg.store);
                if applied < *next || *next < s.first_index() {
                    continue;
                }
                let entries = s
                    .entries(*next, applied + 1, u64::MAX)
                    .expect("applied entries");
                for e in entries {
                    if e.kind == EntryKind::Records {
                        let held = records_of(&e.payload);
                        if held.len() as u64 != u64::from(e.record_count) {
                            break; // compacted here: another replica has it whole
                        }
                        records.extend(held);
                    }
                    *next = e.index + 1;
                }
            }
        }
    }

    /// Now and then a cleaner pass on a random node's compacted group, and the swap of a
    /// pass prepared earlier when it is due.
    pub(crate) fn clean_some(&mut self) {
        if !self.options.compaction {
            return;
        }
        let step = self.step;
        let due: Vec<u64> = self
            .cleaning
            .pending
            .iter()
            .filter(|(_, p)| p.install_at <= step)
            .map(|(n, _)| *n)
            .collect();
        for node in due {
            let p = self.cleaning.pending.remove(&node).expect("pending");
            let g = p.group;
            let installed = self.checked_pass(node, g, |_| {
                std::panic::catch_unwind(AssertUnwindSafe(|| {
                    let mut store = p.store.write().expect("store lock");
                    store.install_compaction(p.prepared)
                }))
                .map(|r| r.map(Some))
            });
            self.after_pass(node, installed, true);
        }
        if !self.rng.chance(40) {
            return;
        }
        let node = NODES[self.rng.below(NODES.len() as u64) as usize];
        let g = 100 + self.rng.below(COMPACTED_GROUPS);
        let ratio = [0.0, 0.2, 0.5][self.rng.below(3) as usize];
        let slots = [3, 8, 64][self.rng.below(3) as usize];
        let split = self.rng.chance(500);
        let install_at = step + self.rng.below(INSTALL_WITHIN_STEPS + 1);
        let n = &self.nodes[(node - 1) as usize];
        // One pass at a time per node, as its one cleaner thread.
        let Some(sg) = n
            .groups
            .get(&g)
            .filter(|_| n.up && !self.cleaning.pending.contains_key(&node))
        else {
            return;
        };
        let target = CleanTarget {
            label: format!("n{node}-g{g}"),
            store: sg.store.clone(),
            clean_limit: sg.visible.borrow().applied_index + 1,
            tombstone_limit: tombstone_limit_of(node, sg),
            policy: CleanerPolicy {
                min_lag_ms: 0,
                max_lag_ms: i64::MAX,
                min_cleanable_dirty_ratio: ratio,
                delete_retention_ms: delete_retention_ms(g),
            },
            aborted: Box::new(Vec::new),
            marker_limit: 0,
        };
        let limits = CleanerLimits {
            key_map_bytes: slots * KEY_MAP_SLOT_BYTES,
            io_bytes_per_second: None,
            pause: Duration::ZERO,
        };
        let now = now_ms(step);
        self.cleaning.counts.leader_passes += u64::from(target.tombstone_limit > 1);
        if !split {
            let r = self.checked_pass(node, g, |w| {
                let c = &mut w.cleaning;
                std::panic::catch_unwind(AssertUnwindSafe(|| {
                    clean_if_due(&target, &limits, &c.codec, now, &mut c.key_map, &mut |_| {})
                }))
            });
            self.after_pass(node, r, false);
            return;
        }
        // As the cleaner thread: the source under the read lock, the rewrite with no lock,
        // the swap later (the group goes on meanwhile).
        let plan = plan_for(&target, &limits, now);
        let c = &mut self.cleaning;
        let prepared = std::panic::catch_unwind(AssertUnwindSafe(
            || -> Result<Option<PreparedCompaction>, logstore::LogStoreError> {
                let source = {
                    let s = read(&target.store);
                    if !is_due(&s.cleaner_stats(&plan), &target.policy, now) {
                        return Ok(None);
                    }
                    s.compaction_source(&plan)?
                };
                let map = c
                    .key_map
                    .get_or_insert_with(|| KeyMap::with_budget(plan.key_map_bytes));
                source
                    .prepare_with_map(&plan, &c.codec, map, &mut |_| {})
                    .map(Some)
            },
        ));
        match prepared {
            Ok(Ok(Some(prepared))) => {
                self.cleaning.pending.insert(
                    node,
                    PendingPass {
                        group: g,
                        store: target.store.clone(),
                        prepared,
                        install_at,
                    },
                );
            }
            Ok(Ok(None)) => {}
            other => self.after_pass(node, other.map(|r| r.map(|_| None)), false),
        }
    }

    /// Runs `pass` (one that may remove records: a whole pass, or a swap) on node `node`'s
    /// replica of `group`, and checks that no deleted key is back on the node, before it and
    /// after it: before, a key back means the node got a tombstone's entry without the
    /// tombstone while it held an older record of the key (Kafka's `delete.retention.ms`
    /// hazard: a leader removed the tombstone before every replica held it, which the
    /// tombstone limit forbids); after, that the pass removed a tombstone while an older
    /// record of its key was left.
    fn checked_pass(
        &mut self,
        node: u64,
        group: u64,
        pass: impl FnOnce(&mut World) -> PassResult,
    ) -> PassResult {
        let i = (node - 1) as usize;
        let before = deleted_keys_back(self, i, group);
        assert!(
            before.is_empty(),
            "group {group}: node {node}: deleted keys {before:?} are back: the node got their \
             tombstones' entries without the tombstones while it held older records of them \
             (a leader removed the tombstones before every replica held them)"
        );
        let r = pass(self);
        if matches!(r, Ok(Ok(Some(_)))) {
            let after = deleted_keys_back(self, i, group);
            assert!(
                after.is_empty(),
                "group {group}: node {node}: a cleaner pass removed the tombstones of {after:?} \
                 and left older records of those keys (deleted keys back)"
            );
        }
        r
    }

    /// Counts a pass's result; a power cut that struck it crashes its node.
    fn after_pass(&mut self, node: u64, result: PassResult, split: bool) {
        match result {
            Ok(Ok(Some(r))) => {
                let c = &mut self.cleaning.counts;
                c.passes += 1;
                c.split_passes += u64::from(split);
                c.records_removed += r.records_removed;
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) => panic!("node {node}: a cleaner pass failed: {e}"),
            Err(p) if p.downcast_ref::<SimCrash>().is_some() => {
                let down_for = 20 + self.rng.below(200);
                self.cleaning.counts.power_cuts += 1;
                self.faults.power_cuts += 1;
                self.crash((node - 1) as usize, down_for);
            }
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}

impl World {
    /// After the heal, once every group converged: every replica of every compacted group
    /// rolls its active segment (as `segment.ms` would on a quiet partition) and runs one pass
    /// a day later on the simulated clock, so that the check sees every replica compacted up
    /// to its applied index: no superseded record may be left.
    pub fn final_sweep(&mut self) {
        if !self.options.compaction {
            return;
        }
        let now = now_ms(self.step) + 86_400_000;
        for g in (0..COMPACTED_GROUPS).map(|g| 100 + g) {
            for node in NODES {
                let sg = &self.nodes[(node - 1) as usize].groups[&g];
                let applied = sg.visible.borrow().applied_index;
                let tombstones = tombstone_limit_of(node, sg);
                vdl_server::replication::raft_storage::write(&sg.store)
                    .roll_if_older_than(Duration::ZERO, u64::MAX)
                    .expect("roll");
                let target = CleanTarget {
                    label: format!("n{node}-g{g}"),
                    store: sg.store.clone(),
                    clean_limit: applied + 1,
                    tombstone_limit: tombstones,
                    policy: CleanerPolicy {
                        min_lag_ms: 0,
                        max_lag_ms: i64::MAX,
                        min_cleanable_dirty_ratio: 0.0,
                        delete_retention_ms: delete_retention_ms(g),
                    },
                    aborted: Box::new(Vec::new),
                    marker_limit: 0,
                };
                let limits = CleanerLimits {
                    key_map_bytes: 1 << 16,
                    io_bytes_per_second: None,
                    pause: Duration::ZERO,
                };
                let r = self.checked_pass(node, g, |w| {
                    let c = &mut w.cleaning;
                    Ok(clean_if_due(
                        &target,
                        &limits,
                        &c.codec,
                        now,
                        &mut c.key_map,
                        &mut |_| {},
                    ))
                });
                match r {
                    Ok(Ok(Some(r))) => {
                        self.cleaning.counts.passes += 1;
                        self.cleaning.counts.records_removed += r.records_removed;
                    }
                    Ok(Ok(None)) => {}
                    Ok(Err(e)) => panic!("node {node}: the final pass of group {g}: {e}"),
                    Err(p) => std::panic::resume_unwind(p),
                }
            }
        }
        self.cleaning.swept = true;
    }
}

/// One replica's records of `group`, by offset, read from its applied entries.
fn replica_records(w: &World, node: usize, group: u64) -> Table {
    let sg = &w.nodes[node].groups[&group];
    let applied = sg.visible.borrow().applied_index;
    let s = read(&sg.store);
    let mut out = Table::new();
    if applied >= s.first_index() {
        for e in s
            .entries(s.first_index(), applied + 1, u64::MAX)
            .expect("applied entries")
        {
            if e.kind == EntryKind::Records {
                out.extend(records_of(&e.payload));
            }
        }
    }
    out
}

/// Keys whose deletion node `node` does not show in group `group`: it holds an older record
/// of the key, while the key's latest committed record (below the node's high watermark) is
/// a tombstone it does not hold.
fn deleted_keys_back(w: &World, node: usize, group: u64) -> BTreeSet<String> {
    let Some((_, truth)) = w.cleaning.truth.get(&group) else {
        return BTreeSet::new();
    };
    let held = replica_records(w, node, group);
    let hw = w.nodes[node].groups[&group].visible.borrow().high_watermark;
    let committed: Table = truth.range(..hw).map(|(o, r)| (*o, r.clone())).collect();
    let latest = latest_by_key(&committed);
    latest_by_key(&held)
        .into_iter()
        .filter(|(k, (o, _))| {
            latest
                .get(k)
                .is_some_and(|(t, v)| v.is_none() && t > o && !held.contains_key(t))
        })
        .map(|(k, _)| k)
        .collect()
}

/// The latest record of every key in `records`: key -> (offset, value).
fn latest_by_key(records: &Table) -> BTreeMap<String, (u64, Option<String>)> {
    let mut out = BTreeMap::new();
    for (o, (k, v)) in records {
        out.insert(k.clone(), (*o, v.clone()));
    }
    out
}

impl Cleaning {
    /// The checks of the module docs, after the heal; returns the counts of the run.
    pub fn check(&self, seed: u64, w: &World) -> CleaningCounts {
        let mut counts = self.counts;
        if !w.options.compaction {
            return counts;
        }
        for g in (0..COMPACTED_GROUPS).map(|g| 100 + g) {
            let empty = (1, BTreeMap::new());
            let (next, truth) = self.truth.get(&g).unwrap_or(&empty);
            let sg = &w.nodes[0].groups[&g];
            let applied = sg.visible.borrow().applied_index;
            let hw = sg.visible.borrow().high_watermark;
            assert!(
                *next > applied,
                "seed {seed}: group {g}: committed entries from index {next} were never seen \
                 whole (applied {applied})"
            );
            let mut values = std::collections::HashSet::new();
            for (o, (k, v)) in truth {
                if let Some(v) = v {
                    assert!(
                        values.insert(v),
                        "seed {seed}: group {g}: value {v} of key {k} committed twice (again \
                         at {o})"
                    );
                }
            }
            assert_eq!(
                truth.len() as u64,
                hw,
                "seed {seed}: group {g}: the committed records do not cover every offset below \
                 the high watermark"
            );
            counts.committed_records += truth.len() as u64;
            for (ag, o, rec) in self.acked.iter().filter(|(ag, _, _)| *ag == g) {
                assert_eq!(
                    truth.get(o),
                    Some(rec),
                    "seed {seed}: group {ag}: the record acknowledged at offset {o} is not the \
                     one committed there"
                );
            }
            let latest = latest_by_key(truth);
            for (i, n) in w.nodes.iter().enumerate() {
                let held = replica_records(w, i, g);
                for (o, r) in &held {
                    assert_eq!(
                        truth.get(o),
                        Some(r),
                        "seed {seed}: group {g}: node {} holds at offset {o} a record that was \
                         not committed there",
                        n.id
                    );
                }
                let held_latest = latest_by_key(&held);
                for (k, (o, v)) in &latest {
                    match (held_latest.get(k), v) {
                        (Some((ho, _)), _) if ho == o => {}
                        (None, None) if delete_retention_ms(g) == SHORT_RETENTION_MS => {
                            counts.tombstones_removed += 1
                        }
                        (found, _) => panic!(
                            "seed {seed}: group {g}: node {}: key {k}'s latest record is \
                             {v:?} at offset {o}, the node's latest is {found:?}",
                            n.id
                        ),
                    }
                    if held.contains_key(o) {
                        check_readable(seed, w, i, g, *o, (k, v));
                    }
                }
                let superseded = (held.len() - held_latest.len()) as u64;
                assert!(
                    !self.swept || superseded == 0,
                    "seed {seed}: group {g}: node {} holds {superseded} superseded records \
                     after a pass over its whole log",
                    n.id
                );
                counts.superseded_left += superseded;
            }
        }
        counts
    }
}

/// Record `(k, v)` at offset `o` of `group` is served by node `node`'s read path.
fn check_readable(
    seed: u64,
    w: &World,
    node: usize,
    group: u64,
    o: u64,
    (k, v): (&String, &Option<String>),
) {
    let sg = &w.nodes[node].groups[&group];
    let hw = sg.visible.borrow().high_watermark;
    let read = read(&sg.store)
        .read_records(o, 1 << 20, hw)
        .unwrap_or_else(|e| panic!("seed {seed}: group {group}: offset {o} unreadable: {e}"));
    let data: Vec<u8> = read.chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let served = records_of(&Bytes::from(data));
    assert_eq!(
        served.get(&o),
        Some(&(k.clone(), v.clone())),
        "seed {seed}: group {group}: node {}: the read path does not serve key {k}'s latest \
         record at offset {o}",
        w.nodes[node].id
    );
}
