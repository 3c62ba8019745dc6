//! Group-mode consumers of a verify run: members of one classic consumer group that share the
//! topic's partitions, as Kafka's Java consumer does with the range assignor and manual
//! commits.
//!
//! A member joins (JoinGroup with the MEMBER_ID_REQUIRED handshake), and when it is the leader
//! computes the range assignment on the client and hands it out in SyncGroup. For every
//! assigned partition it reads the group's committed offset (OffsetFetch; the log start when
//! none), records the assignment, then fetches round-robin over its partitions, recording
//! every polled record with its member id and generation, and commits the positions it
//! reached (OffsetCommit with its generation) after every round that advanced. It heartbeats
//! every [`HEARTBEAT_INTERVAL`]. REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION on a heartbeat or
//! commit makes it rejoin (and resume from the committed offsets: records polled after the
//! last successful commit are delivered again, at-least-once); UNKNOWN_MEMBER_ID makes it
//! join as a new member; a coordinator failure makes it find the coordinator again.
//!
//! A member stops (and leaves the group) once the producers stopped and it has read every
//! assigned partition up to the high watermark of that moment, or at the drain deadline.
//! Bounded: one request in flight, every request bounded by the client's timeout, at most
//! `max_records` polled records.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_proto::error_code::ErrorCode;
use tokio::sync::watch;

use super::history::{Assignment, Committed, Poll};
use super::run::{list_offset, records_from, FETCH_BYTES};
use crate::client::consumer_protocol::{
    assigned_partitions, assignment, range_assign, subscription,
};
use crate::client::coordinator::{self, MemberTimeouts};
use crate::client::protocol::{self, FetchSpec, EARLIEST_TIMESTAMP};
use crate::client::{ClientError, Cluster, Connection, FETCH_VERSION};

/// The members' `session.timeout.ms` (within Kafka's default 6 s..30 min bounds).
pub const SESSION_TIMEOUT_MS: i32 = 10_000;
/// The members' `max.poll.interval.ms`: how long the coordinator waits for every member to
/// rejoin in a rebalance.
pub const REBALANCE_TIMEOUT_MS: i32 = 10_000;
/// How often a member heartbeats (Java's default is 3 s; shorter so rebalances are noticed
/// quickly in a short run).
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// How long a Fetch may wait for data.
const FETCH_MAX_WAIT_MS: i32 = 100;
/// Pause after a failure before the next attempt.
const BACKOFF: Duration = Duration::from_millis(100);
/// JoinGroup attempts in one join (MEMBER_ID_REQUIRED takes two).
const JOIN_ATTEMPTS: usize = 3;

/// When the members stop: set once the producers stopped.
#[derive(Debug, Clone)]
pub struct Drain {
    /// Stop at this time whatever was read.
    pub until: Instant,
    /// Stop once every assigned partition was read up to here (by partition index).
    pub high_watermarks: Vec<i64>,
}

/// What one member does.
pub struct MemberConfig {
    /// The cluster.
    pub cluster: Arc<Cluster>,
    /// Topic.
    pub topic: String,
    /// Group id.
    pub group: String,
    /// Partitions of the topic.
    pub partitions: i32,
    /// This member's consumer number in the history.
    pub consumer: u32,
    /// How long after the start it joins.
    pub join_after: Duration,
    /// Most records it keeps.
    pub max_records: u64,
    /// Set when the producers stopped.
    pub drain: watch::Receiver<Option<Drain>>,
}

/// What one member observed.
#[derive(Debug, Default)]
pub struct MemberHistory {
    /// Its polls, in poll order.
    pub polls: Vec<Poll>,
    /// Its assignments, in order.
    pub assignments: Vec<Assignment>,
}

/// What a failed group call asks of the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recovery {
    /// Rejoin with the same member id (a rebalance started or the generation is old).
    Rejoin,
    /// Join again as a new member (the coordinator forgot this one).
    NewMember,
    /// Find the coordinator again and rejoin.
    Reconnect,
}

fn recovery(e: &ClientError) -> Recovery {
    match e {
        ClientError::Broker { code, .. } => match code {
            ErrorCode::RebalanceInProgress | ErrorCode::IllegalGeneration => Recovery::Rejoin,
            ErrorCode::UnknownMemberId | ErrorCode::FencedInstanceId => Recovery::NewMember,
            _ => Recovery::Reconnect,
        },
        _ => Recovery::Reconnect,
    }
}

/// A connection to the group's coordinator, with room in its timeout for a JoinGroup that
/// the coordinator holds until the rebalance completes.
async fn connect_coordinator(cluster: &Cluster, group: &str) -> Result<Connection, ClientError> {
    let mut any = cluster.connect_any().await?;
    let addr = coordinator::find_coordinator(&mut any, group, 0).await?;
    let mut c = cluster.connect(&addr).await?;
    c.timeout += Duration::from_millis(REBALANCE_TIMEOUT_MS as u64 + 5_000);
    Ok(c)
}

