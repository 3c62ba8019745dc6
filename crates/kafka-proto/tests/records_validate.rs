//! Producer batch validation (`records::validate`): hand-built bad batches are refused with
//! Kafka's error codes, every batch the builder makes is accepted, an uncompressed batch is
//! validated without allocating, and (proptest) arbitrary and mutated input never panics the
//! validator and whatever it accepts decodes fully.
//!
//! The proptest `validation_survives_arbitrary_and_mutated_input` runs 2,000 cases by default;
//! scale it with `VALIDATION_FUZZ_CASES`, e.g. a million cases:
//!
//! ```sh
//! VALIDATION_FUZZ_CASES=1000000 cargo test -p kafka-proto --release --test records_validate \
//!     validation_survives -- --nocapture
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::OnceLock;

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use kafka_proto::records::validate::{
    check_produce_shape, validate_produce_records, ProduceLimits, ProduceValidationError,
};
use kafka_proto::records::{compress, Compression, NewRecord, RecordBatch, RecordBatchBuilder};
use proptest::prelude::*;

/// Counts the allocations made by the current thread (tests run on several threads).
struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to `System`; the counter neither allocates nor panics.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator that made `ptr`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator that made `ptr`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

/// The broker clock of these tests.
const NOW: i64 = 1_700_000_000_000;
const MAX_BATCH: usize = 1 << 20;

fn limits() -> ProduceLimits {
    ProduceLimits::new(MAX_BATCH, NOW)
}

fn validate(batch: &[u8]) -> Result<u32, ProduceValidationError> {
    validate_produce_records(Bytes::copy_from_slice(batch), 9, &limits()).map(|(_, n)| n)
}

fn code(batch: &[u8]) -> ErrorCode {
    match validate(batch) {
        Ok(n) => panic!("accepted a bad batch ({n} records)"),
        Err(e) => e.error_code(),
    }
}

// ---- building batches and records by hand ----

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_varint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// One record's body (after its length): attributes, deltas, key, value, headers.
fn record_body(offset_delta: i64, timestamp_delta: i64, value: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8];
    put_varint(&mut b, timestamp_delta);
    put_varint(&mut b, offset_delta);
    put_varint(&mut b, -1); // null key
    put_varint(&mut b, value.len() as i64);
    b.extend_from_slice(value);
    put_varint(&mut b, 0); // no headers
    b
}

/// A record with its length prefix (null key, no headers, timestamp delta 0).
fn record(offset_delta: i64, value: &[u8]) -> Vec<u8> {
    let body = record_body(offset_delta, 0, value);
    let mut out = Vec::new();
    put_varint(&mut out, body.len() as i64);
    out.extend_from_slice(&body);
    out
}

/// Header fields of a hand-built batch.
#[derive(Clone, Copy)]
struct Header {
    base_offset: i64,
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    record_count: i32,
}

impl Header {
    fn new(count: i32) -> Header {
        Header {
            base_offset: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: NOW - 1000,
            max_timestamp: NOW - 1000,
            record_count: count,
        }
    }
}

