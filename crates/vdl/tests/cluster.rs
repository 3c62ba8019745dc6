//! The embedded API on three in-process nodes: appends only on the leader (NotLeader names
//! it, nothing written), reads on every replica, and a tail that goes on through leader
//! changes without missing or repeating a record.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use vdl::{Error, Log, Offset, Record};

const STREAM: &str = "changes";

async fn cluster(root: &std::path::Path) -> Vec<Log> {
    let dirs: Vec<PathBuf> = (1..=3).map(|i| root.join(format!("node{i}"))).collect();
    Log::in_process_cluster(&dirs).await.unwrap()
}

/// Appends change `seq` (key = its number) exactly once although the node appended to may die
/// or lose leadership: after an outcome that is not known, it waits for a leader that has
/// committed in its own term (every earlier entry is then committed or gone for good) and
/// looks for the change before writing it again.
async fn append_once(logs: &[Log], seq: u64) -> Offset {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut searched_from = 0;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "change {seq} not appended in 60 s"
        );
        let leader = common::ready_leader(logs, STREAM, 0, Duration::from_secs(30)).await;
        let s = leader.stream(STREAM).await.unwrap();
        let found = s
            .read_range(Offset::new(0, searched_from), u64::MAX)
            .await
            .unwrap();
        if let Some(r) = found
            .iter()
            .find(|r| r.key.as_deref() == Some(seq.to_string().as_bytes()))
        {
            return r.offset;
        }
        searched_from = found.last().map_or(searched_from, |r| r.offset.offset + 1);
        match s.append(Record::keyed(seq.to_string(), "change")).await {
            Ok(at) => return at,
            // Nothing written: try again on the leader.
            Err(Error::NotLeader { .. } | Error::Busy) => {}
            // Unknown outcome: look again once a leader settled.
            Err(Error::LeaderChanged { .. } | Error::Closed | Error::Timeout(_)) => {}
            Err(e) => panic!("append of {seq}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_refuse_appends_naming_the_leader_and_serve_reads() {
    let root = tempfile::tempdir().unwrap();
    let logs = cluster(root.path()).await;
    let leader = common::ready_leader(&logs, STREAM, 0, Duration::from_secs(30)).await;
    let s = leader.stream(STREAM).await.unwrap();
    let at = s
        .append_batch((0..10).map(|i| Record::new(i.to_string())).collect())
        .await
        .unwrap();
    assert_eq!(at.last().unwrap().offset, 9);
    for log in logs.iter().filter(|l| l.node_id() != leader.node_id()) {
        let f = log.stream(STREAM).await.unwrap();
        let err = f.append(Record::new("x")).await.unwrap_err();
        match err {
            Error::NotLeader {
                leader: Some(l),
                kafka_address,
                node,
                ..
            } => {
                assert_eq!(l, leader.node_id());
                assert_eq!(node, log.node_id());
                assert_eq!(
                    kafka_address.as_deref(),
                    Some(leader.config().kafka_advertised.as_str())
                );
            }
            other => panic!("expected NotLeader, got {other:?}"),
        }
        // The follower serves the committed records from its own replica.
        common::eventually(Duration::from_secs(10), "follower caught up", || {
            f.status(0).is_ok_and(|st| st.high_watermark == 10)
        })
        .await;
        let read = f.read_range(Offset::start(0), u64::MAX).await.unwrap();
        assert_eq!(read.len(), 10);
        let mut tail = f.tail(Offset::new(0, 9));
        assert_eq!(tail.next().await.unwrap().unwrap().offset.offset, 9);
    }
    // Nothing was written by the refused appends.
    assert_eq!(s.status(0).unwrap().high_watermark, 10);
    // Positions committed on one node are seen on the others.
    s.commit("audit", Offset::new(0, 7)).await.unwrap();
    for log in &logs {
        let st = log.stream(STREAM).await.unwrap();
        common::eventually(Duration::from_secs(10), "position replicated", || {
            st.position("audit", 0) == Some(Offset::new(0, 7))
        })
        .await;
    }
    for log in &logs {
        log.shutdown().await;
    }
}

/// Tails on every node while the writer's leader is moved once and then killed: each
/// surviving tail yields every change exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tails_go_on_through_leader_changes_without_missing_or_repeating() {
    let root = tempfile::tempdir().unwrap();
    let logs = cluster(root.path()).await;
    const CHANGES: u64 = 150;
    let mut tails = Vec::new();
    for log in &logs {
        let s = log.stream(STREAM).await.unwrap();
        let id = log.node_id();
        tails.push((
            id,
            tokio::spawn(async move {
                let mut tail = s.tail(Offset::start(0));
                let mut seen = Vec::new();
                while (seen.len() as u64) < CHANGES {
                    match tokio::time::timeout(Duration::from_secs(60), tail.next()).await {
                        Ok(Some(Ok(r))) => {
                            let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
                            seen.push((r.offset.offset, key.parse::<u64>().unwrap()));
                        }
                        Ok(Some(Err(Error::Closed))) => return (seen, true),
                        other => panic!("tail on node {id}: {other:?}"),
                    }
                }
                (seen, false)
            }),
        ));
    }
    let mut killed = None;
    for seq in 0..CHANGES {
        if seq == 50 {
            // A leader change without a failure: hand leadership to another node.
            let leader = common::ready_leader(&logs, STREAM, 0, Duration::from_secs(30)).await;
            let to = logs
                .iter()
                .map(Log::node_id)
                .find(|id| *id != leader.node_id())
                .unwrap();
            leader
                .node()
                .partition(STREAM, 0)
                .unwrap()
                .transfer_leader(to);
        }
        if seq == 100 {
            // Kill the leader.
            let leader = common::ready_leader(&logs, STREAM, 0, Duration::from_secs(30)).await;
            killed = Some(leader.node_id());
            leader.shutdown().await;
        }
        append_once(&logs, seq).await;
    }
    let killed = killed.unwrap();
    for (id, tail) in tails {
        let (seen, closed) = tail.await.unwrap();
        if id == killed {
            // The killed node's tail ended with Closed after what it had seen, in order.
            assert!(closed);
        } else {
            assert!(!closed, "node {id}'s tail closed");
            assert_eq!(seen.len() as u64, CHANGES, "node {id}");
        }
        let changes: Vec<u64> = seen.iter().map(|(_, c)| *c).collect();
        let expected: Vec<u64> = (0..seen.len() as u64).collect();
        assert_eq!(changes, expected, "node {id}: every change once, in order");
        let offsets: BTreeSet<u64> = seen.iter().map(|(o, _)| *o).collect();
        assert_eq!(offsets.len(), seen.len());
    }
    for log in &logs {
        log.shutdown().await;
    }
}

