//! Log compaction (`LogStore::compact`): the latest record of every key stays at its offset,
//! reads by offset and by time work across the gaps, the Raft log keeps every index and
//! term, reopening works, the active segment, the clean limit and the compaction lag are
//! respected, tombstones go only after the delete horizon and below the tombstone limit, and
//! a restart resumes from the checkpoint. Records use the tiny format of `common/kv_codec.rs`.

mod common;

use std::collections::BTreeMap;

use common::compaction_util::*;
use common::kv_codec::{records_of, KvCodec};
use logstore::{
    CompactionPlan, EntryKind, LogStore, LogStoreError, NewEntry, RecordCompactor, RecordView,
    RetainOutcome,
};

#[test]
fn the_latest_value_of_every_key_stays_at_its_offset_and_the_raft_log_stays_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    workload(&mut s, &mut m, 400, 23, 1_000);
    assert!(s.segment_count() > 5);
    let shape = entry_shape(&s);
    let active = active_bytes(&s);
    let active_first = s.segment_summaries().pop().unwrap().first_offset;
    let before = read_all(&s);
    let total_before: u64 = s.segment_summaries().iter().map(|x| x.bytes).sum();

    let r = s.compact(&plan(&s), &KvCodec, &mut no_throttle()).unwrap();
    assert!(r.segments_rewritten > 0 && r.records_removed > 0, "{r:?}");
    assert_eq!(
        r.first_dirty_offset, active_first,
        "the map covered every sealed segment"
    );
    let after = read_all(&s);
    assert_eq!(before.len() - after.len(), r.records_removed as usize);
    check_latest(&m, &after, active_first);
    let total_after: u64 = s.segment_summaries().iter().map(|x| x.bytes).sum();
    assert!(total_after < total_before, "{total_after} < {total_before}");
    // Only the latest record of a key below the active segment (the map's end) is left in
    // the compacted part.
    let mut latest_mapped = BTreeMap::new();
    for (o, (k, _, _)) in m.all.range(..active_first) {
        if let Some(k) = k {
            latest_mapped.insert(k.clone(), *o);
        }
    }
    let mut seen = std::collections::HashSet::new();
    for (o, k, _) in after.iter().filter(|x| x.0 < active_first) {
        assert_eq!(latest_mapped[k.as_ref().unwrap()], *o);
        assert!(seen.insert(k.clone()));
    }
    assert_eq!(seen.len(), latest_mapped.len());

    // The Raft log: every index, term, kind, context and offset range as before; some
    // entries lost all their batches and are empty.
    assert_eq!(entry_shape(&s), shape);
    let entries = s
        .entries(s.first_index(), s.last_index() + 1, u64::MAX)
        .unwrap();
    assert!(entries
        .iter()
        .any(|e| e.record_count > 0 && e.payload.is_empty()));
    for i in s.first_index()..=s.last_index() {
        assert_eq!(s.term(i).unwrap(), shape[(i - s.first_index()) as usize].1);
        assert_eq!(
            s.next_offset_after_index(i).unwrap(),
            shape[(i - s.first_index()) as usize].3
                + u64::from(shape[(i - s.first_index()) as usize].4)
        );
    }
    assert!(
        active_bytes(&s) == active,
        "the active segment is not touched"
    );

    // Reads from every offset, gaps included: the first record returned at or after `from`
    // is the first one kept at or after it.
    let check_reads = |s: &LogStore| {
        for from in s.log_start_offset()..s.next_offset() {
            let r = s.read_records(from, 1, s.next_offset()).unwrap();
            let first = records_of(&r.chunks).into_iter().find(|x| x.0 >= from);
            let want = after.iter().find(|x| x.0 >= from).cloned();
            // A control batch alone has no data records; it is still returned.
            if r.chunks.is_empty() {
                assert_eq!(want, None, "nothing returned at {from}");
            } else if let Some(first) = first {
                assert_eq!(Some(first), want, "read at {from}");
            }
        }
        // By time: the first stored batch whose max timestamp reaches `ts`.
        for ts in (900..1_500).step_by(7) {
            let got = s.offset_for_timestamp(ts).unwrap();
            let want = batches_by_scan(s)
                .into_iter()
                .find(|(_, max_ts)| *max_ts >= ts)
                .map(|(base, _)| base);
            assert_eq!(got, want, "timestamp {ts}");
        }
    };
    check_reads(&s);

    // The scrubber verifies the rewritten segments (new frame CRCs) whole.
    for base in s.sealed_segment_bases() {
        let t = s.scrub_target(base).unwrap().unwrap();
        let out = t.verify(|_| {});
        assert_eq!(out.damage, None, "segment {base}");
        assert_eq!(out.bytes_verified, t.len_bytes());
    }

    // Reopened (index files kept), and with every index file rebuilt.
    drop(s);
    let s = LogStore::open(dir.path(), cfg()).unwrap();
    assert_eq!(s.recovery_report().rebuilt_indexes, 0);
    assert_eq!(read_all(&s), after);
    assert_eq!(entry_shape(&s), shape);
    check_reads(&s);
    drop(s);
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "index") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let mut s = LogStore::open(dir.path(), cfg()).unwrap();
    assert!(s.recovery_report().rebuilt_indexes > 0);
    assert_eq!(read_all(&s), after);
    assert_eq!(entry_shape(&s), shape);
    check_reads(&s);

    // A second pass with nothing new to map changes nothing.
    let files = segment_files(dir.path());
    let r2 = s.compact(&plan(&s), &KvCodec, &mut no_throttle()).unwrap();
    assert_eq!(r2.segments_rewritten, 0);
    assert!(segment_files(dir.path()) == files);
}

