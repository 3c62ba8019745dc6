//! raft-rs's `Storage` over a [`logstore::LogStore`], and the conversions between raft-rs
//! entries and the store's entries.
//!
//! How raft-rs entries map onto store entries:
//! - `EntryNormal` with empty data: a new leader's no-op -> [`EntryKind::Noop`].
//! - `EntryNormal` whose context starts with [`CTX_RECORDS`]: Kafka record batches ->
//!   [`EntryKind::Records`] (the store assigns offsets).
//! - `EntryNormal` whose context starts with [`CTX_META`]: replicated metadata ->
//!   [`EntryKind::Meta`].
//! - `EntryConfChange` / `EntryConfChangeV2` -> the matching configuration kinds.
//!
//! Record counts (log compaction): a compacted `Records` entry keeps its index, term, first
//! offset and record count, but its payload shrinks (gaps between batches, maybe no batch at
//! all), so a replica cannot count its offsets from its batches. A `Records` entry read from
//! the store for sending ([`to_raft_entry`]) therefore carries its count at the end of its
//! context: `[CTX_RECORDS, record_count u32 BE]` for a one-byte context, `[CTX_RECORDS,
//! proposer u64, proposal id u64, record_count u32 BE]` for a proposal's (`Group::context`);
//! [`context_record_count`] reads it (a context of 5 or 21 bytes with the records tag). A
//! replica appending such an entry ([`to_store_entry`], [`record_count_of`]) stores the context
//! without the count (so its stored bytes equal the leader's) and appends with
//! `LogStore::append_unsynced_with_counts` (batches keep their stored base offsets, an empty
//! payload is a `Records` entry, not a no-op). An entry without a count (a new proposal, an
//! older leader) takes the old path: offsets counted from its batches.
//!
//! Older binaries: every reader of an entry context in this crate reads only the first byte
//! (the tag: `to_store_entry`, the apply loop, the peer guard) or, for the proposal id, the 16
//! bytes after it when at least 16 follow (`group::proposals::proposal_id`); the suffix changes
//! neither. An older replica stores the longer context as it came (a new binary reading it back
//! ignores the stale count and writes the one of its own store). An older replica cannot
//! append a compacted entry, so a group compacts only when every peer speaks a peer protocol
//! that carries counts (`peer_wire::compaction_allowed`).

use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use logstore::{EntryKind, LogStore, LogStoreError, NewEntry};
use raft::prelude::{ConfState, Entry, EntryType, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

/// Context tag of an entry carrying Kafka record batches.
pub const CTX_RECORDS: u8 = 1;
/// Context tag of an entry carrying replicated metadata.
pub const CTX_META: u8 = 2;

/// The store shared between the group's Raft thread (the only writer) and readers.
pub type SharedStore = Arc<RwLock<LogStore>>;

/// Locks the store for reading. A poisoned lock means a thread panicked mid-write and the
/// store's in-memory state can no longer be trusted, so this panics too.
pub fn read(store: &SharedStore) -> RwLockReadGuard<'_, LogStore> {
    store.read().expect("log store lock poisoned by a panic")
}

/// Locks the store for writing (the group thread only); panics on a poisoned lock, as [`read`].
pub fn write(store: &SharedStore) -> RwLockWriteGuard<'_, LogStore> {
    store.write().expect("log store lock poisoned by a panic")
}

/// A scratch store in `dir` for unit tests: never fsynced, no preallocated segment bytes.
#[cfg(test)]
pub(crate) fn scratch_store(dir: &std::path::Path) -> SharedStore {
    let config = logstore::StoreConfig {
        sync_policy: logstore::SyncPolicy::Never,
        preallocate_bytes: 0,
        ..logstore::StoreConfig::default()
    };
    Arc::new(RwLock::new(
        LogStore::open(dir, config).expect("a scratch log store"),
    ))
}

/// A Kafka records entry at `index` (term 1, no context) carrying `payload`, for unit tests.
#[cfg(test)]
pub(crate) fn records_entry(index: u64, payload: Bytes) -> NewEntry {
    NewEntry {
        index,
        term: 1,
        kind: EntryKind::Records,
        payload,
        context: Bytes::new(),
    }
}

/// A state machine's newest durable snapshot (the metadata group's), shared between the
/// state machine that writes it and the Raft storage that sends it to followers.
#[derive(Debug, Clone, Default)]
pub struct LatestSnapshot(Arc<Mutex<Option<StoredSnapshot>>>);

