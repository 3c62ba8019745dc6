//! Dropping peer links (a fault-injecting link filter): an isolated leader stops acknowledging,
//! the majority elects a new leader and goes on, and after healing every node holds the same log
//! with every acknowledged append exactly once.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{batch, cluster_configs, split_batches};
use vdl_server::replication::transport::LinkFilter;
use vdl_server::{LogStream, Node};

const STREAM: &str = "partitioned";

/// Links cut in both directions, shared by every node's filter.
#[derive(Default)]
struct Cuts {
    isolated: Mutex<HashSet<u64>>,
}

struct NodeLinks {
    me: u64,
    cuts: Arc<Cuts>,
}

impl LinkFilter for NodeLinks {
    fn allow(&self, peer: u64) -> bool {
        let iso = self.cuts.isolated.lock().unwrap();
        !iso.contains(&self.me) && !iso.contains(&peer)
    }
}

fn read_all(s: &LogStream) -> Vec<Vec<u8>> {
    let hw = s.visible().high_watermark;
    let mut offset = 0;
    let mut out = Vec::new();
    while offset < hw {
        let r = s.read(offset, 1 << 20).unwrap();
        let data: Vec<u8> = r.chunks.iter().flat_map(|c| c.iter().copied()).collect();
        for (base, count, payload) in split_batches(&data) {
            offset = base + u64::from(count);
            out.push(payload);
        }
    }
    out
}

