//! Item 9 of the lifecycle issue: just after a failover, the new leader holds a batch of the old
//! term that it has not applied yet (it commits with the new leader's first entry). A client's
//! retry of that batch in this window must not be written a second time: it is refused as in
//! flight (retriable), and once the batch commits the retry is answered with its original offset.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster_configs;
use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};
use raft::prelude::{Message, MessageType};
use vdl_server::replication::producers::SequenceError;
use vdl_server::replication::transport::LinkFilter;
use vdl_server::{AppendError, Node};

const STREAM: &str = "idem-failover";
const PID: i64 = 4242;

/// Directed links cut, and directed links on which append acknowledgements are dropped.
#[derive(Default)]
struct Links {
    cut: Mutex<HashSet<(u64, u64)>>,
    no_acks: Mutex<HashSet<(u64, u64)>>,
}

struct NodeLinks {
    me: u64,
    links: Arc<Links>,
}

impl LinkFilter for NodeLinks {
    fn allow(&self, peer: u64) -> bool {
        !self.links.cut.lock().unwrap().contains(&(self.me, peer))
    }

    fn allow_message(&self, peer: u64, msg: &Message) -> bool {
        self.allow(peer)
            && !(msg.get_msg_type() == MessageType::MsgAppendResponse
                && self
                    .links
                    .no_acks
                    .lock()
                    .unwrap()
                    .contains(&(self.me, peer)))
    }
}

fn idempotent_batch(first_seq: i32, n: usize) -> Bytes {
    let records: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord::new(1_700_000_000_000, format!("r{}", first_seq as usize + i)))
        .collect();
    RecordBatchBuilder::new(Compression::None)
        .producer(PID, 0, first_seq)
        .with_records(&records)
        .unwrap()
        .build()
        .unwrap()
}

async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_in_the_failover_window_is_not_written_twice() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[STREAM]);
    let links = Arc::new(Links::default());
    let mut nodes = Vec::new();
    for c in &configs {
        let filter = Arc::new(NodeLinks {
            me: c.id,
            links: links.clone(),
        });
        nodes.push(Node::start_with_filter(c.clone(), filter).await.unwrap());
    }
    let stream = |i: usize| nodes[i].stream(STREAM).unwrap();
    let mut l = usize::MAX;
    wait_for("a leader", || {
        l = (0..3)
            .find(|&i| stream(i).visible().leader == i as u64 + 1)
            .unwrap_or(usize::MAX);
        l != usize::MAX
    })
    .await;
    let (a, b) = ((l + 1) % 3, (l + 2) % 3);
    let id = |i: usize| i as u64 + 1;
    let timeout = Duration::from_secs(5);

    // Batch 0 (sequences 0..4) commits normally.
    let first = stream(l)
        .append(idempotent_batch(0, 5), 5, timeout)
        .await
        .unwrap();
    assert_eq!(first.base_offset, 0);
    wait_for("A applies batch 0", || {
        stream(a).visible().high_watermark == 5
    })
    .await;

    // Batch 1 (sequences 5..9) reaches A, but A's acknowledgement never reaches the leader and B
    // never hears of it: it is in A's log, not committed.
    links.cut.lock().unwrap().insert((id(l), id(b)));
    links.cut.lock().unwrap().insert((id(a), id(l)));
    let batch1 = idempotent_batch(5, 5);
    let pending = stream(l).submit_records(batch1.clone(), 5);
    wait_for("A holds batch 1", || stream(a).log_end_offset() == 10).await;
    assert_eq!(stream(a).visible().high_watermark, 5);

    // Cut the old leader off; A becomes leader with B's vote, but B's acknowledgements of A's
    // first entry are dropped: A cannot commit (or apply) batch 1 yet.
    for other in [a, b] {
        links.cut.lock().unwrap().insert((id(l), id(other)));
        links.cut.lock().unwrap().insert((id(other), id(l)));
    }
    links.no_acks.lock().unwrap().insert((id(b), id(a)));
    stream(a).campaign();
    wait_for("A leads", || stream(a).visible().leader == id(a)).await;
    assert_eq!(
        stream(a).visible().high_watermark,
        5,
        "batch 1 committed too early"
    );

    // The client's retry of batch 1 at the new leader: refused as in flight, not appended.
    let retry = stream(a).append(batch1.clone(), 5, timeout).await;
    assert_eq!(
        retry,
        Err(AppendError::Sequence(SequenceError::DuplicateInFlight)),
        "a retry in the failover window"
    );

    // Acknowledgements flow again: batch 1 commits where it was; the retry now gets its offset.
    links.no_acks.lock().unwrap().clear();
    wait_for("batch 1 commits", || {
        stream(a).visible().high_watermark >= 10
    })
    .await;
    let retry = stream(a).append(batch1, 5, timeout).await.unwrap();
    assert_eq!(retry.base_offset, 5);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        stream(a).visible().high_watermark,
        10,
        "batch 1 was written twice"
    );
    drop(pending);
    drop(nodes);
}
