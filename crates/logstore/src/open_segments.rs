//! A bounded set of open sealed segments, shared by every store of a node.
//!
//! Sealed segments are read through memory maps and their sparse indexes. Keeping every sealed
//! segment of every store open would make a node's descriptors, memory maps and index memory
//! grow with the data it keeps (and Linux caps maps per process: `vm.max_map_count`, 65 530 by
//! default). So a sealed segment holds no file descriptor at all: a read opens the file, maps
//! it and closes the descriptor at once, and the map (and the indexes, once loaded) is kept in
//! this set, which holds at most `capacity` open segments. The set
//! evicts in CLOCK order (an approximation of least recently used: one "referenced" bit per
//! map, cleared as the hand passes, a map is evicted when the hand finds its bit clear). An
//! evicted map is unmapped once the last `Bytes` slice a reader still holds is dropped, so
//! readers are never affected. The active segment of each store is not in the set: its
//! read-write descriptor is kept in the node's [`ActiveFiles`] set, which this set carries so
//! that every segment, sealed or active, finds its set in one place.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::active_files::{ActiveFiles, DEFAULT_MAX_OPEN_ACTIVE_FILES};
use crate::index::SparseIndexes;

/// Default for [`OpenSegments::new`] in a standalone store and in the server
/// (`storage.max_open_segment_files`).
pub const DEFAULT_MAX_OPEN_SEGMENT_FILES: usize = 1024;

/// The node-wide set of open (memory-mapped) sealed segments, at most `capacity` of them.
/// See the module docs of `open_segments.rs`. Thread-safe.
#[derive(Debug)]
pub struct OpenSegments {
    capacity: usize,
    next_id: AtomicU64,
    opened_total: AtomicU64,
    clock: Mutex<Clock>,
    /// Where the active segments' descriptors are kept (see `active_files.rs`).
    active_files: Arc<ActiveFiles>,
}

#[derive(Debug, Default)]
struct Clock {
    /// Slot of each open segment's id in `ring`.
    slots: HashMap<u64, usize>,
    ring: Vec<Slot>,
    hand: usize,
}

/// One open segment: its map and its indexes, either loaded on demand.
#[derive(Debug)]
struct Slot {
    id: u64,
    map: Option<Bytes>,
    indexes: Option<Arc<SparseIndexes>>,
    referenced: bool,
}

impl OpenSegments {
    /// A set holding at most `capacity` open segments (at least 1), with active segments'
    /// descriptors kept in a set of its own of [`DEFAULT_MAX_OPEN_ACTIVE_FILES`].
    pub fn new(capacity: usize) -> Arc<OpenSegments> {
        OpenSegments::with_active_files(capacity, ActiveFiles::new(DEFAULT_MAX_OPEN_ACTIVE_FILES))
    }

    /// A set holding at most `capacity` open sealed segments (at least 1), whose stores keep
    /// their active segments' descriptors in `active_files`.
    pub fn with_active_files(capacity: usize, active_files: Arc<ActiveFiles>) -> Arc<OpenSegments> {
        Arc::new(OpenSegments {
            capacity: capacity.max(1),
            next_id: AtomicU64::new(1),
            opened_total: AtomicU64::new(0),
            clock: Mutex::new(Clock::default()),
            active_files,
        })
    }

    /// The set keeping the active segments' descriptors of the stores using this one.
    pub fn active_files(&self) -> &Arc<ActiveFiles> {
        &self.active_files
    }

    /// The most segments kept open at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Segments open now (never more than the capacity).
    pub fn open_now(&self) -> usize {
        self.lock().ring.len()
    }