/// (base offset, max timestamp) of every stored batch, by a sequential read.
fn batches_by_scan(s: &LogStore) -> Vec<(u64, i64)> {
    let mut out = Vec::new();
    let mut from = s.log_start_offset();
    loop {
        let r = s.read_records(from, 1 << 20, s.next_offset()).unwrap();
        if r.chunks.is_empty() {
            return out;
        }
        for c in &r.chunks {
            out.extend(common::batches_of(c).into_iter().map(|b| (b.0, b.2)));
        }
        from = r.next_offset;
    }
}

#[test]
fn the_clean_limit_and_the_compaction_lag_are_respected() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    workload(&mut s, &mut m, 300, 5, 1_000);
    let segs = s.segment_summaries();
    assert!(segs.len() > 6);
    // The limit inside the fourth segment: the first three may be cleaned.
    let limit = segs[3].base_index + 1;
    let files = segment_files(dir.path());
    let p = CompactionPlan {
        clean_limit: limit,
        ..plan(&s)
    };
    assert_eq!(
        s.cleanable_bytes(&p),
        segs[..3].iter().map(|x| x.bytes).sum::<u64>()
    );
    let r = s.compact(&p, &KvCodec, &mut no_throttle()).unwrap();
    assert_eq!(r.first_dirty_offset, segs[3].first_offset);
    assert!(r.segments_rewritten > 0);
    let now = segment_files(dir.path());
    for seg in &segs[3..] {
        let name = format!("{:020}.log", seg.base_index);
        assert!(
            now[&name] == files[&name],
            "{name} is at or above the clean limit"
        );
    }
    check_latest(&m, &read_all(&s), segs[3].first_offset);
    let stats = s.cleaner_stats(&p);
    assert_eq!(stats.cleanable_bytes, 0);
    assert_eq!(stats.dirty_ratio(), 0.0);
    assert_eq!(stats.last_clean_ms, Some(p.now_ms));

    // The lag: records of the sixth segment on are "younger" than the lag allows.
    let young_from = s.segment_summaries()[5].base_index;
    let youngest_old = s
        .entries(1, young_from, u64::MAX)
        .unwrap()
        .iter()
        .filter_map(|e| {
            m.all
                .range(e.first_offset..e.next_offset())
                .map(|x| x.1 .2)
                .max()
        })
        .max()
        .unwrap();
    let p = CompactionPlan {
        now_ms: youngest_old + 100,
        min_compaction_lag_ms: 100,
        ..plan(&s)
    };
    let before = segment_files(dir.path());
    let r = s.compact(&p, &KvCodec, &mut no_throttle()).unwrap();
    assert_eq!(r.first_dirty_offset, s.segment_summaries()[5].first_offset);
    let after = segment_files(dir.path());
    for seg in &s.segment_summaries()[5..] {
        let name = format!("{:020}.log", seg.base_index);
        assert!(
            after[&name] == before[&name],
            "{name} holds records younger than the lag"
        );
    }
    check_latest(&m, &read_all(&s), s.segment_summaries()[5].first_offset);
}

