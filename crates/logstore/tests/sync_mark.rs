//! Recovery of the active segment's tail: a bad frame is *damage* (repair marker, the log cut
//! before it) only when a completed sync covered it, or when the hard state's commit covers
//! its index; past the last completed sync it is a torn tail (cut, no marker), even when an
//! intact frame continuing the log follows it (a device may persist page k+1 and not page k
//! of an unsynced write). Segments of the older format (version 1, no sync marks) recover as
//! before, and the log goes on in a version-2 segment.

mod common;

use std::path::{Path, PathBuf};

use common::{check_det_entry, crc32c_of, det_entry};
use logstore::{HardState, LogStore, RepairMarker, StoreConfig, SyncPolicy};

/// Syncs only when told; no zeros ahead of the data, so the file ends at the last frame.
fn cfg() -> StoreConfig {
    StoreConfig {
        sync_policy: SyncPolicy::Never,
        preallocate_bytes: 0,
        ..Default::default()
    }
}

fn active_segment(dir: &Path) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v.pop().expect("a segment")
}

/// The data length of the active segment (where the next frame goes).
fn data_len(s: &LogStore) -> u64 {
    s.segment_summaries().last().expect("a segment").bytes
}

/// Appends entry `index` (term 1) without syncing and returns its frame's position.
fn append_one(s: &mut LogStore, index: u64) -> u64 {
    let pos = data_len(s);
    s.append_unsynced(&[det_entry(index, 1)]).unwrap();
    pos
}

/// Flips the last byte of the frame at `pos` (payload bytes are under the frame CRC; the
/// frame's length field stays intact).
fn corrupt_frame(dir: &Path, pos: u64, frame_len_bytes: u64) {
    let path = active_segment(dir);
    let mut data = std::fs::read(&path).unwrap();
    data[(pos + frame_len_bytes - 1) as usize] ^= 0x5a;
    std::fs::write(&path, &data).unwrap();
}

/// Checks entries 1..=last are there, intact, and nothing after.
fn check_entries(s: &LogStore, last: u64) {
    assert_eq!(s.last_index(), last);
    for e in s.entries(1, last + 1, u64::MAX).unwrap() {
        check_det_entry(&e, 1);
    }
}

/// Five entries, each synced; returns the store and the positions of their frames.
fn five_synced(dir: &Path) -> (LogStore, Vec<u64>) {
    let mut s = LogStore::open(dir, cfg()).unwrap();
    let mut pos = Vec::new();
    for i in 1..=5 {
        pos.push(append_one(&mut s, i));
        s.sync().unwrap();
    }
    (s, pos)
}

#[test]
fn unsynced_bad_frame_before_an_intact_one_is_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, _) = five_synced(tmp.path());
    let synced_len = data_len(&s);
    // One unsynced append of three frames (one pwrite), then a power cut that persisted the
    // second and third frame's pages but not the first's.
    let batch: Vec<_> = (6..=8).map(|i| det_entry(i, 1)).collect();
    s.append_unsynced(&batch).unwrap();
    let first_len = s.entry(6).unwrap().size();
    drop(s);
    corrupt_frame(tmp.path(), synced_len, first_len);

    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    let report = s.recovery_report().clone();
    assert_eq!(report.damage, None, "never synced: not damage");
    assert_eq!(s.repair_marker(), None, "no repair marker for a torn tail");
    assert_eq!(
        report.truncation_reason.as_ref().map(|r| r.0),
        Some(synced_len)
    );
    check_entries(&s, 5);
    assert_eq!(
        std::fs::metadata(active_segment(tmp.path())).unwrap().len(),
        synced_len,
        "the frames after the bad one are cut too"
    );
    // The log goes on; a reopen finds nothing wrong.
    s.append_unsynced(&[det_entry(6, 1)]).unwrap();
    s.sync().unwrap();
    drop(s);
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.recovery_report().truncated_bytes, 0);
    assert_eq!(s.repair_marker(), None);
    check_entries(&s, 6);
}

#[test]
fn unsynced_bad_frame_in_a_later_append_is_a_torn_tail() {
    // Two unsynced appends after the last sync: the first frame of the first one is bad, the
    // second append (written before any sync) is intact.
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, _) = five_synced(tmp.path());
    let p6 = append_one(&mut s, 6);
    append_one(&mut s, 7);
    let len6 = s.entry(6).unwrap().size();
    drop(s);
    corrupt_frame(tmp.path(), p6, len6);
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.recovery_report().damage, None);
    assert_eq!(s.repair_marker(), None);
    check_entries(&s, 5);
}

