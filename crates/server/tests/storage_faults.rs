//! Storage corruption with three real `vdl` processes (issue 19): one flipped bit on one
//! replica costs a repair from a healthy replica, never the node, another stream, or an
//! acknowledged record. Every read back checks each batch's CRC (`split_batches`).

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::kafka::on_any;
use common::procs::ProcCluster;
use common::{batch, split_batches};

const WAIT: Duration = Duration::from_secs(30);

/// 1 MiB segments (so a few MB make sealed segments) and a fast scrubber.
const STORAGE: &str = "segment_bytes = 1048576\nscrub_rate_mb_per_s = 200\nscrub_pause_ms = 300";

/// What a test acknowledged: base offset -> (record count, value tag).
type Acked = BTreeMap<u64, (u32, Vec<u8>)>;

fn tag(topic: &str, seq: usize, size: usize) -> Vec<u8> {
    let mut v = format!("{topic}-{seq:08}-").into_bytes();
    v.resize(size.max(v.len()), b'x');
    v
}

/// Produces `batches` acknowledged batches (acks=all) of `per_batch` records of `size` bytes.
fn produce_acked(
    brokers: &[SocketAddr],
    topic: &str,
    batches: usize,
    per_batch: u32,
    size: usize,
    acked: &mut Acked,
) {
    let start = acked.len();
    for seq in start..start + batches {
        let value = tag(topic, seq, size);
        let data = batch(per_batch, &value);
        let base = on_any(brokers, WAIT, &format!("produce to {topic}"), |c| {
            c.produce(topic, data.clone())
        });
        let base = u64::try_from(base).expect("acknowledged base offset");
        assert!(
            acked.insert(base, (per_batch, value)).is_none(),
            "offset {base} acknowledged twice"
        );
    }
}

/// Reads partition 0 from 0 to the high watermark (each batch's CRC checked).
fn read_all(brokers: &[SocketAddr], topic: &str) -> Acked {
    let mut out = Acked::new();
    let mut offset = 0i64;
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "reading {topic} took too long");
        let (hw, records) = on_any(brokers, WAIT, &format!("fetch {topic} at {offset}"), |c| {
            c.fetch(topic, offset).map(|(e, hw, _, r)| (e, (hw, r)))
        });
        if offset >= hw {
            return out;
        }
        let batches = split_batches(&records);
        assert!(
            !batches.is_empty(),
            "fetch at {offset} below {hw} was empty"
        );
        for (base, count, value) in batches {
            out.insert(base, (count, value));
            offset = (base + u64::from(count)) as i64;
        }
    }
}

/// Every acknowledged batch is there, unchanged, and nothing else. A leader just elected
/// publishes its high watermark once it committed in its term: read again until the end of
/// what was acknowledged is visible.
fn assert_acked_present(brokers: &[SocketAddr], topic: &str, acked: &Acked) {
    let end = acked
        .iter()
        .next_back()
        .map_or(0, |(b, (n, _))| b + u64::from(*n));
    let deadline = Instant::now() + WAIT;
    let mut got = read_all(brokers, topic);
    while got
        .iter()
        .next_back()
        .map_or(0, |(b, (n, _))| b + u64::from(*n))
        < end
    {
        assert!(
            Instant::now() < deadline,
            "{topic}: the acknowledged end never became visible"
        );
        std::thread::sleep(Duration::from_millis(100));
        got = read_all(brokers, topic);
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        acked.keys().collect::<Vec<_>>(),
        "{topic}: batch offsets"
    );
    assert!(&got == acked, "{topic}: batch contents differ");
}

fn create(brokers: &[SocketAddr], topic: &str) {
    on_any(brokers, WAIT, &format!("create {topic}"), |c| {
        c.create_topic_replicated(topic, 1, 3)
            .map(|(e, _, _)| (if e == 36 { 0 } else { e }, ()))
    });
    leader_of(brokers, topic);
}

/// The node index (0-based) leading partition 0 of `topic`.
fn leader_of(brokers: &[SocketAddr], topic: &str) -> usize {
    let leader = on_any(brokers, WAIT, &format!("a leader for {topic}"), |c| {
        c.metadata(topic)
            .map(|(e, leader, _)| (if leader < 0 { 5 } else { e }, leader))
    });
    leader as usize - 1
}

/// The directory of partition 0 of `topic` on node `i`.
fn topic_dir(c: &ProcCluster, i: usize, topic: &str) -> PathBuf {
    let topics = c.data_dir(i).join("topics");
    std::fs::read_dir(&topics)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{topic}~")) && n.ends_with("-0"))
        })
        .unwrap_or_else(|| panic!("no directory of {topic} under {}", topics.display()))
}

/// The segment files of a store directory, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

