//! Every consumer-protocol group of one coordinator, held next to the classic groups in the
//! [`Coordinator`] (same term, same outbox of records for the metadata): sharded maps of
//! groups each under its own lock, and the heap of their next deadlines (only groups with a due
//! session or revocation deadline are visited by a tick, so idle groups cost nothing).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::coordinator::lock;
use super::super::deadlines::Deadlines;
use super::group::ConsumerGroup;
use crate::metadata::codec::ConsumerGroupRecord;

/// One group and what the coordinator keeps with it.
#[derive(Debug, Default)]
pub(crate) struct Entry {
    /// The group.
    pub(crate) group: ConsumerGroup,
    /// The sequence number of its last record queued for the metadata (0: none).
    pub(crate) record_seq: u64,
    /// Taken out of the map: a request that found it before must look again.
    pub(crate) removed: bool,
}

/// A group, locked on its own.
pub(crate) type EntryRef = Arc<Mutex<Entry>>;

const SHARDS: usize = 64;

/// Every consumer-protocol group of the coordinator's term.
pub(crate) struct ConsumerGroups {
    shards: Vec<Mutex<HashMap<String, EntryRef>>>,
    count: AtomicUsize,
    deadlines: Mutex<Deadlines>,
    /// Groups whose last consumer-protocol member was removed by a tick (session expired or
    /// fenced), left with classic members only, with the group epoch before the removal:
    /// candidates for the downgrade (at most [`MAX_DOWNGRADE_CANDIDATES`]).
    downgrades: Mutex<Vec<(String, i32)>>,
}

/// Most downgrade candidates kept between two ticks (more wait for their next removal).
const MAX_DOWNGRADE_CANDIDATES: usize = 10_000;

impl Default for ConsumerGroups {
    fn default() -> Self {
        ConsumerGroups {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            count: AtomicUsize::new(0),
            deadlines: Mutex::new(Deadlines::new()),
            downgrades: Mutex::new(Vec::new()),
        }
    }
}

impl ConsumerGroups {
    fn shard(&self, id: &str) -> &Mutex<HashMap<String, EntryRef>> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut h);
        let i = (h.finish() % SHARDS as u64) as usize;
        self.shards
            .get(i)
            .unwrap_or_else(|| unreachable!("a hash mod SHARDS is a shard"))
    }

    /// Group `id`, created when `create` and absent (None beyond `max_groups`, or absent and
    /// not `create`).
    pub(crate) fn find(&self, id: &str, create: bool, max_groups: usize) -> Option<EntryRef> {
        let mut shard = lock(self.shard(id));
        if let Some(e) = shard.get(id) {
            return Some(e.clone());
        }
        if !create
            || self
                .count
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max_groups).then_some(n + 1)
                })
                .is_err()
        {
            return None;
        }
        let e = Arc::new(Mutex::new(Entry::default()));
        shard.insert(id.to_owned(), e.clone());
        Some(e)
    }

    /// Whether group `id` exists.
    pub(crate) fn contains(&self, id: &str) -> bool {
        lock(self.shard(id)).contains_key(id)
    }

    /// Runs `f` on group `id` under its lock; None when there is no such group.
    pub(crate) fn with<R>(
        &self,
        id: &str,
        f: impl FnOnce(&EntryRef, &mut Entry) -> R,
    ) -> Option<R> {
        loop {
            let e = lock(self.shard(id)).get(id).cloned()?;
            let mut guard = lock(&e);
            if guard.removed {
                continue;
            }
            return Some(f(&e, &mut guard));
        }
    }

    /// Takes group `id` (`arc`, locked by the caller as `e`) out of the map.
    pub(crate) fn remove(&self, id: &str, arc: &EntryRef, e: &mut Entry) {
        lock(&self.deadlines).cancel(id);
        let mut shard = lock(self.shard(id));
        if shard.get(id).is_some_and(|cur| Arc::ptr_eq(cur, arc)) {
            shard.remove(id);
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
        e.removed = true;
    }

    /// Schedules group `id`'s next deadline.
    pub(crate) fn schedule(&self, id: &str, g: &ConsumerGroup) {
        let mut d = lock(&self.deadlines);
        match g.next_deadline() {
            Some(at) => d.schedule(id, at),
            None => d.cancel(id),
        }
    }

    /// Notes group `id` as a downgrade candidate (its group epoch before the removal).
    pub(crate) fn note_downgrade(&self, id: &str, epoch_before: i32) {
        let mut d = lock(&self.downgrades);
        if d.len() < MAX_DOWNGRADE_CANDIDATES {
            d.push((id.to_owned(), epoch_before));
        }
    }

    /// Takes the downgrade candidates.
    pub(crate) fn take_downgrades(&self) -> Vec<(String, i32)> {
        std::mem::take(&mut *lock(&self.downgrades))
    }

    /// The groups with a deadline due at `now`.
    pub(crate) fn take_due(&self, now: Instant) -> Vec<String> {
        lock(&self.deadlines).take_due(now)
    }

    /// Every group, by id (a snapshot of the map).
    pub(crate) fn all(&self) -> Vec<(String, EntryRef)> {
        self.shards
            .iter()
            .flat_map(|s| {
                lock(s)
                    .iter()
                    .map(|(id, e)| (id.clone(), e.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Drops every group (a term ended).
    pub(crate) fn clear(&self) {
        for shard in &self.shards {
            for (_, e) in lock(shard).drain() {
                lock(&e).removed = true;
            }
        }
        self.count.store(0, Ordering::Release);
        lock(&self.deadlines).clear();
        lock(&self.downgrades).clear();
    }

    /// Loads the stored groups (after [`ConsumerGroups::clear`]), sessions starting at `now`.
    pub(crate) fn load(
        &self,
        records: Vec<(String, ConsumerGroupRecord)>,
        now: Instant,
        session_timeout: Duration,
    ) -> usize {
        let mut loaded = 0;
        for (id, r) in records {
            let group = ConsumerGroup::from_record(&r, now, session_timeout);
            self.schedule(&id, &group);
            let entry = Entry {
                group,
                record_seq: 0,
                removed: false,
            };
            if lock(self.shard(&id))
                .insert(id, Arc::new(Mutex::new(entry)))
                .is_none()
            {
                loaded += 1;
            }
        }
        self.count.store(loaded, Ordering::Release);
        loaded
    }
}
