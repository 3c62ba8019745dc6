//! Kafka's admin APIs against a 3-node cluster, checked at the level of each replica:
//! topic configs (set at creation, altered, described with their sources) act on every replica
//! — retention deletes with them — and survive a restart of every node; DeleteRecords moves
//! every replica's log start offset, readers below it get OFFSET_OUT_OF_RANGE, and that too
//! survives restarts; OffsetDelete and DeleteGroups remove committed offsets; ElectLeaders
//! brings leadership back to the preferred replica. (The real-client and Kafka CLI tool checks
//! of the same APIs are in tests/clients/.)

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::cluster_configs;
use common::kafka::{on_any, KafkaConn};
use common::serving::start;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_proto::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic,
};
use kafka_proto::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_proto::messages::elect_leaders_request::{ElectLeadersRequest, TopicPartitions};
use kafka_proto::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
};
use kafka_proto::messages::offset_delete_request::{
    OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_proto::records::{build_batch, Compression, NewRecord};
use vdl_server::config::NodeConfig;
use vdl_server::Node;

const T: Duration = Duration::from_secs(30);
const TOPIC: i8 = 2;
const INVALID_CONFIG: i16 = 40;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const NOT_LEADER: i16 = 6;
const NOT_COORDINATOR: i16 = 16;
const GROUP_ID_NOT_FOUND: i16 = 69;
const ELECTION_NOT_NEEDED: i16 = 84;
const DYNAMIC_TOPIC_CONFIG: i8 = 1;

fn configs(dir: &std::path::Path) -> Vec<NodeConfig> {
    let mut configs = cluster_configs(3, dir, &[]);
    for c in &mut configs {
        c.storage.retention_check_interval = Duration::from_millis(100);
        // ElectLeaders is what moves leaders here, not the background rebalance.
        c.raft.leader_rebalance_interval = None;
    }
    configs
}

fn brokers(configs: &[NodeConfig]) -> Vec<SocketAddr> {
    configs.iter().map(|c| c.kafka_listen).collect()
}

/// Waits until `check` holds, panicking with `what` after [`T`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Partition 0 of `topic` on `node`, once the node has opened it (after a start, the metadata
/// replay opens partitions in the background).
async fn partition_0(node: &Node, topic: &str) -> vdl_server::LogStream {
    eventually("the partition opens", || node.partition(topic, 0).is_some()).await;
    node.partition(topic, 0).unwrap()
}

/// CreateTopics v7 of one partition on every node with `configs`: (error code, message).
fn create(c: &mut KafkaConn, name: &str, configs: &[(&str, &str)]) -> (i16, Option<String>) {
    c.create_topic_configured(name, configs).unwrap()
}

/// DescribeConfigs v4 of topic `name`: (name, value, source) per config.
fn describe(c: &mut KafkaConn, name: &str) -> Vec<(String, String, i8)> {
    let req = Request::DescribeConfigs(DescribeConfigsRequest {
        resources: vec![DescribeConfigsResource {
            resource_type: TOPIC,
            resource_name: name.into(),
            configuration_keys: None,
            ..Default::default()
        }],
        include_synonyms: true,
        ..Default::default()
    });
    match c.call(ApiKey::DescribeConfigs, 4, &req).unwrap() {
        Response::DescribeConfigs(r) => {
            assert_eq!(r.results[0].error_code, 0, "{:?}", r.results[0]);
            r.results[0]
                .configs
                .iter()
                .map(|e| {
                    (
                        e.name.clone(),
                        e.value.clone().unwrap_or_default(),
                        e.config_source,
                    )
                })
                .collect()
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn config_of(described: &[(String, String, i8)], key: &str) -> (String, i8) {
    let (_, v, s) = described
        .iter()
        .find(|(k, ..)| k == key)
        .unwrap_or_else(|| panic!("{key} not described: {described:?}"));
    (v.clone(), *s)
}

/// IncrementalAlterConfigs v1 SET of `key` on topic `name`: (error code, message).
fn set_config(c: &mut KafkaConn, name: &str, key: &str, value: &str) -> (i16, Option<String>) {
    let req = Request::IncrementalAlterConfigs(IncrementalAlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: TOPIC,
            resource_name: name.into(),
            configs: vec![AlterableConfig {
                name: key.into(),
                config_operation: 0,
                value: Some(value.into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        validate_only: false,
        ..Default::default()
    });
    match c.call(ApiKey::IncrementalAlterConfigs, 1, &req).unwrap() {
        Response::IncrementalAlterConfigs(r) => (
            r.responses[0].error_code,
            r.responses[0].error_message.clone(),
        ),
        other => panic!("unexpected {other:?}"),
    }
}

/// The address of partition 0's leader of `topic`, as the brokers report it.
fn leader_of(brokers: &[SocketAddr], topic: &str) -> SocketAddr {
    let leader = on_any(brokers, T, "a leader", |c| {
        let (e, parts) = c.partition_leaders(topic)?;
        let leader = parts.first().map_or(-1, |p| p.1);
        Ok((if e == 0 && leader > 0 { 0 } else { -1 }, leader))
    });
    brokers[leader as usize - 1]
}

/// A batch of 10 records of `value_len` bytes, stamped now (so retention by age, 7 days by
/// default, leaves them alone).
fn fresh_batch(value_len: usize) -> bytes::Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let records: Vec<NewRecord> = (0..10)
        .map(|_| NewRecord::new(now, vec![b'v'; value_len]))
        .collect();
    build_batch(Compression::None, &records).unwrap()
}

/// Produces `n` batches of 10 records of `value_len` bytes each to partition 0 of `topic`.
fn produce(brokers: &[SocketAddr], topic: &str, n: usize, value_len: usize) {
    for _ in 0..n {
        let b = fresh_batch(value_len);
        on_any(brokers, T, "produce", |c| c.produce(topic, b.clone()));
    }
}

/// DeleteRecords v2 of partition 0 of `topic` below `offset`: (error code, low watermark).
fn delete_records(c: &mut KafkaConn, topic: &str, offset: i64) -> (i16, i64) {
    let req = Request::DeleteRecords(DeleteRecordsRequest {
        topics: vec![DeleteRecordsTopic {
            name: topic.into(),
            partitions: vec![DeleteRecordsPartition {
                partition_index: 0,
                offset,
                ..Default::default()
            }],
            ..Default::default()
        }],
        timeout_ms: 15_000,
        ..Default::default()
    });
    match c.call(ApiKey::DeleteRecords, 2, &req).unwrap() {
        Response::DeleteRecords(r) => {
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.low_watermark)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Configs given at creation and changed later are what every replica acts on: a retention
/// size set on a topic deletes its old segments on all three nodes, and the overrides (with
/// their DYNAMIC_TOPIC_CONFIG source) are still there after every node restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_configs_act_on_every_replica_and_survive_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let configs = configs(dir.path());
    let b = brokers(&configs);
    let nodes = start(&configs).await;
    let b2 = b.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b2[0]).unwrap();
        // Kafka's answers for a bad value and for compaction (accepted, reported as set).
        let (code, message) = create(&mut c, "bad", &[("retention.ms", "soon")]);
        assert_eq!(code, INVALID_CONFIG);
        assert!(message.unwrap().contains("retention.ms"));
        assert_eq!(
            create(&mut c, "bad", &[("cleanup.policy", "compact,shred")]).0,
            INVALID_CONFIG
        );
        assert_eq!(
            create(&mut c, "compacted", &[("cleanup.policy", "compact")]),
            (0, None)
        );
        assert_eq!(
            config_of(&describe(&mut c, "compacted"), "cleanup.policy"),
            ("compact".into(), DYNAMIC_TOPIC_CONFIG)
        );
        assert_eq!(
            create(&mut c, "sized", &[("segment.bytes", "1048576")]),
            (0, None)
        );
        let d = describe(&mut c, "sized");
        assert_eq!(
            config_of(&d, "segment.bytes"),
            ("1048576".into(), DYNAMIC_TOPIC_CONFIG)
        );
        assert_eq!(config_of(&d, "retention.bytes").0, "-1");
        // About 4 MiB: four segments or more on every replica.
        produce(&b2, "sized", 40, 10_000);
    })
    .await
    .unwrap();
    for (node, _) in &nodes.0 {
        let s = node.partition("sized", 0).unwrap();
        eventually("every replica holds the data", || {
            s.visible().high_watermark >= 400 && s.storage_size().1 >= 4_000_000
        })
        .await;
        assert!(s.storage_size().0 >= 4, "segments: {:?}", s.storage_size());
        assert_eq!(s.visible().log_start_offset, 0);
    }
    let b2 = b.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b2[1]).unwrap();
        let (code, message) = set_config(&mut c, "sized", "retention.bytes", "nope");
        assert_eq!(code, INVALID_CONFIG);
        assert!(message.unwrap().contains("retention.bytes"));
        assert_eq!(
            set_config(&mut c, "sized", "retention.bytes", "1048576"),
            (0, None)
        );
    })
    .await
    .unwrap();
    for (node, _) in &nodes.0 {
        let s = node.partition("sized", 0).unwrap();
        eventually("retention by the topic's size on every replica", || {
            s.visible().log_start_offset > 0 && s.storage_size().1 <= 3 << 20
        })
        .await;
    }
    drop(nodes);
    let nodes = start(&configs).await;
    for (node, _) in &nodes.0 {
        let s = partition_0(node, "sized").await;
        eventually("the overrides replayed", || {
            node.topic_settings("sized").retention_bytes == Some(1 << 20)
        })
        .await;
        assert_eq!(node.topic_settings("sized").segment_bytes, 1 << 20);
        assert!(s.visible().log_start_offset > 0);
    }
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b[2]).unwrap();
        let d = describe(&mut c, "sized");
        assert_eq!(
            config_of(&d, "retention.bytes"),
            ("1048576".into(), DYNAMIC_TOPIC_CONFIG)
        );
        assert_eq!(
            config_of(&d, "segment.bytes"),
            ("1048576".into(), DYNAMIC_TOPIC_CONFIG)
        );
    })
    .await
    .unwrap();
    drop(nodes);
}

