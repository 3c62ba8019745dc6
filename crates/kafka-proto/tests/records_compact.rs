//! Log compaction at the batch level (`records::compact`): what the cleaner relies on when it
//! reads keys with `visit_records` and rewrites batches with `retain_records`, for every codec.

use bytes::Bytes;
use kafka_proto::records::*;
use kafka_proto::DecodeError;
use proptest::prelude::*;

const LIMIT: usize = 1 << 20;
const BASE: i64 = 1_000;
const EPOCH: i32 = 7;
const PID: i64 = 42;
const PEPOCH: i16 = 3;
const SEQ: i32 = 100;

/// Six records at offsets 1000..=1005: keys a, b, a, c, b, d; offset 1002 (`a`) and 1004 (`b`)
/// are tombstones; timestamps out of order; headers on some.
fn sample_records() -> Vec<NewRecord> {
    let ts = [5_000, 4_000, 9_000, 6_000, 7_000, 8_000];
    let keys = ["a", "b", "a", "c", "b", "d"];
    ts.iter()
        .zip(keys)
        .enumerate()
        .map(|(i, (&t, k))| {
            let mut r = NewRecord::new(t, format!("value-{i}").into_bytes()).with_key(k);
            if i == 2 || i == 4 {
                r.value = None;
            }
            if i % 2 == 1 {
                r = r
                    .with_header("h1", Some(Bytes::from(format!("x{i}"))))
                    .with_header("h2", None);
            }
            r
        })
        .collect()
}

fn sample_batch(codec: Compression, transactional: bool) -> RecordBatch {
    let raw = RecordBatchBuilder::new(codec)
        .base_offset(BASE)
        .partition_leader_epoch(EPOCH)
        .producer(PID, PEPOCH, SEQ)
        .transactional(transactional)
        .with_records(&sample_records())
        .unwrap()
        .build()
        .unwrap();
    RecordBatch::new(raw).unwrap()
}

fn keep_offsets(offsets: &'static [i64]) -> impl FnMut(&RecordKeyView<'_>) -> bool {
    move |v| offsets.contains(&v.offset)
}

fn rewritten(r: Retained) -> RecordBatch {
    match r {
        Retained::Rewritten(b) => b,
        other => panic!("expected a rewritten batch, got {other:?}"),
    }
}

/// The fields the cleaner must never change, and a valid CRC.
fn assert_same_frame(new: &RecordBatch, old: &RecordBatch) {
    new.validate().unwrap();
    assert_eq!(new.crc(), new.compute_crc());
    assert_eq!(new.base_offset(), old.base_offset());
    assert_eq!(new.last_offset_delta(), old.last_offset_delta());
    assert_eq!(new.last_offset(), old.last_offset());
    assert_eq!(new.partition_leader_epoch(), old.partition_leader_epoch());
    assert_eq!(new.producer_id(), old.producer_id());
    assert_eq!(new.producer_epoch(), old.producer_epoch());
    assert_eq!(new.base_sequence(), old.base_sequence());
    assert_eq!(new.last_sequence(), old.last_sequence());
    assert_eq!(new.is_transactional(), old.is_transactional());
    assert_eq!(new.timestamp_type(), old.timestamp_type());
    assert_eq!(new.len() as i64, i64::from(new.batch_length()) + 12);
}

/// The new batch's records are exactly `old`'s records at `offsets`, field for field.
fn assert_records_are(new: &RecordBatch, old: &RecordBatch, offsets: &[i64]) {
    let got = new.records_vec(LIMIT).unwrap();
    let want: Vec<Record> = old
        .records_vec(LIMIT)
        .unwrap()
        .into_iter()
        .filter(|r| offsets.contains(&r.offset))
        .collect();
    assert_eq!(new.record_count() as usize, want.len());
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.offset, w.offset);
        assert_eq!(g.offset_delta, w.offset_delta);
        assert_eq!(g.timestamp, w.timestamp);
        assert_eq!(g.attributes, w.attributes);
        assert_eq!(g.key, w.key);
        assert_eq!(g.value, w.value);
        assert_eq!(g.headers, w.headers);
    }
}

