//! The consume workload: `threads` independent consumers, each reading one partition from a
//! start offset with Fetch requests of `partition_max_bytes = fetch_size` (VDL's
//! `fetch.message.max.bytes`), one request at a time, checking that offsets arrive dense and in
//! order (a gap is an error).
//!
//! Latency is per Fetch that returned records; fetches that returned nothing (the consumer
//! caught up with the producers and the server waited `max_wait_ms`) are only counted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{protocol, ClientError, Connection, FETCH_VERSION, LIST_OFFSETS_VERSION};
use crate::env::{Env, PerfError};
use crate::produce::leader_rtt;
use crate::progress::Progress;
use crate::stats::{RunResult, WorkerStats};
use crate::units::StartOffset;
use crate::verify::OffsetChecker;

/// What to consume.
#[derive(Debug, Clone)]
pub struct ConsumeConfig {
    /// Topic.
    pub topic: String,
    /// Partition; `None`: consumer i reads partition i mod the partition count.
    pub partition: Option<i32>,
    /// Consumers, each with its own connection, each reading the whole range.
    pub threads: usize,
    /// Where each consumer starts.
    pub from: StartOffset,
    /// Records each consumer reads; `None`: up to the high watermark seen at the start (or,
    /// from `latest`, until the duration ends).
    pub messages: Option<u64>,
    /// `partition_max_bytes` of each Fetch.
    pub fetch_size: usize,
    /// `max_wait_ms` of each Fetch.
    pub max_wait_ms: i32,
    /// The run stops after this long.
    pub duration: Duration,
    /// Check every batch's CRC-32C.
    pub verify_crc: bool,
}

impl ConsumeConfig {
    /// The parameters that identify this run in a report.
    pub fn params(&self) -> BTreeMap<String, String> {
        let mut p = BTreeMap::new();
        p.insert("fetch_size".into(), self.fetch_size.to_string());
        p.insert("threads".into(), self.threads.to_string());
        p
    }
}

/// Runs the consume workload.
pub async fn run(env: &Env, cfg: &ConsumeConfig) -> Result<RunResult, PerfError> {
    if cfg.threads == 0 || cfg.fetch_size == 0 || cfg.fetch_size > i32::MAX as usize {
        return Err(PerfError::Config(
            "--threads >= 1 and 1 <= --fetch-size < 2GiB".into(),
        ));
    }
    let partitions = env.cluster.topic(&cfg.topic).await?.leaders.len().max(1) as i32;
    let rtt = leader_rtt(env, &cfg.topic, cfg.partition.unwrap_or(0)).await;
    let cfg = Arc::new(cfg.clone());
    let progress = Progress::start(
        env.progress,
        format!("consume {}B fetches", cfg.fetch_size),
        env.counters.clone(),
        cfg.messages.map(|m| m * cfg.threads as u64),
        cfg.duration,
    );
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..cfg.threads {
        let partition = cfg.partition.unwrap_or(i as i32 % partitions);
        let (env, cfg) = (env.clone(), cfg.clone());
        tasks.push(tokio::spawn(async move {
            let range = resolve_range(&env, &cfg, partition, start + cfg.duration).await?;
            let mut c = Consumer::new(&env, &cfg, partition, range, rtt);
            c.run(start + cfg.duration, None).await?;
            Ok::<_, ClientError>((c.stats, c.last_data_at))
        }));
    }
    let mut total = WorkerStats::default();
    let mut failure = None;
    let mut last_data = None;
    for t in tasks {
        match t.await? {
            Ok((s, at)) => {
                total.merge(&s);
                last_data = last_data.max(at);
            }
            Err(e) => failure = Some(e),
        }
    }
    // Throughput over the time records were arriving: a consumer that waits at the end of the
    // log for records that never come does not dilute it.
    let elapsed = last_data.map_or_else(|| start.elapsed(), |t| t.duration_since(start));
    progress.finish().await;
    if let Some(e) = failure {
        return Err(e.into());
    }
    let mut params = cfg.params();
    if let Some(avg) = total.payload_bytes.checked_div(total.records) {
        params.insert("message_size".into(), avg.to_string());
    }
    Ok(RunResult::from_stats(
        "consume",
        params,
        elapsed,
        &total,
        rtt,
        env.errors.snapshot(),
    ))
}

/// The offsets one consumer reads: from `start`, `records` records or up to offset `end`
/// (neither: until stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRange {
    /// First offset.
    pub start: i64,
    /// Records to read.
    pub records: Option<u64>,
    /// Offset to stop at (exclusive).
    pub end: Option<i64>,
}

/// Asks the leader (ListOffsets) where `earliest`/`latest` are and how far the log goes.
pub async fn resolve_range(
    env: &Env,
    cfg: &ConsumeConfig,
    partition: i32,
    deadline: Instant,
) -> Result<ReadRange, ClientError> {
    let mut on_error = |e: &ClientError| env.count_error(e);
    let mut conn = env
        .cluster
        .connect_leader(&cfg.topic, partition, deadline, &mut on_error)
        .await?;
    let start = match cfg.from {
        StartOffset::Offset(o) => o,
        StartOffset::Earliest => {
            list_offset(
                &mut conn,
                &cfg.topic,
                partition,
                protocol::EARLIEST_TIMESTAMP,
            )
            .await?
        }
        StartOffset::Latest => {
            list_offset(&mut conn, &cfg.topic, partition, protocol::LATEST_TIMESTAMP).await?
        }
    };
    let end = match (cfg.messages, cfg.from) {
        (None, StartOffset::Earliest | StartOffset::Offset(_)) => {
            Some(list_offset(&mut conn, &cfg.topic, partition, protocol::LATEST_TIMESTAMP).await?)
        }
        _ => None,
    };
    Ok(ReadRange {
        start,
        records: cfg.messages,
        end,
    })
}

