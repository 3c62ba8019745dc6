//! Damage in a compacted log (issue 35): the scrubber finds a flipped bit in a segment a pass
//! rewrote, `repair` cuts the log before it, and the cut range is written again from a
//! healthy replica's entries (here a replica that never compacted: its copy of the range
//! holds every record), with the record counts Raft carries. Afterwards the replica holds
//! the healthy one's Raft log, every key's latest value at its offset, and a later pass,
//! past the delete horizon, never brings a deleted key back: the cut lowered the cleaner
//! checkpoint, so the range written again is mapped before any tombstone in it goes.

mod common;

use common::compaction_util::*;
use common::kv_codec::KvCodec;
use logstore::{CompactionPlan, LogStore};

/// Appends `from`'s entries after `to`'s last to `to` as a Raft follower takes them (with
/// the leader's record counts, so compacted entries keep their offsets).
fn replicate(from: &LogStore, to: &mut LogStore) {
    let first = to.last_index() + 1;
    let entries = from
        .entries(first, from.last_index() + 1, u64::MAX)
        .unwrap();
    // In small appends, as Raft sends them: segments roll between them.
    append_as_follower(to, &entries, 5);
}

/// A leader and a follower holding the same log (key "gone" written, then deleted, at the
/// very start; "stays" written once; then a workload), the model of what was produced, and
/// the plan under which the follower compacts keeping every tombstone (young ones).
struct DeletedKeyLog {
    leader_dir: tempfile::TempDir,
    follower_dir: tempfile::TempDir,
    leader: LogStore,
    follower: LogStore,
    m: Model,
    keep_tombstones: CompactionPlan,
}

fn deleted_key_log() -> DeletedKeyLog {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let mut leader = LogStore::open(leader_dir.path(), cfg()).unwrap();
    let mut follower = LogStore::open(follower_dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    produce(
        &mut leader,
        &mut m,
        &[vec![
            rec("gone", Some("old"), 100),
            rec("stays", Some("1"), 100),
        ]],
    );
    produce(&mut leader, &mut m, &[vec![rec("gone", None, 200)]]);
    workload(&mut leader, &mut m, 300, 9, 300);
    replicate(&leader, &mut follower);
    let keep_tombstones = CompactionPlan {
        now_ms: 10_000,
        delete_retention_ms: 1 << 40,
        ..plan(&follower)
    };
    DeletedKeyLog {
        leader_dir,
        follower_dir,
        leader,
        follower,
        m,
        keep_tombstones,
    }
}

/// Round `round` of new data on the leader, replicated, then a pass on the follower past
/// every tombstone's horizon: every key's latest value stays, and the old value of the
/// deleted key "gone" never comes back. Returns what the follower serves after the pass.
fn clean_past_every_horizon(
    leader: &mut LogStore,
    follower: &mut LogStore,
    m: &mut Model,
    round: i64,
) -> Read {
    workload(leader, m, 60, 9, 2_000 + round * 100);
    replicate(leader, follower);
    let drop_tombstones = CompactionPlan {
        now_ms: 1 << 40,
        delete_retention_ms: 0,
        ..plan(follower)
    };
    follower
        .compact(&drop_tombstones, &KvCodec, &mut no_throttle())
        .unwrap();
    let active_first = follower.segment_summaries().pop().unwrap().first_offset;
    let read = read_all(follower);
    check_latest(m, &read, active_first);
    assert!(
        read.iter()
            .all(|x| x.1.as_deref() != Some(b"gone".as_slice()) || x.2.is_none()),
        "round {round}: the deleted key's old value is back"
    );
    read
}

/// Scrubs every sealed segment of `s`: the first damaged index found, reported to the store.
fn scrub(s: &LogStore) -> Option<u64> {
    for base in s.sealed_segment_bases() {
        let t = s.scrub_target(base).unwrap().unwrap();
        if let Some((index, _, _)) = t.verify(|_| {}).damage {
            s.report_damage(index);
            return Some(index);
        }
    }
    None
}

#[test]
fn a_flip_in_a_compacted_segment_is_scrubbed_repaired_and_no_deleted_key_returns() {
    let DeletedKeyLog {
        leader_dir: _leader_dir,
        follower_dir,
        mut leader,
        mut follower,
        mut m,
        keep_tombstones,
    } = deleted_key_log();
    // Only the follower compacts; tombstones are young (kept).
    let first_seg = follower_dir.path().join(format!("{:020}.log", 1));
    let before = std::fs::read(&first_seg).unwrap();
    let r = follower
        .compact(&keep_tombstones, &KvCodec, &mut no_throttle())
        .unwrap();
    assert!(
        r.segments_rewritten > 0 && r.records_removed > 0,
        "{r:?} {:?}",
        follower.segment_summaries()
    );
    let compacted = std::fs::read(&first_seg).unwrap();
    assert_ne!(compacted, before, "the first segment was rewritten");
    assert_eq!(scrub(&follower), None, "rewritten segments verify");
    let active_first = follower.segment_summaries().pop().unwrap().first_offset;
    check_latest(&m, &read_all(&follower), active_first);

    // One flipped bit in the first entry of the compacted first segment.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&first_seg)
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, 64 + 40).unwrap();
        b[0] ^= 0x10;
        f.write_all_at(&b, 64 + 40).unwrap();
        f.sync_all().unwrap();
    }
    let suspect = scrub(&follower).expect("the scrubber finds the flip");
    assert_eq!(suspect, 1);
    assert_eq!(follower.damaged_from(), Some(1));
    let marker = follower.repair(suspect).unwrap().expect("a cut");
    assert_eq!(marker.first_bad_index, 1);
    assert_eq!(marker.lost_last_index, leader.last_index());
    assert_eq!(follower.last_index(), 0);

    // The range comes back from the leader, which never compacted.
    replicate(&leader, &mut follower);
    follower.finish_repair().unwrap();
    assert_eq!(follower.repair_marker(), None);
    assert_eq!(entry_shape(&follower), entry_shape(&leader));
    assert_eq!(read_all(&follower), read_all(&leader));
    check_latest(&m, &read_all(&follower), active_first);

    // New data, then a pass past every tombstone's horizon on the repaired replica (also
    // after a reopen): the old value of "gone" goes with (or before) its tombstone.
    for round in 0..2 {
        let read = clean_past_every_horizon(&mut leader, &mut follower, &mut m, round);
        assert_eq!(scrub(&follower), None);
        drop(follower);
        follower = LogStore::open(follower_dir.path(), cfg()).unwrap();
        assert_eq!(read_all(&follower), read);
    }
}

