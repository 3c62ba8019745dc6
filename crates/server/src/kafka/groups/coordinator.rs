//! One node's group coordinator: every group's membership state, held in memory on the node
//! leading the metadata group.
//!
//! Each group has its own lock (groups live in sharded maps of `Arc<Mutex<Group>>`), so requests
//! for different groups never wait for each other; see [`Coordinator`] for the lock order.
//! Deadlines are enforced by [`Coordinator::tick`], which the Kafka layer calls every
//! [`TICK`](super::limits::TICK); it visits only the groups whose next deadline is due, kept in
//! a heap ([`super::deadlines`]), not every group.
//!
//! The state belongs to one metadata Raft term: when this node stops leading, or leads again in a
//! later term, the state is dropped and every waiting request is answered NOT_COORDINATOR, so the
//! clients rediscover the coordinator. A coordinator taking over loads the groups stored in the
//! metadata ([`Coordinator::load`]) and resumes their generations; the records to store (a
//! completed rebalance, a replaced static member, an emptied group) wait in an outbox, one per
//! group, for the persisting task ([`Coordinator::take_records`]).
//!
//! The requests themselves are in [`super::coordinator_membership`] (JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, an OffsetCommit's membership check) and
//! [`super::coordinator_admin`] (listing, describing and removing groups).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use kafka_proto::error_code::ErrorCode;
use tokio::sync::{watch, Notify};

use super::consumer::registry::ConsumerGroups;
use super::deadlines::Deadlines;
use super::group::Group;
use super::limits::MAX_GROUPS;
use super::types::{GroupStore, StoredRecord};
use crate::metadata::codec::ConsumerGroupRecord;
use crate::metadata::GroupRecord;

/// The metadata term the coordinator's state belongs to.
pub(super) struct TermState {
    /// The term (0: none).
    term: u64,
    /// This node coordinates in `term` (false once it stopped leading in it).
    active: bool,
}

/// What every group's requests share (taken briefly, after the group's own lock, never the
/// other way round): the records waiting for the metadata and the groups' deadlines.
struct Shared {
    /// Membership records for the metadata, newest per group (None: the group became empty),
    /// with their sequence numbers, taken by the persisting task
    /// ([`Coordinator::take_records`]). At most one per group.
    outbox: HashMap<String, (u64, GroupStore)>,
    /// The last record sequence number handed out.
    record_seq: u64,
    /// When each group next needs a tick.
    deadlines: Deadlines,
}

impl Shared {
    /// Queues group `id`'s record for the metadata when it needs one; true when queued.
    fn note(&mut self, id: &str, g: &mut Group) -> bool {
        if !g.needs_store() {
            return false;
        }
        g.dirty = false;
        let record = if g.members.is_empty() {
            g.stored = false;
            None
        } else {
            g.stored = true;
            Some(g.record())
        };
        self.record_seq += 1;
        g.record_seq = self.record_seq;
        self.outbox.insert(
            id.to_owned(),
            (self.record_seq, GroupStore::Classic(record)),
        );
        true
    }
}

/// One group's state, locked on its own.
pub(super) type GroupRef = Arc<Mutex<Group>>;

/// Shards of the group map (a group id's hash picks one).
const SHARDS: usize = 64;

/// Locks `m`, also when a thread panicked holding it (the state stays usable).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One node's group coordinator: every group's membership state, while this node leads the
/// metadata group.
///
/// Locking: every request holds the term lock shared while it works (a term change takes it
/// exclusively to drop every group, so no request works on a group of a term being dropped);
/// a request for a group locks that group alone (found in one of [`SHARDS`] maps, whose lock is
/// held only to look up, insert or remove); [`Shared`] is locked after a group's lock, briefly.
/// Heartbeats of different groups therefore never wait for each other.
pub(crate) struct Coordinator {
    term: RwLock<TermState>,
    pub(super) shards: Vec<Mutex<HashMap<String, GroupRef>>>,
    /// Groups in the shards (bounded by [`MAX_GROUPS`]).
    group_count: AtomicUsize,
    shared: Mutex<Shared>,
    ticker: AtomicBool,
    ids: AtomicU64,
    /// Signalled when records wait in the outbox.
    records_waiting: Arc<Notify>,
    /// The highest record sequence number written (or given up) by the persisting task.
    stored_seq: watch::Sender<u64>,
    /// The consumer-protocol groups (KIP-848) of the same term.
    pub(super) consumer: ConsumerGroups,
}

