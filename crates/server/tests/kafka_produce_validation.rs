//! Produce validation against an in-process 3-node cluster: a Produce v9 carrying 68 batches of
//! about 1 MB for one partition (more than the store's 64 MiB entry limit in total) is refused
//! with INVALID_RECORD (one batch per partition) and every node keeps serving; hostile batches
//! (a gzip batch claiming 2^31-1 records with nothing inside, seven 0xFF bytes as a record, a
//! count mismatch, a timestamp two hours ahead) get Kafka error codes and the log end offset
//! does not move; legitimate produces of every codec, and a legacy message set in Produce v2,
//! succeed and read back.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{cluster_configs, raw_batch};
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::fetch_request::FetchRequest;
use kafka_proto::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_proto::records::{
    compress, encode_message_set, split_batches, Compression, LegacyRecord, NewRecord,
    RecordBatchBuilder, TimestampType,
};
use kafka_proto::RecordChunks;
use vdl_server::Node;

const TOPIC: &str = "validation";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Sends one request on a new connection and reads its response.
fn call(addr: &str, api: ApiKey, version: i16, request: &Request) -> Response {
    let addr = addr.parse().expect("HOST:PORT");
    common::kafka::KafkaConn::connect(addr)
        .and_then(|mut c| c.call(api, version, request))
        .expect("a response")
}

