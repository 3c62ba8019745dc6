//! KIP-890 transaction version 2 over the Kafka protocol, on a three-node cluster, driven with
//! raw requests as a Kafka 4.x producer drives it: ApiVersions finalizes
//! `transaction.version` 2; a transactional Produce v12 adds its partition itself (no
//! AddPartitionsToTxn), TxnOffsetCommit v5 its group (no AddOffsetsToTxn); EndTxn v5 bumps the
//! producer epoch and returns it, a retry of it is answered as the first, and a delayed EndTxn
//! of the older epoch can neither commit nor abort the next transaction (KAFKA-17754).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster_configs;
use common::kafka::KafkaConn;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{decode_response, encode_request, Request, Response};
use kafka_proto::header::RequestHeader;
use kafka_proto::messages::api_versions_request::ApiVersionsRequest;
use kafka_proto::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_proto::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_proto::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_proto::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};
use kafka_proto::RecordChunks;
use vdl_server::Node;

const TOPIC: &str = "txn-v2";
const ID: &str = "v2-app";
const GROUP: &str = "v2-group";

const NONE: i16 = 0;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const PRODUCER_FENCED: i16 = 90;

fn call(addr: &str, api: ApiKey, version: i16, request: &Request) -> Response {
    let addr = addr.parse().expect("HOST:PORT");
    KafkaConn::connect(addr)
        .and_then(|mut c| c.call(api, version, request))
        .expect("a response")
}

/// EndTxn v5: (error, producer id, epoch).
fn end_txn(addr: &str, pid: i64, epoch: i16, commit: bool) -> (i16, i64, i16) {
    let req = common::requests::end_txn(ID, pid, epoch, commit);
    let Response::EndTxn(r) = call(addr, ApiKey::EndTxn, 5, &req) else {
        panic!("not an EndTxn response")
    };
    (r.error_code, r.producer_id, r.producer_epoch)
}

