//! Property tests: arbitrary and mutated input never panics any records parser, and built
//! batches round-trip. Case counts are kept small so the file runs in a few seconds.

use bytes::Bytes;
use kafka_proto::records::compression::decompress_for_magic;
use kafka_proto::records::*;
use proptest::prelude::*;

const LIMIT: usize = 1 << 20;

/// Runs every parser over `buf`; results are ignored, only panics matter.
fn exercise(buf: &Bytes) {
    for split in [
        split_batches(buf.clone()),
        split_batches_lenient(buf.clone()),
    ] {
        for b in split.take(64) {
            let Ok(b) = b else { break };
            exercise_batch(&b);
        }
    }
    if let Ok(b) = RecordBatch::new(buf.clone()) {
        exercise_batch(&b);
    }
    for trailing in [TrailingPartial::Reject, TrailingPartial::Ignore] {
        let _ = decode_message_set(
            buf.clone(),
            LegacyDecodeOptions {
                max_decompressed: LIMIT,
                trailing,
            },
        );
    }
    let _ = batches_to_message_set(buf.clone(), 1, LIMIT);
    let _ = legacy::decode_message(0, buf.clone());
    for codec in Compression::ALL {
        for magic in [0, 2] {
            let _ = decompress_for_magic(codec, magic, buf, LIMIT);
        }
    }
}

fn exercise_batch(b: &RecordBatch) {
    let _ = b.validate();
    let _ = b.validate_from_producer();
    let _ = (
        b.last_offset(),
        b.last_sequence(),
        b.next_offset(),
        b.batch_attributes(),
    );
    let _ = visit_records(b, LIMIT, |_| {});
    let mut flip = false;
    let keep = |_: &RecordKeyView<'_>| {
        flip = !flip;
        flip
    };
    let opts = RetainOptions {
        keep_empty: true,
        delete_horizon_ms: Some(1),
    };
    if let Ok(Retained::Rewritten(new)) = retain_records(b, LIMIT, keep, opts) {
        // Whatever the cleaner writes must be a batch that reads back.
        new.validate().expect("a rewritten batch validates");
        new.records_vec(LIMIT).expect("a rewritten batch decodes");
    }
    if let Ok(it) = b.records(LIMIT) {
        // The summary iterator must agree with the full decoder record for record, including
        // where (and whether) it fails.
        let full: Vec<_> = it.take(100_000).collect();
        let summaries: Vec<_> = b
            .record_summaries(LIMIT)
            .expect("records() succeeded")
            .take(100_000)
            .collect();
        assert_eq!(full.len(), summaries.len());
        for (f, s) in full.iter().zip(&summaries) {
            match (f, s) {
                (Ok(f), Ok(s)) => {
                    assert_eq!(s.offset, f.offset);
                    assert_eq!(s.value_len, f.value.as_ref().map(Bytes::len));
                }
                (Err(_), Err(_)) => {}
                _ => panic!("records and record_summaries disagree: {f:?} vs {s:?}"),
            }
        }
    }
}

fn arb_bytes(max: usize) -> impl Strategy<Value = Option<Bytes>> {
    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from))
}

fn arb_record() -> impl Strategy<Value = NewRecord> {
    (
        any::<i64>(),
        arb_bytes(40),
        arb_bytes(300),
        proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..10), arb_bytes(20)),
            0..4,
        ),
    )
        .prop_map(|(timestamp, key, value, headers)| NewRecord {
            timestamp,
            key,
            value,
            headers: headers
                .into_iter()
                .map(|(k, v)| Header::new(Bytes::from(k), v))
                .collect(),
        })
}

fn arb_codec() -> impl Strategy<Value = Compression> {
    (0usize..5).prop_map(|i| Compression::ALL[i])
}

