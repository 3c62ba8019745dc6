//! Record batches, compression and legacy message sets: round trips, known-answer vectors built
//! by hand from the spec layout, and rejection of bad input.

use bytes::{Bytes, BytesMut};
use kafka_proto::error::DecodeError;
use kafka_proto::error_code::ErrorCode;
use kafka_proto::records::compression::{compress_for_magic, decompress_for_magic};
use kafka_proto::records::legacy::{decode_message, MAGIC_V0, MAGIC_V1};
use kafka_proto::records::*;

const MAX: usize = 64 << 20;

// ---- independent checksums (bit by bit, straight from the polynomials) ----

fn crc32c_bitwise(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn crc32_ieee_bitwise(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn checksum_known_answers() {
    assert_eq!(crc32c_bitwise(b"123456789"), 0xE306_9283);
    assert_eq!(crc32_ieee_bitwise(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
}

// ---- helpers ----

fn sample_records(n: usize, value_len: usize) -> Vec<NewRecord> {
    (0..n)
        .map(|i| {
            let value: Vec<u8> = (0..value_len).map(|j| (i * 31 + j) as u8).collect();
            let mut r = NewRecord {
                timestamp: 1_700_000_000_000 + (i as i64 * 7) - 50,
                key: None,
                value: Some(Bytes::from(value)),
                headers: Vec::new(),
            };
            match i % 5 {
                0 => r.key = Some(Bytes::from(format!("key-{i}"))),
                1 => r.value = None,
                2 => {
                    r.key = Some(Bytes::new());
                    for h in 0..(i % 13) {
                        r.headers.push(Header::new(
                            format!("h{h}"),
                            if h % 3 == 0 {
                                None
                            } else {
                                Some(Bytes::from(vec![h as u8; h]))
                            },
                        ));
                    }
                }
                3 => r.headers.push(Header::new("", Some(Bytes::new()))),
                _ => {}
            }
            r
        })
        .collect()
}

fn assert_records_match(batch: &RecordBatch, input: &[NewRecord]) {
    let out = batch.records_vec(MAX).unwrap();
    assert_eq!(out.len(), input.len());
    for (i, (got, want)) in out.iter().zip(input).enumerate() {
        assert_eq!(got.offset_delta, i as i32);
        assert_eq!(got.offset, batch.base_offset() + i as i64);
        assert_eq!(got.timestamp, want.timestamp);
        assert_eq!(got.key, want.key);
        assert_eq!(got.value, want.value);
        assert_eq!(got.headers, want.headers);
    }
    let summaries: Vec<RecordSummary> = batch
        .record_summaries(MAX)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(summaries.len(), out.len());
    for (s, r) in summaries.iter().zip(&out) {
        assert_eq!(s.offset, r.offset);
        assert_eq!(s.value_len, r.value.as_ref().map(Bytes::len));
    }
}

// ---- v2 batches ----

#[test]
fn round_trip_every_codec_and_size() {
    for codec in Compression::ALL {
        for (n, value_len) in [(0, 0), (1, 0), (1, 10), (3, 1000), (100, 100), (7, 300_000)] {
            let input = sample_records(n, value_len);
            let bytes = RecordBatchBuilder::new(codec)
                .base_offset(1234)
                .with_records(&input)
                .unwrap()
                .build()
                .unwrap();
            let batch = RecordBatch::new(bytes.clone()).unwrap();
            batch.validate().unwrap();
            if n > 0 {
                batch.validate_from_producer().unwrap();
            }
            assert_eq!(batch.compression().unwrap(), codec);
            assert_eq!(batch.record_count(), n as i32);
            assert_eq!(batch.base_offset(), 1234);
            assert_eq!(batch.len(), bytes.len());
            assert_eq!(batch.magic(), 2);
            if n > 0 {
                assert_eq!(batch.last_offset_delta(), n as i32 - 1);
                assert_eq!(batch.base_timestamp(), input[0].timestamp);
                let max = input.iter().map(|r| r.timestamp).max().unwrap();
                assert_eq!(batch.max_timestamp(), max);
            }
            assert_records_match(&batch, &input);
        }
    }
}

#[test]
fn uncompressed_records_are_zero_copy() {
    let input = sample_records(10, 50);
    let bytes = build_batch(Compression::None, &input).unwrap();
    let range = bytes.as_ptr() as usize..bytes.as_ptr() as usize + bytes.len();
    let batch = RecordBatch::new(bytes.clone()).unwrap();
    for r in batch.records(MAX).unwrap() {
        let r = r.unwrap();
        for b in r.key.iter().chain(r.value.iter()) {
            if !b.is_empty() {
                assert!(range.contains(&(b.as_ptr() as usize)));
            }
        }
    }
    let split: Vec<_> = split_batches(bytes.clone()).collect();
    assert_eq!(split.len(), 1);
    assert_eq!(
        split[0].as_ref().unwrap().as_bytes().as_ptr(),
        bytes.as_ptr()
    );
}

#[test]
fn producer_fields_flags_and_log_append_time() {
    let input = sample_records(4, 8);
    let bytes = RecordBatchBuilder::new(Compression::Lz4)
        .producer(42, 3, 100)
        .transactional(true)
        .partition_leader_epoch(9)
        .log_append_time(5_000)
        .with_records(&input)
        .unwrap()
        .build()
        .unwrap();
    let b = RecordBatch::new(bytes).unwrap();
    b.validate_from_producer().unwrap();
    assert_eq!(b.producer_id(), 42);
    assert_eq!(b.producer_epoch(), 3);
    assert_eq!(b.base_sequence(), 100);
    assert_eq!(b.last_sequence(), 103);
    assert!(b.is_transactional());
    assert!(!b.is_control());
    assert_eq!(b.partition_leader_epoch(), 9);
    assert_eq!(b.timestamp_type(), TimestampType::LogAppendTime);
    assert_eq!(b.max_timestamp(), 5_000);
    let attrs = b.batch_attributes().unwrap();
    assert_eq!(
        attrs,
        BatchAttributes {
            compression: Compression::Lz4,
            timestamp_type: TimestampType::LogAppendTime,
            transactional: true,
            control: false,
            has_delete_horizon: false,
        }
    );
    assert_eq!(attrs.to_i16(), b.attributes());
    for r in b.records(MAX).unwrap() {
        assert_eq!(r.unwrap().timestamp, 5_000);
    }
    // Control batches are fine structurally but not from a producer.
    let control = RecordBatchBuilder::new(Compression::None)
        .control(true)
        .with_records(&input)
        .unwrap()
        .build()
        .unwrap();
    let control = RecordBatch::new(control).unwrap();
    control.validate().unwrap();
    assert!(control.is_control());
    assert!(control.validate_from_producer().is_err());
}

#[test]
fn sequence_wraps_like_kafka() {
    let input = sample_records(3, 1);
    let b = RecordBatchBuilder::new(Compression::None)
        .producer(1, 0, i32::MAX - 1)
        .with_records(&input)
        .unwrap()
        .build()
        .unwrap();
    let b = RecordBatch::new(b).unwrap();
    assert_eq!(b.last_sequence(), 0);
}

/// A batch written byte by byte from the spec layout, not by the builder.
fn hand_built_batch() -> (Vec<u8>, u32) {
    // One record: attributes 0, timestampDelta 0, offsetDelta 0, key "k", value "v", 0 headers.
    let body = [0x00, 0x00, 0x00, 0x02, b'k', 0x02, b'v', 0x00];
    let mut record = vec![(body.len() as u8) << 1]; // zig-zag varint 8 = 0x10
    record.extend_from_slice(&body);
    let mut covered = Vec::new(); // attributes .. end
    covered.extend_from_slice(&0i16.to_be_bytes()); // attributes
    covered.extend_from_slice(&0i32.to_be_bytes()); // lastOffsetDelta
    covered.extend_from_slice(&1_700_000_000_000i64.to_be_bytes()); // baseTimestamp
    covered.extend_from_slice(&1_700_000_000_000i64.to_be_bytes()); // maxTimestamp
    covered.extend_from_slice(&(-1i64).to_be_bytes()); // producerId
    covered.extend_from_slice(&(-1i16).to_be_bytes()); // producerEpoch
    covered.extend_from_slice(&(-1i32).to_be_bytes()); // baseSequence
    covered.extend_from_slice(&1i32.to_be_bytes()); // recordCount
    covered.extend_from_slice(&record);
    let crc = crc32c_bitwise(&covered);
    let mut batch = Vec::new();
    batch.extend_from_slice(&7i64.to_be_bytes()); // baseOffset
    batch.extend_from_slice(&((4 + 1 + 4 + covered.len()) as i32).to_be_bytes()); // batchLength
    batch.extend_from_slice(&0i32.to_be_bytes()); // partitionLeaderEpoch
    batch.push(2); // magic
    batch.extend_from_slice(&crc.to_be_bytes());
    batch.extend_from_slice(&covered);
    (batch, crc)
}

#[test]
fn known_answer_batch() {
    let (raw, crc) = hand_built_batch();
    assert_eq!(raw.len(), 70);
    let b = RecordBatch::new(Bytes::from(raw.clone())).unwrap();
    b.validate().unwrap();
    b.validate_from_producer().unwrap();
    assert_eq!(b.base_offset(), 7);
    assert_eq!(b.batch_length(), 58);
    assert_eq!(b.partition_leader_epoch(), 0);
    assert_eq!(b.magic(), 2);
    assert_eq!(b.crc(), crc);
    assert_eq!(b.compute_crc(), crc);
    assert_eq!(b.attributes(), 0);
    assert_eq!(b.last_offset_delta(), 0);
    assert_eq!(b.base_timestamp(), 1_700_000_000_000);
    assert_eq!(b.max_timestamp(), 1_700_000_000_000);
    assert_eq!(b.producer_id(), -1);
    assert_eq!(b.producer_epoch(), -1);
    assert_eq!(b.base_sequence(), -1);
    assert_eq!(b.record_count(), 1);
    let recs = b.records_vec(MAX).unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].offset, 7);
    assert_eq!(recs[0].timestamp, 1_700_000_000_000);
    assert_eq!(recs[0].key.as_deref(), Some(&b"k"[..]));
    assert_eq!(recs[0].value.as_deref(), Some(&b"v"[..]));
    assert!(recs[0].headers.is_empty());

    // The builder writes exactly these bytes.
    let built = RecordBatchBuilder::new(Compression::None)
        .base_offset(7)
        .partition_leader_epoch(0)
        .with_records(&[NewRecord::new(1_700_000_000_000, "v").with_key("k")])
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(&built[..], &raw[..]);
}

#[test]
fn rewriting_offset_and_epoch_keeps_the_crc_valid() {
    let (raw, crc) = hand_built_batch();
    let mut buf = BytesMut::from(&raw[..]);
    set_base_offset(&mut buf, 1 << 40).unwrap();
    set_partition_leader_epoch(&mut buf, 77).unwrap();
    assert_eq!(&buf[8..12], &raw[8..12]);
    assert_eq!(&buf[16..], &raw[16..]);
    let b = RecordBatch::new(buf.freeze()).unwrap();
    b.validate().unwrap();
    assert_eq!(b.crc(), crc);
    assert_eq!(b.base_offset(), 1 << 40);
    assert_eq!(b.partition_leader_epoch(), 77);
    assert_eq!(b.records_vec(MAX).unwrap()[0].offset, 1 << 40);

    // The owned variants: in place when unshared, copying when shared.
    let b = RecordBatch::new(Bytes::from(raw.clone())).unwrap();
    let ptr = b.as_bytes().as_ptr();
    let b = b.with_base_offset(99).with_partition_leader_epoch(5);
    assert_eq!(b.as_bytes().as_ptr(), ptr);
    b.validate().unwrap();
    assert_eq!((b.base_offset(), b.partition_leader_epoch()), (99, 5));
    let shared = Bytes::from(raw.clone());
    let b = RecordBatch::new(shared.clone())
        .unwrap()
        .with_base_offset(3);
    assert_eq!(b.base_offset(), 3);
    assert_eq!(&shared[..], &raw[..]);

    assert!(set_base_offset(&mut [0u8; 7], 1).is_err());
    assert!(set_partition_leader_epoch(&mut [0u8; 15], 1).is_err());
}

#[test]
fn corruption_is_detected() {
    let (raw, _) = hand_built_batch();
    // Any flipped bit in the CRC-covered part fails the CRC.
    for i in 21..raw.len() {
        let mut bad = raw.clone();
        bad[i] ^= 0x01;
        let b = RecordBatch::new(Bytes::from(bad)).unwrap();
        assert!(matches!(b.validate(), Err(DecodeError::CrcMismatch { .. })));
    }
    let mut bad = raw.clone();
    bad[16] = 1;
    assert_eq!(
        RecordBatch::new(Bytes::from(bad)).unwrap().validate(),
        Err(DecodeError::UnsupportedMagic(1))
    );
    // Length field inconsistent with the buffer.
    assert!(RecordBatch::new(Bytes::from(raw[..69].to_vec())).is_err());
    assert!(RecordBatch::new(Bytes::from(raw[..60].to_vec())).is_err());
}

/// Rewrites the CRC after a mutation so the records parser is reached.
fn fix_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

#[test]
fn record_section_inconsistencies_are_errors() {
    let (raw, _) = hand_built_batch();
    let decode = |bytes: Vec<u8>| -> Result<Vec<Record>, DecodeError> {
        let b = RecordBatch::new(Bytes::from(bytes))?;
        b.validate()?;
        // The summary iterator must reject exactly what the full decoder rejects.
        let summaries: Result<Vec<RecordSummary>, DecodeError> =
            b.record_summaries(MAX).and_then(|it| it.collect());
        let full = b.records_vec(MAX);
        assert_eq!(full.is_ok(), summaries.is_ok(), "{full:?} vs {summaries:?}");
        full
    };
    // Count 2 but one record.
    let mut bad = raw.clone();
    bad[57..61].copy_from_slice(&2i32.to_be_bytes());
    fix_crc(&mut bad);
    assert!(decode(bad).is_err());
    // Count 0 with a record left over: trailing bytes.
    let mut bad = raw.clone();
    bad[57..61].copy_from_slice(&0i32.to_be_bytes());
    fix_crc(&mut bad);
    assert!(matches!(decode(bad), Err(DecodeError::MalformedRecords(_))));
    // Negative count.
    let mut bad = raw.clone();
    bad[57..61].copy_from_slice(&(-1i32).to_be_bytes());
    fix_crc(&mut bad);
    assert!(decode(bad).is_err());
    // Record length longer than the section.
    let mut bad = raw.clone();
    bad[61] = 0x7e;
    fix_crc(&mut bad);
    assert!(decode(bad).is_err());
    // Record length shorter than its fields.
    let mut bad = raw.clone();
    bad[61] = 0x0e;
    fix_crc(&mut bad);
    assert!(decode(bad).is_err());
    // Header count larger than the bytes left.
    let mut bad = raw.clone();
    bad[69] = 0x10;
    fix_crc(&mut bad);
    assert!(decode(bad).is_err());
    // Negative key length other than -1.
    let mut bad = raw.clone();
    bad[65] = 0x03; // zig-zag -2
    fix_crc(&mut bad);
    assert!(decode(bad).is_err());
    // Unknown codec id 5.
    let mut bad = raw.clone();
    bad[22] = 5;
    fix_crc(&mut bad);
    assert!(matches!(decode(bad), Err(DecodeError::Compression(_))));
    // lastOffsetDelta inconsistent with the count: a producer error, structurally fine.
    let mut bad = raw.clone();
    bad[23..27].copy_from_slice(&3i32.to_be_bytes());
    fix_crc(&mut bad);
    let b = RecordBatch::new(Bytes::from(bad)).unwrap();
    b.validate().unwrap();
    assert!(b.validate_from_producer().is_err());
    // Producer id without a sequence.
    let mut bad = raw.clone();
    bad[43..51].copy_from_slice(&5i64.to_be_bytes());
    fix_crc(&mut bad);
    assert!(RecordBatch::new(Bytes::from(bad))
        .unwrap()
        .validate_from_producer()
        .is_err());
}

#[test]
fn splitting_concatenated_batches() {
    let a = build_batch(Compression::None, &sample_records(3, 10)).unwrap();
    let b = build_batch(Compression::Zstd, &sample_records(5, 100)).unwrap();
    let mut all = BytesMut::new();
    all.extend_from_slice(&a);
    all.extend_from_slice(&b);
    let all = all.freeze();
    let batches: Vec<RecordBatch> = split_batches(all.clone()).map(Result::unwrap).collect();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0].as_bytes(), &a);
    assert_eq!(batches[1].as_bytes(), &b);
    assert_eq!(split_batches(Bytes::new()).count(), 0);

    // Every truncation: strict mode fails, lenient mode yields the complete batches only.
    for cut in 1..all.len() {
        let part = all.slice(..cut);
        let strict: Vec<_> = split_batches(part.clone()).collect();
        let complete = if cut >= a.len() { 1 } else { 0 };
        if cut == a.len() {
            assert_eq!(strict.len(), 1);
            assert!(strict[0].is_ok());
        } else {
            assert_eq!(strict.len(), complete + 1, "cut {cut}");
            assert!(strict.last().unwrap().is_err());
        }
        let lenient: Vec<_> = split_batches_lenient(part.clone())
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(lenient.len(), complete, "cut {cut}");
        let mut it = split_batches_lenient(part);
        for _ in it.by_ref() {}
        assert_eq!(it.remaining().len(), cut - complete * a.len());
    }
    // A length below the minimum and a legacy magic are errors even when lenient.
    let mut bad = a.to_vec();
    bad[8..12].copy_from_slice(&10i32.to_be_bytes());
    assert!(split_batches_lenient(Bytes::from(bad))
        .next()
        .unwrap()
        .is_err());
    let mut bad = a.to_vec();
    bad[16] = 1;
    assert_eq!(
        split_batches(Bytes::from(bad)).next().unwrap().unwrap_err(),
        DecodeError::UnsupportedMagic(1)
    );
}

