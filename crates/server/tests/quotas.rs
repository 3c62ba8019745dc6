//! Flow control against a 3-node cluster: Kafka client quotas set with AlterClientQuotas are
//! replicated (DescribeClientQuotas on every node shows them) and cap a producer at its rate,
//! with `throttle_time_ms` in the responses; the node-wide limits set through the admin API's
//! `PUT /rates` cap catch-up reads the same way. Rates are measured as a client that waits what
//! it is told would see them: bytes beyond the one-second burst over the time until the last
//! throttle has passed.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster_configs;
use common::kafka::{on_any, KafkaConn};
use common::serving::start;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::alter_client_quotas_request::{
    AlterClientQuotasRequest, EntityData, EntryData, OpData,
};
use kafka_proto::messages::describe_client_quotas_request::{
    ComponentData, DescribeClientQuotasRequest,
};
use kafka_proto::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_proto::records::{build_batch, Compression, NewRecord};
use kafka_proto::RecordChunks;

const T: Duration = Duration::from_secs(30);
const TOPIC: &str = "q";

fn brokers(configs: &[vdl_server::config::NodeConfig]) -> Vec<SocketAddr> {
    configs.iter().map(|c| c.kafka_listen).collect()
}

/// One batch of `n` records of `size` bytes each.
fn batch(n: usize, size: usize) -> Bytes {
    let records: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord::new(1_700_000_000_000, vec![b'a' + (i % 26) as u8; size]))
        .collect();
    build_batch(Compression::None, &records).unwrap()
}

/// Produce v9 (acks=all) of `records` to partition 0: (error code, throttle_time_ms).
fn produce(c: &mut KafkaConn, records: Bytes) -> std::io::Result<(i16, i32)> {
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
    match c.call(ApiKey::Produce, 9, &req)? {
        Response::Produce(r) => Ok((
            r.responses[0].partition_responses[0].error_code,
            r.throttle_time_ms,
        )),
        other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
    }
}

/// Fetch v12 of partition 0 from `offset`, at most `max_bytes`: (error, next offset after the
/// records returned, record bytes, throttle_time_ms).
fn fetch(
    c: &mut KafkaConn,
    offset: i64,
    max_bytes: i32,
) -> std::io::Result<(i16, i64, usize, i32)> {
    let req = Request::Fetch(common::requests::fetch_one(TOPIC, 0, offset, max_bytes));
    match c.call(ApiKey::Fetch, 12, &req)? {
        Response::Fetch(r) => {
            let p = &r.responses[0].partitions[0];
            let data = p
                .records
                .as_ref()
                .map(|r| r.to_contiguous())
                .unwrap_or_default();
            let mut next = offset;
            for b in kafka_proto::records::split_batches(data.clone()) {
                let b = b.map_err(|e| std::io::Error::other(e.to_string()))?;
                next = b.base_offset() + i64::from(b.last_offset_delta()) + 1;
            }
            Ok((p.error_code, next, data.len(), r.throttle_time_ms))
        }
        other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
    }
}

/// A connection to the leader of partition 0 of the topic.
fn leader_conn(brokers: &[SocketAddr]) -> KafkaConn {
    let leader = on_any(brokers, T, "a leader of q", |c| {
        let (code, parts) = c.partition_leaders(TOPIC)?;
        let leader = parts.first().map_or(-1, |p| p.1);
        Ok((if leader > 0 { code } else { 6 }, leader))
    });
    KafkaConn::connect(brokers[(leader - 1) as usize]).unwrap()
}

