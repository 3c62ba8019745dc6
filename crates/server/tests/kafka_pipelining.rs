//! Responses on one connection come back in request order, whoever writes them: the
//! connection's task, or the Raft worker that answers a one-partition produce straight to the
//! socket (`kafka::direct_answer`). Pipelined requests of every kind (produces that commit,
//! produces refused at once, produces with acks=0 that get no response, long-poll fetches
//! that answer after the produces behind them have committed, Metadata, ApiVersions) are
//! answered in order with the right contents, and one-at-a-time produces, the direct path's
//! common case, get consecutive offsets.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::kafka::KafkaConn;
use common::{batch, cluster_configs};
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{decode_response, encode_request, Request, Response};
use kafka_proto::header::RequestHeader;
use kafka_proto::messages::api_versions_request::ApiVersionsRequest;
use kafka_proto::messages::fetch_request::FetchRequest;
use kafka_proto::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_proto::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_proto::RecordChunks;
use vdl_server::Node;

const TOPIC: &str = "pipelined";
/// A topic nobody writes to: a fetch from it waits its whole `max_wait_ms`.
const EMPTY: &str = "empty";

/// A one-node cluster serving Kafka with `TOPIC`, once it leads it.
async fn single_node(dir: &std::path::Path) -> (Arc<Node>, SocketAddr) {
    let mut configs = cluster_configs(1, dir, &[TOPIC, EMPTY]);
    let node: Arc<Node> = Node::start(configs.remove(0)).await.unwrap();
    node.serve_kafka().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.stream(TOPIC).unwrap().visible().leader != node.config().id {
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (
        node.clone(),
        node.config().kafka_advertised.parse().unwrap(),
    )
}

/// A produce of one 1-record batch to `partition` of `TOPIC`.
fn produce(partition: i32, acks: i16, tag: &[u8]) -> Request {
    Request::Produce(ProduceRequest {
        acks,
        timeout_ms: 10_000,
        topic_data: vec![TopicProduceData {
            name: TOPIC.into(),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(RecordChunks::from(batch(1, tag))),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// What the i-th request of a pipelined round is, and what its response must say.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Produce to partition 0 (commits; may be answered by the worker).
    Commits,
    /// Produce to a partition that does not exist (refused before any Raft entry).
    Refused,
    /// Produce with acks=0: no response at all.
    NoResponse,
    /// A fetch that waits 50 ms for records that never come: the produces behind it commit
    /// first, and their answers must wait for it.
    SlowFetch,
    Metadata,
    ApiVersions,
}

fn kind_of(i: usize) -> Kind {
    match i % 10 {
        1 => Kind::SlowFetch,
        3 => Kind::Metadata,
        5 => Kind::Refused,
        7 => Kind::NoResponse,
        9 => Kind::ApiVersions,
        _ => Kind::Commits,
    }
}

fn write_request(s: &mut TcpStream, cid: i32, api: ApiKey, version: i16, req: &Request) {
    let header = RequestHeader {
        api_key: api as i16,
        api_version: version,
        correlation_id: cid,
        client_id: Some("pipeline".into()),
        ..Default::default()
    };
    for seg in encode_request(&header, req).unwrap() {
        s.write_all(&seg).unwrap();
    }
}

fn read_response(s: &mut TcpStream, api: ApiKey, version: i16) -> (i32, Response) {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).unwrap();
    let (header, response) = decode_response(api, version, Bytes::from(body)).unwrap();
    (header.correlation_id, response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_whoever_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, addr) = single_node(dir.path()).await;
    tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut next_offset = 0i64;
        let mut cid = 0i32;
        // Rounds of 1 to 40 requests in flight, below the per-connection limit (64).
        for round in 0..40usize {
            let in_flight = 1 + round;
            let mut expected = Vec::new();
            for i in 0..in_flight {
                cid += 1;
                let kind = kind_of(round + i);
                let (api, version, req) = match kind {
                    Kind::Commits => (ApiKey::Produce, 9, produce(0, -1, b"c")),
                    Kind::Refused => (ApiKey::Produce, 9, produce(99, -1, b"r")),
                    Kind::NoResponse => (ApiKey::Produce, 9, produce(0, 0, b"z")),
                    Kind::SlowFetch => (
                        ApiKey::Fetch,
                        11,
                        Request::Fetch(FetchRequest {
                            max_wait_ms: 50,
                            min_bytes: 1,
                            ..common::requests::fetch_one(EMPTY, 0, 0, 1 << 20)
                        }),
                    ),
                    Kind::Metadata => (
                        ApiKey::Metadata,
                        12,
                        Request::Metadata(MetadataRequest {
                            topics: Some(vec![MetadataRequestTopic {
                                name: Some(TOPIC.into()),
                                ..Default::default()
                            }]),
                            ..Default::default()
                        }),
                    ),
                    Kind::ApiVersions => (
                        ApiKey::ApiVersions,
                        3,
                        Request::ApiVersions(ApiVersionsRequest::default()),
                    ),
                };
                write_request(&mut s, cid, api, version, &req);
                if !matches!(kind, Kind::NoResponse) {
                    expected.push((cid, kind, api, version));
                }
            }
            for (want_cid, kind, api, version) in expected {
                let (got_cid, response) = read_response(&mut s, api, version);
                assert_eq!(got_cid, want_cid, "round {round}: answered out of order");
                match (kind, response) {
                    (Kind::Commits, Response::Produce(r)) => {
                        let p = &r.responses[0].partition_responses[0];
                        assert_eq!(p.error_code, 0, "round {round}");
                        // acks=0 produces before it took offsets too: at or after the next.
                        assert!(p.base_offset >= next_offset, "round {round}: {p:?}");
                        next_offset = p.base_offset + 1;
                    }
                    (Kind::Refused, Response::Produce(r)) => {
                        let p = &r.responses[0].partition_responses[0];
                        assert_ne!(p.error_code, 0, "round {round}: partition 99 accepted");
                    }
                    (Kind::SlowFetch, Response::Fetch(f)) => {
                        let p = &f.responses[0].partitions[0];
                        assert_eq!((p.error_code, p.high_watermark), (0, 0), "round {round}");
                    }
                    (Kind::Metadata, Response::Metadata(m)) => {
                        assert_eq!(m.topics[0].name.as_deref(), Some(TOPIC));
                    }
                    (Kind::ApiVersions, Response::ApiVersions(v)) => {
                        assert_eq!(v.error_code, 0);
                    }
                    (kind, other) => panic!("round {round}: {kind:?} answered with {other:?}"),
                }
            }
        }
        // Nothing more is owed: a last synchronous produce is answered next.
        let mut c = KafkaConn::from_stream(s).unwrap();
        let (code, offset) = c.produce(TOPIC, batch(1, b"last")).unwrap();
        assert_eq!(code, 0);
        assert!(offset >= next_offset);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_at_a_time_produces_get_consecutive_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, addr) = single_node(dir.path()).await;
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(addr).unwrap();
        for i in 0..300i64 {
            let (code, offset) = c.produce(TOPIC, batch(2, b"seq")).unwrap();
            assert_eq!((code, offset), (0, 2 * i));
        }
        // A second connection's produces interleave with the first's, each answered.
        let mut d = KafkaConn::connect(addr).unwrap();
        for i in 0..50i64 {
            let (code, a) = c.produce(TOPIC, batch(1, b"a")).unwrap();
            let (code_d, b) = d.produce(TOPIC, batch(1, b"b")).unwrap();
            assert_eq!((code, code_d), (0, 0));
            assert_eq!((a, b), (600 + 2 * i, 601 + 2 * i));
        }
    })
    .await
    .unwrap();
}
