//! A topic's lifecycle across restarts, with three real `vdl` processes: retention, delete and
//! re-create, committed offsets of a deleted topic, a replaced disk, and a restart matrix. After
//! every restart each topic must have a leader, the same log start and end, and every
//! acknowledged record; every node must still be running.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::faults::{produce_acked, tag, Acked, WAIT};
use common::kafka::{on_any, KafkaConn};
use common::procs::ProcCluster;
use common::{batch, split_batches};
use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};

/// (log start, log end) of partition 0, from the leader.
fn offsets(brokers: &[SocketAddr], topic: &str) -> (i64, i64) {
    let start = on_any(brokers, WAIT, "earliest offset", |c| {
        c.list_offset(topic, -2)
    });
    let end = on_any(brokers, WAIT, "latest offset", |c| c.list_offset(topic, -1));
    (start, end)
}

/// Reads partition 0 from the leader from `from` to the high watermark: base offset -> (count,
/// first value). `None` when the leader's log start passed `from` meanwhile (retention runs at
/// any time, and goes on once followers' progress is known again after a restart).
fn read_all(brokers: &[SocketAddr], topic: &str, from: i64) -> Option<Acked> {
    let mut out = Acked::new();
    let mut offset = from;
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "reading {topic} took too long");
        // OFFSET_OUT_OF_RANGE (1) comes only from the leader: an answer, not a retry.
        let read = on_any(brokers, WAIT, "fetch", |c| {
            c.fetch(topic, offset).map(|(e, hw, _, r)| match e {
                1 => (0, None),
                e => (e, Some((hw, r))),
            })
        });
        let (hw, records) = read?;
        if offset >= hw {
            return Some(out);
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

/// Every acknowledged batch at or after the log start is readable, unchanged, and nothing
/// else is there; the log end is right after the last acknowledged batch. The log start is read
/// again when retention moved it while reading.
fn assert_acked_present(brokers: &[SocketAddr], topic: &str, acked: &Acked) {
    for _ in 0..10 {
        let (start, end) = offsets(brokers, topic);
        let expected: Acked = acked
            .range(start as u64..)
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        let last_end = acked
            .iter()
            .next_back()
            .map(|(b, (n, _))| b + u64::from(*n))
            .unwrap_or(0);
        assert_eq!(end as u64, last_end, "{topic}: log end offset");
        let Some(got) = read_all(brokers, topic, start) else {
            continue;
        };
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "{topic}: batches from the log start {start}"
        );
        assert!(got == expected, "{topic}: batch contents differ");
        return;
    }
    panic!("{topic}: the log start kept moving past every read");
}

fn wait_for_leader(brokers: &[SocketAddr], topic: &str) {
    on_any(brokers, WAIT, &format!("a leader for {topic}"), |c| {
        c.metadata(topic)
            .map(|(e, leader, _)| (if leader < 0 { 5 } else { e }, leader))
    });
}

fn create(brokers: &[SocketAddr], topic: &str) {
    on_any(brokers, WAIT, &format!("create {topic}"), |c| {
        c.create_topic(topic)
            .map(|e| (if e == 36 { 0 } else { e }, ()))
    });
    wait_for_leader(brokers, topic);
}

fn delete(brokers: &[SocketAddr], topic: &str) {
    on_any(brokers, WAIT, &format!("delete {topic}"), |c| {
        c.delete_topic(topic).map(|e| (e, ()))
    });
}