/// Flips one bit of `path` at `at` (in place: a running node's page cache sees it).
fn flip(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x10;
    f.write_all_at(&b, at).unwrap();
    f.sync_all().unwrap();
}

/// Waits until node `i`'s log contains `text`.
fn wait_for_log(c: &ProcCluster, i: usize, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !c.log(i).contains(text) {
        assert!(
            Instant::now() < deadline,
            "node {} never logged {text:?}; its log:\n{}",
            i + 1,
            c.log_tail(i)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Produces about 3 MB to `topic` (three sealed 1 MiB segments) and a little to `other`.
fn setup(c: &ProcCluster, topic: &str, other: &str) -> (Acked, Acked) {
    let brokers = c.kafka.clone();
    create(&brokers, topic);
    create(&brokers, other);
    let mut acked = Acked::new();
    let mut other_acked = Acked::new();
    produce_acked(&brokers, topic, 300, 10, 1000, &mut acked);
    produce_acked(&brokers, other, 20, 10, 100, &mut other_acked);
    (acked, other_acked)
}

/// The checks after every fault: the other stream works on every node, the damaged replica
/// is whole again, every acknowledged record reads back exactly, and a restart of every node
/// (one at a time, then all) comes up with the same records.
fn after_repair(
    c: &mut ProcCluster,
    damaged: usize,
    topic: &str,
    acked: &mut Acked,
    other: &str,
    other_acked: &mut Acked,
) {
    let brokers = c.kafka.clone();
    wait_for_log(c, damaged, "log repaired from the leader");
    c.assert_all_running();
    produce_acked(&brokers, other, 5, 10, 100, other_acked);
    produce_acked(&brokers, topic, 5, 10, 1000, acked);
    assert_acked_present(&brokers, topic, acked);
    assert_acked_present(&brokers, other, other_acked);
    // The repaired replica holds everything: with it and only one other node up (either
    // one), every record is still there.
    for down in (0..3).filter(|&i| i != damaged) {
        c.stop(down);
        leader_of(&brokers, topic);
        assert_acked_present(&brokers, topic, acked);
        c.spawn(down);
    }
    c.restart_all(false);
    leader_of(&brokers, topic);
    assert_acked_present(&brokers, topic, acked);
    assert_acked_present(&brokers, other, other_acked);
    c.assert_all_running();
}

/// (a) A bit flip in the middle of a follower's first sealed segment while it is down: it
/// starts, the scrubber finds the damage, the log is cut there and fetched again.
#[test]
fn flip_in_a_followers_sealed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(dir.path(), 3, STORAGE);
    let (mut acked, mut other_acked) = setup(&c, "fa", "oa");
    let leader = leader_of(&c.kafka, "fa");
    let follower = (0..3).find(|&i| i != leader).unwrap();
    c.stop(follower);
    let segs = segments(&topic_dir(&c, follower, "fa"));
    assert!(segs.len() >= 3, "expected sealed segments, found {segs:?}");
    let len = std::fs::metadata(&segs[0]).unwrap().len();
    flip(&segs[0], len / 2);
    c.spawn(follower);
    after_repair(&mut c, follower, "fa", &mut acked, "oa", &mut other_acked);
}

/// (b) A bit flip in the leader's sealed segment while it runs: the scrubber finds it, the
/// leader hands leadership to a healthy replica, cuts its log and fetches the rest again.
#[test]
fn flip_in_the_leaders_sealed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(dir.path(), 3, STORAGE);
    let (mut acked, mut other_acked) = setup(&c, "fb", "ob");
    let leader = leader_of(&c.kafka, "fb");
    let segs = segments(&topic_dir(&c, leader, "fb"));
    assert!(segs.len() >= 3, "expected sealed segments, found {segs:?}");
    let len = std::fs::metadata(&segs[1]).unwrap().len();
    flip(&segs[1], len / 3);
    wait_for_log(&c, leader, "damaged entries found");
    after_repair(&mut c, leader, "fb", &mut acked, "ob", &mut other_acked);
    assert!(c.log(leader).contains("handing leadership over"));
}

/// (e) A bit flip in a follower's hard-state file: it starts, votes for nobody until it
/// hears from a leader, takes the term from it, and serves as before.
#[test]
fn flip_in_a_followers_hard_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(dir.path(), 3, STORAGE);
    let (mut acked, mut other_acked) = setup(&c, "fe", "oe");
    let leader = leader_of(&c.kafka, "fe");
    let follower = (0..3).find(|&i| i != leader).unwrap();
    c.stop(follower);
    let hs = topic_dir(&c, follower, "fe").join("hardstate");
    flip(&hs, 12);
    c.spawn(follower);
    wait_for_log(&c, follower, "hard state rebuilt from the leader");
    assert!(c.log(follower).contains("CRC mismatch"));
    let brokers = c.kafka.clone();
    produce_acked(&brokers, "fe", 5, 10, 1000, &mut acked);
    produce_acked(&brokers, "oe", 5, 10, 100, &mut other_acked);
    c.assert_all_running();
    c.restart_all(false);
    leader_of(&brokers, "fe");
    assert_acked_present(&brokers, "fe", &acked);
    assert_acked_present(&brokers, "oe", &other_acked);
    c.assert_all_running();
}