// ---- compression ----

#[test]
fn codecs_round_trip_and_snappy_accepts_both_framings() {
    let data: Vec<u8> = (0..200_000u32)
        .map(|i| (i % 251) as u8 ^ (i / 1000) as u8)
        .collect();
    for codec in Compression::ALL {
        for len in [0, 1, 100, 65_536, 65_537, 200_000] {
            let c = compress(codec, &data[..len]).unwrap();
            assert_eq!(
                decompress(codec, &c, len).unwrap(),
                &data[..len],
                "{codec} {len}"
            );
            if len > 0 {
                assert_eq!(
                    decompress(codec, &c, len - 1),
                    Err(DecodeError::DecompressedTooLarge(len - 1)),
                    "{codec} {len}"
                );
            }
        }
    }
    // snappy: xerial header as snappy-java writes it.
    let c = compress(Compression::Snappy, b"abc").unwrap();
    assert_eq!(&c[..16], b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01");
    // Plain raw snappy (no framing) is accepted too.
    let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
    assert_eq!(
        decompress(Compression::Snappy, &raw, data.len()).unwrap(),
        data
    );
    // Two concatenated xerial streams.
    let mut two = compress(Compression::Snappy, b"hello ").unwrap();
    two.extend(compress(Compression::Snappy, b"world").unwrap());
    assert_eq!(
        decompress(Compression::Snappy, &two, 100).unwrap(),
        b"hello world"
    );
    // Truncated / corrupt input is an error, not a panic.
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let c = compress(codec, &data[..5000]).unwrap();
        for cut in [0, 1, 4, 10, c.len() / 2, c.len() - 1] {
            let _ = decompress(codec, &c[..cut], 10_000);
        }
    }
    // gzip: concatenated members are read like GZIPInputStream reads them.
    let mut gz = compress(Compression::Gzip, b"ab").unwrap();
    gz.extend(compress(Compression::Gzip, b"cd").unwrap());
    assert_eq!(decompress(Compression::Gzip, &gz, 10).unwrap(), b"abcd");
}

