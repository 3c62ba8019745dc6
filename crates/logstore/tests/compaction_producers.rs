//! Kafka's rule for idempotent producers under compaction: a pass keeps only the last batch
//! of each producer id it maps (as an empty header when it loses every record, so producer
//! state rebuilt from the log keeps the producer's last sequence); the producer's earlier
//! batches that lose every record go whole. Records use `common/kv_codec.rs`.

mod common;

use bytes::Bytes;
use common::compaction_util::*;
use common::kv_codec::{kv_producer_batch, parse, producer_of, KvCodec, Rec};
use logstore::{EntryKind, LogStore, NewEntry};

/// Appends one Records entry holding one batch of `producer` (-1: none).
fn produce_as(s: &mut LogStore, producer: i64, recs: &[Rec]) -> u64 {
    let base = s.next_offset();
    let index = s.last_index() + 1;
    s.append(&[NewEntry {
        index,
        term: 1,
        kind: EntryKind::Records,
        payload: Bytes::from(kv_producer_batch(producer, recs)),
        context: Bytes::new(),
    }])
    .unwrap();
    base
}

/// Every batch stored below offset `below`: (producer id, base offset, records kept).
fn batches_below(s: &LogStore, below: u64) -> Vec<(i64, u64, usize)> {
    let entries = s
        .entries(s.first_index(), s.last_index() + 1, u64::MAX)
        .unwrap();
    let mut out = Vec::new();
    for e in entries.iter().filter(|e| e.kind == EntryKind::Records) {
        let p = &e.payload;
        let mut pos = 0;
        while pos < p.len() {
            let len = 12 + i32::from_be_bytes(p[pos + 8..pos + 12].try_into().unwrap()) as usize;
            let b = &p[pos..pos + len];
            let (base, _, control, recs) = parse(b).unwrap();
            if !control && base < below {
                out.push((producer_of(b), base, recs.len()));
            }
            pos += len;
        }
    }
    out
}

/// Fills sealed segments with batches of no producer over one key, so what came before is
/// sealed (and these batches, all but the newest, lose their record).
fn fill(s: &mut LogStore, n: usize, ts: i64) {
    for i in 0..n {
        produce_as(s, -1, &[rec("filler", Some(&format!("f{i}")), ts)]);
    }
}

#[test]
fn only_the_last_batch_of_each_producer_stays_when_its_records_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = LogStore::open(dir.path(), cfg()).unwrap();
    // Producer 7 overwrites key "a" 20 times; producer 9 writes "b" once, overwritten by
    // producer 7 at the end; producer 11 writes "c" and "d" twice each, its last batch keeps
    // "d"; a batch without a producer overwrites producer 7's last "a".
    let mut p7 = Vec::new();
    let mut p11 = Vec::new();
    for i in 0..20 {
        p7.push(produce_as(
            &mut s,
            7,
            &[rec("a", Some(&format!("a{i}")), 1_000)],
        ));
        if i == 3 {
            produce_as(&mut s, 9, &[rec("b", Some("b0"), 1_000)]);
        }
        if i == 5 || i == 8 {
            p11.push(produce_as(&mut s, 11, &[rec("c", Some("c"), 1_000)]));
            p11.push(produce_as(&mut s, 11, &[rec("d", Some("d"), 1_000)]));
        }
    }
    let p7_last = produce_as(&mut s, 7, &[rec("b", Some("b1"), 1_000)]);
    let plain = produce_as(&mut s, -1, &[rec("a", Some("plain"), 1_000)]);
    fill(&mut s, 60, 1_000);
    let active_first = s.segment_summaries().pop().unwrap().first_offset;
    assert!(p7_last < active_first, "everything produced is sealed");

    let r = s.compact(&plan(&s), &KvCodec, &mut no_throttle()).unwrap();
    assert_eq!(r.first_dirty_offset, active_first);
    let kept = batches_below(&s, active_first);
    let of = |pid: i64| -> Vec<(u64, usize)> {
        kept.iter()
            .filter(|b| b.0 == pid)
            .map(|b| (b.1, b.2))
            .collect()
    };
    // Producer 7: its 20 batches of "a" lost their record and go whole; its last batch keeps
    // the latest "b".
    assert_eq!(of(7), vec![(p7_last, 1)]);
    assert!(p7.iter().all(|o| !of(7).iter().any(|b| b.0 == *o)));
    // Producer 9: its only batch lost "b" and stays as an empty header, its producer's last.
    assert_eq!(of(9).len(), 1);
    assert_eq!(of(9)[0].1, 0);
    // Producer 11: its second "c" and "d" keep their records, its first ones go whole.
    assert_eq!(of(11), vec![(p11[2], 1), (p11[3], 1)]);
    // Batches without a producer go whole when they lose everything: the plain "a" and the
    // latest filler are left.
    assert_eq!(of(-1), vec![(plain, 1), (active_first - 1, 1)]);

    // Producer 9 writes again later: the next pass drops the header the first one kept.
    let p9_new = produce_as(&mut s, 9, &[rec("e", Some("e"), 1_000)]);
    fill(&mut s, 60, 1_000);
    let active_first = s.segment_summaries().pop().unwrap().first_offset;
    assert!(p9_new < active_first);
    s.compact(&plan(&s), &KvCodec, &mut no_throttle()).unwrap();
    let kept = batches_below(&s, active_first);
    let p9: Vec<_> = kept.iter().filter(|b| b.0 == 9).collect();
    assert_eq!(p9, vec![&(9, p9_new, 1)]);
    // The others are as the first pass left them (their last batches are still their last).
    assert_eq!(kept.iter().filter(|b| b.0 == 7).count(), 1);
    assert_eq!(kept.iter().filter(|b| b.0 == 11).count(), 2);
    // Reopened, the log reads the same.
    let before = read_all(&s);
    drop(s);
    let s = LogStore::open(dir.path(), cfg()).unwrap();
    assert_eq!(read_all(&s), before);
}
