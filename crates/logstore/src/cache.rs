//! In-memory cache of the newest entries of one store, charged to a shared [`CacheBudget`].
//!
//! [`EntryCache`] is the container (a contiguous run of the newest entries); [`StoreCache`]
//! puts it behind a lock, charges its bytes to the node-wide budget and lets other stores take
//! memory back from it (see `budget.rs` for the rules).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::budget::CacheBudget;
use crate::entry::{Entry, EntryKind};

/// The newest entries of the log, contiguous by index, with their total size (entry frame
/// sizes, [`Entry::size`]).
///
/// Invariant: when not empty, the cache holds exactly the entries `[first, last_index]` of
/// the log, where `last_index` is the store's last index. Entries leave from the front only
/// (eviction), except when the log itself is truncated.
#[derive(Debug, Default)]
pub(crate) struct EntryCache {
    entries: VecDeque<Entry>,
    bytes: u64,
}

impl EntryCache {
    /// Index of the oldest cached entry.
    pub fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|e| e.index)
    }

    pub fn get(&self, index: u64) -> Option<&Entry> {
        let first = self.first_index()?;
        if index < first {
            return None;
        }
        self.entries.get((index - first) as usize)
    }

    /// Position (for [`EntryCache::entry_at`]) of entry `index`.
    pub fn position_of_index(&self, index: u64) -> Option<usize> {
        let first = self.first_index()?;
        let pos = usize::try_from(index.checked_sub(first)?).ok()?;
        (pos < self.entries.len()).then_some(pos)
    }

    /// Position (for [`EntryCache::entry_at`]) of the Records entry holding `offset`.
    pub fn position_of_offset(&self, offset: u64) -> Option<usize> {
        let i = self.entries.partition_point(|e| e.next_offset() <= offset);
        let e = self.entries.get(i)?;
        (e.kind == EntryKind::Records && e.first_offset <= offset).then_some(i)
    }

    pub fn entry_at(&self, pos: usize) -> Option<&Entry> {
        self.entries.get(pos)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends `e`, which must follow the newest entry (the caller clears first otherwise).
    fn push_back(&mut self, e: Entry) {
        if let Some(back) = self.entries.back() {
            assert_eq!(back.index + 1, e.index, "the cache stays contiguous");
        }
        self.bytes += e.size();
        self.entries.push_back(e);
    }

    /// Drops the oldest entry; returns its size (0 when empty).
    fn pop_front(&mut self) -> u64 {
        match self.entries.pop_front() {
            Some(e) => {
                let size = e.size();
                self.bytes -= size;
                size
            }
            None => 0,
        }
    }

    /// Empties the cache (and gives its memory back); returns the bytes dropped.
    fn clear(&mut self) -> u64 {
        let freed = self.bytes;
        self.entries = VecDeque::new();
        self.bytes = 0;
        freed
    }

    /// Drops entries with index >= `index`; returns the bytes dropped.
    fn truncate_from(&mut self, index: u64) -> u64 {
        let mut freed = 0;
        while self.entries.back().is_some_and(|e| e.index >= index) {
            if let Some(e) = self.entries.pop_back() {
                freed += e.size();
            }
        }
        self.bytes -= freed;
        freed
    }

    /// Drops entries with index < `index`; returns the bytes dropped.
    fn drop_before(&mut self, index: u64) -> u64 {
        let mut freed = 0;
        while self.entries.front().is_some_and(|e| e.index < index) {
            freed += self.pop_front();
        }
        freed
    }
}

/// One store's cache: an [`EntryCache`] behind a lock whose bytes are charged to a
/// [`CacheBudget`] shared with other stores, and capped at `cap_bytes` on its own.
///
/// Another store's append may take this store's oldest entries away at any time (only from
/// the front), so readers must treat a cache miss as "read the disk", never as an error.
#[derive(Debug)]
pub(crate) struct StoreCache {
    budget: Arc<CacheBudget>,
    cap_bytes: u64,
    cache: Mutex<EntryCache>,
    /// Copy of `cache.bytes`, readable without the lock (to pick stores to take from).
    bytes: AtomicU64,
}

impl StoreCache {
    /// A cache of at most `cap_bytes`, registered with `budget`.
    pub fn new(budget: &Arc<CacheBudget>, cap_bytes: u64) -> Arc<StoreCache> {
        let cache = Arc::new(StoreCache {
            budget: Arc::clone(budget),
            cap_bytes,
            cache: Mutex::new(EntryCache::default()),
            bytes: AtomicU64::new(0),
        });
        budget.register(&cache);
        cache
    }

    /// The cache, locked (for reads). Hold it briefly: other stores' appends may be waiting
    /// to take memory from it (they only ever `try_lock`, so they never block on it).
    pub fn lock(&self) -> MutexGuard<'_, EntryCache> {
        // A poisoned lock means a reader panicked; every mutation keeps the invariants
        // before anything that can panic, so the data is still consistent.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Records that `freed` bytes left `c` (the budget gets them back).
    fn released(&self, c: &EntryCache, freed: u64) {
        self.bytes.store(c.bytes(), Ordering::Relaxed);
        self.budget.release(freed);
    }

