//! Transactions, the partition side, over the Kafka protocol: transactional batches of two
//! producers (appended through the stream's append API: the client Produce path accepts them
//! only for a transaction its coordinator holds, see `kafka_txn_coordinator.rs`), then
//! WriteTxnMarkers over the wire
//! commits one and aborts the other. A read_committed Fetch stops at the last stable offset
//! while a transaction is open and lists the aborted transaction once it is aborted; ListOffsets
//! answers LATEST by isolation level; the state survives a leader change and a restart of every
//! node (the producer snapshot and the replay of the log after it). librdkafka's read_committed
//! consumer (kcat) skips the aborted records and the markers.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster_configs;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::fetch_request::FetchRequest;
use kafka_proto::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};
use vdl_server::Node;

const TOPIC: &str = "txn";
/// Producers 1 and 2 of the test.
const P1: i64 = 1000;
const P2: i64 = 2000;

fn call(addr: &str, api: ApiKey, version: i16, request: &Request) -> Response {
    let addr = addr.parse().expect("HOST:PORT");
    common::kafka::KafkaConn::connect(addr)
        .and_then(|mut c| c.call(api, version, request))
        .expect("a response")
}

/// A transactional batch of `values`.
fn txn_batch(pid: i64, seq: i32, values: &[&str]) -> Bytes {
    let recs: Vec<NewRecord> = values
        .iter()
        .map(|v| NewRecord::new(1_700_000_000_000, Bytes::copy_from_slice(v.as_bytes())))
        .collect();
    RecordBatchBuilder::new(Compression::None)
        .producer(pid, 0, seq)
        .transactional(true)
        .with_records(&recs)
        .unwrap()
        .build()
        .unwrap()
}

/// What a read_committed fetch answered for the partition.
#[derive(Debug)]
struct Fetched {
    error: i16,
    high_watermark: i64,
    last_stable_offset: i64,
    aborted: Option<Vec<(i64, i64)>>,
    records: Bytes,
}

fn fetch(addr: &str, isolation_level: i8) -> Fetched {
    let req = Request::Fetch(FetchRequest {
        isolation_level,
        ..common::requests::fetch_one(TOPIC, 0, 0, 1 << 20)
    });
    let Response::Fetch(r) = call(addr, ApiKey::Fetch, 11, &req) else {
        panic!("not a fetch response")
    };
    let p = &r.responses[0].partitions[0];
    Fetched {
        error: p.error_code,
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
        aborted: p
            .aborted_transactions
            .as_ref()
            .map(|a| a.iter().map(|t| (t.producer_id, t.first_offset)).collect()),
        records: p
            .records
            .as_ref()
            .map(|r| r.to_contiguous())
            .unwrap_or_default(),
    }
}

/// What a read_committed consumer keeps (Kafka's consumer rule): control batches are skipped,
/// and a producer's batches from an aborted transaction's first offset up to its marker.
fn committed_values(f: &Fetched) -> Vec<String> {
    let aborted = f.aborted.clone().unwrap_or_default();
    common::requests::read_committed_records(f.records.clone(), &aborted)
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap())
        .collect()
}

