//! Thousands of stores under one `StoreResources`: the descriptors a process holds follow the
//! bounded set of active segments' descriptors (`ActiveFiles`), not the number of stores;
//! data is read back whole through descriptors closed and reopened, a descriptor holding
//! unsynced appends is never closed, and a power cut (simulated by the fault-injecting file
//! system, installed for every test of this binary) keeps every synced append.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use common::{check_det_entry, det_entry};
use logstore::{
    FaultInjectingFs, LogStore, LogStoreError, NewEntry, RootLock, StoreConfig, StoreResources,
    SyncPolicy,
};

/// The fault-injecting file system of this process (journals writes and syncs, so that
/// `simulate_power_cut` can drop what was not synced), with its control file.
fn control() -> &'static Path {
    static CONTROL: OnceLock<PathBuf> = OnceLock::new();
    CONTROL.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let control = dir.join("faults");
        let fs = Arc::new(FaultInjectingFs::new(&control).unwrap());
        assert!(logstore::install_file_system(fs));
        control
    })
}

/// The tests of this binary run one at a time: a simulated power cut drops the unsynced
/// writes of every store of the process.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn cfg() -> StoreConfig {
    StoreConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        sync_policy: SyncPolicy::Never,
        preallocate_bytes: 0,
        cache_bytes: 0,
        ..Default::default()
    }
}

/// Descriptors of this process open on files under `dir` whose name ends with `suffix`.
fn fds_under(dir: &Path, suffix: &str) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(dir) && p.to_string_lossy().ends_with(suffix))
        .count()
}

fn entries(from: u64, n: u64) -> Vec<NewEntry> {
    (from..from + n).map(|i| det_entry(i, 1)).collect()
}

/// Every entry of `s` read back by index (from disk: no cache), checked byte for byte.
fn check_all(s: &LogStore, last: u64) {
    assert_eq!(s.last_index(), last, "{}", s.dir().display());
    let es = s.entries(1, last + 1, u64::MAX).unwrap();
    assert_eq!(es.len() as u64, last);
    for e in &es {
        check_det_entry(e, 1);
    }
}

#[test]
fn thousands_of_stores_hold_descriptors_bounded_by_the_set_not_by_their_number() {
    let _serial = serial();
    control();
    const STORES: usize = 2000;
    const CAPACITY: usize = 16;
    let tmp = tempfile::tempdir().unwrap();
    // The node's lock on the directory of its stores: no `LOCK` descriptor per store.
    let root = RootLock::acquire(tmp.path()).unwrap();
    let res = StoreResources::with_limits(0, 8, CAPACITY).with_root_lock(root);
    let dirs: Vec<PathBuf> = (0..STORES)
        .map(|i| tmp.path().join(format!("p{i:04}")))
        .collect();
    let bound = CAPACITY + 1; // the set, and one store's descriptor being reopened
                              // Every descriptor under the directory: the root lock and the segments' (no `LOCK`s).
    let all = || fds_under(tmp.path(), "");
    let mut stores = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        let mut s = LogStore::open_shared(d, cfg(), &res).unwrap();
        // Three appends of 1-3 entries, synced: the segment descriptor is written and synced.
        let n = (i % 3) as u64 + 1;
        for k in 0..3 {
            s.append(&entries(k * n + 1, n)).unwrap();
            s.sync().unwrap();
        }
        stores.push(s);
        assert!(fds_under(tmp.path(), ".log") <= bound);
    }
    assert!(
        all() <= bound + 1,
        "{} descriptors for {STORES} stores",
        all()
    );
    assert_eq!(res.active_files.open_now(), CAPACITY);
    assert!(res.active_files.closed_total() >= (STORES - CAPACITY) as u64);
    // Every store read back whole, each read reopening a closed descriptor.
    for (i, s) in stores.iter().enumerate() {
        check_all(s, 3 * ((i % 3) as u64 + 1));
        assert!(fds_under(tmp.path(), ".log") <= bound);
    }
    assert!(all() <= bound + 1);
    // More appends to every store after its descriptor was closed: reopened for the write,
    // synced through it.
    for (i, s) in stores.iter_mut().enumerate() {
        let last = s.last_index();
        s.append(&entries(last + 1, 2)).unwrap();
        s.sync().unwrap();
        assert_eq!(s.durable_index(), last + 2, "store {i}");
        assert!(fds_under(tmp.path(), ".log") <= bound);
    }
    // Half closed (sync, checkpoint), half dropped; all reopened and read back.
    for (i, s) in stores.drain(..).enumerate() {
        if i % 2 == 0 {
            s.close().unwrap();
        } else {
            drop(s);
        }
    }
    assert_eq!(fds_under(tmp.path(), ".log"), 0);
    assert_eq!(res.active_files.open_now(), 0);
    let stores: Vec<LogStore> = dirs
        .iter()
        .map(|d| LogStore::open_shared(d, cfg(), &res).unwrap())
        .collect();
    assert!(fds_under(tmp.path(), ".log") <= bound);
    for (i, s) in stores.iter().enumerate() {
        check_all(s, 3 * ((i % 3) as u64 + 1) + 2);
    }
    assert!(all() <= bound + 1);
}

