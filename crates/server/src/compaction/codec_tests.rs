//! Unit tests of [`KafkaRecordCompactor`] with real batches of every codec.

use std::collections::HashMap;

use bytes::Bytes;
use kafka_proto::records::{Compression, NewRecord, RecordBatch, RecordBatchBuilder};
use logstore::{RecordCompactor, RecordView, RetainOutcome, TxnBatch};

use super::KafkaRecordCompactor;

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

const BASE: i64 = 100;
const TS: i64 = 1_700_000_000_000;

/// A batch at base offset 100: `(key, value)` per record, timestamps TS + i.
fn batch(codec: Compression, records: &[(&str, Option<&str>)]) -> Vec<u8> {
    let recs: Vec<NewRecord> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| NewRecord {
            timestamp: TS + i as i64,
            key: Some(Bytes::copy_from_slice(k.as_bytes())),
            value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            headers: Vec::new(),
        })
        .collect();
    RecordBatchBuilder::new(codec)
        .base_offset(BASE)
        .producer(7, 1, 40)
        .with_records(&recs)
        .unwrap()
        .build()
        .unwrap()
        .to_vec()
}

/// One record as seen: (offset, key, tombstone, timestamp, control).
type Seen = (u64, Option<Vec<u8>>, bool, i64, bool);

fn views(c: &KafkaRecordCompactor, b: &[u8]) -> Vec<Seen> {
    let mut out = Vec::new();
    c.visit(b, &mut |r: RecordView<'_>| {
        out.push((
            r.offset,
            r.key.map(<[u8]>::to_vec),
            r.tombstone,
            r.timestamp_ms,
            r.control,
        ))
    })
    .unwrap();
    out
}

/// Keeps the latest offset of every key, as the store's key map decides.
fn latest_per_key(c: &KafkaRecordCompactor, b: &[u8]) -> HashMap<Vec<u8>, u64> {
    let mut latest = HashMap::new();
    for (offset, key, ..) in views(c, b) {
        latest.insert(key.unwrap(), offset);
    }
    latest
}

#[test]
fn visit_shows_every_record_of_every_codec() {
    let c = KafkaRecordCompactor::default();
    for codec in CODECS {
        let b = batch(codec, &[("a", Some("1")), ("b", None), ("a", Some("3"))]);
        let seen = views(&c, &b);
        assert_eq!(
            seen,
            vec![
                (100, Some(b"a".to_vec()), false, TS, false),
                (101, Some(b"b".to_vec()), true, TS + 1, false),
                (102, Some(b"a".to_vec()), false, TS + 2, false),
            ],
            "{codec:?}"
        );
    }
}

#[test]
fn retain_keeps_the_latest_record_per_key_at_its_offset_in_every_codec() {
    let c = KafkaRecordCompactor::default();
    for codec in CODECS {
        let b = batch(
            codec,
            &[
                ("a", Some("1")),
                ("b", Some("2")),
                ("a", Some("3")),
                ("c", Some("4")),
                ("b", Some("5")),
            ],
        );
        let latest = latest_per_key(&c, &b);
        let out = c
            .retain(&b, &mut |r| latest[r.key.unwrap()] == r.offset, None, true)
            .unwrap();
        let RetainOutcome::Rewritten(nb) = out else {
            panic!("{codec:?}: expected a rewrite, got {out:?}");
        };
        let parsed = RecordBatch::new(Bytes::from(nb)).unwrap();
        parsed.validate().unwrap();
        assert_eq!(parsed.base_offset(), BASE);
        assert_eq!(parsed.last_offset_delta(), 4, "lastOffsetDelta kept");
        assert_eq!(parsed.compression().unwrap(), codec);
        assert_eq!((parsed.producer_id(), parsed.base_sequence()), (7, 40));
        let kept: Vec<(i64, Vec<u8>, Vec<u8>, i64)> = parsed
            .records_vec(1 << 20)
            .unwrap()
            .into_iter()
            .map(|r| {
                (
                    r.offset,
                    r.key.unwrap().to_vec(),
                    r.value.unwrap().to_vec(),
                    r.timestamp,
                )
            })
            .collect();
        assert_eq!(
            kept,
            vec![
                (102, b"a".to_vec(), b"3".to_vec(), TS + 2),
                (103, b"c".to_vec(), b"4".to_vec(), TS + 3),
                (104, b"b".to_vec(), b"5".to_vec(), TS + 4),
            ],
            "{codec:?}"
        );
    }
}

