//! What the client's consume path costs per fetched byte, without a socket: decode a Fetch
//! response frame of 1 KiB records (as a server sends it), take the partition's records and
//! run the offset checker over every record, as `vdl-perf consume` does for each response.
//! Compare its throughput with the consume figures measured against real servers: the
//! client's own CPU cost must not be what limits them.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kafka_proto::frame::{decode_response, encode_response, Response};
use kafka_proto::messages::fetch_response::{FetchResponse, FetchableTopicResponse, PartitionData};
use kafka_proto::records::{set_base_offset, Compression};
use kafka_proto::ApiKey;
use kafka_proto::RecordChunks;
use vdl_perf::client::{protocol, FETCH_VERSION};
use vdl_perf::payload::BatchSource;
use vdl_perf::verify::OffsetChecker;

/// A Fetch response frame (without its size prefix) carrying about `bytes` of batches of
/// `batch` records of `size` bytes, offsets dense from 0.
fn fetch_frame(bytes: usize, batch: usize, size: usize) -> Bytes {
    let mut source = BatchSource::new(size, Compression::None, 7);
    let mut records = BytesMut::new();
    let mut offset = 0i64;
    while records.len() < bytes {
        let mut b = BytesMut::from(&source.batch(batch).expect("batch")[..]);
        set_base_offset(&mut b, offset).expect("base offset");
        offset += batch as i64;
        records.extend_from_slice(&b);
    }
    let response = Response::Fetch(FetchResponse {
        responses: vec![FetchableTopicResponse {
            topic: "bench".into(),
            partitions: vec![PartitionData {
                partition_index: 0,
                high_watermark: offset,
                records: Some(RecordChunks::from_chunks(vec![records.freeze()])),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let segments = encode_response(1, FETCH_VERSION, &response).expect("encode");
    let mut frame = BytesMut::new();
    for s in &segments {
        frame.extend_from_slice(s);
    }
    Bytes::from(frame).slice(4..)
}

fn bench_consume_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("client_consume");
    let cells = [
        ("fetch_1MiB_1KiB_records", 1 << 20, 50, 1024),
        ("fetch_32KiB_1KiB_records", 32 << 10, 10, 1024),
        ("fetch_1MiB_100B_records", 1 << 20, 50, 100),
    ];
    for (name, bytes, batch, size) in cells {
        let frame = fetch_frame(bytes, batch, size);
        g.throughput(Throughput::Bytes(frame.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                let (_, response) =
                    decode_response(ApiKey::Fetch, FETCH_VERSION, black_box(frame.clone()))
                        .expect("decode");
                let data = protocol::fetched(response, 0).expect("partition");
                let mut checker = OffsetChecker::new(0, false);
                let acc = checker.accept(data.records).expect("records");
                assert_eq!(acc.gaps, 0);
                black_box(acc)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_consume_path);
criterion_main!(benches);
