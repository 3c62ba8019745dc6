//! A full disk does not stop a store from saving its Raft hard state or configuration: the
//! `hardstate` and `confstate` files are overwritten in place, so a new term, vote or
//! configuration needs no new space, while appends (which do)
//! fail until space returns. (Found with a whole local cluster on one full disk: every node
//! failed to replace its hard-state file during the elections that followed, stopped, and
//! the cluster had no quorum left when space returned.)
//!
//! The full disk is `write=full` of a `FaultInjectingFs`: writes that would lengthen a file
//! fail with ENOSPC, overwrites succeed, as on ext4. This binary installs the file system for
//! its whole process: it holds this one test.

mod common;

use common::{det_entry, install_fault_injecting_fs, set_faults};
use logstore::{ConfState, HardState, LogStore, StoreConfig, SyncPolicy};

fn cfg() -> StoreConfig {
    StoreConfig {
        sync_policy: SyncPolicy::Always,
        // No zeros ahead of the writer: every append lengthens the file.
        preallocate_bytes: 0,
        ..Default::default()
    }
}

fn conf(voters: Vec<u64>) -> ConfState {
    ConfState {
        voters,
        ..Default::default()
    }
}

fn hs(term: u64, vote: u64, commit: u64) -> HardState {
    HardState { term, vote, commit }
}

#[test]
fn terms_and_votes_are_saved_on_a_full_disk() {
    let dir = tempfile::tempdir().unwrap();
    let control = install_fault_injecting_fs(dir.path());
    let data = dir.path().join("log");

    // A store whose first hard state was saved before the disk filled (vdl saves one when a
    // replica starts).
    let mut s = LogStore::open(&data, cfg()).unwrap();
    s.append(&[det_entry(1, 1), det_entry(2, 1)]).unwrap();
    s.save_hard_state(&hs(1, 1, 2)).unwrap();
    s.save_conf_state(&conf(vec![1, 2, 3])).unwrap();

    set_faults(&control, "write=full\n");
    let refused = s.append(&[det_entry(3, 1)]);
    assert!(refused.is_err(), "an append that needs space succeeded");
    assert_eq!(s.last_index(), 2);
    // Elections go on: every new term and vote is durable.
    for term in 2..=9 {
        s.save_hard_state(&hs(term, term % 3 + 1, 2)).unwrap();
    }
    assert_eq!(s.hard_state(), hs(9, 1, 2));
    // So do configuration changes applied meanwhile (the `confstate` file is overwritten in
    // place too; the first save, at the store's creation, made its two slots).
    for voters in [vec![1, 2, 3, 4], vec![2, 3, 4]] {
        s.save_conf_state(&conf(voters)).unwrap();
    }
    drop(s);

    // Reopened on the still-full disk: the last term and vote, no damage.
    let mut s = LogStore::open(&data, cfg()).unwrap();
    assert_eq!(s.hard_state(), hs(9, 1, 2));
    assert_eq!(s.conf_state(), &conf(vec![2, 3, 4]));
    assert!(s.hard_state_damage().is_none());
    assert_eq!(s.last_index(), 2);
    s.save_hard_state(&hs(10, 2, 2)).unwrap();

    // Space returns: appends work again.
    set_faults(&control, "");
    s.append(&[det_entry(3, 10)]).unwrap();
    drop(s);
    let s = LogStore::open(&data, cfg()).unwrap();
    assert_eq!(s.hard_state(), hs(10, 2, 2));
    assert_eq!(s.last_index(), 3);
    drop(s);

    // Cutting conflicting entries inside a sealed segment copies the kept prefix to a new
    // file: on a full disk the cut fails with nothing changed (the node retries once space
    // returns, instead of stopping at every restart), and succeeds once space returns.
    let small = StoreConfig {
        segment_bytes: 2048,
        ..cfg()
    };
    let data = dir.path().join("sealed");
    let mut s = LogStore::open(&data, small.clone()).unwrap();
    for i in 1..=40 {
        s.append(&[det_entry(i, 1)]).unwrap();
    }
    let bases = s.sealed_segment_bases();
    assert!(bases.len() >= 2, "{bases:?}");
    let cut = bases[1] - 1; // the last entry of the first sealed segment
    set_faults(&control, "write=full\n");
    assert!(
        s.truncate_suffix(cut).is_err(),
        "a copy on a full disk succeeded"
    );
    assert_eq!(s.last_index(), 40);
    assert_eq!(s.entries(1, 41, u64::MAX).unwrap().len(), 40);
    set_faults(&control, "");
    s.truncate_suffix(cut).unwrap();
    assert_eq!(s.last_index(), cut - 1);
    drop(s);
    let s = LogStore::open(&data, small).unwrap();
    assert_eq!(s.last_index(), cut - 1);
    assert_eq!(s.entries(1, cut, u64::MAX).unwrap().len() as u64, cut - 1);
}
