//! Idle partitions hold no file descriptors of their own (issue 38): a node with hundreds of
//! partitions, each written once and then idle, keeps a number of descriptors under its data
//! directory bounded by its active segments' set (`storage.max_open_active_files`) and its one
//! root lock, not by the partition count; a second node on the same directory is refused
//! while the first runs; and the node restarts in the same process once stopped.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{batch, cluster_configs};
use vdl_server::Node;

const T: Duration = Duration::from_secs(30);
const PARTITIONS: u32 = 300;
const ACTIVE_SET: usize = 32;
/// Descriptors under the data directory beyond the active set: the root lock, and a few a
/// group may hold for a moment (a hard-state write, a sealed segment's open for a read).
const SLACK: usize = 8;

/// This process's open descriptors that point into `dir`, by target.
fn descriptors_under(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap();
    let mut out = Vec::new();
    for ent in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if let Ok(target) = std::fs::read_link(ent.path()) {
            if target.starts_with(&dir) {
                out.push(target.display().to_string());
            }
        }
    }
    out
}

/// Waits until at most `bound` descriptors point into `dir` (the active set closes clean
/// descriptors on its next sync); returns what is open then.
async fn wait_for_at_most(dir: &Path, bound: usize) -> Vec<String> {
    let deadline = Instant::now() + T;
    loop {
        let open = descriptors_under(dir);
        if open.len() <= bound || Instant::now() > deadline {
            return open;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Appends one record to `partition` of `topic`, retrying while its group elects a leader.
async fn append_once(node: &Node, topic: &str, partition: u32) -> u64 {
    let deadline = Instant::now() + T;
    loop {
        let err = match node.partition(topic, partition) {
            Some(s) => match s.append(batch(1, b"x"), 1, Duration::from_secs(5)).await {
                Ok(a) => return a.base_offset,
                Err(e) => e.to_string(),
            },
            None => "not open yet".to_owned(),
        };
        assert!(
            Instant::now() < deadline,
            "append to {topic}-{partition}: {err}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_partitions_hold_no_descriptors_and_the_node_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = cluster_configs(1, dir.path(), &[]).remove(0);
    config.storage.max_open_active_files = ACTIVE_SET;
    // No zero reserve: a written partition would hold its handle for 10 s (counted per
    // partition being written by `fd_budget`, not what this test is about).
    config.storage.preallocate_bytes = 0;
    let data_dir = config.data_dir.clone();
    let bound = ACTIVE_SET + SLACK;

    let node = Node::start(config.clone()).await.unwrap();
    node.create_topic("idle", PARTITIONS, T).await.unwrap();
    for p in 0..PARTITIONS {
        assert_eq!(append_once(&node, "idle", p).await, 0, "partition {p}");
    }
    let open = wait_for_at_most(&data_dir, bound).await;
    assert!(
        open.len() <= bound,
        "{} descriptors under the data directory with {PARTITIONS} idle partitions and an \
         active set of {ACTIVE_SET}: {open:#?}",
        open.len()
    );
    assert!(
        open.iter().any(|p| p.ends_with("STORES.LOCK")),
        "the node holds its root lock: {open:#?}"
    );
    assert!(
        !open.iter().any(|p| p.ends_with("/LOCK")),
        "no store holds a lock of its own: {open:#?}"
    );

    // A second node on the same data directory is refused while the first runs.
    let mut second = config.clone();
    second.peer_listen = "127.0.0.1:0".parse().unwrap();
    match Node::start(second).await {
        Ok(_) => panic!("two live nodes on one data directory"),
        Err(e) => assert!(e.to_string().contains("node1"), "{e}"),
    }

    // Stopped, the node lets go of the directory: it starts again in this process, with
    // every partition's data, and stays as bounded.
    node.shutdown();
    drop(node);
    let node = Node::start(config).await.unwrap();
    for p in [0, PARTITIONS / 2, PARTITIONS - 1] {
        assert_eq!(append_once(&node, "idle", p).await, 1, "partition {p}");
    }
    let open = wait_for_at_most(&data_dir, bound).await;
    assert!(
        open.len() <= bound,
        "{} descriptors after the restart: {open:#?}",
        open.len()
    );
    node.shutdown();
}
