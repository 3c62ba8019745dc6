//! A bounded set of open active-segment descriptors, shared by every store of a node.
//!
//! Every store has one active segment, written with `pwrite` and synced with `fdatasync`
//! through a read-write descriptor. Keeping that descriptor open while the store is open made
//! a node's descriptors grow with its partitions, busy or idle. So the descriptor of an active
//! segment is kept in this set, which holds at most `capacity` of them and closes the least
//! recently used one (CLOCK order, as `open_segments.rs`) when another must open; the next
//! append, read or sync of that store opens its file again.
//!
//! **Only a clean descriptor is closed.** A descriptor is *dirty* from the first write through
//! it (an append's `pwrite`, a `set_len`) until an `fdatasync` through that same descriptor
//! returned and covered everything written (`mark_synced`). A dirty descriptor is never
//! closed, so:
//! * the fsync that makes an append durable goes through the descriptor that wrote it
//!   (`prepare_sync` hands out that descriptor: a dirty slot always has it open);
//! * no writeback error can be missed. Linux records a failed writeback in the file's
//!   mapping and reports it to the next fsync of each open file description that had not
//!   seen it yet; a descriptor closed with dirty pages would leave those pages to be written
//!   back later, and their failure would reach only descriptors open at that time, or nobody
//!   once the inode left the cache (a file opened later samples the error state at open, and
//!   since 4.16 sees an unseen error, but not one forgotten with the inode). A clean
//!   descriptor has no page of ours left to write back, so closing it loses nothing.
//!
//! So the set may hold more than `capacity` descriptors while more stores than that have
//! unsynced appends (a server syncs them within its sync interval); every sync that finds the
//! set over capacity closes clean descriptors until it is back under.
//!
//! Cost on the hot paths: a read, write or sync takes its slot's `RwLock` for reading (one
//! uncontended atomic each way) and sets a "referenced" bit that is usually set already (a
//! plain load). Closing another store's descriptor only `try_write`s that slot, so it never
//! waits for (or makes wait) an append or read in progress.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::error::Result;
use crate::segment::open_rw;

/// Default capacity of a node's [`ActiveFiles`] set. Why 1,024: a process starts with a hard
/// limit of 4,096 descriptors on a Linux without a service manager raising it (the kernel's
/// default; systemd gives 524,288), the server raises its soft limit to the hard one and keeps
/// half of it for storage, and 1,024 active descriptors leave the other half of that share for
/// the zero reserve's handles of busy stores, hard-state writes and sealed-segment opens. A
/// node rarely has more partitions written within one sync interval; idle ones beyond it cost
/// one `open` on their next use.
pub const DEFAULT_MAX_OPEN_ACTIVE_FILES: usize = 1024;

/// The node-wide set of open active-segment descriptors, at most `capacity` of them while
/// their stores have synced what they wrote. See the module docs of `active_files.rs`.
/// Thread-safe.
#[derive(Debug)]
pub struct ActiveFiles {
    capacity: usize,
    next_id: AtomicU64,
    opened_total: AtomicU64,
    closed_total: AtomicU64,
    /// Slots in the ring (a copy of `ring.len()` readable without the lock).
    open_now: AtomicUsize,
    ring: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    /// Position of each open slot's id in `ring`.
    slots: HashMap<u64, usize>,
    ring: Vec<Arc<Slot>>,
    hand: usize,
}

/// One active segment's descriptor, open or closed.
#[derive(Debug)]
struct Slot {
    id: u64,
    path: PathBuf,
    /// The descriptor while open. Shared so that a sync can run outside the store.
    file: RwLock<Option<Arc<File>>>,
    /// Used since the CLOCK hand last passed.
    referenced: AtomicBool,
    /// Written through the descriptor and not yet synced through it (see the module docs).
    /// Set only while holding `file` for reading, read by eviction while holding it for
    /// writing, so the lock orders them.
    dirty: AtomicBool,
}

impl ActiveFiles {
    /// A set holding at most `capacity` clean descriptors (at least 1).
    pub fn new(capacity: usize) -> Arc<ActiveFiles> {
        Arc::new(ActiveFiles {
            capacity: capacity.max(1),
            next_id: AtomicU64::new(1),
            opened_total: AtomicU64::new(0),
            closed_total: AtomicU64::new(0),
            open_now: AtomicUsize::new(0),
            ring: Mutex::new(Ring::default()),
        })
    }

    /// The most descriptors kept open while their stores have nothing unsynced.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Descriptors open now (above the capacity only while that many stores have unsynced
    /// appends).
    pub fn open_now(&self) -> usize {
        self.open_now.load(Ordering::Relaxed)
    }

    /// Descriptors opened since the set was made (first opens and reopens).
    pub fn opened_total(&self) -> u64 {
        self.opened_total.load(Ordering::Relaxed)
    }