fn quota_entry(client_id: &str, key: &str, value: f64) -> EntryData {
    EntryData {
        entity: vec![EntityData {
            entity_type: "client-id".into(),
            entity_name: Some(client_id.into()),
            ..Default::default()
        }],
        ops: vec![OpData {
            key: key.into(),
            value,
            remove: false,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The quotas DescribeClientQuotas v1 reports for client id `client_id`: (key, value) pairs.
fn described(c: &mut KafkaConn, client_id: &str) -> std::io::Result<(i16, Vec<(String, f64)>)> {
    let req = Request::DescribeClientQuotas(DescribeClientQuotasRequest {
        components: vec![ComponentData {
            entity_type: "client-id".into(),
            match_type: 0,
            r#match: Some(client_id.into()),
            ..Default::default()
        }],
        strict: true,
        ..Default::default()
    });
    match c.call(ApiKey::DescribeClientQuotas, 1, &req)? {
        Response::DescribeClientQuotas(r) => Ok((
            r.error_code,
            r.entries
                .unwrap_or_default()
                .iter()
                .flat_map(|e| e.values.iter().map(|v| (v.key.clone(), v.value)))
                .collect(),
        )),
        other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
    }
}

/// Bytes per second a client saw: what it sent beyond the one-second `burst`, over the time
/// until its last throttle has passed.
fn observed_rate(total: usize, burst: f64, elapsed: Duration, last_throttle_ms: i32) -> f64 {
    let span = elapsed.as_secs_f64() + f64::from(last_throttle_ms) / 1000.0;
    (total as f64 - burst) / span
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_byte_rate_is_replicated_and_caps_the_producer() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[TOPIC]);
    let _nodes = start(&configs).await;
    let brokers = brokers(&configs);
    tokio::task::spawn_blocking(move || {
        const RATE: f64 = 200_000.0;
        // Refused as Kafka refuses them: unknown key, a non-positive value, an ip entity.
        let mut c = KafkaConn::connect(brokers[0]).unwrap();
        let bad = Request::AlterClientQuotas(AlterClientQuotasRequest {
            entries: vec![
                quota_entry("x", "nonsense_rate", 1.0),
                quota_entry("x", "producer_byte_rate", -5.0),
                EntryData {
                    entity: vec![EntityData {
                        entity_type: "ip".into(),
                        entity_name: Some("127.0.0.1".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        match c.call(ApiKey::AlterClientQuotas, 1, &bad).unwrap() {
            Response::AlterClientQuotas(r) => {
                let codes: Vec<i16> = r.entries.iter().map(|e| e.error_code).collect();
                assert_eq!(codes, vec![42, 42, 42], "{r:?}");
            }
            other => panic!("unexpected {other:?}"),
        }
        // The test client's id ("vdl-test") gets a producer quota.
        let set = Request::AlterClientQuotas(AlterClientQuotasRequest {
            entries: vec![quota_entry("vdl-test", "producer_byte_rate", RATE)],
            ..Default::default()
        });
        on_any(&brokers, T, "AlterClientQuotas", |c| {
            match c.call(ApiKey::AlterClientQuotas, 1, &set)? {
                Response::AlterClientQuotas(r) => Ok((r.entries[0].error_code, ())),
                other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
            }
        });
        // Every node reports it (the metadata is replicated).
        for addr in &brokers {
            let deadline = Instant::now() + T;
            loop {
                let mut c = KafkaConn::connect(*addr).unwrap();
                let (code, values) = described(&mut c, "vdl-test").unwrap();
                assert_eq!(code, 0);
                if values == vec![("producer_byte_rate".to_string(), RATE)] {
                    break;
                }
                assert!(Instant::now() < deadline, "{addr}: {values:?}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // 40 batches of 20 KB: 800 KB, about 3 s at 200 KB/s after the 200 KB burst.
        let mut c = leader_conn(&brokers);
        let data = batch(20, 1000);
        let started = Instant::now();
        let (mut total, mut throttled, mut last) = (0usize, 0, 0);
        for _ in 0..40 {
            let (code, throttle_ms) = produce(&mut c, data.clone()).unwrap();
            assert_eq!(code, 0);
            total += data.len();
            throttled += usize::from(throttle_ms > 0);
            last = throttle_ms;
        }
        let rate = observed_rate(total, RATE, started.elapsed(), last);
        println!("producer: {total} bytes, {throttled} throttled responses, {rate:.0} B/s");
        assert!(
            throttled >= 25,
            "responses carried throttle_time_ms: {throttled}"
        );
        assert!(
            (rate - RATE).abs() <= RATE * 0.1,
            "observed {rate:.0} B/s against a quota of {RATE} B/s"
        );
    })
    .await
    .unwrap();
}

/// `PUT /rates` with `body` on the admin API at `addr`: (status code, body).
fn put_rates(addr: SocketAddr, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    write!(
        s,
        "PUT /rates HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_catchup_read_limit_set_through_the_admin_api_caps_catchup_reads() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[TOPIC]);
    let nodes = start(&configs).await;
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_addr = admin.local_addr().unwrap();
    let node = nodes.0[1].0.clone();
    let serving = tokio::spawn(vdl_server::admin::serve(admin, node));
    let brokers = brokers(&configs);
    tokio::task::spawn_blocking(move || {
        const RATE: f64 = 300_000.0;
        // 1.2 MB in the partition before any limit.
        let mut c = leader_conn(&brokers);
        let data = batch(20, 1000);
        for _ in 0..60 {
            assert_eq!(produce(&mut c, data.clone()).unwrap().0, 0);
        }
        // Unknown names are refused and change nothing.
        let (status, body) = put_rates(admin_addr, r#"{"catchup_read_bytes": 5}"#);
        assert_eq!(status, 400, "{body}");
        let (status, body) = put_rates(
            admin_addr,
            &format!(r#"{{"catchup_read_bytes_per_sec": {RATE}}}"#).replace(".0", ""),
        );
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains("\"catchup_read_bytes_per_sec\":300000"),
            "{body}"
        );
        // The leader applies it once the metadata reaches it.
        std::thread::sleep(Duration::from_millis(500));
        // Read it all back 40 KB at a time: every read but the last is behind the tail.
        let mut c = leader_conn(&brokers);
        let started = Instant::now();
        let (mut offset, mut total, mut throttled, mut last) = (0i64, 0usize, 0, 0);
        while offset < 1200 {
            let (code, next, bytes, throttle_ms) = fetch(&mut c, offset, 40_000).unwrap();
            assert_eq!(code, 0);
            assert!(next > offset);
            offset = next;
            total += bytes;
            throttled += usize::from(throttle_ms > 0);
            last = throttle_ms;
        }
        let rate = observed_rate(total, RATE, started.elapsed(), last);
        println!("catch-up reads: {total} bytes, {throttled} throttled, {rate:.0} B/s");
        assert!(throttled >= 10, "{throttled}");
        assert!(
            (rate - RATE).abs() <= RATE * 0.1,
            "observed {rate:.0} B/s against a limit of {RATE} B/s"
        );
        // Lifted: reads are not throttled any more.
        let (status, body) = put_rates(admin_addr, r#"{"catchup_read_bytes_per_sec": null}"#);
        assert_eq!(status, 200, "{body}");
        std::thread::sleep(Duration::from_millis(500));
        let mut c = leader_conn(&brokers);
        for _ in 0..5 {
            assert_eq!(fetch(&mut c, 0, 40_000).unwrap().3, 0);
        }
    })
    .await
    .unwrap();
    serving.abort();
}

/// A follower that was down catches up at the node-wide `catchup_replication_bytes_per_sec`,
/// not faster: its leader holds back appends of already-committed entries over the limit
/// (new entries are never held back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_catches_up_at_the_catch_up_replication_limit() {
    const RATE: u64 = 300_000;
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[TOPIC]);
    // Nodes 1 and 2 only: a majority, node 3 stays down.
    let two = start(&configs[..2]).await;
    let brokers2 = brokers(&configs[..2]);
    tokio::task::spawn_blocking(move || {
        let mut c = leader_conn(&brokers2);
        let data = batch(20, 1000);
        for _ in 0..60 {
            assert_eq!(produce(&mut c, data.clone()).unwrap().0, 0);
        }
    })
    .await
    .unwrap();
    let command = vdl_server::metadata::MetaCommand::SetFlowLimits {
        limits: vdl_server::flow::settings::FlowLimits {
            catchup_replication_bytes_per_sec: Some(RATE),
            ..Default::default()
        },
    };
    two.0[0]
        .0
        .metadata_proposer()
        .propose(&command, T)
        .await
        .unwrap();
    let leader_hw = |nodes: &common::serving::Nodes| {
        nodes
            .0
            .iter()
            .filter_map(|(n, _)| n.partition(TOPIC, 0))
            .map(|p| p.visible().high_watermark)
            .max()
            .unwrap_or(0)
    };
    let target = leader_hw(&two);
    assert!(target >= 1200, "{target}");
    // Node 3 starts and catches up 1.2 MB at 300 KB/s: about three seconds after the first
    // second's burst.
    let started = Instant::now();
    let third = vdl_server::Node::start(configs[2].clone()).await.unwrap();
    loop {
        let hw = third
            .partition(TOPIC, 0)
            .map_or(0, |p| p.visible().high_watermark);
        if hw >= target {
            break;
        }
        assert!(started.elapsed() < T, "node 3 at {hw} of {target}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    let deferred: u64 = two
        .0
        .iter()
        .map(|(n, _)| n.catch_up_limiter().deferred())
        .sum();
    println!("catch-up of {target} records took {took:?}; {deferred} appends deferred");
    assert!(deferred > 0, "the limit held nothing back");
    assert!(
        took >= Duration::from_millis(1500),
        "1.2 MB caught up in {took:?} despite a {RATE} B/s limit"
    );
    third.shutdown();
}