#[test]
fn snappy_declared_length_is_checked_before_allocating() {
    // A raw snappy block claiming 4 GiB - 1: varint ff ff ff ff 0f.
    let bomb = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
    assert!(matches!(
        decompress(Compression::Snappy, &bomb, 1 << 20),
        Err(DecodeError::DecompressedTooLarge(_))
    ));
    // Xerial blocks each below the limit but together above it.
    let block = snap::raw::Encoder::new()
        .compress_vec(&[0u8; 40_000])
        .unwrap();
    let mut x = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
    for _ in 0..10 {
        x.extend_from_slice(&(block.len() as u32).to_be_bytes());
        x.extend_from_slice(&block);
    }
    assert_eq!(
        decompress(Compression::Snappy, &x, 400_000).unwrap().len(),
        400_000
    );
    assert_eq!(
        decompress(Compression::Snappy, &x, 399_999),
        Err(DecodeError::DecompressedTooLarge(399_999))
    );
}

#[test]
fn compressed_batch_bomb_is_rejected_by_the_iterator() {
    let input = vec![NewRecord::new(0, vec![0u8; 4 << 20])];
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let bytes = build_batch(codec, &input).unwrap();
        assert!(bytes.len() < 300_000, "{codec}: {}", bytes.len());
        let b = RecordBatch::new(bytes).unwrap();
        b.validate().unwrap();
        assert!(matches!(
            b.records(1 << 20),
            Err(DecodeError::DecompressedTooLarge(_))
        ));
        assert_eq!(b.records_vec(8 << 20).unwrap().len(), 1);
    }
}