#[test]
fn retaining_a_subset_rewrites_like_kafka_for_every_codec() {
    for codec in Compression::ALL {
        for transactional in [false, true] {
            let old = sample_batch(codec, transactional);
            // Keep 1001, 1003, 1005: the first and last offsets of the batch go.
            let kept: &[i64] = &[1001, 1003, 1005];
            let opts = RetainOptions::default();
            let new = rewritten(retain_records(&old, LIMIT, keep_offsets(kept), opts).unwrap());
            assert_same_frame(&new, &old);
            assert_eq!(new.compression().unwrap(), codec, "{codec}");
            assert!(!new.has_delete_horizon());
            assert_records_are(&new, &old, kept);
            // Base timestamp: the first kept record's; max: the largest kept (8000).
            assert_eq!(new.base_timestamp(), 4_000);
            assert_eq!(new.max_timestamp(), 8_000);
            assert!(new.len() < old.len() || codec != Compression::None);

            // A second pass over the batch with gaps keeps offsets and sequence state.
            let again: &[i64] = &[1003];
            let newer = rewritten(retain_records(&new, LIMIT, keep_offsets(again), opts).unwrap());
            assert_same_frame(&newer, &old);
            assert_records_are(&newer, &old, again);
            assert_eq!(newer.max_timestamp(), 6_000);
        }
    }
}

#[test]
fn keeping_every_record_returns_unchanged() {
    for codec in Compression::ALL {
        let old = sample_batch(codec, false);
        let mut calls = 0;
        let r = retain_records(
            &old,
            LIMIT,
            |_| {
                calls += 1;
                true
            },
            RetainOptions::default(),
        )
        .unwrap();
        assert_eq!(r, Retained::Unchanged);
        assert_eq!(calls, 6);
        // A horizon is only set when a kept record is a tombstone: none here.
        let no_tombstones: &[i64] = &[1000, 1001, 1003, 1005];
        let opts = RetainOptions {
            delete_horizon_ms: Some(99_000),
            ..RetainOptions::default()
        };
        let new =
            rewritten(retain_records(&old, LIMIT, keep_offsets(no_tombstones), opts).unwrap());
        assert!(!new.has_delete_horizon());
        assert_eq!(new.delete_horizon_ms(), None);
    }
    // A batch without tombstones, all kept, with a horizon offered: still unchanged.
    let raw = build_batch(
        Compression::Lz4,
        &[NewRecord::new(1, b"v".to_vec()).with_key("k")],
    )
    .unwrap();
    let b = RecordBatch::new(raw).unwrap();
    let opts = RetainOptions {
        delete_horizon_ms: Some(5),
        keep_empty: true,
    };
    assert_eq!(
        retain_records(&b, LIMIT, |_| true, opts).unwrap(),
        Retained::Unchanged
    );
}