    /// Descriptors the set closed to make room since it was made (each costs a reopen when
    /// its store is used again).
    pub fn closed_total(&self) -> u64 {
        self.closed_total.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        // Every mutation keeps `slots` and `ring` consistent before anything can panic.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `slot` (just given its descriptor) in the ring, closing clean descriptors of
    /// other slots while the ring is full.
    fn admit(&self, slot: &Arc<Slot>) {
        self.opened_total.fetch_add(1, Ordering::Relaxed);
        slot.referenced.store(true, Ordering::Relaxed);
        let mut closed = Vec::new();
        {
            let mut r = self.lock();
            if r.slots.contains_key(&slot.id) {
                return;
            }
            while r.ring.len() >= self.capacity {
                match self.close_one(&mut r) {
                    Some(f) => closed.push(f),
                    None => break,
                }
            }
            let i = r.ring.len();
            r.ring.push(Arc::clone(slot));
            r.slots.insert(slot.id, i);
            self.open_now.store(r.ring.len(), Ordering::Relaxed);
        }
        // Closing (a syscall) happens here, outside the lock.
        drop(closed);
    }

    /// Closes clean descriptors until the set is within its capacity (or none is clean).
    fn shrink(&self) {
        let mut closed = Vec::new();
        {
            let mut r = self.lock();
            while r.ring.len() > self.capacity {
                match self.close_one(&mut r) {
                    Some(f) => closed.push(f),
                    None => break,
                }
            }
        }
        drop(closed);
    }

    /// Takes the descriptor of the first slot in CLOCK order that is neither referenced,
    /// dirty nor in use, and removes the slot from the ring. Two turns at most: the first
    /// clears every referenced bit.
    fn close_one(&self, r: &mut Ring) -> Option<Arc<File>> {
        let turns = 2 * r.ring.len();
        for _ in 0..turns {
            let h = r.hand;
            r.hand = (h + 1) % r.ring.len();
            let slot = &r.ring[h];
            if slot.referenced.load(Ordering::Relaxed) {
                slot.referenced.store(false, Ordering::Relaxed);
                continue;
            }
            // In use (an append, a read, a reopen) or poisoned: skip, never wait.
            let Ok(mut guard) = slot.file.try_write() else {
                continue;
            };
            if slot.dirty.load(Ordering::Relaxed) {
                continue;
            }
            let file = guard.take();
            drop(guard);
            let id = slot.id;
            self.remove_at(r, id, h);
            self.closed_total.fetch_add(1, Ordering::Relaxed);
            return file;
        }
        None
    }

    fn remove_at(&self, r: &mut Ring, id: u64, i: usize) {
        r.slots.remove(&id);
        r.ring.swap_remove(i);
        if let Some(moved) = r.ring.get(i) {
            let moved_id = moved.id;
            r.slots.insert(moved_id, i);
        }
        if r.hand >= r.ring.len() {
            r.hand = 0;
        }
        self.open_now.store(r.ring.len(), Ordering::Relaxed);
    }

    fn remove(&self, id: u64) {
        let mut r = self.lock();
        if let Some(i) = r.slots.get(&id).copied() {
            self.remove_at(&mut r, id, i);
        }
    }
}

/// The descriptor of one active segment, kept in an [`ActiveFiles`] set: open on demand,
/// closed by the set only while clean. Dropping it closes the descriptor and leaves the set.
#[derive(Debug)]
pub(crate) struct ActiveFile {
    set: Arc<ActiveFiles>,
    slot: Arc<Slot>,
}

impl ActiveFile {
    /// Puts the open `file` of the active segment at `path` in `set`. The file must hold
    /// nothing unsynced written through it (it was just created or recovered and synced).
    pub fn new(file: File, path: &Path, set: &Arc<ActiveFiles>) -> ActiveFile {
        let slot = Arc::new(Slot {
            id: set.next_id.fetch_add(1, Ordering::Relaxed),
            path: path.to_path_buf(),
            file: RwLock::new(Some(Arc::new(file))),
            referenced: AtomicBool::new(true),
            dirty: AtomicBool::new(false),
        });
        set.admit(&slot);
        ActiveFile {
            set: Arc::clone(set),
            slot,
        }
    }

    /// Runs `f` on the open descriptor (opening it again first when the set closed it).
    /// Fails only when reopening fails.
    pub fn read<R>(&self, f: impl FnOnce(&File) -> R) -> Result<R> {
        self.with(false, f)
    }

    /// Like [`ActiveFile::read`], for a write through the descriptor: it is dirty (never
    /// closed by the set) from before the write until [`ActiveFile::mark_synced`].
    pub fn write<R>(&self, f: impl FnOnce(&File) -> R) -> Result<R> {
        self.with(true, f)
    }

    /// The open descriptor, shared (for an fdatasync outside the store). It stays open while
    /// the caller holds it.
    pub fn shared(&self) -> Result<Arc<File>> {
        loop {
            if let Some(f) = self.guard().as_ref() {
                self.slot.referenced.store(true, Ordering::Relaxed);
                return Ok(Arc::clone(f));
            }
            self.reopen()?;
        }
    }