// ---- legacy message sets ----

fn legacy_records(n: usize, first_offset: i64) -> Vec<LegacyRecord> {
    (0..n)
        .map(|i| {
            LegacyRecord::new(
                first_offset + i as i64,
                1_600_000_000_000 + i as i64,
                if i % 3 == 0 {
                    None
                } else {
                    Some(Bytes::from(format!("k{i}")))
                },
                if i % 4 == 1 {
                    None
                } else {
                    Some(Bytes::from(vec![i as u8; i * 10]))
                },
            )
        })
        .collect()
}

fn opts() -> LegacyDecodeOptions {
    LegacyDecodeOptions {
        max_decompressed: MAX,
        trailing: TrailingPartial::Reject,
    }
}

#[test]
fn known_answer_legacy_message() {
    // magic 1, offset 3, attributes 0, timestamp 1000, key null, value "hi".
    let mut covered = vec![1u8, 0];
    covered.extend_from_slice(&1000i64.to_be_bytes());
    covered.extend_from_slice(&(-1i32).to_be_bytes());
    covered.extend_from_slice(&2i32.to_be_bytes());
    covered.extend_from_slice(b"hi");
    let crc = crc32_ieee_bitwise(&covered);
    let mut raw = Vec::new();
    raw.extend_from_slice(&3i64.to_be_bytes());
    raw.extend_from_slice(&((4 + covered.len()) as i32).to_be_bytes());
    raw.extend_from_slice(&crc.to_be_bytes());
    raw.extend_from_slice(&covered);
    assert_eq!(raw.len(), 12 + 24);

    let m = decode_message(3, Bytes::from(raw[12..].to_vec())).unwrap();
    assert_eq!(m.offset, 3);
    assert_eq!(m.magic, 1);
    assert_eq!(m.attributes, 0);
    assert_eq!(m.timestamp, 1000);
    assert_eq!(m.key, None);
    assert_eq!(m.value.as_deref(), Some(&b"hi"[..]));
    assert_eq!(m.compression().unwrap(), Compression::None);

    let recs = decode_message_set(Bytes::from(raw.clone()), opts()).unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!((recs[0].offset, recs[0].timestamp), (3, 1000));

    let encoded = encode_message_set(
        MAGIC_V1,
        Compression::None,
        TimestampType::CreateTime,
        &[LegacyRecord::new(
            3,
            1000,
            None,
            Some(Bytes::from_static(b"hi")),
        )],
    )
    .unwrap();
    assert_eq!(&encoded[..], &raw[..]);

    // The same as magic 0: no timestamp.
    let mut covered0 = vec![0u8, 0];
    covered0.extend_from_slice(&(-1i32).to_be_bytes());
    covered0.extend_from_slice(&2i32.to_be_bytes());
    covered0.extend_from_slice(b"hi");
    let mut raw0 = Vec::new();
    raw0.extend_from_slice(&3i64.to_be_bytes());
    raw0.extend_from_slice(&((4 + covered0.len()) as i32).to_be_bytes());
    raw0.extend_from_slice(&crc32_ieee_bitwise(&covered0).to_be_bytes());
    raw0.extend_from_slice(&covered0);
    let encoded0 = encode_message_set(
        MAGIC_V0,
        Compression::None,
        TimestampType::CreateTime,
        &[LegacyRecord::new(
            3,
            1000,
            None,
            Some(Bytes::from_static(b"hi")),
        )],
    )
    .unwrap();
    assert_eq!(&encoded0[..], &raw0[..]);
    let recs = decode_message_set(encoded0, opts()).unwrap();
    assert_eq!(recs[0].timestamp, NO_TIMESTAMP);

    // Corruption.
    let mut bad = raw.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(matches!(
        decode_message_set(Bytes::from(bad), opts()),
        Err(DecodeError::CrcMismatch { .. })
    ));
    let mut bad = raw.clone();
    bad[16] = 2;
    assert_eq!(
        decode_message_set(Bytes::from(bad), opts()),
        Err(DecodeError::UnsupportedMagic(2))
    );
}

