//! The `groups` workload over the consumer group protocol of KIP-848 (`--protocol consumer`):
//! `groups` groups of `members` members, each member a ConsumerGroupHeartbeat v1 client as
//! Kafka 4's consumer is one. A member generates its member id (a random UUID in Kafka's
//! string form), joins with member epoch 0, its subscription to the workload's topic, its
//! rebalance timeout and the server assignor it names (if any); then heartbeats at the interval
//! the coordinator answers with the epoch it answered, sending its owned partitions only when
//! they changed (an assignment it received is owned at once and acknowledged by the next
//! heartbeat, sent right away, as Kafka's consumer does after reconciling). Its first regular
//! heartbeat waits an extra fraction of the interval (member i of n: i/n), so the heartbeats of
//! members that joined together spread over the interval, as the classic workload's do. A member fenced
//! (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) drops its partitions and joins again with epoch 0.
//!
//! Measured: the joining heartbeats' latency and the time until every member joined; the time
//! until every group converged (each of its partitions owned by a member); after the warm-up,
//! the heartbeats' latency, rate and errors, the server's and this process's CPU time, as the
//! classic workload does. The topic is created with `partitions` partitions when missing.
//!
//! Bounds: every request by `request_timeout`; a member's join by [`MAX_JOIN_ATTEMPTS`]; the
//! joins on one connection by `join_concurrency x members`; every member stops at the end of
//! the measured window (its last wait is at most one heartbeat interval).

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::consumer_group_heartbeat_request::{
    ConsumerGroupHeartbeatRequest, TopicPartitions,
};
use kafka_proto::messages::consumer_group_heartbeat_response::ConsumerGroupHeartbeatResponse;
use rand::RngCore;
use tokio::sync::{mpsc, watch, Semaphore};

use crate::client::cluster::Cluster;
use crate::client::ClientError;
use crate::groups::{
    error_kind, find_coordinator, measure_window, GroupProtocol, GroupsConfig, GroupsResult, Pipe,
    CLIENT_ID,
};
use crate::stats::{ErrorCounts, Latencies};

/// The ConsumerGroupHeartbeat version the members speak (v1: the client makes its member id).
pub const CONSUMER_GROUP_HEARTBEAT_VERSION: i16 = 1;
/// Joining heartbeats a member sends before it gives up.
const MAX_JOIN_ATTEMPTS: usize = 10;
/// Wait between two joining attempts of a member.
const JOIN_RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// When measuring starts and the run stops, once every member tried to join.
type Timeline = watch::Receiver<Option<(Instant, Instant)>>;

/// What the members of one run share.
struct Shared {
    cfg: Arc<GroupsConfig>,
    errors: ErrorCounts,
    join_latencies: Mutex<Latencies>,
    heartbeat_latencies: Mutex<Latencies>,
    /// When the first joining heartbeat was sent.
    started: Instant,
    /// Members that joined (got a member epoch).
    members_joined: AtomicUsize,
    /// Time from `started` to the last successful join, in microseconds.
    last_join_micros: AtomicI64,
}

/// One group's progress towards every partition being owned.
#[derive(Default)]
struct GroupProgress {
    /// Partitions its members own, summed.
    owned: AtomicI64,
    /// Seconds from the start until `owned` first reached the partition count.
    converged_after_secs: OnceLock<f64>,
}

impl GroupProgress {
    /// Adds `delta` owned partitions; records the convergence when all `partitions` are owned.
    fn add(&self, delta: i64, partitions: u32, started: Instant) {
        let owned = self.owned.fetch_add(delta, Ordering::Relaxed) + delta;
        if owned == i64::from(partitions) && partitions > 0 {
            let _ = self
                .converged_after_secs
                .set(started.elapsed().as_secs_f64());
        }
    }
}