/// The index files of a store directory, oldest first.
fn index_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "index"))
        .collect();
    v.sort();
    v
}

/// (c) A bit flip in the body of a sealed segment's index file on every node (the cluster
/// stopped): whoever leads rebuilds the index from the log to serve old offsets.
#[test]
fn flip_in_index_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(dir.path(), 3, STORAGE);
    let (acked, other_acked) = setup(&c, "fc", "oc");
    for i in 0..3 {
        c.stop(i);
    }
    let mut flipped = Vec::new();
    for i in 0..3 {
        let idx = index_files(&topic_dir(&c, i, "fc"));
        assert!(!idx.is_empty(), "node {}: no index file", i + 1);
        let len = std::fs::metadata(&idx[0]).unwrap().len();
        // Past the 96-byte header: the body (raft, offset and time entries).
        flip(&idx[0], 96 + (len - 96) / 2 + i as u64);
        flipped.push((idx[0].clone(), std::fs::read(&idx[0]).unwrap()));
    }
    for i in 0..3 {
        c.spawn(i);
    }
    let brokers = c.kafka.clone();
    leader_of(&brokers, "fc");
    assert_acked_present(&brokers, "fc", &acked);
    assert_acked_present(&brokers, "oc", &other_acked);
    // The leader's index file was rewritten from the log.
    let leader = leader_of(&brokers, "fc");
    let (path, damaged) = &flipped[leader];
    assert_ne!(&std::fs::read(path).unwrap(), damaged, "index not rebuilt");
    c.restart_all(false);
    leader_of(&brokers, "fc");
    assert_acked_present(&brokers, "fc", &acked);
    c.assert_all_running();
}

/// (d) A bit flip in the middle of a follower's active segment (intact entries after it):
/// recovery tells it from a torn tail, cuts the log there and the leader sends the rest.
#[test]
fn flip_in_the_middle_of_the_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(dir.path(), 3, STORAGE);
    let (mut acked, mut other_acked) = setup(&c, "fd", "od");
    let leader = leader_of(&c.kafka, "fd");
    let follower = (0..3).find(|&i| i != leader).unwrap();
    c.stop(follower);
    let segs = segments(&topic_dir(&c, follower, "fd"));
    let active = segs.last().unwrap();
    let len = std::fs::metadata(active).unwrap().len();
    assert!(len > 100_000, "active segment too small: {len}");
    flip(active, len / 2);
    c.spawn(follower);
    wait_for_log(&c, follower, "in the middle of the active segment");
    after_repair(&mut c, follower, "fd", &mut acked, "od", &mut other_acked);
}

/// Flips on two nodes in different ranges (the whole cluster stopped): nothing is lost and
/// the partition stays available while both repair.
#[test]
fn flips_on_two_nodes_in_different_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(dir.path(), 3, STORAGE);
    let (mut acked, mut other_acked) = setup(&c, "f2", "o2");
    for i in 0..3 {
        c.stop(i);
    }
    for (node, seg) in [(0usize, 0usize), (1, 1)] {
        let segs = segments(&topic_dir(&c, node, "f2"));
        let len = std::fs::metadata(&segs[seg]).unwrap().len();
        flip(&segs[seg], len / 2);
    }
    for i in 0..3 {
        c.spawn(i);
    }
    let brokers = c.kafka.clone();
    // Available throughout: produces are acknowledged while the two replicas repair.
    produce_acked(&brokers, "f2", 20, 10, 1000, &mut acked);
    for node in [0, 1] {
        wait_for_log(&c, node, "log repaired from the leader");
    }
    produce_acked(&brokers, "f2", 5, 10, 1000, &mut acked);
    produce_acked(&brokers, "o2", 5, 10, 100, &mut other_acked);
    assert_acked_present(&brokers, "f2", &acked);
    assert_acked_present(&brokers, "o2", &other_acked);
    // Each repaired replica with the healthy one alone holds everything.
    for down in [0, 1] {
        c.stop(down);
        leader_of(&brokers, "f2");
        assert_acked_present(&brokers, "f2", &acked);
        c.spawn(down);
    }
    c.restart_all(false);
    leader_of(&brokers, "f2");
    assert_acked_present(&brokers, "f2", &acked);
    c.assert_all_running();
}