#[test]
fn legacy_round_trips_every_magic_and_codec() {
    for magic in [MAGIC_V0, MAGIC_V1] {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
        ] {
            for n in [1, 2, 17] {
                let input = legacy_records(n, 100);
                let set =
                    encode_message_set(magic, codec, TimestampType::CreateTime, &input).unwrap();
                let out = decode_message_set(set.clone(), opts()).unwrap();
                assert_eq!(out.len(), n);
                for (got, want) in out.iter().zip(&input) {
                    assert_eq!(got.offset, want.offset, "magic {magic} {codec}");
                    assert_eq!(got.key, want.key);
                    assert_eq!(got.value, want.value);
                    assert_eq!(got.magic, magic);
                    assert_eq!(got.compression, codec);
                    let ts = if magic == MAGIC_V0 {
                        NO_TIMESTAMP
                    } else {
                        want.timestamp
                    };
                    assert_eq!(got.timestamp, ts);
                }
                // Shallow view: one wrapper for a compressed set.
                let shallow: Vec<_> = MessageSetIter::new(set.clone(), TrailingPartial::Reject)
                    .collect::<Result<_, _>>()
                    .unwrap();
                if codec == Compression::None {
                    assert_eq!(shallow.len(), n);
                } else {
                    assert_eq!(shallow.len(), 1);
                    assert_eq!(shallow[0].offset, 100 + n as i64 - 1);
                    assert_eq!(shallow[0].compression().unwrap(), codec);
                }

                // legacy -> v2 -> legacy keeps offsets, keys, values, timestamps.
                for target in Compression::ALL {
                    let batch = message_set_to_batch(&out, target).unwrap();
                    let b = RecordBatch::new(batch.clone()).unwrap();
                    b.validate_from_producer().unwrap();
                    assert_eq!(b.base_offset(), 100);
                    let back_codec = if target == Compression::Zstd {
                        None
                    } else {
                        Some(target)
                    };
                    let Some(_) = back_codec else {
                        assert!(matches!(
                            batches_to_message_set(batch, magic, MAX),
                            Err(ConvertError::Encode(_))
                        ));
                        continue;
                    };
                    let set2 = batches_to_message_set(batch, magic, MAX).unwrap();
                    let out2 = decode_message_set(set2, opts()).unwrap();
                    assert_eq!(out2.len(), n);
                    for (a, b) in out2.iter().zip(&out) {
                        assert_eq!((a.offset, a.timestamp), (b.offset, b.timestamp));
                        assert_eq!((&a.key, &a.value), (&b.key, &b.value));
                        assert_eq!(a.compression, target);
                    }
                }
            }
        }
    }
}