#[test]
fn unsynced_descriptors_stay_open_and_a_power_cut_keeps_every_synced_append() {
    let _serial = serial();
    let control = control();
    const STORES: usize = 60;
    const CAPACITY: usize = 4;
    let tmp = tempfile::tempdir().unwrap();
    let res = StoreResources::with_limits(0, 8, CAPACITY);
    let dirs: Vec<PathBuf> = (0..STORES)
        .map(|i| tmp.path().join(format!("p{i:02}")))
        .collect();
    let mut stores: Vec<LogStore> = dirs
        .iter()
        .map(|d| LogStore::open_shared(d, cfg(), &res).unwrap())
        .collect();
    // Ten entries synced in every store (several segments of 4 KiB each), then an unsynced
    // append in every store: none of their descriptors may be closed.
    for s in &mut stores {
        for k in 0..5 {
            s.append(&entries(k * 2 + 1, 2)).unwrap();
            s.sync().unwrap();
        }
        assert!(fds_under(tmp.path(), ".log") <= CAPACITY + 1);
    }
    for (i, s) in stores.iter_mut().enumerate() {
        s.append_unsynced(&entries(11, 3)).unwrap();
        assert_eq!(
            fds_under(tmp.path(), ".log"),
            (i + 1).max(CAPACITY),
            "only clean descriptors are closed"
        );
    }
    assert_eq!(res.active_files.open_now(), STORES);
    // Reads of every store (no cache: from the disk) do not close the unsynced ones either.
    for s in &stores {
        check_all(s, 13);
    }
    assert_eq!(fds_under(tmp.path(), ".log"), STORES);
    // The even stores sync (through the descriptor that wrote): the set shrinks back as far
    // as clean descriptors allow; the odd ones keep theirs.
    for s in stores.iter_mut().step_by(2) {
        s.sync().unwrap();
    }
    assert_eq!(fds_under(tmp.path(), ".log"), STORES / 2);
    assert_eq!(res.active_files.open_now(), STORES / 2);
    // A power cut: the stores are dropped without syncing and unsynced writes are lost.
    drop(stores);
    assert_eq!(fds_under(tmp.path(), ".log"), 0);
    let dropped = logstore::simulate_power_cut(control, false).unwrap();
    assert!(dropped >= STORES / 2, "{dropped} writes dropped");
    for (i, d) in dirs.iter().enumerate() {
        let s = LogStore::open_shared(d, cfg(), &res).unwrap();
        // Synced: all 13 in the even stores; 10 in the odd ones (their last append was not).
        check_all(&s, if i % 2 == 0 { 13 } else { 10 });
    }
}

fn is_locked<T: std::fmt::Debug>(r: Result<T, LogStoreError>) -> bool {
    matches!(r, Err(LogStoreError::Locked { .. }))
}

#[test]
fn a_root_lock_replaces_the_stores_locks_and_still_keeps_every_other_opener_out() {
    let _serial = serial();
    control();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let root = RootLock::acquire(tmp.path()).unwrap();
    // A second node on the same directory (another process behaves the same: flock locks
    // of two open files conflict whatever process holds them).
    assert!(is_locked(RootLock::acquire(tmp.path())));
    let res = StoreResources::with_limits(0, 8, 4).with_root_lock(Arc::clone(&root));
    let mut s = LogStore::open_shared(&a, cfg(), &res).unwrap();
    s.append(&entries(1, 3)).unwrap();
    s.sync().unwrap();
    assert_eq!(root.open_stores(), 1);
    assert_eq!(
        fds_under(tmp.path(), "/LOCK"),
        0,
        "no per-store lock descriptor"
    );
    // The same store again, in this process: through the node's resources, through other
    // resources, or alone.
    assert!(is_locked(LogStore::open_shared(&a, cfg(), &res)));
    assert!(is_locked(LogStore::open_shared(
        &a,
        cfg(),
        &StoreResources::new(0, 8)
    )));
    assert!(is_locked(LogStore::open(&a, cfg())));
    // Any store below the root is the node's while it holds the root, even one it has not
    // opened.
    assert!(is_locked(LogStore::open(&b, cfg())));
    drop(s);
    assert_eq!(root.open_stores(), 0);
    assert!(is_locked(LogStore::open(&a, cfg())));
    let s = LogStore::open_shared(&a, cfg(), &res).unwrap();
    check_all(&s, 3);
    drop((s, res, root));
    // The node gone: a store opens alone, with its own `LOCK`, and a node starting then
    // cannot open that store (but opens the others).
    let alone = LogStore::open(&a, cfg()).unwrap();
    check_all(&alone, 3);
    assert_eq!(fds_under(tmp.path(), "/LOCK"), 1);
    assert!(is_locked(LogStore::open(&a, cfg())));
    let root = RootLock::acquire(tmp.path()).unwrap();
    let res = StoreResources::new(0, 8).with_root_lock(root);
    assert!(is_locked(LogStore::open_shared(&a, cfg(), &res)));
    let other = LogStore::open_shared(&b, cfg(), &res).unwrap();
    drop((other, alone));
    // A store outside the root opened with the node's resources takes its own lock.
    let outside = tempfile::tempdir().unwrap();
    let s = LogStore::open_shared(outside.path(), cfg(), &res).unwrap();
    assert!(is_locked(LogStore::open(outside.path(), cfg())));
    drop(s);
}
