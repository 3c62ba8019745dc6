//! The durability policy (`storage.sync`) is decided by the store alone: under `always` every
//! acknowledged append was fsynced first (one fsync per Ready), under `interval` appends within
//! one interval are not fsynced and the last ones of a burst are fsynced once the interval has
//! passed (no further append needed), under `never` nothing is fsynced. Counted with the node's
//! fsync histogram (`vdl_fsync_seconds`), which the Raft groups observe for every fsync they
//! run. (Before the fix, the group fsynced after every Ready whatever the policy.)

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::batch;
use vdl_server::config::SyncMode;
use vdl_server::{LogStream, Node};

const APPENDS: u64 = 30;

/// A single-node cluster with `sync`, and its stream once it accepts appends.
async fn start(dir: &std::path::Path, sync: SyncMode) -> (Arc<Node>, LogStream) {
    let mut config = common::cluster_configs(1, dir, &["s1"]).remove(0);
    config.storage.sync = sync;
    let node = Node::start(config).await.unwrap();
    let s = node.stream("s1").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match s.append(batch(1, b"warm"), 1, Duration::from_secs(5)).await {
            Ok(_) => break,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("append: {e}"),
        }
    }
    (node, s)
}

fn fsyncs(node: &Node) -> u64 {
    node.metrics().fsync.count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_fsyncs_before_acknowledging_each_append() {
    let dir = tempfile::tempdir().unwrap();
    let (node, s) = start(dir.path(), SyncMode::Always).await;
    let before = fsyncs(&node);
    for i in 1..=APPENDS {
        s.append(batch(1, b"x"), 1, Duration::from_secs(5))
            .await
            .unwrap();
        // Acknowledged only once committed, and on one node committed only once fsynced here.
        let ran = fsyncs(&node) - before;
        assert!(ran >= i, "append {i} acknowledged after only {ran} fsyncs");
    }
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_does_not_fsync_appends() {
    let dir = tempfile::tempdir().unwrap();
    let (node, s) = start(dir.path(), SyncMode::Never).await;
    let before = fsyncs(&node);
    for _ in 0..APPENDS {
        s.append(batch(1, b"x"), 1, Duration::from_secs(5))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ran = fsyncs(&node) - before;
    assert_eq!(
        ran, 0,
        "{APPENDS} appends under sync = never ran {ran} fsyncs"
    );
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interval_fsyncs_once_per_interval_and_the_tail_of_a_burst() {
    let interval = Duration::from_secs(1);
    let dir = tempfile::tempdir().unwrap();
    let (node, s) = start(dir.path(), SyncMode::Interval(interval)).await;
    // Let everything written so far (topic creation, the leader's first entry, the warm-up
    // append) be synced: the last of those syncs is at most one interval after the warm-up,
    // so after three the next sync is due.
    tokio::time::sleep(interval * 3).await;
    // More than an interval since the last sync: this append is fsynced on its way.
    let before_first = fsyncs(&node);
    s.append(batch(1, b"first"), 1, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(fsyncs(&node) > before_first, "a due sync did not run");
    // A burst within the interval: no fsync.
    let started = Instant::now();
    let before = fsyncs(&node);
    for _ in 0..APPENDS {
        s.append(batch(1, b"x"), 1, Duration::from_secs(5))
            .await
            .unwrap();
    }
    let burst = started.elapsed();
    let ran = fsyncs(&node) - before;
    assert!(
        burst < interval,
        "the burst took {burst:?}, longer than the interval; the test cannot tell"
    );
    assert_eq!(
        ran, 0,
        "{APPENDS} appends within one interval ran {ran} fsyncs"
    );
    // With no further append, the burst's tail is fsynced once the interval has passed.
    let deadline = Instant::now() + interval * 3;
    while fsyncs(&node) == before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        fsyncs(&node) > before,
        "the tail of the burst was not fsynced within {:?}",
        interval * 3
    );
    node.shutdown();
}