#[test]
fn legacy_log_append_time_and_kafka_offset_rules() {
    // A magic-1 wrapper with log-append time gives its timestamp to every inner message.
    let input = legacy_records(3, 10);
    let set = encode_message_set(
        MAGIC_V1,
        Compression::Gzip,
        TimestampType::LogAppendTime,
        &input,
    )
    .unwrap();
    let out = decode_message_set(set.clone(), opts()).unwrap();
    let max_ts = input.iter().map(|r| r.timestamp).max().unwrap();
    for r in &out {
        assert_eq!(r.timestamp, max_ts);
        assert_eq!(r.timestamp_type, TimestampType::LogAppendTime);
    }
    // Wrapper offset 0 (librdkafka): inner relative offsets are absolute from 0.
    let mut zero = set.to_vec();
    zero[..8].copy_from_slice(&0i64.to_be_bytes());
    let out = decode_message_set(Bytes::from(zero), opts()).unwrap();
    assert_eq!(out.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 1, 2]);
    // Wrapper offset below the last inner offset (but not 0) is rejected.
    let mut low = set.to_vec();
    low[..8].copy_from_slice(&1i64.to_be_bytes());
    assert!(decode_message_set(Bytes::from(low), opts()).is_err());

    // Messages from a producer with offsets 0,0,0: converted with consecutive offsets.
    let mut same = legacy_records(3, 0);
    for r in &mut same {
        r.offset = 0;
    }
    let batch = message_set_to_batch(&same, Compression::None).unwrap();
    let b = RecordBatch::new(batch).unwrap();
    b.validate_from_producer().unwrap();
    let offs: Vec<i64> = b.records(MAX).unwrap().map(|r| r.unwrap().offset).collect();
    assert_eq!(offs, [0, 1, 2]);
}