/// A member id as Kafka's consumer makes one: 16 random bytes, base64url without padding.
fn new_member_id() -> String {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The partitions in `response`'s assignment (`None`: no new assignment in it).
fn assigned(response: &ConsumerGroupHeartbeatResponse) -> Option<Vec<TopicPartitions>> {
    response.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .map(|t| TopicPartitions {
                topic_id: t.topic_id,
                partitions: t.partitions.clone(),
                ..Default::default()
            })
            .collect()
    })
}

fn partition_count(owned: &[TopicPartitions]) -> i64 {
    owned.iter().map(|t| t.partitions.len() as i64).sum()
}

/// One member: joins, then heartbeats until the timeline's stop.
struct Member {
    shared: Arc<Shared>,
    pipe: Pipe,
    group: String,
    progress: Arc<GroupProgress>,
    member_id: String,
    epoch: i32,
    owned: Vec<TopicPartitions>,
    /// The owned partitions changed since a heartbeat carrying them was last answered.
    owned_changed: bool,
    /// The next heartbeat goes at once (to acknowledge an assignment, or to join again).
    send_now: bool,
    /// The coordinator's heartbeat interval (the configured one until it answers).
    interval: Duration,
    /// This member's phase, a fraction of the interval its first regular heartbeat waits
    /// longer (so the members' heartbeats spread evenly, as the classic workload's do).
    phase: f64,
}

impl Member {
    /// One heartbeat; epoch 0 makes it a join (with the subscription). The answer, and how long
    /// it took.
    async fn heartbeat(&mut self) -> (Result<ConsumerGroupHeartbeatResponse, String>, Duration) {
        let cfg = &self.shared.cfg;
        let joining = self.epoch == 0;
        let request = ConsumerGroupHeartbeatRequest {
            group_id: self.group.clone(),
            member_id: self.member_id.clone(),
            member_epoch: self.epoch,
            rebalance_timeout_ms: if joining {
                cfg.rebalance_timeout_ms
            } else {
                -1
            },
            subscribed_topic_names: joining.then(|| vec![cfg.topic.clone()]),
            server_assignor: if joining {
                cfg.server_assignor.clone()
            } else {
                None
            },
            topic_partitions: (joining || self.owned_changed).then(|| self.owned.clone()),
            ..Default::default()
        };
        self.send_now = false;
        let sent = Instant::now();
        let answer = self
            .pipe
            .call(
                CONSUMER_GROUP_HEARTBEAT_VERSION,
                request.into(),
                cfg.request_timeout,
            )
            .await;
        let took = sent.elapsed();
        let answer = match answer {
            Ok(Response::ConsumerGroupHeartbeat(r)) => Ok(r),
            Ok(_) => Err("CLIENT(unexpected response)".to_string()),
            Err(e) => Err(error_kind(&e)),
        };
        (answer, took)
    }

    /// Takes a successful answer in: epoch, interval, assignment.
    fn accept(&mut self, response: &ConsumerGroupHeartbeatResponse) {
        self.epoch = response.member_epoch;
        if response.heartbeat_interval_ms > 0 {
            self.interval = Duration::from_millis(response.heartbeat_interval_ms as u64);
        }
        if let Some(new) = assigned(response) {
            let delta = partition_count(&new) - partition_count(&self.owned);
            self.owned = new;
            self.owned_changed = true;
            self.send_now = true;
            self.progress
                .add(delta, self.shared.cfg.partitions, self.shared.started);
        } else {
            self.owned_changed = false;
        }
    }

    /// Drops every owned partition (fenced: it joins again).
    fn release(&mut self) {
        let delta = -partition_count(&self.owned);
        self.owned.clear();
        self.owned_changed = true;
        self.send_now = true;
        self.epoch = 0;
        self.progress
            .add(delta, self.shared.cfg.partitions, self.shared.started);
    }