/// Without a majority an append cannot commit: it fails with an error that says the outcome
/// is unknown. Nodes stopped with `shutdown` start again with `join` and their config, and the
/// cluster goes on; the unknown append is then in the log once or not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_without_a_majority_has_an_unknown_outcome_and_nodes_restart() {
    let root = tempfile::tempdir().unwrap();
    let first = cluster(root.path()).await;
    let configs: Vec<vdl::NodeConfig> = first.iter().map(|l| l.config().clone()).collect();
    for log in &first {
        log.shutdown().await;
    }
    let short = vdl::LogOptions {
        append_timeout: Duration::from_millis(400),
        ..vdl::LogOptions::default()
    };
    let logs: Vec<Log> =
        futures::future::join_all(configs.iter().map(|c| Log::join_with(c.clone(), short)))
            .await
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
    let leader = common::ready_leader(&logs, STREAM, 0, Duration::from_secs(30)).await;
    let s = leader.stream(STREAM).await.unwrap();
    s.append(Record::keyed("before", "x")).await.unwrap();
    let followers: Vec<&Log> = logs
        .iter()
        .filter(|l| l.node_id() != leader.node_id())
        .collect();
    futures::future::join_all(followers.iter().map(|f| f.shutdown())).await;
    let err = s.append(Record::keyed("unknown", "x")).await.unwrap_err();
    assert!(err.may_have_committed(), "{err:?}");
    assert!(
        matches!(
            err,
            Error::Timeout(_) | Error::LeaderChanged { .. } | Error::NotLeader { .. }
        ),
        "{err:?}"
    );
    // The followers come back from their data directories.
    let mut back = vec![leader.clone()];
    for f in &followers {
        back.push(Log::join(f.config().clone()).await.unwrap());
    }
    let at = append_once(&back, 1_000).await;
    let leader = common::ready_leader(&back, STREAM, 0, Duration::from_secs(30)).await;
    let all = leader
        .stream(STREAM)
        .await
        .unwrap()
        .read_range(Offset::start(0), u64::MAX)
        .await
        .unwrap();
    let count = |k: &str| {
        all.iter()
            .filter(|r| r.key.as_deref() == Some(k.as_bytes()))
            .count()
    };
    assert_eq!(count("before"), 1);
    assert!(count("unknown") <= 1);
    assert_eq!(count("1000"), 1);
    assert_eq!(all.last().unwrap().offset, at);
    for log in &back {
        log.shutdown().await;
    }
}