#[test]
fn tombstones_go_only_after_the_delete_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    produce(
        &mut s,
        &mut m,
        &[vec![
            rec("gone", Some("old"), 100),
            rec("stays", Some("1"), 100),
        ]],
    );
    produce(&mut s, &mut m, &[vec![rec("gone", None, 200)]]);
    let tomb = s.next_offset() - 1;
    workload(&mut s, &mut m, 120, 7, 300);
    let p = CompactionPlan {
        now_ms: 10_000,
        delete_retention_ms: 5_000,
        ..plan(&s)
    };
    s.compact(&p, &KvCodec, &mut no_throttle()).unwrap();
    let read = read_all(&s);
    assert!(read
        .iter()
        .all(|x| x.1.as_deref() != Some(b"gone".as_slice()) || x.0 == tomb));
    assert!(
        read.iter().any(|x| x.0 == tomb && x.2.is_none()),
        "tombstone kept before its horizon"
    );
    assert!(read
        .iter()
        .any(|x| x.1.as_deref() == Some(b"stays".as_slice())));

    // New dirty data, the tombstone below the first dirty offset, but younger than the
    // horizon: it stays.
    workload(&mut s, &mut m, 120, 7, 400);
    let p = CompactionPlan {
        now_ms: 10_000,
        delete_retention_ms: 9_850,
        ..plan(&s)
    };
    let r = s.compact(&p, &KvCodec, &mut no_throttle()).unwrap();
    assert!(r.segments_rewritten > 0);
    assert!(
        read_all(&s).iter().any(|x| x.0 == tomb && x.2.is_none()),
        "tombstone kept"
    );

    // New dirty data and a clock past the horizon: the tombstone (below the first dirty
    // offset, kept by the previous pass) goes.
    workload(&mut s, &mut m, 120, 7, 500);
    let p = CompactionPlan {
        now_ms: 10_000,
        delete_retention_ms: 9_000,
        ..plan(&s)
    };
    s.compact(&p, &KvCodec, &mut no_throttle()).unwrap();
    let read = read_all(&s);
    assert!(
        read.iter()
            .all(|x| x.1.as_deref() != Some(b"gone".as_slice())),
        "tombstone removed"
    );
    assert!(read
        .iter()
        .any(|x| x.1.as_deref() == Some(b"stays".as_slice())));
}

