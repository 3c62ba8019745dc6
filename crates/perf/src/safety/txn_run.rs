//! The transactional producers of a verify run (`--transactional`) and its fencing check.
//!
//! Each producer has its own `transactional.id` (`vdl-perf-verify-<topic>-<producer>`) and
//! loops: InitProducerId through the transaction coordinator (when it has no producer id
//! yet), AddPartitionsToTxn for the partitions of the next transaction, one Produce per value
//! (acks=all, one request in flight, sequence numbers per partition; retriable errors send the
//! same batch again, as the Java client does), then EndTxn: commit, or abort for one
//! transaction in [`TxnConfig::abort_one_in`]. Coordinator calls follow the Java client on
//! NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS, a timeout or a lost
//! connection: find the coordinator again and repeat the call until
//! [`DELIVERY_TIMEOUT_REQUESTS`] request timeouts have passed. A produce that fails for good
//! makes the transaction abortable: it is aborted (never committed). When the outcome of an
//! EndTxn (or that abort) stays unknown, or the producer was fenced, the transaction is
//! recorded as unknown and the producer initialises again (a new epoch, which also aborts
//! whatever it left open).
//!
//! The fencing check ([`fencing`]) repeats, while the producers run: a "zombie" producer opens
//! a transaction and writes a value, a second producer with the same transactional id is
//! initialised (fencing the zombie and aborting its transaction), then the zombie writes once
//! more and asks to commit. The zombie's values must never become visible and its late write
//! and commit must be refused; the second producer then commits a transaction of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use kafka_proto::records::{Compression, RecordBatchBuilder};
use rand::{Rng, SeedableRng};

use super::history::{Txn, TxnOutcome, TxnWrite};
use super::run::{TxnConfig, VerifyConfig, DELIVERY_TIMEOUT_REQUESTS};
use crate::client::txn::{self as txn_client, TxnIdentity};
use crate::client::{coordinator, protocol, ClientError, Cluster, Connection, PRODUCE_VERSION};

/// FindCoordinator's key type for a transactional id.
const TRANSACTION_KEY: i8 = 1;
/// Wait before asking again after CONCURRENT_TRANSACTIONS.
const CONCURRENT_BACKOFF: Duration = Duration::from_millis(20);
/// Pause between fencing rounds.
const FENCING_PAUSE: Duration = Duration::from_millis(300);

/// A producer's transactional identity and state.
struct Session {
    transactional_id: String,
    producer_id: i64,
    epoch: i16,
    next_sequence: Vec<i32>,
}

impl Session {
    fn identity(&self) -> TxnIdentity<'_> {
        TxnIdentity {
            transactional_id: &self.transactional_id,
            producer_id: self.producer_id,
            producer_epoch: self.epoch,
        }
    }
}

/// One call to the transaction coordinator.
#[derive(Clone, Copy)]
enum CoordinatorCall<'a> {
    Init,
    AddPartitions(&'a [i32]),
    End { commit: bool },
}

/// What a producer keeps between calls: its coordinator connection and one connection per
/// partition leader.
struct Links<'a> {
    cluster: &'a Cluster,
    cfg: &'a VerifyConfig,
    txn: TxnConfig,
    coordinator: Option<Connection>,
    leaders: Vec<Option<Connection>>,
}