    /// Joins (at most [`MAX_JOIN_ATTEMPTS`] heartbeats with epoch 0). True when it did.
    async fn join(&mut self, limit: &Semaphore) -> bool {
        let Ok(_permit) = limit.acquire().await else {
            return false;
        };
        for _ in 0..MAX_JOIN_ATTEMPTS {
            let (answer, took) = self.heartbeat().await;
            match answer {
                Ok(r) if r.error_code == 0 => {
                    self.shared
                        .join_latencies
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .record(took);
                    self.accept(&r);
                    let micros = self.shared.started.elapsed().as_micros() as i64;
                    self.shared
                        .last_join_micros
                        .fetch_max(micros, Ordering::Relaxed);
                    self.shared.members_joined.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Ok(r) => self
                    .shared
                    .errors
                    .add(ErrorCode::from_code(r.error_code).name(), 1),
                Err(kind) => self.shared.errors.add(&kind, 1),
            }
            tokio::time::sleep(JOIN_RETRY_BACKOFF).await;
        }
        false
    }

    /// Heartbeats at the coordinator's interval (at once after a new assignment) until the
    /// timeline's stop; latencies and errors of those sent in the measured window are counted.
    async fn heartbeat_until_stop(&mut self, mut timeline: Timeline) {
        loop {
            let wait = if self.send_now {
                Duration::ZERO
            } else {
                self.interval.mul_f64(1.0 + std::mem::take(&mut self.phase))
            };
            let next = Instant::now() + wait;
            // The timeline is set once; until then a member keeps heartbeating.
            let window = *timeline.borrow();
            if let Some((_, stop)) = window {
                if next >= stop {
                    return;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(next)) => {}
                changed = timeline.changed(), if window.is_none() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
            }
            let window = *timeline.borrow();
            let sent = Instant::now();
            let measured = window.is_some_and(|(from, stop)| sent >= from && sent < stop);
            let (answer, took) = self.heartbeat().await;
            match answer {
                Ok(r) if r.error_code == 0 => {
                    if measured {
                        let mut tally = self
                            .shared
                            .heartbeat_latencies
                            .lock()
                            .unwrap_or_else(|p| p.into_inner());
                        tally.record(took);
                    }
                    self.accept(&r);
                }
                Ok(r) => {
                    if measured {
                        self.shared
                            .heartbeat_latencies
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .record(took);
                        self.shared
                            .errors
                            .add(ErrorCode::from_code(r.error_code).name(), 1);
                    }
                    let code = ErrorCode::from_code(r.error_code);
                    if code == ErrorCode::FencedMemberEpoch || code == ErrorCode::UnknownMemberId {
                        self.release();
                    }
                }
                Err(kind) => {
                    if measured {
                        self.shared.errors.add(&kind, 1);
                    }
                }
            }
        }
    }
}

/// Runs the consumer-protocol workload (see the module doc); called by [`crate::groups::run`].
pub(crate) async fn run(cfg: Arc<GroupsConfig>) -> Result<GroupsResult, ClientError> {
    let cluster = Cluster::new(&cfg.bootstrap, CLIENT_ID, cfg.request_timeout);
    let partitions = i32::try_from(cfg.partitions).unwrap_or(i32::MAX);
    cluster
        .ensure_partitions(&cfg.topic, partitions, Instant::now() + cfg.request_timeout)
        .await?;
    let coordinator = find_coordinator(&cfg, &format!("{}-0", cfg.group_prefix)).await?;
    let mut pipes = Vec::with_capacity(cfg.connections);
    for _ in 0..cfg.connections {
        pipes.push(Pipe::open(&coordinator, cfg.request_timeout, cfg.max_in_flight).await?);
    }
    let limits: Vec<Arc<Semaphore>> = (0..cfg.connections)
        .map(|_| {
            Arc::new(Semaphore::new(
                cfg.join_concurrency.saturating_mul(cfg.members),
            ))
        })
        .collect();
    let shared = Arc::new(Shared {
        cfg: cfg.clone(),
        errors: ErrorCounts::default(),
        join_latencies: Mutex::new(Latencies::new()),
        heartbeat_latencies: Mutex::new(Latencies::new()),
        started: Instant::now(),
        members_joined: AtomicUsize::new(0),
        last_join_micros: AtomicI64::new(0),
    });
    let (timeline_tx, timeline_rx) = watch::channel(None);
    let total_members = cfg.groups.saturating_mul(cfg.members);
    // Every member reports once whether it joined (a failed task drops its sender).
    let (joined_tx, mut joined_rx) = mpsc::channel::<(usize, bool)>(total_members.max(1));
    let mut progress = Vec::with_capacity(cfg.groups);
    let mut tasks = Vec::with_capacity(total_members);
    for g in 0..cfg.groups {
        let c = g % cfg.connections;
        let group_progress = Arc::new(GroupProgress::default());
        progress.push(group_progress.clone());
        for m in 0..cfg.members {
            let phase = (g * cfg.members + m) as f64 / total_members.max(1) as f64;
            let mut member = Member {
                shared: shared.clone(),
                pipe: pipes[c].clone(),
                group: format!("{}-{g}", cfg.group_prefix),
                progress: group_progress.clone(),
                member_id: new_member_id(),
                epoch: 0,
                owned: Vec::new(),
                owned_changed: false,
                send_now: false,
                interval: cfg.heartbeat_interval,
                phase,
            };
            let (limit, joined_tx, timeline) =
                (limits[c].clone(), joined_tx.clone(), timeline_rx.clone());
            tasks.push(tokio::spawn(async move {
                let joined = member.join(&limit).await;
                let _ = joined_tx.try_send((g, joined));
                drop(joined_tx);
                if joined {
                    member.heartbeat_until_stop(timeline).await;
                }
            }));
        }
    }
    drop(joined_tx);
    let mut members_by_group = vec![0usize; cfg.groups];
    while let Some((g, joined)) = joined_rx.recv().await {
        members_by_group[g] += usize::from(joined);
    }
    let groups_joined = members_by_group
        .iter()
        .filter(|&&n| n == cfg.members)
        .count();
    let members_joined = shared.members_joined.load(Ordering::Relaxed);
    let join_secs = shared.last_join_micros.load(Ordering::Relaxed) as f64 / 1e6;

    let measure_from = Instant::now() + cfg.warmup;
    let stop = measure_from + cfg.duration;
    let _ = timeline_tx.send(Some((measure_from, stop)));
    let window = measure_window(&cfg, measure_from, stop).await;
    for task in tasks {
        let _ = task.await;
    }

    let converged: Vec<f64> = progress
        .iter()
        .filter_map(|p| p.converged_after_secs.get().copied())
        .collect();
    let heartbeat_latency = shared
        .heartbeat_latencies
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .summary();
    let join_latency = shared
        .join_latencies
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .summary();
    Ok(GroupsResult {
        protocol: GroupProtocol::Consumer,
        groups_joined,
        members_joined,
        join_secs,
        join_latency: Some(join_latency),
        groups_converged: Some(converged.len()),
        converge_secs: Some(converged.iter().copied().fold(0.0, f64::max)),
        heartbeats_per_sec: heartbeat_latency.count as f64
            / window.measured_secs.max(f64::MIN_POSITIVE),
        heartbeat_latency,
        errors: shared.errors.snapshot(),
        server_cpu_percent: window.server_cpu_percent,
        client_cpu_percent: window.client_cpu_percent,
        load_average: window.load_average,
        measured_secs: window.measured_secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_look_like_kafka_uuids() {
        let a = new_member_id();
        assert_eq!(a.len(), 22);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_ne!(a, new_member_id());
    }

    #[test]
    fn a_group_converges_when_every_partition_is_owned() {
        let progress = GroupProgress::default();
        let started = Instant::now();
        progress.add(2, 3, started);
        assert!(progress.converged_after_secs.get().is_none());
        progress.add(1, 3, started);
        let first = *progress.converged_after_secs.get().expect("converged");
        progress.add(-1, 3, started);
        progress.add(1, 3, started);
        assert_eq!(progress.converged_after_secs.get(), Some(&first));
    }
}