/// `tombstone_limit` (vdl: 1 + the highest index every replica holds, on the leader; 0 on
/// a follower): a tombstone whose entry is at or above it stays, however old, while the
/// values it supersedes and every other superseded record below the clean limit go; one
/// below it goes by the time rule.
#[test]
fn a_tombstone_at_or_above_the_tombstone_limit_stays_while_superseded_values_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    produce(
        &mut s,
        &mut m,
        &[vec![
            rec("early", Some("e0"), 100),
            rec("late", Some("l0"), 100),
            rec("stays", Some("1"), 100),
        ]],
    );
    produce(&mut s, &mut m, &[vec![rec("early", None, 200)]]);
    let early = (s.last_index(), s.next_offset() - 1);
    workload(&mut s, &mut m, 60, 7, 250);
    produce(&mut s, &mut m, &[vec![rec("late", None, 300)]]);
    let late = (s.last_index(), s.next_offset() - 1);
    workload(&mut s, &mut m, 120, 7, 350);
    let tombstones = |s: &LogStore| -> Vec<u64> {
        read_all(s)
            .iter()
            .filter(|x| x.2.is_none() && x.1.is_some())
            .map(|x| x.0)
            .filter(|o| *o == early.1 || *o == late.1)
            .collect()
    };
    let values_of = |s: &LogStore, key: &str| -> usize {
        read_all(s)
            .iter()
            .filter(|x| x.1.as_deref() == Some(key.as_bytes()) && x.2.is_some())
            .count()
    };
    // The first pass keeps both tombstones (the latest of their keys, in the dirty part) and
    // removes the values they supersede.
    s.compact(&plan(&s), &KvCodec, &mut no_throttle()).unwrap();
    assert_eq!(tombstones(&s), vec![early.1, late.1]);
    assert_eq!((values_of(&s, "early"), values_of(&s, "late")), (0, 0));

    // A follower's pass (limit 0), past every horizon: the tombstones stay, the records the
    // new data superseded go.
    workload(&mut s, &mut m, 120, 7, 500);
    let dirty = read_all(&s).len();
    let past_every_horizon = |s: &LogStore, limit| CompactionPlan {
        now_ms: 1 << 40,
        delete_retention_ms: 0,
        tombstone_limit: limit,
        ..plan(s)
    };
    let p = past_every_horizon(&s, 0);
    let r = s.compact(&p, &KvCodec, &mut no_throttle()).unwrap();
    assert!(r.records_removed > 0, "superseded records go: {r:?}");
    assert_eq!(read_all(&s).len(), dirty - r.records_removed as usize);
    assert_eq!(
        tombstones(&s),
        vec![early.1, late.1],
        "a follower keeps them"
    );

    // The limit at the second tombstone's entry: the first (below it) goes, the second (at
    // it) stays; superseded records go as before.
    workload(&mut s, &mut m, 120, 7, 700);
    let p = past_every_horizon(&s, late.0);
    let r = s.compact(&p, &KvCodec, &mut no_throttle()).unwrap();
    assert!(r.records_removed > 1, "{r:?}");
    assert_eq!(tombstones(&s), vec![late.1]);
    assert_eq!((values_of(&s, "early"), values_of(&s, "late")), (0, 0));

    // Once the limit passes its entry, the second goes too; "stays" kept its value throughout.
    workload(&mut s, &mut m, 120, 7, 900);
    let p = past_every_horizon(&s, late.0 + 1);
    s.compact(&p, &KvCodec, &mut no_throttle()).unwrap();
    assert_eq!(tombstones(&s), Vec::<u64>::new());
    assert_eq!(values_of(&s, "stays"), 1);
    let active_first = s.segment_summaries().pop().unwrap().first_offset;
    check_latest(&m, &read_all(&s), active_first);
}

#[test]
fn a_small_key_map_cleans_in_several_passes_and_a_restart_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    workload(&mut s, &mut m, 500, 40, 1_000);
    let end = s.segment_summaries().pop().unwrap().first_offset;
    let p = CompactionPlan {
        key_map_bytes: 24 * 12, // 10 keys
        ..plan(&s)
    };
    let mut firsts = vec![s.cleaner_stats(&p).first_dirty_offset];
    assert!(s.dirty_ratio(&p) > 0.99);
    while *firsts.last().unwrap() < end {
        let r = s.compact(&p, &KvCodec, &mut no_throttle()).unwrap();
        assert!(
            r.first_dirty_offset > *firsts.last().unwrap(),
            "progress: {r:?}"
        );
        firsts.push(r.first_dirty_offset);
        // A restart resumes from the checkpoint.
        drop(s);
        s = LogStore::open(dir.path(), cfg()).unwrap();
        assert_eq!(s.cleaner_stats(&p).first_dirty_offset, r.first_dirty_offset);
        assert!(firsts.len() < 100);
    }
    assert!(firsts.len() > 3, "several passes: {firsts:?}");
    assert_eq!(s.dirty_ratio(&p), 0.0);
    // Several passes leave what one pass with a large map leaves.
    check_latest(&m, &read_all(&s), end);
    let mut seen = std::collections::HashSet::new();
    for (_, k, _) in read_all(&s).iter().filter(|x| x.0 < end) {
        assert!(
            seen.insert(k.clone()),
            "one record per key in the cleaned part"
        );
    }
    assert_eq!(seen.len(), 40);
}