impl<'a> Links<'a> {
    fn new(cluster: &'a Cluster, cfg: &'a VerifyConfig, txn: TxnConfig) -> Links<'a> {
        Links {
            cluster,
            cfg,
            txn,
            coordinator: None,
            leaders: (0..cfg.partitions).map(|_| None).collect(),
        }
    }

    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.cfg.request_timeout.as_millis()).unwrap_or(i32::MAX)
    }

    fn give_up(&self) -> Instant {
        Instant::now() + self.cfg.request_timeout * DELIVERY_TIMEOUT_REQUESTS
    }

    /// Makes `call` on the coordinator of `transactional_id`, again after retriable errors
    /// (finding the coordinator anew) until `give_up`. Init answers the new (id, epoch).
    async fn coordinator_call(
        &mut self,
        transactional_id: &str,
        session: Option<&Session>,
        call: CoordinatorCall<'_>,
        give_up: Instant,
    ) -> Result<Option<(i64, i16)>, ClientError> {
        let mut backoff = Duration::from_millis(20);
        loop {
            let result = self.coordinator_once(transactional_id, session, call).await;
            match result {
                Ok(r) => return Ok(r),
                Err(e) if e.is_retriable() && Instant::now() + backoff < give_up => {
                    let concurrent = matches!(
                        e,
                        ClientError::Broker {
                            code: ErrorCode::ConcurrentTransactions,
                            ..
                        }
                    );
                    if concurrent {
                        // The previous transaction's markers are still being written: ask
                        // again soon (the Java client retries this one after 20 ms).
                        tokio::time::sleep(CONCURRENT_BACKOFF).await;
                        continue;
                    }
                    self.coordinator = None;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(e) => {
                    self.coordinator = None;
                    return Err(e);
                }
            }
        }
    }

    async fn coordinator_once(
        &mut self,
        transactional_id: &str,
        session: Option<&Session>,
        call: CoordinatorCall<'_>,
    ) -> Result<Option<(i64, i16)>, ClientError> {
        if self.coordinator.is_none() {
            let mut any = self.cluster.connect_any().await?;
            let addr =
                coordinator::find_coordinator(&mut any, transactional_id, TRANSACTION_KEY).await?;
            self.coordinator = Some(self.cluster.connect(&addr).await?);
        }
        let c = self.coordinator.as_mut().expect("connected above");
        let timeout_ms = i32::try_from(self.txn.transaction_timeout.as_millis()).unwrap_or(60_000);
        let identity = || {
            session
                .map(Session::identity)
                .ok_or_else(|| ClientError::Unexpected("no producer id".into()))
        };
        match call {
            CoordinatorCall::Init => {
                let r = txn_client::init_transactional_producer(c, transactional_id, timeout_ms)
                    .await?;
                Ok(Some(r))
            }
            CoordinatorCall::AddPartitions(partitions) => {
                let topic = self.cfg.topic.as_str();
                txn_client::add_partitions_to_txn(c, identity()?, topic, partitions).await?;
                Ok(None)
            }
            CoordinatorCall::End { commit } => {
                txn_client::end_txn(c, identity()?, commit).await?;
                Ok(None)
            }
        }
    }

    /// A new producer id and epoch for `transactional_id`.
    async fn init(
        &mut self,
        transactional_id: &str,
        give_up: Instant,
    ) -> Result<Session, ClientError> {
        let (producer_id, epoch) = self
            .coordinator_call(transactional_id, None, CoordinatorCall::Init, give_up)
            .await?
            .ok_or_else(|| ClientError::Unexpected("InitProducerId without an id".into()))?;
        Ok(Session {
            transactional_id: transactional_id.to_string(),
            producer_id,
            epoch,
            next_sequence: vec![0; self.cfg.partitions as usize],
        })
    }

    /// Sends one transactional record to `partition`; retriable failures send the same batch
    /// again until `give_up`. The offset, or the last error.
    async fn produce(
        &mut self,
        session: &mut Session,
        partition: i32,
        value: &str,
        give_up: Instant,
    ) -> Result<i64, ClientError> {
        let slot = partition as usize;
        let batch = transactional_batch(value, session, session.next_sequence[slot])?;
        let timeout_ms = self.timeout_ms();
        loop {
            let result = async {
                if self.leaders[slot].is_none() {
                    let c = self
                        .cluster
                        .connect_leader(&self.cfg.topic, partition, give_up, &mut |_| {})
                        .await?;
                    self.leaders[slot] = Some(c);
                }
                let c = self.leaders[slot].as_mut().expect("connected above");
                let req = txn_client::produce(
                    &session.transactional_id,
                    &self.cfg.topic,
                    partition,
                    timeout_ms,
                    batch.clone(),
                );
                let resp = c.request(PRODUCE_VERSION, &req).await?;
                Ok::<_, ClientError>(protocol::produce_ack(resp, partition)?.base_offset)
            }
            .await;
            match result {
                Ok(offset) => {
                    let s = &mut session.next_sequence[slot];
                    *s = s.wrapping_add(1) & i32::MAX;
                    return Ok(offset);
                }
                Err(e) => {
                    self.leaders[slot] = None;
                    if !e.is_retriable() || Instant::now() + Duration::from_millis(50) >= give_up {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Opens a transaction on `partitions` and writes `values` (value i to partition i mod
    /// the count). The writes made (the failed one last, without an offset) and the error that
    /// stopped them, if any.
    async fn write(
        &mut self,
        session: &mut Session,
        partitions: &[i32],
        values: Vec<String>,
    ) -> (Vec<TxnWrite>, Option<ClientError>) {
        let tid = session.transactional_id.clone();
        let add = CoordinatorCall::AddPartitions(partitions);
        if let Err(e) = self
            .coordinator_call(&tid, Some(session), add, self.give_up())
            .await
        {
            return (Vec::new(), Some(e));
        }
        let mut writes = Vec::with_capacity(values.len());
        for (i, value) in values.into_iter().enumerate() {
            let partition = partitions[i % partitions.len()];
            let result = self
                .produce(session, partition, &value, self.give_up())
                .await;
            let failed = result.as_ref().err().map(ClientError::kind);
            writes.push(TxnWrite {
                value,
                partition,
                offset: result.as_ref().ok().copied(),
            });
            if failed.is_some() {
                return (writes, result.err());
            }
        }
        (writes, None)
    }

    /// Ends the open transaction; its outcome.
    async fn end(&mut self, session: &Session, commit: bool) -> TxnOutcome {
        let call = CoordinatorCall::End { commit };
        let tid = session.transactional_id.clone();
        match self
            .coordinator_call(&tid, Some(session), call, self.give_up())
            .await
        {
            Ok(_) if commit => TxnOutcome::Committed,
            Ok(_) => TxnOutcome::Aborted,
            Err(e) => TxnOutcome::Unknown { error: e.kind() },
        }
    }
}

fn transactional_batch(value: &str, s: &Session, sequence: i32) -> Result<Bytes, ClientError> {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut builder = RecordBatchBuilder::new(Compression::None)
        .producer(s.producer_id, s.epoch, sequence)
        .transactional(true);
    builder.push(
        ts,
        None,
        Some(&Bytes::copy_from_slice(value.as_bytes())),
        &[],
    )?;
    Ok(builder.build()?)
}

fn micros_since(start: Instant) -> u64 {
    start.elapsed().as_micros() as u64
}

/// Waits until the transaction coordinator of the run's first transactional id answers
/// InitProducerId (Kafka creates its transaction state topic on the first request, which can
/// take many seconds): part of the run's setup, like creating the topic.
pub(super) async fn wait_coordinator(
    cluster: &Cluster,
    cfg: &VerifyConfig,
    deadline: Instant,
) -> Result<(), ClientError> {
    let t = cfg.transactions.expect("a transactional run");
    let mut links = Links::new(cluster, cfg, t);
    links
        .init(&transactional_id(&cfg.topic, 0), deadline)
        .await
        .map(|_| ())
}

/// The transactional id of producer `producer` of a run on `topic`.
pub fn transactional_id(topic: &str, producer: u32) -> String {
    format!("vdl-perf-verify-{topic}-{producer}")
}

/// One transactional producer: transactions until the duration is over or `max_records`
/// values were sent in all.
pub(super) async fn produce(
    cluster: Arc<Cluster>,
    cfg: Arc<super::run::VerifyConfig>,
    producer: u32,
    start: Instant,
    sent: Arc<AtomicU64>,
) -> Vec<Txn> {
    let t = cfg.transactions.expect("a transactional run");
    let deadline = start + cfg.duration;
    let tid = transactional_id(&cfg.topic, producer);
    let mut links = Links::new(&cluster, &cfg, t);
    let mut rng = rand::rngs::StdRng::seed_from_u64(
        u64::from(producer)
            ^ SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
    );
    let per_txn = u64::from(t.values_per_txn.max(1));
    let width = (t.partitions_per_txn.max(1) as i32).min(cfg.partitions);
    let mut session: Option<Session> = None;
    let mut txns = Vec::new();
    let mut number: u64 = 0;
    while Instant::now() < deadline && sent.fetch_add(per_txn, Ordering::AcqRel) < cfg.max_records {
        if session.is_none() {
            match links.init(&tid, deadline.max(links.give_up())).await {
                Ok(s) => session = Some(s),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let s = session.as_mut().expect("initialised above");
        let first = ((u64::from(producer) + number) % cfg.partitions as u64) as i32;
        let partitions: Vec<i32> = (0..width).map(|i| (first + i) % cfg.partitions).collect();
        let values = (0..per_txn)
            .map(|i| format!("t{producer}-{number}-{i}"))
            .collect();
        number += 1;
        let t0 = Instant::now();
        let (writes, failure) = links.write(s, &partitions, values).await;
        if writes.is_empty() {
            // AddPartitionsToTxn failed: nothing was written. Start over with a new epoch.
            session = None;
            continue;
        }
        let commit =
            failure.is_none() && (t.abort_one_in == 0 || rng.gen_range(0..t.abort_one_in) != 0);
        let end_sent_us = Some(micros_since(start));
        let mut outcome = links.end(s, commit).await;
        if let (Some(f), TxnOutcome::Unknown { error }) = (&failure, &mut outcome) {
            *error = format!("{} then abort {error}", f.kind());
        }
        txns.push(Txn {
            producer,
            transactional_id: tid.clone(),
            producer_id: s.producer_id,
            producer_epoch: s.epoch,
            writes,
            commit_requested: commit,
            end_sent_us,
            done_ms: start.elapsed().as_millis() as u64,
            latency_us: t0.elapsed().as_micros() as u64,
            outcome: outcome.clone(),
            zombie_accepted: Vec::new(),
        });
        if failure.is_some() || matches!(outcome, TxnOutcome::Unknown { .. }) {
            // The sequence numbers or the transaction's state are not known: a new epoch
            // (which aborts whatever this one left open).
            session = None;
        }
    }
    if session.is_none() && !txns.is_empty() {
        // Close what an unknown end may have left open, so the last stable offset moves on.
        let _ = links.init(&tid, links.give_up()).await;
    }
    txns
}

/// The fencing check, as producer number `producer` (its transactions) and `producer + 1`
/// (the fencer's): rounds until the duration is over.
pub(super) async fn fencing(
    cluster: Arc<Cluster>,
    cfg: Arc<VerifyConfig>,
    producer: u32,
    start: Instant,
) -> Vec<Txn> {
    let t = cfg.transactions.expect("a transactional run");
    let deadline = start + cfg.duration;
    let tid = format!("vdl-perf-verify-{}-fence", cfg.topic);
    let mut zombie_links = Links::new(&cluster, &cfg, t);
    let mut fencer_links = Links::new(&cluster, &cfg, t);
    let mut txns = Vec::new();
    let mut round: u64 = 0;
    while Instant::now() < deadline {
        let partition = (round % cfg.partitions as u64) as i32;
        let r = round;
        round += 1;
        if round > 1 {
            tokio::time::sleep(FENCING_PAUSE).await;
        }
        let Ok(mut zombie) = zombie_links.init(&tid, zombie_links.give_up()).await else {
            continue;
        };
        let t0 = Instant::now();
        let (mut writes, failure) = zombie_links
            .write(&mut zombie, &[partition], vec![format!("z{r}-0")])
            .await;
        if writes.is_empty() {
            continue;
        }
        let fenced = fencer_links.init(&tid, fencer_links.give_up()).await;
        let mut txn = Txn {
            producer,
            transactional_id: tid.clone(),
            producer_id: zombie.producer_id,
            producer_epoch: zombie.epoch,
            writes: Vec::new(),
            commit_requested: false,
            end_sent_us: None,
            done_ms: 0,
            latency_us: 0,
            outcome: TxnOutcome::Fenced,
            zombie_accepted: Vec::new(),
        };
        let Ok(mut fencer) = fenced else {
            // No second producer: an ordinary transaction of the zombie, aborted.
            txn.end_sent_us = Some(micros_since(start));
            txn.outcome = zombie_links.end(&zombie, false).await;
            txn.writes = writes;
            txn.done_ms = start.elapsed().as_millis() as u64;
            txns.push(txn);
            continue;
        };
        if failure.is_none() {
            // The zombie writes again and asks to commit: both must be refused.
            let late = format!("z{r}-1");
            let once = Instant::now() + cfg.request_timeout;
            let result = zombie_links
                .produce(&mut zombie, partition, &late, once)
                .await;
            if let Ok(offset) = result {
                txn.zombie_accepted
                    .push(format!("produce of {late} at {partition}/{offset}"));
            }
            writes.push(TxnWrite {
                value: late,
                partition,
                offset: result.ok(),
            });
            txn.commit_requested = true;
            txn.end_sent_us = Some(micros_since(start));
            let call = CoordinatorCall::End { commit: true };
            let once = Instant::now() + cfg.request_timeout;
            if zombie_links
                .coordinator_call(&tid, Some(&zombie), call, once)
                .await
                .is_ok()
            {
                txn.zombie_accepted.push("EndTxn(commit)".into());
            }
        }
        txn.writes = writes;
        txn.done_ms = start.elapsed().as_millis() as u64;
        txn.latency_us = t0.elapsed().as_micros() as u64;
        txns.push(txn);

        // The fencer's own transaction: an ordinary committed one.
        let t1 = Instant::now();
        let values = vec![format!("f{r}-0"), format!("f{r}-1")];
        let (writes, failure) = fencer_links.write(&mut fencer, &[partition], values).await;
        if writes.is_empty() {
            continue;
        }
        let commit = failure.is_none();
        let end_sent_us = Some(micros_since(start));
        let outcome = fencer_links.end(&fencer, commit).await;
        txns.push(Txn {
            producer: producer + 1,
            transactional_id: tid.clone(),
            producer_id: fencer.producer_id,
            producer_epoch: fencer.epoch,
            writes,
            commit_requested: commit,
            end_sent_us,
            done_ms: start.elapsed().as_millis() as u64,
            latency_us: t1.elapsed().as_micros() as u64,
            outcome,
            zombie_accepted: Vec::new(),
        });
    }
    // Leave nothing open.
    let _ = fencer_links.init(&tid, fencer_links.give_up()).await;
    txns
}