#[test]
fn a_batch_keeping_everything_is_unchanged_and_one_keeping_nothing_is_empty() {
    let c = KafkaRecordCompactor::default();
    for codec in CODECS {
        let b = batch(codec, &[("a", Some("1")), ("b", Some("2"))]);
        assert_eq!(
            c.retain(&b, &mut |_| true, None, true).unwrap(),
            RetainOutcome::Unchanged
        );
        assert_eq!(
            c.retain(&b, &mut |_| true, Some(TS), true).unwrap(),
            RetainOutcome::Unchanged,
            "no tombstone: no horizon"
        );
        // The last batch of its producer keeping nothing stays as its header: the
        // producer's state.
        let RetainOutcome::Rewritten(empty) = c.retain(&b, &mut |_| false, Some(TS), true).unwrap()
        else {
            panic!("{codec:?}: an idempotent batch keeps its header");
        };
        let parsed = RecordBatch::new(Bytes::from(empty.clone())).unwrap();
        assert_eq!(parsed.record_count(), 0, "{codec:?}");
        assert_eq!((parsed.producer_id(), parsed.base_sequence()), (7, 40));
        assert_eq!(parsed.base_offset(), BASE);
        assert_eq!(parsed.last_offset_delta(), 1, "the offsets it spans stay");
        assert!(views(&c, &empty).is_empty());
        // Cleaned again: nothing changes.
        assert_eq!(
            c.retain(&empty, &mut |_| false, Some(TS), true).unwrap(),
            RetainOutcome::Unchanged
        );
        // A batch without a producer id keeping nothing goes.
        let plain = kafka_proto::records::build_batch(
            codec,
            &[NewRecord::new(TS, Bytes::from_static(b"v")).with_key(Bytes::from_static(b"k"))],
        )
        .unwrap()
        .to_vec();
        assert_eq!(
            c.retain(&plain, &mut |_| false, Some(TS), true).unwrap(),
            RetainOutcome::Empty,
            "{codec:?}"
        );
    }
}

#[test]
fn only_a_producers_last_batch_keeps_its_header_when_every_record_goes() {
    let c = KafkaRecordCompactor::default();
    for codec in CODECS {
        let b = batch(codec, &[("a", Some("1")), ("b", Some("2"))]);
        assert_eq!(c.producer_id(&b), Some(7));
        // Not the producer's last batch: gone whole, as a batch without a producer id.
        assert_eq!(
            c.retain(&b, &mut |_| false, Some(TS), false).unwrap(),
            RetainOutcome::Empty,
            "{codec:?}"
        );
        // Its last: the header stays, and a later pass that finds a newer batch of the
        // producer drops the header too.
        let RetainOutcome::Rewritten(empty) = c.retain(&b, &mut |_| false, None, true).unwrap()
        else {
            panic!("{codec:?}: the last batch keeps its header");
        };
        assert_eq!(c.producer_id(&empty), Some(7));
        assert_eq!(
            c.retain(&empty, &mut |_| false, None, false).unwrap(),
            RetainOutcome::Empty
        );
        // A batch keeping records is the same whatever its place.
        assert_eq!(
            c.retain(&b, &mut |_| true, None, false).unwrap(),
            RetainOutcome::Unchanged
        );
        let RetainOutcome::Rewritten(one) = c
            .retain(&b, &mut |r| r.key == Some(b"b".as_slice()), None, false)
            .unwrap()
        else {
            panic!("{codec:?}: one record kept");
        };
        assert_eq!(views(&c, &one).len(), 1);
    }
    // No producer id, control batches and short buffers have no producer to keep.
    let plain = kafka_proto::records::build_batch(
        Compression::None,
        &[NewRecord::new(TS, Bytes::from_static(b"v")).with_key(Bytes::from_static(b"k"))],
    )
    .unwrap()
    .to_vec();
    assert_eq!(c.producer_id(&plain), None);
    assert_eq!(c.producer_id(&control_marker()), None);
    assert_eq!(c.producer_id(&[0; 60]), None);
}

#[test]
fn a_kept_tombstone_gets_the_delete_horizon_once() {
    let c = KafkaRecordCompactor::default();
    let horizon = TS + 86_400_000;
    for codec in CODECS {
        let b = batch(codec, &[("a", Some("1")), ("b", None)]);
        let RetainOutcome::Rewritten(nb) =
            c.retain(&b, &mut |_| true, Some(horizon), true).unwrap()
        else {
            panic!("{codec:?}: a kept tombstone sets the horizon");
        };
        let parsed = RecordBatch::new(Bytes::from(nb.clone())).unwrap();
        assert_eq!(parsed.delete_horizon_ms(), Some(horizon));
        // Record timestamps stay the records' own.
        let seen = views(&c, &nb);
        assert_eq!(seen[0].3, TS);
        assert_eq!(seen[1], (101, Some(b"b".to_vec()), true, TS + 1, false));
        // A later pass with another horizon keeps the batch as it is.
        assert_eq!(
            c.retain(&nb, &mut |_| true, Some(horizon + 1), true)
                .unwrap(),
            RetainOutcome::Unchanged
        );
        // Past the horizon the store's keep drops the tombstone: only "a" is left.
        let RetainOutcome::Rewritten(nb2) = c
            .retain(&nb, &mut |r| !r.tombstone, Some(horizon + 1), true)
            .unwrap()
        else {
            panic!("{codec:?}: the tombstone goes");
        };
        let left = views(&c, &nb2);
        assert_eq!(left, vec![(100, Some(b"a".to_vec()), false, TS, false)]);
    }
}

