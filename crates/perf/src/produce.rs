//! The produce workload: `threads` workers, each with its own connection to the partition
//! leader, sending Produce requests of one batch each, with up to `in_flight` requests
//! outstanding (1 = synchronous, as VDL measured), optionally at a fixed request rate.
//!
//! With `--rate`, request k of a worker is scheduled at `start + k * interval` and its latency
//! is measured from that scheduled time, so a server that falls behind shows the queueing in
//! the latency figures instead of silently lowering the offered load (coordinated omission).
//! The one exception: when the worker is on schedule and sleeps until the slot, latency starts
//! when the timer wakes it (tokio's timer has millisecond granularity).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_proto::records::Compression;
use kafka_proto::ApiKey;
use tokio::sync::mpsc;

use crate::client::{measure_rtt, protocol, ClientError, Connection, PRODUCE_VERSION};
use crate::env::{Env, PerfError};
use crate::payload::BatchSource;
use crate::progress::Progress;
use crate::stats::{RunResult, WorkerStats};

/// What to produce.
#[derive(Debug, Clone)]
pub struct ProduceConfig {
    /// Topic.
    pub topic: String,
    /// Partition; `None`: worker i writes to partition i mod the partition count.
    pub partition: Option<i32>,
    /// Records to produce in total (split over the workers).
    pub messages: u64,
    /// Bytes of each record's value.
    pub message_size: usize,
    /// Records per Produce request (one batch).
    pub batch: usize,
    /// Workers, each with its own connection.
    pub threads: usize,
    /// Requests outstanding per connection (1 = synchronous).
    pub in_flight: usize,
    /// `acks` (-1 = all in-sync replicas).
    pub acks: i16,
    /// Batch compression.
    pub compression: Compression,
    /// The run stops after this long even if not all records were produced.
    pub duration: Duration,
    /// Fixed total request rate (requests/s over all workers); `None` = as fast as possible.
    pub rate: Option<f64>,
    /// Keyed records over this many keys (`k0000`...; see `payload`); `None`: no key.
    pub keys: Option<u64>,
}

impl ProduceConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), PerfError> {
        let bad = |m: &str| Err(PerfError::Config(m.to_string()));
        if self.batch == 0 || self.threads == 0 || self.in_flight == 0 {
            return bad("--batch, --threads and --in-flight must be at least 1");
        }
        if self.message_size > 64 << 20 || self.batch > 100_000 {
            return bad("--message-size at most 64MiB and --batch at most 100000");
        }
        if !matches!(self.acks, -1..=1) {
            return bad("--acks must be -1, 0 or 1");
        }
        if self.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return bad("--rate must be a positive number of requests per second");
        }
        if self.keys == Some(0) {
            return bad("--keys must be at least 1");
        }
        Ok(())
    }

    /// The parameters that identify this run in a report.
    pub fn params(&self) -> BTreeMap<String, String> {
        let mut p = BTreeMap::new();
        p.insert("batch".into(), self.batch.to_string());
        p.insert("message_size".into(), self.message_size.to_string());
        p.insert("threads".into(), self.threads.to_string());
        p.insert("in_flight".into(), self.in_flight.to_string());
        p.insert("acks".into(), self.acks.to_string());
        p.insert(
            "compression".into(),
            format!("{:?}", self.compression).to_lowercase(),
        );
        if let Some(r) = self.rate {
            p.insert("rate".into(), format!("{r}"));
        }
        if let Some(k) = self.keys {
            p.insert("keys".into(), k.to_string());
        }
        p
    }
}

/// Measures the round-trip time against the leader of `partition` (None if it fails; the
/// failure is counted).
pub async fn leader_rtt(env: &Env, topic: &str, partition: i32) -> Option<Duration> {
    let deadline = Instant::now() + env.cluster.timeout();
    let mut on_error = |e: &ClientError| env.count_error(e);
    let attempt = async {
        let mut conn = env
            .cluster
            .connect_leader(topic, partition, deadline, &mut on_error)
            .await?;
        measure_rtt(&mut conn, 20).await
    };
    match attempt.await {
        Ok(rtt) => Some(rtt),
        Err(e) => {
            env.count_error(&e);
            None
        }
    }
}

