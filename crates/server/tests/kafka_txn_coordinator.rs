//! The transaction coordinator over the Kafka protocol, on a three-node cluster, driven as a
//! transactional producer drives it: FindCoordinator (key type 1), InitProducerId with a
//! transactional id, AddPartitionsToTxn, a transactional Produce, EndTxn; then what a
//! read_committed Fetch sees. Also: an abort, fencing by a new InitProducerId, a batch for a
//! partition not added (INVALID_TXN_STATE), DescribeTransactions and ListTransactions, the
//! coordinator's failover in the middle of a transaction, the timeout that aborts, and an open
//! transaction (with a group added) across a restart of every node.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster_configs;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_proto::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_proto::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_proto::messages::list_transactions_request::ListTransactionsRequest;
use kafka_proto::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};
use kafka_proto::RecordChunks;
use vdl_server::Node;

const TOPIC: &str = "txn";

fn call(addr: &str, api: ApiKey, version: i16, request: &Request) -> Response {
    let addr = addr.parse().expect("HOST:PORT");
    common::kafka::KafkaConn::connect(addr)
        .and_then(|mut c| c.call(api, version, request))
        .expect("a response")
}

/// FindCoordinator v3 for transactional id `id`: (error, "HOST:PORT").
fn find_coordinator(addr: &str, id: &str) -> (i16, String) {
    let req = Request::FindCoordinator(FindCoordinatorRequest {
        key: id.into(),
        key_type: 1,
        ..Default::default()
    });
    let Response::FindCoordinator(r) = call(addr, ApiKey::FindCoordinator, 3, &req) else {
        panic!("not a FindCoordinator response")
    };
    (r.error_code, format!("{}:{}", r.host, r.port))
}

/// InitProducerId v4 for `id`: (error, producer id, epoch).
fn init(addr: &str, id: &str, timeout_ms: i32) -> (i16, i64, i16) {
    let req = common::requests::init_transactional(id, timeout_ms);
    let Response::InitProducerId(r) = call(addr, ApiKey::InitProducerId, 4, &req) else {
        panic!("not an InitProducerId response")
    };
    (r.error_code, r.producer_id, r.producer_epoch)
}