/// Joins and syncs; the generation and this member's partitions.
async fn join_and_sync(
    c: &mut Connection,
    cfg: &MemberConfig,
    member_id: &mut String,
) -> Result<(i32, Vec<i32>), ClientError> {
    let timeouts = MemberTimeouts {
        session_ms: SESSION_TIMEOUT_MS,
        rebalance_ms: REBALANCE_TIMEOUT_MS,
    };
    let mut joined = None;
    for _ in 0..JOIN_ATTEMPTS {
        let r =
            coordinator::join_group(c, &cfg.group, member_id, timeouts, subscription(&cfg.topic))
                .await?;
        match ErrorCode::from_code(r.error_code) {
            ErrorCode::MemberIdRequired => *member_id = r.member_id,
            ErrorCode::None => {
                joined = Some(r);
                break;
            }
            code => {
                return Err(ClientError::Broker {
                    code,
                    what: "JoinGroup",
                })
            }
        }
    }
    let joined = joined.ok_or(ClientError::Broker {
        code: ErrorCode::MemberIdRequired,
        what: "JoinGroup",
    })?;
    *member_id = joined.member_id.clone();
    let assignments = if joined.leader == joined.member_id {
        let ids: Vec<String> = joined.members.iter().map(|m| m.member_id.clone()).collect();
        range_assign(&ids, cfg.partitions)
            .into_iter()
            .map(|(m, ps)| (m, assignment(&cfg.topic, &ps)))
            .collect()
    } else {
        Vec::new()
    };
    let data = coordinator::sync_group(c, &cfg.group, &joined, assignments).await?;
    let mut partitions = assigned_partitions(&data, &cfg.topic)
        .map_err(|e| ClientError::Unexpected(e.to_string()))?;
    partitions.retain(|p| (0..cfg.partitions).contains(p));
    Ok((joined.generation_id, partitions))
}

/// One member's life: join, poll and commit, rejoin on rebalances, leave when drained.
pub async fn member(cfg: MemberConfig) -> MemberHistory {
    tokio::time::sleep(cfg.join_after).await;
    let mut h = MemberHistory::default();
    let mut member_id = String::new();
    let mut coord: Option<Connection> = None;
    let mut leaders: Vec<Option<Connection>> = (0..cfg.partitions).map(|_| None).collect();
    loop {
        if drain_over(&cfg) || h.polls.len() as u64 >= cfg.max_records {
            break;
        }
        if coord.is_none() {
            match connect_coordinator(&cfg.cluster, &cfg.group).await {
                Ok(c) => coord = Some(c),
                Err(_) => {
                    tokio::time::sleep(BACKOFF).await;
                    continue;
                }
            }
        }
        let c = coord.as_mut().expect("connected above");
        let outcome = async {
            let (generation, partitions) = join_and_sync(c, &cfg, &mut member_id).await?;
            let committed =
                coordinator::offset_fetch(c, &cfg.group, &cfg.topic, &partitions).await?;
            let mut positions = Vec::with_capacity(partitions.len());
            for (&p, &o) in partitions.iter().zip(&committed) {
                let start = if o >= 0 {
                    o
                } else {
                    list_offset(&cfg.cluster, &cfg.topic, p, EARLIEST_TIMESTAMP).await?
                };
                h.assignments.push(Assignment {
                    consumer: cfg.consumer,
                    member: member_id.clone(),
                    generation,
                    partition: p,
                    start_offset: start,
                });
                positions.push((p, start));
            }
            poll_generation(
                &cfg,
                c,
                &member_id,
                generation,
                positions,
                &mut leaders,
                &mut h,
            )
            .await
        }
        .await;
        match outcome {
            Ok(()) => break,
            Err(e) => match recovery(&e) {
                Recovery::Rejoin => {}
                Recovery::NewMember => member_id.clear(),
                Recovery::Reconnect => {
                    coord = None;
                    tokio::time::sleep(BACKOFF).await;
                }
            },
        }
    }
    if let (Some(c), false) = (coord.as_mut(), member_id.is_empty()) {
        // Best effort: the session timeout removes the member otherwise.
        let _ = coordinator::leave_group(c, &cfg.group, &member_id).await;
    }
    h
}

fn drain_over(cfg: &MemberConfig) -> bool {
    cfg.drain
        .borrow()
        .as_ref()
        .is_some_and(|d| Instant::now() >= d.until)
}