/// One ListOffsets round trip.
pub async fn list_offset(
    conn: &mut Connection,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> Result<i64, ClientError> {
    let resp = conn
        .request(
            LIST_OFFSETS_VERSION,
            &protocol::list_offsets(topic, partition, timestamp),
        )
        .await?;
    protocol::listed_offset(resp, partition)
}

/// One consumer's loop, also used by the mixed workload.
pub struct Consumer<'a> {
    env: &'a Env,
    cfg: &'a ConsumeConfig,
    partition: i32,
    range: ReadRange,
    checker: OffsetChecker,
    rtt: Option<Duration>,
    /// What it measured.
    pub stats: WorkerStats,
    /// When the last records arrived.
    pub last_data_at: Option<Instant>,
}

impl<'a> Consumer<'a> {
    /// A consumer of `range` of `partition`.
    pub fn new(
        env: &'a Env,
        cfg: &'a ConsumeConfig,
        partition: i32,
        range: ReadRange,
        rtt: Option<Duration>,
    ) -> Consumer<'a> {
        Consumer {
            env,
            cfg,
            partition,
            range,
            checker: OffsetChecker::new(range.start, cfg.verify_crc),
            rtt,
            stats: WorkerStats::default(),
            last_data_at: None,
        }
    }

    fn done(&self, stop: Option<&tokio::sync::watch::Receiver<Option<i64>>>) -> bool {
        if self.range.records.is_some_and(|n| self.stats.records >= n)
            || self
                .range
                .end
                .is_some_and(|e| self.checker.next_offset() >= e)
        {
            return true;
        }
        // In the mixed workload the producers publish the end offset when they finish.
        stop.and_then(|s| *s.borrow())
            .is_some_and(|end| self.checker.next_offset() >= end)
    }

    /// Reads until the range is read, `deadline` passes, or (mixed workload) the offset
    /// published on `stop` is reached. Retriable errors (counted) reconnect to the leader.
    pub async fn run(
        &mut self,
        deadline: Instant,
        stop: Option<tokio::sync::watch::Receiver<Option<i64>>>,
    ) -> Result<(), ClientError> {
        while !self.done(stop.as_ref()) && Instant::now() < deadline {
            let mut on_error = |e: &ClientError| self.env.count_error(e);
            let mut conn = match self
                .env
                .cluster
                .connect_leader(&self.cfg.topic, self.partition, deadline, &mut on_error)
                .await
            {
                Ok(c) => c,
                Err(e) if e.is_retriable() => {
                    self.env.count_error(&e);
                    break;
                }
                Err(e) => return Err(e),
            };
            match self.fetch_loop(&mut conn, deadline, stop.as_ref()).await {
                Ok(()) => break,
                Err(e) if e.is_retriable() => {
                    self.env.count_error(&e);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => {
                    self.env.count_error(&e);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    async fn fetch_loop(
        &mut self,
        conn: &mut Connection,
        deadline: Instant,
        stop: Option<&tokio::sync::watch::Receiver<Option<i64>>>,
    ) -> Result<(), ClientError> {
        while !self.done(stop) && Instant::now() < deadline {
            let spec = protocol::FetchSpec {
                offset: self.checker.next_offset(),
                partition_max_bytes: self.cfg.fetch_size as i32,
                max_wait_ms: self.cfg.max_wait_ms,
                min_bytes: 1,
            };
            let req = protocol::fetch(&self.cfg.topic, self.partition, spec);
            let before = conn.reader.bytes_read();
            let t0 = Instant::now();
            let resp = conn.request(FETCH_VERSION, &req).await?;
            let elapsed = t0.elapsed();
            let wire = conn.reader.bytes_read() - before;
            let data = protocol::fetched(resp, self.partition)?;
            let acc = self
                .checker
                .accept(data.records)
                .map_err(|e| ClientError::Unexpected(e.to_string()))?;
            if acc.gaps > 0 {
                self.env.count_error_kind("OFFSET_GAP", acc.gaps);
            }
            if acc.out_of_order > 0 {
                self.env.count_error_kind("OUT_OF_ORDER", acc.out_of_order);
            }
            self.stats.wire_bytes += wire;
            if acc.records == 0 {
                self.stats.empty_fetches += 1;
                continue;
            }
            let mut records = acc.records;
            if let Some(n) = self.range.records {
                // Count no more than asked for (the last fetch may bring more).
                records = records.min(n - self.stats.records.min(n));
            }
            self.last_data_at = Some(Instant::now());
            self.stats.record_request(elapsed, records, self.rtt);
            self.stats.payload_bytes += acc.payload_bytes * records / acc.records;
            self.env.counters.add(1, records);
        }
        Ok(())
    }
}