/// One durable state machine snapshot.
#[derive(Debug, Clone)]
pub struct StoredSnapshot {
    /// The last applied index it covers.
    pub index: u64,
    /// That entry's term.
    pub term: u64,
    /// The encoded state (the file's bytes).
    pub data: Bytes,
}

impl LatestSnapshot {
    /// Replaces the snapshot (only with a newer one: an older index is ignored).
    pub fn set(&self, snapshot: StoredSnapshot) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_none_or(|s| s.index < snapshot.index) {
            *slot = Some(snapshot);
        }
    }

    /// The newest snapshot, if any.
    pub fn get(&self) -> Option<StoredSnapshot> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The newest snapshot's index (0: none).
    pub fn index(&self) -> u64 {
        self.get().map_or(0, |s| s.index)
    }
}

/// raft-rs storage backed by the stream's log store. Cloning shares the store.
#[derive(Clone)]
pub struct RaftStorage {
    store: SharedStore,
    /// For a group with a state machine: its snapshots, sent to followers whose entries were
    /// compacted. None: a log stream, whose snapshot only says where its log starts.
    state_snapshots: Option<LatestSnapshot>,
}

impl RaftStorage {
    /// Wraps a shared store (a log stream).
    pub fn new(store: SharedStore) -> RaftStorage {
        RaftStorage {
            store,
            state_snapshots: None,
        }
    }

    /// Wraps the store of a group with a state machine whose snapshots are in `snapshots`.
    pub fn with_state_snapshots(store: SharedStore, snapshots: LatestSnapshot) -> RaftStorage {
        RaftStorage {
            store,
            state_snapshots: Some(snapshots),
        }
    }

    /// The shared store.
    pub fn shared(&self) -> &SharedStore {
        &self.store
    }
}

fn store_err(e: LogStoreError) -> raft::Error {
    raft::Error::Store(StorageError::Other(Box::new(e)))
}

/// A failed read of entries as raft-rs must see it. Damaged data (the store noted it, and
/// the group repairs the log at its next turn) is "temporarily unavailable": raft-rs then
/// sends nothing from that range instead of panicking (it treats any other error as fatal),
/// and never serves corrupt bytes to a follower.
fn entries_err(e: LogStoreError) -> raft::Error {
    match e {
        LogStoreError::Corruption { .. } => {
            tracing::error!("damaged log entry not served to raft: {e}");
            raft::Error::Store(StorageError::LogTemporarilyUnavailable)
        }
        e => store_err(e),
    }
}

/// A failed term lookup as raft-rs must see it: damage is "unavailable" (raft-rs treats the
/// term as unknown: an append that needs it is rejected, a send falls back to a snapshot
/// attempt), never a panic.
fn term_err(e: LogStoreError) -> raft::Error {
    match e {
        LogStoreError::Corruption { .. } => {
            tracing::error!("damaged log entry: term unavailable to raft: {e}");
            raft::Error::Store(StorageError::Unavailable)
        }
        e => store_err(e),
    }
}

/// Bytes of the record count at the end of a sent `Records` entry's context.
const RECORD_COUNT_LEN: usize = 4;

/// Lengths of the contexts this crate writes on `Records` entries: the tag alone, or the tag,
/// the proposer and the proposal id (`Group::context`).
const RECORDS_CONTEXT_LENS: [usize; 2] = [1, 17];

/// The record count a `Records` entry's context carries (see the module docs), if any.
pub fn context_record_count(ctx: &[u8]) -> Option<u32> {
    if ctx.first() != Some(&CTX_RECORDS) {
        return None;
    }
    let base = ctx.len().checked_sub(RECORD_COUNT_LEN)?;
    if !RECORDS_CONTEXT_LENS.contains(&base) {
        return None;
    }
    Some(u32::from_be_bytes(ctx[base..].try_into().ok()?))
}

/// The context without a record count (as stored).
fn without_record_count(ctx: &Bytes) -> Bytes {
    match context_record_count(ctx) {
        Some(_) => ctx.slice(..ctx.len() - RECORD_COUNT_LEN),
        None => ctx.clone(),
    }
}

/// The record count a received entry carries for `LogStore::append_unsynced_with_counts`:
/// `Some` only for a normal entry whose context carries one.
pub fn record_count_of(e: &Entry) -> Option<u32> {
    if e.get_entry_type() != EntryType::EntryNormal {
        return None;
    }
    context_record_count(&e.context)
}