/// Runs the produce workload and returns its figures.
pub async fn run(env: &Env, cfg: &ProduceConfig) -> Result<RunResult, PerfError> {
    cfg.validate()?;
    let partitions = env.cluster.topic(&cfg.topic).await?.leaders.len().max(1) as i32;
    let rtt = leader_rtt(env, &cfg.topic, cfg.partition.unwrap_or(0)).await;
    let cfg = Arc::new(cfg.clone());
    let progress = Progress::start(
        env.progress,
        format!("produce b{}x{}B", cfg.batch, cfg.message_size),
        env.counters.clone(),
        Some(cfg.messages),
        cfg.duration,
    );
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(cfg.threads);
    let threads = cfg.threads as u64;
    for i in 0..cfg.threads {
        let share = cfg.messages / threads + u64::from((i as u64) < cfg.messages % threads);
        let partition = cfg.partition.unwrap_or(i as i32 % partitions);
        let (env, cfg) = (env.clone(), cfg.clone());
        tasks.push(tokio::spawn(async move {
            worker(&env, &cfg, partition, share, i as u64, rtt, start).await
        }));
    }
    let mut total = WorkerStats::default();
    let mut failure = None;
    for t in tasks {
        match t.await? {
            Ok(s) => total.merge(&s),
            Err(e) => failure = Some(e),
        }
    }
    let elapsed = start.elapsed();
    progress.finish().await;
    if let Some(e) = failure {
        return Err(e.into());
    }
    Ok(RunResult::from_stats(
        "produce",
        cfg.params(),
        elapsed,
        &total,
        rtt,
        env.errors.snapshot(),
    ))
}

/// The request schedule of one worker under `--rate`.
#[derive(Debug)]
struct Schedule {
    start: Instant,
    interval: Option<Duration>,
    next: u32,
}

impl Schedule {
    /// Waits for the next request's slot and returns the time its latency is measured from;
    /// `None` if the slot is past `deadline`. Without a rate that is now. Under a rate it is the
    /// scheduled time when the worker is behind schedule (the server held it up: coordinated
    /// omission is not hidden), and the wake-up time when it slept until the slot (tokio's
    /// timer wakes up to 1 ms late; that lateness is the client's, not the server's).
    async fn next_slot(&mut self, deadline: Instant) -> Option<Instant> {
        let Some(iv) = self.interval else {
            return Some(Instant::now()).filter(|now| *now < deadline);
        };
        let at = self.start + iv * self.next;
        if at >= deadline {
            return None;
        }
        self.next += 1;
        if at <= Instant::now() {
            return Some(at);
        }
        tokio::time::sleep_until(at.into()).await;
        Some(Instant::now())
    }
}