async fn leader_among(nodes: &[Arc<Node>], ids: &[u64], timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        for (i, n) in nodes.iter().enumerate() {
            let v = n.stream(STREAM).unwrap().visible();
            if ids.contains(&n.config().id) && v.leader == n.config().id {
                return i;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader among {ids:?} within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a node per config, all sharing one set of cuts.
async fn start_filtered(configs: &[vdl_server::config::NodeConfig]) -> (Vec<Arc<Node>>, Arc<Cuts>) {
    let cuts = Arc::new(Cuts::default());
    let mut nodes = Vec::new();
    for c in configs {
        let filter = Arc::new(NodeLinks {
            me: c.id,
            cuts: cuts.clone(),
        });
        nodes.push(Node::start_with_filter(c.clone(), filter).await.unwrap());
    }
    (nodes, cuts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_stops_acknowledging_and_logs_converge_after_healing() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[STREAM]);
    let election = configs[0].raft.election_timeout;
    let (nodes, cuts) = start_filtered(&configs).await;
    let all_ids = [1, 2, 3];
    let old = leader_among(&nodes, &all_ids, Duration::from_secs(10)).await;
    let mut acked: Vec<Vec<u8>> = Vec::new();
    for i in 0..20 {
        let p = format!("before-{i}").into_bytes();
        let s = nodes[old].stream(STREAM).unwrap();
        s.append(batch(1, &p), 1, Duration::from_secs(5))
            .await
            .unwrap();
        acked.push(p);
    }

    // Cut the leader off. Nothing it is asked to append afterwards may be acknowledged.
    let old_id = nodes[old].config().id;
    cuts.isolated.lock().unwrap().insert(old_id);
    let cut_at = Instant::now();
    let isolated = nodes[old].stream(STREAM).unwrap();
    let stale = tokio::spawn(async move {
        let mut acks = 0;
        for i in 0..10 {
            let p = format!("isolated-{i}").into_bytes();
            if isolated
                .append(batch(1, &p), 1, Duration::from_millis(300))
                .await
                .is_ok()
            {
                acks += 1;
            }
        }
        acks
    });
    let others: Vec<u64> = all_ids.iter().copied().filter(|&i| i != old_id).collect();
    let new = leader_among(&nodes, &others, 4 * election).await;
    let elected_after = cut_at.elapsed();
    assert!(
        elected_after <= 4 * election,
        "new leader after {elected_after:?} (election timeout {election:?})"
    );
    for i in 0..20 {
        let p = format!("after-{i}").into_bytes();
        let s = nodes[new].stream(STREAM).unwrap();
        s.append(batch(1, &p), 1, Duration::from_secs(5))
            .await
            .unwrap();
        acked.push(p);
    }
    assert_eq!(
        stale.await.unwrap(),
        0,
        "an isolated leader acknowledged an append"
    );
    // check_quorum: the old leader has stepped down by now.
    assert_ne!(nodes[old].stream(STREAM).unwrap().visible().leader, old_id);

    // Heal and let the old leader catch up: every node holds exactly the acknowledged appends.
    cuts.isolated.lock().unwrap().clear();
    let hw = nodes[new].stream(STREAM).unwrap().visible().high_watermark;
    let deadline = Instant::now() + Duration::from_secs(10);
    for n in &nodes {
        let s = n.stream(STREAM).unwrap();
        while s.visible().high_watermark < hw {
            assert!(
                Instant::now() < deadline,
                "node {} did not catch up",
                n.config().id
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let logs: Vec<Vec<Vec<u8>>> = nodes
        .iter()
        .map(|n| read_all(&n.stream(STREAM).unwrap()))
        .collect();
    assert_eq!(logs[0], logs[1]);
    assert_eq!(logs[1], logs[2]);
    assert_eq!(logs[0], acked, "exactly the acknowledged appends, in order");
    drop(nodes);
}

/// Item 12 of the lifecycle issue: an append waiting on a leader that is cut off and steps
/// down is answered NotLeader as soon as it steps down, not at the caller's (long) deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_answers_its_waiting_appends_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[STREAM]);
    let election = configs[0].raft.election_timeout;
    let (nodes, cuts) = start_filtered(&configs).await;
    let old = leader_among(&nodes, &[1, 2, 3], Duration::from_secs(10)).await;
    let s = nodes[old].stream(STREAM).unwrap();
    s.append(batch(1, b"first"), 1, Duration::from_secs(5))
        .await
        .unwrap();
    cuts.isolated.lock().unwrap().insert(nodes[old].config().id);
    let started = Instant::now();
    let outcome = s
        .append(batch(1, b"never"), 1, Duration::from_secs(60))
        .await;
    let waited = started.elapsed();
    assert!(
        matches!(outcome, Err(vdl_server::AppendError::NotLeader { .. })),
        "got {outcome:?}"
    );
    assert!(
        waited < 10 * election,
        "answered after {waited:?}, not when the leader stepped down"
    );
    drop(nodes);
}

/// Item 10 of the lifecycle issue: a fetch at an offset between the high watermark and the log
/// end (records appended, not yet committed) gets an empty answer, as in Kafka, not
/// OFFSET_OUT_OF_RANGE (which makes tailing consumers reset after a failover); beyond the log
/// end it is out of range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_between_the_high_watermark_and_the_log_end_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[STREAM]);
    let (nodes, cuts) = start_filtered(&configs).await;
    let leader = leader_among(&nodes, &[1, 2, 3], Duration::from_secs(10)).await;
    nodes[leader].serve_kafka().await.unwrap();
    let s = nodes[leader].stream(STREAM).unwrap();
    s.append(batch(3, b"committed"), 3, Duration::from_secs(5))
        .await
        .unwrap();
    // Cut the leader off and give it records it cannot commit: its log end moves past its
    // high watermark (until it steps down, one election timeout later).
    cuts.isolated
        .lock()
        .unwrap()
        .insert(nodes[leader].config().id);
    let pending = s.submit_records(batch(2, b"uncommitted"), 2);
    let deadline = Instant::now() + Duration::from_secs(2);
    while s.log_end_offset() < 5 {
        assert!(
            Instant::now() < deadline,
            "the append never reached the log"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let addr: std::net::SocketAddr = nodes[leader].config().kafka_advertised.parse().unwrap();
    let (between, beyond) = tokio::task::spawn_blocking(move || {
        let mut c = common::kafka::KafkaConn::connect(addr).unwrap();
        (c.fetch(STREAM, 4).unwrap(), c.fetch(STREAM, 6).unwrap())
    })
    .await
    .unwrap();
    assert_eq!(s.visible().high_watermark, 3);
    let (code, hw, _, records) = between;
    assert_eq!(
        (code, hw),
        (0, 3),
        "between the high watermark and the log end"
    );
    assert!(records.is_empty(), "uncommitted records were served");
    assert_eq!(beyond.0, 1, "beyond the log end: OFFSET_OUT_OF_RANGE");
    drop(pending);
    drop(nodes);
}
