//! Idempotent producers' batches around leader changes and refused proposals.
//!
//! Item 9 of the lifecycle issue: just after a failover, the new leader holds a batch of the old
//! term that it has not applied yet (it commits with the new leader's first entry). A client's
//! retry of that batch in this window must not be written a second time: it is refused as in
//! flight (retriable), and once the batch commits the retry is answered with its original offset.
//!
//! Batches that were refused and not written (during a leader transfer, or put back for the next
//! entry without group commit) must not count as sent: the producer's next batches, and its
//! retries, continue the sequence (librdkafka treats an out-of-order refusal of the batch it
//! expects to be next as fatal).

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

    // Batches 1 and 2 (sequences 5..9, 10..14; the client pipelines them) reach A, but A's
    // acknowledgements never reach the leader and B never hears of them: they are in A's log,
    // not committed.
    links.cut.lock().unwrap().insert((id(l), id(b)));
    links.cut.lock().unwrap().insert((id(a), id(l)));
    let (batch1, batch2) = (idempotent_batch(5, 5), idempotent_batch(10, 5));
    let pending = stream(l).submit_records(batch1.clone(), 5);
    let pending2 = stream(l).submit_records(batch2.clone(), 5);
    wait_for("A holds batches 1 and 2", || {
        stream(a).log_end_offset() == 15
    })
    .await;
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
        "batches 1 and 2 committed too early"
    );

    // The client's retries at the new leader, from its oldest unanswered batch: refused as in
    // flight, not appended, and not refused as out of order (librdkafka's fatal "sequence
    // desynchronization" when the batch is the one it expects to be next).
    for batch in [&batch1, &batch2] {
        let retry = stream(a).append(batch.clone(), 5, timeout).await;
        assert_eq!(
            retry,
            Err(AppendError::Sequence(SequenceError::DuplicateInFlight)),
            "a retry in the failover window"
        );
    }

    // Acknowledgements flow again: the batches commit where they were; the retries now get
    // their offsets.
    links.no_acks.lock().unwrap().clear();
    wait_for("batches 1 and 2 commit", || {
        stream(a).visible().high_watermark >= 15
    })
    .await;
    let retry = stream(a).append(batch1, 5, timeout).await.unwrap();
    assert_eq!(retry.base_offset, 5);
    let retry = stream(a).append(batch2, 5, timeout).await.unwrap();
    assert_eq!(retry.base_offset, 10);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        stream(a).visible().high_watermark,
        15,
        "a batch was written twice"
    );
    drop((pending, pending2));
    drop(nodes);
}

/// A leader transfer that never completes (the target does not hear of it) is given up after
/// an election timeout, and the old leader goes on leading. The batches clients sent meanwhile
/// were refused with NOT_LEADER (raft-rs drops proposals during a transfer), so they are not in
/// the log: their retries must be appended, in order, and not be refused as out of sequence
/// (for librdkafka a fatal "sequence desynchronization") or as still in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_refused_during_an_abandoned_transfer_are_appended_on_retry() {
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
    let target = (l + 1) % 3;
    let id = |i: usize| i as u64 + 1;
    let timeout = Duration::from_secs(5);

    let first = stream(l)
        .append(idempotent_batch(0, 5), 5, timeout)
        .await
        .unwrap();
    assert_eq!(first.base_offset, 0);

    // The target cannot be reached: the transfer starts and never completes; the leader keeps
    // its quorum with the third replica.
    links.cut.lock().unwrap().insert((id(l), id(target)));
    links.cut.lock().unwrap().insert((id(target), id(l)));
    stream(l).transfer_leader(id(target));
    // Two pipelined batches arrive during the transfer: both refused, neither written.
    let (batch1, batch2) = (idempotent_batch(5, 5), idempotent_batch(10, 5));
    let sent1 = stream(l).submit_records(batch1.clone(), 5);
    let sent2 = stream(l).submit_records(batch2.clone(), 5);
    for sent in [sent1, sent2] {
        let refused = sent.wait(timeout).await;
        assert!(
            matches!(refused, Err(AppendError::NotLeader { .. })),
            "a batch during the transfer: {refused:?}"
        );
    }

    // The transfer is given up within an election timeout (300 ms here); the leader stays.
    // On a loaded machine the leader can also lose its lease meanwhile and the cut-off target
    // win an election; the old leader then never learns the new one (NOT_LEADER without a
    // leader). A client retries NOT_LEADER after a back-off, at the leader metadata names: so
    // does this test, and the retries must be appended in order wherever the leader is.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut at = l;
    let mut retries = Vec::new();
    for (batch, offset) in [(batch1, 5), (batch2, 10)] {
        let answer = loop {
            at = (0..3)
                .find(|&i| stream(i).visible().leader == id(i))
                .unwrap_or(at);
            let answer = stream(at).append(batch.clone(), 5, timeout).await;
            if !matches!(answer, Err(AppendError::NotLeader { .. })) || Instant::now() > deadline {
                break answer;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        retries.push((answer.map(|a| a.base_offset), offset));
    }
    assert_eq!(
        retries,
        [(Ok(5), 5), (Ok(10), 10)],
        "the retries of batches 1 and 2 (answer, offset expected); leader was {} then {}",
        id(l),
        id(at)
    );
    if at != l {
        eprintln!("leadership moved to {} during the test", id(at));
    }
    assert_eq!(stream(at).visible().high_watermark, 15);
    drop(nodes);
}

/// Without group commit each proposal gets its own entry; the ones queued behind the first are
/// proposed in the next rounds. A producer's pipelined batches must all be appended, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_batches_without_group_commit_are_all_appended() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[STREAM]);
    for c in &mut configs {
        c.raft.group_commit = false;
    }
    let mut nodes = Vec::new();
    for c in &configs {
        nodes.push(Node::start(c.clone()).await.unwrap());
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
    let timeout = Duration::from_secs(5);
    let sent: Vec<_> = (0..8)
        .map(|k| stream(l).submit_records(idempotent_batch(k * 2, 2), 2))
        .collect();
    for (k, s) in sent.into_iter().enumerate() {
        let appended = s.wait(timeout).await;
        assert_eq!(
            appended.map(|a| a.base_offset),
            Ok(k as u64 * 2),
            "batch {k}"
        );
    }
    drop(nodes);
}
