//! A full disk (ENOSPC through the file-system seam) at any append, including the one that
//! must start a new segment: the append fails, the store stays usable, and once space returns
//! it appends again; a reopened store holds exactly what was appended. (Found by the disk
//! nemesis: a roll that could not create the new segment left the store without an active
//! segment, and the next append panicked.)
//!
//! This binary installs a `FaultInjectingFs` for its whole process: it holds this one test.

mod common;

use common::{check_det_entry, det_entry, install_fault_injecting_fs, set_faults};
use logstore::{LogStore, StoreConfig, SyncPolicy};

const SEGMENT_BYTES: u64 = 16 << 10;

fn cfg() -> StoreConfig {
    StoreConfig {
        segment_bytes: SEGMENT_BYTES,
        index_interval_bytes: 512,
        sync_policy: SyncPolicy::Always,
        preallocate_bytes: 4 << 10,
        ..Default::default()
    }
}

#[test]
fn enospc_at_every_append_near_a_roll_leaves_a_usable_store() {
    let dir = tempfile::tempdir().unwrap();
    let control = install_fault_injecting_fs(dir.path());
    let data = dir.path().join("log");
    let mut s = LogStore::open(&data, cfg()).unwrap();
    let mut last = 0u64;
    let mut refused_rolls = 0;
    // Three rolls; every append within 1 KiB of the segment's end first meets a full disk.
    for _ in 0..20_000 {
        if s.segment_count() >= 4 {
            break;
        }
        let active = s.segment_summaries().pop().unwrap();
        let next = det_entry(last + 1, 1);
        if active.bytes + 1024 > SEGMENT_BYTES {
            let segments = s.segment_count();
            set_faults(&control, "write=enospc\n");
            let e = s.append(std::slice::from_ref(&next));
            assert!(e.is_err(), "an append on a full disk succeeded");
            assert_eq!(s.last_index(), last, "a refused append left entries");
            assert_eq!(s.segment_count(), segments, "a refused roll left a segment");
            set_faults(&control, "");
        }
        let segments = s.segment_count();
        s.append(&[next]).unwrap();
        last += 1;
        if s.segment_count() > segments {
            refused_rolls += 1;
        }
    }
    assert_eq!(refused_rolls, 3, "expected three rolls after refused ones");
    for e in s.entries(1, last + 1, u64::MAX).unwrap() {
        check_det_entry(&e, 1);
    }
    drop(s);
    let s = LogStore::open(&data, cfg()).unwrap();
    assert_eq!(s.last_index(), last);
    for e in s.entries(1, last + 1, u64::MAX).unwrap() {
        check_det_entry(&e, 1);
    }
}
