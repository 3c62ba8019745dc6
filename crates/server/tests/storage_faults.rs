//! Storage corruption with three real `vdl` processes (issue 19): one flipped bit on one
//! replica costs a repair from a healthy replica, never the node, another stream, or an
//! acknowledged record. Every read back checks each batch's CRC (`split_batches`).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::batch;
use common::bit_flip::flip;
use common::faults::{
    acked_end, control, create, faulty_cluster, leader_of, produce_acked, read_through, set_faults,
    tag, Acked, WAIT,
};
use common::procs::ProcCluster;

/// 1 MiB segments (so a few MB make sealed segments), a fast scrubber, and retention by time
/// off ([`NO_RETENTION`]).
const STORAGE: &str = "segment_bytes = 1048576\nscrub_rate_mb_per_s = 200\nscrub_pause_ms = 300\n\
                       retention_hours = 10000000\nretention_check_ms = 500";

/// Retention by time off, for the clusters of `faulty_cluster`: the tests read every
/// acknowledged batch back from offset 0, so no retention may delete a sealed segment. (When
/// `common::batch` stamped 2023, the default 7-day retention deleted every sealed segment of
/// every replica at its first check, 10 s after the partition opened, and a read from offset
/// 0 got OFFSET_OUT_OF_RANGE only when a test ran past the check, under CPU load; it stamps
/// the current time now.) Retention runs every 500 ms here, so a retention that deletes
/// anything fails these tests at once, not now and then.
const NO_RETENTION: &str = "retention_hours = 10000000\nretention_check_ms = 500";

/// Every acknowledged batch is there, unchanged, and nothing else. A leader just elected
/// publishes its high watermark once it committed in its term: read again until the end of
/// what was acknowledged is visible.
fn assert_acked_present(brokers: &[SocketAddr], topic: &str, acked: &Acked) {
    let end = acked_end(acked);
    let got = read_through(brokers, topic, end);
    assert!(
        acked_end(&got) >= end,
        "{topic}: the acknowledged end never became visible"
    );
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        acked.keys().collect::<Vec<_>>(),
        "{topic}: batch offsets"
    );
    assert!(&got == acked, "{topic}: batch contents differ");
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

/// (e) A bit flip in a follower's hard-state file: it starts, follows the leader (taking its
/// term), votes for nobody until it has heard every other voter's term (across restarts: a
/// marker keeps the votes unknown), then votes only in later terms, and serves as before.
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
    wait_for_log(&c, follower, "term and vote are lost");
    assert!(c.log(follower).contains("CRC mismatch"));
    let brokers = c.kafka.clone();
    produce_acked(&brokers, "fe", 5, 10, 1000, &mut acked);
    produce_acked(&brokers, "oe", 5, 10, 100, &mut other_acked);
    c.assert_all_running();
    c.restart_all(false);
    leader_of(&brokers, "fe");
    assert_acked_present(&brokers, "fe", &acked);
    assert_acked_present(&brokers, "oe", &other_acked);
    // The elections after the restart (and the hand-over to the preferred replica) let it
    // hear every voter.
    wait_for_log(
        &c,
        follower,
        "hard state rebuilt: votes only in terms above",
    );
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
    wait_for_log(&c, follower, "in synced bytes of the active segment");
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

// ---- disk faults through the file-system seam (issue 16) --------------------------------

/// EIO on fsync is fail-stop: the node stops with a message naming the file, the others go
/// on, and a restart recovers cleanly with every acknowledged record.
#[test]
fn fsync_eio_stops_the_node_and_a_restart_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = faulty_cluster(dir.path(), NO_RETENTION);
    let brokers = c.kafka.clone();
    create(&brokers, "eio");
    let mut acked = Acked::new();
    produce_acked(&brokers, "eio", 20, 10, 100, &mut acked);
    let leader = leader_of(&brokers, "eio");
    let follower = (0..3).find(|&i| i != leader).unwrap();
    set_faults(dir.path(), follower, "fsync=eio\n");
    produce_acked(&brokers, "eio", 20, 10, 100, &mut acked);
    let deadline = Instant::now() + WAIT;
    while c.exited(follower).is_none() {
        assert!(Instant::now() < deadline, "the node did not stop after EIO");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        c.log(follower).contains("failed: Input/output error"),
        "{}",
        c.log_tail(follower)
    );
    set_faults(dir.path(), follower, "");
    c.kill(follower);
    c.spawn(follower);
    produce_acked(&brokers, "eio", 20, 10, 100, &mut acked);
    assert_acked_present(&brokers, "eio", &acked);
    c.restart_all(false);
    leader_of(&brokers, "eio");
    assert_acked_present(&brokers, "eio", &acked);
    c.assert_all_running();
}

