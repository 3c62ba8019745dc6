//! Log compaction and replication (issue 35): a follower that was down while its leader
//! compacted catches up through normal Raft replication from the compacted entries (record
//! counts in the entry context, `replication/raft_storage.rs`) and serves the same latest
//! value of every key at the same offset as the leader and as a replica that never compacted.
//!
//! The test compacts the leader's store itself, below the leader's applied index, through the
//! stream's store handle (`LogStream::store`): the node's cleaner visits only topics whose
//! `cleanup.policy` compacts (`tests/compaction_cleaner.rs`), not streams configured at start.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::cluster_configs;
use kafka_proto::records::{build_batch, Compression, NewRecord};
use logstore::CompactionPlan;
use vdl_server::compaction::KafkaRecordCompactor;
use vdl_server::config::NodeConfig;
use vdl_server::replication::raft_storage::write;
use vdl_server::{LogStream, Node};

const STREAM: &str = "compacted1";
const APPEND_TIMEOUT: Duration = Duration::from_secs(5);
const KEYS: usize = 30;
const ROUNDS: usize = 12;

async fn start_all(configs: &[NodeConfig]) -> Vec<Option<Arc<Node>>> {
    let mut nodes = Vec::new();
    for c in configs {
        nodes.push(Some(Node::start(c.clone()).await.expect("node starts")));
    }
    nodes
}

fn stream(nodes: &[Option<Arc<Node>>], i: usize) -> LogStream {
    nodes[i]
        .as_ref()
        .expect("node is up")
        .stream(STREAM)
        .expect("stream exists")
}

async fn wait_for_leader(nodes: &[Option<Arc<Node>>]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for (i, n) in nodes.iter().enumerate() {
            if let Some(n) = n {
                if n.stream(STREAM).expect("stream").visible().leader == n.config().id {
                    return i;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_for_hw(s: &LogStream, hw: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
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

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// One batch of one keyed record; values are padded so that the log spans many segments.
fn keyed(key: &str, value: &str) -> Bytes {
    let mut v = value.as_bytes().to_vec();
    v.resize(2_000, b'.');
    let r = NewRecord::new(now_ms(), v).with_key(key.as_bytes().to_vec());
    build_batch(Compression::None, &[r]).expect("a batch")
}

/// Every committed record a replica serves, read from offset 0 to its high watermark
/// through the Kafka read path (`read_records`): offset -> (key, value without padding).
fn records(s: &LogStream) -> BTreeMap<u64, (String, String)> {
    let mut out = BTreeMap::new();
    for b in common::compacted::replica_batches(s, 64 << 10) {
        b.validate().expect("batch CRC");
        for r in b.records_vec(1 << 20).expect("records") {
            let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            out.insert(
                r.offset as u64,
                (key, value.trim_end_matches('.').to_string()),
            );
        }
    }
    out
}

/// The latest record of every key: key -> (offset, value).
fn latest(records: &BTreeMap<u64, (String, String)>) -> BTreeMap<String, (u64, String)> {
    let mut out = BTreeMap::new();
    for (offset, (k, v)) in records {
        out.insert(k.clone(), (*offset, v.clone()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_catches_up_from_a_compacted_leader_with_the_same_latest_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[STREAM]);
    for c in &mut configs {
        c.storage.segment_bytes = 64 << 10;
    }
    let mut nodes = start_all(&configs).await;
    let leader = wait_for_leader(&nodes).await;
    let down = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let s = stream(&nodes, leader);
    s.append(keyed("k0", "first"), 1, APPEND_TIMEOUT)
        .await
        .unwrap();
    wait_for_hw(&stream(&nodes, down), 1).await;
    nodes[down].take().unwrap().shutdown();

    // Every key written ROUNDS times while the follower is down.
    let mut end = 1;
    for round in 0..ROUNDS {
        for k in 0..KEYS {
            let a = s
                .append(
                    keyed(&format!("k{k}"), &format!("r{round}")),
                    1,
                    APPEND_TIMEOUT,
                )
                .await
                .unwrap();
            end = a.base_offset + 1;
        }
    }
    wait_for_hw(&stream(&nodes, other), end).await;
    let before = records(&s);
    assert_eq!(before.len() as u64, end, "nothing compacted yet");

    // Compact the leader below what it applied (the other follower has it too).
    let clean_limit = s.visible().applied_index;
    let plan = CompactionPlan {
        clean_limit,
        now_ms: now_ms(),
        min_compaction_lag_ms: 0,
        delete_retention_ms: 24 * 3_600_000,
        tombstone_limit: 0,
        key_map_bytes: 1 << 20,
    };
    let report = write(s.store())
        .compact(&plan, &KafkaRecordCompactor::default(), &mut |_| {})
        .expect("compaction");
    assert!(
        report.records_removed > (KEYS * (ROUNDS - 4)) as u64,
        "the leader removed older values: {report:?}"
    );
    let on_leader = records(&s);
    assert!(on_leader.len() < before.len());
    assert_eq!(
        latest(&on_leader),
        latest(&before),
        "compaction kept the latest values"
    );

    // The follower returns and catches up by replication from the compacted entries.
    nodes[down] = Some(Node::start(configs[down].clone()).await.unwrap());
    let sd = stream(&nodes, down);
    let after = s
        .append(keyed("k0", "after"), 1, APPEND_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(after.base_offset, end, "offsets go on after compaction");
    wait_for_hw(&sd, end + 1).await;
    assert_eq!(
        sd.visible().log_start_offset,
        0,
        "the follower caught up by entries, not by a snapshot"
    );

    let on_follower = records(&sd);
    let on_leader = records(&s);
    let on_other = records(&stream(&nodes, other));
    // Offset 0 the follower held before it went down (its own, uncompacted copy: replicas
    // compact independently); everything after it came from the compacted leader.
    let mut received = on_follower.clone();
    assert_eq!(
        received.remove(&0),
        Some(("k0".to_string(), "first".to_string()))
    );
    let mut sent = on_leader.clone();
    sent.remove(&0);
    assert_eq!(
        received, sent,
        "the follower holds the leader's compacted records"
    );
    assert!(
        received.len() < KEYS * 2,
        "{} records received",
        received.len()
    );
    assert_eq!(
        on_other.len() as u64,
        end + 1,
        "the other replica never compacted"
    );
    assert_eq!(latest(&on_follower), latest(&on_other));
    let newest = latest(&on_follower);
    assert_eq!(newest.len(), KEYS);
    assert_eq!(newest["k0"], (end, "after".to_string()));
    for k in 1..KEYS {
        assert_eq!(newest[&format!("k{k}")].1, format!("r{}", ROUNDS - 1));
    }
    // Its store holds the compacted entries: the Raft log is whole (same last index and
    // offsets), its bytes are fewer than the uncompacted replica's.
    assert_eq!(sd.stored_index_range().1, s.stored_index_range().1);
    assert!(
        sd.storage_size().1 < stream(&nodes, other).storage_size().1,
        "the follower appended compacted entries"
    );
    for n in nodes.iter().flatten() {
        n.shutdown();
    }
}
