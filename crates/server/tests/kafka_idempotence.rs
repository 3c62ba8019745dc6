//! Idempotent producers over the Kafka protocol: InitProducerId hands out ids, a retried batch
//! is written once and answered with its original offset (also by a new leader after the old
//! one dies, since the producer state is derived from the replicated log), and a batch out of
//! sequence is refused.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{cluster_configs, split_batches};
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_proto::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};
use kafka_proto::RecordChunks;
use vdl_server::Node;

const TOPIC: &str = "idempotent";

/// Sends one request on a new connection and reads its response.
fn call(addr: &str, api: ApiKey, version: i16, request: &Request) -> Response {
    let addr = addr.parse().expect("HOST:PORT");
    common::kafka::KafkaConn::connect(addr)
        .and_then(|mut c| c.call(api, version, request))
        .expect("a response")
}

fn batch(pid: i64, epoch: i16, seq: i32, values: &[&str]) -> Bytes {
    let mut b = RecordBatchBuilder::new(Compression::None).producer(pid, epoch, seq);
    for v in values {
        b.append(&NewRecord::new(
            1_700_000_000_000,
            Bytes::copy_from_slice(v.as_bytes()),
        ))
        .unwrap();
    }
    b.build().unwrap()
}

/// Produces one batch; returns (error code, base offset).
fn produce(addr: &str, records: Bytes) -> (i16, i64) {
    let req = Request::Produce(ProduceRequest {
        acks: -1,
        timeout_ms: 10_000,
        topic_data: vec![TopicProduceData {
            name: TOPIC.into(),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(RecordChunks::from(records)),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    match call(addr, ApiKey::Produce, 9, &req) {
        Response::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("{other:?}"),
    }
}

/// Produces one batch as a client does: a retriable refusal (NOT_ENOUGH_REPLICAS while the same
/// batch is still in flight, NOT_LEADER_OR_FOLLOWER during an election) is retried, for up to
/// 10 s; returns the final (error code, base offset).
fn produce_retrying(addr: &str, records: Bytes) -> (i16, i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, offset) = produce(addr, records.clone());
        if !matches!(code, 6 | 19) || Instant::now() > deadline {
            return (code, offset);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn leader_of(nodes: &[Option<Arc<Node>>]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(i) = nodes.iter().position(|n| {
            n.as_ref()
                .is_some_and(|n| n.stream(TOPIC).unwrap().visible().leader == n.config().id)
        }) {
            return i;
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_batches_are_written_once_even_across_a_leader_change() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[TOPIC]);
    let mut nodes = Vec::new();
    for c in &configs {
        let n = Node::start(c.clone()).await.unwrap();
        n.serve_kafka().await.unwrap();
        nodes.push(Some(n));
    }
    let leader = leader_of(&nodes).await;
    let addr = nodes[leader]
        .as_ref()
        .unwrap()
        .config()
        .kafka_advertised
        .clone();

    let addr2 = addr.clone();
    let pid = tokio::task::spawn_blocking(move || {
        let r = call(
            &addr2,
            ApiKey::InitProducerId,
            4,
            &Request::InitProducerId(InitProducerIdRequest {
                transactional_id: None,
                transaction_timeout_ms: 60_000,
                ..Default::default()
            }),
        );
        let Response::InitProducerId(r) = r else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        assert_eq!(r.producer_epoch, 0);
        let pid = r.producer_id;
        assert!(pid >= 0);

        let first = batch(pid, 0, 0, &["a", "b"]);
        assert_eq!(produce(&addr2, first.clone()), (0, 0));
        // The retry of a committed batch: same offset, not written again.
        assert_eq!(produce(&addr2, first), (0, 0));
        // Out of sequence: refused with OUT_OF_ORDER_SEQUENCE_NUMBER.
        assert_eq!(produce(&addr2, batch(pid, 0, 5, &["x"])).0, 45);
        // In sequence: appended after the first.
        assert_eq!(produce(&addr2, batch(pid, 0, 2, &["c"])), (0, 2));
        pid
    })
    .await
    .unwrap();

    // The leader dies; the new leader knows the producer's sequence from the log.
    nodes[leader].take().unwrap().shutdown();
    let new = leader_of(&nodes).await;
    let new_addr = nodes[new]
        .as_ref()
        .unwrap()
        .config()
        .kafka_advertised
        .clone();
    tokio::task::spawn_blocking(move || {
        // Right after the failover the new leader may not have applied the batch yet: the
        // retry is then refused as in flight (retriable) until it has, then answered with the
        // original offset.
        assert_eq!(
            produce_retrying(&new_addr, batch(pid, 0, 2, &["c"])),
            (0, 2),
            "retry answered by the new leader"
        );
        assert_eq!(produce(&new_addr, batch(pid, 0, 3, &["d"])), (0, 3));
    })
    .await
    .unwrap();

    // Exactly a, b, c, d in the log.
    let s = nodes[new].as_ref().unwrap().stream(TOPIC).unwrap();
    let read = s.read(0, 1 << 20).unwrap();
    let data: Vec<u8> = read.chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let batches = split_batches(&data);
    let offsets: Vec<(u64, u32)> = batches.iter().map(|(o, n, _)| (*o, *n)).collect();
    assert_eq!(offsets, vec![(0, 2), (2, 1), (3, 1)]);
    for n in nodes.iter().flatten() {
        n.shutdown();
    }
}