/// A valid batch and then a mutation of it: flipped bytes, a truncation, or an extension, with
/// the CRC recomputed half of the time so the record parser sees the damage.
fn arb_mutated_batch() -> impl Strategy<Value = Bytes> {
    (
        arb_codec(),
        proptest::collection::vec(arb_record(), 1..6),
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        proptest::option::of(any::<usize>()),
        any::<bool>(),
    )
        .prop_map(|(codec, records, flips, cut, fix_crc)| {
            let mut v = build_batch(codec, &records).unwrap().to_vec();
            for (at, x) in flips {
                let i = at % v.len();
                v[i] ^= x;
            }
            if let Some(c) = cut {
                v.truncate(c % (v.len() + 1));
            }
            if fix_crc && v.len() >= 61 {
                let len = (v.len() - 12) as i32;
                v[8..12].copy_from_slice(&len.to_be_bytes());
                let crc = crc32c::crc32c(&v[21..]);
                v[17..21].copy_from_slice(&crc.to_be_bytes());
            }
            Bytes::from(v)
        })
}

fn arb_mutated_message_set() -> impl Strategy<Value = Bytes> {
    (
        prop_oneof![Just(0i8), Just(1i8)],
        prop_oneof![
            Just(Compression::None),
            Just(Compression::Gzip),
            Just(Compression::Snappy),
            Just(Compression::Lz4)
        ],
        proptest::collection::vec((arb_bytes(20), arb_bytes(100)), 1..5),
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
    )
        .prop_map(|(magic, codec, kvs, flips)| {
            let records: Vec<LegacyRecord> = kvs
                .into_iter()
                .enumerate()
                .map(|(i, (k, v))| LegacyRecord::new(i as i64, 1000 + i as i64, k, v))
                .collect();
            let mut v = encode_message_set(magic, codec, TimestampType::CreateTime, &records)
                .unwrap()
                .to_vec();
            for (at, x) in flips {
                let i = at % v.len();
                v[i] ^= x;
            }
            Bytes::from(v)
        })
}

/// 512 cases per property unless `PROPTEST_CASES` says otherwise (for longer local runs).
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(512);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic(v in proptest::collection::vec(any::<u8>(), 0..400)) {
        exercise(&Bytes::from(v));
    }

    #[test]
    fn arbitrary_bytes_behind_a_batch_header_never_panic(
        tail in proptest::collection::vec(any::<u8>(), 0..300),
        attributes in any::<i16>(),
        count in prop_oneof![any::<i32>(), 0i32..10],
    ) {
        // A well-formed header with the right CRC in front of garbage: reaches the decoders.
        let mut v = vec![0u8; 61];
        v[8..12].copy_from_slice(&((49 + tail.len()) as i32).to_be_bytes());
        v[16] = 2;
        v[21..23].copy_from_slice(&attributes.to_be_bytes());
        v[57..61].copy_from_slice(&count.to_be_bytes());
        v.extend_from_slice(&tail);
        let crc = crc32c::crc32c(&v[21..]);
        v[17..21].copy_from_slice(&crc.to_be_bytes());
        exercise(&Bytes::from(v));
    }

    #[test]
    fn mutated_batches_never_panic(b in arb_mutated_batch()) {
        exercise(&b);
    }

    #[test]
    fn mutated_message_sets_never_panic(b in arb_mutated_message_set()) {
        exercise(&b);
    }

    #[test]
    fn built_batches_round_trip(
        codec in arb_codec(),
        base in any::<i64>(),
        records in proptest::collection::vec(arb_record(), 0..8),
    ) {
        let bytes = RecordBatchBuilder::new(codec)
            .base_offset(base)
            .with_records(&records)
            .unwrap()
            .build()
            .unwrap();
        let b = RecordBatch::new(bytes).unwrap();
        b.validate().unwrap();
        let out = b.records_vec(LIMIT).unwrap();
        prop_assert_eq!(out.len(), records.len());
        for (i, (got, want)) in out.iter().zip(&records).enumerate() {
            prop_assert_eq!(got.offset, base.wrapping_add(i as i64));
            prop_assert_eq!(got.timestamp, want.timestamp);
            prop_assert_eq!(&got.key, &want.key);
            prop_assert_eq!(&got.value, &want.value);
            prop_assert_eq!(&got.headers, &want.headers);
        }
    }

    #[test]
    fn compression_round_trips(codec in arb_codec(), data in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let c = compress(codec, &data).unwrap();
        prop_assert_eq!(decompress(codec, &c, data.len()).unwrap(), data);
    }
}