/// Converts a raft-rs entry into a store entry. A context carrying a record count is stored
/// without it, and such an entry is `Records` even with an empty payload (compacted away).
pub fn to_store_entry(e: &Entry) -> NewEntry {
    let counted = record_count_of(e).is_some();
    let kind = match e.get_entry_type() {
        EntryType::EntryConfChange => EntryKind::ConfChange,
        EntryType::EntryConfChangeV2 => EntryKind::ConfChangeV2,
        EntryType::EntryNormal if counted => EntryKind::Records,
        EntryType::EntryNormal if e.data.is_empty() => EntryKind::Noop,
        EntryType::EntryNormal => match e.context.first() {
            Some(&CTX_RECORDS) => EntryKind::Records,
            _ => EntryKind::Meta,
        },
    };
    NewEntry {
        index: e.index,
        term: e.term,
        kind,
        payload: e.data.clone(),
        context: without_record_count(&e.context),
    }
}

/// Converts a store entry back into a raft-rs entry. A `Records` entry's context gets its
/// record count appended (see the module docs) when it has a layout this crate writes.
pub fn to_raft_entry(e: logstore::Entry) -> Entry {
    let mut out = Entry::default();
    out.set_entry_type(match e.kind {
        EntryKind::ConfChange => EntryType::EntryConfChange,
        EntryKind::ConfChangeV2 => EntryType::EntryConfChangeV2,
        _ => EntryType::EntryNormal,
    });
    out.index = e.index;
    out.term = e.term;
    out.data = e.payload;
    out.context = match e.kind {
        EntryKind::Records if e.record_count > 0 => {
            let ctx = without_record_count(&e.context);
            if RECORDS_CONTEXT_LENS.contains(&ctx.len()) && ctx.first() == Some(&CTX_RECORDS) {
                let mut with = Vec::with_capacity(ctx.len() + RECORD_COUNT_LEN);
                with.extend_from_slice(&ctx);
                with.extend_from_slice(&e.record_count.to_be_bytes());
                Bytes::from(with)
            } else {
                ctx
            }
        }
        _ => e.context,
    };
    out
}

/// Snapshot data: the Kafka offset at which the log restarts after the snapshot.
pub fn encode_snapshot_data(next_offset: u64) -> Bytes {
    Bytes::copy_from_slice(&next_offset.to_be_bytes())
}

/// Parses [`encode_snapshot_data`]'s output.
pub fn decode_snapshot_data(b: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(b.try_into().ok()?))
}

/// raft-rs conf state from the store's.
pub fn to_raft_conf(cs: &logstore::ConfState) -> ConfState {
    ConfState {
        voters: cs.voters.clone(),
        learners: cs.learners.clone(),
        voters_outgoing: cs.voters_outgoing.clone(),
        learners_next: cs.learners_next.clone(),
        auto_leave: cs.auto_leave,
        ..Default::default()
    }
}

/// The store's conf state from raft-rs's.
pub fn from_raft_conf(cs: &ConfState) -> logstore::ConfState {
    logstore::ConfState {
        voters: cs.voters.clone(),
        learners: cs.learners.clone(),
        voters_outgoing: cs.voters_outgoing.clone(),
        learners_next: cs.learners_next.clone(),
        auto_leave: cs.auto_leave,
    }
}

