//! Runs the verify workload against a cluster and returns its [`History`]:
//! - producers, each with one request in flight, send unique values `p<producer>-<seq>`
//!   (one record per Produce, acks=all) round-robin over the partitions and record the
//!   acknowledged offset, or the error as an unknown outcome (then reconnect to the leader).
//!   Idempotent producers ([`VerifyConfig::idempotent`]) get a producer id, number their
//!   batches per partition, and on an unknown outcome send the same batch again (as the Java
//!   client does) until it is answered or [`DELIVERY_TIMEOUT_REQUESTS`] request timeouts pass;
//! - consumers (assign mode: each consumer tails every partition from the log start, one
//!   task per partition) record every record they poll, in poll order, until the producers
//!   stop and they have reached the high watermark seen then (or a drain deadline);
//! - group members ([`super::group`]) share the partitions through a consumer group,
//!   committing as they poll;
//! - a final read of every partition from the log start to the high watermark, and the
//!   group's committed offsets.
//!
//! Bounded: the run's duration, one request in flight per producer and per tailer, at most
//! `max_records` sends in all and `max_records` polled records per tailer.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_proto::records::{split_batches_lenient, Compression, RecordBatchBuilder};
use thiserror::Error;

use super::group::{self, Drain};
use super::history::{FinalBound, History, Poll, Read, RunInfo, Send, SendOutcome};
use super::isolation::committed_records;
use crate::client::coordinator;
use crate::client::protocol::{self, FetchSpec, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use crate::client::txn::{self as txn_client, READ_COMMITTED, READ_UNCOMMITTED};
use crate::client::{
    ClientError, Cluster, Connection, FETCH_VERSION, LIST_OFFSETS_VERSION, PRODUCE_VERSION,
};
use kafka_proto::error_code::ErrorCode;

/// The most one compressed batch may decompress to.
pub(super) const MAX_DECOMPRESSED: usize = 64 << 20;
/// Bytes asked for per partition in one Fetch.
pub(super) const FETCH_BYTES: i32 = 1 << 20;
/// How long the final read of a partition may go without progress before the run fails.
const FINAL_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the final read of a transactional run waits, past the transaction timeout, for
/// a partition's last stable offset to reach its high watermark.
const LSO_WAIT_MARGIN: Duration = Duration::from_secs(15);
/// How long consumers keep reading after the producers stop, at most.
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);
/// An idempotent producer retries one batch for at most this many request timeouts (Java's
/// `delivery.timeout.ms` is 120 s against a 30 s `request.timeout.ms`: 4).
pub const DELIVERY_TIMEOUT_REQUESTS: u32 = 4;
/// Most attempts of one batch.
const MAX_ATTEMPTS: u32 = 100;

/// What a verify run does.
#[derive(Debug, Clone)]
pub struct VerifyConfig {
    /// Bootstrap servers.
    pub bootstrap: String,
    /// Topic (created with `partitions` partitions when missing).
    pub topic: String,
    /// Partitions of the topic.
    pub partitions: i32,
    /// How long the producers send.
    pub duration: Duration,
    /// Concurrent producers (one request in flight each).
    pub producers: u32,
    /// Concurrent tailing consumers (each reads every partition).
    pub consumers: u32,
    /// Members of one consumer group (`vdl-perf-verify-<topic>`) that share the partitions.
    pub group_consumers: u32,
    /// Idempotent producers: producer id, sequence numbers, retries of the same batch.
    pub idempotent: bool,
    /// Most sends in all, and most polled records per consumer and partition.
    pub max_records: u64,
    /// Per-request timeout (a produce that times out has an unknown outcome).
    pub request_timeout: Duration,
    /// Transactional producers and read_committed consumers ([`super::txn_run`]); `None`:
    /// plain or idempotent producers.
    pub transactions: Option<TxnConfig>,
}