    /// Records that an fdatasync through this descriptor covered everything written
    /// through it: it may be closed again. Closes clean descriptors when the set is over its
    /// capacity.
    pub fn mark_synced(&self) {
        self.slot.dirty.store(false, Ordering::Relaxed);
        if self.set.open_now() > self.set.capacity {
            self.set.shrink();
        }
    }

    /// Whether the descriptor is open now.
    #[cfg(test)]
    fn is_open(&self) -> bool {
        self.guard().is_some()
    }

    fn guard(&self) -> std::sync::RwLockReadGuard<'_, Option<Arc<File>>> {
        // Only `Option` replacements happen under the write lock: never half done.
        self.slot.file.read().unwrap_or_else(|p| p.into_inner())
    }

    fn with<R>(&self, write: bool, f: impl FnOnce(&File) -> R) -> Result<R> {
        loop {
            {
                let guard = self.guard();
                if let Some(file) = guard.as_ref() {
                    let slot = &self.slot;
                    if !slot.referenced.load(Ordering::Relaxed) {
                        slot.referenced.store(true, Ordering::Relaxed);
                    }
                    if write && !slot.dirty.load(Ordering::Relaxed) {
                        slot.dirty.store(true, Ordering::Relaxed);
                    }
                    return Ok(f(file));
                }
            }
            self.reopen()?;
        }
    }

    /// Opens the file again after the set closed it (a clean descriptor: nothing was lost).
    fn reopen(&self) -> Result<()> {
        let file = open_rw(&self.slot.path)?;
        {
            let mut guard = self.slot.file.write().unwrap_or_else(|p| p.into_inner());
            if guard.is_some() {
                // Another reader of this store reopened it first.
                return Ok(());
            }
            *guard = Some(Arc::new(file));
        }
        self.set.admit(&self.slot);
        Ok(())
    }
}

impl Drop for ActiveFile {
    fn drop(&mut self) {
        self.set.remove(self.slot.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(set: &Arc<ActiveFiles>, dir: &Path, n: usize) -> Vec<ActiveFile> {
        (0..n)
            .map(|i| {
                let path = dir.join(format!("{i}.log"));
                let f = open_rw_create(&path);
                ActiveFile::new(f, &path, set)
            })
            .collect()
    }

    fn open_rw_create(path: &Path) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap()
    }

    #[test]
    fn clean_descriptors_stay_within_capacity_and_reopen_on_use() {
        let tmp = tempfile::tempdir().unwrap();
        let set = ActiveFiles::new(3);
        let fs = files(&set, tmp.path(), 10);
        assert_eq!(set.open_now(), 3);
        assert_eq!(fs.iter().filter(|f| f.is_open()).count(), 3);
        // A read of a closed one reopens it, closing another.
        let len = fs[0].read(|f| f.metadata().unwrap().len()).unwrap();
        assert_eq!(len, 0);
        assert!(fs[0].is_open());
        assert_eq!(set.open_now(), 3);
        assert_eq!(set.opened_total(), 11);
        drop(fs);
        assert_eq!(set.open_now(), 0, "dropped files leave the set");
    }

    #[test]
    fn a_dirty_descriptor_is_never_closed_until_synced() {
        use std::os::unix::fs::FileExt;
        let tmp = tempfile::tempdir().unwrap();
        let set = ActiveFiles::new(2);
        let fs = files(&set, tmp.path(), 2);
        // Both written, neither synced: a third file cannot close either.
        for f in &fs {
            f.write(|file| file.write_all_at(b"x", 0).unwrap()).unwrap();
        }
        let shared = fs[0].shared().unwrap();
        let third_path = tmp.path().join("third.log");
        let third = ActiveFile::new(open_rw_create(&third_path), &third_path, &set);
        assert!(fs[0].is_open() && fs[1].is_open());
        assert_eq!(
            set.open_now(),
            3,
            "over capacity rather than close a dirty file"
        );
        // The sync through the writing descriptor makes it clean; the set shrinks back.
        shared.sync_data().unwrap();
        drop(shared);
        fs[0].mark_synced();
        assert_eq!(set.open_now(), 2);
        assert!(
            fs[1].is_open(),
            "the dirty one stays open; a clean one was closed"
        );
        assert_eq!(set.closed_total(), 1);
        // Still readable after being closed.
        let _ = (fs[0].read(|_| ()).unwrap(), third.read(|_| ()).unwrap());
        assert!(set.open_now() <= 3);
    }

    #[test]
    fn a_descriptor_in_use_is_not_closed() {
        let tmp = tempfile::tempdir().unwrap();
        let set = ActiveFiles::new(1);
        let fs = files(&set, tmp.path(), 1);
        fs[0]
            .read(|_| {
                // While the first is in use, admitting another cannot close it.
                let p = tmp.path().join("other.log");
                let other = ActiveFile::new(open_rw_create(&p), &p, &set);
                assert_eq!(set.open_now(), 2);
                drop(other);
            })
            .unwrap();
        assert!(fs[0].is_open());
    }
}