/// DeleteRecords: only the leader takes it, never beyond the high watermark; afterwards every
/// replica's log start offset is the new low watermark, reads below it are out of range, the
/// earliest offset is it, and all of that holds after every node restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_moves_every_replicas_log_start_and_survives_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let configs = configs(dir.path());
    let b = brokers(&configs);
    let nodes = start(&configs).await;
    let b2 = b.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b2[0]).unwrap();
        assert_eq!(create(&mut c, "trim", &[]), (0, None));
        produce(&b2, "trim", 10, 100);
        let leader = leader_of(&b2, "trim");
        let follower = *b2.iter().find(|a| **a != leader).unwrap();
        let mut f = KafkaConn::connect(follower).unwrap();
        assert_eq!(delete_records(&mut f, "trim", 50).0, NOT_LEADER);
        let mut l = KafkaConn::connect(leader).unwrap();
        assert_eq!(delete_records(&mut l, "trim", 101).0, OFFSET_OUT_OF_RANGE);
        assert_eq!(delete_records(&mut l, "trim", 50), (0, 50));
        // Lower than the low watermark: nothing changes.
        assert_eq!(delete_records(&mut l, "trim", 20), (0, 50));
        assert_eq!(
            l.fetch_partition("trim", 0, 10).unwrap().0,
            OFFSET_OUT_OF_RANGE
        );
        let (e, _, records) = l.fetch_partition("trim", 0, 50).unwrap();
        assert_eq!(e, 0);
        assert!(!records.is_empty());
        assert_eq!(l.list_offset("trim", -2).unwrap(), (0, 50));
    })
    .await
    .unwrap();
    for (node, _) in &nodes.0 {
        let s = node.partition("trim", 0).unwrap();
        eventually("every replica's log start offset moved", || {
            s.visible().log_start_offset == 50
        })
        .await;
    }
    drop(nodes);
    let nodes = start(&configs).await;
    for (node, _) in &nodes.0 {
        let s = partition_0(node, "trim").await;
        eventually("the log start offset after a restart", || {
            s.visible().log_start_offset == 50
        })
        .await;
    }
    tokio::task::spawn_blocking(move || {
        let earliest = on_any(&b, T, "earliest offset", |c| c.list_offset("trim", -2));
        assert_eq!(earliest, 50);
        let leader = leader_of(&b, "trim");
        let mut l = KafkaConn::connect(leader).unwrap();
        assert_eq!(
            l.fetch_partition("trim", 0, 49).unwrap().0,
            OFFSET_OUT_OF_RANGE
        );
        // Everything up to the high watermark may go.
        assert_eq!(delete_records(&mut l, "trim", -1), (0, 100));
    })
    .await
    .unwrap();
    drop(nodes);
}

