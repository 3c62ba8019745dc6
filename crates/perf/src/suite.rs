//! The whole VDL matrix in one run, on one topic-partition:
//!
//! 1. produce: batch 1/10/25/50 x message 100/500/1024/4096 B, synchronous, acks -1 (VDL
//!    tables 1-4);
//! 2. consume: fetch 32/64/256/1024 KiB x the same message sizes, each reading records of one
//!    size written in step 1 (topped up if step 1 wrote too few) (tables 5-8);
//! 3. concurrent: produce batch 25 with consume fetch 32 KiB, and batch 50 with 256 KiB, per
//!    message size (tables 8-11);
//! 4. latency vs offered load: produce at fixed rates around the synchronous rate, pipelined;
//! 5. optionally the read/write ratio mixes and a thread sweep.
//!
//! A cell that fails is recorded with a `RUN_FAILED` error and the suite goes on.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_proto::records::Compression;

use crate::consume::{self, ConsumeConfig};
use crate::env::{Env, PerfError};
use crate::mixed::{self, RatioConfig, ReadMode};
use crate::produce::{self, ProduceConfig};
use crate::stats::RunResult;
use crate::sweep;
use crate::units::{Ratio, StartOffset};

/// The suite's sizes.
#[derive(Debug, Clone)]
pub struct SuiteConfig {
    /// Topic (one partition is used: 0).
    pub topic: String,
    /// Records per produce request.
    pub batches: Vec<usize>,
    /// Record value sizes.
    pub message_sizes: Vec<usize>,
    /// Fetch sizes (`partition_max_bytes`).
    pub fetch_sizes: Vec<usize>,
    /// Length of each cell.
    pub cell_duration: Duration,
    /// Unmeasured produce load before the first cell (JIT and page-cache warm-up).
    pub warmup: Duration,
    /// Records per produce cell at most.
    pub produce_messages: u64,
    /// Records per consume cell at most.
    pub consume_messages: u64,
    /// Bytes per consume cell at most (caps `consume_messages` for large records).
    pub consume_max_bytes: u64,
    /// Concurrent scenarios: (produce batch, consume fetch size).
    pub scenarios: Vec<(usize, usize)>,
    /// Offered loads, as multiples of the synchronous request rate of `load_shape`.
    pub load_factors: Vec<f64>,
    /// (batch, message size) of the load curve.
    pub load_shape: (usize, usize),
    /// Requests in flight allowed during the load curve.
    pub load_in_flight: usize,
    /// Read/write mixes to run (empty: none).
    pub ratios: Vec<Ratio>,
    /// Workers of the mixes.
    pub ratio_threads: usize,
    /// Where the mixes' reads fetch.
    pub read_mode: ReadMode,
    /// Thread counts of a sweep (empty: none).
    pub sweep_threads: Vec<usize>,
}

impl Default for SuiteConfig {
    fn default() -> SuiteConfig {
        SuiteConfig {
            topic: "vdl-perf".into(),
            batches: vec![1, 10, 25, 50],
            message_sizes: vec![100, 500, 1024, 4096],
            fetch_sizes: vec![32 << 10, 64 << 10, 256 << 10, 1 << 20],
            cell_duration: Duration::from_secs(2),
            warmup: Duration::from_secs(3),
            produce_messages: 1_000_000,
            consume_messages: 200_000,
            consume_max_bytes: 64 << 20,
            scenarios: vec![(25, 32 << 10), (50, 256 << 10)],
            load_factors: vec![0.25, 0.5, 0.75, 1.0, 1.5, 2.0],
            load_shape: (1, 1024),
            load_in_flight: 32,
            ratios: Vec::new(),
            ratio_threads: 4,
            read_mode: ReadMode::CatchUp,
            sweep_threads: Vec::new(),
        }
    }
}

impl SuiteConfig {
    fn produce(&self, batch: usize, size: usize) -> ProduceConfig {
        ProduceConfig {
            topic: self.topic.clone(),
            partition: Some(0),
            messages: self.produce_messages,
            message_size: size,
            batch,
            threads: 1,
            in_flight: 1,
            acks: -1,
            compression: Compression::None,
            duration: self.cell_duration,
            rate: None,
            keys: None,
        }
    }

    fn consume(&self, fetch_size: usize, from: i64, messages: u64) -> ConsumeConfig {
        ConsumeConfig {
            topic: self.topic.clone(),
            partition: Some(0),
            threads: 1,
            from: StartOffset::Offset(from),
            messages: Some(messages),
            fetch_size,
            max_wait_ms: 100,
            duration: self.cell_duration,
            verify_crc: false,
        }
    }
}

/// A cell that could not run: its parameters and a `RUN_FAILED` error.
fn failed(kind: &str, params: BTreeMap<String, String>, e: &PerfError) -> RunResult {
    eprintln!("vdl-perf suite: {kind} {params:?} failed: {e}");
    let mut errors = BTreeMap::new();
    errors.insert("RUN_FAILED".to_string(), 1);
    RunResult {
        kind: kind.to_string(),
        params,
        errors,
        ..RunResult::default()
    }
}

async fn end(env: &Env, cfg: &SuiteConfig) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    match mixed::end_offset(env, &cfg.topic, 0, deadline).await {
        i64::MAX => 0,
        o => o,
    }
}

