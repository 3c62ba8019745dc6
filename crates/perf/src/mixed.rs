//! Reading and writing at the same time, two ways:
//!
//! - [`run_concurrent`]: VDL's tables 8-11. Producers run as in [`crate::produce`] while
//!   consumers, started at the log end, read what they write until they reach the end offset
//!   the producers left.
//! - [`run_ratio`]: the Pegasus report's read/write mixes (1:0, 0:1, 1:1, 1:3, 3:1, 30:1).
//!   Each worker does one operation at a time on its own connection, a read with probability
//!   R/(R+W), else a write of one batch. A read is a Fetch either at a random earlier offset
//!   (catch-up read) or of the newest batch (tailing read).

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, Instant};

use kafka_proto::records::Compression;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::client::{protocol, ClientError, Connection, FETCH_VERSION, PRODUCE_VERSION};
use crate::consume::{self, ConsumeConfig, Consumer};
use crate::env::{Env, PerfError};
use crate::payload::BatchSource;
use crate::produce::{self, leader_rtt, ProduceConfig};
use crate::progress::Progress;
use crate::stats::{RunResult, WorkerStats};
use crate::units::{ParseError, Ratio, StartOffset};

/// Runs producers and tailing consumers together; returns (write, read) results, of kinds
/// `mixed-write` and `mixed-read`. The consumers' `from` and `messages` are ignored: they start
/// at the end of the log and stop when they have read everything the producers wrote (or at
/// their duration plus 10 s).
pub async fn run_concurrent(
    env: &Env,
    pcfg: &ProduceConfig,
    ccfg: &ConsumeConfig,
) -> Result<(RunResult, RunResult), PerfError> {
    let (penv, cenv) = (env.fresh(), env.fresh());
    let partitions = env.cluster.topic(&pcfg.topic).await?.leaders.len().max(1) as i32;
    let mut ccfg = ccfg.clone();
    ccfg.from = StartOffset::Latest;
    ccfg.messages = None;
    let rtt = leader_rtt(&cenv, &ccfg.topic, ccfg.partition.unwrap_or(0)).await;
    let (stop_tx, stop_rx) = watch::channel(None);
    let start = Instant::now();
    let deadline = start + ccfg.duration.max(pcfg.duration) + Duration::from_secs(10);
    let mut consumers = Vec::new();
    for i in 0..ccfg.threads {
        let partition = ccfg.partition.unwrap_or(i as i32 % partitions);
        let range = consume::resolve_range(&cenv, &ccfg, partition, deadline).await?;
        let (cenv, ccfg, stop) = (cenv.clone(), ccfg.clone(), stop_rx.clone());
        consumers.push(tokio::spawn(async move {
            let mut c = Consumer::new(&cenv, &ccfg, partition, range, rtt);
            c.run(deadline, Some(stop)).await?;
            Ok::<_, ClientError>((c.stats, c.last_data_at.unwrap_or_else(Instant::now)))
        }));
    }
    let write = produce::run(&penv, pcfg).await;
    // Tell the consumers where the log ends now (or stop them at once if producing failed).
    let end = match &write {
        Ok(_) => end_offset(&cenv, &ccfg.topic, ccfg.partition.unwrap_or(0), deadline).await,
        Err(_) => 0,
    };
    let _ = stop_tx.send(Some(end));
    let mut total = WorkerStats::default();
    let mut finished = start;
    let mut failure = None;
    for c in consumers {
        match c.await? {
            Ok((s, at)) => {
                total.merge(&s);
                finished = finished.max(at);
            }
            Err(e) => failure = Some(e),
        }
    }
    let mut write = write?;
    write.kind = "mixed-write".into();
    if let Some(e) = failure {
        return Err(e.into());
    }
    let mut params = ccfg.params();
    params.insert("message_size".into(), pcfg.message_size.to_string());
    params.insert("batch".into(), pcfg.batch.to_string());
    let read = RunResult::from_stats(
        "mixed-read",
        params,
        finished.duration_since(start),
        &total,
        rtt,
        cenv.errors.snapshot(),
    );
    write
        .params
        .insert("fetch_size".into(), ccfg.fetch_size.to_string());
    Ok((write, read))
}

