//! The `groups` workload: a load generator for a group coordinator. `groups` consumer groups
//! of `members` members each join (JoinGroup with the MEMBER_ID_REQUIRED handshake, then
//! SyncGroup with the leader's assignment) over a bounded number of connections, many members
//! per connection with pipelined requests; then every member heartbeats every
//! `heartbeat_interval` (Java's `heartbeat.interval.ms` is 3 s) until the run ends. Heartbeat
//! latency (request written to response read, client queueing included) is recorded after a
//! warm-up; the server's CPU time over the measured window is read from `/proc/PID/stat` when
//! its PID is given.
//!
//! Every group's members share one connection (so a group's joins are never stuck behind
//! another connection's backlog); a connection joins at most `join_concurrency` groups at a
//! time, which keeps its JoinGroup requests (held by the server until the rebalance completes)
//! below the server's in-flight limit per connection.
//!
//! That is the classic protocol (`--protocol classic`, the default). With `--protocol consumer`
//! the members speak KIP-848's ConsumerGroupHeartbeat instead ([`crate::groups_consumer`]).

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::heartbeat_request::HeartbeatRequest;
use kafka_proto::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use kafka_proto::messages::join_group_response::JoinGroupResponse;
use kafka_proto::messages::sync_group_request::{SyncGroupRequest, SyncGroupRequestAssignment};
use kafka_proto::ApiKey;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::client::consumer_protocol::subscription;
use crate::client::coordinator::{HEARTBEAT_VERSION, JOIN_GROUP_VERSION, SYNC_GROUP_VERSION};
use crate::client::{ClientError, Connection};
use crate::stats::{ErrorCounts, Latencies, LatencySummary};
use crate::units::ParseError;

/// Join/sync rounds a member tries before it gives up (a rebalance restarts the round).
const MAX_JOIN_ROUNDS: usize = 10;
/// Linux's USER_HZ: the unit of the CPU times in `/proc/PID/stat`.
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;
/// The client id the members use (their member ids start with it).
pub(crate) const CLIENT_ID: &str = "vdl-perf-groups";

/// The group protocol the members speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupProtocol {
    /// JoinGroup, SyncGroup, Heartbeat (client-side assignment).
    Classic,
    /// KIP-848's ConsumerGroupHeartbeat v1 (server-side assignment).
    Consumer,
}

impl FromStr for GroupProtocol {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<GroupProtocol, ParseError> {
        match s {
            "classic" => Ok(GroupProtocol::Classic),
            "consumer" => Ok(GroupProtocol::Consumer),
            _ => Err(ParseError {
                what: "group protocol",
                input: s.to_string(),
                why: "use classic or consumer",
            }),
        }
    }
}

/// What a `groups` run does.
#[derive(Debug, Clone)]
pub struct GroupsConfig {
    /// Bootstrap server (`host:port`); the coordinator is found through it.
    pub bootstrap: String,
    /// Consumer groups.
    pub groups: usize,
    /// Members per group.
    pub members: usize,
    /// Connections to the coordinator (groups are spread over them).
    pub connections: usize,
    /// Groups a connection joins at the same time.
    pub join_concurrency: usize,
    /// Requests in flight per connection (at most the server's limit).
    pub max_in_flight: usize,
    /// How often each member heartbeats.
    pub heartbeat_interval: Duration,
    /// Heartbeats before measuring starts (after every group joined).
    pub warmup: Duration,
    /// How long heartbeats are measured.
    pub duration: Duration,
    /// The members' `session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// The members' `max.poll.interval.ms` (JoinGroup's rebalance timeout).
    pub rebalance_timeout_ms: i32,
    /// How long one request may take.
    pub request_timeout: Duration,
    /// The server's PID, to read its CPU time (Linux).
    pub server_pid: Option<u32>,
    /// Prefix of the group ids (`<prefix>-<n>`).
    pub group_prefix: String,
    /// The group protocol the members speak.
    pub protocol: GroupProtocol,
    /// The topic the members subscribe to.
    pub topic: String,
    /// Consumer protocol: the topic's partition count (it is created with it when missing).
    pub partitions: u32,
    /// Consumer protocol: the server-side assignor the members name (none: the server's
    /// default).
    pub server_assignor: Option<String>,
}