#[test]
fn synced_bad_frame_with_synced_frames_after_it_is_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, pos) = five_synced(tmp.path());
    let len3 = s.entry(3).unwrap().size();
    drop(s);
    corrupt_frame(tmp.path(), pos[2], len3);

    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    let d = s.recovery_report().damage.clone().expect("damage reported");
    assert_eq!((d.first_bad_index, d.offset), (3, pos[2]));
    let want = RepairMarker {
        first_bad_index: 3,
        lost_last_index: 5,
        lost_last_term: 1,
    };
    assert_eq!(s.repair_marker(), Some(want));
    check_entries(&s, 2);
    drop(s);
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.repair_marker(), Some(want), "kept until finish_repair");
}

#[test]
fn bad_frame_synced_by_a_group_sync_is_damage() {
    // Entries 1-3 appended unsynced and synced together; entry 4 appended after that sync.
    // Entry 2 was synced although no frame before entry 4 says so.
    let tmp = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    append_one(&mut s, 1);
    let p2 = append_one(&mut s, 2);
    append_one(&mut s, 3);
    s.sync().unwrap();
    append_one(&mut s, 4);
    s.sync().unwrap();
    let len2 = s.entry(2).unwrap().size();
    drop(s);
    corrupt_frame(tmp.path(), p2, len2);

    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    let d = s.recovery_report().damage.clone().expect("damage reported");
    assert_eq!(d.first_bad_index, 2);
    assert_eq!(
        s.repair_marker(),
        Some(RepairMarker {
            first_bad_index: 2,
            lost_last_index: 4,
            lost_last_term: 1,
        })
    );
    check_entries(&s, 1);
}

#[test]
fn corrupt_last_frame_under_the_saved_commit_is_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, pos) = five_synced(tmp.path());
    s.save_hard_state(&HardState {
        term: 1,
        vote: 0,
        commit: 5,
    })
    .unwrap();
    let len5 = s.entry(5).unwrap().size();
    drop(s);
    corrupt_frame(tmp.path(), pos[4], len5);

    let s = LogStore::open(tmp.path(), cfg()).expect("the store opens");
    let d = s
        .recovery_report()
        .damage
        .clone()
        .expect("damage reported, not a silent truncation");
    assert_eq!((d.first_bad_index, d.offset), (5, pos[4]));
    assert_eq!(
        s.repair_marker(),
        Some(RepairMarker {
            first_bad_index: 5,
            lost_last_index: 5,
            lost_last_term: 1,
        })
    );
    assert_eq!(s.hard_state().commit, 5, "the hard state is kept");
    check_entries(&s, 4);
}

#[test]
fn corrupt_last_frame_above_the_saved_commit_is_cut() {
    // The remaining window (see the recovery module doc): nothing on disk tells whether the
    // last frame of an idle log was synced when its index is above the saved commit.
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, pos) = five_synced(tmp.path());
    s.save_hard_state(&HardState {
        term: 1,
        vote: 0,
        commit: 4,
    })
    .unwrap();
    let len5 = s.entry(5).unwrap().size();
    drop(s);
    corrupt_frame(tmp.path(), pos[4], len5);
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.recovery_report().damage, None);
    assert_eq!(s.repair_marker(), None);
    check_entries(&s, 4);
}

#[test]
fn new_segments_have_format_version_2_and_sync_marks() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, pos) = five_synced(tmp.path());
    drop(s);
    let data = std::fs::read(active_segment(tmp.path())).unwrap();
    assert_eq!(u16::from_le_bytes([data[4], data[5]]), 2);
    // Each entry was appended right after a sync of everything before it: a lag of 0.
    for p in pos {
        let p = p as usize;
        assert_eq!(&data[p + 25..p + 28], &[0, 0, 0]);
    }
}

// ------------------------------------------------------------------------------------------
// Version-1 segments (written by the previous build: no sync marks).

/// A version-1 segment header (base index 1, base offset 0, prev term 0, generation 0).
fn v1_header() -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[0..4].copy_from_slice(b"VDLS");
    b[4..6].copy_from_slice(&1u16.to_le_bytes());
    b[8..16].copy_from_slice(&1u64.to_le_bytes());
    b[40..48].copy_from_slice(&1_700_000_000_000u64.to_le_bytes());
    let crc = crc32c_of(&b[..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    b
}

/// A version-1 frame of a Meta entry (term 1, no context, flags and reserved zero).
fn v1_frame(index: u64) -> Vec<u8> {
    let payload = format!("meta-entry-{index}").into_bytes();
    let mut f = Vec::new();
    f.extend_from_slice(&((48 + payload.len()) as u32).to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&index.to_le_bytes());
    f.extend_from_slice(&1u64.to_le_bytes());
    f.extend_from_slice(&[5, 0, 0, 0]); // kind Meta, flags 0, reserved 0
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&(-1i64).to_le_bytes());
    f.extend_from_slice(&payload);
    let crc = crc32c_of(&f[8..]);
    f[4..8].copy_from_slice(&crc.to_le_bytes());
    f
}

