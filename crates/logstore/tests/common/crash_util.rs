//! Helpers of the crash tests.
#![allow(dead_code, missing_docs)]

use std::path::{Path, PathBuf};

use super::{check_det_entry, det_entry};
use logstore::LogStore;
use rand::Rng;

pub fn term_of(index: u64) -> u64 {
    1 + index / 40
}

/// Checks the log from index `from` on (at least from the first index): every entry is the
/// deterministic one for its index, offsets are contiguous, and it reaches at least
/// `min_last`.
pub fn verify_from(store: &LogStore, min_last: u64, from: u64) {
    assert!(
        store.last_index() >= min_last,
        "synced entry {min_last} lost: last index is {}",
        store.last_index()
    );
    let from = from.clamp(store.first_index(), store.last_index() + 1);
    let mut next = store.next_offset_after_index(from - 1).unwrap();
    let mut i = from;
    while i <= store.last_index() {
        let es = store.entries(i, store.last_index() + 1, 1 << 20).unwrap();
        for e in &es {
            assert_eq!(e.index, i);
            check_det_entry(e, term_of(i));
            assert_eq!(e.first_offset, next, "offset continuity at {i}");
            next = e.next_offset();
            i += 1;
        }
    }
    assert_eq!(next, store.next_offset());
    if store.log_start_offset() < store.next_offset() {
        let r = store
            .read_records(store.log_start_offset(), 1, u64::MAX)
            .unwrap();
        assert_eq!(r.first_batch_offset, Some(store.log_start_offset()));
    }
}

/// Checks the whole log, see [`verify_from`].
pub fn verify(store: &LogStore, min_last: u64) {
    verify_from(store, min_last, 0);
}

pub fn append_range(store: &mut LogStore, n: u64, rng: &mut impl Rng) {
    let mut left = n;
    while left > 0 {
        let k = rng.gen_range(1..=left.min(8));
        let first = store.last_index() + 1;
        let batch: Vec<_> = (first..first + k)
            .map(|i| det_entry(i, term_of(i)))
            .collect();
        store.append(&batch).unwrap();
        left -= k;
    }
}

pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

pub fn base_of(p: &Path) -> u64 {
    p.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}
