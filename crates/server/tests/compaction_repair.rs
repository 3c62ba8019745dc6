//! Storage-fault repair on a compacted topic (issue 35), three in-process nodes: every
//! replica's cleaner rewrote the sealed segments, then one bit flips in a compacted sealed
//! segment of one replica (a follower, or the leader). The scrubber finds it, the replica
//! cuts its log before the damaged entry and fetches the cut Raft index range again from the
//! leader, which sends its own compacted entries with their record counts (the replicas'
//! bytes may differ; their records may not). Afterwards every replica, and Fetch from the
//! repaired one once it leads, serve every key's latest value at its original offset, nothing
//! acknowledged is lost, and offsets go on.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::bit_flip::flip;
use common::compacted::{
    compacting_cluster, create_compacted_with, fetch_topic, latest, produce_round, produce_to,
    read_replica, wait_compacted, Table, T,
};
use common::kafka::KafkaConn;
use common::serving::start;
use vdl_server::{LogStream, Node};

const TOPIC: &str = "rep";
const KEYS: usize = 10;

/// Which replica gets the flipped bit.
#[derive(Clone, Copy, Debug)]
enum Damaged {
    Follower,
    Leader,
}

fn stream(n: &Node) -> LogStream {
    n.partition(TOPIC, 0).expect("a replica here")
}