/// A v2 batch around `records` (the records section as sent), with a correct CRC.
fn raw_batch(h: Header, records: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(61 + records.len());
    b.extend_from_slice(&h.base_offset.to_be_bytes());
    b.extend_from_slice(&((49 + records.len()) as i32).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
    b.push(2); // magic
    b.extend_from_slice(&[0; 4]); // crc, below
    b.extend_from_slice(&h.attributes.to_be_bytes());
    b.extend_from_slice(&h.last_offset_delta.to_be_bytes());
    b.extend_from_slice(&h.base_timestamp.to_be_bytes());
    b.extend_from_slice(&h.max_timestamp.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    b.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
    b.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    b.extend_from_slice(&h.record_count.to_be_bytes());
    b.extend_from_slice(records);
    fix_crc(&mut b);
    b
}

fn fix_crc(b: &mut [u8]) {
    if b.len() >= 21 {
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    }
}

fn records(values: &[&[u8]]) -> Vec<u8> {
    values
        .iter()
        .enumerate()
        .flat_map(|(i, v)| record(i as i64, v))
        .collect()
}

fn built(codec: Compression, n: usize, value_len: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(codec);
    for i in 0..n {
        let r = NewRecord::new(NOW - 5000 + i as i64, vec![b'v'; value_len])
            .with_key(format!("k{i}"))
            .with_header("h", Some(Bytes::from_static(b"x")));
        b.append(&r).unwrap();
    }
    b.build().unwrap()
}

// ---- the hand-built cases ----

#[test]
fn a_hand_built_good_batch_is_accepted() {
    let b = raw_batch(Header::new(3), &records(&[b"a", b"bb", b"ccc"]));
    assert_eq!(validate(&b).unwrap(), 3);
}

#[test]
fn builder_batches_of_every_codec_are_accepted() {
    for codec in Compression::ALL {
        for n in [1, 2, 50] {
            let b = built(codec, n, 100);
            assert_eq!(validate(&b).unwrap(), n as u32, "{codec:?} x {n}");
        }
    }
}

#[test]
fn count_mismatches_are_invalid_record() {
    // The header says 3 records, the section holds 2.
    let b = raw_batch(Header::new(3), &records(&[b"a", b"b"]));
    assert_eq!(code(&b), ErrorCode::InvalidRecord);
    // The header says 1, the section holds 2 (trailing record).
    let b = raw_batch(Header::new(1), &records(&[b"a", b"b"]));
    assert_eq!(code(&b), ErrorCode::InvalidRecord);
    // lastOffsetDelta disagrees with the count.
    let mut h = Header::new(2);
    h.last_offset_delta = 5;
    let b = raw_batch(h, &records(&[b"a", b"b"]));
    assert_eq!(code(&b), ErrorCode::InvalidRecord);
    // Zero and negative counts.
    for count in [0, -1] {
        let mut h = Header::new(1);
        h.record_count = count;
        h.last_offset_delta = count - 1;
        assert_eq!(code(&raw_batch(h, &[])), ErrorCode::InvalidRecord);
    }
}

#[test]
fn trailing_bytes_are_invalid_record() {
    // After the last record.
    let mut section = records(&[b"a"]);
    section.push(0);
    assert_eq!(
        code(&raw_batch(Header::new(1), &section)),
        ErrorCode::InvalidRecord
    );
    // Inside a record: its length claims one byte more than its fields take.
    let mut body = record_body(0, 0, b"a");
    body.push(0);
    let mut section = Vec::new();
    put_varint(&mut section, body.len() as i64);
    section.extend_from_slice(&body);
    assert_eq!(
        code(&raw_batch(Header::new(1), &section)),
        ErrorCode::InvalidRecord
    );
}

#[test]
fn truncated_records_are_invalid_record() {
    let section = records(&[b"hello", b"world"]);
    for cut in 1..section.len() {
        let b = raw_batch(Header::new(2), &section[..cut]);
        assert_eq!(code(&b), ErrorCode::InvalidRecord, "cut at {cut}");
    }
    // A record whose length prefix runs past the section.
    let mut section = Vec::new();
    put_varint(&mut section, 100);
    section.extend_from_slice(&record_body(0, 0, b"x"));
    assert_eq!(
        code(&raw_batch(Header::new(1), &section)),
        ErrorCode::InvalidRecord
    );
}

#[test]
fn offset_deltas_out_of_order_are_invalid_record() {
    for deltas in [[0i64, 0], [1, 2], [1, 0], [0, 2], [-1, 0]] {
        let section: Vec<u8> = deltas.iter().flat_map(|&d| record(d, b"v")).collect();
        assert_eq!(
            code(&raw_batch(Header::new(2), &section)),
            ErrorCode::InvalidRecord,
            "{deltas:?}"
        );
    }
}

#[test]
fn a_gzip_batch_claiming_i32_max_records_with_nothing_inside_is_refused() {
    let mut h = Header::new(i32::MAX);
    h.attributes = Compression::Gzip.id() as i16;
    // Nothing at all in the records section.
    assert_eq!(code(&raw_batch(h, &[])), ErrorCode::InvalidRecord);
    // A valid gzip stream of nothing.
    let empty = compress(Compression::Gzip, &[]).unwrap();
    assert_eq!(code(&raw_batch(h, &empty)), ErrorCode::InvalidRecord);
    // A valid gzip stream of one record.
    let one = compress(Compression::Gzip, &records(&[b"x"])).unwrap();
    assert_eq!(code(&raw_batch(h, &one)), ErrorCode::InvalidRecord);
    // Every codec, the same.
    for codec in Compression::ALL {
        let mut h = Header::new(i32::MAX);
        h.attributes = codec.id() as i16;
        let one = compress(codec, &records(&[b"x"])).unwrap();
        assert!(validate(&raw_batch(h, &one)).is_err(), "{codec:?}");
    }
}

#[test]
fn seven_ff_bytes_as_one_record_are_invalid_record() {
    let b = raw_batch(Header::new(1), &[0xff; 7]);
    assert_eq!(code(&b), ErrorCode::InvalidRecord);
}

#[test]
fn malformed_record_fields_are_invalid_record() {
    // A null header key, a negative header count, a key length below -1, a varint too long.
    let mut bodies = Vec::new();
    let mut b = record_body(0, 0, b"v");
    b.pop();
    put_varint(&mut b, 1);
    put_varint(&mut b, -1); // null key
    put_varint(&mut b, -1);
    bodies.push(b);
    let mut b = record_body(0, 0, b"v");
    b.pop();
    put_varint(&mut b, -3);
    bodies.push(b);
    let mut b = vec![0u8, 0, 0];
    put_varint(&mut b, -7);
    bodies.push(b);
    bodies.push(vec![
        0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    ]);
    for body in bodies {
        let mut section = Vec::new();
        put_varint(&mut section, body.len() as i64);
        section.extend_from_slice(&body);
        assert_eq!(
            code(&raw_batch(Header::new(1), &section)),
            ErrorCode::InvalidRecord,
            "{body:?}"
        );
    }
}

#[test]
fn crc_framing_size_and_offsets_get_kafkas_codes() {
    let good = raw_batch(Header::new(1), &records(&[b"a"]));
    // A flipped byte in the CRC-covered part: CORRUPT_MESSAGE.
    let mut bad = good.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert_eq!(code(&bad), ErrorCode::CorruptMessage);
    // A length field beyond the data, or below the minimum: CORRUPT_MESSAGE.
    let mut long = good.clone();
    long[8..12].copy_from_slice(&1000i32.to_be_bytes());
    assert_eq!(code(&long), ErrorCode::CorruptMessage);
    let mut short = good.clone();
    short[8..12].copy_from_slice(&10i32.to_be_bytes());
    assert_eq!(code(&short), ErrorCode::CorruptMessage);
    // A base offset other than 0: INVALID_RECORD.
    let mut h = Header::new(1);
    h.base_offset = 7;
    assert_eq!(
        code(&raw_batch(h, &records(&[b"a"]))),
        ErrorCode::InvalidRecord
    );
    // Above message.max.bytes: MESSAGE_TOO_LARGE.
    let big = built(Compression::None, 1, MAX_BATCH);
    assert_eq!(code(&big), ErrorCode::MessageTooLarge);
    // A control batch: INVALID_RECORD.
    let mut h = Header::new(1);
    h.attributes = 0x20;
    assert_eq!(
        code(&raw_batch(h, &records(&[b"a"]))),
        ErrorCode::InvalidRecord
    );
    // An unknown codec: INVALID_RECORD.
    let mut h = Header::new(1);
    h.attributes = 6;
    assert_eq!(
        code(&raw_batch(h, &records(&[b"a"]))),
        ErrorCode::InvalidRecord
    );
}

#[test]
fn more_than_one_batch_is_invalid_record() {
    let one = raw_batch(Header::new(1), &records(&[b"a"]));
    let two = [one.clone(), one.clone()].concat();
    for version in [0, 2, 3, 9, 11] {
        let e = validate_produce_records(Bytes::from(two.clone()), version, &limits()).unwrap_err();
        assert_eq!(e.error_code(), ErrorCode::InvalidRecord, "v{version}");
    }
    // Trailing garbage after the batch counts too.
    let mut more = one.clone();
    more.push(0);
    assert_eq!(code(&more), ErrorCode::InvalidRecord);
    // A partial batch: CORRUPT_MESSAGE.
    assert_eq!(code(&one[..one.len() - 1]), ErrorCode::CorruptMessage);
    // v3+ needs magic 2 (and some data at all).
    let mut legacy = one.clone();
    legacy[16] = 1;
    let e = check_produce_shape(&Bytes::from(legacy.clone()), 3).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::InvalidRecord);
    assert!(check_produce_shape(&Bytes::from(legacy), 2).is_ok());
    let e = check_produce_shape(&Bytes::from_static(b"short"), 9).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::InvalidRecord);
}