/// What a `groups` run measured.
#[derive(Debug, Clone, Serialize)]
pub struct GroupsResult {
    /// The group protocol the members spoke.
    pub protocol: GroupProtocol,
    /// Groups whose every member joined and synced.
    pub groups_joined: usize,
    /// Members that joined and synced.
    pub members_joined: usize,
    /// Time from the first JoinGroup to the last member's SyncGroup answer (consumer
    /// protocol: from the first joining heartbeat to the last one's answer).
    pub join_secs: f64,
    /// Consumer protocol: latency of the joining heartbeats (member epoch 0) that succeeded.
    pub join_latency: Option<LatencySummary>,
    /// Consumer protocol: groups whose every partition was owned by a member at some point.
    pub groups_converged: Option<usize>,
    /// Consumer protocol: time from the first joining heartbeat until the last group
    /// converged (every partition owned).
    pub converge_secs: Option<f64>,
    /// Heartbeat latency over the measured window.
    pub heartbeat_latency: LatencySummary,
    /// Heartbeats answered per second over the measured window.
    pub heartbeats_per_sec: f64,
    /// Errors by kind (Kafka error name, `IO`, `CLIENT_TIMEOUT`): of the joins, and of the
    /// heartbeats sent in the measured window.
    pub errors: BTreeMap<String, u64>,
    /// The server's CPU time over the measured window, percent of one core.
    pub server_cpu_percent: Option<f64>,
    /// This load generator's CPU time over the measured window, percent of one core.
    pub client_cpu_percent: Option<f64>,
    /// `/proc/loadavg`'s 1-minute figure at the start and the end of the measured window.
    pub load_average: (Option<f64>, Option<f64>),
    /// The measured window.
    pub measured_secs: f64,
}

/// A connection shared by many tasks: requests are written in the order they are submitted
/// and answered in that order (as Kafka requires), with at most `max_in_flight` outstanding.
#[derive(Clone)]
pub(crate) struct Pipe {
    calls: mpsc::Sender<Call>,
}

type Reply = oneshot::Sender<Result<Response, ClientError>>;

struct Call {
    version: i16,
    request: Request,
    reply: Reply,
}

impl Pipe {
    /// Connects and starts the writing and reading tasks (they end when the pipe is dropped or
    /// the connection fails).
    pub(crate) async fn open(
        addr: &str,
        timeout: Duration,
        max_in_flight: usize,
    ) -> Result<Pipe, ClientError> {
        let conn = Connection::connect(addr, CLIENT_ID, timeout).await?;
        let Connection {
            mut writer,
            mut reader,
            ..
        } = conn;
        let (calls_tx, mut calls_rx) = mpsc::channel::<Call>(max_in_flight.max(1));
        let (sent_tx, mut sent_rx) =
            mpsc::channel::<(i32, ApiKey, i16, Reply)>(max_in_flight.max(1));
        tokio::spawn(async move {
            while let Some(call) = calls_rx.recv().await {
                let api = call.request.api_key();
                match writer.send(call.version, &call.request).await {
                    Ok(corr) => {
                        if sent_tx
                            .send((corr, api, call.version, call.reply))
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = call.reply.send(Err(e));
                        break;
                    }
                }
            }
        });
        tokio::spawn(async move {
            while let Some((corr, api, version, reply)) = sent_rx.recv().await {
                let r = reader.recv(corr, api, version).await;
                let failed = r.is_err();
                let _ = reply.send(r);
                if failed {
                    break;
                }
            }
        });
        Ok(Pipe { calls: calls_tx })
    }

    /// Sends `request` and waits (at most `timeout`) for its response.
    pub(crate) async fn call(
        &self,
        version: i16,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        let what = request.api_key().name();
        let closed = || ClientError::Io(std::io::ErrorKind::ConnectionAborted.into());
        let fut = async {
            let (reply, rx) = oneshot::channel();
            self.calls
                .send(Call {
                    version,
                    request,
                    reply,
                })
                .await
                .map_err(|_| closed())?;
            rx.await.map_err(|_| closed())?
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| ClientError::Timeout(what))?
    }
}