/// The node (position) that leads the partition, as every node sees it.
fn leader(nodes: &[Arc<Node>]) -> usize {
    let deadline = Instant::now() + T;
    loop {
        let seen: Vec<u64> = nodes.iter().map(|n| stream(n).visible().leader).collect();
        if seen[0] != 0 && seen.iter().all(|l| *l == seen[0]) {
            let at = (seen[0] - 1) as usize;
            if stream(&nodes[at]).visible().leader_ready {
                return at;
            }
        }
        assert!(Instant::now() < deadline, "no settled leader: {seen:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Produces round `round` of every key, three keys a batch, into `produced`.
fn produce_keys(brokers: &[SocketAddr], round: usize, produced: &mut Table) {
    produce_round(brokers, TOPIC, KEYS, 3, round, produced);
}

/// Waits until Fetch and every replica serve exactly the latest record of every key
/// produced (see [`wait_compacted`]).
fn wait_all_compacted(brokers: &[SocketAddr], nodes: &[Arc<Node>], produced: &Table) {
    let replicas = || {
        nodes
            .iter()
            .map(|n| read_replica(&stream(n)))
            .collect::<Vec<_>>()
    };
    wait_compacted(brokers, TOPIC, &replicas, produced);
}

/// The sealed segment file of node `n`'s replica that holds offset `offset`.
fn sealed_segment_with(n: &Node, offset: u64) -> PathBuf {
    let s = stream(n);
    let store = s.store().read().unwrap();
    let seg = store
        .segment_summaries()
        .into_iter()
        .find(|x| x.first_offset <= offset && offset < x.next_offset)
        .expect("a segment holds the offset");
    assert!(!seg.active, "offset {offset} is in the active segment");
    store.dir().join(format!("{:020}.log", seg.base_index))
}

/// Hands the partition's leadership to node `to` (position) and waits until it leads.
fn transfer_to(nodes: &[Arc<Node>], to: usize) {
    let deadline = Instant::now() + T;
    loop {
        let now = leader(nodes);
        if now == to {
            return;
        }
        stream(&nodes[now]).transfer_leader(to as u64 + 1);
        assert!(Instant::now() < deadline, "node {} never led", to + 1);
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn scenario(damaged: Damaged) {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = compacting_cluster(dir.path());
    for c in &mut configs {
        c.storage.scrub_bytes_per_second = 200_000_000;
        c.storage.scrub_pass_pause = Duration::from_millis(300);
    }
    let brokers: Vec<SocketAddr> = configs.iter().map(|c| c.kafka_listen).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let guard = rt.block_on(start(&configs));
    let nodes: Vec<Arc<Node>> = guard.0.iter().map(|(n, _)| n.clone()).collect();

    let mut c = KafkaConn::connect(brokers[0]).unwrap();
    assert_eq!(create_compacted_with(&mut c, TOPIC, &[]), (0, None));
    // Every key written four times, a roll (segment.ms) between rounds, then two tombstones:
    // several sealed segments, each compacted by every replica's cleaner.
    let mut produced = Table::new();
    for round in 0..4 {
        if round > 0 {
            std::thread::sleep(Duration::from_millis(1_200));
        }
        produce_keys(&brokers, round, &mut produced);
    }
    let base = produce_to(&brokers, TOPIC, &[(Some("k1"), None), (Some("k2"), None)]) as u64;
    produced.insert(base, ("k1".into(), None));
    produced.insert(base + 1, ("k2".into(), None));
    wait_all_compacted(&brokers, &nodes, &produced);

    let lead = leader(&nodes);
    let victim = match damaged {
        Damaged::Leader => lead,
        Damaged::Follower => (0..3).find(|&i| i != lead).unwrap(),
    };
    let term_before = stream(&nodes[victim]).visible().term;
    let faults = nodes[victim].storage_faults().clone();
    let repairs_before = faults.repairs_completed.load(Ordering::Relaxed);
    // The segment holding the first record held round 0 of the first keys, all of it
    // superseded: the cleaner rewrote it (every replica serves only the latest records).
    let first = *produced.keys().next().unwrap();
    let seg = sealed_segment_with(&nodes[victim], first);
    let len = std::fs::metadata(&seg).unwrap().len();
    flip(&seg, 64 + (len - 64) / 2);

    // The scrubber finds it; the replica repairs from its peers (a leader hands over first).
    let deadline = Instant::now() + Duration::from_secs(60);
    while faults.scrub_faults_found.load(Ordering::Relaxed) == 0
        || faults.repairs_completed.load(Ordering::Relaxed) == repairs_before
        || !faults.damaged().is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "node {}: scrub faults {}, repairs {}, damaged {:?}",
            victim + 1,
            faults.scrub_faults_found.load(Ordering::Relaxed),
            faults.repairs_completed.load(Ordering::Relaxed),
            faults.damaged()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    if let Damaged::Leader = damaged {
        // The damaged leader handed leadership over (a new term) before it cut its log.
        assert!(
            stream(&nodes[victim]).visible().term > term_before,
            "the damaged leader handed over"
        );
    }

    // Every replica serves every key's latest value at its offset; writes go on, and are
    // compacted again everywhere.
    wait_all_compacted(&brokers, &nodes, &produced);
    produce_keys(&brokers, 4, &mut produced);
    std::thread::sleep(Duration::from_millis(1_200));
    produce_keys(&brokers, 5, &mut produced);
    wait_all_compacted(&brokers, &nodes, &produced);

    // The repaired replica leads: Fetch from it alone serves the same, the sealed segments
    // (the range it fetched again included) verify, and offsets go on after the last.
    transfer_to(&nodes, victim);
    assert_eq!(
        fetch_topic(&brokers[victim..=victim], TOPIC),
        latest(&produced)
    );
    let end = produced.keys().next_back().unwrap() + 1;
    let next = produce_to(&brokers, TOPIC, &[(Some("k0"), Some("after"))]) as u64;
    assert_eq!(next, end, "offsets go on");
    produced.insert(next, ("k0".into(), Some("after".into())));
    let s = stream(&nodes[victim]);
    let store = s.store().read().unwrap();
    for base in store.sealed_segment_bases() {
        let t = store.scrub_target(base).unwrap().unwrap();
        assert_eq!(t.verify(|_| {}).damage, None, "segment {base} verifies");
    }
    drop(store);
    let deadline = Instant::now() + T;
    while nodes
        .iter()
        .any(|n| latest(&read_replica(&stream(n))) != latest(&produced))
    {
        assert!(Instant::now() < deadline, "a replica lacks the last record");
        std::thread::sleep(Duration::from_millis(100));
    }
    rt.block_on(async move { drop(guard) });
}

#[test]
fn a_flip_in_a_followers_compacted_segment_is_scrubbed_and_repaired() {
    scenario(Damaged::Follower);
}

#[test]
fn a_flip_in_the_leaders_compacted_segment_is_scrubbed_and_repaired() {
    scenario(Damaged::Leader);
}