/// Runs the suite; `on_cell` is told about every finished cell (for live output).
pub async fn run(
    env: &Env,
    cfg: &SuiteConfig,
    on_cell: &mut (dyn FnMut(&RunResult) + Send),
) -> Result<Vec<RunResult>, PerfError> {
    let mut out: Vec<RunResult> = Vec::new();
    let mut push = |r: RunResult, out: &mut Vec<RunResult>| {
        on_cell(&r);
        out.push(r);
    };
    env.cluster.topic(&cfg.topic).await?;
    if !cfg.warmup.is_zero() {
        let mut w = cfg.produce(10, 1024);
        w.duration = cfg.warmup;
        w.in_flight = 4;
        produce::run(&env.fresh(), &w).await?;
    }

    // 1 and 2: produce cells, then consume cells over what they wrote.
    for &size in &cfg.message_sizes {
        let start = end(env, cfg).await;
        for &batch in &cfg.batches {
            let p = cfg.produce(batch, size);
            let r = match produce::run(&env.fresh(), &p).await {
                Ok(r) => r,
                Err(e) => failed("produce", p.params(), &e),
            };
            push(r, &mut out);
        }
        let wanted = cfg
            .consume_messages
            .min(cfg.consume_max_bytes / size.max(1) as u64)
            .max(1);
        let mut have = (end(env, cfg).await - start).max(0) as u64;
        if have < wanted {
            let mut fill = cfg.produce(50, size);
            fill.messages = wanted - have;
            fill.in_flight = 8;
            fill.duration = cfg.cell_duration * 10;
            if let Err(e) = produce::run(&env.fresh(), &fill).await {
                eprintln!("vdl-perf suite: topping up {size} B records failed: {e}");
            }
            have = (end(env, cfg).await - start).max(0) as u64;
        }
        for &fetch in &cfg.fetch_sizes {
            let c = cfg.consume(fetch, start, wanted.min(have));
            let r = match consume::run(&env.fresh(), &c).await {
                Ok(mut r) => {
                    r.params.insert("message_size".into(), size.to_string());
                    r
                }
                Err(e) => {
                    let mut p = c.params();
                    p.insert("message_size".into(), size.to_string());
                    failed("consume", p, &e)
                }
            };
            push(r, &mut out);
        }
    }

    // 3: concurrent scenarios.
    for (i, &(batch, fetch)) in cfg.scenarios.iter().enumerate() {
        for &size in &cfg.message_sizes {
            let p = cfg.produce(batch, size);
            let c = cfg.consume(fetch, 0, 0);
            let scenario = (i + 1).to_string();
            match mixed::run_concurrent(&env.fresh(), &p, &c).await {
                Ok((mut w, mut r)) => {
                    w.params.insert("scenario".into(), scenario.clone());
                    r.params.insert("scenario".into(), scenario);
                    push(w, &mut out);
                    push(r, &mut out);
                }
                Err(e) => {
                    let mut params = p.params();
                    params.insert("scenario".into(), scenario);
                    params.insert("fetch_size".into(), fetch.to_string());
                    push(failed("mixed-write", params, &e), &mut out);
                }
            }
        }
    }

    // 4: latency vs offered load, around the synchronous rate of the load shape.
    let (lb, ls) = cfg.load_shape;
    let sync_rate = out
        .iter()
        .find(|r| {
            r.kind == "produce"
                && r.param("batch") == lb.to_string()
                && r.param("message_size") == ls.to_string()
        })
        .map(|r| r.requests_per_s)
        .filter(|r| *r > 0.0);
    if let Some(sync_rate) = sync_rate {
        for &f in &cfg.load_factors {
            let mut p = cfg.produce(lb, ls);
            p.rate = Some((sync_rate * f).max(1.0));
            p.in_flight = cfg.load_in_flight;
            let mut r = match produce::run(&env.fresh(), &p).await {
                Ok(r) => r,
                Err(e) => failed("load", p.params(), &e),
            };
            r.kind = "load".into();
            r.params.insert("load_factor".into(), format!("{f}"));
            push(r, &mut out);
        }
    }

    // 5: read/write mixes and the thread sweep, if asked for.
    for &ratio in &cfg.ratios {
        let rc = RatioConfig {
            topic: cfg.topic.clone(),
            partition: 0,
            threads: cfg.ratio_threads,
            ratio,
            read_mode: cfg.read_mode,
            message_size: 1024,
            batch: 10,
            fetch_size: 64 << 10,
            duration: cfg.cell_duration,
            preload: 10_000,
        };
        match mixed::run_ratio(&env.fresh(), &rc).await {
            Ok((r, w)) => {
                push(r, &mut out);
                push(w, &mut out);
            }
            Err(e) => {
                let mut p = BTreeMap::new();
                p.insert("ratio".to_string(), ratio.to_string());
                push(failed("ratio-write", p, &e), &mut out);
            }
        }
    }
    if !cfg.sweep_threads.is_empty() {
        let base = cfg.produce(5, 200);
        match sweep::run(env, &base, &cfg.sweep_threads, cfg.produce_messages).await {
            Ok(rs) => rs.into_iter().for_each(|r| push(r, &mut out)),
            Err(e) => push(failed("sweep", base.params(), &e), &mut out),
        }
    }
    Ok(out)
}