#[test]
fn a_pass_prepared_before_a_snapshot_installs_nothing_and_leaves_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    workload(&mut s, &mut m, 200, 5, 1_000);
    let prepared = s
        .prepare_compaction(&plan(&s), &KvCodec, &mut no_throttle())
        .unwrap();
    assert!(prepared.report().records_removed > 0);
    let tmp_count = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .count()
    };
    assert!(tmp_count() > 0);
    let (last, term, next) = (s.last_index(), s.last_term(), s.next_offset());
    s.install_snapshot(last + 10, term, next + 5).unwrap();
    let r = s.install_compaction(prepared).unwrap();
    assert_eq!(r.segments_rewritten, 0);
    assert_eq!(tmp_count(), 0);
    // Dropped without installing: its files go too.
    workload(&mut s, &mut m, 200, 5, 2_000);
    let prepared = s
        .prepare_compaction(&plan(&s), &KvCodec, &mut no_throttle())
        .unwrap();
    assert!(tmp_count() > 0);
    drop(prepared);
    assert_eq!(tmp_count(), 0);
}

struct FailingCodec;

impl RecordCompactor for FailingCodec {
    fn visit(&self, batch: &[u8], f: &mut dyn FnMut(RecordView<'_>)) -> Result<(), String> {
        KvCodec.visit(batch, f)
    }
    fn producer_id(&self, batch: &[u8]) -> Option<i64> {
        KvCodec.producer_id(batch)
    }
    fn retain(
        &self,
        _batch: &[u8],
        _keep: &mut dyn FnMut(RecordView<'_>) -> bool,
        _horizon: Option<i64>,
        _producer_last: bool,
    ) -> Result<RetainOutcome, String> {
        Err("cannot decompress".into())
    }
}

#[test]
fn a_codec_error_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    workload(&mut s, &mut m, 200, 5, 1_000);
    let files = segment_files(dir.path());
    let e = s
        .compact(&plan(&s), &FailingCodec, &mut no_throttle())
        .unwrap_err();
    assert!(matches!(e, LogStoreError::Compaction { .. }), "{e}");
    assert!(segment_files(dir.path()) == files);
    assert_eq!(s.cleaner_stats(&plan(&s)).first_dirty_offset, 0);
}

#[test]
fn the_throttle_sees_every_byte_read_and_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    workload(&mut s, &mut m, 300, 5, 1_000);
    let mut total = 0u64;
    let r = s.compact(&plan(&s), &KvCodec, &mut |n| total += n).unwrap();
    assert!(r.bytes_written > 0);
    assert!(
        total >= r.bytes_written + r.bytes_read / 2,
        "{total} vs {r:?}"
    );
}