/// Polls the assigned `positions` ((partition, next offset)) in one generation: fetch each
/// partition in turn, record, commit, heartbeat. `Ok` when drained (the member is done); the
/// error of a heartbeat or commit that ends the generation otherwise.
async fn poll_generation(
    cfg: &MemberConfig,
    coord: &mut Connection,
    member_id: &str,
    generation: i32,
    mut positions: Vec<(i32, i64)>,
    leaders: &mut [Option<Connection>],
    h: &mut MemberHistory,
) -> Result<(), ClientError> {
    let mut last_heartbeat = Instant::now();
    loop {
        let drain = cfg.drain.borrow().clone();
        if let Some(d) = drain {
            let drained = positions.iter().all(|&(p, next)| {
                next >= d
                    .high_watermarks
                    .get(p as usize)
                    .copied()
                    .unwrap_or(i64::MAX)
            });
            if drained || Instant::now() >= d.until {
                return Ok(());
            }
        }
        if h.polls.len() as u64 >= cfg.max_records {
            return Ok(());
        }
        if positions.is_empty() {
            tokio::time::sleep(BACKOFF).await;
        }
        let mut advanced = false;
        for (partition, next) in positions.iter_mut() {
            let Ok(data) =
                fetch_once(cfg, &mut leaders[*partition as usize], *partition, *next).await
            else {
                leaders[*partition as usize] = None;
                continue;
            };
            let batch_end = kafka_proto::records::split_batches_lenient(data.clone())
                .filter_map(Result::ok)
                .map(|b| b.next_offset())
                .max();
            let Ok(reads) = records_from(data, *partition, *next) else {
                // Recorded as nothing read; the final read reports corrupt data.
                leaders[*partition as usize] = None;
                continue;
            };
            let before = *next;
            match (reads.last(), batch_end) {
                (Some(r), _) => *next = r.offset + 1,
                // Only control batches: move past them.
                (None, Some(e)) if e > *next => *next = e,
                _ => {}
            }
            advanced |= *next > before;
            h.polls.extend(reads.into_iter().map(|read| Poll {
                consumer: cfg.consumer,
                member: Some(member_id.to_string()),
                generation: Some(generation),
                at_us: None,
                read,
            }));
        }
        if advanced {
            coordinator::offset_commit(
                coord, &cfg.group, member_id, generation, &cfg.topic, &positions,
            )
            .await?;
        }
        if last_heartbeat.elapsed() >= HEARTBEAT_INTERVAL {
            coordinator::heartbeat(coord, &cfg.group, member_id, generation).await?;
            last_heartbeat = Instant::now();
        }
    }
}

/// One Fetch of `partition` at `offset` from its leader (connecting when needed).
async fn fetch_once(
    cfg: &MemberConfig,
    conn: &mut Option<Connection>,
    partition: i32,
    offset: i64,
) -> Result<bytes::Bytes, ClientError> {
    if conn.is_none() {
        let deadline = Instant::now() + cfg.cluster.timeout();
        *conn = Some(
            cfg.cluster
                .connect_leader(&cfg.topic, partition, deadline, &mut |_| {})
                .await?,
        );
    }
    let c = conn.as_mut().expect("connected above");
    let spec = FetchSpec {
        offset,
        partition_max_bytes: FETCH_BYTES,
        max_wait_ms: FETCH_MAX_WAIT_MS,
        min_bytes: 1,
    };
    let resp = c
        .request(FETCH_VERSION, &protocol::fetch(&cfg.topic, partition, spec))
        .await?;
    Ok(protocol::fetched(resp, partition)?.records)
}

/// The group's committed offset of every partition (-1 where none), read from outside the
/// group; retriable failures (a coordinator moving or loading) are retried for three request
/// timeouts.
pub async fn final_committed(
    cluster: &Cluster,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<Vec<Committed>, ClientError> {
    let all: Vec<i32> = (0..partitions).collect();
    let give_up = Instant::now() + cluster.timeout() * 3;
    loop {
        let attempt = async {
            let mut c = connect_coordinator(cluster, group).await?;
            coordinator::offset_fetch(&mut c, group, topic, &all).await
        };
        match attempt.await {
            Ok(offsets) => {
                return Ok(all
                    .iter()
                    .zip(offsets)
                    .map(|(&partition, offset)| Committed { partition, offset })
                    .collect())
            }
            Err(e) if e.is_retriable() && Instant::now() < give_up => {
                tokio::time::sleep(BACKOFF).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_what_a_java_consumer_does() {
        let broker = |code| ClientError::Broker {
            code,
            what: "Heartbeat",
        };
        assert_eq!(
            recovery(&broker(ErrorCode::RebalanceInProgress)),
            Recovery::Rejoin
        );
        assert_eq!(
            recovery(&broker(ErrorCode::IllegalGeneration)),
            Recovery::Rejoin
        );
        assert_eq!(
            recovery(&broker(ErrorCode::UnknownMemberId)),
            Recovery::NewMember
        );
        assert_eq!(
            recovery(&broker(ErrorCode::NotCoordinator)),
            Recovery::Reconnect
        );
        assert_eq!(
            recovery(&ClientError::Timeout("Heartbeat")),
            Recovery::Reconnect
        );
    }
}