#[test]
fn legacy_wrappers_that_kafka_rejects() {
    let inner = encode_message_set(
        MAGIC_V1,
        Compression::Gzip,
        TimestampType::CreateTime,
        &legacy_records(2, 0),
    )
    .unwrap();
    // A compressed wrapper whose inner message is itself compressed.
    let nested = compress_for_magic(Compression::Gzip, 1, &inner).unwrap();
    let mut set = Vec::new();
    push_raw_message(&mut set, 5, 1, 1, Some(&nested));
    assert!(decode_message_set(Bytes::from(set), opts()).is_err());
    // Inner magic differing from the wrapper's.
    let v0 = encode_message_set(
        MAGIC_V0,
        Compression::None,
        TimestampType::CreateTime,
        &legacy_records(2, 0),
    )
    .unwrap();
    let c = compress_for_magic(Compression::Gzip, 1, &v0).unwrap();
    let mut set = Vec::new();
    push_raw_message(&mut set, 5, 1, 1, Some(&c));
    assert!(decode_message_set(Bytes::from(set), opts()).is_err());
    // No inner messages; null value; zstd.
    let empty = compress_for_magic(Compression::Gzip, 1, &[]).unwrap();
    for (attr, value) in [(1i8, Some(&empty[..])), (1, None), (4, Some(&c[..]))] {
        let mut set = Vec::new();
        push_raw_message(&mut set, 5, 1, attr, value);
        assert!(decode_message_set(Bytes::from(set), opts()).is_err());
    }
    // Decompression budget.
    let big = legacy_records(50, 0);
    let set =
        encode_message_set(MAGIC_V1, Compression::Lz4, TimestampType::CreateTime, &big).unwrap();
    let small = LegacyDecodeOptions {
        max_decompressed: 1000,
        trailing: TrailingPartial::Reject,
    };
    assert_eq!(
        decode_message_set(set, small),
        Err(DecodeError::DecompressedTooLarge(1000))
    );
}

#[test]
fn legacy_partial_trailing_message() {
    let set = encode_message_set(
        MAGIC_V1,
        Compression::None,
        TimestampType::CreateTime,
        &legacy_records(3, 0),
    )
    .unwrap();
    let boundaries: Vec<usize> = {
        let mut at = 0;
        let mut v = vec![];
        while at < set.len() {
            at += 12 + i32::from_be_bytes(set[at + 8..at + 12].try_into().unwrap()) as usize;
            v.push(at);
        }
        v
    };
    for cut in 1..set.len() {
        let part = set.slice(..cut);
        let lenient = LegacyDecodeOptions {
            max_decompressed: MAX,
            trailing: TrailingPartial::Ignore,
        };
        let strict = decode_message_set(part.clone(), opts());
        let ok = decode_message_set(part, lenient).unwrap();
        assert_eq!(ok.len(), boundaries.iter().filter(|&&b| b <= cut).count());
        assert_eq!(strict.is_ok(), boundaries.contains(&cut), "cut {cut}");
    }
}