/// Produces `chunks` (concatenated on the wire) to partition 0 at `version`; returns (error
/// code, base offset).
fn produce(addr: &str, version: i16, chunks: Vec<Bytes>) -> (i16, i64) {
    let req = Request::Produce(ProduceRequest {
        acks: -1,
        timeout_ms: 20_000,
        topic_data: vec![TopicProduceData {
            name: TOPIC.into(),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(RecordChunks::from_chunks(chunks)),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    match call(addr, ApiKey::Produce, version, &req) {
        Response::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("expected a produce response, got {other:?}"),
    }
}

/// Fetches from `offset` (Fetch v11); returns (error code, high watermark, records).
fn fetch(addr: &str, offset: i64) -> (i16, i64, Bytes) {
    let req = Request::Fetch(FetchRequest {
        max_wait_ms: 100,
        min_bytes: 1,
        ..common::requests::fetch_one(TOPIC, 0, offset, 4 << 20)
    });
    match call(addr, ApiKey::Fetch, 11, &req) {
        Response::Fetch(r) => {
            let p = &r.responses[0].partitions[0];
            let records = p
                .records
                .as_ref()
                .map(|r| r.to_contiguous())
                .unwrap_or_default();
            (p.error_code, p.high_watermark, records)
        }
        other => panic!("expected a fetch response, got {other:?}"),
    }
}

fn batch_of(codec: Compression, n: usize, value: &[u8]) -> Bytes {
    let mut b = RecordBatchBuilder::new(codec);
    for i in 0..n {
        b.append(&NewRecord::new(now_ms() - 1000, value.to_vec()).with_key(format!("k{i}")))
            .unwrap();
    }
    b.build().unwrap()
}

async fn leader_of(nodes: &[Arc<Node>]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(i) = nodes
            .iter()
            .position(|n| n.stream(TOPIC).unwrap().visible().leader == n.config().id)
        {
            return i;
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until every node has applied up to `hw` (so every group thread is alive).
async fn all_reach(nodes: &[Arc<Node>], hw: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while nodes
        .iter()
        .any(|n| n.stream(TOPIC).unwrap().visible().high_watermark < hw)
    {
        assert!(
            Instant::now() < deadline,
            "not every node reached high watermark {hw}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_validates_every_batch_before_anything_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[TOPIC]);
    let mut nodes = Vec::new();
    for c in &configs {
        let n = Node::start(c.clone()).await.unwrap();
        n.serve_kafka().await.unwrap();
        nodes.push(n);
    }
    let leader = leader_of(&nodes).await;
    let addr = nodes[leader].config().kafka_advertised.clone();
    let stream = nodes[leader].stream(TOPIC).unwrap();

    // 3. Legitimate produces of every codec succeed, each at the next offset.
    let a = addr.clone();
    let mut end = tokio::task::spawn_blocking(move || {
        let mut next = 0i64;
        for codec in Compression::ALL {
            let (code, base) = produce(&a, 9, vec![batch_of(codec, 5, b"legit")]);
            assert_eq!((code, base), (0, next), "{codec:?}");
            next += 5;
        }
        // A legacy (magic 1) message set in Produce v2, with offsets an old client might send.
        let legacy: Vec<LegacyRecord> = (0..3)
            .map(|i| LegacyRecord::new(100 + 2 * i, now_ms(), None, Some(Bytes::from("old"))))
            .collect();
        for codec in [Compression::None, Compression::Gzip] {
            let set = encode_message_set(1, codec, TimestampType::CreateTime, &legacy).unwrap();
            assert_eq!(produce(&a, 2, vec![set]), (0, next), "legacy {codec:?}");
            next += 3;
        }
        next
    })
    .await
    .unwrap();
    all_reach(&nodes, end as u64).await;

    // 2. Hostile batches get Kafka error codes; nothing is stored.
    let a = addr.clone();
    tokio::task::spawn_blocking(move || {
        let gzip_empty = raw_batch(Compression::Gzip.id() as i16, i32::MAX, &[]);
        let gzip_empty_stream = raw_batch(
            Compression::Gzip.id() as i16,
            i32::MAX,
            &compress(Compression::Gzip, &[]).unwrap(),
        );
        let ff = raw_batch(0, 1, &[0xff; 7]);
        let mut section = Vec::new();
        let one = batch_of(Compression::None, 1, b"x");
        section.extend_from_slice(&one[61..]);
        let count_mismatch = raw_batch(0, 2, &section);
        let mut future = RecordBatchBuilder::new(Compression::None);
        future
            .append(&NewRecord::new(now_ms() + 2 * 3_600_000, b"later".to_vec()))
            .unwrap();
        for (name, b, expected) in [
            ("gzip claiming 2^31-1 records, empty", gzip_empty, 87),
            (
                "gzip claiming 2^31-1 records, empty stream",
                gzip_empty_stream,
                87,
            ),
            ("seven 0xFF bytes", ff, 87),
            ("count mismatch", count_mismatch, 87),
            ("two hours ahead", future.build().unwrap(), 32),
        ] {
            let (code, _) = produce(&a, 9, vec![b]);
            assert_eq!(code, expected, "{name}");
        }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        stream.visible().high_watermark,
        end as u64,
        "the log end offset did not move"
    );

    // 1. 68 batches of about 1 MB for one partition in one Produce v9: more than 64 MiB in
    // total. INVALID_RECORD (one batch per partition), and the node keeps serving.
    let a = addr.clone();
    tokio::task::spawn_blocking(move || {
        let one = batch_of(Compression::None, 1, &vec![b'm'; 1_000_000 - 200]);
        assert!(one.len() < 1 << 20);
        let chunks = vec![one; 68];
        let total: usize = chunks.iter().map(Bytes::len).sum();
        assert!(total > 64 << 20, "{total} bytes");
        let (code, _) = produce(&a, 9, chunks);
        assert_eq!(code, 87, "INVALID_RECORD");
    })
    .await
    .unwrap();
    assert_eq!(stream.visible().high_watermark, end as u64);

    // Afterwards a normal produce and fetch succeed, and every node applies it.
    let a = addr.clone();
    let after = tokio::task::spawn_blocking(move || {
        let (code, base) = produce(&a, 9, vec![batch_of(Compression::None, 2, b"after")]);
        assert_eq!((code, base), (0, end));
        let (code, hw, records) = fetch(&a, end);
        assert_eq!(code, 0);
        assert_eq!(hw, end + 2);
        let batches: Vec<_> = split_batches(records)
            .map(|b| b.expect("a whole batch"))
            .collect();
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].base_offset(), end);
        let values: Vec<_> = batches[0]
            .records_vec(1 << 20)
            .unwrap()
            .into_iter()
            .map(|r| r.value.unwrap())
            .collect();
        assert_eq!(values, vec![Bytes::from("after"); 2]);
        // Everything stored earlier reads back, every batch valid.
        let (code, _, records) = fetch(&a, 0);
        assert_eq!(code, 0);
        let mut offset = 0;
        for b in split_batches(records) {
            let b = b.unwrap();
            b.validate().unwrap();
            assert_eq!(b.base_offset(), offset);
            let records = b.records_vec(1 << 20).unwrap();
            assert_eq!(records.len() as i32, b.record_count());
            offset = b.next_offset();
        }
        assert!(offset > 0);
        end + 2
    })
    .await
    .unwrap();
    end = after;
    all_reach(&nodes, end as u64).await;
    for n in &nodes {
        n.shutdown();
    }
}
