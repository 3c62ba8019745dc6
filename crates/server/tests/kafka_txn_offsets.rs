//! Consumer-group offsets committed in a transaction (TxnOffsetCommit, issue 36) against an
//! in-process 3-node cluster over the raw protocol: they are invisible to OffsetFetch until the
//! producer's transaction ends, OffsetFetch with `require_stable` answers
//! UNSTABLE_OFFSET_COMMIT meanwhile, an abort leaves the committed offset as it was, and a
//! commit makes them the group's offsets. The transaction's end is proposed here as the
//! transaction coordinator proposes it (`MetaCommand::EndTxnOffsets`).

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
use vdl_server::metadata::MetaCommand;
use vdl_server::Node;

const TOPIC: &str = "txn-offsets-topic";
const GROUP: &str = "txn-group";
const PRODUCER: i64 = 4242;

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const NOT_COORDINATOR: i16 = 16;
const UNKNOWN_MEMBER_ID: i16 = 25;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;

/// A TxnOffsetCommit of `PRODUCER` for `GROUP`: partition 0 of `TOPIC` at `offset`, plus
/// `extra` partitions; `member` names a member and generation (v3+). Every partition's error.
fn txn_commit(
    conn: &mut KafkaConn,
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
        transactional_id: "txn-offsets-app".into(),
        group_id: GROUP.into(),
        producer_id: PRODUCER,
        producer_epoch: 0,
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

/// Ends `PRODUCER`'s transaction for `GROUP`'s offsets through the metadata leader.
async fn end_transaction(leader: &Node, commit: bool) {
    leader
        .metadata_proposer()
        .propose(
            &MetaCommand::EndTxnOffsets {
                producer_id: PRODUCER,
                groups: Some(vec![GROUP.into()]),
                commit,
            },
            Duration::from_secs(10),
        )
        .await
        .unwrap();
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

        // Only the coordinator takes it.
        let mut f = KafkaConn::connect(follower).unwrap();
        assert_eq!(
            txn_commit(&mut f, 3, 1, &[], None),
            vec![(0, NOT_COORDINATOR)]
        );

        // A committed offset, then the transaction's: only the committed one is read.
        assert_eq!(c.commit_offset(GROUP, TOPIC, 5).unwrap(), NONE);
        assert_eq!(
            txn_commit(&mut c, 3, 42, &[9], None),
            vec![(0, NONE), (9, UNKNOWN_TOPIC_OR_PARTITION)]
        );
        // v3 names a member: the group has none of that id.
        assert_eq!(
            txn_commit(&mut c, 3, 43, &[], Some(("ghost", 1))),
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
    })
    .await
    .unwrap();

    // The transaction aborts: the committed offset stands, and is stable again.
    end_transaction(&nodes[leader], false).await;
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(coordinator).unwrap();
        assert_eq!(fetch(&mut c, 8, true).1, 5);
        assert_eq!(fetch(&mut c, 8, true).0, NONE);
        // The next transaction (v0 and v5 bodies alike) commits.
        assert_eq!(txn_commit(&mut c, 0, 50, &[], None), vec![(0, NONE)]);
        assert_eq!(txn_commit(&mut c, 5, 60, &[], None), vec![(0, NONE)]);
        assert_eq!(fetch(&mut c, 8, false).1, 5);
        assert_eq!(fetch(&mut c, 8, true).0, UNSTABLE_OFFSET_COMMIT);
    })
    .await
    .unwrap();

    end_transaction(&nodes[leader], true).await;
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(coordinator).unwrap();
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