impl raft::Storage for RaftStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let s = read(&self.store);
        let hs = s.hard_state();
        let out = HardState {
            term: hs.term,
            vote: hs.vote,
            // The saved commit is written with term and vote only, so it may be older than the
            // first entry kept after retention or a snapshot; every entry before that one was
            // committed, and raft-rs requires the commit index to be at least the one before
            // it. A commit beyond the log (a lost synced tail) is refused by the node before
            // raft-rs starts; clamping here keeps raft-rs from panicking on it regardless.
            // A state machine's snapshot covers only committed entries, so its index is a
            // lower bound too (the node restarts with it applied).
            commit: hs
                .commit
                .max(s.first_index().saturating_sub(1))
                .max(
                    self.state_snapshots
                        .as_ref()
                        .map_or(0, LatestSnapshot::index),
                )
                .min(s.last_index()),
            ..Default::default()
        };
        Ok(RaftState::new(out, to_raft_conf(s.conf_state())))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let s = read(&self.store);
        if low < s.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > s.last_index() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let max = max_size.into().unwrap_or(u64::MAX);
        let entries = s.entries(low, high, max).map_err(entries_err)?;
        Ok(entries.into_iter().map(to_raft_entry).collect())
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let s = read(&self.store);
        if idx + 1 < s.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > s.last_index() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        s.term(idx).map_err(term_err)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(read(&self.store).first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(read(&self.store).last_index())
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if let Some(latest) = &self.state_snapshots {
            // The state machine's newest durable snapshot; the log is compacted only below
            // one, so there is always one when raft-rs asks (else it retries later).
            let Some(stored) = latest.get() else {
                return Err(raft::Error::Store(
                    StorageError::SnapshotTemporarilyUnavailable,
                ));
            };
            let s = read(&self.store);
            let mut snap = Snapshot {
                data: stored.data,
                ..Default::default()
            };
            let meta = snap.mut_metadata();
            meta.index = stored.index;
            meta.term = stored.term;
            // The metadata group's voters never change (every member), so the current
            // configuration is the one at the snapshot's index.
            meta.set_conf_state(to_raft_conf(s.conf_state()));
            return Ok(snap);
        }
        // The "state machine" of a log stream is the log itself; a snapshot only tells a far
        // behind follower where the retained log starts, in Raft indexes and Kafka offsets.
        let s = read(&self.store);
        let index = s.first_index() - 1;
        let mut snap = Snapshot {
            data: encode_snapshot_data(s.log_start_offset()),
            ..Default::default()
        };
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = s.term(index).map_err(|e| {
            tracing::error!("snapshot term unavailable: {e}");
            raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable)
        })?;
        meta.set_conf_state(to_raft_conf(s.conf_state()));
        Ok(snap)
    }
}

#[cfg(test)]
mod record_count_tests {
    use super::*;

    fn stored(
        kind: EntryKind,
        context: &[u8],
        payload: &'static [u8],
        count: u32,
    ) -> logstore::Entry {
        logstore::Entry {
            index: 7,
            term: 3,
            kind,
            payload: Bytes::from_static(payload),
            context: Bytes::copy_from_slice(context),
            first_offset: 100,
            record_count: count,
        }
    }

    #[test]
    fn a_sent_records_entry_carries_its_count_and_is_stored_as_the_leader_stored_it() {
        let mut proposal = vec![CTX_RECORDS];
        proposal.extend_from_slice(&2u64.to_be_bytes());
        proposal.extend_from_slice(&9u64.to_be_bytes());
        for ctx in [vec![CTX_RECORDS], proposal] {
            // A compacted entry: no batch left, 4 offsets taken.
            let sent = to_raft_entry(stored(EntryKind::Records, &ctx, b"", 4));
            assert_eq!(sent.context.len(), ctx.len() + 4);
            assert_eq!(
                sent.context[..ctx.len()],
                ctx[..],
                "the stored context comes first"
            );
            assert_eq!(context_record_count(&sent.context), Some(4));
            assert_eq!(record_count_of(&sent), Some(4));
            let back = to_store_entry(&sent);
            assert_eq!(
                back.kind,
                EntryKind::Records,
                "an empty compacted entry is no no-op"
            );
            assert_eq!(back.context.as_ref(), ctx.as_slice());
            // Read back from the replica's store and sent on: one count, not two.
            let again = to_raft_entry(stored(EntryKind::Records, &sent.context, b"", 4));
            assert_eq!(again.context, sent.context);
        }
    }

    #[test]
    fn other_entries_and_contexts_carry_no_count() {
        let meta = to_raft_entry(stored(EntryKind::Meta, &[CTX_META], b"m", 0));
        assert_eq!(meta.context.as_ref(), &[CTX_META]);
        assert_eq!(record_count_of(&meta), None);
        // A context of another layout is sent as it is (the old path on the replica).
        let odd = to_raft_entry(stored(EntryKind::Records, &[CTX_RECORDS, 0, 0], b"x", 1));
        assert_eq!(odd.context.as_ref(), &[CTX_RECORDS, 0, 0]);
        assert_eq!(record_count_of(&odd), None);
        // A new proposal (17 bytes, no count) stays as it is, and an empty one is a no-op.
        let e = Entry {
            context: Bytes::from(vec![CTX_RECORDS; 17]),
            ..Default::default()
        };
        assert_eq!(record_count_of(&e), None);
        assert_eq!(to_store_entry(&e).kind, EntryKind::Noop);
        assert_eq!(context_record_count(&[CTX_META, 0, 0, 0, 1]), None);
        assert_eq!(context_record_count(&[]), None);
    }
}
