//! In-process 3-node clusters on 127.0.0.1: election, ordered dense commits from many writers,
//! restart and catch-up, and what happens with one and with two nodes down.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{batch, cluster_configs, split_batches};
use vdl_server::config::NodeConfig;
use vdl_server::{AppendError, LogStream, Node};

const STREAM: &str = "logstream1";
const APPEND_TIMEOUT: Duration = Duration::from_secs(5);

async fn start_all(configs: &[NodeConfig]) -> Vec<Option<Arc<Node>>> {
    let mut nodes = Vec::new();
    for c in configs {
        nodes.push(Some(Node::start(c.clone()).await.expect("node starts")));
    }
    nodes
}

/// Waits (bounded) until one live node leads the stream; returns its position.
async fn wait_for_leader(nodes: &[Option<Arc<Node>>], timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        for (i, n) in nodes.iter().enumerate() {
            if let Some(n) = n {
                let v = n.stream(STREAM).expect("stream").visible();
                if v.leader == n.config().id {
                    return i;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn stream(nodes: &[Option<Arc<Node>>], i: usize) -> LogStream {
    nodes[i]
        .as_ref()
        .expect("node is up")
        .stream(STREAM)
        .expect("stream exists")
}

/// Reads every committed batch of a stream: (offset, count, payload).
fn read_all(s: &LogStream) -> Vec<(u64, u32, Vec<u8>)> {
    let hw = s.visible().high_watermark;
    let mut out = Vec::new();
    let mut offset = s.visible().log_start_offset;
    while offset < hw {
        let read = s.read(offset, 64 << 10).expect("read");
        let mut data = Vec::new();
        for c in &read.chunks {
            data.extend_from_slice(c);
        }
        let batches = split_batches(&data);
        assert!(
            !batches.is_empty(),
            "read at {offset} below hw {hw} returned nothing"
        );
        for b in batches {
            offset = b.0 + u64::from(b.1);
            out.push(b);
        }
    }
    out
}

async fn wait_for_hw(s: &LogStream, hw: u64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while s.visible().high_watermark < hw {
        assert!(
            Instant::now() < deadline,
            "{}: high watermark {} did not reach {hw}",
            s.name(),
            s.visible().high_watermark
        );
        s.wait_for_high_watermark_above(s.visible().high_watermark, Duration::from_millis(50))
            .await;
    }
}

/// Appends `per_task` batches from each of `tasks` concurrent writers to the leader; returns
/// (offset, count, payload) of every acknowledged append.
async fn concurrent_appends(
    leader: &LogStream,
    tasks: usize,
    per_task: usize,
    tag: &str,
) -> Vec<(u64, u32, Vec<u8>)> {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let s = leader.clone();
        let tag = tag.to_owned();
        handles.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..per_task {
                let payload = format!("{tag}-{t}-{i}").into_bytes();
                let count = (i % 3) as u32 + 1;
                let a = s
                    .append(batch(count, &payload), count, APPEND_TIMEOUT)
                    .await
                    .expect("append is acknowledged");
                assert_eq!(a.offset_count, count);
                acked.push((a.base_offset, count, payload));
            }
            acked
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.expect("writer task"));
    }
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_commit_one_dense_total_order_and_survive_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[STREAM]);
    let mut nodes = start_all(&configs).await;
    let leader = wait_for_leader(&nodes, Duration::from_secs(10)).await;

    // Several writers: every acknowledged append has a distinct, dense offset range.
    let acked = concurrent_appends(&stream(&nodes, leader), 4, 25, "a").await;
    let mut next = 0;
    for (base, count, _) in &acked {
        assert_eq!(*base, next, "offsets are dense and unique");
        next += u64::from(*count);
    }
    // Every node holds exactly the acknowledged data, in the same order.
    for i in 0..3 {
        let s = stream(&nodes, i);
        wait_for_hw(&s, next, Duration::from_secs(10)).await;
        assert_eq!(read_all(&s), acked, "node {} has the same log", i + 1);
    }

    // A follower killed and restarted catches up with what was written while it was away.
    let follower = (leader + 1) % 3;
    nodes[follower].take().unwrap().shutdown();
    let more = concurrent_appends(&stream(&nodes, leader), 2, 20, "b").await;
    let end = more
        .iter()
        .map(|(b, c, _)| b + u64::from(*c))
        .max()
        .unwrap();
    nodes[follower] = Some(Node::start(configs[follower].clone()).await.unwrap());
    let s = stream(&nodes, follower);
    wait_for_hw(&s, end, Duration::from_secs(10)).await;
    let mut expected = acked.clone();
    expected.extend(more);
    expected.sort();
    assert_eq!(read_all(&s), expected, "restarted follower caught up");

    for n in nodes.iter().flatten() {
        n.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_down_still_commits_two_down_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[STREAM]);
    let mut nodes = start_all(&configs).await;
    let leader = wait_for_leader(&nodes, Duration::from_secs(10)).await;

    // All three voters are in sync with the leader (Kafka's ISR).
    let in_sync = |nodes: &[Option<Arc<Node>>]| -> Vec<u64> {
        stream(nodes, leader)
            .visible()
            .in_sync
            .iter()
            .copied()
            .filter(|id| *id != 0)
            .collect()
    };
    stream(&nodes, leader)
        .append(batch(1, b"isr"), 1, APPEND_TIMEOUT)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while in_sync(&nodes) != vec![1, 2, 3] {
        assert!(Instant::now() < deadline, "in sync: {:?}", in_sync(&nodes));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // One follower down: appends still commit, and it drops out of the in-sync set.
    let f1 = (leader + 1) % 3;
    let f1_id = nodes[f1].as_ref().unwrap().config().id;
    nodes[f1].take().unwrap().shutdown();
    let acked = concurrent_appends(&stream(&nodes, leader), 2, 10, "c").await;
    let hw = acked
        .iter()
        .map(|(b, c, _)| b + u64::from(*c))
        .max()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while in_sync(&nodes).contains(&f1_id) {
        assert!(
            Instant::now() < deadline,
            "a stopped follower stays in sync: {:?}",
            in_sync(&nodes)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Both followers down: the append is not acknowledged and never becomes visible.
    let f2 = (leader + 2) % 3;
    nodes[f2].take().unwrap().shutdown();
    let s = stream(&nodes, leader);
    let r = s
        .append(batch(1, b"never"), 1, Duration::from_millis(1500))
        .await;
    assert!(
        matches!(
            r,
            Err(AppendError::Timeout) | Err(AppendError::NotLeader { .. }) | Err(AppendError::Lost)
        ),
        "append without a quorum must fail, got {r:?}"
    );
    assert_eq!(
        s.visible().high_watermark,
        hw,
        "nothing beyond the acknowledged data is visible"
    );
    assert!(read_all(&s).iter().all(|(_, _, p)| p != b"never"));
    for n in nodes.iter().flatten() {
        n.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_old_segments_and_a_lagging_follower_recovers_by_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[STREAM]);
    for c in &mut configs {
        c.storage.segment_bytes = 64 << 10;
        c.storage.retention_bytes = Some(256 << 10);
        c.storage.retention_check_interval = Duration::from_millis(100);
    }
    let mut nodes = start_all(&configs).await;
    let leader = wait_for_leader(&nodes, Duration::from_secs(10)).await;
    let (lagging, other) = ((leader + 1) % 3, (leader + 2) % 3);
    let value = vec![b'r'; 4000];
    stream(&nodes, leader)
        .append(batch(1, b"first"), 1, APPEND_TIMEOUT)
        .await
        .unwrap();
    wait_for_hw(&stream(&nodes, lagging), 1, Duration::from_secs(10)).await;

    // One follower goes down; the others go on writing well past the retention limit.
    nodes[lagging].take().unwrap().shutdown();
    let s = stream(&nodes, leader);
    for _ in 0..300 {
        s.append(batch(1, &value), 1, APPEND_TIMEOUT).await.unwrap();
    }
    // The other follower deletes old segments; the leader keeps what the down follower needs.
    let so = stream(&nodes, other);
    wait_for_hw(&so, 301, Duration::from_secs(10)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while so.visible().log_start_offset == 0 {
        assert!(
            Instant::now() < deadline,
            "the follower never applied retention"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        s.visible().log_start_offset,
        0,
        "the leader keeps the lagging follower's entries"
    );

    // The leader dies and the lagging follower returns: the new leader no longer has the entries
    // it needs, so it sends a snapshot (where its log starts), then the rest of the log.
    nodes[leader].take().unwrap().shutdown();
    nodes[lagging] = Some(Node::start(configs[lagging].clone()).await.unwrap());
    let new_leader = wait_for_leader(&nodes, Duration::from_secs(10)).await;
    assert_eq!(new_leader, other, "only the up-to-date node can win");
    let sl = stream(&nodes, lagging);
    wait_for_hw(&sl, 301, Duration::from_secs(15)).await;
    let start = sl.visible().log_start_offset;
    assert!(
        start > 0,
        "the lagging follower restarted its log from a snapshot"
    );
    assert_eq!(start, so.visible().log_start_offset);
    assert_eq!(
        read_all(&sl),
        read_all(&so),
        "both hold the same log from the same start"
    );
    // And the stream goes on.
    let a = so
        .append(batch(1, b"after"), 1, APPEND_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(a.base_offset, 301);
    wait_for_hw(&sl, 302, Duration::from_secs(10)).await;
    for n in nodes.iter().flatten() {
        n.shutdown();
    }
}

/// A follower that is down holds retention back on its leader for
/// `retention_down_replica_wait` only: then the leader deletes what the rules say (it would
/// otherwise fill its disk), and the follower, once back, catches up from a snapshot of the
/// same leader and holds the same log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_waits_a_bounded_time_for_a_down_follower_which_then_catches_up_by_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[STREAM]);
    for c in &mut configs {
        c.storage.segment_bytes = 64 << 10;
        c.storage.retention_bytes = Some(256 << 10);
        c.storage.retention_check_interval = Duration::from_millis(100);
        c.storage.retention_down_replica_wait = Duration::from_secs(1);
    }
    let mut nodes = start_all(&configs).await;
    let leader = wait_for_leader(&nodes, Duration::from_secs(10)).await;
    let down = (leader + 1) % 3;
    let s = stream(&nodes, leader);
    s.append(batch(1, b"first"), 1, APPEND_TIMEOUT)
        .await
        .unwrap();
    wait_for_hw(&stream(&nodes, down), 1, Duration::from_secs(10)).await;

    nodes[down].take().unwrap().shutdown();
    let value = vec![b'r'; 4000];
    for _ in 0..300 {
        s.append(batch(1, &value), 1, APPEND_TIMEOUT).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while s.visible().log_start_offset == 0 {
        assert!(
            Instant::now() < deadline,
            "the leader kept every segment for the down follower"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kept: u64 = nodes[leader]
        .as_ref()
        .unwrap()
        .stream(STREAM)
        .unwrap()
        .segments()
        .iter()
        .map(|seg| seg.bytes)
        .sum();
    assert!(
        kept <= (256 << 10) + (64 << 10) + (16 << 20),
        "the leader applied retention: {kept} bytes kept"
    );

    // The follower returns below the leader's log start: a snapshot, then the rest.
    nodes[down] = Some(Node::start(configs[down].clone()).await.unwrap());
    let sd = stream(&nodes, down);
    wait_for_hw(&sd, 301, Duration::from_secs(15)).await;
    assert!(
        sd.visible().log_start_offset > 0,
        "the returning follower restarted its log from a snapshot"
    );
    let a = s
        .append(batch(1, b"after"), 1, APPEND_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(a.base_offset, 301);
    wait_for_hw(&sd, 302, Duration::from_secs(10)).await;
    // Both hold the same records from the later of their two log starts on.
    let (on_leader, on_follower) = (read_all(&s), read_all(&sd));
    let from = on_leader[0].0.max(on_follower[0].0);
    let suffix = |log: &[(u64, u32, Vec<u8>)]| -> Vec<(u64, u32, Vec<u8>)> {
        log.iter().filter(|b| b.0 >= from).cloned().collect()
    };
    assert_eq!(suffix(&on_follower), suffix(&on_leader));
    assert_eq!(on_follower.last().unwrap().2, b"after");
    for n in nodes.iter().flatten() {
        n.shutdown();
    }
}

/// A follower whose disk was replaced grants no vote until it holds everything committed
/// when it came back: its rejoin target is the commit index its leader confirms with a
/// quorum, not the index of the snapshot it gets first (where retention cut the log, far
/// below the commit). With catch-up replication slowed down, rejoin mode still ends only once
/// the replica applied that commit index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_disk_votes_again_only_after_applying_the_commit_it_came_back_to() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[STREAM]);
    for c in &mut configs {
        c.storage.segment_bytes = 64 << 10;
        c.storage.retention_bytes = Some(1 << 20);
        c.storage.retention_check_interval = Duration::from_millis(100);
    }
    let mut nodes = start_all(&configs).await;
    let leader = wait_for_leader(&nodes, Duration::from_secs(10)).await;
    let replaced = (leader + 1) % 3;
    let s = stream(&nodes, leader);
    let value = vec![b'r'; 4000];
    for _ in 0..600 {
        s.append(batch(1, &value), 1, APPEND_TIMEOUT).await.unwrap();
    }
    wait_for_hw(&stream(&nodes, replaced), 600, Duration::from_secs(10)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.stored_index_range().0 <= 1 {
        assert!(Instant::now() < deadline, "the leader applied no retention");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let command = vdl_server::metadata::MetaCommand::SetFlowLimits {
        limits: vdl_server::flow::settings::FlowLimits {
            catchup_replication_bytes_per_sec: Some(200_000),
            ..Default::default()
        },
    };
    nodes[leader]
        .as_ref()
        .unwrap()
        .metadata_proposer()
        .propose(&command, APPEND_TIMEOUT)
        .await
        .unwrap();
    let committed = s.visible().applied_index;

    nodes[replaced].take().unwrap().shutdown();
    std::fs::remove_dir_all(&configs[replaced].data_dir).unwrap();
    let node = Node::start(configs[replaced].clone()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !node.is_rejoining() {
        assert!(
            Instant::now() < deadline,
            "the node never entered rejoin mode"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    while node.is_rejoining() {
        assert!(
            Instant::now() < deadline,
            "the node never finished rejoining"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let applied = node.stream(STREAM).unwrap().visible().applied_index;
    assert!(
        applied >= committed,
        "rejoin mode ended at applied index {applied}, below the commit index {committed} it came back to"
    );
    nodes[replaced] = Some(node);
    for n in nodes.iter().flatten() {
        n.shutdown();
    }
}

/// Every replica saves its idempotent-producer table when it stops (and every 20,000 applied
/// entries), so a restart knows producers older than the part of the log it replays; the
/// saved table answers a retry of the last batch with its original offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_save_the_producer_table_when_they_stop() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[STREAM]);
    let nodes = start_all(&configs).await;
    let leader = wait_for_leader(&nodes, Duration::from_secs(10)).await;
    let s = stream(&nodes, leader);
    let batch =
        kafka_proto::records::RecordBatchBuilder::new(kafka_proto::records::Compression::None)
            .with_records(&[kafka_proto::records::NewRecord::new(
                1_700_000_000_000,
                &b"idempotent"[..],
            )])
            .unwrap()
            .producer(42, 0, 0)
            .build()
            .unwrap();
    let a = s.append(batch, 1, APPEND_TIMEOUT).await.unwrap();
    for i in 0..3 {
        wait_for_hw(
            &stream(&nodes, i),
            a.base_offset + 1,
            Duration::from_secs(10),
        )
        .await;
    }
    for n in nodes.iter().flatten() {
        n.shutdown();
    }
    for c in &configs {
        let saved = files_named(
            &c.data_dir,
            vdl_server::replication::producer_snapshot::SNAPSHOT_FILE,
        );
        assert_eq!(saved.len(), 1, "{}: {saved:?}", c.data_dir.display());
        let mut table =
            vdl_server::replication::producer_snapshot::load(saved[0].parent().unwrap())
                .unwrap()
                .expect("a saved table");
        let retry = vdl_server::replication::producers::BatchInfo {
            producer_id: 42,
            epoch: 0,
            first_seq: 0,
            last_seq: 0,
            span: 1,
            transactional: false,
            control: false,
            marker: None,
        };
        assert_eq!(
            table.check(&[retry]),
            vdl_server::replication::producers::SequenceCheck::Duplicate {
                base_offset: a.base_offset
            }
        );
    }
}

/// The files named `name` under `dir`, at any depth.
fn files_named(dir: &std::path::Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_streams_share_the_peer_connections_and_keep_their_own_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["binlog.orders", "binlog.users", "events"];
    let configs = cluster_configs(3, dir.path(), &names);
    let nodes = start_all(&configs).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut tasks = Vec::new();
    for name in names {
        // Each stream elects its own leader, not necessarily the same node.
        let leader = loop {
            let found = nodes
                .iter()
                .flatten()
                .find(|n| n.stream(name).unwrap().visible().leader == n.config().id);
            if let Some(n) = found {
                break n.stream(name).unwrap();
            }
            assert!(Instant::now() < deadline, "no leader for {name}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        tasks.push(tokio::spawn(async move {
            let mut offsets = Vec::new();
            for i in 0..30 {
                let a = leader
                    .append(batch(2, format!("{i}").as_bytes()), 2, APPEND_TIMEOUT)
                    .await
                    .unwrap();
                offsets.push(a.base_offset);
            }
            offsets
        }));
    }
    for t in tasks {
        let offsets = t.await.unwrap();
        assert_eq!(offsets, (0..30).map(|i| i * 2).collect::<Vec<u64>>());
    }
    for name in names {
        for n in nodes.iter().flatten() {
            let s = n.stream(name).unwrap();
            wait_for_hw(&s, 60, Duration::from_secs(10)).await;
            assert_eq!(read_all(&s).len(), 30);
        }
    }
    for n in nodes.iter().flatten() {
        n.shutdown();
    }
}