/// Item 1 of the lifecycle issue: retention moves the log start, then a restart of one node
/// and of all nodes still serves the topic with the same log start, end and records.
#[test]
fn restart_after_retention_keeps_the_topic() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(
        dir.path(),
        3,
        "segment_bytes = 1048576\nretention_bytes = 3145728\ndeletion_allowed = true\n\
         retention_check_ms = 200\npreallocate_bytes = 0",
    );
    let brokers = c.kafka.clone();
    create(&brokers, "r1");
    let mut acked = Acked::new();
    produce_acked(&brokers, "r1", 160, 16, 4000, &mut acked); // ~10 MB
    let deadline = Instant::now() + WAIT;
    let (start, end) = loop {
        let (start, end) = offsets(&brokers, "r1");
        if start > 0 {
            break (start, end);
        }
        assert!(
            Instant::now() < deadline,
            "retention never moved the log start"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_acked_present(&brokers, "r1", &acked);

    c.restart(1, false);
    wait_for_leader(&brokers, "r1");
    assert_acked_present(&brokers, "r1", &acked);
    c.restart_all(true);
    wait_for_leader(&brokers, "r1");
    let (start2, end2) = offsets(&brokers, "r1");
    assert_eq!(end2, end, "log end after restarting every node");
    assert!(start2 >= start, "log start went back: {start2} < {start}");
    assert_acked_present(&brokers, "r1", &acked);
    // The topic still takes writes, and every node is up.
    produce_acked(&brokers, "r1", 5, 16, 4000, &mut acked);
    assert_acked_present(&brokers, "r1", &acked);
    std::thread::sleep(Duration::from_secs(2));
    c.assert_all_running();
}

/// Item 2: delete a topic, create it again, produce, restart every node: the new incarnation's
/// records are all there and no node crash-loops.
#[test]
fn recreated_topic_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(dir.path(), 3, "");
    let brokers = c.kafka.clone();
    create(&brokers, "dr1");
    let mut old = Acked::new();
    produce_acked(&brokers, "dr1", 10, 5, 100, &mut old);
    delete(&brokers, "dr1");
    create(&brokers, "dr1");
    let mut acked = Acked::new();
    produce_acked(&brokers, "dr1", 20, 5, 100, &mut acked);
    assert_eq!(
        acked.keys().next(),
        Some(&0),
        "a new incarnation starts at 0"
    );
    assert_acked_present(&brokers, "dr1", &acked);
    for hard in [false, true] {
        c.restart_all(hard);
        wait_for_leader(&brokers, "dr1");
        assert_acked_present(&brokers, "dr1", &acked);
    }
    std::thread::sleep(Duration::from_secs(2));
    c.assert_all_running();
}

/// Item 6: a group's committed offset for a deleted topic does not apply to the topic created
/// again under the same name.
#[test]
fn recreated_topic_has_no_committed_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(dir.path(), 3, "");
    let brokers = c.kafka.clone();
    create(&brokers, "t");
    let mut acked = Acked::new();
    produce_acked(&brokers, "t", 10, 10, 50, &mut acked);
    on_any(&brokers, WAIT, "commit offset 100", |conn| {
        conn.commit_offset("G", "t", 100).map(|e| (e, ()))
    });
    let committed = on_any(&brokers, WAIT, "fetch offset", |conn| {
        conn.fetch_offset("G", "t")
    });
    assert_eq!(committed, 100);
    delete(&brokers, "t");
    create(&brokers, "t");
    let mut acked = Acked::new();
    produce_acked(&brokers, "t", 15, 10, 50, &mut acked);
    let committed = on_any(&brokers, WAIT, "fetch offset", |conn| {
        conn.fetch_offset("G", "t")
    });
    assert_eq!(
        committed, -1,
        "the new topic inherited the deleted one's offset"
    );
    c.restart_all(false);
    wait_for_leader(&brokers, "t");
    let committed = on_any(&brokers, WAIT, "fetch offset", |conn| {
        conn.fetch_offset("G", "t")
    });
    assert_eq!(committed, -1, "after a restart");
    c.assert_all_running();
}

