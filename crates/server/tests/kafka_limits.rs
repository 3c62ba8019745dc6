//! Limits a single client cannot get past: a client that sends requests and never reads the
//! responses is disconnected once a response has waited longer than the write deadline (here
//! the connection idle limit, 2 s) while other clients are served; topics, created or
//! auto-created, stop at `kafka.max_topics`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::kafka::KafkaConn;
use common::{batch, cluster_configs};
use kafka_proto::frame::{encode_request, Request};
use kafka_proto::header::RequestHeader;
use vdl_server::Node;

const TOPIC: &str = "slow-reader";

/// A one-node cluster serving Kafka with `TOPIC`, its Kafka settings changed by `tweak`, once
/// it leads `TOPIC`; returns the node and its Kafka address.
async fn single_node(
    dir: &std::path::Path,
    tweak: impl FnOnce(&mut vdl_server::config::KafkaSettings),
) -> (Arc<Node>, std::net::SocketAddr) {
    let mut configs = cluster_configs(1, dir, &[TOPIC]);
    tweak(&mut configs[0].kafka);
    let node: Arc<Node> = Node::start(configs.remove(0)).await.unwrap();
    node.serve_kafka().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.stream(TOPIC).unwrap().visible().leader != node.config().id {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let addr = node.config().kafka_advertised.parse().unwrap();
    (node, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, addr) = single_node(dir.path(), |k| {
        k.connection_idle = Duration::from_secs(2);
    })
    .await;
    tokio::task::spawn_blocking(move || {
        let mut good = KafkaConn::connect(addr).unwrap();
        for _ in 0..8 {
            let (code, _) = good.produce(TOPIC, batch(100, &[b'v'; 1000])).unwrap();
            assert_eq!(code, 0);
        }
        // Fetch requests whose ~800 KB responses are never read.
        let fetch = Request::Fetch(common::requests::fetch_one(TOPIC, 0, 0, 1 << 20));
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut sent = 0;
        for cid in 0..64 {
            let header = RequestHeader {
                api_key: 1,
                api_version: 12,
                correlation_id: cid,
                client_id: Some("slow".into()),
                ..Default::default()
            };
            let ok = encode_request(&header, &fetch)
                .unwrap()
                .iter()
                .all(|seg| s.write_all(seg).is_ok());
            if !ok {
                break;
            }
            sent += 1;
        }
        assert!(sent > 4, "could not send requests");
        // Longer than the write deadline: the server gives up on this client.
        std::thread::sleep(Duration::from_secs(5));
        // Other clients are served meanwhile (a new connection: the first one sat idle past
        // the 2 s idle limit).
        let mut good = KafkaConn::connect(addr).unwrap();
        let (code, _) = good.produce(TOPIC, batch(1, b"still")).unwrap();
        assert_eq!(code, 0);
        // Reading now ends in a closed connection before all responses arrive.
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut total = 0usize;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
        let all = sent as usize * 800_000;
        assert!(
            total < all,
            "read {total} bytes: every response was delivered, the connection was not closed"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_creation_stops_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(1, dir.path(), &[]);
    configs[0].kafka.max_topics = 3;
    let node: Arc<Node> = Node::start(configs.remove(0)).await.unwrap();
    node.serve_kafka().await.unwrap();
    let addr: std::net::SocketAddr = node.config().kafka_advertised.parse().unwrap();
    let n = node.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(addr).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut created = 0;
        while created < 3 {
            assert!(Instant::now() < deadline, "could not create 3 topics");
            match c.create_topic(&format!("t{created}")).unwrap() {
                0 => created += 1,
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        // The fourth: POLICY_VIOLATION (44), and it does not exist.
        assert_eq!(c.create_topic("t3").unwrap(), 44);
        // Auto-creation stops too.
        let req = Request::Metadata(kafka_proto::messages::metadata_request::MetadataRequest {
            topics: Some(vec![
                kafka_proto::messages::metadata_request::MetadataRequestTopic {
                    name: Some("auto1".into()),
                    ..Default::default()
                },
            ]),
            allow_auto_topic_creation: true,
            ..Default::default()
        });
        let _ = c
            .call(kafka_proto::api::ApiKey::Metadata, 12, &req)
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let mut names = n.stream_names();
        names.sort();
        assert_eq!(names, vec!["t0", "t1", "t2"]);
    })
    .await
    .unwrap();
}

/// A Fetch asking for everything gets at most the broker's 55 MiB (Kafka's `fetch.max.bytes`)
/// of records; a Produce naming one partition twice stores one batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_responses_are_capped_and_a_partition_is_written_once_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, addr) = single_node(dir.path(), |k| k.request_max_bytes = 8 << 20).await;
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(addr).unwrap();
        // 60 batches of about 1 MB: 60 MB stored.
        let one = batch(1, &vec![b'v'; 1_000_000]);
        for _ in 0..60 {
            assert_eq!(c.produce(TOPIC, one.clone()).unwrap().0, 0);
        }
        let fetch = Request::Fetch(common::requests::fetch_one(TOPIC, 0, 0, i32::MAX));
        let kafka_proto::frame::Response::Fetch(r) =
            c.call(kafka_proto::api::ApiKey::Fetch, 12, &fetch).unwrap()
        else {
            panic!("not a fetch response")
        };
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        let bytes = p.records.as_ref().map_or(0, |r| r.to_contiguous().len());
        assert!(bytes > 50 << 20, "only {bytes} bytes");
        assert!(
            bytes <= (55 << 20) + one.len(),
            "{bytes} bytes in one response, over the 55 MiB cap"
        );

        // The same partition twice in one Produce: the repeat is refused, one batch stored.
        let (_, before) = c.list_offset(TOPIC, -1).unwrap();
        let part = |tag: &[u8]| kafka_proto::messages::produce_request::PartitionProduceData {
            index: 0,
            records: Some(kafka_proto::RecordChunks::from(batch(1, tag))),
            ..Default::default()
        };
        let req = Request::Produce(kafka_proto::messages::produce_request::ProduceRequest {
            acks: -1,
            timeout_ms: 5000,
            topic_data: vec![kafka_proto::messages::produce_request::TopicProduceData {
                name: TOPIC.into(),
                partition_data: vec![part(b"one"), part(b"two")],
                ..Default::default()
            }],
            ..Default::default()
        });
        let kafka_proto::frame::Response::Produce(r) =
            c.call(kafka_proto::api::ApiKey::Produce, 9, &req).unwrap()
        else {
            panic!("not a produce response")
        };
        let codes: Vec<i16> = r.responses[0]
            .partition_responses
            .iter()
            .map(|p| p.error_code)
            .collect();
        assert_eq!(codes, vec![0, 87]);
        let (_, after) = c.list_offset(TOPIC, -1).unwrap();
        assert_eq!(after, before + 1);
    })
    .await
    .unwrap();
}