#[test]
fn a_kept_tombstone_sets_the_delete_horizon_once() {
    const HORIZON: i64 = 86_400_000 + 10_000;
    for codec in Compression::ALL {
        let old = sample_batch(codec, true);
        let opts = RetainOptions {
            delete_horizon_ms: Some(HORIZON),
            ..RetainOptions::default()
        };
        // Every record kept, but there is a tombstone: rewritten to carry the horizon.
        let new = rewritten(retain_records(&old, LIMIT, |_| true, opts).unwrap());
        assert_same_frame(&new, &old);
        assert!(new.has_delete_horizon());
        assert_eq!(new.delete_horizon_ms(), Some(HORIZON));
        assert_eq!(new.base_timestamp(), HORIZON);
        assert_eq!(new.max_timestamp(), old.max_timestamp());
        assert_eq!(new.compression().unwrap(), codec);
        let all: Vec<i64> = (BASE..=BASE + 5).collect();
        assert_records_are(&new, &old, &all);
        let mut timestamps = Vec::new();
        visit_records(&new, LIMIT, |v| timestamps.push(v.timestamp)).unwrap();
        assert_eq!(timestamps, [5_000, 4_000, 9_000, 6_000, 7_000, 8_000]);

        // Once set, the horizon stays: a later pass neither moves it nor rewrites for it.
        let later = RetainOptions {
            delete_horizon_ms: Some(HORIZON + 1_000),
            ..RetainOptions::default()
        };
        assert_eq!(
            retain_records(&new, LIMIT, |_| true, later).unwrap(),
            Retained::Unchanged
        );
        // Dropping the tombstones keeps the horizon too (as Kafka does).
        let no_tombstones: &[i64] = &[1001, 1005];
        let newer =
            rewritten(retain_records(&new, LIMIT, keep_offsets(no_tombstones), later).unwrap());
        assert_same_frame(&newer, &old);
        assert_eq!(newer.delete_horizon_ms(), Some(HORIZON));
        assert_records_are(&newer, &old, no_tombstones);
        assert_eq!(newer.max_timestamp(), 8_000);
    }
}

#[test]
fn nothing_kept_is_empty_or_the_empty_batch_kafka_writes() {
    for codec in Compression::ALL {
        let old = sample_batch(codec, true);
        let none = |_: &RecordKeyView<'_>| false;
        assert_eq!(
            retain_records(&old, LIMIT, none, RetainOptions::default()).unwrap(),
            Retained::Empty
        );
        let opts = RetainOptions {
            keep_empty: true,
            delete_horizon_ms: Some(1),
        };
        let empty = rewritten(retain_records(&old, LIMIT, none, opts).unwrap());
        assert_same_frame(&empty, &old);
        assert_eq!(empty.record_count(), 0);
        assert_eq!(empty.len(), RECORD_BATCH_OVERHEAD);
        assert_eq!(empty.compression().unwrap(), Compression::None);
        assert_eq!(empty.base_timestamp(), NO_TIMESTAMP);
        assert_eq!(empty.max_timestamp(), old.max_timestamp());
        assert!(!empty.has_delete_horizon());
        assert!(empty.records_vec(LIMIT).unwrap().is_empty());
        // The empty batch is stable under further passes.
        assert_eq!(
            retain_records(&empty, LIMIT, none, opts).unwrap(),
            Retained::Unchanged
        );
        assert_eq!(
            retain_records(&empty, LIMIT, |_| true, RetainOptions::default()).unwrap(),
            Retained::Empty
        );
        let mut visited = 0;
        visit_records(&empty, LIMIT, |_| visited += 1).unwrap();
        assert_eq!(visited, 0);
    }
}