/// ENOSPC on append at the leader: the produce is answered KAFKA_STORAGE_ERROR (or, once
/// another replica leads, NOT_LEADER), nothing partial is visible, and once space returns
/// the node serves again.
#[test]
fn enospc_on_append_is_an_error_and_space_returning_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = faulty_cluster(dir.path(), NO_RETENTION);
    let brokers = c.kafka.clone();
    create(&brokers, "nospc");
    let mut acked = Acked::new();
    produce_acked(&brokers, "nospc", 20, 10, 100, &mut acked);
    let leader = leader_of(&brokers, "nospc");
    set_faults(dir.path(), leader, "write=enospc\n");
    let data = batch(10, b"refused");
    let mut codes = Vec::new();
    for _ in 0..5 {
        match common::kafka::KafkaConn::connect(brokers[leader])
            .and_then(|mut k| k.produce("nospc", data.clone()))
        {
            Ok((code, _)) => codes.push(code),
            Err(_) => break,
        }
    }
    assert!(
        codes.contains(&56),
        "expected KAFKA_STORAGE_ERROR, got {codes:?}"
    );
    assert!(codes.iter().all(|&c| c == 56 || c == 6), "{codes:?}");
    // The others take over. Nothing partial is visible: every batch read back is whole
    // (CRC-checked). A refused batch may still have committed through the two replicas the
    // leader had sent it to before its own write failed, as after a timeout (at least once;
    // idempotent producers' retries are deduplicated); it is never half there.
    produce_acked(&brokers, "nospc", 10, 10, 100, &mut acked);
    let got = read_through(&brokers, "nospc", acked_end(&acked));
    let refused = got.values().filter(|(_, v)| v == b"refused").count();
    assert!(refused <= codes.len(), "{refused} refused batches visible");
    for (base, v) in &acked {
        assert_eq!(got.get(base), Some(v), "acknowledged batch at {base}");
    }
    // Space returns: the node (restarted if a hard-state write made it stop) holds the log
    // again: with it and one other node up, every record is there.
    set_faults(dir.path(), leader, "");
    // A hard-state write that failed just before the faults were cleared may still be
    // stopping the node: give it a moment to exit before checking.
    std::thread::sleep(Duration::from_millis(1500));
    if c.exited(leader).is_some() {
        c.kill(leader);
        c.spawn(leader);
    }
    produce_acked(&brokers, "nospc", 10, 10, 100, &mut acked);
    let other = (0..3).find(|&i| i != leader).unwrap();
    c.stop(other);
    for i in (0..3).filter(|i| *i != other) {
        assert!(
            c.exited(i).is_none(),
            "node {} exited; its log:\n{}",
            i + 1,
            c.log_tail(i)
        );
    }
    produce_acked(&brokers, "nospc", 5, 10, 100, &mut acked);
    let got = read_through(&brokers, "nospc", acked_end(&acked));
    for (base, v) in &acked {
        assert_eq!(got.get(base), Some(v), "acknowledged batch at {base}");
    }
    c.spawn(other);
    c.assert_all_running();
}

/// A full disk on every node at once, as when the replicas' disks fill together (they hold
/// the same data). `write=full`: writes that would lengthen a file fail with ENOSPC,
/// overwrites succeed, as on ext4. Produces are refused once the space written ahead of the
/// logs is used up; the leader's refused appends lead to elections, whose new terms and
/// votes must still be saved: no node may stop (they did: each failed to replace its
/// hard-state file and exited, and with two of three gone the cluster stayed down after
/// space returned). Once space returns the cluster serves again without a restart, with
/// every record acknowledged before.
#[test]
fn a_full_disk_on_every_node_stops_no_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = faulty_cluster(dir.path(), NO_RETENTION);
    let brokers = c.kafka.clone();
    create(&brokers, "full");
    let mut acked = Acked::new();
    produce_acked(&brokers, "full", 20, 10, 1000, &mut acked);
    for i in 0..3 {
        set_faults(dir.path(), i, "write=full\n");
    }
    let data = batch(10, &[b'f'; 1000]);
    let try_all = |refused: &mut Vec<i16>| {
        for &b in &brokers {
            match common::kafka::KafkaConn::connect(b)
                .and_then(|mut k| k.produce("full", data.clone()))
            {
                // NOT_LEADER_OR_FOLLOWER (6) from the brokers that do not lead: not counted.
                Ok((code, _)) if code != 6 => refused.push(code),
                Ok(_) => {}
                Err(_) => refused.push(-1),
            }
        }
    };
    let mut refused = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !refused.contains(&56) && Instant::now() < deadline {
        try_all(&mut refused);
    }
    assert!(
        refused.contains(&56),
        "no KAFKA_STORAGE_ERROR on a full disk within 60 s: {refused:?}"
    );
    // The disk stays full a while: elections come and go, and the produces keep failing.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        try_all(&mut refused);
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("refused on the full disk: {refused:?}");
    c.assert_all_running();
    for i in 0..3 {
        set_faults(dir.path(), i, "");
    }
    produce_acked(&brokers, "full", 10, 10, 1000, &mut acked);
    c.assert_all_running();
    let got = read_through(&brokers, "full", acked_end(&acked));
    for (base, v) in &acked {
        assert_eq!(got.get(base), Some(v), "acknowledged batch at {base}");
    }
}

