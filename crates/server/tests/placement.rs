//! Replica placement over more nodes than replicas: a partition lives on `replication_factor`
//! nodes, partitions and leaders spread evenly, Metadata at any node lists every partition with
//! its leader, replicas and in-sync replicas, a node without a replica answers
//! NOT_LEADER_OR_FOLLOWER, a SIGKILLed node's partitions get new leaders with every acknowledged
//! record, and the node leads its share again when it returns. CreateTopics refuses a factor
//! above the node count (INVALID_REPLICATION_FACTOR) and -1 takes the default (3).

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::kafka::{KafkaConn, PartitionInfo, NOT_LEADER};
use common::procs::ProcCluster;
use common::serving::{start, Nodes};
use common::{batch, cluster_configs, split_batches};

/// Kafka's INVALID_REPLICATION_FACTOR.
const INVALID_REPLICATION_FACTOR: i16 = 38;

/// Waits until every broker in `brokers` answers Metadata for `topic` with `count` partitions,
/// each with `replication` replicas, a leader among `alive` (node ids) and no error, all brokers
/// agreeing on leaders and replicas; with `preferred`, also each partition led by its first
/// replica and with every replica in sync. Returns the partitions as agreed.
fn wait_for_partitions(
    brokers: &[SocketAddr],
    alive: &[i32],
    topic: &str,
    count: usize,
    replication: usize,
    preferred: bool,
    timeout: Duration,
) -> Vec<PartitionInfo> {
    let deadline = Instant::now() + timeout;
    loop {
        let views: Vec<Option<Vec<PartitionInfo>>> = brokers
            .iter()
            .map(|b| {
                KafkaConn::connect(*b)
                    .and_then(|mut c| c.partition_infos(topic))
                    .ok()
                    .filter(|(err, parts)| *err == 0 && parts.len() == count)
                    .map(|(_, parts)| parts)
            })
            .collect();
        let settled = views.iter().all(|v| {
            v.as_ref().is_some_and(|parts| {
                parts.iter().enumerate().all(|(i, p)| {
                    let mut isr = p.isr.clone();
                    let mut replicas = p.replicas.clone();
                    isr.sort_unstable();
                    replicas.sort_unstable();
                    p.index == i as i32
                        && p.error == 0
                        && p.replicas.len() == replication
                        && alive.contains(&p.leader)
                        && p.replicas.contains(&p.leader)
                        && (!preferred || (p.leader == p.replicas[0] && isr == replicas))
                })
            })
        });
        let agreed = |a: &Vec<PartitionInfo>, b: &Vec<PartitionInfo>| {
            a.iter()
                .zip(b)
                .all(|(x, y)| x.leader == y.leader && x.replicas == y.replicas)
        };
        if settled {
            let first = views[0].clone().unwrap();
            if views.iter().flatten().all(|v| agreed(v, &first)) {
                return first;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: no agreed placement of {count} partitions x {replication} replicas \
             (preferred leaders: {preferred}) among live nodes {alive:?}: {views:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How many partitions each node id holds a replica of, and leads.
fn spread(parts: &[PartitionInfo]) -> (HashMap<i32, usize>, HashMap<i32, usize>) {
    let mut hosted = HashMap::new();
    let mut led = HashMap::new();
    for p in parts {
        *led.entry(p.leader).or_insert(0) += 1;
        for r in &p.replicas {
            *hosted.entry(*r).or_insert(0) += 1;
        }
    }
    (hosted, led)
}

/// The partition directories of `topic` in a node's data directory.
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

/// Produces one batch of `n` records tagged with the partition to partition `p` through the
/// broker of its leader (node id `leader`), retrying while leadership settles; returns the base
/// offset.
fn produce(brokers: &[SocketAddr], parts: &[PartitionInfo], topic: &str, p: usize, n: u32) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = brokers[parts[p].leader as usize - 1];
    loop {
        let r = KafkaConn::connect(leader)
            .and_then(|mut c| c.produce_to(topic, p as i32, batch(n, format!("p{p}").as_bytes())));
        match r {
            Ok((0, offset)) => return offset,
            other => assert!(
                Instant::now() < deadline,
                "produce to {topic}-{p} at node {}: {other:?}",
                parts[p].leader
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads partition `p` from its leader and checks it holds exactly the batches `expected` (record
/// counts, each tagged with the partition), from offset 0.
fn assert_holds(
    brokers: &[SocketAddr],
    parts: &[PartitionInfo],
    topic: &str,
    p: usize,
    expected: &[u32],
) {
    let leader = brokers[parts[p].leader as usize - 1];
    let (err, hw, records) = KafkaConn::connect(leader)
        .and_then(|mut c| c.fetch_partition(topic, p as i32, 0))
        .unwrap();
    assert_eq!(
        err, 0,
        "fetch of {topic}-{p} from its leader {}",
        parts[p].leader
    );
    let total: u32 = expected.iter().sum();
    assert_eq!(hw, i64::from(total), "high watermark of {topic}-{p}");
    let got = split_batches(&records);
    let tag = format!("p{p}").into_bytes();
    let mut offset = 0u64;
    assert_eq!(got.len(), expected.len(), "batches of {topic}-{p}");
    for ((base, n, value), want) in got.iter().zip(expected) {
        assert_eq!((*base, *n, value), (offset, *want, &tag), "{topic}-{p}");
        offset += u64::from(*want);
    }
}

/// Five `vdl` processes, a topic of 10 partitions with 3 replicas: each node holds 6 partitions
/// (on disk too) and leads 2; Metadata at every node lists all 10 with leader, replicas and ISR;
/// produce and fetch go through the leader Metadata names, a node without a replica answers
/// NOT_LEADER_OR_FOLLOWER; after a SIGKILL of one node every partition has a live leader and
/// every acknowledged record; back, the node leads its two partitions again.
#[test]
fn five_nodes_spread_partitions_and_leaders_and_survive_a_sigkill() {
    const TOPIC: &str = "spread";
    const T: Duration = Duration::from_secs(60);
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = ProcCluster::start(dir.path(), 5, "");
    let brokers = cluster.kafka.clone();
    let all: Vec<i32> = (1..=5).collect();

    // The cluster is up when a broker answers CreateTopics (the metadata group has a leader).
    let deadline = Instant::now() + T;
    let created = loop {
        let r = KafkaConn::connect(brokers[0])
            .and_then(|mut c| c.create_topic_replicated(TOPIC, 10, 3));
        match r {
            Ok((0, ..)) | Ok((36, ..)) => break r.unwrap(),
            other => assert!(Instant::now() < deadline, "create {TOPIC}: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(created.0 == 36 || created == (0, 10, 3), "{created:?}");

    let parts = wait_for_partitions(&brokers, &all, TOPIC, 10, 3, true, T);
    let (hosted, led) = spread(&parts);
    for id in &all {
        assert_eq!(hosted.get(id), Some(&6), "replicas per node: {hosted:?}");
        assert_eq!(led.get(id), Some(&2), "leaders per node: {led:?}");
        let dirs = topic_dirs(&cluster.data_dir(*id as usize - 1), TOPIC);
        let want: Vec<usize> = parts
            .iter()
            .filter(|p| p.replicas.contains(id))
            .map(|p| p.index as usize)
            .collect();
        assert_eq!(
            dirs.len(),
            6,
            "node {id} holds {dirs:?}, its partitions are {want:?}"
        );
        for p in want {
            assert!(
                dirs.iter().any(|d| d.ends_with(&format!("-{p}"))),
                "node {id} lacks partition {p}: {dirs:?}"
            );
        }
    }

    // Two batches per partition through the leader Metadata named.
    let mut expected: Vec<Vec<u32>> = vec![Vec::new(); 10];
    for round in 0..2u32 {
        for (p, batches) in expected.iter_mut().enumerate() {
            let n = 2 + round + p as u32;
            let offset = produce(&brokers, &parts, TOPIC, p, n);
            assert_eq!(
                offset,
                i64::from(batches.iter().sum::<u32>()),
                "{TOPIC}-{p}"
            );
            batches.push(n);
        }
    }
    for (p, batches) in expected.iter().enumerate() {
        assert_holds(&brokers, &parts, TOPIC, p, batches);
    }
    // A node that holds no replica of partition 0 sends clients back to Metadata.
    let outsider = all
        .iter()
        .find(|id| !parts[0].replicas.contains(id))
        .unwrap();
    let mut c = KafkaConn::connect(brokers[*outsider as usize - 1]).unwrap();
    assert_eq!(
        c.produce_to(TOPIC, 0, batch(1, b"p0")).unwrap().0,
        NOT_LEADER
    );
    assert_eq!(c.fetch_partition(TOPIC, 0, 0).unwrap().0, NOT_LEADER);
    assert_eq!(c.list_offset_of(TOPIC, 0, -1).unwrap().0, NOT_LEADER);

    // SIGKILL the leader of partition 0: every partition is led by a live node again, with
    // every acknowledged record, and takes writes.
    let victim = parts[0].leader;
    cluster.kill(victim as usize - 1);
    let survivors: Vec<i32> = all.iter().copied().filter(|id| *id != victim).collect();
    let live_brokers: Vec<SocketAddr> = survivors
        .iter()
        .map(|id| brokers[*id as usize - 1])
        .collect();
    let start = Instant::now();
    let after = wait_for_partitions(&live_brokers, &survivors, TOPIC, 10, 3, false, T);
    eprintln!(
        "every partition led again {:?} after the SIGKILL of node {victim}",
        start.elapsed()
    );
    for (p, batches) in expected.iter_mut().enumerate() {
        assert_holds(&brokers, &after, TOPIC, p, batches);
        let n = 7 + p as u32;
        let offset = produce(&brokers, &after, TOPIC, p, n);
        assert_eq!(
            offset,
            i64::from(batches.iter().sum::<u32>()),
            "{TOPIC}-{p}"
        );
        batches.push(n);
    }

    // Back: it catches up and leads its share again (leader rebalance, every 10 s by default).
    cluster.spawn(victim as usize - 1);
    let back = wait_for_partitions(&brokers, &all, TOPIC, 10, 3, true, T);
    assert_eq!(spread(&back).1.get(&victim), Some(&2));
    for (p, batches) in expected.iter().enumerate() {
        assert_holds(&brokers, &back, TOPIC, p, batches);
    }
    cluster.assert_all_running();
}

/// CreateTopics on five nodes: a replication factor above 5 (or 0) gets
/// INVALID_REPLICATION_FACTOR, -1 gets the default of 3, 1 and 5 are honoured; each node opens
/// exactly the partitions it is a replica of, also after every node restarts; a grown topic's new
/// partitions get as many replicas; a deleted topic's data is gone from its replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replication_factor_is_checked_and_defaults_to_three() {
    const T: Duration = Duration::from_secs(30);
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(5, dir.path(), &[]);
    let brokers: Vec<SocketAddr> = configs.iter().map(|c| c.kafka_listen).collect();
    let all: Vec<i32> = (1..=5).collect();
    let nodes = start(&configs).await;
    let b = brokers.clone();
    let ids = all.clone();
    let expected_one = tokio::task::spawn_blocking(move || {
        let all = ids;
        let deadline = Instant::now() + T;
        let mut c = KafkaConn::connect(b[0]).unwrap();
        // Wait for the metadata group: a refused factor is answered without it, so probe with a
        // real create.
        loop {
            match c.create_topic_replicated("dflt", 4, -1).unwrap() {
                (0, 4, 3) => break,
                other => assert!(Instant::now() < deadline, "create dflt: {other:?}"),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for rf in [6, 0, -2] {
            let (code, ..) = c.create_topic_replicated("bad", 1, rf).unwrap();
            assert_eq!(code, INVALID_REPLICATION_FACTOR, "replication factor {rf}");
        }
        assert_eq!(c.partition_infos("bad").unwrap().0, 3, "not created");
        assert_eq!(c.create_topic_replicated("all", 2, 5).unwrap(), (0, 2, 5));
        assert_eq!(c.create_topic_replicated("one", 5, 1).unwrap(), (0, 5, 1));
        let dflt = wait_for_partitions(&b, &all, "dflt", 4, 3, false, T);
        assert!(dflt.iter().all(|p| p.replicas.len() == 3));
        wait_for_partitions(&b, &all, "all", 2, 5, false, T);
        // One replica each, five partitions: every node leads one.
        let one = wait_for_partitions(&b, &all, "one", 5, 1, true, T);
        let (_, led) = spread(&one);
        assert!(all.iter().all(|id| led.get(id) == Some(&1)), "{led:?}");
        let mut expected = Vec::new();
        for p in 0..5 {
            assert_eq!(produce(&b, &one, "one", p, 3 + p as u32), 0);
            expected.push(vec![3 + p as u32]);
        }
        // Grown: the new partitions get three replicas too.
        assert_eq!(c.create_partitions("dflt", 7, false).unwrap(), (0, None));
        wait_for_partitions(&b, &all, "dflt", 7, 3, false, T);
        expected
    })
    .await
    .unwrap();
    // Each node opened exactly the partitions Metadata names it a replica of.
    let check_hosting = |nodes: &Nodes, topic: &str, count: usize, replication: usize| {
        let mut total = 0;
        for (n, _) in &nodes.0 {
            for s in n.partitions(topic) {
                assert!(n.replicas_of(&s).contains(&n.config().id));
                assert_eq!(n.replicas_of(&s).len(), replication);
            }
            total += n.partitions(topic).len();
        }
        assert_eq!(total, count * replication, "{topic}");
    };
    check_hosting(&nodes, "dflt", 7, 3);
    check_hosting(&nodes, "one", 5, 1);
    check_hosting(&nodes, "all", 2, 5);

    // Every node restarted: each opens its partitions again, and the data is there.
    drop(nodes);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let nodes = start(&configs).await;
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || {
        let one = wait_for_partitions(&b, &all, "one", 5, 1, false, T);
        for (p, batches) in expected_one.iter().enumerate() {
            assert_holds(&b, &one, "one", p, batches);
        }
        wait_for_partitions(&b, &all, "dflt", 7, 3, false, T);
        let mut c = KafkaConn::connect(b[1]).unwrap();
        assert_eq!(c.delete_topic("dflt").unwrap(), 0);
    })
    .await
    .unwrap();
    check_hosting(&nodes, "one", 5, 1);
    let deadline = Instant::now() + T;
    for c in &configs {
        while !topic_dirs(&c.data_dir, "dflt").is_empty() {
            assert!(Instant::now() < deadline, "dflt left on {}", c.name);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(topic_dirs(&c.data_dir, "one").len(), 1, "{}", c.name);
    }
    drop(nodes);
}