#[test]
fn log_append_time_batches_keep_reporting_the_append_time() {
    for codec in Compression::ALL {
        let raw = RecordBatchBuilder::new(codec)
            .base_offset(50)
            .log_append_time(77_777)
            .with_records(&sample_records())
            .unwrap()
            .build()
            .unwrap();
        let old = RecordBatch::new(raw).unwrap();
        let kept: &[i64] = &[51, 52];
        let opts = RetainOptions {
            delete_horizon_ms: Some(123_456),
            ..RetainOptions::default()
        };
        let new = rewritten(retain_records(&old, LIMIT, keep_offsets(kept), opts).unwrap());
        assert_same_frame(&new, &old);
        assert_eq!(new.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(new.max_timestamp(), 77_777);
        assert_eq!(new.delete_horizon_ms(), Some(123_456));
        assert_records_are(&new, &old, kept);
        visit_records(&new, LIMIT, |v| assert_eq!(v.timestamp, 77_777)).unwrap();
    }
}

#[test]
fn visit_reports_offsets_keys_tombstones_and_timestamps() {
    for codec in Compression::ALL {
        let b = sample_batch(codec, false);
        let mut seen = Vec::new();
        visit_records(&b, LIMIT, |v| {
            assert!(!v.is_control);
            assert_eq!(v.offset, BASE + i64::from(v.offset_delta));
            seen.push((
                v.offset,
                v.key.map(<[u8]>::to_vec),
                v.is_tombstone(),
                v.value_len,
                v.timestamp,
            ));
        })
        .unwrap();
        let want: Vec<_> = sample_records()
            .iter()
            .enumerate()
            .map(|(i, r)| {
                (
                    BASE + i as i64,
                    r.key.as_ref().map(|k| k.to_vec()),
                    r.value.is_none(),
                    r.value.as_ref().map(Bytes::len),
                    r.timestamp,
                )
            })
            .collect();
        assert_eq!(seen, want, "{codec}");
    }
    // A null key is reported as such.
    let raw = build_batch(Compression::None, &[NewRecord::new(3, b"v".to_vec())]).unwrap();
    visit_records(&RecordBatch::new(raw).unwrap(), LIMIT, |v| {
        assert_eq!(v.key, None);
        assert!(!v.is_tombstone());
    })
    .unwrap();
}

fn control_batch() -> RecordBatch {
    // A COMMIT marker: key = version 0, type 1; value = version 0, coordinator epoch 5.
    let marker = NewRecord {
        timestamp: 10,
        key: Some(Bytes::from_static(&[0, 0, 0, 1])),
        value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 5])),
        headers: Vec::new(),
    };
    let raw = RecordBatchBuilder::new(Compression::None)
        .base_offset(9)
        .producer(PID, PEPOCH, -1)
        .transactional(true)
        .control(true)
        .with_records(&[marker])
        .unwrap()
        .build()
        .unwrap();
    RecordBatch::new(raw).unwrap()
}

#[test]
fn control_batches_are_visited_but_never_rewritten() {
    let b = control_batch();
    let mut n = 0;
    visit_records(&b, LIMIT, |v| {
        assert!(v.is_control);
        assert_eq!(v.offset, 9);
        assert_eq!(v.key, Some(&[0u8, 0, 0, 1][..]));
        n += 1;
    })
    .unwrap();
    assert_eq!(n, 1);
    for keep in [true, false] {
        assert_eq!(
            retain_records(&b, LIMIT, |_| keep, RetainOptions::default()),
            Err(RetainError::ControlBatch)
        );
    }
}

/// `batch` with its CRC recomputed after `edit`.
fn patched(batch: &RecordBatch, edit: impl FnOnce(&mut Vec<u8>)) -> RecordBatch {
    let mut v = batch.as_bytes().to_vec();
    edit(&mut v);
    let crc = crc32c::crc32c(&v[21..]);
    v[17..21].copy_from_slice(&crc.to_be_bytes());
    RecordBatch::new(Bytes::from(v)).unwrap()
}

