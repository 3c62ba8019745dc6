//! The codec's hot paths: decoding a Produce request (one batch of 50 x 1 KiB records, with the
//! batch CRC checked), the broker's full validation of that batch (every record walked,
//! uncompressed and zstd), CRC-32C over 1 MiB, and encoding a Fetch response around 1 MiB of
//! record chunks; and log compaction of that batch (reading its keys with `visit_records`,
//! rewriting it with every other record kept with `retain_records`). Throughput is reported in
//! bytes of frame (or batch) per second.
//!
//! Run: `cargo bench -p kafka-proto --bench codec`.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kafka_proto::frame::{decode_request, encode_request, encode_response, Request, Response};
use kafka_proto::header::RequestHeader;
use kafka_proto::messages::fetch_response::{FetchResponse, FetchableTopicResponse, PartitionData};
use kafka_proto::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_proto::records::{
    build_batch, retain_records, split_batches, validate_produce_records, visit_records,
    Compression, NewRecord, ProduceLimits, RecordBatch, RetainOptions,
};
use kafka_proto::RecordChunks;

fn produce_batch(codec: Compression, records: usize, value_bytes: usize) -> Bytes {
    let value = Bytes::from(vec![b'v'; value_bytes]);
    let recs: Vec<NewRecord> = (0..records)
        .map(|i| {
            NewRecord::new(1_700_000_000_000 + i as i64, value.clone()).with_key(format!("key-{i}"))
        })
        .collect();
    build_batch(codec, &recs).expect("batch")
}

fn produce_frame(records: usize, value_bytes: usize) -> Bytes {
    let batch = produce_batch(Compression::None, records, value_bytes);
    let request = ProduceRequest {
        acks: -1,
        timeout_ms: 30_000,
        topic_data: vec![TopicProduceData {
            name: "bench".into(),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(RecordChunks::from(batch)),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let header = RequestHeader {
        api_key: 0,
        api_version: 9,
        correlation_id: 7,
        client_id: Some("bench".into()),
        ..Default::default()
    };
    let segments = encode_request(&header, &Request::Produce(request)).expect("encode");
    let mut frame: Vec<u8> = segments.iter().flat_map(|s| s.iter().copied()).collect();
    frame.drain(..4); // the size prefix is read by the connection, not the decoder
    Bytes::from(frame)
}

/// Decodes the request and checks the CRC of every batch, as the server's produce path does.
fn decode_and_validate(frame: Bytes) -> usize {
    let (_, request) = decode_request(frame).expect("decode");
    let Request::Produce(p) = request else {
        unreachable!("a produce request")
    };
    let mut batches = 0;
    for t in &p.topic_data {
        for part in &t.partition_data {
            let records = part.records.as_ref().expect("records").to_contiguous();
            for b in split_batches(records) {
                b.expect("whole batch")
                    .validate_from_producer()
                    .expect("valid batch");
                batches += 1;
            }
        }
    }
    batches
}

fn bench_produce_decode(c: &mut Criterion) {
    let frame = produce_frame(50, 1024);
    let mut g = c.benchmark_group("produce_decode");
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_function("50x1KiB_with_crc", |b| {
        b.iter(|| black_box(decode_and_validate(black_box(frame.clone()))))
    });
    g.finish();
}

/// The server's produce validation of one batch (`validate_produce_records`: header rules, CRC,
/// every record walked, offsets and timestamps checked; zstd decompressed first).
fn bench_produce_validate(c: &mut Criterion) {
    let limits = ProduceLimits::new(1 << 20, 1_700_000_000_000);
    let mut g = c.benchmark_group("produce_validate");
    for (name, codec) in [
        ("50x1KiB", Compression::None),
        ("50x1KiB_zstd", Compression::Zstd),
    ] {
        let batch = produce_batch(codec, 50, 1024);
        let _shared = batch.clone(); // as a request buffer is: clones allocate nothing
        g.throughput(Throughput::Bytes(batch.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                black_box(
                    validate_produce_records(black_box(batch.clone()), 9, &limits)
                        .expect("valid")
                        .1,
                )
            })
        });
    }
    g.finish();
}

fn bench_crc32c(c: &mut Criterion) {
    let data = vec![0xa5u8; 1 << 20];
    let mut g = c.benchmark_group("crc32c");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("1MiB", |b| {
        b.iter(|| black_box(crc32c::crc32c(black_box(&data))))
    });
    g.finish();
}

fn bench_fetch_encode(c: &mut Criterion) {
    // 32 chunks of 32 KiB, as the store hands them out (zero-copy slices).
    let chunks: Vec<Bytes> = (0..32)
        .map(|i| Bytes::from(vec![i as u8; 32 << 10]))
        .collect();
    let total: usize = chunks.iter().map(Bytes::len).sum();
    let response = Response::Fetch(FetchResponse {
        responses: vec![FetchableTopicResponse {
            topic: "bench".into(),
            partitions: vec![PartitionData {
                partition_index: 0,
                high_watermark: 1_000_000,
                records: Some(RecordChunks::from_chunks(chunks)),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let mut g = c.benchmark_group("fetch_encode");
    g.throughput(Throughput::Bytes(total as u64));
    g.bench_function("1MiB_in_32_chunks", |b| {
        b.iter(|| black_box(encode_response(7, 12, black_box(&response)).expect("encode")))
    });
    g.finish();
}

fn bench_compact(c: &mut Criterion) {
    let mut g = c.benchmark_group("compact");
    for (name, codec) in [
        ("50x1KiB", Compression::None),
        ("50x1KiB_zstd", Compression::Zstd),
    ] {
        let batch = RecordBatch::new(produce_batch(codec, 50, 1024)).expect("batch");
        g.throughput(Throughput::Bytes(batch.len() as u64));
        g.bench_function(format!("visit_{name}"), |b| {
            b.iter(|| {
                let mut keys = 0usize;
                visit_records(black_box(&batch), 1 << 20, |v| {
                    keys += v.key.map_or(0, <[u8]>::len)
                })
                .expect("valid");
                black_box(keys)
            })
        });
        g.bench_function(format!("retain_half_{name}"), |b| {
            b.iter(|| {
                black_box(
                    retain_records(
                        black_box(&batch),
                        1 << 20,
                        |v| v.offset % 2 == 0,
                        RetainOptions::default(),
                    )
                    .expect("valid"),
                )
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_compact,
    bench_produce_decode,
    bench_produce_validate,
    bench_crc32c,
    bench_fetch_encode
);
criterion_main!(benches);