/// AddPartitionsToTxn v3 of `TOPIC`'s partition 0: its error.
fn add_partition(addr: &str, id: &str, pid: i64, epoch: i16) -> i16 {
    let req = common::requests::add_partitions_to_txn(id, pid, epoch, TOPIC, 0);
    let Response::AddPartitionsToTxn(r) = call(addr, ApiKey::AddPartitionsToTxn, 3, &req) else {
        panic!("not an AddPartitionsToTxn response")
    };
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

/// AddPartitionsToTxn v4 (the brokers' batched form) with `verify_only` for `TOPIC`'s
/// partition 0: (top-level error, the partition's error).
fn verify_partition(addr: &str, id: &str, pid: i64, epoch: i16) -> (i16, i16) {
    let req = Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
        transactions: vec![AddPartitionsToTxnTransaction {
            transactional_id: id.into(),
            producer_id: pid,
            producer_epoch: epoch,
            verify_only: true,
            topics: vec![AddPartitionsToTxnTopic {
                name: TOPIC.into(),
                partitions: vec![0],
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let Response::AddPartitionsToTxn(r) = call(addr, ApiKey::AddPartitionsToTxn, 4, &req) else {
        panic!("not an AddPartitionsToTxn response")
    };
    let t = &r.results_by_transaction[0];
    assert_eq!(t.transactional_id, id);
    (
        r.error_code,
        t.topic_results[0].results_by_partition[0].partition_error_code,
    )
}

/// AddOffsetsToTxn v3 of group `group`: its error.
fn add_offsets(addr: &str, id: &str, pid: i64, epoch: i16, group: &str) -> i16 {
    let req = common::requests::add_offsets_to_txn(id, pid, epoch, group);
    let Response::AddOffsetsToTxn(r) = call(addr, ApiKey::AddOffsetsToTxn, 3, &req) else {
        panic!("not an AddOffsetsToTxn response")
    };
    r.error_code
}

/// EndTxn v3: its error.
fn end_txn(addr: &str, id: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    let req = common::requests::end_txn(id, pid, epoch, commit);
    let Response::EndTxn(r) = call(addr, ApiKey::EndTxn, 3, &req) else {
        panic!("not an EndTxn response")
    };
    r.error_code
}

/// Produce v9 (acks=all) of a transactional batch of `values` to partition 0: its error.
fn produce(addr: &str, id: &str, pid: i64, epoch: i16, seq: i32, values: &[&str]) -> i16 {
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
    let req = Request::Produce(ProduceRequest {
        transactional_id: Some(id.into()),
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
    });
    let Response::Produce(r) = call(addr, ApiKey::Produce, 9, &req) else {
        panic!("not a Produce response")
    };
    r.responses[0].partition_responses[0].error_code
}

/// DescribeTransactions of `id`: (error, state, producer id, epoch, partitions).
fn describe(addr: &str, id: &str) -> (i16, String, i64, i16, usize) {
    let req = common::requests::describe_transaction(id);
    let Response::DescribeTransactions(r) = call(addr, ApiKey::DescribeTransactions, 0, &req)
    else {
        panic!("not a DescribeTransactions response")
    };
    let s = common::requests::TxnState::of(&r);
    (
        s.error_code,
        s.state,
        s.producer_id,
        s.producer_epoch,
        s.partitions,
    )
}

/// ListTransactions v1 (no filter): (transactional id, state).
fn list(addr: &str) -> Vec<(String, String)> {
    let req = Request::ListTransactions(ListTransactionsRequest {
        duration_filter: -1,
        ..Default::default()
    });
    let Response::ListTransactions(r) = call(addr, ApiKey::ListTransactions, 1, &req) else {
        panic!("not a ListTransactions response")
    };
    assert_eq!(r.error_code, 0);
    r.transaction_states
        .iter()
        .map(|t| (t.transactional_id.clone(), t.transaction_state.clone()))
        .collect()
}

/// A read_committed Fetch of partition 0: (last stable offset, aborted producer ids, the
/// values a read_committed consumer keeps).
fn read_committed(addr: &str) -> (i64, Vec<i64>, Vec<String>) {
    let req = Request::Fetch(FetchRequest {
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: 1 << 20,
        isolation_level: 1,
        topics: vec![FetchTopic {
            topic: TOPIC.into(),
            partitions: vec![FetchPartition {
                partition: 0,
                fetch_offset: 0,
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
    let aborted_pids = aborted.iter().map(|a| a.0).collect();
    let values = common::requests::read_committed_records(records, &aborted)
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap())
        .collect();
    (p.last_stable_offset, aborted_pids, values)
}

/// Runs blocking wire calls off the runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// Polls `f` (off the runtime) until `done` holds of its answer, for at most 15 s.
async fn until<T: Send + std::fmt::Debug + 'static>(
    f: impl Fn() -> T + Send + Sync + Clone + 'static,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let g = f.clone();
        let v = blocking(g).await;
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "still {v:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The node leading `TOPIC`'s partition (index into `nodes`).
async fn partition_leader(nodes: &[Option<Arc<Node>>]) -> usize {
    common::ready_leader_of(nodes, TOPIC).await
}

fn addr_of(nodes: &[Option<Arc<Node>>], i: usize) -> String {
    nodes[i].as_ref().unwrap().config().kafka_advertised.clone()
}

/// The coordinator's address as FindCoordinator on a live node names it, once it answers.
async fn coordinator(nodes: &[Option<Arc<Node>>], id: &str) -> String {
    let asked = addr_of(nodes, nodes.iter().position(Option::is_some).unwrap());
    let live: Vec<String> = (0..nodes.len())
        .filter(|i| nodes[*i].is_some())
        .map(|i| addr_of(nodes, i))
        .collect();
    let id = id.to_string();
    let (_, addr) = until(
        move || find_coordinator(&asked, &id),
        |(e, a)| *e == 0 && live.contains(a),
    )
    .await;
    // Named as soon as it leads; it coordinates once it has applied its term's start
    // (NOT_COORDINATOR until then, which clients retry).
    let a = addr.clone();
    until(move || describe(&a, "probe").0, |e| *e != 16).await;
    addr
}

/// Starts a node of each of `configs` with its Kafka listener.
async fn start_nodes(
    configs: &[vdl_server::config::NodeConfig],
) -> (Vec<Option<Arc<Node>>>, Vec<tokio::task::JoinHandle<()>>) {
    let mut nodes = Vec::new();
    let mut listeners = Vec::new();
    for c in configs {
        let n = Node::start(c.clone()).await.unwrap();
        listeners.push(n.serve_kafka().await.unwrap());
        nodes.push(Some(n));
    }
    (nodes, listeners)
}

/// A three-node cluster with the stream `TOPIC`.
async fn start_cluster(
    dir: &std::path::Path,
) -> (Vec<Option<Arc<Node>>>, Vec<tokio::task::JoinHandle<()>>) {
    start_nodes(&cluster_configs(3, dir, &[TOPIC])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_abort_fencing_and_the_admin_view() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _listeners) = start_cluster(dir.path()).await;
    let leader = addr_of(&nodes, partition_leader(&nodes).await);
    let coord = coordinator(&nodes, "t1").await;
    let (c, l) = (coord.clone(), leader.clone());
    blocking(move || {
        let (e, pid, epoch) = init(&c, "t1", 60_000);
        assert_eq!((e, epoch), (0, 0));
        // A batch of a partition not added is refused.
        assert_eq!(
            produce(&l, "t1", pid, epoch, 0, &["x"]),
            48,
            "INVALID_TXN_STATE"
        );
        assert_eq!(
            verify_partition(&c, "t1", pid, epoch),
            (0, 48),
            "not added yet"
        );
        assert_eq!(add_partition(&c, "t1", pid, epoch), 0);
        // KIP-890 part 1: the brokers' verification answers from the state.
        assert_eq!(verify_partition(&c, "t1", pid, epoch), (0, 0));
        assert_eq!(verify_partition(&c, "t1", pid, epoch + 1), (0, 90));
        assert_eq!(produce(&l, "t1", pid, epoch, 0, &["a1", "a2"]), 0);
        let (lso, _, values) = read_committed(&l);
        assert_eq!(lso, 0, "the open transaction holds the last stable offset");
        assert!(values.is_empty());
        assert_eq!(describe(&c, "t1"), (0, "Ongoing".into(), pid, 0, 1));
        assert_eq!(list(&c), [("t1".to_string(), "Ongoing".to_string())]);
        assert_eq!(end_txn(&c, "t1", pid, epoch, true), 0);
    })
    .await;
    let l = leader.clone();
    let (lso, _, values) = until(move || read_committed(&l), |r| r.0 == 3).await;
    assert_eq!((lso, values), (3, vec!["a1".to_string(), "a2".to_string()]));
    let c = coord.clone();
    until(move || describe(&c, "t1"), |d| d.1 == "CompleteCommit").await;

    // A second transaction, aborted: its records never show.
    let (c, l) = (coord.clone(), leader.clone());
    let pid = blocking(move || {
        let (_, _, pid, _, _) = describe(&c, "t1");
        assert_eq!(add_partition(&c, "t1", pid, 0), 0);
        assert_eq!(produce(&l, "t1", pid, 0, 2, &["b1"]), 0);
        assert_eq!(end_txn(&c, "t1", pid, 0, false), 0);
        pid
    })
    .await;
    let l = leader.clone();
    let (_, aborted, values) = until(move || read_committed(&l), |r| r.0 == 5).await;
    assert_eq!(aborted, [pid]);
    assert_eq!(values, ["a1", "a2"]);

    // A new producer of the id fences the old one.
    let (c, l) = (coord.clone(), leader.clone());
    let others: Vec<String> = (0..3)
        .map(|i| addr_of(&nodes, i))
        .filter(|a| *a != coord)
        .collect();
    blocking(move || {
        assert_eq!(
            until_done(|| init(&c, "t1", 60_000)),
            (0, pid, 1),
            "same id, next epoch"
        );
        assert_eq!(add_partition(&c, "t1", pid, 0), 90, "PRODUCER_FENCED");
        assert_eq!(end_txn(&c, "t1", pid, 0, true), 90);
        assert_eq!(produce(&l, "t1", pid, 0, 3, &["old"]), 48);
        // The new producer works; EndTxn of a transaction never begun is INVALID_TXN_STATE.
        assert_eq!(end_txn(&c, "t1", pid, 1, true), 48);
        assert_eq!(add_partition(&c, "t1", pid, 1), 0);
        assert_eq!(produce(&l, "t1", pid, 1, 0, &["c1"]), 0);
        assert_eq!(end_txn(&c, "t1", pid, 1, true), 0);
        // Another node is not the coordinator, and lists nothing.
        let other = others.first().unwrap();
        assert_eq!(end_txn(other, "t1", pid, 1, true), 16, "NOT_COORDINATOR");
        assert!(list(other).is_empty(), "only the coordinator lists");
    })
    .await;
    let l = leader.clone();
    let (_, _, values) = until(move || read_committed(&l), |r| r.2.len() == 3).await;
    assert_eq!(values, ["a1", "a2", "c1"]);
}

/// Retries InitProducerId while it answers CONCURRENT_TRANSACTIONS (51).
fn until_done(f: impl Fn() -> (i16, i64, i16)) -> (i16, i64, i16) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = f();
        if r.0 != 51 || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_failover_mid_transaction_and_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, listeners) = start_cluster(dir.path()).await;
    let coord = coordinator(&nodes, "t2").await;
    let leader = addr_of(&nodes, partition_leader(&nodes).await);
    let (c, l) = (coord.clone(), leader.clone());
    let (pid, epoch) = blocking(move || {
        let (e, pid, epoch) = init(&c, "t2", 60_000);
        assert_eq!(e, 0);
        assert_eq!(add_partition(&c, "t2", pid, epoch), 0);
        assert_eq!(produce(&l, "t2", pid, epoch, 0, &["f1"]), 0);
        (pid, epoch)
    })
    .await;

    // The coordinator goes; the next one carries on with the same transaction.
    let gone = (0..3).find(|i| addr_of(&nodes, *i) == coord).unwrap();
    nodes[gone].take().unwrap().shutdown();
    listeners[gone].abort();
    let coord = coordinator(&nodes, "t2").await;
    let leader = addr_of(&nodes, partition_leader(&nodes).await);
    let c = coord.clone();
    let ended = until(
        move || end_txn(&c, "t2", pid, epoch, true),
        |e| *e != 16 && *e != 15,
    )
    .await;
    assert_eq!(ended, 0);
    let l = leader.clone();
    let (_, _, values) = until(move || read_committed(&l), |r| !r.2.is_empty()).await;
    assert_eq!(values, ["f1"]);
    let c = coord.clone();
    until(move || describe(&c, "t2"), |d| d.1 == "CompleteCommit").await;

    // A transaction past its timeout is aborted, its producer fenced by the bumped epoch.
    let (c, l) = (coord.clone(), leader.clone());
    let (pid, epoch) = blocking(move || {
        let (e, pid, epoch) = until_done(|| init(&c, "t3", 1_000));
        assert_eq!(e, 0);
        assert_eq!(add_partition(&c, "t3", pid, epoch), 0);
        assert_eq!(produce(&l, "t3", pid, epoch, 0, &["late"]), 0);
        (pid, epoch)
    })
    .await;
    let c = coord.clone();
    let d = until(move || describe(&c, "t3"), |d| d.1 == "CompleteAbort").await;
    assert_eq!(
        (d.2, d.3),
        (pid, epoch + 1),
        "aborted with the epoch bumped"
    );
    let (c, l) = (coord.clone(), leader.clone());
    blocking(move || {
        assert_eq!(end_txn(&c, "t3", pid, epoch, true), 90, "PRODUCER_FENCED");
        let (_, aborted, values) = read_committed(&l);
        assert!(aborted.contains(&pid));
        assert_eq!(values, ["f1"]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_survives_a_restart_of_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[TOPIC]);
    let (mut nodes, listeners) = start_nodes(&configs).await;
    let coord = coordinator(&nodes, "t4").await;
    let leader = addr_of(&nodes, partition_leader(&nodes).await);
    let (c, l) = (coord.clone(), leader.clone());
    let (pid, epoch) = blocking(move || {
        let (e, pid, epoch) = init(&c, "t4", 60_000);
        assert_eq!(e, 0);
        assert_eq!(add_offsets(&c, "t4", pid, epoch, "g1"), 0);
        assert_eq!(
            add_offsets(&c, "t4", pid, epoch + 1, "g1"),
            90,
            "PRODUCER_FENCED"
        );
        assert_eq!(add_partition(&c, "t4", pid, epoch), 0);
        assert_eq!(produce(&l, "t4", pid, epoch, 0, &["r1"]), 0);
        (pid, epoch)
    })
    .await;

    for (n, l) in nodes.iter_mut().zip(&listeners) {
        n.take().unwrap().shutdown();
        l.abort();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (nodes, _listeners) = start_nodes(&configs).await;
    let coord = coordinator(&nodes, "t4").await;
    let leader = addr_of(&nodes, partition_leader(&nodes).await);
    let c = coord.clone();
    let d = until(move || describe(&c, "t4"), |d| d.0 == 0).await;
    assert_eq!(d, (0, "Ongoing".to_string(), pid, epoch, 1));
    let c = coord.clone();
    let ended = until(
        move || end_txn(&c, "t4", pid, epoch, true),
        |e| *e != 16 && *e != 15,
    )
    .await;
    assert_eq!(ended, 0);
    let l = leader.clone();
    let (_, _, values) = until(move || read_committed(&l), |r| !r.2.is_empty()).await;
    assert_eq!(values, ["r1"]);
}

/// A transactional id unused for `kafka.transactional_id_expiration_ms` is forgotten, as
/// Kafka's `transactional.id.expiration.ms` does: the coordinator no longer describes it, and
/// a producer coming back gets a new producer id. One with a transaction ongoing is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_transactional_ids_expire() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[TOPIC]);
    for c in &mut configs {
        c.kafka.transactional_id_expiration = Duration::from_millis(1_500);
    }
    let (nodes, _listeners) = start_nodes(&configs).await;
    let coord = coordinator(&nodes, "t5").await;
    let c = coord.clone();
    let (first, busy) = blocking(move || {
        let (e, pid, _) = init(&c, "t5", 60_000);
        assert_eq!(e, 0);
        // "t6" keeps a transaction open for longer than the expiration.
        let (e, busy, epoch) = init(&c, "t6", 60_000);
        assert_eq!(e, 0);
        assert_eq!(add_offsets(&c, "t6", busy, epoch, "g"), 0);
        (pid, busy)
    })
    .await;
    let c = coord.clone();
    // DescribeTransactions answers TRANSACTIONAL_ID_NOT_FOUND (105) once it is gone.
    until(move || describe(&c, "t5").0, |e| *e == 105).await;
    let c = coord.clone();
    blocking(move || {
        let d = describe(&c, "t6");
        assert_eq!(
            (d.0, d.1.as_str(), d.2),
            (0, "Ongoing", busy),
            "ongoing: kept"
        );
        let (e, pid, epoch) = init(&c, "t5", 60_000);
        assert_eq!(e, 0);
        assert_ne!(pid, first, "a new producer id");
        assert_eq!(epoch, 0);
    })
    .await;
}
