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

/// Every acknowledged batch is there, unchanged, and nothing else.
fn assert_acked_present(brokers: &[SocketAddr], topic: &str, acked: &Acked) {
    let got = read_all(brokers, topic);
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