#[test]
fn timestamps_far_in_the_future_are_invalid_timestamp() {
    let hour = 3_600_000;
    // The header's maxTimestamp.
    let mut h = Header::new(1);
    h.max_timestamp = NOW + hour + 1;
    assert_eq!(
        code(&raw_batch(h, &records(&[b"a"]))),
        ErrorCode::InvalidTimestamp
    );
    // A record's timestamp (base + delta), the header saying otherwise.
    let mut section = Vec::new();
    let body = record_body(0, 2 * hour, b"a");
    put_varint(&mut section, body.len() as i64);
    section.extend_from_slice(&body);
    let mut h = Header::new(1);
    h.base_timestamp = NOW;
    h.max_timestamp = NOW;
    assert_eq!(code(&raw_batch(h, &section)), ErrorCode::InvalidTimestamp);
    // Exactly one hour ahead, in the past, and -1 are fine.
    for ts in [NOW + hour, NOW - 10 * hour, -1, i64::MIN] {
        let mut h = Header::new(1);
        h.base_timestamp = ts;
        h.max_timestamp = ts;
        assert_eq!(validate(&raw_batch(h, &records(&[b"a"]))).unwrap(), 1);
    }
    // The limit is a setting.
    let mut h = Header::new(1);
    h.max_timestamp = NOW + 10;
    h.base_timestamp = NOW + 10;
    let strict = limits().with_timestamp_after_max_ms(0);
    let e = validate_produce_records(Bytes::from(raw_batch(h, &records(&[b"a"]))), 9, &strict)
        .unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::InvalidTimestamp);
}