#[test]
fn a_follower_catches_up_from_a_compacted_leader_in_band() {
    let leader_dir = tempfile::tempdir().unwrap();
    let mut leader = LogStore::open(leader_dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    workload(&mut leader, &mut m, 300, 11, 1_000);
    let active_first = leader.segment_summaries().pop().unwrap().first_offset;
    leader
        .compact(&plan(&leader), &KvCodec, &mut no_throttle())
        .unwrap();
    let entries = leader
        .entries(1, leader.last_index() + 1, u64::MAX)
        .unwrap();
    assert!(entries
        .iter()
        .any(|e| e.record_count > 0 && e.payload.is_empty()));

    // The follower gets the entries as Raft sends them, with the leader's record counts.
    let follower_dir = tempfile::tempdir().unwrap();
    let mut follower = LogStore::open(follower_dir.path(), cfg()).unwrap();
    append_as_follower(&mut follower, &entries, 7);
    assert_eq!(entry_shape(&follower), entry_shape(&leader));
    assert_eq!(read_all(&follower), read_all(&leader));
    check_latest(&m, &read_all(&follower), active_first);
    drop(follower);
    let follower = LogStore::open(follower_dir.path(), cfg()).unwrap();
    assert_eq!(entry_shape(&follower), entry_shape(&leader));
    assert_eq!(read_all(&follower), read_all(&leader));

    // A count that does not hold the batches, a zero count and a count for a Noop are
    // refused, nothing appended.
    let other_dir = tempfile::tempdir().unwrap();
    let mut other = LogStore::open(other_dir.path(), cfg()).unwrap();
    let gap = entries
        .iter()
        .find(|e| e.record_count > 1 && !e.payload.is_empty() && e.first_offset > 0)
        .unwrap();
    append_as_follower(&mut other, &entries[..(gap.index - 1) as usize], usize::MAX);
    let g = new_entry(gap);
    let last = other.last_index();
    let last_batch_end = common::batches_of(&gap.payload).last().unwrap().1 + 1;
    let too_few = (last_batch_end - gap.first_offset - 1) as u32;
    for bad in [Some(too_few), Some(0)] {
        let e = other.append_unsynced_with_counts(std::slice::from_ref(&g), &[bad]);
        assert!(
            matches!(e, Err(LogStoreError::InvalidRecords { .. })),
            "{bad:?}: {e:?}"
        );
        assert_eq!(other.last_index(), last);
    }
    let noop = NewEntry {
        index: last + 1,
        term: gap.term,
        kind: EntryKind::Noop,
        payload: bytes::Bytes::new(),
        context: bytes::Bytes::new(),
    };
    assert!(other
        .append_unsynced_with_counts(&[noop], &[Some(1)])
        .is_err());
    other
        .append_unsynced_with_counts(std::slice::from_ref(&g), &[Some(gap.record_count)])
        .unwrap();
    assert_eq!(other.next_offset(), gap.next_offset());
}

#[test]
fn reads_see_the_new_files_with_one_open_segment_for_the_node() {
    // Maps and indexes of sealed segments leave the open set and are loaded again from the
    // rewritten files (and their new index files).
    let dir = tempfile::tempdir().unwrap();
    let resources = logstore::StoreResources::new(1 << 20, 1);
    let mut s = LogStore::open_shared(dir.path(), cfg(), &resources).unwrap();
    let mut m = Model::default();
    workload(&mut s, &mut m, 300, 13, 1_000);
    let active_first = s.segment_summaries().pop().unwrap().first_offset;
    let shape = entry_shape(&s);
    // Every segment read once, so the set held (and evicted) maps of the old files.
    let before = read_all(&s);
    s.compact(&plan(&s), &KvCodec, &mut no_throttle()).unwrap();
    for _ in 0..2 {
        let after = read_all(&s);
        assert!(after.len() < before.len());
        check_latest(&m, &after, active_first);
        assert_eq!(entry_shape(&s), shape);
        for ts in (1_000..1_300).step_by(13) {
            s.offset_for_timestamp(ts).unwrap();
        }
    }
    assert!(resources.open_segments.open_now() <= 1);
}

/// One step of the property test.
#[derive(Debug, Clone)]
enum Op {
    /// An entry of records: (key number, tombstone?) each.
    Produce(Vec<(u8, bool)>),
    /// A Noop entry.
    Noop,
    /// A pass: clean limit as a share of the log (0..=100), map keys, tombstone retention.
    Compact(u8, u8, bool),
    /// Drop and reopen the store.
    Reopen,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        6 => proptest::collection::vec((0u8..8, proptest::bool::weighted(0.2)), 1..6)
            .prop_map(Op::Produce),
        1 => Just(Op::Noop),
        2 => (0u8..=100, 1u8..12, any::<bool>()).prop_map(|(l, k, t)| Op::Compact(l, k, t)),
        1 => Just(Op::Reopen),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Random produce / tombstone / compact / reopen sequences against the model: every
    /// record read is as produced, the latest value of every key stays at its offset, no
    /// deleted key comes back, nothing at or above the clean limit changes, and the Raft
    /// log keeps its shape.
    #[test]
    fn random_sequences_keep_the_latest_value_of_every_key(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let small = small_cfg();
        let mut s = LogStore::open(dir.path(), small.clone()).unwrap();
        let mut m = Model::default();
        let mut ts = 1_000i64;
        for op in ops {
            match op {
                Op::Produce(recs) => {
                    let batch: Vec<_> = recs
                        .iter()
                        .map(|(k, tomb)| {
                            ts += 1;
                            let value = format!("v{ts}");
                            rec(&format!("k{k}"), (!tomb).then_some(value.as_str()), ts)
                        })
                        .collect();
                    produce(&mut s, &mut m, &[batch]);
                }
                Op::Noop => append_other(&mut s, logstore::EntryKind::Noop, Vec::new()),
                Op::Compact(limit, keys, drop_tombstones) => {
                    let shape = entry_shape(&s);
                    let clean_limit = 1 + s.last_index() * u64::from(limit) / 100;
                    let p = CompactionPlan {
                        clean_limit,
                        now_ms: ts + 1,
                        min_compaction_lag_ms: 0,
                        delete_retention_ms: if drop_tombstones { 0 } else { 1 << 40 },
                        tombstone_limit: u64::MAX,
                        key_map_bytes: 24 * (usize::from(keys) + 2),
                    };
                    let above: Vec<_> = s
                        .segment_summaries()
                        .into_iter()
                        .filter(|x| x.last_index >= clean_limit || x.active)
                        .map(|x| std::fs::read(dir.path().join(format!("{:020}.log", x.base_index))).unwrap())
                        .collect();
                    s.compact(&p, &KvCodec, &mut no_throttle()).unwrap();
                    let above_after: Vec<_> = s
                        .segment_summaries()
                        .into_iter()
                        .filter(|x| x.last_index >= clean_limit || x.active)
                        .map(|x| std::fs::read(dir.path().join(format!("{:020}.log", x.base_index))).unwrap())
                        .collect();
                    proptest::prop_assert!(above == above_after, "a segment at or above the clean limit changed");
                    proptest::prop_assert_eq!(entry_shape(&s), shape);
                }
                Op::Reopen => {
                    drop(s);
                    s = LogStore::open(dir.path(), small.clone()).unwrap();
                }
            }
            let active_first = s.segment_summaries().pop().unwrap().first_offset;
            check_latest(&m, &read_all(&s), active_first);
        }
    }
}

/// A store config with the smallest segments (a few entries each) for the property test.
fn small_cfg() -> logstore::StoreConfig {
    logstore::StoreConfig {
        segment_bytes: 1024,
        ..cfg()
    }
}

/// `segment.ms`: the active segment rolls once it is old enough and holds an entry, so a
/// quiet partition's records become cleanable; an empty or young active segment stays.
#[test]
fn an_old_active_segment_rolls_and_becomes_cleanable() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(
        dir.path(),
        logstore::StoreConfig {
            segment_bytes: 1 << 20,
            ..cfg()
        },
    )
    .unwrap();
    let hour = std::time::Duration::from_secs(3600);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // Empty: nothing to roll, however old.
    assert!(!s.roll_if_older_than(hour, now + 2 * 3_600_000).unwrap());
    let mut m = Model::default();
    workload(&mut s, &mut m, 20, 3, 1_000);
    assert_eq!(s.segment_count(), 1);
    let last = s.last_index();
    // Young: stays.
    assert!(!s.roll_if_older_than(hour, now).unwrap());
    assert_eq!(s.cleanable_bytes(&plan(&s)), 0, "all in the active segment");
    // Old: rolls, everything is sealed and cleanable, and the log is unchanged.
    assert!(s.roll_if_older_than(hour, now + 2 * 3_600_000).unwrap());
    assert_eq!(s.segment_count(), 2);
    assert_eq!(s.last_index(), last);
    assert!(s.cleanable_bytes(&plan(&s)) > 0);
    let r = s.compact(&plan(&s), &KvCodec, &mut no_throttle()).unwrap();
    assert!(r.records_removed > 0);
    check_latest(&m, &read_all(&s), s.next_offset());
    // The new active segment is empty: no further roll.
    assert!(!s.roll_if_older_than(hour, now + 4 * 3_600_000).unwrap());
    assert_eq!(s.segment_count(), 2);
}

