//! The sync policy decides, in the store, when an append made with `append_unsynced` is
//! fsynced by a caller that runs the fsync outside the store's lock (`prepare_due_sync`,
//! `sync_due_at`): `Always` asks for a sync after every append, `Interval(d)` only once `d`
//! has passed since the last sync, `Never` never.

mod common;

use std::time::{Duration, Instant};

use common::det_entry;
use logstore::{LogStore, StoreConfig, SyncPolicy};

fn open(dir: &std::path::Path, policy: SyncPolicy) -> LogStore {
    LogStore::open(
        dir,
        StoreConfig {
            sync_policy: policy,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Appends entry `index` unsynced, then runs the sync the policy asks for, if any, as the
/// server's group does; returns whether one ran.
fn append_then_due_sync(s: &mut LogStore, index: u64) -> bool {
    s.append_unsynced(&[det_entry(index, 1)]).unwrap();
    match s.prepare_due_sync().unwrap() {
        Some(pending) => {
            pending.run();
            s.complete_sync(pending).unwrap();
            true
        }
        None => false,
    }
}

#[test]
fn always_asks_for_a_sync_after_every_append() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path(), SyncPolicy::Always);
    for i in 1..=20 {
        assert!(append_then_due_sync(&mut s, i), "append {i} was not synced");
        assert_eq!(s.durable_index(), i);
        assert_eq!(s.sync_due_at(), None, "nothing left to sync after {i}");
    }
}

#[test]
fn never_asks_for_no_sync() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path(), SyncPolicy::Never);
    for i in 1..=20 {
        assert!(!append_then_due_sync(&mut s, i), "append {i} was synced");
    }
    assert_eq!(s.durable_index(), 0);
    assert_eq!(s.sync_due_at(), None);
    // An explicit sync still makes everything durable.
    s.sync().unwrap();
    assert_eq!(s.durable_index(), 20);
}

#[test]
fn interval_asks_for_a_sync_only_once_the_interval_has_passed() {
    let dir = tempfile::tempdir().unwrap();
    let interval = Duration::from_millis(500);
    let mut s = open(dir.path(), SyncPolicy::Interval(interval));
    let opened = Instant::now();
    let mut synced = 0;
    for i in 1..=20 {
        if append_then_due_sync(&mut s, i) {
            synced += 1;
        }
    }
    // Twenty appends in well under the interval: none asked for a sync. (On a machine so
    // slow that they took longer, the test cannot tell, and says so.)
    assert!(
        opened.elapsed() < interval,
        "20 appends took {:?}, longer than the interval",
        opened.elapsed()
    );
    assert_eq!(synced, 0, "appends within one interval were synced");
    let due = s.sync_due_at().expect("unsynced data has a due time");
    assert!(due > Instant::now() && due <= opened + interval);
    // Once the interval has passed, the next look asks for a sync of everything appended,
    // without a further append.
    std::thread::sleep(interval);
    let pending = s.prepare_due_sync().unwrap().expect("a sync due");
    assert_eq!(pending.last_index(), 20);
    pending.run();
    s.complete_sync(pending).unwrap();
    assert_eq!(s.durable_index(), 20);
    assert_eq!(s.sync_due_at(), None);
    // And the next append waits for the next interval again.
    assert!(!append_then_due_sync(&mut s, 21));
}