/// A flipped bit in the index field of a frame's header (not the first of its segment):
/// the scrubber finds it and `repair` cuts there, finding the cut from the entry before it
/// (reading the damaged header to locate the cut failed the repair, and the damage stayed).
#[test]
fn a_flip_in_a_frame_headers_index_is_cut_there() {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let mut leader = LogStore::open(leader_dir.path(), cfg()).unwrap();
    let mut follower = LogStore::open(follower_dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    workload(&mut leader, &mut m, 300, 9, 300);
    replicate(&leader, &mut follower);
    follower
        .compact(&plan(&follower), &KvCodec, &mut no_throttle())
        .unwrap();
    let base = follower.sealed_segment_bases()[1];
    let path = follower_dir.path().join(format!("{base:020}.log"));
    let data = std::fs::read(&path).unwrap();
    // The third frame: frames follow the 64-byte header, each `4 + frame_len` bytes.
    let mut pos = 64usize;
    for _ in 0..2 {
        pos += 4 + u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
    }
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        // Byte 5 of the little-endian index at @8: the index grows by 2^40.
        f.write_all_at(&[data[pos + 13] ^ 0x40], (pos + 13) as u64)
            .unwrap();
        f.sync_all().unwrap();
    }
    let suspect = scrub(&follower).expect("found");
    assert_eq!(suspect, base + 2);
    let marker = follower.repair(suspect).unwrap().expect("a cut");
    assert_eq!(marker.first_bad_index, base + 2);
    assert_eq!(follower.last_index(), base + 1);
    replicate(&leader, &mut follower);
    follower.finish_repair().unwrap();
    assert_eq!(entry_shape(&follower), entry_shape(&leader));
    let active_first = follower.segment_summaries().pop().unwrap().first_offset;
    check_latest(&m, &read_all(&follower), active_first);
    drop(follower);
    let follower = LogStore::open(follower_dir.path(), cfg()).unwrap();
    assert_eq!(entry_shape(&follower), entry_shape(&leader));
    assert_eq!(scrub(&follower), None);
}

/// Damage in a compacted sealed segment found at open instead of by the scrubber (its index
/// file lost in a crash, so recovery scans it): recovery cuts the log there, and must lower
/// the cleaner checkpoint as the runtime repair's cut does. Before the fix it did not: once
/// the range came back from the leader (which never compacted), the old checkpoint counted
/// it clean, and a pass past the delete horizon removed the tombstone of "gone" while the
/// old value, written again with it, stayed: the deleted key was back.
#[test]
fn damage_found_at_open_lowers_the_cleaner_checkpoint_and_no_deleted_key_returns() {
    let DeletedKeyLog {
        leader_dir: _leader_dir,
        follower_dir,
        mut leader,
        mut follower,
        mut m,
        keep_tombstones,
    } = deleted_key_log();
    // The follower compacts, keeping tombstones: its checkpoint lies past the first segments.
    let r = follower
        .compact(&keep_tombstones, &KvCodec, &mut no_throttle())
        .unwrap();
    assert!(r.records_removed > 0 && r.first_dirty_offset > 3, "{r:?}");

    // A flipped bit in the first entry of the compacted first segment, and a crash that lost
    // the segment's index file: the next open scans the segment and cuts the log before it.
    drop(follower);
    let first_seg = follower_dir.path().join(format!("{:020}.log", 1));
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&first_seg)
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, 64 + 40).unwrap();
        b[0] ^= 0x10;
        f.write_all_at(&b, 64 + 40).unwrap();
        f.sync_all().unwrap();
    }
    std::fs::remove_file(follower_dir.path().join(format!("{:020}.index", 1))).unwrap();
    let mut follower = LogStore::open(follower_dir.path(), cfg()).unwrap();
    assert_eq!(follower.last_index(), 0, "cut before the damaged entry");
    assert_eq!(follower.repair_marker().map(|m| m.first_bad_index), Some(1));

    // The range comes back from the leader; then passes past every tombstone's horizon.
    replicate(&leader, &mut follower);
    follower.finish_repair().unwrap();
    for round in 0..2 {
        clean_past_every_horizon(&mut leader, &mut follower, &mut m, round);
    }
}