/// The high watermark of a partition (errors counted; `i64::MAX` if it cannot be found, which
/// lets consumers run to their deadline).
pub async fn end_offset(env: &Env, topic: &str, partition: i32, deadline: Instant) -> i64 {
    let mut on_error = |e: &ClientError| env.count_error(e);
    let attempt = async {
        let mut conn = env
            .cluster
            .connect_leader(topic, partition, deadline, &mut on_error)
            .await?;
        consume::list_offset(&mut conn, topic, partition, protocol::LATEST_TIMESTAMP).await
    };
    match attempt.await {
        Ok(o) => o,
        Err(e) => {
            env.count_error(&e);
            i64::MAX
        }
    }
}

/// Where a read of the ratio workload fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// A random offset between the log start and the end (data a lagging consumer reads).
    CatchUp,
    /// The newest batch (what a consumer just behind the producers reads).
    Tail,
}

impl FromStr for ReadMode {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<ReadMode, ParseError> {
        match s {
            "catchup" | "catch-up" => Ok(ReadMode::CatchUp),
            "tail" | "tailing" => Ok(ReadMode::Tail),
            _ => Err(ParseError {
                what: "read mode",
                input: s.to_string(),
                why: "use catchup or tail",
            }),
        }
    }
}

impl ReadMode {
    /// `catchup` or `tail`.
    pub fn name(self) -> &'static str {
        match self {
            ReadMode::CatchUp => "catchup",
            ReadMode::Tail => "tail",
        }
    }
}

/// The ratio workload.
#[derive(Debug, Clone)]
pub struct RatioConfig {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Workers (connections).
    pub threads: usize,
    /// Read:write weights.
    pub ratio: Ratio,
    /// Where reads fetch.
    pub read_mode: ReadMode,
    /// Bytes per record written.
    pub message_size: usize,
    /// Records per write.
    pub batch: usize,
    /// `partition_max_bytes` of reads.
    pub fetch_size: usize,
    /// Length of the run.
    pub duration: Duration,
    /// Records the log must hold before reads start (written first, not measured).
    pub preload: u64,
}

/// Runs the read/write mix; returns (read, write) results of kinds `ratio-read` and
/// `ratio-write` (an operation kind that did not run has zero requests).
pub async fn run_ratio(env: &Env, cfg: &RatioConfig) -> Result<(RunResult, RunResult), PerfError> {
    if cfg.threads == 0 || cfg.batch == 0 || cfg.fetch_size == 0 {
        return Err(PerfError::Config(
            "--threads, --batch, --fetch-size >= 1".into(),
        ));
    }
    let deadline_preload = Instant::now() + Duration::from_secs(120);
    let end = end_offset(env, &cfg.topic, cfg.partition, deadline_preload).await;
    if end < cfg.preload as i64 && cfg.ratio.reads > 0 {
        let fill = ProduceConfig {
            topic: cfg.topic.clone(),
            partition: Some(cfg.partition),
            messages: cfg.preload - end.max(0) as u64,
            message_size: cfg.message_size,
            batch: 50,
            threads: 1,
            in_flight: 8,
            acks: -1,
            compression: Compression::None,
            duration: Duration::from_secs(60),
            rate: None,
            keys: None,
        };
        produce::run(&env.fresh(), &fill).await?;
    }
    let rtt = leader_rtt(env, &cfg.topic, cfg.partition).await;
    let progress = Progress::start(
        env.progress,
        format!("mix {} {}", cfg.ratio, cfg.read_mode.name()),
        env.counters.clone(),
        None,
        cfg.duration,
    );
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..cfg.threads {
        let (env, cfg) = (env.clone(), cfg.clone());
        tasks.push(tokio::spawn(async move {
            ratio_worker(&env, &cfg, i as u64, start + cfg.duration, rtt).await
        }));
    }
    let (mut reads, mut writes) = (WorkerStats::default(), WorkerStats::default());
    for t in tasks {
        let (r, w) = t.await??;
        reads.merge(&r);
        writes.merge(&w);
    }
    let elapsed = start.elapsed();
    progress.finish().await;
    let mut params = BTreeMap::new();
    params.insert("ratio".to_string(), cfg.ratio.to_string());
    params.insert("read_mode".to_string(), cfg.read_mode.name().to_string());
    params.insert("threads".to_string(), cfg.threads.to_string());
    params.insert("batch".to_string(), cfg.batch.to_string());
    params.insert("message_size".to_string(), cfg.message_size.to_string());
    params.insert("fetch_size".to_string(), cfg.fetch_size.to_string());
    let errors = env.errors.snapshot();
    Ok((
        RunResult::from_stats(
            "ratio-read",
            params.clone(),
            elapsed,
            &reads,
            rtt,
            errors.clone(),
        ),
        RunResult::from_stats("ratio-write", params, elapsed, &writes, rtt, errors),
    ))
}