/// Writes a message with arbitrary attributes and value (for invalid wrappers).
fn push_raw_message(
    out: &mut Vec<u8>,
    offset: i64,
    magic: i8,
    attributes: i8,
    value: Option<&[u8]>,
) {
    let mut covered = vec![magic as u8, attributes as u8];
    if magic == 1 {
        covered.extend_from_slice(&0i64.to_be_bytes());
    }
    covered.extend_from_slice(&(-1i32).to_be_bytes());
    match value {
        None => covered.extend_from_slice(&(-1i32).to_be_bytes()),
        Some(v) => {
            covered.extend_from_slice(&(v.len() as i32).to_be_bytes());
            covered.extend_from_slice(v);
        }
    }
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&((covered.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(&crc32_ieee_bitwise(&covered).to_be_bytes());
    out.extend_from_slice(&covered);
}

#[test]
fn down_conversion_drops_control_batches_and_keeps_offsets() {
    let data = build_batch(Compression::None, &sample_records(3, 5)).unwrap();
    let control = RecordBatchBuilder::new(Compression::None)
        .base_offset(3)
        .control(true)
        .with_records(&[NewRecord {
            timestamp: 0,
            key: Some(Bytes::from_static(&[0, 0, 0, 1])),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
            headers: vec![],
        }])
        .unwrap()
        .build()
        .unwrap();
    let more = RecordBatchBuilder::new(Compression::Snappy)
        .base_offset(4)
        .with_records(&sample_records(2, 5))
        .unwrap()
        .build()
        .unwrap();
    let all = Bytes::from([&data[..], &control[..], &more[..]].concat());
    let set = batches_to_message_set(all, MAGIC_V1, MAX).unwrap();
    let out = decode_message_set(set, opts()).unwrap();
    assert_eq!(
        out.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [0, 1, 2, 4, 5]
    );
}

// ---- error codes ----

#[test]
fn error_codes_match_kafka() {
    assert_eq!(ErrorCode::from_code(-1), ErrorCode::UnknownServerError);
    assert_eq!(ErrorCode::from_code(0), ErrorCode::None);
    assert_eq!(ErrorCode::NotLeaderOrFollower.code(), 6);
    assert_eq!(
        ErrorCode::NotLeaderOrFollower.name(),
        "NOT_LEADER_OR_FOLLOWER"
    );
    assert!(ErrorCode::NotLeaderOrFollower.is_retriable());
    assert!(ErrorCode::CorruptMessage.is_retriable());
    assert!(!ErrorCode::MessageTooLarge.is_retriable());
    assert!(!ErrorCode::None.is_retriable());
    assert_eq!(ErrorCode::UnsupportedCompressionType.code(), 76);
    assert_eq!(ErrorCode::InvalidRecord.code(), 87);
    assert_eq!(ErrorCode::UnknownTopicId.code(), 100);
    assert!(ErrorCode::UnknownTopicId.is_retriable());
    assert_eq!(ErrorCode::InvalidRegistration.code(), 119);
    assert_eq!(ErrorCode::VoterNotFound.code(), 127);
    assert_eq!(ErrorCode::from_code(500), ErrorCode::Unknown(500));
    assert_eq!(ErrorCode::Unknown(500).code(), 500);
    assert!(!ErrorCode::Unknown(500).is_retriable());
    assert_eq!(
        ErrorCode::RequestTimedOut.to_string(),
        "REQUEST_TIMED_OUT (7)"
    );
    assert!(ErrorCode::None.is_ok());
    for e in ErrorCode::ALL {
        assert_eq!(ErrorCode::from_code(e.code()), *e);
        assert!(e
            .name()
            .bytes()
            .all(|c| c.is_ascii_uppercase() || c == b'_'));
    }
    let retriable = ErrorCode::ALL.iter().filter(|e| e.is_retriable()).count();
    assert_eq!(retriable, 31);
}

#[test]
fn lz4_magic0_uses_kafkas_header_checksum() {
    let data = b"some data some data some data";
    let c0 = compress_for_magic(Compression::Lz4, 0, data).unwrap();
    let c1 = compress_for_magic(Compression::Lz4, 1, data).unwrap();
    assert_ne!(c0[6], c1[6]);
    assert_eq!(
        decompress_for_magic(Compression::Lz4, 0, &c0, 100).unwrap(),
        data
    );
    assert_eq!(
        decompress_for_magic(Compression::Lz4, 0, &c1, 100).unwrap(),
        data
    );
    assert!(decompress_for_magic(Compression::Lz4, 1, &c0, 100).is_err());
    // Round trip through a magic-0 lz4 message set.
    let input = legacy_records(5, 0);
    let set = encode_message_set(
        MAGIC_V0,
        Compression::Lz4,
        TimestampType::CreateTime,
        &input,
    )
    .unwrap();
    assert_eq!(decode_message_set(set, opts()).unwrap().len(), 5);
}