/// The name an error is counted under.
pub(crate) fn error_kind(e: &ClientError) -> String {
    match e {
        ClientError::Io(_) => "IO".into(),
        ClientError::Timeout(_) => "CLIENT_TIMEOUT".into(),
        ClientError::Broker { code, .. } => code.name().into(),
        other => format!("CLIENT({other})"),
    }
}

/// One JoinGroup of `group` as `member_id` (empty: a new member).
async fn join_once(
    pipe: &Pipe,
    cfg: &GroupsConfig,
    group: &str,
    member_id: &str,
) -> Result<JoinGroupResponse, String> {
    let join = JoinGroupRequest {
        group_id: group.into(),
        session_timeout_ms: cfg.session_timeout_ms,
        rebalance_timeout_ms: cfg.rebalance_timeout_ms,
        member_id: member_id.into(),
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            metadata: subscription(&cfg.topic),
            ..Default::default()
        }],
        ..Default::default()
    };
    match pipe
        .call(JOIN_GROUP_VERSION, join.into(), cfg.request_timeout)
        .await
    {
        Ok(Response::JoinGroup(r)) => Ok(r),
        Ok(_) => Err("CLIENT(unexpected response)".into()),
        Err(e) => Err(error_kind(&e)),
    }
}

/// One SyncGroup of `group` after join answer `joined`; the leader assigns every member a
/// distinct assignment. The error code of the answer.
async fn sync_once(
    pipe: &Pipe,
    cfg: &GroupsConfig,
    group: &str,
    joined: &JoinGroupResponse,
) -> Result<i16, String> {
    let assignments = if joined.leader == joined.member_id {
        joined
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| SyncGroupRequestAssignment {
                member_id: m.member_id.clone(),
                assignment: Bytes::from(format!("partition-{i}")),
                ..Default::default()
            })
            .collect()
    } else {
        Vec::new()
    };
    let sync = SyncGroupRequest {
        group_id: group.into(),
        generation_id: joined.generation_id,
        member_id: joined.member_id.clone(),
        protocol_type: Some("consumer".into()),
        protocol_name: joined.protocol_name.clone(),
        assignments,
        ..Default::default()
    };
    match pipe
        .call(SYNC_GROUP_VERSION, sync.into(), cfg.request_timeout)
        .await
    {
        Ok(Response::SyncGroup(s)) => Ok(s.error_code),
        Ok(_) => Err("CLIENT(unexpected response)".into()),
        Err(e) => Err(error_kind(&e)),
    }
}

/// Runs `f` for every member at once (requests pipelined on the group's connection) and
/// collects the answers in member order.
async fn for_each_member<T, F, Fut>(items: Vec<T>, f: F) -> Vec<Result<JoinGroupResponse, String>>
where
    T: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = Result<JoinGroupResponse, String>> + Send + 'static,
{
    let tasks: Vec<_> = items.into_iter().map(|t| tokio::spawn(f(t))).collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(
            t.await
                .unwrap_or_else(|_| Err("CLIENT(task failed)".into())),
        );
    }
    out
}