/// A group request (v0) sent to the brokers until the coordinator answers it.
fn group_call(brokers: &[SocketAddr], api: ApiKey, req: Request) -> Response {
    on_any(brokers, T, "a group call", move |c| {
        let r = c.call(api, 0, &req)?;
        let code = match &r {
            Response::OffsetDelete(r) => r.error_code,
            Response::DeleteGroups(r) => r.results[0].error_code,
            other => panic!("unexpected {other:?}"),
        };
        Ok((if code == NOT_COORDINATOR { code } else { 0 }, r))
    })
}

fn delete_group(brokers: &[SocketAddr], name: &str) -> i16 {
    let req = Request::DeleteGroups(DeleteGroupsRequest {
        groups_names: vec![name.into()],
        ..Default::default()
    });
    match group_call(brokers, ApiKey::DeleteGroups, req) {
        Response::DeleteGroups(r) => r.results[0].error_code,
        other => panic!("unexpected {other:?}"),
    }
}

/// OffsetDelete removes one partition's committed offset, DeleteGroups the whole group; an
/// unknown group is GROUP_ID_NOT_FOUND. ElectLeaders hands leadership back to the preferred
/// replica, and says ELECTION_NOT_NEEDED when it leads already.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_offsets_are_deleted_and_preferred_leaders_elected() {
    let dir = tempfile::tempdir().unwrap();
    let configs = configs(dir.path());
    let b = brokers(&configs);
    let nodes = start(&configs).await;
    let b2 = b.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b2[0]).unwrap();
        assert_eq!(create(&mut c, "grouped", &[]), (0, None));
        produce(&b2, "grouped", 1, 10);
        on_any(&b2, T, "commit", |c| {
            Ok((c.commit_offset("g", "grouped", 7)?, ()))
        });
        assert_eq!(delete_group(&b2, "no-such-group"), GROUP_ID_NOT_FOUND);
        let offset_delete = Request::OffsetDelete(OffsetDeleteRequest {
            group_id: "g".into(),
            topics: vec![OffsetDeleteRequestTopic {
                name: "grouped".into(),
                partitions: vec![OffsetDeleteRequestPartition { partition_index: 0 }],
            }],
        });
        match group_call(&b2, ApiKey::OffsetDelete, offset_delete) {
            Response::OffsetDelete(r) => {
                assert_eq!(r.error_code, 0);
                assert_eq!(r.topics[0].partitions[0].error_code, 0);
            }
            other => panic!("unexpected {other:?}"),
        }
        let fetched = on_any(&b2, T, "offset fetch", |c| c.fetch_offset("g", "grouped"));
        assert_eq!(fetched, -1, "the partition's offset is gone");
        on_any(&b2, T, "commit", |c| {
            Ok((c.commit_offset("g", "grouped", 9)?, ()))
        });
        assert_eq!(delete_group(&b2, "g"), 0);
        assert_eq!(
            on_any(&b2, T, "offset fetch", |c| c.fetch_offset("g", "grouped")),
            -1
        );
        assert_eq!(delete_group(&b2, "g"), GROUP_ID_NOT_FOUND);
    })
    .await
    .unwrap();
    // Move leadership away from the preferred replica.
    let preferred = nodes.0[0].0.topic_layout("grouped").unwrap().replicas[0][0];
    let stream = nodes.0[0].0.partition("grouped", 0).unwrap();
    eventually("a leader", || stream.visible().leader != 0).await;
    let other = (1..=3).find(|id| *id != preferred).unwrap();
    let deadline = Instant::now() + T;
    while stream.visible().leader != other {
        assert!(
            Instant::now() < deadline,
            "leadership never moved to {other}"
        );
        // Asked of the current leader: a follower forwards a transfer with the transferee as
        // its sender, which the leader's peer guard refuses unless the follower is the
        // transferee (the first election does not always go to the preferred replica).
        let leader = stream.visible().leader;
        if let Some((node, _)) = nodes.0.iter().find(|(n, _)| n.config().id == leader) {
            node.partition("grouped", 0).unwrap().transfer_leader(other);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let elect = |b: Vec<SocketAddr>| {
        tokio::task::spawn_blocking(move || {
            let mut c = KafkaConn::connect(b[2]).unwrap();
            let req = Request::ElectLeaders(ElectLeadersRequest {
                election_type: 0,
                topic_partitions: Some(vec![TopicPartitions {
                    topic: "grouped".into(),
                    partitions: vec![0],
                    ..Default::default()
                }]),
                timeout_ms: 20_000,
                ..Default::default()
            });
            match c.call(ApiKey::ElectLeaders, 2, &req).unwrap() {
                Response::ElectLeaders(r) => {
                    r.replica_election_results[0].partition_result[0].error_code
                }
                other => panic!("unexpected {other:?}"),
            }
        })
    };
    assert_eq!(elect(b.clone()).await.unwrap(), 0);
    eventually("the preferred replica leads", || {
        stream.visible().leader == preferred
    })
    .await;
    assert_eq!(elect(b.clone()).await.unwrap(), ELECTION_NOT_NEEDED);
    drop(nodes);
}

/// `min.insync.replicas` above the majority asks for that many copies before the
/// acknowledgement, not only at arrival: right after a follower's node stops (while the leader
/// still counts it in sync) an acks=all produce to a topic asking for three copies is never
/// acknowledged; it ends with NOT_ENOUGH_REPLICAS_AFTER_APPEND once the follower leaves the
/// in-sync set (or NOT_ENOUGH_REPLICAS after that). Kafka waits for every in-sync replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_insync_replicas_above_the_majority_waits_for_every_copy() {
    const NOT_ENOUGH_REPLICAS: i16 = 19;
    const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
    let dir = tempfile::tempdir().unwrap();
    let configs = configs(dir.path());
    let b = brokers(&configs);
    let mut nodes = start(&configs).await;
    let b2 = b.clone();
    let leader = tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b2[0]).unwrap();
        assert_eq!(
            create(&mut c, "three", &[("min.insync.replicas", "3")]),
            (0, None)
        );
        produce(&b2, "three", 1, 10);
        leader_of(&b2, "three")
    })
    .await
    .unwrap();
    let victim = b.iter().position(|a| *a != leader).unwrap();
    let (node, kafka) = nodes.0.remove(victim);
    kafka.abort();
    node.shutdown();
    let codes = tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(leader).unwrap();
        let mut codes = Vec::new();
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until && codes.len() < 300 {
            codes.push(c.produce("three", fresh_batch(10)).unwrap().0);
            std::thread::sleep(Duration::from_millis(10));
        }
        codes.sort_unstable();
        codes.dedup();
        codes
    })
    .await
    .unwrap();
    assert!(
        !codes.contains(&0),
        "acknowledged with two of the three copies asked: {codes:?}"
    );
    assert!(
        codes.contains(&NOT_ENOUGH_REPLICAS_AFTER_APPEND),
        "{codes:?}"
    );
    assert!(
        codes
            .iter()
            .all(|c| [NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND].contains(c)),
        "{codes:?}"
    );
    drop(nodes);
}