/// What the transactional producers of a run do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnConfig {
    /// Values per transaction (spread over the partitions it writes to).
    pub values_per_txn: u32,
    /// Partitions each transaction writes to (at most the topic's).
    pub partitions_per_txn: u32,
    /// One transaction in this many is aborted instead of committed (0: none).
    pub abort_one_in: u32,
    /// The transaction timeout the producers ask for (`transaction.timeout.ms`).
    pub transaction_timeout: Duration,
    /// Whether a fencing check runs beside the producers (a second producer with the same
    /// transactional id fences the first mid-transaction, over and over).
    pub fencing: bool,
}

/// Why a run could not produce a history.
#[derive(Debug, Error)]
pub enum RunError {
    /// The topic could not be prepared, or a read of the final state failed.
    #[error("{what}: {source}")]
    Client {
        /// What was being done.
        what: String,
        /// The failure.
        #[source]
        source: ClientError,
    },
    /// Fetched data did not parse.
    #[error("corrupt fetch data from partition {partition}: {source}")]
    Corrupt {
        /// Partition.
        partition: i32,
        /// The failure.
        #[source]
        source: kafka_proto::DecodeError,
    },
    /// A task panicked.
    #[error("a worker task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

fn client(what: impl Into<String>) -> impl FnOnce(ClientError) -> RunError {
    let what = what.into();
    move |source| RunError::Client { what, source }
}

/// The group the group members join: `vdl-perf-verify-<topic>`.
pub fn group_id(topic: &str) -> String {
    format!("vdl-perf-verify-{topic}")
}

/// Runs the workload and returns what it observed.
pub async fn run(cfg: VerifyConfig) -> Result<History, RunError> {
    assert!(
        cfg.partitions > 0 && cfg.producers > 0,
        "checked by the caller"
    );
    let cluster = Arc::new(Cluster::new(
        &cfg.bootstrap,
        "vdl-perf-verify",
        cfg.request_timeout,
    ));
    let setup_deadline = Instant::now() + cfg.request_timeout.max(Duration::from_secs(60));
    cluster
        .ensure_partitions(&cfg.topic, cfg.partitions, setup_deadline)
        .await
        .map_err(client(format!("preparing topic {}", cfg.topic)))?;
    if cfg.transactions.is_some() {
        super::txn_run::wait_coordinator(&cluster, &cfg, setup_deadline)
            .await
            .map_err(client("waiting for the transaction coordinator"))?;
    }

    let start = Instant::now();
    let producing = Arc::new(AtomicBool::new(true));
    let sent = Arc::new(AtomicU64::new(0));
    let cfg = Arc::new(cfg);
    let group = group_id(&cfg.topic);

    let mut tailers = Vec::new();
    for consumer in 0..cfg.consumers {
        for partition in 0..cfg.partitions {
            tailers.push(tokio::spawn(tail(
                cluster.clone(),
                cfg.clone(),
                consumer,
                partition,
                producing.clone(),
                start,
            )));
        }
    }
    let (drain_tx, drain_rx) = tokio::sync::watch::channel::<Option<Drain>>(None);
    let mut members = Vec::new();
    for i in 0..cfg.group_consumers {
        // Members join one after another over the first part of the run, so the group
        // rebalances (and members resume from committed offsets) while records flow.
        let join_after = cfg
            .duration
            .mul_f64(f64::from(i) / f64::from(cfg.group_consumers + 1));
        members.push(tokio::spawn(group::member(group::MemberConfig {
            cluster: cluster.clone(),
            topic: cfg.topic.clone(),
            group: group.clone(),
            partitions: cfg.partitions,
            consumer: cfg.consumers + i,
            join_after,
            max_records: cfg.max_records,
            drain: drain_rx.clone(),
        })));
    }
    let mut producers = Vec::new();
    let mut txn_producers = Vec::new();
    for producer in 0..cfg.producers {
        if cfg.transactions.is_some() {
            txn_producers.push(tokio::spawn(super::txn_run::produce(
                cluster.clone(),
                cfg.clone(),
                producer,
                start,
                sent.clone(),
            )));
        } else {
            producers.push(tokio::spawn(produce(
                cluster.clone(),
                cfg.clone(),
                producer,
                start,
                sent.clone(),
            )));
        }
    }
    if cfg.transactions.is_some_and(|t| t.fencing) {
        txn_producers.push(tokio::spawn(super::txn_run::fencing(
            cluster.clone(),
            cfg.clone(),
            cfg.producers,
            start,
        )));
    }
    let mut history = History {
        info: RunInfo {
            partitions: cfg.partitions,
            idempotent: cfg.idempotent,
            group: (cfg.group_consumers > 0).then(|| group.clone()),
            transactional: cfg.transactions.is_some(),
            ..RunInfo::default()
        },
        ..History::default()
    };
    for p in producers {
        history.sends.extend(p.await?);
    }
    for p in txn_producers {
        history.txns.extend(p.await?);
    }
    history.info.run_ms = start.elapsed().as_millis() as u64;
    producing.store(false, Ordering::Release);
    if !members.is_empty() {
        let mut high_watermarks = Vec::with_capacity(cfg.partitions as usize);
        for partition in 0..cfg.partitions {
            high_watermarks.push(
                list_offset(&cluster, &cfg.topic, partition, LATEST_TIMESTAMP)
                    .await
                    .unwrap_or(i64::MAX),
            );
        }
        let _ = drain_tx.send(Some(Drain {
            until: Instant::now() + DRAIN_TIMEOUT,
            high_watermarks,
        }));
    }
    for t in tailers {
        history.polls.extend(t.await?);
    }
    for m in members {
        let m = m.await?;
        history.polls.extend(m.polls);
        history.assignments.extend(m.assignments);
    }
    if cfg.group_consumers > 0 {
        history.committed = group::final_committed(&cluster, &group, &cfg.topic, cfg.partitions)
            .await
            .map_err(client(format!("reading the committed offsets of {group}")))?;
    }
    let isolation = isolation_of(&cfg);
    for partition in 0..cfg.partitions {
        let (reads, bound) = final_read(&cluster, &cfg, partition, isolation).await?;
        history.final_read.extend(reads);
        history.final_bounds.extend(bound);
    }
    Ok(history)
}

/// An idempotent producer's identity and the next sequence number of each partition.
struct ProducerState {
    id: i64,
    epoch: i16,
    next_sequence: Vec<i32>,
}

/// Asks any broker for a producer id, retrying retriable errors until `deadline`.
async fn init_producer(
    cluster: &Cluster,
    partitions: i32,
    deadline: Instant,
) -> Result<ProducerState, ClientError> {
    let mut backoff = Duration::from_millis(50);
    loop {
        let attempt = async {
            let mut c = cluster.connect_any().await?;
            coordinator::init_producer_id(&mut c).await
        };
        match attempt.await {
            Ok((id, epoch)) => {
                return Ok(ProducerState {
                    id,
                    epoch,
                    next_sequence: vec![0; partitions as usize],
                })
            }
            Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            Err(e) => return Err(e),
        }
    }
}

/// One producer: sends until the duration is over or `max_records` sends were made in all.
async fn produce(
    cluster: Arc<Cluster>,
    cfg: Arc<VerifyConfig>,
    producer: u32,
    start: Instant,
    sent: Arc<AtomicU64>,
) -> Vec<Send> {
    let deadline = start + cfg.duration;
    let mut sends = Vec::new();
    let mut conns: Vec<Option<Connection>> = (0..cfg.partitions).map(|_| None).collect();
    let timeout_ms = i32::try_from(cfg.request_timeout.as_millis()).unwrap_or(i32::MAX);
    let mut state: Option<ProducerState> = None;
    let mut seq: u64 = 0;
    while Instant::now() < deadline && sent.fetch_add(1, Ordering::AcqRel) < cfg.max_records {
        let partition = ((u64::from(producer) + seq) % cfg.partitions as u64) as i32;
        let value = format!("p{producer}-{seq}");
        seq += 1;
        let t0 = Instant::now();
        if cfg.idempotent && state.is_none() {
            match init_producer(&cluster, cfg.partitions, deadline).await {
                Ok(s) => state = Some(s),
                Err(_) => {
                    // Nothing was sent for this value: no history entry.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let identity = state.as_ref().map(|s| {
            let slot = partition as usize;
            (s.id, s.epoch, s.next_sequence[slot])
        });
        let batch = match build_batch(&value, identity) {
            Ok(b) => b,
            Err(e) => {
                sends.push(Send {
                    value,
                    partition,
                    done_ms: start.elapsed().as_millis() as u64,
                    latency_us: 0,
                    retries: 0,
                    outcome: SendOutcome::Unknown { error: e.kind() },
                });
                continue;
            }
        };
        let give_up = t0 + cfg.request_timeout * DELIVERY_TIMEOUT_REQUESTS;
        let connect_deadline = if identity.is_some() {
            deadline.max(give_up)
        } else {
            deadline
        };
        let mut retries = 0;
        let outcome = loop {
            let result = send_batch(
                &cluster,
                &cfg.topic,
                partition,
                &mut conns[partition as usize],
                connect_deadline,
                timeout_ms,
                batch.clone(),
            )
            .await;
            match result {
                Ok(offset) => break SendOutcome::Acked { offset },
                // A retry of a batch the broker already holds (Kafka before 2.x answers this
                // instead of the original offset): written.
                Err(ClientError::Broker {
                    code: ErrorCode::DuplicateSequenceNumber,
                    ..
                }) if identity.is_some() => break SendOutcome::AckedDuplicate,
                Err(e) => {
                    conns[partition as usize] = None;
                    // Back off a little so an unavailable cluster is not hammered.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let again = identity.is_some()
                        && e.is_retriable()
                        && Instant::now() < give_up
                        && retries + 1 < MAX_ATTEMPTS;
                    if !again {
                        break SendOutcome::Unknown { error: e.kind() };
                    }
                    retries += 1;
                }
            }
        };
        if let Some(s) = state.as_mut() {
            match outcome {
                SendOutcome::Acked { .. } | SendOutcome::AckedDuplicate => {
                    let slot = &mut s.next_sequence[partition as usize];
                    *slot = slot.wrapping_add(1) & i32::MAX;
                }
                // The batch's fate is unknown (or it was refused as out of order): the next
                // sequence number cannot be known, so start over with a new producer id (the
                // Java client bumps the epoch instead; either way nothing is written twice).
                SendOutcome::Unknown { .. } => state = None,
            }
        }
        sends.push(Send {
            value,
            partition,
            done_ms: start.elapsed().as_millis() as u64,
            latency_us: t0.elapsed().as_micros() as u64,
            retries,
            outcome,
        });
    }
    sends
}

/// A batch of one record holding `value`; with `identity` (producer id, epoch, sequence)
/// an idempotent one.
fn build_batch(value: &str, identity: Option<(i64, i16, i32)>) -> Result<Bytes, ClientError> {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut builder = RecordBatchBuilder::new(Compression::None);
    if let Some((id, epoch, sequence)) = identity {
        builder = builder.producer(id, epoch, sequence);
    }
    builder.push(
        ts,
        None,
        Some(&Bytes::copy_from_slice(value.as_bytes())),
        &[],
    )?;
    Ok(builder.build()?)
}

async fn send_batch(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    conn: &mut Option<Connection>,
    deadline: Instant,
    timeout_ms: i32,
    batch: Bytes,
) -> Result<i64, ClientError> {
    if conn.is_none() {
        let c = cluster
            .connect_leader(topic, partition, deadline, &mut |_| {})
            .await?;
        *conn = Some(c);
    }
    let c = conn.as_mut().expect("connected above");
    let req = protocol::produce(topic, partition, -1, timeout_ms, batch);
    let resp = c.request(PRODUCE_VERSION, &req).await?;
    Ok(protocol::produce_ack(resp, partition)?.base_offset)
}

/// The isolation level of a run's reads: read_committed in a transactional run.
fn isolation_of(cfg: &VerifyConfig) -> i8 {
    if cfg.transactions.is_some() {
        READ_COMMITTED
    } else {
        READ_UNCOMMITTED
    }
}

/// One consumer's tail of one partition: from the log start, until the producers stopped and
/// the high watermark of that moment is reached (or [`DRAIN_TIMEOUT`] after they stopped).
/// In a transactional run it reads at read_committed and notes when each answer arrived.
async fn tail(
    cluster: Arc<Cluster>,
    cfg: Arc<VerifyConfig>,
    consumer: u32,
    partition: i32,
    producing: Arc<AtomicBool>,
    start: Instant,
) -> Vec<Poll> {
    let isolation = isolation_of(&cfg);
    let transactional = cfg.transactions.is_some();
    let mut polls = Vec::new();
    let mut conn: Option<Connection> = None;
    let mut next: Option<i64> = None;
    let mut drain_until: Option<(Instant, i64)> = None;
    loop {
        if drain_until.is_none() && !producing.load(Ordering::Acquire) {
            // The producers stopped: read up to the high watermark as it is now.
            let hw = list_offset(&cluster, &cfg.topic, partition, LATEST_TIMESTAMP)
                .await
                .unwrap_or(i64::MAX);
            drain_until = Some((Instant::now() + DRAIN_TIMEOUT, hw));
        }
        if let Some((until, hw)) = drain_until {
            if Instant::now() >= until || next.is_some_and(|n| n >= hw) {
                return polls;
            }
        }
        if polls.len() as u64 >= cfg.max_records {
            return polls;
        }
        let step = async {
            if conn.is_none() {
                let deadline = Instant::now() + cfg.request_timeout;
                conn = Some(
                    cluster
                        .connect_leader(&cfg.topic, partition, deadline, &mut |_| {})
                        .await?,
                );
            }
            let c = conn.as_mut().expect("connected above");
            let offset = match next {
                Some(n) => n,
                None => {
                    let resp = c
                        .request(
                            LIST_OFFSETS_VERSION,
                            &protocol::list_offsets(&cfg.topic, partition, EARLIEST_TIMESTAMP),
                        )
                        .await?;
                    protocol::listed_offset(resp, partition)?
                }
            };
            next = Some(offset);
            let spec = FetchSpec {
                offset,
                partition_max_bytes: FETCH_BYTES,
                max_wait_ms: 100,
                min_bytes: 1,
            };
            let req = txn_client::fetch(&cfg.topic, partition, spec, isolation);
            let resp = c.request(FETCH_VERSION, &req).await?;
            txn_client::fetched_committed(resp, partition)
        };
        match step.await {
            Ok(data) => {
                let at_us = transactional.then(|| start.elapsed().as_micros() as u64);
                let from = next.unwrap_or(0);
                match committed_records(data.records, &data.aborted, partition, from) {
                    Ok(got) => {
                        if transactional {
                            // Markers and aborted batches take offsets too: move past them.
                            if let Some(n) = got.next_offset {
                                next = Some(n.max(from));
                            }
                        }
                        for r in got.reads {
                            next = Some(next.unwrap_or(0).max(r.offset + 1));
                            polls.push(Poll {
                                consumer,
                                member: None,
                                generation: None,
                                at_us,
                                read: r,
                            });
                        }
                    }
                    Err(_) => {
                        // Recorded as nothing read; the final read reports corrupt data.
                        conn = None;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            Err(_) => {
                conn = None;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The records at or after `from` in fetched data (the first batch may start earlier), with
/// control batches (transaction markers) left out.
pub(super) fn records_from(data: Bytes, partition: i32, from: i64) -> Result<Vec<Read>, RunError> {
    let corrupt = |source| RunError::Corrupt { partition, source };
    let mut reads = Vec::new();
    for batch in split_batches_lenient(data) {
        let batch = batch.map_err(corrupt)?;
        if batch.is_control() || batch.last_offset() < from {
            continue;
        }
        batch.validate().map_err(corrupt)?;
        for r in batch.records_vec(MAX_DECOMPRESSED).map_err(corrupt)? {
            if r.offset < from {
                continue;
            }
            let value = r
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            reads.push(Read {
                partition,
                offset: r.offset,
                value,
            });
        }
    }
    Ok(reads)
}

pub(super) async fn list_offset(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> Result<i64, ClientError> {
    list_offset_at(cluster, topic, partition, timestamp, READ_UNCOMMITTED).await
}

/// A ListOffsets at `isolation` from the partition's leader.
async fn list_offset_at(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    timestamp: i64,
    isolation: i8,
) -> Result<i64, ClientError> {
    let deadline = Instant::now() + cluster.timeout();
    let mut c = cluster
        .connect_leader(topic, partition, deadline, &mut |_| {})
        .await?;
    let resp = c
        .request(
            LIST_OFFSETS_VERSION,
            &txn_client::list_offsets(topic, partition, timestamp, isolation),
        )
        .await?;
    protocol::listed_offset(resp, partition)
}

/// Reads a partition from the log start to the high watermark. Fetch failures and empty
/// answers (a new leader catching up) are retried on a new connection until
/// [`FINAL_READ_TIMEOUT`] passes without progress. At read_committed it first waits (up to
/// the transaction timeout and [`LSO_WAIT_MARGIN`]) for the last stable offset to reach the
/// high watermark, reads up to the last stable offset, and returns both bounds.
async fn final_read(
    cluster: &Cluster,
    cfg: &VerifyConfig,
    partition: i32,
    isolation: i8,
) -> Result<(Vec<Read>, Option<FinalBound>), RunError> {
    let topic = cfg.topic.as_str();
    let what = |w: &str| format!("final read of {topic}-{partition}: {w}");
    let start = list_offset(cluster, topic, partition, EARLIEST_TIMESTAMP)
        .await
        .map_err(client(what("log start")))?;
    let mut end = list_offset(cluster, topic, partition, LATEST_TIMESTAMP)
        .await
        .map_err(client(what("high watermark")))?;
    let mut bound = None;
    if let Some(t) = cfg.transactions.filter(|_| isolation == READ_COMMITTED) {
        let high_watermark = end;
        let wait_until = Instant::now() + t.transaction_timeout + LSO_WAIT_MARGIN;
        let last_stable_offset = loop {
            let lso = list_offset_at(cluster, topic, partition, LATEST_TIMESTAMP, READ_COMMITTED)
                .await
                .map_err(client(what("last stable offset")))?;
            if lso >= high_watermark || Instant::now() >= wait_until {
                break lso;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        end = last_stable_offset.min(high_watermark);
        bound = Some(FinalBound {
            partition,
            last_stable_offset,
            high_watermark,
        });
    }
    let mut conn: Option<Connection> = None;
    let mut reads = Vec::new();
    let mut next = start;
    let mut give_up = Instant::now() + FINAL_READ_TIMEOUT;
    while next < end {
        let step = async {
            if conn.is_none() {
                let deadline = Instant::now() + cluster.timeout();
                conn = Some(
                    cluster
                        .connect_leader(topic, partition, deadline, &mut |_| {})
                        .await?,
                );
            }
            let c = conn.as_mut().expect("connected above");
            let spec = FetchSpec {
                offset: next,
                partition_max_bytes: FETCH_BYTES,
                max_wait_ms: 100,
                min_bytes: 1,
            };
            let req = txn_client::fetch(topic, partition, spec, isolation);
            let resp = c.request(FETCH_VERSION, &req).await?;
            txn_client::fetched_committed(resp, partition)
        };
        let failure = match step.await {
            Ok(data) => {
                let committed = committed_records(data.records, &data.aborted, partition, next)?;
                let batch_end = committed.next_offset;
                let got = committed.reads;
                let before = next;
                if let Some(r) = got.last() {
                    next = r.offset + 1;
                }
                // Control batches (and, at read_committed, aborted ones) take offsets too.
                if let Some(e) = batch_end.filter(|e| *e > next) {
                    next = e;
                }
                reads.extend(got.into_iter().filter(|r| r.offset < end));
                if next > before {
                    give_up = Instant::now() + FINAL_READ_TIMEOUT;
                    continue;
                }
                ClientError::Unexpected(format!(
                    "fetch at {next} returned nothing below the high watermark {end}"
                ))
            }
            Err(e) => {
                conn = None;
                e
            }
        };
        if Instant::now() >= give_up {
            return Err(RunError::Client {
                what: what("no progress"),
                source: failure,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok((reads, bound))
}
