//! The thread sweep of the replicated-store report: the same synchronous produce workload with
//! 1, 2, ... N writer threads; per thread count the throughput, min/avg/max latency and the
//! share of requests in each latency bucket (see [`crate::stats::BUCKET_LABELS`]).

use crate::env::{Env, PerfError};
use crate::produce::{self, ProduceConfig};
use crate::stats::RunResult;

/// Runs `base` once per thread count, each thread producing `messages_per_thread` records
/// (or until `base.duration`); results are of kind `sweep`.
pub async fn run(
    env: &Env,
    base: &ProduceConfig,
    threads: &[usize],
    messages_per_thread: u64,
) -> Result<Vec<RunResult>, PerfError> {
    let mut out = Vec::with_capacity(threads.len());
    for &t in threads {
        let cfg = ProduceConfig {
            threads: t,
            messages: messages_per_thread.saturating_mul(t as u64),
            ..base.clone()
        };
        let mut r = produce::run(&env.fresh(), &cfg).await?;
        r.kind = "sweep".into();
        out.push(r);
    }
    Ok(out)
}