/// Joins every member of `group` in lock step, as consumers starting together do: all ask for
/// a member id, all join with it (answered together once the rebalance completes), all sync
/// (answered once the leader's assignment arrives). In lock step no member's request waits on
/// the connection behind a request of its own group that cannot complete without it (the
/// server answers a connection's requests in order). A rebalance or error restarts the round
/// with new members, at most [`MAX_JOIN_ROUNDS`] times. The joined members: (group, member
/// id, generation).
async fn join_group(
    pipe: Pipe,
    cfg: Arc<GroupsConfig>,
    group: String,
    errors: Arc<ErrorCounts>,
) -> Vec<(String, String, i32)> {
    let mut member_ids: Vec<String> = vec![String::new(); cfg.members];
    for _ in 0..MAX_JOIN_ROUNDS {
        // Member ids for the members that have none.
        let answers = for_each_member(member_ids.clone(), |id: String| {
            let (pipe, cfg, group) = (pipe.clone(), cfg.clone(), group.clone());
            async move {
                if id.is_empty() {
                    join_once(&pipe, &cfg, &group, "").await
                } else {
                    Ok(JoinGroupResponse {
                        error_code: ErrorCode::MemberIdRequired.code(),
                        member_id: id,
                        ..Default::default()
                    })
                }
            }
        })
        .await;
        let mut ok = true;
        for (slot, a) in member_ids.iter_mut().zip(answers) {
            match a {
                Ok(r) if r.error_code == ErrorCode::MemberIdRequired.code() => *slot = r.member_id,
                Ok(r) => {
                    errors.add(ErrorCode::from_code(r.error_code).name(), 1);
                    ok = false;
                }
                Err(kind) => {
                    errors.add(&kind, 1);
                    ok = false;
                }
            }
        }
        if !ok {
            continue;
        }
        // The joins proper.
        let answers = for_each_member(member_ids.clone(), |id: String| {
            let (pipe, cfg, group) = (pipe.clone(), cfg.clone(), group.clone());
            async move { join_once(&pipe, &cfg, &group, &id).await }
        })
        .await;
        let mut joined = Vec::with_capacity(cfg.members);
        for (slot, a) in member_ids.iter_mut().zip(answers) {
            match a {
                Ok(r) if r.error_code == 0 => joined.push(r),
                Ok(r) => {
                    errors.add(ErrorCode::from_code(r.error_code).name(), 1);
                    if r.error_code != ErrorCode::RebalanceInProgress.code() {
                        slot.clear();
                    }
                }
                Err(kind) => {
                    errors.add(&kind, 1);
                    slot.clear();
                }
            }
        }
        if joined.len() != cfg.members {
            continue;
        }
        // The syncs.
        let mut syncs = Vec::with_capacity(joined.len());
        for j in &joined {
            let (pipe, cfg, group, j) = (pipe.clone(), cfg.clone(), group.clone(), j.clone());
            syncs.push(tokio::spawn(async move {
                sync_once(&pipe, &cfg, &group, &j).await
            }));
        }
        let mut synced = 0;
        for s in syncs {
            match s
                .await
                .unwrap_or_else(|_| Err("CLIENT(task failed)".into()))
            {
                Ok(0) => synced += 1,
                Ok(code) => errors.add(ErrorCode::from_code(code).name(), 1),
                Err(kind) => errors.add(&kind, 1),
            }
        }
        if synced == joined.len() {
            return joined
                .into_iter()
                .map(|j| (group.clone(), j.member_id, j.generation_id))
                .collect();
        }
    }
    Vec::new()
}

/// Heartbeat latencies of one connection's members.
type Tally = Arc<Mutex<Latencies>>;

/// One member's heartbeats until `stop`, every `interval` from `first`; latencies of those sent
/// at or after `measure_from` are recorded.
#[allow(clippy::too_many_arguments)]
async fn heartbeat_loop(
    pipe: Pipe,
    group: String,
    member_id: String,
    generation: i32,
    first: tokio::time::Instant,
    measure_from: Instant,
    stop: Instant,
    cfg: Arc<GroupsConfig>,
    tally: Tally,
    errors: Arc<ErrorCounts>,
) {
    let mut ticker = tokio::time::interval_at(first, cfg.heartbeat_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let sent = Instant::now();
        if sent >= stop {
            return;
        }
        let request = HeartbeatRequest {
            group_id: group.clone(),
            generation_id: generation,
            member_id: member_id.clone(),
            ..Default::default()
        };
        let r = pipe
            .call(HEARTBEAT_VERSION, request.into(), cfg.request_timeout)
            .await;
        let took = sent.elapsed();
        let measured = sent >= measure_from;
        match r {
            Ok(Response::Heartbeat(h)) if measured => {
                tally.lock().unwrap_or_else(|p| p.into_inner()).record(took);
                if h.error_code != 0 {
                    errors.add(ErrorCode::from_code(h.error_code).name(), 1);
                }
            }
            Ok(_) if measured => errors.add("CLIENT(unexpected response)", 1),
            Err(e) if measured => errors.add(&error_kind(&e), 1),
            _ => {}
        }
    }
}

/// User plus system CPU seconds of process `pid` (`self` for this one), from `/proc`.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces, and ends at the last ')'): state is
    // field 3, utime field 14, stime field 15.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / CLOCK_TICKS_PER_SECOND)
}