/// One worker: connects to the leader, runs the pipeline, and on a retriable error (counted)
/// refreshes metadata and reconnects, until its records are acknowledged or time is up.
async fn worker(
    env: &Env,
    cfg: &ProduceConfig,
    partition: i32,
    records: u64,
    seed: u64,
    rtt: Option<Duration>,
    start: Instant,
) -> Result<WorkerStats, ClientError> {
    let deadline = start + cfg.duration;
    let mut source = BatchSource::new(cfg.message_size, cfg.compression, seed);
    if let Some(space) = cfg.keys {
        source = source.with_keys(space);
    }
    let mut stats = WorkerStats::default();
    let mut schedule = Schedule {
        start,
        interval: cfg
            .rate
            .map(|r| Duration::from_secs_f64(cfg.threads as f64 / r)),
        next: 0,
    };
    while stats.records < records && Instant::now() < deadline {
        let mut on_error = |e: &ClientError| env.count_error(e);
        let mut conn = match env
            .cluster
            .connect_leader(&cfg.topic, partition, deadline, &mut on_error)
            .await
        {
            Ok(c) => c,
            Err(e) if e.is_retriable() => {
                env.count_error(&e);
                break; // out of time
            }
            Err(e) => return Err(e),
        };
        let mut p = Pipeline {
            env,
            cfg,
            partition,
            target: records,
            rtt,
            deadline,
        };
        match p
            .run(&mut conn, &mut stats, &mut source, &mut schedule)
            .await
        {
            Ok(()) => break,
            Err(e) if e.is_retriable() => {
                env.count_error(&e);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => {
                env.count_error(&e);
                return Err(e);
            }
        }
    }
    Ok(stats)
}

/// A request in flight.
#[derive(Debug)]
struct Pending {
    correlation_id: i32,
    records: u64,
    wire_bytes: u64,
    since: Instant,
    /// Held until the response is read: the in-flight bound counts requests sent and not yet
    /// answered (a channel slot alone would let one more out while the receiver waits).
    _slot: tokio::sync::OwnedSemaphorePermit,
}

/// The send and receive loops of one connection.
struct Pipeline<'a> {
    env: &'a Env,
    cfg: &'a ProduceConfig,
    partition: i32,
    target: u64,
    rtt: Option<Duration>,
    deadline: Instant,
}

impl Pipeline<'_> {
    /// Sends until `target` records are acknowledged (counting from `stats.records`) or the
    /// deadline, keeping up to `in_flight` requests outstanding; returns the first error.
    async fn run(
        &mut self,
        conn: &mut Connection,
        stats: &mut WorkerStats,
        source: &mut BatchSource,
        schedule: &mut Schedule,
    ) -> Result<(), ClientError> {
        let cfg = self.cfg;
        let (tx, mut rx) = mpsc::channel::<Pending>(cfg.in_flight);
        let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(cfg.in_flight));
        let Connection {
            writer,
            reader,
            timeout,
            ..
        } = conn;
        let timeout = *timeout;
        let acks_none = cfg.acks == 0;
        let mut sent = stats.records;
        let (target, deadline, partition) = (self.target, self.deadline, self.partition);
        let counters = &self.env.counters;
        let send = async {
            while sent < target {
                let Some(since) = schedule.next_slot(deadline).await else {
                    break;
                };
                let slot = slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| ClientError::Unexpected("in-flight slots closed".into()))?;
                let permit = tx
                    .reserve()
                    .await
                    .map_err(|_| ClientError::Unexpected("receive loop ended".into()))?;
                // Without a fixed rate, a request's latency starts when it can be sent (a free
                // in-flight slot); with one, at its scheduled time, so queueing is counted.
                let since = if cfg.rate.is_none() {
                    Instant::now()
                } else {
                    since
                };
                let n = (cfg.batch as u64).min(target - sent);
                let batch = source.batch(n as usize)?;
                let req = protocol::produce(&cfg.topic, partition, cfg.acks, 30_000, batch);
                let before = writer.bytes_written();
                let correlation_id = writer.send(PRODUCE_VERSION, &req).await?;
                permit.send(Pending {
                    correlation_id,
                    records: n,
                    wire_bytes: writer.bytes_written() - before,
                    since,
                    _slot: slot,
                });
                sent += n;
            }
            drop(tx);
            Ok::<(), ClientError>(())
        };
        let rtt = self.rtt;
        let message_size = cfg.message_size as u64;
        let recv = async {
            while let Some(p) = rx.recv().await {
                if !acks_none {
                    let resp = tokio::time::timeout(
                        timeout,
                        reader.recv(p.correlation_id, ApiKey::Produce, PRODUCE_VERSION),
                    )
                    .await
                    .map_err(|_| ClientError::Timeout("Produce"))??;
                    protocol::produce_ack(resp, partition)?;
                }
                stats.record_request(p.since.elapsed(), p.records, rtt);
                stats.payload_bytes += p.records * message_size;
                stats.wire_bytes += p.wire_bytes;
                counters.add(1, p.records);
            }
            Ok::<(), ClientError>(())
        };
        tokio::try_join!(send, recv)?;
        Ok(())
    }
}