/// Writes a version-1 segment of frames 1..=n; returns the frame positions and lengths.
fn write_v1_segment(dir: &Path, n: u64) -> Vec<(u64, u64)> {
    let mut data = v1_header();
    let mut frames = Vec::new();
    for i in 1..=n {
        let f = v1_frame(i);
        frames.push((data.len() as u64, f.len() as u64));
        data.extend_from_slice(&f);
    }
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(format!("{:020}.log", 1)), &data).unwrap();
    frames
}

fn check_v1_entries(s: &LogStore, last: u64) {
    assert_eq!(s.last_index(), last);
    for e in s.entries(1, last + 1, u64::MAX).unwrap() {
        assert_eq!(&e.payload[..], format!("meta-entry-{}", e.index).as_bytes());
    }
}

#[test]
fn version_1_segment_with_a_torn_tail_recovers_as_before() {
    let tmp = tempfile::tempdir().unwrap();
    let frames = write_v1_segment(tmp.path(), 6);
    let (p6, len6) = frames[5];
    let path = active_segment(tmp.path());
    let data = std::fs::read(&path).unwrap();
    std::fs::write(&path, &data[..(p6 + len6 / 2) as usize]).unwrap();

    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.recovery_report().damage, None);
    assert_eq!(s.repair_marker(), None);
    assert_eq!(s.recovery_report().truncated_bytes, len6 / 2);
    check_v1_entries(&s, 5);
    // The version-1 segment is sealed as it is; appends go to a new version-2 segment.
    assert_eq!(s.segment_count(), 2);
    assert_eq!(segment_version(&path), 1);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        p6,
        "sealed at its last frame"
    );
    s.append(&[det_entry(6, 1)]).unwrap();
    s.sync().unwrap();
    drop(s);
    assert_eq!(segment_version(&active_segment(tmp.path())), 2);
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.last_index(), 6);
    assert_eq!(s.segment_count(), 2);
    assert_eq!(s.recovery_report().truncated_bytes, 0);
}

fn segment_version(path: &Path) -> u16 {
    let data = std::fs::read(path).unwrap();
    u16::from_le_bytes([data[4], data[5]])
}

#[test]
fn an_empty_version_1_segment_is_replaced_by_a_version_2_one() {
    let tmp = tempfile::tempdir().unwrap();
    write_v1_segment(tmp.path(), 0);
    let path = active_segment(tmp.path());
    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!((s.segment_count(), s.last_index()), (1, 0));
    assert_eq!(segment_version(&path), 2);
    append_one(&mut s, 1);
    s.sync().unwrap();
    drop(s);
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    check_entries(&s, 1);
    assert_eq!(active_segment(tmp.path()), path);
}

#[test]
fn a_truncation_into_a_version_1_segment_starts_a_version_2_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let frames = write_v1_segment(tmp.path(), 6);
    let v1_path = active_segment(tmp.path());
    let mut s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.segment_count(), 2, "sealed at open");
    s.truncate_suffix(4).unwrap();
    // The version-1 prefix is sealed again; the log goes on in a version-2 segment.
    assert_eq!(s.segment_count(), 2);
    assert_eq!(segment_version(&v1_path), 1);
    assert_eq!(std::fs::metadata(&v1_path).unwrap().len(), frames[3].0);
    let active = active_segment(tmp.path());
    assert_eq!(
        active.file_name().unwrap(),
        format!("{:020}.log", 4).as_str()
    );
    assert_eq!(segment_version(&active), 2);
    check_v1_entries(&s, 3);
    s.append(&[det_entry(4, 1)]).unwrap();
    s.sync().unwrap();
    drop(s);
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.last_index(), 4);
    assert_eq!(s.repair_marker(), None);
}

#[test]
fn version_1_segment_with_a_bad_frame_before_intact_ones_is_damage_as_before() {
    // Without sync marks nothing tells a torn write from damage: the old rule stands.
    let tmp = tempfile::tempdir().unwrap();
    let frames = write_v1_segment(tmp.path(), 6);
    let (p4, len4) = frames[3];
    corrupt_frame(tmp.path(), p4, len4);
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    let d = s.recovery_report().damage.clone().expect("damage reported");
    assert_eq!((d.first_bad_index, d.offset), (4, p4));
    assert_eq!(
        s.repair_marker(),
        Some(RepairMarker {
            first_bad_index: 4,
            lost_last_index: 6,
            lost_last_term: 1,
        })
    );
    check_v1_entries(&s, 3);
}

#[test]
fn version_1_segment_whole_opens_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    write_v1_segment(tmp.path(), 6);
    let path = active_segment(tmp.path());
    let data = std::fs::read(&path).unwrap();
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    assert_eq!(s.recovery_report().truncated_bytes, 0);
    assert_eq!(s.recovery_report().damage, None);
    check_v1_entries(&s, 6);
    drop(s);
    assert_eq!(std::fs::read(&path).unwrap(), data, "byte for byte");
    let s = LogStore::open(tmp.path(), cfg()).unwrap();
    check_v1_entries(&s, 6);
}
