//! The zero reserve ahead of the active segment (`StoreConfig::preallocate_bytes`): sealed
//! segments end at their data, a reopened store keeps the zero tail without calling it
//! damage, a torn append into the reserve is still cut, and a clean close leaves no zeros.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{check_det_entry, det_entry};
use logstore::{LogStore, StoreConfig, SyncPolicy};

const SEGMENT_BYTES: u64 = 64 << 10;

fn cfg() -> StoreConfig {
    StoreConfig {
        segment_bytes: SEGMENT_BYTES,
        index_interval_bytes: 512,
        sync_policy: SyncPolicy::Always,
        preallocate_bytes: 16 << 10,
        ..Default::default()
    }
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

fn file_bytes(dir: &Path) -> u64 {
    segment_files(dir)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

fn check_all(s: &LogStore, last: u64) {
    assert_eq!(s.last_index(), last);
    for e in s.entries(1, last + 1, u64::MAX).unwrap() {
        check_det_entry(&e, 1);
    }
}

/// Appends until the store rolled at least twice, then waits for the filler to run ahead.
fn fill_store(dir: &Path) -> (LogStore, u64) {
    let mut s = LogStore::open(dir, cfg()).unwrap();
    let mut i = 0;
    while segment_files(dir).len() < 3 {
        i += 1;
        s.append(&[det_entry(i, 1)]).unwrap();
    }
    // A few more so the active segment has data and asked for zeros.
    for _ in 0..5 {
        i += 1;
        s.append(&[det_entry(i, 1)]).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while file_bytes(dir) <= s.stats().total_bytes {
        assert!(Instant::now() < deadline, "no zeros were written ahead");
        std::thread::sleep(Duration::from_millis(2));
    }
    (s, i)
}

#[test]
fn sealed_segments_end_at_their_data_and_the_tail_is_zeros() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, last) = fill_store(tmp.path());
    let files = segment_files(tmp.path());
    let active = files.last().unwrap();
    let sealed_bytes: u64 = files[..files.len() - 1]
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let data = s.stats().total_bytes;
    let active_len = std::fs::metadata(active).unwrap().len();
    assert!(
        active_len > data - sealed_bytes,
        "the active file has a reserve"
    );
    assert!(
        active_len <= SEGMENT_BYTES,
        "the reserve stops at the segment size"
    );
    let bytes = std::fs::read(active).unwrap();
    let data_end = (data - sealed_bytes) as usize;
    assert!(bytes[data_end..].iter().all(|&b| b == 0));
    check_all(&s, last);
}

#[test]
fn reopen_keeps_the_zero_tail_and_the_data() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, last) = fill_store(tmp.path());
    drop(s); // no close: the reserve stays on disk, as after a crash
    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    let report = s.recovery_report().clone();
    assert!(report.preallocated_bytes > 0, "{report:?}");
    assert_eq!(report.truncated_bytes, 0, "{report:?}");
    assert_eq!(
        report.rebuilt_indexes, 0,
        "sealed segments are intact: {report:?}"
    );
    check_all(&s, last);
    // Appending continues inside the kept reserve.
    for i in last + 1..=last + 20 {
        s.append(&[det_entry(i, 1)]).unwrap();
    }
    check_all(&s, last + 20);
    // A clean close trims the reserve: the next open finds nothing to scan or keep.
    let data = s.stats().total_bytes;
    s.close().unwrap();
    assert_eq!(file_bytes(tmp.path()), data);
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.recovery_report().preallocated_bytes, 0);
    assert_eq!(s.recovery_report().tail_bytes_scanned, 0);
    check_all(&s, last + 20);
}

#[test]
fn a_torn_append_inside_the_reserve_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, last) = fill_store(tmp.path());
    let files = segment_files(tmp.path());
    let sealed_bytes: u64 = files[..files.len() - 1]
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let data_end = s.stats().total_bytes - sealed_bytes;
    drop(s);
    // Half a frame's worth of non-zero bytes right after the data, zeros after them.
    let active = files.last().unwrap();
    let mut bytes = std::fs::read(active).unwrap();
    let len = bytes.len();
    assert!(len as u64 > data_end + 40);
    bytes[data_end as usize..data_end as usize + 40].fill(0xA5);
    std::fs::write(active, &bytes).unwrap();
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    let report = s.recovery_report();
    assert_eq!(report.truncated_bytes, len as u64 - data_end, "{report:?}");
    assert_eq!(report.preallocated_bytes, 0);
    check_all(&s, last);
}