/// Item 8: a follower whose data directory was emptied (a replaced disk) rejoins without
/// crashing and catches up; the cluster keeps every acknowledged record.
#[test]
fn node_with_a_replaced_disk_rejoins() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(dir.path(), 3, "");
    let brokers = c.kafka.clone();
    create(&brokers, "rd");
    let mut acked = Acked::new();
    produce_acked(&brokers, "rd", 100, 1000, 10, &mut acked); // 100,000 records
                                                              // A follower of the topic: any node that is not its leader.
    let leader = on_any(&brokers, WAIT, "leader", |conn| {
        conn.metadata("rd").map(|(e, l, _)| (e, l))
    });
    let follower = (0..3).find(|&i| i as i32 + 1 != leader).unwrap();
    c.stop(follower);
    std::fs::remove_dir_all(c.data_dir(follower)).unwrap();
    c.spawn(follower);
    std::thread::sleep(Duration::from_secs(3));
    c.assert_all_running();
    produce_acked(&brokers, "rd", 5, 1000, 10, &mut acked);
    assert_acked_present(&brokers, "rd", &acked);
    // The replaced node caught up: with the other follower down, the leader and it still
    // commit, and it serves every record once it leads.
    let other = (0..3)
        .find(|&i| i != follower && i as i32 + 1 != leader)
        .unwrap();
    // It knew it was a new replica (no votes until caught up), and it caught up.
    let deadline = Instant::now() + WAIT;
    while !c
        .log(follower)
        .contains("every Raft group caught up after the replaced disk")
    {
        assert!(
            Instant::now() < deadline,
            "the replaced node never finished rejoining; its log:\n{}",
            c.log_tail(follower)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(c.log(follower).contains("rejoining, no votes"));
    assert!(c
        .log(leader as usize - 1)
        .contains("came back with a new data directory"));
    c.stop(other);
    produce_acked(&brokers, "rd", 5, 1000, 10, &mut acked);
    assert_acked_present(&brokers, "rd", &acked);
    c.stop(leader as usize - 1);
    c.spawn(other);
    wait_for_leader(&brokers, "rd");
    assert_acked_present(&brokers, "rd", &acked);
    c.assert_all_running();
}

/// The restart matrix: after each lifecycle step, restart one node (SIGTERM), then every node
/// (SIGKILL); each time every topic has a leader, the same log start and end, and every
/// acknowledged record. Every node is still running 30 s after the last restart.
#[test]
fn restart_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(
        dir.path(),
        3,
        "segment_bytes = 1048576\nretention_bytes = 2097152\ndeletion_allowed = true\n\
         retention_check_ms = 200\npreallocate_bytes = 0",
    );
    let brokers = c.kafka.clone();
    let mut topics: BTreeMap<&str, Acked> = BTreeMap::new();
    let check = |c: &mut ProcCluster, topics: &BTreeMap<&str, Acked>, step: &str| {
        c.restart(0, false);
        for (t, acked) in topics {
            wait_for_leader(&brokers, t);
            assert_acked_present(&brokers, t, acked);
        }
        c.restart_all(true);
        for (t, acked) in topics {
            wait_for_leader(&brokers, t);
            assert_acked_present(&brokers, t, acked);
        }
        c.assert_all_running();
        eprintln!("restart matrix: step {step:?} passed");
    };
    // Step: create and produce.
    create(&brokers, "m1");
    produce_acked(&brokers, "m1", 20, 10, 100, topics.entry("m1").or_default());
    check(&mut c, &topics, "create + produce");
    // Step: retention (a second topic grows past the retention limit).
    create(&brokers, "m2");
    produce_acked(
        &brokers,
        "m2",
        100,
        16,
        4000,
        topics.entry("m2").or_default(),
    );
    let deadline = Instant::now() + WAIT;
    while offsets(&brokers, "m2").0 == 0 {
        assert!(Instant::now() < deadline, "retention never ran");
        std::thread::sleep(Duration::from_millis(200));
    }
    check(&mut c, &topics, "retention");
    // Step: delete and re-create.
    delete(&brokers, "m1");
    create(&brokers, "m1");
    topics.insert("m1", Acked::new());
    produce_acked(&brokers, "m1", 10, 10, 100, topics.entry("m1").or_default());
    check(&mut c, &topics, "delete + re-create");
    // Step: idempotent produces; after the restarts a retry of the last batch is answered with
    // its original offset and written nowhere again.
    let pid = on_any(&brokers, WAIT, "init producer id", |conn| {
        conn.init_producer_id()
    });
    let mut last = None;
    for seq in 0..10i32 {
        let value = tag("m1-idem", seq as usize, 100);
        let records: Vec<NewRecord> = (0..5)
            .map(|_| NewRecord::new(1_700_000_000_000, bytes::Bytes::from(value.clone())))
            .collect();
        let data = RecordBatchBuilder::new(Compression::None)
            .producer(pid, 0, seq * 5)
            .with_records(&records)
            .unwrap()
            .build()
            .unwrap();
        let base = on_any(&brokers, WAIT, "idempotent produce", |conn| {
            conn.produce("m1", data.clone())
        });
        topics
            .get_mut("m1")
            .unwrap()
            .insert(base as u64, (5, value));
        last = Some((data, base));
    }
    check(&mut c, &topics, "idempotent produces");
    let (data, base) = last.unwrap();
    let again = on_any(&brokers, WAIT, "retry after restarts", |conn| {
        conn.produce("m1", data.clone())
    });
    assert_eq!(
        again, base,
        "the retry was not answered with its original offset"
    );
    assert_acked_present(&brokers, "m1", &topics["m1"]);
    // Step: committed offsets and a lagging follower caught up by snapshot.
    on_any(&brokers, WAIT, "commit", |conn| {
        conn.commit_offset("g1", "m1", 5).map(|e| (e, ()))
    });
    c.stop(2);
    produce_acked(
        &brokers,
        "m2",
        100,
        16,
        4000,
        topics.entry("m2").or_default(),
    );
    std::thread::sleep(Duration::from_secs(1));
    c.spawn(2);
    std::thread::sleep(Duration::from_secs(2));
    check(&mut c, &topics, "offsets + snapshot to a lagging follower");
    let committed = on_any(&brokers, WAIT, "fetch offset", |conn| {
        conn.fetch_offset("g1", "m1")
    });
    assert_eq!(committed, 5);
    std::thread::sleep(Duration::from_secs(30));
    c.assert_all_running();
}