/// The long part of a pass runs with no borrow of the store (`compaction_source`, then
/// `CompactionSource::prepare`): appends and rolls meanwhile are kept, the pass installs.
#[test]
fn a_pass_prepared_without_the_store_installs_while_appends_went_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(dir.path(), cfg()).unwrap();
    let mut m = Model::default();
    workload(&mut s, &mut m, 200, 7, 1_000);
    let p = plan(&s);
    let source = s.compaction_source(&p).unwrap();
    // The store goes on: more records, more segments.
    workload(&mut s, &mut m, 100, 7, 5_000);
    let prepared = source.prepare(&p, &KvCodec, &mut no_throttle()).unwrap();
    let r = s.install_compaction(prepared).unwrap();
    assert!(r.records_removed > 0 && r.segments_rewritten > 0, "{r:?}");
    // Everything appended after the source was taken is there, as produced.
    check_latest(&m, &read_all(&s), r.first_dirty_offset);
}

/// A key map kept across passes (`CompactionSource::prepare_with_map`, as the server's cleaner
/// keeps one) gives what fresh maps give, whatever it held: small-map passes over one store,
/// with the map used by a pass over another store in between (at the same budget: emptied in
/// place; at another: replaced), leave the same records and reports as fresh maps on a twin.
#[test]
fn a_key_map_reused_across_passes_and_stores_gives_what_fresh_maps_give() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut fresh = LogStore::open(dirs[0].path(), cfg()).unwrap();
    let mut reused = LogStore::open(dirs[1].path(), cfg()).unwrap();
    let mut other = LogStore::open(dirs[2].path(), cfg()).unwrap();
    let (mut m, mut m2, mut m3) = (Model::default(), Model::default(), Model::default());
    workload(&mut fresh, &mut m, 400, 40, 1_000);
    workload(&mut reused, &mut m2, 400, 40, 1_000);
    workload(&mut other, &mut m3, 300, 17, 9_000);
    let small = |s: &LogStore| CompactionPlan {
        key_map_bytes: 15 * logstore::KEY_MAP_SLOT_BYTES,
        ..plan(s)
    };
    let mut map = logstore::KeyMap::with_budget(1 << 20);
    let mut removed = 0;
    for i in 0..6 {
        let p = if i % 2 == 0 {
            small(&other)
        } else {
            plan(&other)
        };
        let source = other.compaction_source(&p).unwrap();
        let prepared = source
            .prepare_with_map(&p, &KvCodec, &mut map, &mut no_throttle())
            .unwrap();
        other.install_compaction(prepared).unwrap();
        workload(&mut other, &mut m3, 30, 17, 20_000 + i * 100);

        let a = fresh
            .compact(&small(&fresh), &KvCodec, &mut no_throttle())
            .unwrap();
        let p = small(&reused);
        let prepared = reused
            .compaction_source(&p)
            .unwrap()
            .prepare_with_map(&p, &KvCodec, &mut map, &mut no_throttle())
            .unwrap();
        let b = reused.install_compaction(prepared).unwrap();
        assert_eq!(a, b, "pass {i}");
        assert_eq!(read_all(&fresh), read_all(&reused), "pass {i}");
        removed += b.records_removed;
    }
    assert!(removed > 0);
    let first_dirty = reused.cleaner_stats(&small(&reused)).first_dirty_offset;
    check_latest(&m2, &read_all(&reused), first_dirty);
    let first_dirty = other.cleaner_stats(&plan(&other)).first_dirty_offset;
    check_latest(&m3, &read_all(&other), first_dirty);
}
