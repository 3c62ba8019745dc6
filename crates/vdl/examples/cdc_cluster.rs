//! Three vdl nodes in this process; a writer appends numbered changes, a tailer on one node
//! follows them; halfway the leader is killed and the writer goes on with the new leader. The
//! tailer checks it sees every change exactly once, in order.
//!
//! Run: `cargo run -p vdl --example cdc_cluster` (a few seconds; data in a temporary
//! directory, removed at the end).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use vdl::{Error, Log, Offset, Record};

const STREAM: &str = "orders-cdc";

/// The node among `logs` (not shut down) that leads partition 0 and has committed an entry of
/// its own term: every change committed under an earlier leader is then in its log, and one
/// that is not never will be.
async fn ready_leader(logs: &[Log]) -> vdl::Result<Log> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        for log in logs.iter().filter(|l| !l.is_closed()) {
            if log.stream(STREAM).await?.status(0)?.leader_ready {
                return Ok(log.clone());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout(Duration::from_secs(30)));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Appends change `seq` exactly once, whatever happens to the leader: an append whose outcome
/// is unknown (its leader died or stepped down) is looked for in the settled leader's log
/// before it is written again. `searched` is where the previous search stopped.
async fn append_once(logs: &[Log], seq: u64, searched: &mut u64) -> vdl::Result<Offset> {
    for _attempt in 0..100 {
        let leader = ready_leader(logs).await?;
        let s = leader.stream(STREAM).await?;
        let tail = s.read_range(Offset::new(0, *searched), u64::MAX).await?;
        let key = seq.to_string();
        if let Some(r) = tail
            .iter()
            .find(|r| r.key.as_deref() == Some(key.as_bytes()))
        {
            return Ok(r.offset);
        }
        *searched = tail.last().map_or(*searched, |r| r.offset.offset + 1);
        match s
            .append(Record::keyed(key, format!("order {seq} paid")))
            .await
        {
            Ok(at) => return Ok(at),
            Err(Error::NotLeader { .. } | Error::Busy) => {}
            Err(e @ (Error::LeaderChanged { .. } | Error::Closed | Error::Timeout(_))) => {
                println!("change {seq}: {e}; checking the new leader's log");
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::Timeout(Duration::from_secs(60)))
}

/// The example's work with data under `root`: returns the changes the tailer saw.
pub async fn run(root: &Path, changes: u64) -> vdl::Result<u64> {
    let dirs: Vec<PathBuf> = (1..=3).map(|i| root.join(format!("node{i}"))).collect();
    let logs = Log::in_process_cluster(&dirs).await?;
    let first_leader = ready_leader(&logs).await?;
    // The tailer runs on a follower, which survives the leader's death.
    let tailer_log = logs
        .iter()
        .find(|l| l.node_id() != first_leader.node_id())
        .expect("three nodes")
        .clone();
    let mut tail = tailer_log.stream(STREAM).await?.tail(Offset::start(0));
    let tailer = tokio::spawn(async move {
        let mut expected = 0u64;
        while expected < changes {
            let r = match tokio::time::timeout(Duration::from_secs(30), tail.next()).await {
                Ok(Some(r)) => r?,
                Ok(None) => return Err(Error::Closed),
                Err(_) => return Err(Error::Timeout(Duration::from_secs(30))),
            };
            let seq: u64 = std::str::from_utf8(r.key.as_deref().unwrap_or_default())
                .ok()
                .and_then(|k| k.parse().ok())
                .expect("numbered changes");
            assert_eq!(seq, expected, "the tailer sees every change once, in order");
            expected += 1;
        }
        Ok::<u64, Error>(expected)
    });
    let mut searched = 0;
    for seq in 0..changes {
        if seq == changes / 2 {
            let leader = ready_leader(&logs).await?;
            println!(
                "killing node {}, the leader, after {seq} changes",
                leader.node_id()
            );
            leader.shutdown().await;
        }
        append_once(&logs, seq, &mut searched).await?;
    }
    let seen = tailer.await.expect("the tailer task")?;
    let leader = ready_leader(&logs).await?;
    println!(
        "node {} leads now; the tailer on node {} saw {seen} changes, each once, in order",
        leader.node_id(),
        tailer_log.node_id()
    );
    for log in &logs {
        log.shutdown().await;
    }
    Ok(seen)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> vdl::Result<()> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let seen = run(dir.path(), 400).await?;
    println!("ok: {seen} changes");
    Ok(())
}