#[test]
fn bad_batches_are_refused_before_the_closure_runs() {
    let good = sample_batch(Compression::None, false);
    let mut flipped = good.as_bytes().to_vec();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let bad_crc = RecordBatch::new(Bytes::from(flipped)).unwrap();
    // lastOffsetDelta below the last record's delta.
    let short_span = patched(&good, |v| v[23..27].copy_from_slice(&3i32.to_be_bytes()));
    // The last record truncated (count still says 6).
    let truncated = {
        let mut v = good.as_bytes().to_vec();
        v.truncate(v.len() - 3);
        let len = (v.len() - 12) as i32;
        v[8..12].copy_from_slice(&len.to_be_bytes());
        let b = RecordBatch::new(Bytes::from(v)).unwrap();
        patched(&b, |_| {})
    };
    // Offset deltas that repeat: two records both at delta 0.
    let repeated = {
        let one = RecordBatch::new(
            build_batch(Compression::None, &[NewRecord::new(1, b"x".to_vec())]).unwrap(),
        )
        .unwrap();
        let rec = one.as_bytes()[61..].to_vec();
        patched(&one, |v| {
            v.extend_from_slice(&rec);
            let len = (v.len() - 12) as i32;
            v[8..12].copy_from_slice(&len.to_be_bytes());
            v[23..27].copy_from_slice(&1i32.to_be_bytes());
            v[57..61].copy_from_slice(&2i32.to_be_bytes());
        })
    };
    // A record's offset delta beyond lastOffsetDelta (deltas 0 and 7, lastOffsetDelta 5).
    let beyond = {
        let mut builder = RecordBatchBuilder::new(Compression::None);
        let v = Bytes::from_static(b"v");
        builder
            .push_with_offset_delta(0, 1, None, Some(&v), &[])
            .unwrap();
        builder
            .push_with_offset_delta(7, 1, None, Some(&v), &[])
            .unwrap();
        let b = RecordBatch::new(builder.build().unwrap()).unwrap();
        patched(&b, |v| v[23..27].copy_from_slice(&5i32.to_be_bytes()))
    };
    for bad in [&bad_crc, &short_span, &truncated, &repeated, &beyond] {
        let mut called = false;
        assert!(visit_records(bad, LIMIT, |_| called = true).is_err());
        let r = retain_records(
            bad,
            LIMIT,
            |_| {
                called = true;
                false
            },
            RetainOptions::default(),
        );
        assert!(matches!(r, Err(RetainError::Decode(_))), "{r:?}");
        assert!(!called);
    }
    assert!(matches!(
        visit_records(&bad_crc, LIMIT, |_| {}),
        Err(DecodeError::CrcMismatch { .. })
    ));
}

#[test]
fn decompression_is_bounded_by_the_limit() {
    // An uncompressed batch's records are already in memory: the limit is for decompression.
    for codec in &Compression::ALL[1..] {
        let b = sample_batch(*codec, false);
        let size = b.decompressed_records_data(LIMIT).unwrap().len();
        assert_eq!(
            visit_records(&b, size - 1, |_| {}),
            Err(DecodeError::DecompressedTooLarge(size - 1))
        );
        assert_eq!(
            retain_records(&b, size - 1, |_| true, RetainOptions::default()),
            Err(RetainError::Decode(DecodeError::DecompressedTooLarge(
                size - 1
            )))
        );
        visit_records(&b, size, |_| {}).unwrap();
    }
}

fn arb_codec() -> impl Strategy<Value = Compression> {
    (0usize..5).prop_map(|i| Compression::ALL[i])
}

