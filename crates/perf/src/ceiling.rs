//! The client's own ceiling: the standard workloads against the in-process
//! [`FakeServer`](crate::fake_server::FakeServer), which does no work, so the figures are what
//! the client (and the loopback) can do on this machine.

use std::time::Duration;

use kafka_proto::records::Compression;

use crate::consume::{self, ConsumeConfig};
use crate::env::{Env, PerfError};
use crate::fake_server::FakeServer;
use crate::produce::{self, ProduceConfig};
use crate::progress::ProgressMode;
use crate::stats::RunResult;
use crate::units::StartOffset;

/// Marks a result as a ceiling measurement (kind `ceiling`, parameter `workload`).
fn tag(mut r: RunResult, workload: &str) -> RunResult {
    r.kind = "ceiling".into();
    r.params.insert("workload".into(), workload.into());
    r
}

/// Produce batch 1 and 50 x 1 KiB and 50 x 4 KiB (synchronous, and 50 x 1 KiB with 8 in
/// flight), then consume the 1 KiB records with 32 KiB and 1 MiB fetches, each for up to
/// `duration`.
pub async fn run(duration: Duration, progress: ProgressMode) -> Result<Vec<RunResult>, PerfError> {
    let server = FakeServer::start("127.0.0.1:0", 1).await?;
    let bootstrap = server.addr().to_string();
    let base = Env::new(&bootstrap, Duration::from_secs(10), progress);
    let mut results = Vec::new();
    let cells: [(&str, usize, usize, usize); 5] = [
        ("ceiling-1k", 1, 1024, 1),
        ("ceiling-1k", 50, 1024, 1),
        ("ceiling-1k", 50, 1024, 8),
        ("ceiling-4k", 50, 4096, 1),
        ("ceiling-1k", 1, 1024, 8),
    ];
    for (topic, batch, size, in_flight) in cells {
        let cfg = ProduceConfig {
            topic: topic.into(),
            partition: Some(0),
            messages: 50_000_000,
            message_size: size,
            batch,
            threads: 1,
            in_flight,
            acks: -1,
            compression: Compression::None,
            duration,
            rate: None,
            keys: None,
        };
        results.push(tag(produce::run(&base.fresh(), &cfg).await?, "produce"));
    }
    for fetch_size in [32 << 10, 1 << 20] {
        let cfg = ConsumeConfig {
            topic: "ceiling-1k".into(),
            partition: Some(0),
            threads: 1,
            from: StartOffset::Earliest,
            messages: None,
            fetch_size,
            max_wait_ms: 100,
            duration,
            verify_crc: false,
        };
        results.push(tag(consume::run(&base.fresh(), &cfg).await?, "consume"));
    }
    server.stop();
    Ok(results)
}
