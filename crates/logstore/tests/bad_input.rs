//! Bad input: files of a newer format, empty files, garbage, misnamed segments, corrupt
//! sealed data, malformed record batches and API misuse. Each gives a clear error or is
//! recovered; none panics.

mod common;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use common::{batch, det_entry};
use logstore::{EntryKind, LogStore, LogStoreError, NewEntry, StoreConfig, SyncPolicy};
use proptest::prelude::*;

fn cfg() -> StoreConfig {
    StoreConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        sync_policy: SyncPolicy::Never,
        ..Default::default()
    }
}

/// A closed store with `n` deterministic entries (several segments).
fn make_store(dir: &Path, n: u64) {
    let mut s = LogStore::open(dir, cfg()).unwrap();
    for i in 1..=n {
        s.append(&[det_entry(i, 1)]).unwrap();
    }
    s.close().unwrap();
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

#[test]
fn newer_format_version_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path(), 50);
    let seg = files(tmp.path(), "log").remove(0);
    let mut d = std::fs::read(&seg).unwrap();
    d[4..6].copy_from_slice(&3u16.to_le_bytes());
    std::fs::write(&seg, &d).unwrap();
    match LogStore::open(tmp.path(), cfg()) {
        Err(LogStoreError::UnsupportedVersion {
            path,
            found: 3,
            supported: 2,
        }) => {
            assert_eq!(path, seg)
        }
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
    // Same for the hard state file.
    let tmp = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    s.save_hard_state(&logstore::HardState {
        term: 1,
        vote: 1,
        commit: 0,
    })
    .unwrap();
    drop(s);
    let p = tmp.path().join("hardstate");
    let mut d = std::fs::read(&p).unwrap();
    d[4] = 9;
    std::fs::write(&p, &d).unwrap();
    assert!(matches!(
        LogStore::open(tmp.path(), cfg()),
        Err(LogStoreError::UnsupportedVersion { found: 9, .. })
    ));
}

#[test]
fn zero_length_files() {
    // An empty segment file: a clear error naming it.
    let tmp = tempfile::tempdir().unwrap();
    let seg = tmp.path().join("00000000000000000001.log");
    std::fs::write(&seg, b"").unwrap();
    match LogStore::open(tmp.path(), cfg()) {
        Err(LogStoreError::Corruption {
            path, offset: 0, ..
        }) => assert_eq!(path, seg),
        other => panic!("expected corruption, got {other:?}"),
    }
    // Empty index files: rebuilt.
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path(), 60);
    for p in files(tmp.path(), "index") {
        std::fs::write(&p, b"").unwrap();
    }
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert!(s.recovery_report().rebuilt_indexes > 0);
    assert_eq!(s.last_index(), 60);
    assert_eq!(s.entries(1, 61, u64::MAX).unwrap().len(), 60);
    drop(s);
    // Empty hard state: reported (naming the file), never guessed: the default state and
    // the reason; the next save replaces it.
    std::fs::write(tmp.path().join("hardstate"), b"").unwrap();
    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    let why = s.hard_state_damage().expect("damage reported").to_owned();
    assert!(why.contains("hardstate"), "{why}");
    assert_eq!(s.hard_state(), logstore::HardState::default());
    s.save_hard_state(&logstore::HardState {
        term: 3,
        vote: 1,
        commit: 2,
    })
    .unwrap();
    assert!(s.hard_state_damage().is_none());
    // The votes stay unknown across a restart although the saved hard state is intact now,
    // until the caller says it rebuilt them.
    assert!(s.vote_unknown());
    drop(s);
    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert!(s.hard_state_damage().is_none());
    assert_eq!(s.hard_state().term, 3);
    assert!(s.vote_unknown(), "a restart forgot the lost votes");
    s.clear_vote_unknown().unwrap();
    assert!(!s.vote_unknown());
    drop(s);
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert!(!s.vote_unknown());
}