fn list_latest(addr: &str, isolation_level: i8) -> (i16, i64) {
    let req = Request::ListOffsets(ListOffsetsRequest {
        replica_id: -1,
        isolation_level,
        topics: vec![ListOffsetsTopic {
            name: TOPIC.into(),
            partitions: vec![ListOffsetsPartition {
                partition_index: 0,
                timestamp: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let Response::ListOffsets(r) = call(addr, ApiKey::ListOffsets, 5, &req) else {
        panic!("not a list offsets response")
    };
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

/// WriteTxnMarkers (v1) for `(producer, epoch, commit)` markers on `topic`'s partition 0: the
/// error of each.
fn write_markers(addr: &str, topic: &str, markers: &[(i64, i16, bool)]) -> Vec<i16> {
    let req = common::requests::txn_markers(topic, markers);
    let Response::WriteTxnMarkers(r) = call(addr, ApiKey::WriteTxnMarkers, 1, &req) else {
        panic!("not a WriteTxnMarkers response")
    };
    r.markers
        .iter()
        .map(|m| m.topics[0].partitions[0].error_code)
        .collect()
}

/// DescribeProducers of the partition: (producer id, epoch, current transaction's first offset).
fn describe_producers(addr: &str) -> Vec<(i64, i32, i64)> {
    use kafka_proto::messages::describe_producers_request::{
        DescribeProducersRequest, TopicRequest,
    };
    let req = Request::DescribeProducers(DescribeProducersRequest {
        topics: vec![TopicRequest {
            name: TOPIC.into(),
            partition_indexes: vec![0],
            ..Default::default()
        }],
        ..Default::default()
    });
    let Response::DescribeProducers(r) = call(addr, ApiKey::DescribeProducers, 0, &req) else {
        panic!("not a DescribeProducers response")
    };
    r.topics[0].partitions[0]
        .active_producers
        .iter()
        .map(|p| (p.producer_id, p.producer_epoch, p.current_txn_start_offset))
        .collect()
}

/// What librdkafka's consumer (kcat) reads of the partition from the beginning to its end (the
/// last stable offset for read_committed): "offset value" lines.
fn kcat_read(addr: &str, isolation: &str) -> String {
    let mut cmd = common::kcat();
    cmd.args([
        "-b",
        addr,
        "-t",
        TOPIC,
        "-p",
        "0",
        "-C",
        "-o",
        "beginning",
        "-e",
    ]);
    cmd.args([
        "-X",
        &format!("isolation.level={isolation}"),
        "-f",
        "%o %s\n",
    ]);
    let (ok, out, err) = common::run_with_deadline(cmd, b"", Duration::from_secs(30));
    assert!(ok, "kcat failed: {err}");
    out
}

async fn leader_of(nodes: &[Option<Arc<Node>>]) -> usize {
    common::ready_leader_of(nodes, TOPIC).await
}

fn addr_of(nodes: &[Option<Arc<Node>>], i: usize) -> String {
    nodes[i].as_ref().unwrap().config().kafka_advertised.clone()
}

/// Runs blocking wire calls off the runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// Reads until the leader's answer settles (a new leader applies what it holds first).
async fn fetch_settled(addr: &str, want_hw: i64) -> Fetched {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = addr.to_owned();
        let f = blocking(move || fetch(&a, 1)).await;
        if (f.error == 0 && f.high_watermark >= want_hw) || Instant::now() > deadline {
            return f;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_bound_read_committed_and_survive_failover_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[TOPIC]);
    let mut nodes = Vec::new();
    // Each node's Kafka listener task, aborted when the node stops (frees its port).
    let mut listeners = Vec::new();
    for c in &configs {
        let n = Node::start(c.clone()).await.unwrap();
        listeners.push(n.serve_kafka().await.unwrap());
        nodes.push(Some(n));
    }
    let leader = leader_of(&nodes).await;
    let stream = nodes[leader].as_ref().unwrap().stream(TOPIC).unwrap();
    let wait = Duration::from_secs(10);
    // The client Produce path refuses a transactional batch without a transactional id:
    // TRANSACTIONAL_ID_AUTHORIZATION_FAILED, nothing stored.
    let a = addr_of(&nodes, leader);
    blocking(move || {
        let mut c = common::kafka::KafkaConn::connect(a.parse().unwrap()).unwrap();
        assert_eq!(c.produce(TOPIC, txn_batch(P1, 0, &["x"])).unwrap().0, 53);
    })
    .await;
    assert_eq!(stream.visible().high_watermark, 0);
    // Producer 1 opens at 0, producer 2 at 2, a plain batch at 4.
    for (batch, span) in [
        (txn_batch(P1, 0, &["a1", "a2"]), 2),
        (txn_batch(P2, 0, &["b1"]), 1),
        (txn_batch(P1, 2, &["a3"]), 1),
        (common::batch(1, b"c"), 1),
    ] {
        stream.append(batch, span, wait).await.unwrap();
    }
    let addr = addr_of(&nodes, leader);

    // Both transactions open: read_committed stops at 0, read_uncommitted reads everything;
    // both are told the last stable offset.
    let a = addr.clone();
    blocking(move || {
        let f = fetch(&a, 1);
        assert_eq!((f.error, f.high_watermark, f.last_stable_offset), (0, 5, 0));
        assert!(f.records.is_empty(), "nothing at or above the LSO");
        assert_eq!(f.aborted, Some(vec![]));
        let f = fetch(&a, 0);
        assert_eq!((f.high_watermark, f.last_stable_offset), (5, 0));
        assert_eq!(committed_values(&f), ["a1", "a2", "b1", "a3", "c"]);
        assert_eq!(f.aborted, None);
        assert_eq!(list_latest(&a, 1), (0, 0));
        assert_eq!(list_latest(&a, 0), (0, 5));

        // Commit producer 1, abort producer 2: one request, markers at 5 and 6.
        assert_eq!(
            write_markers(&a, TOPIC, &[(P1, 0, true), (P2, 0, false)]),
            [0, 0]
        );
        let f = fetch(&a, 1);
        assert_eq!((f.high_watermark, f.last_stable_offset), (7, 7));
        assert_eq!(f.aborted, Some(vec![(P2, 2)]));
        assert_eq!(committed_values(&f), ["a1", "a2", "a3", "c"]);
        assert_eq!(list_latest(&a, 1), (0, 7));

        // Fencing: an epoch bump at the end of a transaction (KIP-890) is taken, an older
        // marker after it refused; unknown partitions and followers answer as Kafka's.
        assert_eq!(write_markers(&a, TOPIC, &[(P1, 1, true)]), [0]);
        assert_eq!(write_markers(&a, TOPIC, &[(P1, 0, false)]), [47]);
        assert_eq!(write_markers(&a, "no-such-topic", &[(P1, 1, true)]), [3]);
    })
    .await;
    let follower = (leader + 1) % 3;
    let f_addr = addr_of(&nodes, follower);
    blocking(move || assert_eq!(write_markers(&f_addr, TOPIC, &[(P2, 0, true)]), [6])).await;

    // Producer 2 opens a new transaction at 8 (7 is producer 1's epoch-bump marker; the
    // refused marker wrote nothing).
    stream
        .append(txn_batch(P2, 1, &["b2"]), 1, wait)
        .await
        .unwrap();
    let a = addr.clone();
    blocking(move || {
        let f = fetch(&a, 1);
        assert_eq!((f.high_watermark, f.last_stable_offset), (9, 8));
        assert_eq!(committed_values(&f), ["a1", "a2", "a3", "c"]);
        // DescribeProducers shows the open transaction's first offset (-1: none open) and
        // producer 1's bumped epoch.
        assert_eq!(describe_producers(&a), [(P1, 1, -1), (P2, 0, 8)]);
    })
    .await;

    // The leader goes: the new one has the same open transaction and aborted list. (A stream
    // handle keeps its store open: dropped first, so the node can restart on its directory.)
    drop(stream);
    nodes[leader].take().unwrap().shutdown();
    listeners[leader].abort();
    let leader = leader_of(&nodes).await;
    let addr = addr_of(&nodes, leader);
    let f = fetch_settled(&addr, 9).await;
    assert_eq!(f.last_stable_offset, 8);
    assert_eq!(f.aborted, Some(vec![(P2, 2)]));
    let a = addr.clone();
    blocking(move || {
        assert_eq!(list_latest(&a, 1), (0, 8));
        // The new leader commits producer 2's second transaction.
        assert_eq!(write_markers(&a, TOPIC, &[(P2, 0, true)]), [0]);
        let f = fetch(&a, 1);
        assert_eq!((f.high_watermark, f.last_stable_offset), (10, 10));
        assert_eq!(committed_values(&f), ["a1", "a2", "a3", "c", "b2"]);
    })
    .await;
    // Producer 1 opens one more, left open across the restart.
    let stream = nodes[leader].as_ref().unwrap().stream(TOPIC).unwrap();
    stream
        .append(txn_batch(P1, 0, &["a4"]), 1, wait)
        .await
        .unwrap_err();
    // (Refused: producer 1 is at epoch 1 now; its next transaction starts the sequence at 0.)
    let bumped = RecordBatchBuilder::new(Compression::None)
        .producer(P1, 1, 0)
        .transactional(true)
        .with_records(&[NewRecord::new(1_700_000_000_000, &b"a4"[..])])
        .unwrap()
        .build()
        .unwrap();
    stream.append(bumped, 1, wait).await.unwrap();

    // Every node restarts (the stopped one too): snapshot + replay give the same state.
    drop(stream);
    for (n, l) in nodes.iter_mut().zip(&listeners) {
        if let Some(n) = n.take() {
            n.shutdown();
        }
        l.abort();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for (i, c) in configs.iter().enumerate() {
        let n = Node::start(c.clone()).await.unwrap();
        listeners[i] = n.serve_kafka().await.unwrap();
        nodes[i] = Some(n);
    }
    let leader = leader_of(&nodes).await;
    let addr = addr_of(&nodes, leader);
    let f = fetch_settled(&addr, 11).await;
    assert_eq!((f.high_watermark, f.last_stable_offset), (11, 10));
    assert_eq!(f.aborted, Some(vec![(P2, 2)]));
    assert_eq!(committed_values(&f), ["a1", "a2", "a3", "c", "b2"]);
    let a = addr.clone();
    blocking(move || {
        assert_eq!(list_latest(&a, 1), (0, 10));
        // librdkafka's read_committed consumer: the committed records, no marker, nothing of
        // the aborted transaction, and it ends at the last stable offset (a4 at 10 is open).
        const COMMITTED: &str = "0 a1\n1 a2\n3 a3\n4 c\n8 b2\n";
        assert_eq!(kcat_read(&a, "read_committed"), COMMITTED);
        assert_eq!(
            kcat_read(&a, "read_uncommitted"),
            "0 a1\n1 a2\n2 b1\n3 a3\n4 c\n8 b2\n10 a4\n"
        );
        assert_eq!(write_markers(&a, TOPIC, &[(P1, 1, false)]), [0]);
        let f = fetch(&a, 1);
        assert_eq!((f.high_watermark, f.last_stable_offset), (12, 12));
        assert_eq!(f.aborted, Some(vec![(P2, 2), (P1, 10)]));
        assert_eq!(committed_values(&f), ["a1", "a2", "a3", "c", "b2"]);
        // a4 aborted: librdkafka skips it.
        assert_eq!(kcat_read(&a, "read_committed"), COMMITTED);
    })
    .await;
    for n in nodes.iter().flatten() {
        n.shutdown();
    }
    for l in &listeners {
        l.abort();
    }
}