    /// Sealed segment files opened (mapped) since the set was made: a miss counter.
    pub fn opened_total(&self) -> u64 {
        self.opened_total.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Clock> {
        // Every mutation keeps `slots` and `ring` consistent before anything can panic.
        self.clock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A handle for one segment (its key in the set); dropping it closes the segment.
    pub(crate) fn handle(self: &Arc<Self>) -> SegmentHandle {
        SegmentHandle {
            set: Arc::clone(self),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Reads from the open segment `id` (marking it used); `None` when it is not open.
    fn get<R>(&self, id: u64, read: impl FnOnce(&Slot) -> Option<R>) -> Option<R> {
        let mut c = self.lock();
        let i = *c.slots.get(&id)?;
        let slot = &mut c.ring[i];
        slot.referenced = true;
        read(slot)
    }

    /// Runs `fill` on the slot of `id`, opening it first when needed (evicting another
    /// segment when the set is full).
    fn fill<R>(&self, id: u64, fill: impl FnOnce(&mut Slot) -> R) -> R {
        let evicted;
        let out = {
            let mut c = self.lock();
            if let Some(&i) = c.slots.get(&id) {
                let slot = &mut c.ring[i];
                slot.referenced = true;
                return fill(slot);
            }
            self.opened_total.fetch_add(1, Ordering::Relaxed);
            let mut slot = Slot {
                id,
                map: None,
                indexes: None,
                referenced: true,
            };
            let out = fill(&mut slot);
            if c.ring.len() < self.capacity {
                let i = c.ring.len();
                c.ring.push(slot);
                c.slots.insert(id, i);
                evicted = None;
            } else {
                // Terminates: one full turn clears every bit.
                loop {
                    let h = c.hand;
                    c.hand = (h + 1) % c.ring.len();
                    if std::mem::replace(&mut c.ring[h].referenced, false) {
                        continue;
                    }
                    let old = std::mem::replace(&mut c.ring[h], slot);
                    c.slots.remove(&old.id);
                    c.slots.insert(id, h);
                    evicted = Some(old);
                    break;
                }
            }
            assert!(c.ring.len() <= self.capacity, "open segments over capacity");
            out
        };
        // Unmapping (when no reader holds a slice) happens here, outside the lock.
        drop(evicted);
        out
    }

    fn remove(&self, id: u64) {
        let removed = {
            let mut c = self.lock();
            let Some(i) = c.slots.remove(&id) else {
                return;
            };
            let old = c.ring.swap_remove(i);
            if let Some(moved) = c.ring.get(i) {
                let moved_id = moved.id;
                c.slots.insert(moved_id, i);
            }
            if c.hand >= c.ring.len() {
                c.hand = 0;
            }
            old
        };
        drop(removed);
    }
}

/// One segment's key in an [`OpenSegments`] set. Dropping it closes the segment.
#[derive(Debug)]
pub(crate) struct SegmentHandle {
    set: Arc<OpenSegments>,
    id: u64,
}

impl SegmentHandle {
    /// The set this segment belongs to.
    pub fn set(&self) -> &Arc<OpenSegments> {
        &self.set
    }

    /// The segment's map when it is open and mapped.
    pub fn map(&self) -> Option<Bytes> {
        self.set.get(self.id, |s| s.map.clone())
    }

    /// Keeps `map` open (or returns the one another reader put there first).
    pub fn insert_map(&self, map: Bytes) -> Bytes {
        self.set.fill(self.id, |s| s.map.get_or_insert(map).clone())
    }

    /// The segment's indexes when it is open and they are loaded.
    pub fn indexes(&self) -> Option<Arc<SparseIndexes>> {
        self.set.get(self.id, |s| s.indexes.clone())
    }

    /// Keeps `indexes` loaded (or returns the ones another reader put there first).
    pub fn insert_indexes(&self, indexes: Arc<SparseIndexes>) -> Arc<SparseIndexes> {
        self.set
            .fill(self.id, |s| s.indexes.get_or_insert(indexes).clone())
    }

    /// Closes the segment (before its file is replaced or deleted).
    pub fn close(&self) {
        self.set.remove(self.id);
    }
}

impl Drop for SegmentHandle {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_more_than_capacity_and_recently_used_maps_stay() {
        let set = OpenSegments::new(3);
        let hs: Vec<SegmentHandle> = (0..10).map(|_| set.handle()).collect();
        for (i, h) in hs.iter().enumerate() {
            let m = h.insert_map(Bytes::from(vec![i as u8; 4]));
            assert_eq!(m[0], i as u8);
            assert!(set.open_now() <= 3);
        }
        assert_eq!(set.open_now(), 3);
        assert_eq!(set.opened_total(), 10);
        // Indexes join their segment's slot.
        let idx = hs[9].insert_indexes(Arc::new(SparseIndexes::new()));
        assert!(Arc::ptr_eq(&idx, &hs[9].indexes().unwrap()));
        assert_eq!(set.open_now(), 3);
        // Touch 9 so that it survives the next insert.
        assert!(hs[9].map().is_some());
        hs[0].insert_map(Bytes::from_static(b"zero"));
        assert!(
            hs[9].map().is_some(),
            "a referenced map is not the first evicted"
        );
        assert_eq!(set.open_now(), 3);
        // An evicted segment loses its map and its indexes together.
        for h in &hs[1..9] {
            h.insert_map(Bytes::from_static(b"x"));
        }
        assert!(hs[9].map().is_none() && hs[9].indexes().is_none());
        assert_eq!(set.open_now(), 3);
        drop(hs);
        assert_eq!(set.open_now(), 0, "dropped handles close their segments");
    }

    #[test]
    fn remove_keeps_the_ring_consistent() {
        let set = OpenSegments::new(4);
        let hs: Vec<SegmentHandle> = (0..4).map(|_| set.handle()).collect();
        for (i, h) in hs.iter().enumerate() {
            h.insert_map(Bytes::from(vec![i as u8]));
        }
        hs[1].close();
        hs[1].close();
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(h.map().map(|m| m[0]), (i != 1).then_some(i as u8));
        }
        let extra = set.handle();
        extra.insert_map(Bytes::from_static(&[9]));
        assert_eq!(set.open_now(), 4);
        assert_eq!(extra.map().map(|m| m[0]), Some(9));
    }
}