#[test]
fn garbage_files() {
    let garbage: Vec<u8> = (0..5000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    // A garbage segment.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("00000000000000000001.log"), &garbage).unwrap();
    assert!(matches!(
        LogStore::open(tmp.path(), cfg()),
        Err(LogStoreError::Corruption { .. })
    ));
    // Garbage with a valid header: the active segment's tail is cut at the header.
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path(), 0);
    let seg = files(tmp.path(), "log").remove(0);
    let mut d = std::fs::read(&seg).unwrap();
    d.extend_from_slice(&garbage);
    std::fs::write(&seg, &d).unwrap();
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.last_index(), 0);
    assert_eq!(s.recovery_report().truncated_bytes, garbage.len() as u64);
    drop(s);
    // Garbage index files and unknown files: rebuilt / ignored.
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path(), 80);
    for p in files(tmp.path(), "index") {
        std::fs::write(&p, &garbage).unwrap();
    }
    std::fs::write(tmp.path().join("README.txt"), b"hello").unwrap();
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.entries(1, 81, u64::MAX).unwrap().len(), 80);
    drop(s);
    // Garbage conf state: an error.
    std::fs::write(tmp.path().join("confstate"), &garbage).unwrap();
    assert!(matches!(
        LogStore::open(tmp.path(), cfg()),
        Err(LogStoreError::Corruption { .. })
    ));
}

#[test]
fn misnamed_segment_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path(), 50);
    let segs = files(tmp.path(), "log");
    assert!(segs.len() >= 2);
    let last = segs.last().unwrap();
    let wrong = tmp.path().join("00000000000000099999.log");
    std::fs::rename(last, &wrong).unwrap();
    match LogStore::open(tmp.path(), cfg()) {
        Err(LogStoreError::SegmentNameMismatch {
            path,
            name_index: 99999,
            ..
        }) => {
            assert_eq!(path, wrong)
        }
        other => panic!("expected SegmentNameMismatch, got {other:?}"),
    }
}

#[test]
fn missing_middle_segment_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path(), 80);
    let segs = files(tmp.path(), "log");
    assert!(segs.len() >= 3);
    std::fs::remove_file(&segs[1]).unwrap();
    assert!(matches!(
        LogStore::open(tmp.path(), cfg()),
        Err(LogStoreError::Corruption { .. })
    ));
}

/// Flips a byte in the context of the 2nd frame (a Records entry) of the first (sealed) segment; returns the
/// segment path and the frame's position.
fn corrupt_sealed(dir: &Path) -> (PathBuf, u64) {
    let seg = files(dir, "log").remove(0);
    let mut d = std::fs::read(&seg).unwrap();
    let mut pos = 64usize;
    {
        pos += 4 + u32::from_le_bytes(d[pos..pos + 4].try_into().unwrap()) as usize;
    }
    d[pos + 52] ^= 0xff; // first context byte
    std::fs::write(&seg, &d).unwrap();
    (seg, pos as u64)
}