    /// Adds the entry that follows the newest one (anything else clears the cache first, so
    /// it stays contiguous). Makes room under the store's cap by dropping its own oldest
    /// entries, and under the shared budget as `budget.rs` describes; when no room can be
    /// made, the cache ends up empty (a valid suffix of the log) and `e` is not cached.
    pub fn push(&self, e: Entry) {
        let mut c = self.lock();
        if c.entries.back().is_some_and(|b| b.index + 1 != e.index) {
            let freed = c.clear();
            self.released(&c, freed);
        }
        let size = e.size();
        if size > self.cap_bytes || size > self.budget.capacity_bytes() {
            // Cannot hold it; keep the invariant (a suffix of the log) by holding nothing.
            let freed = c.clear();
            self.released(&c, freed);
            return;
        }
        let mut freed = 0;
        while c.bytes() + size > self.cap_bytes {
            freed += c.pop_front();
        }
        self.released(&c, freed);
        // Bounded: every round frees something (own entries or another store's) or ends.
        let mut rounds_taking_from_others = 0;
        loop {
            if self.budget.try_charge(size) {
                c.push_back(e);
                self.bytes.store(c.bytes(), Ordering::Relaxed);
                return;
            }
            let over_share = c.bytes() > self.budget.fair_share_bytes();
            if !over_share && rounds_taking_from_others < 4 {
                rounds_taking_from_others += 1;
                if self.budget.take_from_others(self, size) > 0 {
                    continue;
                }
            }
            let freed = c.pop_front();
            if freed == 0 {
                // Nothing left to give and the budget is still full (entries of other
                // stores it could not take): do not cache `e`.
                return;
            }
            self.released(&c, freed);
        }
    }

    /// Called by another store's append (through the budget): drops oldest entries while
    /// this cache holds more than `keep_bytes`, until `want_bytes` are freed. Never blocks:
    /// returns 0 when the cache is locked.
    pub(crate) fn give_back(&self, keep_bytes: u64, want_bytes: u64) -> u64 {
        let Ok(mut c) = self.cache.try_lock() else {
            return 0;
        };
        let mut freed = 0;
        while freed < want_bytes && c.bytes() > keep_bytes {
            freed += c.pop_front();
        }
        if c.is_empty() {
            // An idle store that was emptied should not keep the ring buffer either.
            c.entries = VecDeque::new();
        }
        self.released(&c, freed);
        freed
    }

    /// Drops entries with index >= `index`.
    pub fn truncate_from(&self, index: u64) {
        let mut c = self.lock();
        let freed = c.truncate_from(index);
        self.released(&c, freed);
    }

    /// Drops entries with index < `index`.
    pub fn drop_before(&self, index: u64) {
        let mut c = self.lock();
        let freed = c.drop_before(index);
        self.released(&c, freed);
    }

    /// Drops everything.
    pub fn clear(&self) {
        let mut c = self.lock();
        let freed = c.clear();
        self.released(&c, freed);
    }
}

impl Drop for StoreCache {
    fn drop(&mut self) {
        let c = self.cache.get_mut().unwrap_or_else(|p| p.into_inner());
        let freed = c.clear();
        self.budget.release(freed);
        self.budget.unregister();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn entry(index: u64, payload_bytes: usize) -> Entry {
        Entry {
            index,
            term: 1,
            kind: EntryKind::Noop,
            context: Bytes::new(),
            payload: Bytes::from(vec![0u8; payload_bytes]),
            first_offset: 0,
            record_count: 0,
        }
    }

    #[test]
    fn a_store_stays_under_its_own_cap_and_contiguous() {
        let budget = CacheBudget::new(1 << 20);
        let c = StoreCache::new(&budget, 1000);
        for i in 1..=50 {
            c.push(entry(i, 100));
            let g = c.lock();
            assert!(g.bytes() <= 1000);
            assert_eq!(g.get(i).map(|e| e.index), Some(i), "the newest is cached");
            let first = g.first_index().unwrap();
            for j in first..=i {
                assert_eq!(g.get(j).unwrap().index, j);
            }
        }
        assert_eq!(budget.used_bytes(), c.bytes());
        // A gap clears the cache.
        c.push(entry(60, 100));
        assert_eq!(c.lock().first_index(), Some(60));
        assert_eq!(budget.used_bytes(), c.bytes());
        drop(c);
        assert_eq!(
            budget.used_bytes(),
            0,
            "a dropped cache gives its bytes back"
        );
    }

    #[test]
    fn an_entry_larger_than_the_budget_empties_the_cache() {
        let budget = CacheBudget::new(500);
        let c = StoreCache::new(&budget, 10_000);
        c.push(entry(1, 100));
        c.push(entry(2, 1000));
        assert!(c.lock().is_empty());
        assert_eq!(budget.used_bytes(), 0);
    }

    #[test]
    fn a_store_under_its_share_takes_from_one_over_it() {
        let one_entry = entry(1, 100).size();
        let budget = CacheBudget::new(10 * one_entry);
        let big = StoreCache::new(&budget, u64::MAX);
        let small = StoreCache::new(&budget, u64::MAX);
        for i in 1..=10 {
            big.push(entry(i, 100));
        }
        assert_eq!(
            big.bytes(),
            10 * one_entry,
            "alone, one store may fill the budget"
        );
        for i in 1..=5 {
            small.push(entry(i, 100));
            assert!(budget.used_bytes() <= budget.capacity_bytes());
        }
        assert_eq!(
            small.bytes(),
            5 * one_entry,
            "the small store kept all it pushed"
        );
        assert_eq!(
            big.bytes(),
            5 * one_entry,
            "the big one gave back down to its share"
        );
        // Both at their share now: a store over it drops its own oldest entries.
        small.push(entry(6, 100));
        assert_eq!(small.bytes(), 5 * one_entry);
        assert_eq!(small.lock().first_index(), Some(2));
        assert_eq!(big.bytes(), 5 * one_entry);
    }
}
