//! The transaction coordinator's APIs under `authorizer = "acl"`, on a three-node cluster, as
//! Kafka 3.9 authorizes them: without ACLs the anonymous principal is refused everywhere with
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED (CLUSTER_AUTHORIZATION_FAILED for the brokers' form of
//! AddPartitionsToTxn); with WRITE on a transactional id and its topic it runs a transaction,
//! may describe that id (WRITE implies DESCRIBE) but not another, needs READ on a group for
//! AddOffsetsToTxn, and ListTransactions leaves out the ids it may not describe.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::cluster_configs;
use common::kafka::KafkaConn;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTransaction,
};
use kafka_proto::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_proto::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_proto::messages::list_transactions_request::ListTransactionsRequest;
use vdl_server::config::NodeConfig;
use vdl_server::metadata::MetaCommand;
use vdl_server::security::acl::AclBinding;
use vdl_server::security::authorizer::AuthorizerMode;
use vdl_server::Node;

const TOPIC: &str = "txn-secret";
const TXN: &str = "tx";
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const GROUP_AUTHORIZATION_FAILED: i16 = 30;
const WAIT: Duration = Duration::from_secs(20);

fn call(addr: SocketAddr, api: ApiKey, version: i16, req: &Request) -> Response {
    KafkaConn::connect(addr)
        .and_then(|mut c| c.call(api, version, req))
        .expect("a response")
}

fn init(addr: SocketAddr, id: &str) -> (i16, i64, i16) {
    let req = common::requests::init_transactional(id, 60_000);
    match call(addr, ApiKey::InitProducerId, 4, &req) {
        Response::InitProducerId(r) => (r.error_code, r.producer_id, r.producer_epoch),
        other => panic!("{other:?}"),
    }
}

fn add_partition(addr: SocketAddr, id: &str, pid: i64, epoch: i16) -> i16 {
    let req = common::requests::add_partitions_to_txn(id, pid, epoch, TOPIC, 0);
    match call(addr, ApiKey::AddPartitionsToTxn, 3, &req) {
        Response::AddPartitionsToTxn(r) => {
            r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        }
        other => panic!("{other:?}"),
    }
}

/// The brokers' form (v4): its top-level error.
fn add_partition_as_broker(addr: SocketAddr, id: &str) -> i16 {
    let req = Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
        transactions: vec![AddPartitionsToTxnTransaction {
            transactional_id: id.into(),
            verify_only: true,
            ..Default::default()
        }],
        ..Default::default()
    });
    match call(addr, ApiKey::AddPartitionsToTxn, 4, &req) {
        Response::AddPartitionsToTxn(r) => r.error_code,
        other => panic!("{other:?}"),
    }
}

fn add_offsets(addr: SocketAddr, id: &str, pid: i64, epoch: i16) -> i16 {
    let req = common::requests::add_offsets_to_txn(id, pid, epoch, "g");
    match call(addr, ApiKey::AddOffsetsToTxn, 3, &req) {
        Response::AddOffsetsToTxn(r) => r.error_code,
        other => panic!("{other:?}"),
    }
}

fn end_txn(addr: SocketAddr, id: &str, pid: i64, epoch: i16) -> i16 {
    let req = common::requests::end_txn(id, pid, epoch, true);
    match call(addr, ApiKey::EndTxn, 3, &req) {
        Response::EndTxn(r) => r.error_code,
        other => panic!("{other:?}"),
    }
}

/// FindCoordinator v4 for transactional ids: (key, error, port) each.
fn find(addr: SocketAddr, ids: &[&str]) -> Vec<(String, i16, i32)> {
    let req = Request::FindCoordinator(FindCoordinatorRequest {
        key_type: 1,
        coordinator_keys: ids.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    });
    match call(addr, ApiKey::FindCoordinator, 4, &req) {
        Response::FindCoordinator(r) => r
            .coordinators
            .iter()
            .map(|c| (c.key.clone(), c.error_code, c.port))
            .collect(),
        other => panic!("{other:?}"),
    }
}

fn describe(addr: SocketAddr, ids: &[&str]) -> Vec<i16> {
    let req = Request::DescribeTransactions(DescribeTransactionsRequest {
        transactional_ids: ids.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    });
    match call(addr, ApiKey::DescribeTransactions, 0, &req) {
        Response::DescribeTransactions(r) => {
            r.transaction_states.iter().map(|s| s.error_code).collect()
        }
        other => panic!("{other:?}"),
    }
}