/// Produces in a background thread until `stop`, recording what was acknowledged.
fn produce_in_background(
    brokers: Vec<SocketAddr>,
    topic: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Acked> {
    std::thread::spawn(move || {
        let mut acked = Acked::new();
        let mut seq = 0usize;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !stop.load(std::sync::atomic::Ordering::Acquire) && Instant::now() < deadline {
            let value = tag(topic, 100_000 + seq, 200);
            let data = batch(5, &value);
            for addr in &brokers {
                if let Ok((0, base)) = common::kafka::KafkaConn::connect(*addr)
                    .and_then(|mut k| k.produce(topic, data.clone()))
                {
                    acked.insert(base as u64, (5, value.clone()));
                    break;
                }
            }
            seq += 1;
        }
        acked
    })
}

/// A power cut loses every write that was not fsynced (torn writes included), on one node
/// and then on all nodes at once: nothing acknowledged is lost.
#[test]
fn power_cuts_lose_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = faulty_cluster(dir.path(), NO_RETENTION);
    let brokers = c.kafka.clone();
    create(&brokers, "pc");
    let mut acked = Acked::new();
    produce_acked(&brokers, "pc", 10, 10, 100, &mut acked);
    for round in 0..2 {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let producer = produce_in_background(brokers.clone(), "pc", stop.clone());
        std::thread::sleep(Duration::from_millis(1500));
        let victims: Vec<usize> = if round == 0 {
            vec![leader_of(&brokers, "pc")]
        } else {
            (0..3).collect()
        };
        for &v in &victims {
            c.kill(v);
        }
        for &v in &victims {
            logstore::simulate_power_cut(&control(dir.path(), v), true).unwrap();
        }
        for &v in &victims {
            c.spawn(v);
        }
        std::thread::sleep(Duration::from_millis(1500));
        stop.store(true, std::sync::atomic::Ordering::Release);
        let during = producer.join().unwrap();
        // Acknowledged in the background: must all be there (offsets of unacknowledged
        // attempts may hold other data only if they were never acknowledged).
        let end = acked_end(&during).max(acked_end(&acked));
        let got = read_through(&brokers, "pc", end);
        let lost: Vec<u64> = during
            .iter()
            .chain(acked.iter())
            .filter(|(base, v)| got.get(base) != Some(v))
            .map(|(base, _)| *base)
            .collect();
        if !lost.is_empty() {
            let logs: Vec<String> = (0..3)
                .map(|i| format!("node {}:\n{}", i + 1, c.log_tail(i)))
                .collect();
            panic!(
                "round {round}: acknowledged batches lost at {lost:?} ({} acknowledged); logs:\n{}",
                during.len() + acked.len(),
                logs.join("\n")
            );
        }
        acked.extend(during);
    }
    c.assert_all_running();
}

/// A slow disk on one follower (every fsync 400 ms longer) does not slow the leader's
/// commits: the leader and the other follower are a faster quorum.
#[test]
fn a_slow_follower_disk_does_not_slow_commits() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = faulty_cluster(dir.path(), NO_RETENTION);
    let brokers = c.kafka.clone();
    create(&brokers, "slow");
    let mut acked = Acked::new();
    produce_acked(&brokers, "slow", 5, 10, 100, &mut acked);
    let leader = leader_of(&brokers, "slow");
    let follower = (0..3).find(|&i| i != leader).unwrap();
    set_faults(dir.path(), follower, "fsync_delay_ms=400\n");
    let mut conn = common::kafka::KafkaConn::connect(brokers[leader]).unwrap();
    let mut latencies = Vec::new();
    for i in 0..20 {
        let data = batch(10, &tag("slow", 1000 + i, 100));
        let t = Instant::now();
        let (code, _) = conn.produce("slow", data).unwrap();
        assert_eq!(code, 0);
        latencies.push(t.elapsed());
    }
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    assert!(
        median < Duration::from_millis(200),
        "median produce latency {median:?} follows the slow follower"
    );
    set_faults(dir.path(), follower, "");
    c.assert_all_running();
}
