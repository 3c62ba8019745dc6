//! Partitioned topics through the Kafka protocol: every partition is its own Raft group and log,
//! has a leader every node reports, takes produces and serves fetches on its own; a topic grows
//! with CreatePartitions; everything survives a restart of every node; DeleteTopics removes
//! every partition's data; auto-created topics get `kafka.num_partitions`; the cluster stops at
//! `kafka.max_partitions`; a directory from before partitions is moved to partition 0's.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::kafka::{on_any, KafkaConn};
use common::serving::start;
use common::{batch, cluster_configs, split_batches};
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_proto::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use vdl_server::config::NodeConfig;
use vdl_server::Node;

const T: Duration = Duration::from_secs(20);
const INVALID_PARTITIONS: i16 = 37;
const POLICY_VIOLATION: i16 = 44;
const UNKNOWN_TOPIC: i16 = 3;

fn kafka_addrs(configs: &[NodeConfig]) -> Vec<SocketAddr> {
    configs.iter().map(|c| c.kafka_listen).collect()
}

/// Waits until every broker reports `count` partitions of `topic`, each with a leader, all
/// brokers agreeing; returns the leader's Kafka address per partition.
fn wait_for_leaders(brokers: &[SocketAddr], topic: &str, count: usize) -> Vec<SocketAddr> {
    wait_for_leaders_within(brokers, topic, count, T)
}