#[test]
fn bad_crc_in_sealed_segment() {
    // With the index gone, open scans the sealed segment, finds the bad frame, cuts the log
    // before it (keeping the intact prefix) and writes a repair marker with the old end.
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path(), 60);
    let (seg, pos) = corrupt_sealed(tmp.path());
    std::fs::remove_file(seg.with_extension("index")).unwrap();
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    let d = s.recovery_report().damage.clone().expect("damage reported");
    assert_eq!(d.path, seg);
    assert_eq!(d.offset, pos);
    assert!(d.reason.contains("CRC"), "{}", d.reason);
    assert_eq!(d.first_bad_index, 2);
    assert_eq!(s.last_index(), 1);
    let m = s.repair_marker().expect("marker");
    assert_eq!((m.first_bad_index, m.lost_last_index), (2, 60));
    assert_eq!(s.entries(1, 2, u64::MAX).unwrap().len(), 1);
    drop(s);
    // Reopened: the marker is still there (until the caller finishes the repair).
    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.repair_marker(), Some(m));
    s.finish_repair().unwrap();
    drop(s);
    assert_eq!(
        LogStore::open(tmp.path(), cfg()).unwrap().repair_marker(),
        None
    );

    // With the index intact, open is cheap and trusts it; reading the bad entry fails,
    // notes the damage, and `repair` cuts the log before it.
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path(), 60);
    let (seg, pos) = corrupt_sealed(tmp.path());
    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    // The scrubber's verification of the first sealed segment finds the bad frame.
    let base = s.sealed_segment_bases()[0];
    let target = s.scrub_target(base).unwrap().unwrap();
    let mut paced = 0;
    let outcome = target.verify(|n| paced += n);
    let (index, at, _) = outcome.damage.expect("damage found");
    assert_eq!((index, at), (2, pos));
    assert_eq!(outcome.bytes_verified, pos);
    assert_eq!(paced, pos - 64);
    match s.entries(1, 10, u64::MAX) {
        Err(LogStoreError::Corruption { path, offset, .. }) => {
            assert_eq!(path, seg);
            assert_eq!(offset, pos);
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    assert!(s.read_records(0, u64::MAX, u64::MAX).is_err());
    // Entries after it are still readable.
    assert_eq!(s.entries(10, 20, u64::MAX).unwrap().len(), 10);
    let suspect = s.damaged_from().expect("damage noted");
    assert!(suspect <= 2, "{suspect}");
    let m = s.repair(suspect).unwrap().expect("cut");
    assert_eq!((m.first_bad_index, m.lost_last_index), (suspect, 60));
    assert_eq!(s.last_index(), suspect - 1);
    assert_eq!(s.damaged_from(), None);
    // The scrubber's verification finds nothing left to complain about.
    for base in s.sealed_segment_bases() {
        let t = s.scrub_target(base).unwrap().unwrap();
        assert_eq!(t.verify(|_| {}).damage, None);
    }
}

/// A repair cuts only what it can show damaged: a suspect whose segment scans intact, or
/// whose segment retention deleted meanwhile (a late scrubber report), cuts nothing.
#[test]
fn repair_without_damage_on_disk_cuts_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path(), 60);
    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    let (first, last) = (s.first_index(), s.last_index());
    // Every frame is intact: a suspect anywhere cuts nothing and leaves no marker.
    for suspect in [first, 10, last] {
        assert_eq!(s.repair(suspect).unwrap(), None, "suspect {suspect}");
        assert_eq!((s.first_index(), s.last_index()), (first, last));
        assert_eq!(s.repair_marker(), None);
    }
    // The first sealed segments are deleted; a report about an index in them cuts nothing.
    let second_base = s.sealed_segment_bases()[1];
    s.delete_prefix(second_base).unwrap();
    assert!(s.first_index() > 1);
    s.report_damage(1);
    assert_eq!(s.repair(s.damaged_from().unwrap()).unwrap(), None);
    assert_eq!(s.last_index(), last);
    assert_eq!(s.repair_marker(), None);
}

