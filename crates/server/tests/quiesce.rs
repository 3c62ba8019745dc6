//! Quiesced partitions: idle groups stop ticking on every node, wake for a write and quiesce
//! again, and still fail over when their leader's node is cut off without its connections
//! closing (node liveness, not the groups' heartbeats, notices).

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{batch, cluster_configs};
use vdl_server::replication::transport::LinkFilter;
use vdl_server::Node;

const T: Duration = Duration::from_secs(20);
const TOPIC: &str = "quiet";
const PARTITIONS: u32 = 6;

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

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < T, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

fn all_quiesced(nodes: &[Arc<Node>]) -> bool {
    nodes.iter().all(|n| {
        let parts = n.partitions(TOPIC);
        parts.len() == PARTITIONS as usize && parts.iter().all(|s| s.visible().quiesced)
    })
}

/// The node index leading `partition` as every node in `among` agrees, if they do.
fn agreed_leader(nodes: &[Arc<Node>], among: &[usize], partition: u32) -> Option<u64> {
    let leaders: HashSet<u64> = among
        .iter()
        .map(|i| {
            nodes[*i]
                .partition(TOPIC, partition)
                .unwrap()
                .visible()
                .leader
        })
        .collect();
    let leader = *leaders.iter().next()?;
    (leaders.len() == 1 && leader != 0).then_some(leader)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_partitions_quiesce_wake_for_writes_and_fail_over_when_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[]);
    let cuts = Arc::new(Cuts::default());
    let mut nodes = Vec::new();
    for c in &configs {
        let filter = Arc::new(NodeLinks {
            me: c.id,
            cuts: cuts.clone(),
        });
        nodes.push(Node::start_with_filter(c.clone(), filter).await.unwrap());
    }
    nodes[0].create_topic(TOPIC, PARTITIONS, T).await.unwrap();
    let all = [0, 1, 2];
    wait_until("leaders for every partition", || {
        nodes
            .iter()
            .all(|n| n.partitions(TOPIC).len() == PARTITIONS as usize)
            && (0..PARTITIONS).all(|p| agreed_leader(&nodes, &all, p).is_some())
    })
    .await;
    let took = wait_until("every partition quiesced on every node", || {
        all_quiesced(&nodes)
    })
    .await;
    eprintln!("quiesced on every node {took:?} after the leaders were agreed");

    // A write wakes its partition and is committed; then the partition quiesces again.
    let leader = agreed_leader(&nodes, &all, 0).unwrap();
    let stream = nodes[leader as usize - 1].partition(TOPIC, 0).unwrap();
    let appended = stream
        .append(batch(5, b"wake"), 5, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(appended.base_offset, 0);
    wait_until("the written partition on every node", || {
        nodes
            .iter()
            .all(|n| n.partition(TOPIC, 0).unwrap().visible().high_watermark == 5)
    })
    .await;
    wait_until("quiesced again after the write", || all_quiesced(&nodes)).await;

    // Node 1 is cut off (its connections stay open): the others notice through liveness and
    // elect leaders for the partitions it led.
    cuts.isolated.lock().unwrap().insert(1);
    let took = wait_until("leaders among nodes 2 and 3 for every partition", || {
        (0..PARTITIONS).all(|p| agreed_leader(&nodes, &[1, 2], p).is_some_and(|l| l != 1))
    })
    .await;
    eprintln!("every partition led by nodes 2-3 {took:?} after node 1 was cut off");
    for p in 0..PARTITIONS {
        let leader = agreed_leader(&nodes, &[1, 2], p).unwrap();
        let s = nodes[leader as usize - 1].partition(TOPIC, p).unwrap();
        s.append(batch(3, b"after"), 3, Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("append to partition {p} after the cut: {e}"));
    }

    // Healed: node 1 catches up, and the idle cluster quiesces again.
    cuts.isolated.lock().unwrap().clear();
    wait_until("node 1 caught up on every partition", || {
        (0..PARTITIONS).all(|p| {
            let hws: HashSet<u64> = nodes
                .iter()
                .map(|n| n.partition(TOPIC, p).unwrap().visible().high_watermark)
                .collect();
            hws.len() == 1
        })
    })
    .await;
    wait_until("quiesced again after healing", || all_quiesced(&nodes)).await;
    for n in &nodes {
        n.shutdown();
    }
}
