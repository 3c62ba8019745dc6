//! Bad input on the Kafka port: an oversized frame, an oversized batch, a bad CRC, an unknown
//! API version and garbage bytes each get a Kafka error code or a closed connection, never a
//! crash; other connections keep working, and the server does not allocate what a frame only
//! claims.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{batch, cluster_configs};
use kafka_proto::frame::{decode_response, encode_request, Request, Response};
use kafka_proto::header::RequestHeader;
use kafka_proto::messages::api_versions_request::ApiVersionsRequest;
use kafka_proto::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_proto::RecordChunks;
use vdl_server::Node;

const TOPIC: &str = "bad-input";

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn send(s: &mut TcpStream, api_key: i16, version: i16, cid: i32, request: &Request) {
    let header = RequestHeader {
        api_key,
        api_version: version,
        correlation_id: cid,
        client_id: Some("bad-input-test".into()),
        ..Default::default()
    };
    for seg in encode_request(&header, request).unwrap() {
        s.write_all(&seg).unwrap();
    }
}

/// Reads one response frame; None when the server closed the connection.
fn recv(s: &mut TcpStream, api: kafka_proto::api::ApiKey, version: i16) -> Option<Response> {
    let mut len = [0u8; 4];
    if s.read_exact(&mut len).is_err() {
        return None;
    }
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).ok()?;
    Some(decode_response(api, version, Bytes::from(body)).unwrap().1)
}

fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

fn produce(records: Bytes) -> Request {
    Request::Produce(ProduceRequest {
        acks: -1,
        timeout_ms: 5000,
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
    })
}

fn produce_error(s: &mut TcpStream, cid: i32, records: Bytes) -> i16 {
    send(s, 0, 9, cid, &produce(records));
    match recv(s, kafka_proto::api::ApiKey::Produce, 9) {
        Some(Response::Produce(r)) => r.responses[0].partition_responses[0].error_code,
        other => panic!("expected a produce response, got {other:?}"),
    }
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_errors_or_closed_connections_and_hurts_nobody_else() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(1, dir.path(), &[TOPIC]);
    configs[0].kafka.message_max_bytes = 64 << 10;
    let node: Arc<Node> = Node::start(configs.remove(0)).await.unwrap();
    node.serve_kafka().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.stream(TOPIC).unwrap().visible().leader != node.config().id {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let addr = node.config().kafka_advertised.clone();

    tokio::task::spawn_blocking(move || {
        // A healthy connection that must keep working throughout.
        let mut good = connect(&addr);
        let ok = produce_error(&mut good, 1, batch(1, b"before"));
        assert_eq!(ok, 0);

        // 1. A frame claiming 2 GiB: closed at once, nothing of that size allocated.
        let before = rss_kib();
        let mut s = connect(&addr);
        s.write_all(&0x7fff_ffffu32.to_be_bytes()).unwrap();
        s.write_all(&[0u8; 64]).unwrap();
        assert!(closed(&mut s), "an oversized frame closes the connection");
        let mut s = connect(&addr);
        s.write_all(&(-5i32).to_be_bytes()).unwrap();
        assert!(
            closed(&mut s),
            "a negative frame size closes the connection"
        );
        assert!(
            rss_kib() < before + 64 * 1024,
            "memory did not grow with the claimed size"
        );

        // 2. A batch above message.max.bytes: MESSAGE_TOO_LARGE (10).
        let mut s = connect(&addr);
        let big = batch(1, &vec![b'x'; 100 << 10]);
        assert_eq!(produce_error(&mut s, 2, big), 10);

        // 3. A bad CRC: CORRUPT_MESSAGE (2); the connection stays usable.
        let mut corrupt = batch(3, b"crc").to_vec();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        assert_eq!(produce_error(&mut s, 3, Bytes::from(corrupt)), 2);
        assert_eq!(produce_error(&mut s, 4, batch(1, b"after-crc")), 0);

        // 4. ApiVersions v9 (unknown to us): a v0-format answer with UNSUPPORTED_VERSION (35).
        let mut s = connect(&addr);
        let header = [0u8, 18, 0, 9, 0, 0, 0, 77, 0, 0, 0xde, 0xad];
        s.write_all(&(header.len() as u32).to_be_bytes()).unwrap();
        s.write_all(&header).unwrap();
        match recv(&mut s, kafka_proto::api::ApiKey::ApiVersions, 0) {
            Some(Response::ApiVersions(r)) => {
                assert_eq!(r.error_code, 35);
                assert!(r.api_keys.iter().any(|k| k.api_key == 18));
            }
            other => panic!("expected an ApiVersions answer, got {other:?}"),
        }
        // And a known API at an unknown version: the connection is closed.
        let mut s = connect(&addr);
        let header = [0u8, 0, 0, 99, 0, 0, 0, 5, 0, 0];
        s.write_all(&(header.len() as u32).to_be_bytes()).unwrap();
        s.write_all(&header).unwrap();
        assert!(closed(&mut s));

        // 5. Garbage: closed.
        let mut s = connect(&addr);
        s.write_all(&[0, 0, 0, 12]).unwrap();
        s.write_all(b"garbage!!!!!").unwrap();
        assert!(closed(&mut s));

        // The healthy connection never noticed.
        send(
            &mut good,
            18,
            3,
            9,
            &Request::ApiVersions(ApiVersionsRequest::default()),
        );
        assert!(matches!(
            recv(&mut good, kafka_proto::api::ApiKey::ApiVersions, 3),
            Some(Response::ApiVersions(_))
        ));
        assert_eq!(produce_error(&mut good, 10, batch(1, b"still fine")), 0);
    })
    .await
    .unwrap();
    node.shutdown();
}