/// [`wait_for_leaders`], failing after `within`.
fn wait_for_leaders_within(
    brokers: &[SocketAddr],
    topic: &str,
    count: usize,
    within: Duration,
) -> Vec<SocketAddr> {
    let deadline = Instant::now() + within;
    loop {
        let mut seen: Vec<Option<Vec<i32>>> = Vec::new();
        for b in brokers {
            let leaders = KafkaConn::connect(*b)
                .and_then(|mut c| c.partition_leaders(topic))
                .ok()
                .filter(|(err, parts)| *err == 0 && parts.len() == count)
                .map(|(_, parts)| {
                    let mut parts = parts;
                    parts.sort();
                    assert!(parts.iter().enumerate().all(|(i, p)| p.0 == i as i32));
                    parts.iter().map(|p| p.1).collect::<Vec<_>>()
                })
                .filter(|l: &Vec<i32>| l.iter().all(|id| *id > 0));
            seen.push(leaders);
        }
        if let Some(Some(first)) = seen.first() {
            if seen.iter().all(|s| s.as_ref() == Some(first)) {
                // Node ids are 1..=n, in the order of `brokers`.
                return first.iter().map(|id| brokers[*id as usize - 1]).collect();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no agreed leaders for {count} partitions of {topic}: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Produces through the partition's leader, retrying while leadership settles.
fn produce(leaders: &[SocketAddr], topic: &str, partition: usize, records: Bytes) -> i64 {
    let deadline = Instant::now() + T;
    loop {
        let r = KafkaConn::connect(leaders[partition])
            .and_then(|mut c| c.produce_to(topic, partition as i32, records.clone()));
        match r {
            Ok((0, offset)) => return offset,
            other => assert!(
                Instant::now() < deadline,
                "produce to {topic}-{partition}: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One Fetch request for every partition of `topic` (from offset 0) sent to `broker`:
/// (error code, high watermark, record bytes) per partition index.
fn fetch_all(broker: SocketAddr, topic: &str, count: i32) -> HashMap<i32, (i16, i64, Bytes)> {
    let req = Request::Fetch(FetchRequest {
        replica_id: -1,
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: 16 << 20,
        session_epoch: -1,
        topics: vec![FetchTopic {
            topic: topic.into(),
            partitions: (0..count)
                .map(|p| FetchPartition {
                    partition: p,
                    current_leader_epoch: -1,
                    fetch_offset: 0,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let mut c = KafkaConn::connect(broker).unwrap();
    let Response::Fetch(r) = c.call(ApiKey::Fetch, 12, &req).unwrap() else {
        panic!("not a fetch response");
    };
    r.responses[0]
        .partitions
        .iter()
        .map(|p| {
            let records = p
                .records
                .as_ref()
                .map(|c| c.to_contiguous())
                .unwrap_or_default();
            (p.partition_index, (p.error_code, p.high_watermark, records))
        })
        .collect()
}

/// Asserts that each partition `p` of `topic` holds exactly the batches `expected[p]` (record
/// counts, each batch's values tagged with its partition), read through its leader.
fn assert_partitions_hold(brokers: &[SocketAddr], topic: &str, expected: &[Vec<u32>]) {
    let count = expected.len() as i32;
    // A leader elected a moment ago knows its high watermark only once an entry of its own
    // term commits (Kafka's new leader also serves a high watermark behind the old one's for
    // a moment): read until every leader serves the whole log, then check what it served.
    let deadline = Instant::now() + T;
    let (leaders, answers) = loop {
        let leaders = wait_for_leaders(brokers, topic, expected.len());
        let answers: Vec<_> = brokers
            .iter()
            .map(|b| fetch_all(*b, topic, count))
            .collect();
        let settled = brokers.iter().zip(&answers).all(|(b, a)| {
            a.iter().all(|(p, (err, hw, _))| {
                let total: u32 = expected[*p as usize].iter().sum();
                if leaders[*p as usize] == *b {
                    *err == 0 && *hw == i64::from(total)
                } else {
                    *err == 6
                }
            })
        });
        if settled || Instant::now() > deadline {
            break (leaders, answers);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut answered = HashMap::new();
    for (b, answer) in brokers.iter().zip(answers) {
        for (p, (err, hw, records)) in answer {
            if leaders[p as usize] == *b {
                assert_eq!(err, 0, "fetch of {topic}-{p} from its leader");
                answered.insert(p, (hw, records));
            } else {
                assert_eq!(
                    err, 6,
                    "{topic}-{p} from a follower: NOT_LEADER_OR_FOLLOWER"
                );
            }
        }
    }
    for (p, batches) in expected.iter().enumerate() {
        let (hw, records) = &answered[&(p as i32)];
        let total: u32 = batches.iter().sum();
        assert_eq!(*hw, i64::from(total), "high watermark of {topic}-{p}");
        let got = split_batches(records);
        assert_eq!(got.len(), batches.len(), "batches of {topic}-{p}");
        let tag = format!("partition-{p}").into_bytes();
        let mut offset = 0u64;
        for ((base, n, value), want) in got.iter().zip(batches) {
            assert_eq!((*base, *n, value), (offset, *want, &tag), "{topic}-{p}");
            offset += u64::from(*want);
        }
    }
}

fn topic_dirs(data_dir: &Path, topic: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(data_dir.join("topics"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("{topic}~")))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_are_served_grown_restarted_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[]);
    let brokers = kafka_addrs(&configs);
    let nodes = start(&configs).await;
    let b = brokers.clone();
    let expected = tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b[0]).unwrap();
        // Kafka's answer to a bad count.
        assert_eq!(
            c.create_topic_with("zero", 0).unwrap().0,
            INVALID_PARTITIONS
        );
        assert_eq!(c.create_topic_with("p6", 6).unwrap(), (0, 6));
        let leaders = wait_for_leaders(&b, "p6", 6);
        // Three batches per partition, each through the partition's leader; offsets count per
        // partition from 0.
        let mut expected: Vec<Vec<u32>> = vec![Vec::new(); 6];
        for round in 0..3u32 {
            for (p, batches) in expected.iter_mut().enumerate() {
                let n = 5 + round + p as u32;
                let offset = produce(
                    &leaders,
                    "p6",
                    p,
                    batch(n, format!("partition-{p}").as_bytes()),
                );
                assert_eq!(offset, i64::from(batches.iter().sum::<u32>()));
                batches.push(n);
            }
        }
        for (p, batches) in expected.iter().enumerate() {
            let mut c = KafkaConn::connect(leaders[p]).unwrap();
            let latest = c.list_offset_of("p6", p as i32, -1).unwrap();
            assert_eq!(latest, (0, i64::from(batches.iter().sum::<u32>())));
            assert_eq!(c.list_offset_of("p6", p as i32, -2).unwrap(), (0, 0));
        }
        assert_partitions_hold(&b, "p6", &expected);
        // A partition that does not exist.
        assert_eq!(
            c.produce_to("p6", 6, batch(1, b"x")).unwrap().0,
            UNKNOWN_TOPIC
        );
        // CreatePartitions: only growth, as in Kafka.
        for (count, code) in [(4, INVALID_PARTITIONS), (6, INVALID_PARTITIONS)] {
            assert_eq!(c.create_partitions("p6", count, false).unwrap().0, code);
        }
        assert_eq!(
            c.create_partitions("nope", 8, false).unwrap().0,
            UNKNOWN_TOPIC
        );
        assert_eq!(c.create_partitions("p6", 8, true).unwrap().0, 0);
        assert_eq!(
            c.partition_leaders("p6").unwrap().1.len(),
            6,
            "validate only"
        );
        assert_eq!(c.create_partitions("p6", 8, false).unwrap(), (0, None));
        let leaders = wait_for_leaders(&b, "p6", 8);
        for p in 6..8 {
            let n = 3 + p as u32;
            assert_eq!(
                produce(
                    &leaders,
                    "p6",
                    p,
                    batch(n, format!("partition-{p}").as_bytes())
                ),
                0
            );
            expected.push(vec![n]);
        }
        assert_partitions_hold(&b, "p6", &expected);
        expected
    })
    .await
    .unwrap();

    // Every node restarted: 8 partitions, each with its data.
    drop(nodes);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let nodes = start(&configs).await;
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || {
        assert_partitions_hold(&b, "p6", &expected);
        let code = on_any(&b, T, "delete", |c| c.delete_topic("p6").map(|e| (e, e)));
        assert_eq!(code, 0);
    })
    .await
    .unwrap();
    // Every partition's directory is gone from every node.
    let deadline = Instant::now() + T;
    for c in &configs {
        while !topic_dirs(&c.data_dir, "p6").is_empty() {
            assert!(
                Instant::now() < deadline,
                "left on {}: {:?}",
                c.name,
                topic_dirs(&c.data_dir, "p6")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for (n, _) in &nodes.0 {
        assert!(n.partitions("p6").is_empty());
    }
}

/// As Kafka's controller names a new partition's leader at once, a new topic's partitions
/// all have a leader well before an election timeout (6 s here) could have fired: their
/// preferred replicas campaign as they open the partitions, and campaign again while the
/// other replicas, which open theirs a little later, dropped the first pre-votes (before
/// that retry some partitions waited a whole election timeout: 2 to 4 s with the defaults,
/// 5 s under load, with clients answered LEADER_NOT_AVAILABLE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_topics_partitions_get_leaders_before_any_election_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[]);
    for c in &mut configs {
        c.raft.tick = Duration::from_millis(50);
        c.raft.heartbeat = Duration::from_millis(150);
        c.raft.election_timeout = Duration::from_secs(6);
    }
    let brokers = kafka_addrs(&configs);
    let nodes = start(&configs).await;
    tokio::task::spawn_blocking(move || {
        // The metadata group elects its first leader by timeout: wait for it.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut c = loop {
            let mut c = KafkaConn::connect(brokers[0]).unwrap();
            match c.create_topic_with("warmup", 1) {
                Ok((0, 1)) => break c,
                other => assert!(Instant::now() < deadline, "no metadata leader: {other:?}"),
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        for round in 0..3 {
            let topic = format!("fresh{round}");
            let created = Instant::now();
            assert_eq!(c.create_topic_with(&topic, 12).unwrap(), (0, 12));
            wait_for_leaders_within(&brokers, &topic, 12, Duration::from_secs(4));
            eprintln!(
                "{topic}: 12 partitions led everywhere {} ms after CreateTopics",
                created.elapsed().as_millis()
            );
        }
    })
    .await
    .unwrap();
    drop(nodes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_created_topics_get_num_partitions_and_the_cluster_stops_at_max_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(1, dir.path(), &[]);
    configs[0].kafka.num_partitions = 3;
    configs[0].kafka.max_partitions = 10;
    let brokers = kafka_addrs(&configs);
    let nodes = start(&configs).await;
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(brokers[0]).unwrap();
        // Auto-creation through Metadata: num_partitions partitions.
        let req = Request::Metadata(MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                name: Some("auto".into()),
                ..Default::default()
            }]),
            allow_auto_topic_creation: true,
            ..Default::default()
        });
        c.call(ApiKey::Metadata, 12, &req).unwrap();
        wait_for_leaders(&brokers, "auto", 3);
        // CreateTopics with -1 partitions: the same default.
        assert_eq!(c.create_topic_with("dflt", -1).unwrap(), (0, 3));
        // 6 of 10 used: 5 more do not fit, 4 do.
        assert_eq!(c.create_topic_with("big", 5).unwrap().0, POLICY_VIOLATION);
        let (code, message) = c.create_partitions("dflt", 8, false).unwrap();
        assert_eq!(code, POLICY_VIOLATION, "{message:?}");
        assert_eq!(c.create_partitions("dflt", 7, false).unwrap().0, 0);
        assert_eq!(c.create_topic_with("one", 1).unwrap().0, POLICY_VIOLATION);
        wait_for_leaders(&brokers, "dflt", 7);
        // Offsets commit per partition that exists.
        assert_eq!(c.commit_offset_of("g", "dflt", 6, 5).unwrap(), 0);
        assert_eq!(
            c.commit_offset_of("g", "dflt", 7, 5).unwrap(),
            UNKNOWN_TOPIC
        );
    })
    .await
    .unwrap();
    drop(nodes);
}

/// A topic directory written before partitions (`topics/<name>~<incarnation>`) is moved to
/// partition 0's directory at start, with its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_directory_from_before_partitions_becomes_partition_0() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(1, dir.path(), &[]);
    let brokers = kafka_addrs(&configs);
    let nodes = start(&configs).await;
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b[0]).unwrap();
        assert_eq!(c.create_topic_with("old", 1).unwrap(), (0, 1));
        let leaders = wait_for_leaders(&b, "old", 1);
        produce(&leaders, "old", 0, batch(7, b"partition-0"));
    })
    .await
    .unwrap();
    drop(nodes);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let data = &configs[0].data_dir;
    let dirs = topic_dirs(data, "old");
    assert_eq!(dirs.len(), 1);
    let partition0 = dirs[0].clone();
    let legacy = partition0
        .strip_suffix("-0")
        .expect("partition 0's directory");
    std::fs::rename(
        data.join("topics").join(&partition0),
        data.join("topics").join(legacy),
    )
    .unwrap();

    let nodes = start(&configs).await;
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || assert_partitions_hold(&b, "old", &[vec![7]]))
        .await
        .unwrap();
    assert_eq!(topic_dirs(data, "old"), vec![partition0]);
    drop(nodes);
}

/// Leaders of `topic`'s partitions as `node` sees them, and each partition's preferred leader
/// (the first replica Metadata lists).
fn leaders_and_preferred(node: &Node, topic: &str) -> Vec<(u64, u64)> {
    node.partitions(topic)
        .iter()
        .map(|s| (s.visible().leader, node.replicas_of(s)[0]))
        .collect()
}

/// Waits until every running node sees each of the `count` partitions led by its preferred
/// replica; returns how many partitions each node id leads.
async fn wait_for_preferred_leaders(
    nodes: &[Option<(Arc<Node>, tokio::task::JoinHandle<()>)>],
    topic: &str,
    count: usize,
) -> HashMap<u64, usize> {
    let deadline = Instant::now() + T;
    loop {
        let views: Vec<Vec<(u64, u64)>> = nodes
            .iter()
            .flatten()
            .map(|(n, _)| leaders_and_preferred(n, topic))
            .collect();
        let settled = views
            .iter()
            .all(|v| v.len() == count && v.iter().all(|(l, p)| l == p) && *v == views[0]);
        if settled {
            let mut led = HashMap::new();
            for (leader, _) in &views[0] {
                *led.entry(*leader).or_insert(0) += 1;
            }
            return led;
        }
        assert!(
            Instant::now() < deadline,
            "leaders never settled on the preferred replicas: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Partitions' leaders are spread evenly over the nodes (each partition led by its preferred
/// replica), and a node that was down leads its share again soon after it comes back (Kafka's
/// auto leader rebalance), instead of staying idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_spread_over_the_nodes_and_return_to_a_restarted_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[]);
    for c in &mut configs {
        c.raft.leader_rebalance_interval = Some(Duration::from_millis(300));
    }
    let mut nodes = Vec::new();
    for c in &configs {
        let n = Node::start(c.clone()).await.unwrap();
        let kafka = n.serve_kafka().await.unwrap();
        nodes.push(Some((n, kafka)));
    }
    let b = kafka_addrs(&configs);
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b[0]).unwrap();
        assert_eq!(c.create_topic_with("spread", 6).unwrap(), (0, 6));
    })
    .await
    .unwrap();
    let led = wait_for_preferred_leaders(&nodes, "spread", 6).await;
    assert_eq!(
        led.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "{led:?}"
    );

    // Node 1 goes down: the others lead everything; back, it leads its two again.
    let (n1, k1) = nodes[0].take().unwrap();
    k1.abort();
    n1.shutdown();
    drop(n1);
    let deadline = Instant::now() + T;
    loop {
        let (n2, _) = nodes[1].as_ref().unwrap();
        let leaders: Vec<u64> = n2
            .partitions("spread")
            .iter()
            .map(|s| s.visible().leader)
            .collect();
        if leaders.iter().all(|l| *l == 2 || *l == 3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "partitions still led by the stopped node: {leaders:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let n1 = Node::start(configs[0].clone()).await.unwrap();
    let k1 = n1.serve_kafka().await.unwrap();
    nodes[0] = Some((n1, k1));
    let led = wait_for_preferred_leaders(&nodes, "spread", 6).await;
    assert_eq!(led.get(&1), Some(&2), "{led:?}");
    for (n, k) in nodes.into_iter().flatten() {
        k.abort();
        n.shutdown();
    }
}

/// Asks `broker` for `topic`'s metadata over and over until `stop`; returns how many answers
/// it got and the first few that did not name a live leader for each of the `count`
/// partitions (a topic error, a partition missing, or one without a leader).
fn watch_metadata(
    broker: SocketAddr,
    topic: &str,
    count: usize,
    stop: &std::sync::atomic::AtomicBool,
) -> (usize, Vec<String>) {
    let mut answers = 0;
    let mut bad = Vec::new();
    let mut conn = None;
    while !stop.load(std::sync::atomic::Ordering::Acquire) {
        if conn.is_none() {
            conn = KafkaConn::connect(broker).ok();
        }
        let Some(c) = conn.as_mut() else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        match c.partition_infos(topic) {
            Ok((err, parts)) => {
                answers += 1;
                let whole = err == 0
                    && parts.len() == count
                    && parts.iter().all(|p| p.error == 0 && p.leader > 0);
                if !whole && bad.len() < 10 {
                    bad.push(format!("{broker}: topic error {err}, partitions {parts:?}"));
                }
            }
            Err(_) => conn = None,
        }
    }
    (answers, bad)
}

/// While leadership of every partition moves from replica to replica (planned transfers, as
/// the leader rebalance and a rolling restart make them), every node's Metadata keeps naming a
/// leader for each partition: the previous one until the next is known, as Kafka's metadata
/// does, never none. A client caches a partition answered without a leader (librdkafka's
/// watermark query then fails with "Unknown partition" until its metadata expires).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_names_a_leader_for_every_partition_while_leadership_moves() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[]);
    for c in &mut configs {
        c.raft.leader_rebalance_interval = None;
    }
    let brokers = kafka_addrs(&configs);
    let nodes = start(&configs).await;
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b[0]).unwrap();
        assert_eq!(c.create_topic_replicated("moving", 3, 3).unwrap().0, 0);
        wait_for_leaders(&b, "moving", 3);
    })
    .await
    .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchers: Vec<_> = brokers
        .iter()
        .map(|b| {
            let (b, stop) = (*b, stop.clone());
            std::thread::spawn(move || watch_metadata(b, "moving", 3, &stop))
        })
        .collect();
    let leader_seen_by_all = |p: u32| {
        let leaders: Vec<u64> = nodes
            .0
            .iter()
            .map(|(n, _)| n.partition("moving", p).map_or(0, |s| s.visible().leader))
            .collect();
        (leaders.iter().all(|l| *l == leaders[0])).then_some(leaders[0])
    };
    for round in 0..4u64 {
        for p in 0..3u32 {
            let to = (u64::from(p) + round) % 3 + 1;
            let deadline = Instant::now() + T;
            loop {
                let (node, _) = &nodes.0[round as usize % 3];
                match node.transfer_leader("moving", p, to, T).await {
                    Ok(()) if leader_seen_by_all(p) == Some(to) => break,
                    other => assert!(
                        Instant::now() < deadline,
                        "moving-{p} to {to}: {other:?}, leaders {:?}",
                        leader_seen_by_all(p)
                    ),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    for w in watchers {
        let (answers, bad) = w.join().unwrap();
        assert!(answers > 0, "no Metadata answers");
        assert!(
            bad.is_empty(),
            "{answers} answers, without a leader: {bad:#?}"
        );
    }
    drop(nodes);
}

/// A node restarted after the cluster created a topic it had not heard of answers Metadata,
/// from its first answer on, with the topic and every partition of it: it catches up with the
/// cluster's metadata before it answers (as a Kafka broker catches up on the metadata log
/// before it serves), instead of calling the topic unknown while its log lacks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_answers_metadata_only_once_caught_up_with_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[]);
    let brokers = kafka_addrs(&configs);
    let mut nodes = start(&configs).await;
    let (n3, k3) = nodes.0.pop().unwrap();
    k3.abort();
    n3.shutdown();
    drop(n3);
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b[0]).unwrap();
        assert_eq!(c.create_topic_replicated("later", 3, 3).unwrap().0, 0);
        wait_for_leaders(&b[..2], "later", 3);
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let n3 = Node::start(configs[2].clone()).await.unwrap();
    let k3 = n3.serve_kafka().await.unwrap();
    nodes.0.push((n3, k3));
    let b3 = brokers[2];
    let answers = tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b3).unwrap();
        let until = Instant::now() + Duration::from_secs(1);
        let mut answers = Vec::new();
        while Instant::now() < until {
            let (err, parts) = c.partition_infos("later").unwrap();
            let led = parts
                .iter()
                .filter(|p| p.error == 0 && p.leader > 0)
                .count();
            answers.push((err, parts.len(), led));
        }
        answers
    })
    .await
    .unwrap();
    let partial: Vec<&(i16, usize, usize)> = answers.iter().filter(|a| **a != (0, 3, 3)).collect();
    assert!(!answers.is_empty());
    assert!(
        partial.is_empty(),
        "{} of {} answers without the topic's 3 partitions each with a leader, (topic error, partitions, with a leader): {:?}",
        partial.len(),
        answers.len(),
        &partial[..partial.len().min(5)]
    );
    drop(nodes);
}