/// `min.insync.replicas` above the majority: with all three replicas in sync an acks=all
/// produce succeeds; with one replica's node stopped the leader refuses it with
/// NOT_ENOUGH_REPLICAS (a majority could still commit it, but the topic asks for three), while
/// a topic without the setting keeps committing on the majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_insync_replicas_above_the_majority_refuses_acks_all() {
    const NOT_ENOUGH_REPLICAS: i16 = 19;
    let dir = tempfile::tempdir().unwrap();
    let configs = configs(dir.path());
    let b = brokers(&configs);
    let mut nodes = start(&configs).await;
    let b2 = b.clone();
    let leader = tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b2[0]).unwrap();
        assert_eq!(
            create(&mut c, "strict", &[("min.insync.replicas", "3")]),
            (0, None)
        );
        assert_eq!(create(&mut c, "relaxed", &[]), (0, None));
        produce(&b2, "strict", 1, 10);
        produce(&b2, "relaxed", 1, 10);
        // Four replicas cannot be in sync on three nodes.
        assert_eq!(
            set_config(&mut c, "strict", "min.insync.replicas", "4").0,
            INVALID_CONFIG
        );
        leader_of(&b2, "strict")
    })
    .await
    .unwrap();
    // Stop a node that does not lead "strict".
    let victim = b.iter().position(|a| *a != leader).unwrap();
    let (node, kafka) = nodes.0.remove(victim);
    kafka.abort();
    node.shutdown();
    let live: Vec<SocketAddr> = b.iter().copied().filter(|a| *a != b[victim]).collect();
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + T;
        loop {
            // (Node ids index `b`; the stopped node just does not answer.)
            let l = leader_of(&b, "strict");
            let r = KafkaConn::connect(l).and_then(|mut c| c.produce("strict", fresh_batch(10)));
            match r {
                Ok((NOT_ENOUGH_REPLICAS, _)) => break,
                other => assert!(
                    Instant::now() < deadline,
                    "still accepted with a replica down: {other:?}"
                ),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // The topic without the setting commits on the majority.
        produce(&live, "relaxed", 1, 10);
    })
    .await
    .unwrap();
    drop(nodes);
}