#[test]
fn zstd_needs_produce_v7() {
    let b = built(Compression::Zstd, 3, 10);
    let e = validate_produce_records(b.clone(), 6, &limits()).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::UnsupportedCompressionType);
    assert_eq!(validate_produce_records(b, 7, &limits()).unwrap().1, 3);
}

#[test]
fn decompression_is_bounded() {
    // The bound derived from message.max.bytes: 16 times it.
    assert_eq!(
        ProduceLimits::new(64 << 10, NOW).max_decompressed_bytes,
        1 << 20
    );
    // 200 records of 64 KiB of one byte compress to under 1 MiB and decompress to ~12.8 MiB,
    // above a 1 MiB bound.
    let small = ProduceLimits {
        max_decompressed_bytes: 1 << 20,
        ..limits()
    };
    for codec in [
        Compression::Gzip,
        Compression::Zstd,
        Compression::Lz4,
        Compression::Snappy,
    ] {
        let b = built(codec, 200, 64 << 10);
        assert!(b.len() < 1 << 20, "{codec:?} compressed to {}", b.len());
        let e = validate_produce_records(b, 9, &small).unwrap_err();
        assert_eq!(e.error_code(), ErrorCode::MessageTooLarge, "{codec:?}: {e}");
    }
}

#[test]
fn an_uncompressed_batch_is_validated_without_allocating() {
    let b = built(Compression::None, 50, 1024);
    // A buffer made from a Vec allocates its shared header on its first clone; the server's
    // request buffers are shared already, and so is this one after this clone.
    let _shared = b.clone();
    let lim = limits();
    let before = allocations();
    let r = validate_produce_records(b, 9, &lim);
    let made = allocations() - before;
    assert_eq!(r.map(|(_, n)| n), Ok(50));
    assert_eq!(made, 0, "validation allocated {made} times");
}

// ---- property tests ----

fn codec() -> impl Strategy<Value = Compression> {
    prop::sample::select(Compression::ALL.to_vec())
}

fn new_record() -> impl Strategy<Value = NewRecord> {
    (
        -100_000i64..100_000,
        prop::collection::vec(any::<u8>(), 0..300),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..20)),
        prop::collection::vec(
            (
                "[a-z]{0,6}",
                prop::option::of(prop::collection::vec(any::<u8>(), 0..10)),
            ),
            0..3,
        ),
    )
        .prop_map(|(ts, value, key, headers)| {
            let mut r = NewRecord::new(NOW + ts, value);
            if let Some(k) = key {
                r = r.with_key(k);
            }
            for (k, v) in headers {
                r = r.with_header(k, v.map(Bytes::from));
            }
            r
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the builder makes, with any codec, producer fields or timestamps in range, is
    /// accepted with its record count.
    #[test]
    fn every_built_batch_is_accepted(
        codec in codec(),
        records in prop::collection::vec(new_record(), 1..40),
        producer in prop::option::of((0i64..1 << 40, 0i16..100, 0i32..1 << 30)),
        transactional in any::<bool>(),
    ) {
        let mut b = RecordBatchBuilder::new(codec);
        if let Some((id, epoch, seq)) = producer {
            b = b.producer(id, epoch, seq).transactional(transactional);
        }
        for r in &records {
            b.append(r).unwrap();
        }
        let batch = b.build().unwrap();
        prop_assert_eq!(validate(&batch), Ok(records.len() as u32));
    }
}

/// A few valid batches of every codec, built once, for the mutation cases.
fn seeds() -> &'static Vec<Vec<u8>> {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut out = Vec::new();
        for codec in Compression::ALL {
            for n in [1, 3, 17] {
                out.push(built(codec, n, 20).to_vec());
            }
        }
        out.push(raw_batch(Header::new(2), &records(&[b"", b"x"])));
        out
    })
}