fn list(addr: SocketAddr) -> Vec<String> {
    let req = Request::ListTransactions(ListTransactionsRequest {
        duration_filter: -1,
        ..Default::default()
    });
    match call(addr, ApiKey::ListTransactions, 1, &req) {
        Response::ListTransactions(r) => r
            .transaction_states
            .iter()
            .map(|t| t.transactional_id.clone())
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// Waits up to [`WAIT`] for `done`.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn configs(root: &std::path::Path) -> Vec<NodeConfig> {
    let mut configs = cluster_configs(3, root, &[]);
    for c in &mut configs {
        c.security.authorizer = AuthorizerMode::Acl;
        c.security.super_users = vec!["User:admin".into()];
    }
    configs
}

#[test]
fn transactions_need_kafkas_acls() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let configs = configs(dir.path());
    let nodes: Vec<Arc<Node>> = rt.block_on(async {
        let mut nodes = Vec::new();
        for c in &configs {
            let n = Node::start(c.clone()).await.expect("node starts");
            n.serve_kafka().await.expect("kafka listener");
            nodes.push(n);
        }
        nodes[0]
            .create_topic(TOPIC, 1, WAIT)
            .await
            .expect("topic created");
        nodes
    });
    let brokers: Vec<SocketAddr> = configs.iter().map(|c| c.kafka_listen).collect();

    // No ACLs: refused on every node, before anything else is looked at.
    for addr in &brokers {
        assert_eq!(init(*addr, TXN).0, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        assert_eq!(
            add_partition(*addr, TXN, 1000, 0),
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        );
        assert_eq!(
            add_offsets(*addr, TXN, 1000, 0),
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        );
        assert_eq!(
            end_txn(*addr, TXN, 1000, 0),
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        );
        assert_eq!(
            describe(*addr, &[TXN]),
            [TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
        );
        assert_eq!(
            find(*addr, &[TXN])[0].1,
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        );
        assert_eq!(
            add_partition_as_broker(*addr, TXN),
            CLUSTER_AUTHORIZATION_FAILED
        );
        assert!(list(*addr).is_empty());
    }

    // An administrator (here: the node itself) gives WRITE on the transactional id and the
    // topic (LITERAL, ALLOW; Kafka's codes: transactional id 5, topic 2, WRITE 4).
    rt.block_on(nodes[0].metadata_proposer().propose(
        &MetaCommand::CreateAcls {
            acls: vec![
                AclBinding::from_kafka(5, TXN, 3, "User:ANONYMOUS", "*", 4, 3).unwrap(),
                AclBinding::from_kafka(2, TOPIC, 3, "User:ANONYMOUS", "*", 4, 3).unwrap(),
            ],
        },
        WAIT,
    ))
    .unwrap();

    // The coordinator, once every node has the ACLs: WRITE implies DESCRIBE on the id.
    let mut port = -1;
    eventually("FindCoordinator allowed", || {
        let found = find(brokers[1], &[TXN, "other"]);
        port = found[0].2;
        found[0].1 == 0 && found[1].1 == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    });
    let coordinator = *brokers
        .iter()
        .find(|a| i32::from(a.port()) == port)
        .expect("a broker");
    let mut answer = (-1, -1, -1);
    eventually("InitProducerId allowed", || {
        answer = init(coordinator, TXN);
        answer.0 == 0
    });
    let (_, pid, epoch) = answer;
    assert_eq!(add_partition(coordinator, TXN, pid, epoch), 0);
    assert_eq!(
        add_offsets(coordinator, TXN, pid, epoch),
        GROUP_AUTHORIZATION_FAILED
    );
    assert_eq!(
        describe(coordinator, &[TXN, "other"]),
        [0, TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
    );
    assert_eq!(list(coordinator), [TXN.to_string()]);
    assert_eq!(end_txn(coordinator, TXN, pid, epoch), 0);
    // Still no CLUSTER_ACTION for the brokers' form.
    assert_eq!(
        add_partition_as_broker(coordinator, TXN),
        CLUSTER_AUTHORIZATION_FAILED
    );
}