/// The 1-minute load average.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The coordinator of `group` as the bootstrap server names it, asking again (until
/// `request_timeout`) while it answers COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS
/// (a new broker creating its offsets topic).
pub(crate) async fn find_coordinator(
    cfg: &GroupsConfig,
    group: &str,
) -> Result<String, ClientError> {
    let deadline = Instant::now() + cfg.request_timeout;
    let mut backoff = Duration::from_millis(50);
    loop {
        let mut conn = Connection::connect(&cfg.bootstrap, CLIENT_ID, cfg.request_timeout).await?;
        match crate::client::coordinator::find_coordinator(&mut conn, group, 0).await {
            Err(ClientError::Broker { code, .. })
                if matches!(
                    code,
                    ErrorCode::CoordinatorNotAvailable | ErrorCode::CoordinatorLoadInProgress
                ) && Instant::now() + backoff < deadline =>
            {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            answer => return answer,
        }
    }
}

/// Runs the workload: join every group, heartbeat through the warm-up and the measured window.
/// Every member's requests are bounded by `request_timeout`; the run by the join phase (each
/// member at most [`MAX_JOIN_ROUNDS`] rounds) plus warm-up plus duration.
pub async fn run(cfg: GroupsConfig) -> Result<GroupsResult, ClientError> {
    assert!(cfg.connections > 0 && cfg.members > 0 && cfg.join_concurrency > 0);
    let cfg = Arc::new(cfg);
    if cfg.protocol == GroupProtocol::Consumer {
        return crate::groups_consumer::run(cfg).await;
    }
    let coordinator = find_coordinator(&cfg, &format!("{}-0", cfg.group_prefix)).await?;
    let mut pipes = Vec::with_capacity(cfg.connections);
    for _ in 0..cfg.connections {
        pipes.push(Pipe::open(&coordinator, cfg.request_timeout, cfg.max_in_flight).await?);
    }
    let errors = Arc::new(ErrorCounts::default());

    // Join: group g on connection g mod connections, join_concurrency groups per connection.
    let join_start = Instant::now();
    let limits: Vec<Arc<Semaphore>> = (0..cfg.connections)
        .map(|_| Arc::new(Semaphore::new(cfg.join_concurrency)))
        .collect();
    let mut joins = Vec::with_capacity(cfg.groups);
    for g in 0..cfg.groups {
        let c = g % cfg.connections;
        let (pipe, limit) = (pipes[c].clone(), limits[c].clone());
        let (cfg2, errors) = (cfg.clone(), errors.clone());
        let group = format!("{}-{g}", cfg.group_prefix);
        joins.push(tokio::spawn(async move {
            let _permit = limit.acquire_owned().await.ok()?;
            Some((c, join_group(pipe, cfg2, group, errors).await))
        }));
    }
    let mut members = Vec::with_capacity(cfg.groups * cfg.members);
    let mut groups_joined = 0;
    for j in joins {
        if let Ok(Some((c, joined))) = j.await {
            if joined.len() == cfg.members {
                groups_joined += 1;
            }
            members.extend(joined.into_iter().map(|m| (c, m)));
        }
    }
    let join_secs = join_start.elapsed().as_secs_f64();

    // Heartbeats: each member at its own phase in [0, interval), so the load is even.
    let start = Instant::now();
    let measure_from = start + cfg.warmup;
    let stop = measure_from + cfg.duration;
    let tallies: Vec<Tally> = (0..cfg.connections)
        .map(|_| Arc::new(Mutex::new(Latencies::new())))
        .collect();
    let n = members.len().max(1);
    let mut beats = Vec::with_capacity(members.len());
    for (i, (c, (group, member_id, generation))) in members.iter().cloned().enumerate() {
        let phase = cfg.heartbeat_interval.mul_f64(i as f64 / n as f64);
        let first = tokio::time::Instant::from_std(start) + phase;
        beats.push(tokio::spawn(heartbeat_loop(
            pipes[c].clone(),
            group,
            member_id,
            generation,
            first,
            measure_from,
            stop,
            cfg.clone(),
            tallies[c].clone(),
            errors.clone(),
        )));
    }
    let window = measure_window(&cfg, measure_from, stop).await;
    for b in beats {
        let _ = b.await;
    }
    let mut all = Latencies::new();
    for t in &tallies {
        all.merge(&t.lock().unwrap_or_else(|p| p.into_inner()));
    }
    let heartbeat_latency = all.summary();
    Ok(GroupsResult {
        protocol: GroupProtocol::Classic,
        groups_joined,
        members_joined: members.len(),
        join_secs,
        join_latency: None,
        groups_converged: None,
        converge_secs: None,
        heartbeats_per_sec: heartbeat_latency.count as f64
            / window.measured_secs.max(f64::MIN_POSITIVE),
        heartbeat_latency,
        errors: errors.snapshot(),
        server_cpu_percent: window.server_cpu_percent,
        client_cpu_percent: window.client_cpu_percent,
        load_average: window.load_average,
        measured_secs: window.measured_secs,
    })
}

/// What was measured over the measured window, besides the latencies.
pub(crate) struct Window {
    /// The server's CPU time over the window, percent of one core.
    pub(crate) server_cpu_percent: Option<f64>,
    /// This process's CPU time over the window, percent of one core.
    pub(crate) client_cpu_percent: Option<f64>,
    /// The 1-minute load average at the start and the end.
    pub(crate) load_average: (Option<f64>, Option<f64>),
    /// The window's length.
    pub(crate) measured_secs: f64,
}

/// Sleeps until `measure_from`, then until `stop`, reading the CPU times and load averages at
/// both.
pub(crate) async fn measure_window(
    cfg: &GroupsConfig,
    measure_from: Instant,
    stop: Instant,
) -> Window {
    tokio::time::sleep_until(tokio::time::Instant::from_std(measure_from)).await;
    let pid = cfg.server_pid.map(|p| p.to_string());
    let server_cpu_start = pid.as_deref().and_then(cpu_seconds);
    let client_cpu_start = cpu_seconds("self");
    let load_start = load_average();
    let window_start = Instant::now();
    tokio::time::sleep_until(tokio::time::Instant::from_std(stop)).await;
    let measured_secs = window_start.elapsed().as_secs_f64();
    let server_cpu_end = pid.as_deref().and_then(cpu_seconds);
    let client_cpu_end = cpu_seconds("self");
    let load_end = load_average();
    let percent = |a: Option<f64>, b: Option<f64>| {
        Some(100.0 * (b? - a?) / measured_secs.max(f64::MIN_POSITIVE))
    };
    Window {
        server_cpu_percent: percent(server_cpu_start, server_cpu_end),
        client_cpu_percent: percent(client_cpu_start, client_cpu_end),
        load_average: (load_start, load_end),
        measured_secs,
    }
}

/// The result as text, one figure a line.
pub fn render(r: &GroupsResult) -> String {
    let l = &r.heartbeat_latency;
    let opt = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.1}"));
    let mut s = format!(
        "protocol: {}\n\
         groups joined: {} ({} members) in {:.1} s\n\
         heartbeats: {} in {:.1} s ({:.0}/s)\n\
         heartbeat latency ms: p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}\n\
         server cpu: {} % of a core; load generator cpu: {} %\n\
         load average (1 min): {} at start, {} at end\n",
        match r.protocol {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
        },
        r.groups_joined,
        r.members_joined,
        r.join_secs,
        l.count,
        r.measured_secs,
        r.heartbeats_per_sec,
        l.p50_ms,
        l.p99_ms,
        l.p999_ms,
        l.max_ms,
        opt(r.server_cpu_percent),
        opt(r.client_cpu_percent),
        opt(r.load_average.0),
        opt(r.load_average.1),
    );
    if let Some(j) = &r.join_latency {
        s.push_str(&format!(
            "join latency ms (epoch 0 heartbeat): p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}\n",
            j.p50_ms, j.p99_ms, j.p999_ms, j.max_ms
        ));
    }
    if let (Some(groups), Some(secs)) = (r.groups_converged, r.converge_secs) {
        s.push_str(&format!(
            "groups converged (every partition owned): {groups} in {secs:.1} s\n"
        ));
    }
    if r.errors.is_empty() {
        s.push_str("errors: none\n");
    } else {
        for (k, v) in &r.errors {
            s.push_str(&format!("errors {k}: {v}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_time_is_readable() {
        let a = cpu_seconds("self").expect("Linux /proc");
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = cpu_seconds("self").expect("Linux /proc");
        assert!(b >= a);
        assert!(load_average().is_some());
    }
}