/// Records with keys from a small set, some tombstones, some null keys, any timestamps.
fn arb_records() -> impl Strategy<Value = Vec<NewRecord>> {
    proptest::collection::vec(
        (
            any::<i64>(),
            proptest::option::of(0u8..4),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            proptest::collection::vec((0u8..3, proptest::option::of(any::<u8>())), 0..3),
        ),
        1..12,
    )
    .prop_map(|rs| {
        rs.into_iter()
            .map(|(timestamp, key, value, headers)| NewRecord {
                timestamp,
                key: key.map(|k| Bytes::from(vec![b'k', k])),
                value: value.map(Bytes::from),
                headers: headers
                    .into_iter()
                    .map(|(k, v)| {
                        Header::new(Bytes::from(vec![k]), v.map(|b| Bytes::from(vec![b])))
                    })
                    .collect(),
            })
            .collect()
    })
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any subset, any horizon, twice in a row: the result is what the model says.
    #[test]
    fn retain_matches_a_model(
        codec in arb_codec(),
        base in any::<i64>(),
        seq in prop_oneof![Just(-1i32), 0..i32::MAX],
        records in arb_records(),
        masks in proptest::collection::vec(any::<bool>(), 24),
        horizon in proptest::option::of(any::<i64>()),
        keep_empty in any::<bool>(),
    ) {
        let old = RecordBatch::new(
            RecordBatchBuilder::new(codec)
                .base_offset(base)
                .producer(if seq < 0 { -1 } else { 9 }, 0, seq)
                .with_records(&records)
                .unwrap()
                .build()
                .unwrap(),
        )
        .unwrap();
        let n = records.len();
        let kept: Vec<usize> = (0..n).filter(|&i| masks[i]).collect();
        let opts = RetainOptions { keep_empty, delete_horizon_ms: horizon };
        let r = retain_records(&old, LIMIT, |v| masks[v.offset_delta as usize], opts).unwrap();
        let tombstone_kept = kept.iter().any(|&i| records[i].value.is_none());
        let new = match r {
            Retained::Empty => {
                prop_assert!(kept.is_empty() && !keep_empty);
                return Ok(());
            }
            Retained::Unchanged => {
                prop_assert_eq!(kept.len(), n);
                prop_assert!(horizon.is_none() || !tombstone_kept);
                return Ok(());
            }
            Retained::Rewritten(b) => b,
        };
        new.validate().unwrap();
        prop_assert_eq!(new.base_offset(), base);
        prop_assert_eq!(new.last_offset(), old.last_offset());
        prop_assert_eq!(new.last_sequence(), old.last_sequence());
        prop_assert_eq!(new.base_sequence(), seq);
        let expect_horizon = horizon.filter(|_| tombstone_kept);
        prop_assert_eq!(new.delete_horizon_ms(), expect_horizon);
        let got = new.records_vec(LIMIT).unwrap();
        prop_assert_eq!(got.len(), kept.len());
        for (g, &i) in got.iter().zip(&kept) {
            prop_assert_eq!(g.offset, base.wrapping_add(i as i64));
            prop_assert_eq!(g.timestamp, records[i].timestamp);
            prop_assert_eq!(&g.key, &records[i].key);
            prop_assert_eq!(&g.value, &records[i].value);
            prop_assert_eq!(&g.headers, &records[i].headers);
        }
        if !kept.is_empty() {
            let max = kept.iter().map(|&i| records[i].timestamp).fold(-1, i64::max);
            prop_assert_eq!(new.max_timestamp(), max);
            prop_assert_eq!(new.compression().unwrap(), codec);
        }
        // A second pass keeping everything changes nothing more.
        let again = retain_records(&new, LIMIT, |_| true, opts).unwrap();
        prop_assert_eq!(again, Retained::Unchanged);
    }

    /// Damaged batches (bytes flipped, CRC recomputed so the record decoder sees the damage):
    /// no panic, and whatever is rewritten is a valid batch whose records are the ones kept.
    #[test]
    fn damaged_batches_never_panic_and_rewrites_stay_valid(
        codec in arb_codec(),
        records in arb_records(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in proptest::option::of(any::<usize>()),
        masks in proptest::collection::vec(any::<bool>(), 64),
    ) {
        let mut v = build_batch(codec, &records).unwrap().to_vec();
        for (at, x) in flips {
            let i = 21 + at % (v.len() - 21);
            v[i] ^= x;
        }
        if let Some(c) = cut {
            v.truncate(61 + c % (v.len() - 60));
        }
        let len = (v.len() - 12) as i32;
        v[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&v[21..]);
        v[17..21].copy_from_slice(&crc.to_be_bytes());
        let b = RecordBatch::new(Bytes::from(v)).unwrap();
        let mut visited = Vec::new();
        let visit = visit_records(&b, LIMIT, |v| visited.push(v.offset));
        let mut i = 0;
        let r = retain_records(&b, LIMIT, |_| { i += 1; masks[i % 64] }, RetainOptions {
            keep_empty: true,
            delete_horizon_ms: Some(1),
        });
        prop_assert_eq!(visit.is_ok(), r.is_ok() || r == Err(RetainError::ControlBatch));
        if let Ok(Retained::Rewritten(new)) = r {
            new.validate().unwrap();
            let got: Vec<i64> = new.records_vec(LIMIT).unwrap().iter().map(|r| r.offset).collect();
            let want: Vec<i64> = visited
                .iter()
                .enumerate()
                .filter(|(j, _)| masks[(j + 1) % 64])
                .map(|(_, &o)| o)
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