impl Default for Coordinator {
    fn default() -> Coordinator {
        Coordinator::new()
    }
}

impl Coordinator {
    /// A coordinator without groups.
    pub(crate) fn new() -> Coordinator {
        Coordinator {
            term: RwLock::new(TermState {
                term: 0,
                active: false,
            }),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            group_count: AtomicUsize::new(0),
            shared: Mutex::new(Shared {
                outbox: HashMap::new(),
                record_seq: 0,
                deadlines: Deadlines::new(),
            }),
            ticker: AtomicBool::new(false),
            ids: AtomicU64::new(0),
            records_waiting: Arc::new(Notify::new()),
            stored_seq: watch::Sender::new(0),
            consumer: ConsumerGroups::default(),
        }
    }

    fn shard(&self, id: &str) -> &Mutex<HashMap<String, GroupRef>> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut h);
        let i = (h.finish() % SHARDS as u64) as usize;
        self.shards
            .get(i)
            .unwrap_or_else(|| unreachable!("a hash mod SHARDS is a shard"))
    }

    /// Group `id`'s state, created when `create` (bounded by [`MAX_GROUPS`]: the error then)
    /// and it has none.
    pub(super) fn find(&self, id: &str, create: bool) -> Result<Option<GroupRef>, ErrorCode> {
        let mut shard = lock(self.shard(id));
        if let Some(g) = shard.get(id) {
            return Ok(Some(g.clone()));
        }
        if !create {
            return Ok(None);
        }
        if self
            .group_count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_GROUPS).then_some(n + 1)
            })
            .is_err()
        {
            // Kafka has no such limit, so no error says it; COORDINATOR_NOT_AVAILABLE is one
            // every client retries (GROUP_MAX_SIZE_REACHED is fatal to Java's).
            tracing::warn!(group = %id, "too many consumer groups; join refused");
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        let g = Arc::new(Mutex::new(Group::new()));
        shard.insert(id.to_owned(), g.clone());
        Ok(Some(g))
    }

    /// Runs `f` on group `id` under its lock; None when the group has no state here.
    pub(super) fn with_group<R>(
        &self,
        id: &str,
        f: impl FnOnce(&GroupRef, &mut Group) -> R,
    ) -> Option<R> {
        loop {
            let g = self.find(id, false).ok().flatten()?;
            let mut guard = lock(&g);
            if guard.removed {
                // Removed between the lookup and the lock: look again.
                continue;
            }
            return Some(f(&g, &mut guard));
        }
    }

    /// After a request or a tick changed group `id` (locked by the caller): queues its record
    /// if it needs one and schedules its next deadline.
    pub(super) fn settle(&self, id: &str, g: &mut Group, now: Instant) {
        let mut shared = lock(&self.shared);
        if shared.note(id, g) {
            self.records_waiting.notify_one();
        }
        match g.next_deadline(now) {
            Some(at) => shared.deadlines.schedule(id, at),
            None => shared.deadlines.cancel(id),
        }
    }

    /// Takes group `id` (`arc`, locked by the caller as `g`) out of the map.
    pub(super) fn remove(&self, id: &str, arc: &GroupRef, g: &mut Group) {
        // The deadline first: a group created under the same id after the map removal below
        // schedules its own.
        lock(&self.shared).deadlines.cancel(id);
        let mut shard = lock(self.shard(id));
        if shard.get(id).is_some_and(|cur| Arc::ptr_eq(cur, arc)) {
            shard.remove(id);
            self.group_count.fetch_sub(1, Ordering::AcqRel);
        }
        g.removed = true;
    }

    /// Drops every group (their waiting requests get NOT_COORDINATOR) and every queued record;
    /// the caller holds the term lock exclusively.
    fn unload(&self, _term: &mut TermState) {
        let mut dropped = 0usize;
        for shard in &self.shards {
            let groups: Vec<GroupRef> = lock(shard).drain().map(|(_, g)| g).collect();
            for g in groups {
                let mut g = lock(&g);
                g.drop_waiters(ErrorCode::NotCoordinator);
                g.removed = true;
                dropped += 1;
            }
        }
        self.group_count.store(0, Ordering::Release);
        self.consumer.clear();
        if dropped > 0 {
            tracing::info!(
                groups = dropped,
                "no longer the group coordinator of this term; dropping group membership"
            );
        }
        let mut shared = lock(&self.shared);
        shared.deadlines.clear();
        // Records of a term this node no longer coordinates in are not written: the next
        // coordinator loads what was stored.
        shared.outbox.clear();
    }

    /// Takes over as coordinator in metadata term `term` (once per term; later calls and older
    /// terms do nothing): the previous state is dropped and the groups stored in the metadata
    /// (`records`, read only when loading) are loaded as Stable groups of their stored
    /// generation, every session starting at `now`. Call it before the term's first request, once
    /// the metadata is applied through the term's start (the metadata leader is ready).
    pub(super) fn load(
        &self,
        term: u64,
        records: impl FnOnce() -> (
            Vec<(String, GroupRecord)>,
            Vec<(String, ConsumerGroupRecord)>,
        ),
        consumer_session_timeout: std::time::Duration,
        now: Instant,
    ) {
        let mut t = self.term.write().unwrap_or_else(|e| e.into_inner());
        if term < t.term || (term == t.term && t.active) {
            return;
        }
        self.unload(&mut t);
        t.term = term;
        t.active = true;
        let mut loaded = 0usize;
        let (classic, consumer) = records();
        let consumer_loaded = self.consumer.load(consumer, now, consumer_session_timeout);
        if consumer_loaded > 0 {
            tracing::info!(
                term,
                groups = consumer_loaded,
                "group coordinator loaded the stored consumer-protocol groups"
            );
        }
        for (id, r) in classic {
            if !r.members.is_empty() {
                let group = Group::from_record(r, now);
                if let Some(at) = group.next_deadline(now) {
                    lock(&self.shared).deadlines.schedule(&id, at);
                }
                if lock(self.shard(&id))
                    .insert(id, Arc::new(Mutex::new(group)))
                    .is_none()
                {
                    loaded += 1;
                }
            }
        }
        self.group_count.store(loaded, Ordering::Release);
        if loaded > 0 {
            tracing::info!(
                term,
                groups = loaded,
                "group coordinator loaded the stored groups"
            );
        }
    }

    /// The signal that records wait for [`Coordinator::take_records`].
    pub(super) fn records_waiting(&self) -> Arc<Notify> {
        self.records_waiting.clone()
    }

    /// The membership records waiting for the metadata, oldest first, with the term they
    /// belong to (write them with [`crate::metadata::proposer::MetadataProposer::propose_in_term`] in that term;
    /// at most one per group) and the sequence number to pass to
    /// [`Coordinator::records_stored`] once written. None when there are none.
    pub(super) fn take_records(&self) -> Option<(u64, u64, Vec<StoredRecord>)> {
        let t = self.term.read().unwrap_or_else(|e| e.into_inner());
        let mut shared = lock(&self.shared);
        if shared.outbox.is_empty() || !t.active {
            return None;
        }
        let mut records: Vec<(u64, StoredRecord)> = shared
            .outbox
            .drain()
            .map(|(group, (seq, record))| (seq, (group, record)))
            .collect();
        records.sort_by_key(|(seq, _)| *seq);
        let last = records.last().map_or(0, |(seq, _)| *seq);
        Some((t.term, last, records.into_iter().map(|(_, r)| r).collect()))
    }

    /// The records taken up to sequence number `seq` are written (or given up on): requests
    /// waiting for them ([`Coordinator::unstored`]) go on.
    pub(super) fn records_stored(&self, seq: u64) {
        self.stored_seq.send_if_modified(|s| {
            let advance = seq > *s;
            *s = (*s).max(seq);
            advance
        });
    }

    /// When group `group_id`'s last record (while coordinating in `term`) is not written yet:
    /// its sequence number and a receiver of the written sequence numbers, to wait until it is
    /// (Kafka answers SyncGroup once the group's record is written).
    pub(super) fn unstored(
        &self,
        term: u64,
        group_id: &str,
    ) -> Option<(u64, watch::Receiver<u64>)> {
        let _term = self.state(term)?;
        let seq = self.with_group(group_id, |_, g| g.record_seq)?;
        (seq > *self.stored_seq.borrow()).then(|| (seq, self.stored_seq.subscribe()))
    }

    /// Queues `store` for group `id` in the outbox (replacing an older record of the group);
    /// returns its sequence number (see [`Coordinator::stored_receiver`]).
    pub(super) fn queue_record(&self, id: &str, store: GroupStore) -> u64 {
        let mut shared = lock(&self.shared);
        shared.record_seq += 1;
        let seq = shared.record_seq;
        shared.outbox.insert(id.to_owned(), (seq, store));
        drop(shared);
        self.records_waiting.notify_one();
        seq
    }

    /// A receiver of the highest record sequence number written (or given up on).
    pub(super) fn stored_receiver(&self) -> watch::Receiver<u64> {
        self.stored_seq.subscribe()
    }

    /// True exactly once: the caller starts the tick task.
    pub(super) fn claim_ticker(&self) -> bool {
        !self.ticker.swap(true, Ordering::AcqRel)
    }

    /// The state for metadata term `term`; state of an older term is dropped first (its waiting
    /// requests answered NOT_COORDINATOR). None for a request carrying a term older than the
    /// state's (it was read before this node led again): such a request is answered
    /// NOT_COORDINATOR and leaves the newer state alone.
    ///
    /// The guard is the term lock held shared: hold it while working on a group.
    pub(super) fn state(&self, term: u64) -> Option<RwLockReadGuard<'_, TermState>> {
        loop {
            let t = self.term.read().unwrap_or_else(|e| e.into_inner());
            if term < t.term || (term == t.term && !t.active && term != 0) {
                return None;
            }
            if t.term == term {
                return Some(t);
            }
            drop(t);
            let mut t = self.term.write().unwrap_or_else(|e| e.into_inner());
            // Another request may have moved to this term (or a later one) meanwhile.
            if t.term < term {
                self.unload(&mut t);
                t.term = term;
                t.active = true;
            }
        }
    }

    /// A new member id: the client id and a suffix mixed from a counter and the time.
    pub(super) fn new_member_id(&self, client_id: &str) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let a = splitmix(t ^ n.rotate_left(32));
        let b = splitmix(a ^ n);
        format!(
            "{client_id}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }

    /// Enforces deadlines. `term` is the metadata term this node leads in, None when it does not
    /// lead (then every group is dropped and waiting requests get NOT_COORDINATOR).
    pub(super) fn tick(&self, term: Option<u64>, now: Instant) {
        let Some(term) = term else {
            let mut t = self.term.write().unwrap_or_else(|e| e.into_inner());
            if t.active || self.group_count.load(Ordering::Acquire) > 0 {
                self.unload(&mut t);
                t.active = false;
            }
            return;
        };
        let Some(_term) = self.state(term) else {
            return;
        };
        // Only the groups with a deadline due: a heartbeat moves no entry (a session's entry
        // fires, finds the session renewed, and is scheduled again at the renewed deadline).
        let due = lock(&self.shared).deadlines.take_due(now);
        for id in due {
            self.with_group(&id, |arc, g| {
                g.tick(now);
                self.settle(&id, g, now);
                if g.is_removable() {
                    self.remove(&id, arc, g);
                }
            });
        }
        self.tick_consumer_groups(now);
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
