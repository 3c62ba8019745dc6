//! Consumer-group offsets committed in a transaction (TxnOffsetCommit, issue 36) against an
//! in-process 3-node cluster over the raw protocol: they are invisible to OffsetFetch until the
//! producer's transaction ends, OffsetFetch with `require_stable` answers
//! UNSTABLE_OFFSET_COMMIT meanwhile, an abort leaves the committed offset as it was, and a
//! commit makes them the group's offsets. The transaction is a real one, run through the
//! transaction coordinator (InitProducerId, AddOffsetsToTxn, EndTxn); offsets of a producer
//! whose transaction does not include the group are refused.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster_configs;
use common::kafka::KafkaConn;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::api_versions_request::ApiVersionsRequest;
use kafka_proto::messages::offset_fetch_request::{
    OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_proto::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use vdl_server::Node;

const TOPIC: &str = "txn-offsets-topic";
const GROUP: &str = "txn-group";
const TRANSACTIONAL_ID: &str = "txn-offsets-app";

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const NOT_COORDINATOR: i16 = 16;
const UNKNOWN_MEMBER_ID: i16 = 25;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const CONCURRENT_TRANSACTIONS: i16 = 51;

/// A transactional producer as the coordinator knows it: (producer id, epoch).
type Producer = (i64, i16);

/// InitProducerId for `TRANSACTIONAL_ID` (retried while a previous transaction is still being
/// ended): the producer.
fn init(conn: &mut KafkaConn) -> Producer {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let req = common::requests::init_transactional(TRANSACTIONAL_ID, 60_000);
        let Response::InitProducerId(r) = conn.call(ApiKey::InitProducerId, 4, &req).unwrap()
        else {
            panic!("not an InitProducerId response")
        };
        if r.error_code == NONE {
            return (r.producer_id, r.producer_epoch);
        }
        assert_eq!(r.error_code, CONCURRENT_TRANSACTIONS, "{r:?}");
        assert!(Instant::now() < deadline, "{r:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// AddOffsetsToTxn of `GROUP` to `producer`'s transaction: its error.
fn add_group(conn: &mut KafkaConn, producer: Producer) -> i16 {
    let req = common::requests::add_offsets_to_txn(TRANSACTIONAL_ID, producer.0, producer.1, GROUP);
    let Response::AddOffsetsToTxn(r) = conn.call(ApiKey::AddOffsetsToTxn, 3, &req).unwrap() else {
        panic!("not an AddOffsetsToTxn response")
    };
    r.error_code
}

/// EndTxn of `producer`'s transaction: its error.
fn end_transaction(conn: &mut KafkaConn, producer: Producer, commit: bool) -> i16 {
    let req = common::requests::end_txn(TRANSACTIONAL_ID, producer.0, producer.1, commit);
    let Response::EndTxn(r) = conn.call(ApiKey::EndTxn, 3, &req).unwrap() else {
        panic!("not an EndTxn response")
    };
    r.error_code
}

/// A TxnOffsetCommit of `producer` for `GROUP`: partition 0 of `TOPIC` at `offset`, plus
/// `extra` partitions; `member` names a member and generation (v3+). Every partition's error.
fn txn_commit(
    conn: &mut KafkaConn,
    producer: Producer,
    version: i16,
    offset: i64,
    extra: &[i32],
    member: Option<(&str, i32)>,
) -> Vec<(i32, i16)> {
    let mut partitions = vec![TxnOffsetCommitRequestPartition {
        partition_index: 0,
        committed_offset: offset,
        committed_leader_epoch: 2,
        committed_metadata: Some(format!("txn at {offset}")),
        ..Default::default()
    }];
    partitions.extend(extra.iter().map(|p| TxnOffsetCommitRequestPartition {
        partition_index: *p,
        committed_offset: offset,
        ..Default::default()
    }));
    let (member_id, generation_id) = member.unwrap_or(("", -1));
    let req = Request::TxnOffsetCommit(TxnOffsetCommitRequest {
        transactional_id: TRANSACTIONAL_ID.into(),
        group_id: GROUP.into(),
        producer_id: producer.0,
        producer_epoch: producer.1,
        generation_id,
        member_id: member_id.into(),
        topics: vec![TxnOffsetCommitRequestTopic {
            name: TOPIC.into(),
            partitions,
            ..Default::default()
        }],
        ..Default::default()
    });
    let Response::TxnOffsetCommit(r) = conn.call(ApiKey::TxnOffsetCommit, version, &req).unwrap()
    else {
        panic!("not a TxnOffsetCommit response")
    };
    assert_eq!(r.topics.len(), 1);
    r.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.error_code))
        .collect()
}

/// OffsetFetch of partition 0 of `TOPIC` in `GROUP`: (error, offset, metadata), at v8 (groups)
/// or v7 (one group), with or without `require_stable`.
fn fetch(conn: &mut KafkaConn, version: i16, require_stable: bool) -> (i16, i64, String) {
    fetch_of(conn, version, require_stable, false)
}

/// [`fetch`], at v8 optionally of all the group's topics (null topics): partition 0 of `TOPIC`
/// must be among them.
fn fetch_of(
    conn: &mut KafkaConn,
    version: i16,
    require_stable: bool,
    all_topics: bool,
) -> (i16, i64, String) {
    let req = if version >= 8 {
        OffsetFetchRequest {
            groups: vec![OffsetFetchRequestGroup {
                group_id: GROUP.into(),
                topics: (!all_topics).then(|| {
                    vec![OffsetFetchRequestTopics {
                        name: TOPIC.into(),
                        partition_indexes: vec![0],
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }],
            require_stable,
            ..Default::default()
        }
    } else {
        OffsetFetchRequest {
            group_id: GROUP.into(),
            topics: Some(vec![OffsetFetchRequestTopic {
                name: TOPIC.into(),
                partition_indexes: vec![0],
                ..Default::default()
            }]),
            require_stable,
            ..Default::default()
        }
    };
    let Response::OffsetFetch(r) = conn
        .call(ApiKey::OffsetFetch, version, &Request::OffsetFetch(req))
        .unwrap()
    else {
        panic!("not an OffsetFetch response")
    };
    if version >= 8 {
        let g = &r.groups[0];
        assert_eq!(g.error_code, NONE, "{r:?}");
        assert_eq!(
            (g.topics.len(), g.topics[0].partitions.len()),
            (1, 1),
            "{r:?}"
        );
        let p = &g.topics[0].partitions[0];
        (
            p.error_code,
            p.committed_offset,
            p.metadata.clone().unwrap_or_default(),
        )
    } else {
        assert_eq!(r.error_code, NONE, "{r:?}");
        let p = &r.topics[0].partitions[0];
        (
            p.error_code,
            p.committed_offset,
            p.metadata.clone().unwrap_or_default(),
        )
    }
}

/// Starts 3 nodes serving Kafka with `TOPIC`, waiting until the metadata leader coordinates
/// groups; returns them and the leader's index.
async fn cluster(dir: &std::path::Path) -> (Vec<Arc<Node>>, usize) {
    let mut nodes = Vec::new();
    for c in cluster_configs(3, dir, &[TOPIC]) {
        let n = Node::start(c).await.unwrap();
        n.serve_kafka().await.unwrap();
        nodes.push(n);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let leader = nodes.iter().position(|n| {
            n.metadata_group().is_some_and(|g| {
                let v = g.visible();
                v.leader == n.config().id && v.leader_ready
            })
        });
        if let Some(l) = leader {
            if nodes
                .iter()
                .all(|n| n.stream(TOPIC).unwrap().visible().leader != 0)
            {
                return (nodes, l);
            }
        }
        assert!(Instant::now() < deadline, "cluster not ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn addr(node: &Node) -> SocketAddr {
    node.config().kafka_advertised.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_offsets_are_visible_only_once_committed() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, leader) = cluster(dir.path()).await;
    let coordinator = addr(&nodes[leader]);
    let follower = addr(&nodes[(leader + 1) % 3]);

    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(coordinator).unwrap();
        // Advertised at v0-5.
        let Response::ApiVersions(v) = c
            .call(
                ApiKey::ApiVersions,
                3,
                &Request::ApiVersions(ApiVersionsRequest::default()),
            )
            .unwrap()
        else {
            panic!()
        };
        let k = v
            .api_keys
            .iter()
            .find(|k| k.api_key == 28)
            .expect("advertised");
        assert_eq!((k.min_version, k.max_version), (0, 5));

        let producer = init(&mut c);
        // Only the coordinator takes it.
        let mut f = KafkaConn::connect(follower).unwrap();
        assert_eq!(
            txn_commit(&mut f, producer, 3, 1, &[], None),
            vec![(0, NOT_COORDINATOR)]
        );
        // Not before the group joined the transaction, nor of another producer or epoch.
        assert_eq!(
            txn_commit(&mut c, producer, 3, 1, &[], None),
            vec![(0, INVALID_TXN_STATE)]
        );
        assert_eq!(add_group(&mut c, producer), NONE);
        assert_eq!(
            txn_commit(&mut c, (producer.0 + 1, producer.1), 3, 1, &[], None),
            vec![(0, INVALID_PRODUCER_ID_MAPPING)]
        );
        assert_eq!(
            txn_commit(&mut c, (producer.0, producer.1 + 1), 3, 1, &[], None),
            vec![(0, INVALID_PRODUCER_EPOCH)]
        );

        // A committed offset, then the transaction's: only the committed one is read.
        assert_eq!(c.commit_offset(GROUP, TOPIC, 5).unwrap(), NONE);
        assert_eq!(
            txn_commit(&mut c, producer, 3, 42, &[9], None),
            vec![(0, NONE), (9, UNKNOWN_TOPIC_OR_PARTITION)]
        );
        // v3 names a member: the group has none of that id.
        assert_eq!(
            txn_commit(&mut c, producer, 3, 43, &[], Some(("ghost", 1))),
            vec![(0, UNKNOWN_MEMBER_ID)]
        );
        for version in [7, 8] {
            assert_eq!(fetch(&mut c, version, false).0, NONE);
            assert_eq!(fetch(&mut c, version, false).1, 5, "v{version}");
            // A read_committed consumer is told to retry while the offset is pending.
            assert_eq!(
                fetch(&mut c, version, true),
                (UNSTABLE_OFFSET_COMMIT, -1, String::new()),
                "v{version}"
            );
        }
        // The group's offsets of every topic: the same.
        assert_eq!(fetch_of(&mut c, 8, false, true).1, 5);
        assert_eq!(fetch_of(&mut c, 8, true, true).0, UNSTABLE_OFFSET_COMMIT);

        // The transaction aborts: the committed offset stands, and is stable again.
        assert_eq!(end_transaction(&mut c, producer, false), NONE);
        assert_eq!(fetch(&mut c, 8, true).1, 5);
        assert_eq!(fetch(&mut c, 8, true).0, NONE);

        // The next transaction (v0 and v5 bodies alike) commits.
        let producer = init(&mut c);
        assert_eq!(add_group(&mut c, producer), NONE);
        assert_eq!(
            txn_commit(&mut c, producer, 0, 50, &[], None),
            vec![(0, NONE)]
        );
        assert_eq!(
            txn_commit(&mut c, producer, 5, 60, &[], None),
            vec![(0, NONE)]
        );
        assert_eq!(fetch(&mut c, 8, false).1, 5);
        assert_eq!(fetch(&mut c, 8, true).0, UNSTABLE_OFFSET_COMMIT);
        assert_eq!(end_transaction(&mut c, producer, true), NONE);
        assert_eq!(fetch(&mut c, 8, true), (NONE, 60, "txn at 60".to_string()));
        assert_eq!(fetch(&mut c, 7, false).1, 60);
    })
    .await
    .unwrap();

    // Every node applied the same: the committed offset, nothing pending.
    for n in &nodes {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (got, pending) = {
                let meta = n.metadata();
                let got = meta
                    .offsets
                    .get(GROUP)
                    .and_then(|g| g.get(&(TOPIC.to_string(), 0)))
                    .map(|o| (o.offset, o.leader_epoch));
                (got, meta.has_pending_txn_offsets(GROUP))
            };
            if got == Some((60, 2)) && !pending {
                break;
            }
            assert!(Instant::now() < deadline, "{got:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for n in &nodes {
        n.shutdown();
    }
}