/// One way to damage a batch.
#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(usize, u8),
    SetByte(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    /// Overwrite 4 bytes with an extreme i32 (lengths, counts, deltas).
    SetI32(usize, i32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Mutation::SetByte(i, v)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..12))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1usize..12).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (
            any::<usize>(),
            prop::sample::select(vec![0, 1, -1, -2, i32::MAX, i32::MIN, 7, 0x7f, 0x80])
        )
            .prop_map(|(i, v)| Mutation::SetI32(i, v)),
    ]
}

fn apply(b: &mut Vec<u8>, m: &Mutation) {
    let len = b.len().max(1);
    match *m {
        Mutation::FlipBit(i, bit) => {
            if let Some(x) = b.get_mut(i % len) {
                *x ^= 1 << bit;
            }
        }
        Mutation::SetByte(i, v) => {
            if let Some(x) = b.get_mut(i % len) {
                *x = v;
            }
        }
        Mutation::Truncate(i) => b.truncate(i % len),
        Mutation::Insert(i, ref v) => {
            let at = i % (b.len() + 1);
            b.splice(at..at, v.iter().copied());
        }
        Mutation::Delete(i, n) => {
            let at = i % len;
            let end = (at + n).min(b.len());
            if at < end {
                b.drain(at..end);
            }
        }
        Mutation::SetI32(i, v) => {
            let at = i % len;
            if at + 4 <= b.len() {
                b[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
        }
    }
}

/// Input for the validator: arbitrary bytes, or a valid batch mutated (its CRC then often
/// recomputed, so the damage reaches the record walk instead of stopping at the CRC check).
#[derive(Debug, Clone)]
enum Input {
    Arbitrary(Vec<u8>),
    Mutated {
        seed: usize,
        mutations: Vec<Mutation>,
        fix_crc: bool,
    },
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..200).prop_map(Input::Arbitrary),
        4 => (any::<usize>(), prop::collection::vec(mutation(), 1..4), any::<bool>())
            .prop_map(|(seed, mutations, fix_crc)| Input::Mutated { seed, mutations, fix_crc }),
    ]
}

fn materialise(input: &Input) -> Vec<u8> {
    match input {
        Input::Arbitrary(v) => v.clone(),
        Input::Mutated {
            seed,
            mutations,
            fix_crc: fix,
        } => {
            let seeds = seeds();
            let mut b = seeds[seed % seeds.len()].clone();
            for m in mutations {
                apply(&mut b, m);
            }
            if *fix {
                fix_crc(&mut b);
            }
            b
        }
    }
}

fn fuzz_cases() -> u32 {
    std::env::var("VALIDATION_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

/// The validator's oracle: it never panics, and a batch it accepts decodes with the full record
/// decoder to exactly the count it reported, offsets 0.. in order.
#[test]
fn validation_survives_arbitrary_and_mutated_input() {
    let cases = fuzz_cases();
    let start = std::time::Instant::now();
    let accepted = std::sync::atomic::AtomicU64::new(0);
    // How many inputs were refused with each Kafka error code.
    let refused = std::cell::RefCell::new(std::collections::BTreeMap::<&str, u64>::new());
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let lim = ProduceLimits::new(1 << 20, NOW);
    runner
        .run(&(input(), 0i16..12), |(input, version)| {
            let bytes = Bytes::from(materialise(&input));
            let outcome = validate_produce_records(bytes.clone(), version, &lim);
            if let Err(e) = &outcome {
                *refused
                    .borrow_mut()
                    .entry(e.error_code().name())
                    .or_default() += 1;
            }
            if let Ok((batch, count)) = outcome {
                accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let b = RecordBatch::new(bytes).expect("an accepted batch is a batch");
                b.validate_from_producer()
                    .expect("and passes the header checks");
                let records = b
                    .records_vec(lim.max_decompressed_bytes)
                    .expect("and decodes");
                prop_assert_eq!(records.len() as u32, count);
                prop_assert_eq!(batch.record_count() as u32, count);
                for (i, r) in records.iter().enumerate() {
                    prop_assert_eq!(r.offset_delta as usize, i);
                }
            }
            Ok(())
        })
        .unwrap();
    println!(
        "validation fuzz: {cases} cases, {} accepted, refused {:?}, {:.1} s",
        accepted.into_inner(),
        refused.into_inner(),
        start.elapsed().as_secs_f64()
    );
}