#[test]
fn api_misuse_gives_typed_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert!(matches!(
        s.append(&[det_entry(2, 1)]),
        Err(LogStoreError::NonContiguous {
            expected: 1,
            got: 2
        })
    ));
    s.append(&[det_entry(1, 5)]).unwrap();
    assert!(matches!(
        s.append(&[det_entry(2, 4)]),
        Err(LogStoreError::TermRegression { .. })
    ));
    assert!(matches!(
        s.append(&[det_entry(1, 5)]),
        Err(LogStoreError::NonContiguous { .. })
    ));
    let big = NewEntry {
        index: 2,
        term: 5,
        kind: EntryKind::Meta,
        payload: Bytes::from(vec![0u8; 70 << 20]),
        context: Bytes::new(),
    };
    assert!(matches!(
        s.append(&[big]),
        Err(LogStoreError::EntryTooLarge { .. })
    ));
    let mut bad = batch(2, 0, 10, 1);
    bad[16] = 1; // magic 1
    let e = NewEntry {
        index: 2,
        term: 5,
        kind: EntryKind::Records,
        payload: Bytes::from(bad),
        context: Bytes::new(),
    };
    assert!(matches!(
        s.append(&[e]),
        Err(LogStoreError::InvalidRecords { index: 2, .. })
    ));
    let empty = NewEntry {
        index: 2,
        term: 5,
        kind: EntryKind::Records,
        payload: Bytes::new(),
        context: Bytes::new(),
    };
    assert!(matches!(
        s.append(&[empty]),
        Err(LogStoreError::InvalidRecords { .. })
    ));
    // Nothing was appended by the failed calls.
    assert_eq!(s.last_index(), 1);
    assert!(matches!(
        s.entries(0, 2, 10),
        Err(LogStoreError::Compacted { .. })
    ));
    assert!(matches!(
        s.entries(1, 3, 10),
        Err(LogStoreError::Unavailable { .. })
    ));
    assert!(matches!(
        s.read_records(99, 10, 99),
        Err(LogStoreError::OffsetOutOfRange { .. })
    ));
    // A second store on the same directory.
    assert!(matches!(
        LogStore::open(tmp.path(), cfg()),
        Err(LogStoreError::Locked { .. })
    ));
    drop(s);
    // Deletion switch.
    let mut s = LogStore::open(
        tmp.path(),
        StoreConfig {
            deletion_allowed: false,
            ..cfg()
        },
    )
    .unwrap();
    assert!(matches!(
        s.delete_prefix(u64::MAX),
        Err(LogStoreError::DeletionForbidden)
    ));
    assert!(matches!(
        s.apply_retention(u64::MAX),
        Err(LogStoreError::DeletionForbidden)
    ));
    // Bad config.
    assert!(matches!(
        LogStore::open(
            &tmp.path().join("x"),
            StoreConfig {
                segment_bytes: 10,
                ..cfg()
            }
        ),
        Err(LogStoreError::InvalidArgument(_))
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Arbitrary bytes as a Records payload: accepted only when they are whole batches,
    /// never a panic.
    #[test]
    fn arbitrary_records_payload_never_panics(
        mut data in prop::collection::vec(any::<u8>(), 0..300),
        fix_header in any::<bool>(),
    ) {
        if fix_header && data.len() >= 61 {
            let len = data.len() as i32 - 12;
            data[8..12].copy_from_slice(&len.to_be_bytes());
            data[16] = 2;
        }
        let tmp = tempfile::tempdir().unwrap();
        let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
        let e = NewEntry {
            index: 1,
            term: 1,
            kind: EntryKind::Records,
            payload: Bytes::from(data),
            context: Bytes::new(),
        };
        match s.append(&[e]) {
            Ok(_) => {
                let r = s.read_records(0, 1, u64::MAX).unwrap();
                prop_assert!(r.bytes > 0);
            }
            Err(LogStoreError::InvalidRecords { .. }) => prop_assert_eq!(s.last_index(), 0),
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }

    /// Arbitrary bytes after a valid segment header, in the active segment: recovered.
    #[test]
    fn arbitrary_tail_bytes_are_recovered(tail in prop::collection::vec(any::<u8>(), 0..400)) {
        let tmp = tempfile::tempdir().unwrap();
        make_store(tmp.path(), 3);
        let seg = files(tmp.path(), "log").pop().unwrap();
        let mut d = std::fs::read(&seg).unwrap();
        d.extend_from_slice(&tail);
        std::fs::write(&seg, &d).unwrap();
        let s = LogStore::open(tmp.path(), cfg()).unwrap();
        prop_assert_eq!(s.last_index(), 3);
    }
}