/// Three nodes started with `nofile` as their soft and hard open-file limit. One address (the
/// test's) may hold every connection, as before per-address limits: the tests are about the
/// descriptors, not about those limits.
fn cluster_with_open_file_limit(dir: &std::path::Path, nofile: u64) -> ProcCluster {
    let mut c = ProcCluster::configure(dir, 3, "[kafka]\nmax_connections_per_ip = 100000");
    c.nofile = Some(nofile);
    for i in 0..3 {
        c.spawn(i);
    }
    c
}

/// Item 7: with an open-file limit of 1,024 (soft and hard), up to 1,100 idle client connections
/// neither kill the node nor take the descriptors its storage needs: topics are still created
/// and written through connections it accepted, and it answers new connections once idle ones
/// close.
#[test]
fn a_thousand_idle_connections_do_not_take_the_storage_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster_with_open_file_limit(dir.path(), 1024);
    let brokers = c.kafka.clone();
    create(&brokers, "fd0");
    // This test process needs its own descriptors for the clients.
    let _ = raise_own_nofile();
    // The first connection is accepted (the node is far from its limit then): the test writes
    // through it while the others pile up.
    let mut first = KafkaConn::connect(brokers[0]).unwrap();
    let mut idle = Vec::new();
    for _ in 0..1100 {
        // A burst overflows the kernel's accept queue for a moment (the SYN is retried after
        // 1 s); a connection that waits longer than 3 s is past the node's limit and backlog.
        match std::net::TcpStream::connect_timeout(&brokers[0], Duration::from_secs(3)) {
            Ok(s) => idle.push(s),
            Err(_) => break,
        }
    }
    assert!(
        idle.len() >= 512,
        "only {} connections opened; node 1 log:\n{}",
        idle.len(),
        c.log_tail(0)
    );
    // Storage keeps working while clients hold every connection they may: new topics (new
    // stores, new files on every node) and writes through the other nodes.
    let others = &brokers[1..];
    for t in ["fd1", "fd2", "fd3"] {
        create(others, t);
        for seq in 0..20 {
            let data = batch(10, &tag(t, seq, 100));
            let deadline = Instant::now() + WAIT;
            loop {
                assert!(Instant::now() < deadline, "produce to {t} not acknowledged");
                let via_first = first.produce(t, data.clone()).unwrap();
                if via_first.0 == 0 {
                    break;
                }
                let via_others = on_any_once(others, |c| c.produce(t, data.clone()));
                if via_others == Some(0) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    c.assert_all_running();
    let log = c.log(0);
    assert!(
        log.contains("kafka.max_connections lowered"),
        "the node did not size its connection limit from the open-file limit"
    );
    // Once idle clients go away, node 1 accepts and serves new connections again.
    drop(idle);
    let deadline = Instant::now() + WAIT;
    loop {
        let answered = KafkaConn::connect(brokers[0]).and_then(|mut k| k.metadata("fd0"));
        if matches!(answered, Ok((0, _, _))) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 1 never served a new connection: {answered:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut acked = Acked::new();
    produce_acked(&brokers, "fd0", 5, 10, 100, &mut acked);
    assert_acked_present(&brokers, "fd0", &acked);
    c.assert_all_running();
}

/// The first error code any of `brokers` answers `f` with (None when none could be reached).
fn on_any_once(
    brokers: &[SocketAddr],
    mut f: impl FnMut(&mut KafkaConn) -> std::io::Result<(i16, i64)>,
) -> Option<i16> {
    let mut code = None;
    for addr in brokers {
        if let Ok((e, _)) = KafkaConn::connect(*addr).and_then(|mut c| f(&mut c)) {
            if e == 0 {
                return Some(0);
            }
            code = Some(e);
        }
    }
    code
}

/// Raises this test process's soft open-file limit to its hard limit.
fn raise_own_nofile() -> std::io::Result<u64> {
    vdl_server::runtime::fd_budget::raise_nofile_limit()
}

/// Item 13: a stream whose saved commit index is beyond its last entry on disk (acknowledged,
/// fsynced data is missing) is refused at start with an error naming the stream, instead of
/// being clamped silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_index_beyond_the_log_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::cluster_configs(1, dir.path(), &["s1"]).remove(0);
    {
        let node = vdl_server::Node::start(config.clone()).await.unwrap();
        let s = node.stream("s1").unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            match s.append(batch(1, b"x"), 1, Duration::from_secs(5)).await {
                Ok(_) => break,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => panic!("append: {e}"),
            }
        }
        node.shutdown();
    }
    // Claim a commit far beyond what the log holds.
    let stream_dir = config.data_dir.join("streams").join("s1");
    {
        let mut store =
            logstore::LogStore::open(&stream_dir, logstore::StoreConfig::default()).unwrap();
        let mut hs = store.hard_state();
        hs.commit = store.last_index() + 100;
        store.save_hard_state(&hs).unwrap();
    }
    let err = match vdl_server::Node::start(config).await {
        Ok(_) => panic!("a node with missing fsynced entries started"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("s1") && err.contains("beyond"), "{err}");
}

/// A data directory in the layout before topic incarnations (topics under `streams/<name>`)
/// is refused at start with an error that says so, rather than opened with its topics hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_layout_data_directory_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::cluster_configs(1, dir.path(), &["configured"]).remove(0);
    std::fs::create_dir_all(config.data_dir.join("streams").join("configured")).unwrap();
    std::fs::create_dir_all(config.data_dir.join("streams").join("old-topic")).unwrap();
    let err = match vdl_server::Node::start(config).await {
        Ok(_) => panic!("a data directory of the old layout was opened"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("old-topic") && err.contains("layout before topic incarnations"),
        "{err}"
    );
}

/// A node's open-file limit bounds the partitions it hosts: with 1,024 descriptors (half kept
/// for client connections) a create that could take a node past 224 partitions (2 descriptors
/// each while written: the active segment's and the zero reserve's, neither node-wide set of
/// 1,024 filling up in the 448 descriptors left) is refused with
/// POLICY_VIOLATION, naming the limit, instead of the node dying of EMFILE in a log write
/// later; what fits is created and written, and every node is still running.
#[test]
fn partitions_beyond_the_open_file_limit_are_refused_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster_with_open_file_limit(dir.path(), 1024);
    let brokers = c.kafka.clone();
    create(&brokers, "first");
    // Through node 1, which hosts every partition (replication factor 3 on 3 nodes).
    let code = |name: &str, partitions: i32| -> i16 {
        let mut conn = KafkaConn::connect(brokers[0]).unwrap();
        conn.create_topic_with(name, partitions).unwrap().0
    };
    assert_eq!(
        code("too-many", 250),
        44,
        "250 partitions on 1,024 descriptors"
    );
    assert_eq!(code("fits", 150), 0);
    assert_eq!(code("then-too-many", 80), 44, "1 + 150 + 80 > 224");
    assert_eq!(code("still-fits", 70), 0);
    wait_for_leader(&brokers, "fits");
    on_any(&brokers, WAIT, "produce", |conn| {
        conn.produce("fits", batch(3, b"fd"))
    });
    std::thread::sleep(Duration::from_secs(1));
    c.assert_all_running();
}
