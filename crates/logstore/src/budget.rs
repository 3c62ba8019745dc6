//! One memory budget for the tail caches of every store of a node.
//!
//! A node hosting thousands of partitions cannot give each a cache of its own size: the sum
//! would be unbounded. Instead every store's cache ([`crate::cache::StoreCache`]) charges the
//! bytes it holds to one [`CacheBudget`], and the budget's total never exceeds its capacity:
//! bytes are charged (compare-and-swap) before an entry is added, and an append that finds
//! the budget full makes room first. The rules, simple on purpose:
//!
//! 1. Fair share = capacity / number of stores sharing the budget.
//! 2. A store over its fair share gives back first: its own oldest entries are dropped until
//!    the new entry fits (or it is down to its share).
//! 3. A store at or under its share takes from stores over their share, oldest entries first,
//!    visiting them round robin (a clock hand over the registered stores), never taking one
//!    below its share. It only `try_lock`s their caches, so it never waits on (or deadlocks
//!    with) another store; a busy one is skipped.
//! 4. When nobody else can give, the store drops its own oldest entries; when it has none
//!    left, the new entry is not cached (the cache stays a contiguous suffix of the log, and
//!    reads that miss it go to the disk).
//!
//! So a single busy partition may use the whole budget while the others are idle, and many
//! busy partitions converge to equal shares. Idle stores keep what they hold up to their share
//! (a consumer that tails them still reads from memory).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::cache::StoreCache;

/// Most stores one append looks at for memory to take (bounds its cost on a node with
/// thousands of stores; the clock hand moves on, so the next search looks at others).
const MAX_STORES_VISITED: usize = 64;

/// Memory shared by the tail caches of many stores (see the module docs of `budget.rs` for
/// how it is divided). Create one per node and pass it to every store through
/// [`crate::StoreResources`]. Thread-safe.
#[derive(Debug)]
pub struct CacheBudget {
    capacity_bytes: u64,
    used_bytes: AtomicU64,
    stores: AtomicUsize,
    members: Mutex<Members>,
}

#[derive(Debug, Default)]
struct Members {
    caches: Vec<Weak<StoreCache>>,
    /// Where the next search for memory to take starts.
    hand: usize,
}

impl CacheBudget {
    /// A budget of `capacity_bytes` (0: nothing is cached).
    pub fn new(capacity_bytes: u64) -> Arc<CacheBudget> {
        Arc::new(CacheBudget {
            capacity_bytes,
            used_bytes: AtomicU64::new(0),
            stores: AtomicUsize::new(0),
            members: Mutex::new(Members::default()),
        })
    }

    /// The capacity; [`CacheBudget::used_bytes`] never exceeds it.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Bytes of entries cached now by all stores together.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Acquire)
    }

    /// Number of open stores sharing the budget.
    pub fn stores(&self) -> usize {
        self.stores.load(Ordering::Relaxed)
    }

    /// What each store may keep when the budget is full: capacity / stores.
    pub fn fair_share_bytes(&self) -> u64 {
        self.capacity_bytes / self.stores().max(1) as u64
    }

    fn members(&self) -> std::sync::MutexGuard<'_, Members> {
        self.members.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn register(&self, cache: &Arc<StoreCache>) {
        self.stores.fetch_add(1, Ordering::Relaxed);
        let mut m = self.members();
        m.caches.retain(|w| w.strong_count() > 0);
        m.caches.push(Arc::downgrade(cache));
    }

    /// A store's cache is gone (its weak entry is pruned later).
    pub(crate) fn unregister(&self) {
        self.stores.fetch_sub(1, Ordering::Relaxed);
    }

    /// Charges `bytes` if they fit under the capacity; false (nothing charged) otherwise.
    pub(crate) fn try_charge(&self, bytes: u64) -> bool {
        self.used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes)
                    .filter(|&u| u <= self.capacity_bytes)
            })
            .is_ok()
    }

    /// Gives back `bytes` charged earlier.
    pub(crate) fn release(&self, bytes: u64) {
        if bytes > 0 {
            let before = self.used_bytes.fetch_sub(bytes, Ordering::AcqRel);
            assert!(
                before >= bytes,
                "the cache budget released more than it charged"
            );
        }
    }

    /// Takes up to about `want_bytes` from stores other than `me` that hold more than their
    /// fair share (rule 3 of the module docs); returns what was freed.
    pub(crate) fn take_from_others(&self, me: &StoreCache, want_bytes: u64) -> u64 {
        let share = self.fair_share_bytes();
        let mut m = self.members();
        let n = m.caches.len();
        if n == 0 {
            return 0;
        }
        let mut freed = 0;
        let mut i = m.hand % n;
        for _ in 0..n.min(MAX_STORES_VISITED) {
            let other = m.caches[i].upgrade();
            i = (i + 1) % n;
            let Some(other) = other else { continue };
            if std::ptr::eq(Arc::as_ptr(&other), me) || other.bytes() <= share {
                continue;
            }
            freed += other.give_back(share, want_bytes - freed);
            if freed >= want_bytes {
                break;
            }
        }
        m.hand = i;
        freed
    }
}