/// One worker of the mix: operations one at a time until `deadline`.
async fn ratio_worker(
    env: &Env,
    cfg: &RatioConfig,
    seed: u64,
    deadline: Instant,
    rtt: Option<Duration>,
) -> Result<(WorkerStats, WorkerStats), ClientError> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut source = BatchSource::new(cfg.message_size, Compression::None, seed);
    let (mut reads, mut writes) = (WorkerStats::default(), WorkerStats::default());
    let share = cfg.ratio.read_share();
    let mut log_end: i64 = -1;
    while Instant::now() < deadline {
        let mut on_error = |e: &ClientError| env.count_error(e);
        let mut conn = match env
            .cluster
            .connect_leader(&cfg.topic, cfg.partition, deadline, &mut on_error)
            .await
        {
            Ok(c) => c,
            Err(e) if e.is_retriable() => {
                env.count_error(&e);
                break;
            }
            Err(e) => return Err(e),
        };
        if log_end < 0 {
            log_end = consume::list_offset(
                &mut conn,
                &cfg.topic,
                cfg.partition,
                protocol::LATEST_TIMESTAMP,
            )
            .await?;
        }
        let result: Result<(), ClientError> = async {
            while Instant::now() < deadline {
                if rng.gen_bool(share) && log_end > 0 {
                    let offset = match cfg.read_mode {
                        ReadMode::CatchUp => rng.gen_range(0..log_end),
                        ReadMode::Tail => (log_end - cfg.batch as i64).max(0),
                    };
                    let (t, n, payload, hw) = read_once(&mut conn, cfg, offset).await?;
                    log_end = log_end.max(hw);
                    reads.record_request(t, n, rtt);
                    reads.payload_bytes += payload;
                    env.counters.add(1, n);
                } else if cfg.ratio.writes > 0 {
                    let batch = source.batch(cfg.batch)?;
                    let req = protocol::produce(&cfg.topic, cfg.partition, -1, 30_000, batch);
                    let t0 = Instant::now();
                    let resp = conn.request(PRODUCE_VERSION, &req).await?;
                    let ack = protocol::produce_ack(resp, cfg.partition)?;
                    writes.record_request(t0.elapsed(), cfg.batch as u64, rtt);
                    writes.payload_bytes += (cfg.batch * cfg.message_size) as u64;
                    log_end = log_end.max(ack.base_offset + cfg.batch as i64);
                    env.counters.add(1, cfg.batch as u64);
                } else {
                    // Reads only, and the log is empty: nothing to do.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => break,
            Err(e) if e.is_retriable() => env.count_error(&e),
            Err(e) => {
                env.count_error(&e);
                return Err(e);
            }
        }
    }
    Ok((reads, writes))
}

/// One Fetch at `offset`: (latency, records at or after it, their value bytes, high watermark).
async fn read_once(
    conn: &mut Connection,
    cfg: &RatioConfig,
    offset: i64,
) -> Result<(Duration, u64, u64, i64), ClientError> {
    let spec = protocol::FetchSpec {
        offset,
        partition_max_bytes: cfg.fetch_size as i32,
        max_wait_ms: 100,
        min_bytes: 1,
    };
    let req = protocol::fetch(&cfg.topic, cfg.partition, spec);
    let t0 = Instant::now();
    let resp = conn.request(FETCH_VERSION, &req).await?;
    let t = t0.elapsed();
    let data = protocol::fetched(resp, cfg.partition)?;
    let acc = crate::verify::OffsetChecker::new(offset, false)
        .accept(data.records)
        .map_err(|e| ClientError::Unexpected(e.to_string()))?;
    Ok((t, acc.records, acc.payload_bytes, data.high_watermark))
}