/// EndTxn v5, retried while the previous decision's markers are written
/// (CONCURRENT_TRANSACTIONS): the first other answer.
fn end_txn_settled(addr: &str, pid: i64, epoch: i16, commit: bool) -> (i16, i64, i16) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let answer = end_txn(addr, pid, epoch, commit);
        if answer.0 != CONCURRENT_TRANSACTIONS || Instant::now() > deadline {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Produce v12 (acks=all) of a transactional batch of `values` to partition 0.
fn produce_request(pid: i64, epoch: i16, seq: i32, values: &[&str]) -> Request {
    let recs: Vec<NewRecord> = values
        .iter()
        .map(|v| NewRecord::new(1_700_000_000_000, Bytes::copy_from_slice(v.as_bytes())))
        .collect();
    let batch = RecordBatchBuilder::new(Compression::None)
        .producer(pid, epoch, seq)
        .transactional(true)
        .with_records(&recs)
        .unwrap()
        .build()
        .unwrap();
    Request::Produce(ProduceRequest {
        transactional_id: Some(ID.into()),
        acks: -1,
        timeout_ms: 10_000,
        topic_data: vec![TopicProduceData {
            name: TOPIC.into(),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(RecordChunks::from(batch)),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// [`produce_request`] sent and answered: its error.
fn produce(addr: &str, pid: i64, epoch: i16, seq: i32, values: &[&str]) -> i16 {
    let req = produce_request(pid, epoch, seq, values);
    let Response::Produce(r) = call(addr, ApiKey::Produce, 12, &req) else {
        panic!("not a Produce response")
    };
    r.responses[0].partition_responses[0].error_code
}

/// Sends every Produce v12 of `requests` on one connection before reading any answer (as a
/// producer with several requests in flight does); their errors, in order.
fn produce_pipelined(addr: &str, requests: &[Request]) -> Vec<i16> {
    use std::io::{Read, Write};
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    for (i, req) in requests.iter().enumerate() {
        let header = RequestHeader {
            api_key: ApiKey::Produce as i16,
            api_version: 12,
            correlation_id: i32::try_from(i).unwrap(),
            client_id: Some("pipelined".into()),
            ..Default::default()
        };
        for seg in encode_request(&header, req).unwrap() {
            sock.write_all(&seg).unwrap();
        }
    }
    (0..requests.len())
        .map(|_| {
            let mut len = [0u8; 4];
            sock.read_exact(&mut len).unwrap();
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            sock.read_exact(&mut body).unwrap();
            match decode_response(ApiKey::Produce, 12, Bytes::from(body)).unwrap() {
                (_, Response::Produce(r)) => r.responses[0].partition_responses[0].error_code,
                (_, other) => panic!("not a Produce response: {other:?}"),
            }
        })
        .collect()
}

/// WriteTxnMarkers v2 (KIP-1228: it names each marker's transaction version) of one marker
/// of transaction version 2 on partition 0: the partition's error.
fn write_marker_v2(addr: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    let mut req = common::requests::txn_markers(TOPIC, &[(pid, epoch, commit)]);
    if let Request::WriteTxnMarkers(r) = &mut req {
        r.markers[0].transaction_version = 2;
    }
    let Response::WriteTxnMarkers(r) = call(addr, ApiKey::WriteTxnMarkers, 2, &req) else {
        panic!("not a WriteTxnMarkers response")
    };
    r.markers[0].topics[0].partitions[0].error_code
}

/// TxnOffsetCommit of `GROUP`'s offset of partition 0 at `version`: the partition's error.
fn txn_offset_commit(addr: &str, pid: i64, epoch: i16, version: i16) -> i16 {
    let req = Request::TxnOffsetCommit(TxnOffsetCommitRequest {
        transactional_id: ID.into(),
        group_id: GROUP.into(),
        producer_id: pid,
        producer_epoch: epoch,
        generation_id: -1,
        topics: vec![TxnOffsetCommitRequestTopic {
            name: TOPIC.into(),
            partitions: vec![TxnOffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: 1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let Response::TxnOffsetCommit(r) = call(addr, ApiKey::TxnOffsetCommit, version, &req) else {
        panic!("not a TxnOffsetCommit response")
    };
    r.topics[0].partitions[0].error_code
}

/// DescribeTransactions of `ID`: (state, producer epoch, partitions).
fn describe(addr: &str) -> (String, i16, usize) {
    let req = common::requests::describe_transaction(ID);
    let Response::DescribeTransactions(r) = call(addr, ApiKey::DescribeTransactions, 0, &req)
    else {
        panic!("not a DescribeTransactions response")
    };
    let s = common::requests::TxnState::of(&r);
    (s.state, s.producer_epoch, s.partitions)
}

/// A read_committed Fetch of partition 0: (last stable offset, the committed values).
fn read_committed(addr: &str) -> (i64, Vec<String>) {
    let req = Request::Fetch(FetchRequest {
        max_wait_ms: 0,
        max_bytes: 1 << 20,
        isolation_level: 1,
        topics: vec![FetchTopic {
            topic: TOPIC.into(),
            partitions: vec![FetchPartition {
                partition_max_bytes: 1 << 20,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let Response::Fetch(r) = call(addr, ApiKey::Fetch, 11, &req) else {
        panic!("not a fetch response")
    };
    let p = &r.responses[0].partitions[0];
    let (aborted, records) = common::requests::aborted_and_records(p);
    let values = common::requests::read_committed_records(records, &aborted)
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap())
        .collect();
    (p.last_stable_offset, values)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

fn addr_of(nodes: &[Option<Arc<Node>>], i: usize) -> String {
    nodes[i].as_ref().unwrap().config().kafka_advertised.clone()
}

/// The transaction coordinator's address, once it coordinates.
async fn coordinator(nodes: &[Option<Arc<Node>>]) -> String {
    let asked = addr_of(nodes, 0);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let a = asked.clone();
        let (code, addr) = blocking(move || {
            let req = Request::FindCoordinator(FindCoordinatorRequest {
                key: ID.into(),
                key_type: 1,
                ..Default::default()
            });
            let Response::FindCoordinator(r) = call(&a, ApiKey::FindCoordinator, 3, &req) else {
                panic!("not a FindCoordinator response")
            };
            (r.error_code, format!("{}:{}", r.host, r.port))
        })
        .await;
        if code == NONE {
            let probe = addr.clone();
            let init = blocking(move || {
                let req = common::requests::init_transactional("probe", 60_000);
                match call(&probe, ApiKey::InitProducerId, 4, &req) {
                    Response::InitProducerId(r) => r.error_code,
                    _ => panic!("not an InitProducerId response"),
                }
            })
            .await;
            if init == NONE {
                return addr;
            }
        }
        assert!(Instant::now() < deadline, "no coordinator");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// ApiVersions finalizes `transaction.version` 2 as a Kafka 4.x broker does, and serves the
/// versions of transaction version 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_finalizes_transaction_version_2() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(cluster_configs(1, dir.path(), &[TOPIC])[0].clone())
        .await
        .unwrap();
    let _listener = node.serve_kafka().await.unwrap();
    let addr = node.config().kafka_advertised.clone();
    let r = blocking(move || {
        call(
            &addr,
            ApiKey::ApiVersions,
            3,
            &Request::ApiVersions(ApiVersionsRequest::default()),
        )
    })
    .await;
    let Response::ApiVersions(r) = r else {
        panic!("not an ApiVersions response")
    };
    let max = |api: ApiKey| {
        r.api_keys
            .iter()
            .find(|k| k.api_key == api.as_i16())
            .map(|k| k.max_version)
    };
    assert_eq!(max(ApiKey::EndTxn), Some(5));
    assert_eq!(max(ApiKey::Produce), Some(12));
    assert_eq!(max(ApiKey::TxnOffsetCommit), Some(5));
    let supported: Vec<_> = r
        .supported_features
        .iter()
        .map(|f| (f.name.as_str(), f.min_version, f.max_version))
        .collect();
    assert_eq!(supported, [("transaction.version", 0, 2)]);
    let finalized: Vec<_> = r
        .finalized_features
        .iter()
        .map(|f| (f.name.as_str(), f.min_version_level, f.max_version_level))
        .collect();
    assert_eq!(finalized, [("transaction.version", 2, 2)]);
    assert!(r.finalized_features_epoch >= 0, "a client ignores epoch -1");
}

/// Three nodes serving Kafka with `TOPIC`, under `dir`: the nodes, their listeners, the
/// address of the topic's ready leader and of the transaction coordinator.
async fn start_cluster(
    dir: &std::path::Path,
) -> (
    Vec<Option<Arc<Node>>>,
    Vec<tokio::task::JoinHandle<()>>,
    String,
    String,
) {
    let mut nodes = Vec::new();
    let mut listeners = Vec::new();
    for c in cluster_configs(3, dir, &[TOPIC]) {
        let n = Node::start(c).await.unwrap();
        listeners.push(n.serve_kafka().await.unwrap());
        nodes.push(Some(n));
    }
    let leader = addr_of(&nodes, common::ready_leader_of(&nodes, TOPIC).await);
    let coord = coordinator(&nodes).await;
    (nodes, listeners, leader, coord)
}

/// The version-2 flow, with the partition's leader asking the coordinator to add it (the
/// leader need not be the coordinator), and KAFKA-17754: a delayed EndTxn of the previous
/// transaction's epoch is fenced instead of ending the next transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epoch_bump_retries_implicit_adds_and_a_delayed_end_txn_is_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, _listeners, leader, coord) = start_cluster(dir.path()).await;
    let (c, l) = (coord.clone(), leader.clone());
    blocking(move || {
        let req = common::requests::init_transactional(ID, 60_000);
        let Response::InitProducerId(init) = call(&c, ApiKey::InitProducerId, 5, &req) else {
            panic!("not an InitProducerId response")
        };
        assert_eq!((init.error_code, init.producer_epoch), (NONE, 0));
        let pid = init.producer_id;

        // Transaction 1, epoch 0: the first batch adds the partition, TxnOffsetCommit v5 the
        // group; no AddPartitionsToTxn, no AddOffsetsToTxn.
        assert_eq!(produce(&l, pid, 0, 0, &["one-a", "one-b"]), NONE);
        assert_eq!(describe(&c), ("Ongoing".into(), 0, 1));
        assert_eq!(
            txn_offset_commit(&c, pid, 0, 4),
            INVALID_TXN_STATE,
            "v4 adds nothing"
        );
        assert_eq!(txn_offset_commit(&c, pid, 0, 5), NONE);
        assert_eq!(produce(&l, pid, 0, 2, &["one-c"]), NONE);

        // EndTxn v5 bumps the epoch and returns it.
        assert_eq!(end_txn(&c, pid, 0, true), (NONE, pid, 1));
        // A retry of it (the answer was lost) gets the same answer once the markers are
        // written; the other decision is refused.
        assert_eq!(end_txn_settled(&c, pid, 0, true), (NONE, pid, 1));
        assert_eq!(end_txn(&c, pid, 0, false).0, INVALID_TXN_STATE);
        assert_eq!(describe(&c), ("CompleteCommit".into(), 1, 0));
        // A late batch of the ended transaction: the marker's bumped epoch fences it.
        assert_eq!(
            produce(&l, pid, 0, 3, &["late"]),
            INVALID_PRODUCER_EPOCH,
            "a batch of the ended epoch"
        );

        // Transaction 2, epoch 1 (sequences start again at 0).
        assert_eq!(produce(&l, pid, 1, 0, &["two-a"]), NONE);
        assert_eq!(describe(&c), ("Ongoing".into(), 1, 1));
        // KAFKA-17754: transaction 1's EndTxn arrives late (a retry held up in the network).
        // Under version 1 it would end transaction 2; here the older epoch is fenced.
        assert_eq!(end_txn(&c, pid, 0, true).0, PRODUCER_FENCED);
        assert_eq!(end_txn(&c, pid, 0, false).0, PRODUCER_FENCED);
        assert_eq!(describe(&c), ("Ongoing".into(), 1, 1), "still open");
        assert_eq!(produce(&l, pid, 1, 1, &["two-b"]), NONE);
        assert_eq!(end_txn(&c, pid, 1, false), (NONE, pid, 2));
        assert_eq!(end_txn_settled(&c, pid, 1, false), (NONE, pid, 2));

        // Transaction 3 commits after the abort.
        assert_eq!(produce(&l, pid, 2, 0, &["three"]), NONE);
        assert_eq!(end_txn(&c, pid, 2, true), (NONE, pid, 3));
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let l = leader.clone();
        let (lso, values) = blocking(move || read_committed(&l)).await;
        // 3 + marker, 2 + marker (aborted), 1 + marker.
        if lso == 9 {
            assert_eq!(values, ["one-a", "one-b", "one-c", "three"]);
            break;
        }
        assert!(Instant::now() < deadline, "last stable offset {lso}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A producer with several requests in flight sends a transaction's first batches to a
/// partition back to back: the first waits for its implicit AddPartitions, and the next must
/// not overtake it (the partition would refuse it OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to a
/// transactional producer: seen with the Java 4.1.1 client before the connection kept its
/// held-back Produce requests in order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_first_batches_of_a_transaction_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, listeners, leader, coord) = start_cluster(dir.path()).await;
    blocking(move || {
        let req = common::requests::init_transactional(ID, 60_000);
        let Response::InitProducerId(init) = call(&coord, ApiKey::InitProducerId, 5, &req) else {
            panic!("not an InitProducerId response")
        };
        let pid = init.producer_id;
        for epoch in 0..3i16 {
            let requests: Vec<Request> = (0..4)
                .map(|seq| produce_request(pid, epoch, seq, &["pipelined"]))
                .collect();
            assert_eq!(
                produce_pipelined(&leader, &requests),
                [NONE; 4],
                "transaction {epoch}"
            );
            assert_eq!(
                end_txn_settled(&coord, pid, epoch, true),
                (NONE, pid, epoch + 1)
            );
        }
    })
    .await;
    drop(listeners);
}

/// A stale marker of an ended transaction (delayed in the network, or written a second time
/// by a partition's former leader) reaches the partition after the next transaction's first
/// batch. Under version 2 it carries the epoch the next transaction's batches use, so only
/// the partition's epoch check (Kafka 4's: a version-2 marker's epoch must be above the
/// producer's) keeps it from ending that transaction: refused with INVALID_PRODUCER_EPOCH,
/// the later transaction stays open, and read_committed shows it only after its own commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_marker_of_the_previous_transaction_cannot_end_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, _listeners, leader, coord) = start_cluster(dir.path()).await;
    let (c, l) = (coord.clone(), leader.clone());
    blocking(move || {
        let req = common::requests::init_transactional(ID, 60_000);
        let Response::InitProducerId(init) = call(&c, ApiKey::InitProducerId, 5, &req) else {
            panic!("not an InitProducerId response")
        };
        let pid = init.producer_id;
        // Transaction 1 (epoch 0) commits; its marker (epoch 1) is written at offset 1.
        assert_eq!(produce(&l, pid, 0, 0, &["one"]), NONE);
        assert_eq!(end_txn(&c, pid, 0, true), (NONE, pid, 1));
        assert_eq!(end_txn_settled(&c, pid, 0, true), (NONE, pid, 1));
        // Transaction 2 (epoch 1) writes its first batch at offset 2.
        assert_eq!(produce(&l, pid, 1, 0, &["two-a"]), NONE);
        // Transaction 1's marker again, COMMIT and ABORT (either could be stale).
        let stale = [
            write_marker_v2(&l, pid, 1, true),
            write_marker_v2(&l, pid, 1, false),
        ];
        let (lso, values) = read_committed(&l);
        assert_eq!(
            (lso, values.as_slice()),
            (2, &["one".to_string()][..]),
            "transaction 2 is still open"
        );
        assert_eq!(stale, [INVALID_PRODUCER_EPOCH; 2]);
        // Transaction 2 goes on and commits with its own marker (epoch 2).
        assert_eq!(produce(&l, pid, 1, 1, &["two-b"]), NONE);
        assert_eq!(describe(&c), ("Ongoing".into(), 1, 1));
        assert_eq!(end_txn(&c, pid, 1, true), (NONE, pid, 2));
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let l = leader.clone();
        let (lso, values) = blocking(move || read_committed(&l)).await;
        // one, marker, two-a, two-b, marker.
        if lso == 5 {
            assert_eq!(values, ["one", "two-a", "two-b"]);
            break;
        }
        assert!(Instant::now() < deadline, "last stable offset {lso}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