/// A transaction marker of producer 7 at base offset 100.
fn control_marker() -> Vec<u8> {
    let marker = NewRecord {
        timestamp: TS,
        key: Some(Bytes::from_static(&[0, 0, 0, 1])),
        value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
        headers: Vec::new(),
    };
    RecordBatchBuilder::new(Compression::None)
        .base_offset(BASE)
        .producer(7, 1, -1)
        .transactional(true)
        .control(true)
        .with_records(std::slice::from_ref(&marker))
        .unwrap()
        .build()
        .unwrap()
        .to_vec()
}

#[test]
fn control_batches_are_kept_whole_and_shown_as_control() {
    let c = KafkaRecordCompactor::default();
    let b = control_marker();
    assert!(views(&c, &b).iter().all(|v| v.4));
    let mut asked = 0;
    let out = c
        .retain(
            &b,
            &mut |_| {
                asked += 1;
                false
            },
            None,
            true,
        )
        .unwrap();
    assert_eq!(out, RetainOutcome::Unchanged);
    assert_eq!(asked, 0);
}

#[test]
fn damaged_or_oversized_batches_are_errors_and_nothing_is_asked() {
    let c = KafkaRecordCompactor::default();
    for codec in CODECS {
        let mut b = batch(codec, &[("a", Some("1")), ("a", Some("2"))]);
        let last = b.len() - 1;
        b[last] ^= 0x55;
        let mut asked = 0;
        assert!(c.visit(&b, &mut |_| asked += 1).is_err(), "{codec:?}");
        assert!(c
            .retain(
                &b,
                &mut |_| {
                    asked += 1;
                    true
                },
                None,
                true
            )
            .is_err());
        assert_eq!(asked, 0);
    }
    assert!(
        c.visit(&[1, 2, 3], &mut |_| {}).is_err(),
        "a short buffer is refused"
    );
    // Records decompressing past the bound are refused, not allocated.
    let big = "x".repeat(10_000);
    let b = batch(Compression::Gzip, &[("a", Some(&big))]);
    let small = KafkaRecordCompactor::new(1_000);
    let err = small.visit(&b, &mut |_| {}).unwrap_err();
    assert!(!err.is_empty());
    assert!(small.retain(&b, &mut |_| true, None, true).is_err());
}

#[test]
fn transactional_batches_and_markers_are_told_apart_from_their_headers() {
    let c = KafkaRecordCompactor::default();
    let txn = RecordBatchBuilder::new(Compression::Lz4)
        .base_offset(BASE)
        .producer(9, 0, 0)
        .transactional(true)
        .with_records(&[NewRecord::new(TS, &b"v"[..]).with_key(&b"k"[..])])
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(
        c.transaction_batch(&txn),
        Some(TxnBatch::Data { producer_id: 9 })
    );
    assert_eq!(
        c.transaction_batch(&control_marker()),
        Some(TxnBatch::Marker {
            producer_id: 7,
            delete_horizon_ms: None
        })
    );
    // Idempotent (not transactional), short: no part in a transaction.
    let idempotent = batch(Compression::None, &[("k", Some("v"))]);
    assert_eq!(c.producer_id(&idempotent), Some(7));
    assert_eq!(c.transaction_batch(&idempotent), None);
    assert_eq!(c.transaction_batch(&txn[..60]), None);
    // A control batch of an unknown type is no marker: never removed.
    let unknown = RecordBatchBuilder::new(Compression::None)
        .producer(7, 1, -1)
        .transactional(true)
        .control(true)
        .with_records(&[NewRecord::new(TS, &b"\0\0\0\0\0\0"[..]).with_key(&b"\0\0\0\x05"[..])])
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(c.transaction_batch(&unknown), None);
}

#[test]
fn a_marker_gets_a_delete_horizon_once_and_keeps_its_record_and_offsets() {
    let c = KafkaRecordCompactor::default();
    let b = control_marker();
    let RetainOutcome::Rewritten(nb) = c.mark_delete_horizon(&b, TS + 5_000).unwrap() else {
        panic!("rewritten")
    };
    let parsed = RecordBatch::new(Bytes::from(nb.clone())).unwrap();
    parsed.validate().unwrap();
    assert!(parsed.is_control() && parsed.is_transactional());
    assert_eq!(parsed.delete_horizon_ms(), Some(TS + 5_000));
    assert_eq!(parsed.base_offset(), BASE);
    assert_eq!(parsed.producer_id(), 7);
    assert_eq!(
        views(&c, &nb),
        views(&c, &b),
        "the same record at the same offset"
    );
    assert_eq!(
        c.transaction_batch(&nb),
        Some(TxnBatch::Marker {
            producer_id: 7,
            delete_horizon_ms: Some(TS + 5_000)
        })
    );
    // Set once: a later pass leaves it.
    assert_eq!(
        c.mark_delete_horizon(&nb, TS + 9_000).unwrap(),
        RetainOutcome::Unchanged
    );
    // A data batch is refused.
    assert!(c
        .mark_delete_horizon(&batch(Compression::None, &[("k", Some("v"))]), TS)
        .is_err());
}
