//! The admin API's operator endpoints (what `vdlctl` calls): cluster status, leader transfer
//! and balance, segment listing and deletion. Any node answers: it gathers the other nodes'
//! views from their admin listeners ([`crate::admin::peer_client`]; addresses announced through the metadata log,
//! [`announce_admin_address`]) or forwards the request to the node that
//! must act.
//!
//! Endpoints (JSON answers, typed in the `vdl-admin-api` crate shared with `vdlctl`; errors
//! are `{"error": ..}` ([`vdl_admin_api::ErrorBody`]) with a 4xx/5xx status):
//! - `GET /replicas`: this node's replicas with their Raft state (role, term, commit, last
//!   index, on the leader every voter's matched index) and log (offsets, segments, bytes).
//! - `GET /cluster/status`: every member (addresses, liveness, reachable) and every
//!   partition (replicas, leader, ISR, each replica's role and lag in entries and bytes);
//!   `healthy` false with the reasons in `problems` when a member is down or unreachable, a
//!   partition has no leader or is under-replicated.
//! - `POST /partitions/{topic}/{partition}/leader?to=N&timeout_ms=T`: makes N lead.
//! - `POST /leaders/balance?timeout_ms=T`: moves every partition's leadership to its preferred
//!   replica (the first in its replica list).
//! - `GET /partitions/{topic}/{partition}/segments`: the segment files of a replica (this
//!   node's, or forwarded to the partition's leader).
//! - `POST /partitions/{topic}/{partition}/segments/delete?before=OFFSET`: deletes the
//!   segments wholly below OFFSET, on the leader, when `storage.operator_delete_allowed` is on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use serde::{Deserialize, Serialize};
use vdl_admin_api::leaders::{LeaderTransferred, LeadersBalanced};
use vdl_admin_api::segments::{CleanerFigures, SegmentList, SegmentsDeleted};

use crate::admin::auth::Caller;
use crate::admin::peer_client::call_peer_as;
use crate::admin::reply::error;
use crate::metadata::METADATA_STREAM;
use crate::node::{Node, TransferError};
use crate::replication::group::ReplicaReport;
use crate::replication::stream::LogStream;

/// Longest the node waits for another node's admin answer.
const PEER_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest an operation may be asked to wait.
const MAX_OP_TIMEOUT_MS: u64 = 300_000;

/// One replica as `GET /replicas` reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReplicaState {
    /// Topic (or stream) name; `__cluster_metadata` for the metadata group.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// Leader as this replica knows it (0: none).
    pub leader: u64,
    /// Raft state (role, term, commit, last index, voters' progress on the leader).
    pub raft: ReplicaReport,
    /// First readable offset.
    pub log_start_offset: u64,
    /// Offset after the last committed record.
    pub high_watermark: u64,
    /// Offset after the last record stored here.
    pub log_end_offset: u64,
    /// Segment files.
    pub segments: usize,
    /// Their bytes.
    pub bytes: u64,
    /// In-sync voters (on the leader).
    pub in_sync: Vec<u64>,
}

/// `GET /replicas`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeReplicas {
    /// This node's id.
    pub id: u64,
    /// Its replicas.
    pub replicas: Vec<ReplicaState>,
}

/// This node's replicas, read now.
pub async fn local_replicas(node: &Node) -> NodeReplicas {
    let mut streams: Vec<crate::replication::stream::LogStream> =
        node.metadata_group().into_iter().collect();
    for name in node.stream_names() {
        streams.extend(node.partitions(&name));
    }
    let mut replicas = Vec::with_capacity(streams.len());
    for s in streams {
        let v = s.visible();
        let (segments, bytes) = s.storage_size();
        replicas.push(ReplicaState {
            topic: s.name().to_owned(),
            partition: s.partition(),
            leader: v.leader,
            raft: s.describe_replicas().await.unwrap_or_default(),
            log_start_offset: v.log_start_offset,
            high_watermark: v.high_watermark,
            log_end_offset: s.log_end_offset(),
            segments,
            bytes,
            in_sync: v.in_sync.iter().copied().filter(|id| *id != 0).collect(),
        });
    }
    NodeReplicas {
        id: node.config().id,
        replicas,
    }
}

/// `GET /replicas`.
pub async fn replicas(State(node): State<Arc<Node>>) -> Json<NodeReplicas> {
    Json(local_replicas(&node).await)
}

/// The `GET /cluster/status` document and its parts: wire types of the admin API, defined
/// in the `vdl-admin-api` crate (shared with `vdlctl`).
pub use vdl_admin_api::cluster::{ClusterStatus, MemberStatus, PartitionStatus, ReplicaStatus};
/// A segment in `GET .../segments`, in the `vdl-admin-api` crate.
pub use vdl_admin_api::segments::SegmentEntry;

/// Announces `node`'s admin address through the metadata log now, and again every `refresh`
/// (so nodes that installed a metadata snapshot, which does not carry it, learn it again) or
/// sooner when this node's view lacks it. Runs until the node is dropped.
pub fn announce_admin_address(node: &Arc<Node>, address: String, refresh: Duration) {
    let weak = Arc::downgrade(node);
    tokio::spawn(async move {
        let mut last_sent: Option<std::time::Instant> = None;
        loop {
            let Some(node) = weak.upgrade() else { return };
            let me = node.config().id;
            let known = node.admin_addresses().get(&me) == Some(&address);
            if !known || last_sent.is_none_or(|t| t.elapsed() >= refresh) {
                let cmd = crate::metadata::MetaCommand::AdminAddress {
                    node: me,
                    address: address.clone(),
                };
                match node
                    .metadata_proposer()
                    .propose(&cmd, Duration::from_secs(5))
                    .await
                {
                    Ok(_) => last_sent = Some(std::time::Instant::now()),
                    Err(e) => tracing::debug!("announcing the admin address failed: {e}"),
                }
            }
            drop(node);
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
}

/// `GET /cluster/status`: 200 when healthy, 503 otherwise (same document). The other nodes
/// are asked with the caller's credentials.
pub async fn cluster_status(
    State(node): State<Arc<Node>>,
    Extension(caller): Extension<Caller>,
) -> Response {
    let status = gather_cluster_status_as(&node, &caller).await;
    let code = if status.healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(status)).into_response()
}

/// [`gather_cluster_status_as`] without credentials.
pub async fn gather_cluster_status(node: &Arc<Node>) -> ClusterStatus {
    gather_cluster_status_as(node, &Caller::anonymous()).await
}

/// Builds the cluster status: asks every member's admin API for its replicas (this node's
/// own are read directly; the others with `caller`'s credentials) and combines them with the
/// replica lists of the metadata. An answer from another node than the one asked (its
/// announced address now serves another node) is a problem, never filed under the asked id.
pub async fn gather_cluster_status_as(node: &Arc<Node>, caller: &Caller) -> ClusterStatus {
    let me = node.config().id;
    let admins = node.admin_addresses();
    let live: BTreeMap<u64, String> = node.live_brokers().into_iter().collect();
    let mut problems = Vec::new();
    let mut reports: BTreeMap<u64, NodeReplicas> = BTreeMap::new();
    let mut nodes = Vec::new();
    let calls = node.config().members.iter().map(|m| {
        let admin = admins.get(&m.id).cloned();
        let node = node.clone();
        async move {
            if m.id == me {
                return (m.id, Ok(local_replicas(&node).await));
            }
            let Some(admin) = admin else {
                return (m.id, Err("admin address not announced".to_owned()));
            };
            let answer = call_peer_as(
                &node.config().admin,
                caller.authorization.as_ref(),
                &admin,
                "GET",
                "/replicas",
                PEER_TIMEOUT,
            )
            .await;
            let parsed = answer.and_then(|(code, body)| {
                if code != 200 {
                    return Err(format!(
                        "HTTP {code}: {}",
                        body.chars().take(200).collect::<String>()
                    ));
                }
                let r = serde_json::from_str::<NodeReplicas>(&body).map_err(|e| e.to_string())?;
                if r.id != m.id {
                    return Err(format!(
                        "its announced admin address {admin} answered as node {}",
                        r.id
                    ));
                }
                Ok(r)
            });
            (m.id, parsed)
        }
    });
    let answers = futures::future::join_all(calls).await;
    for (m, (_, answer)) in node.config().members.iter().zip(answers) {
        let is_live = live.contains_key(&m.id);
        let reachable = match answer {
            Ok(r) => {
                reports.insert(m.id, r);
                true
            }
            Err(e) => {
                problems.push(format!("node {} admin API not reachable: {e}", m.id));
                false
            }
        };
        if !is_live {
            problems.push(format!("node {} is not connected", m.id));
        }
        nodes.push(MemberStatus {
            id: m.id,
            name: m.name.clone(),
            peer: m.peer_addr.to_string(),
            kafka: live.get(&m.id).cloned().unwrap_or_default(),
            admin: admins.get(&m.id).cloned().unwrap_or_default(),
            live: is_live,
            reachable,
        });
    }
    // Every partition the metadata knows, with its replica list; the metadata group on
    // every member.
    let mut layout: Vec<(String, u32, Vec<u64>)> =
        vec![(METADATA_STREAM.to_owned(), 0, node.config().member_ids())];
    let mut names = node.topic_names();
    names.sort();
    for name in names {
        if let Some(l) = node.topic_layout(&name) {
            for (p, replicas) in l.replicas.into_iter().enumerate() {
                layout.push((name.clone(), p as u32, replicas));
            }
        }
    }
    let mut partitions = Vec::with_capacity(layout.len());
    let mut under = Vec::new();
    for (topic, partition, replicas) in layout {
        let state_of = |id: u64| {
            reports.get(&id).and_then(|r| {
                r.replicas
                    .iter()
                    .find(|s| s.topic == topic && s.partition == partition)
            })
        };
        // Right after a leadership change the old leader may not know yet: the newest term's
        // leader is the leader.
        let leader = replicas
            .iter()
            .copied()
            .filter_map(|id| {
                state_of(id)
                    .filter(|s| s.raft.role == "leader")
                    .map(|s| (s.raft.term, id))
            })
            .max()
            .map_or(0, |(_, id)| id);
        let leader_state = state_of(leader);
        let isr = leader_state.map(|s| s.in_sync.clone()).unwrap_or_default();
        let replica_status = replicas
            .iter()
            .map(|id| {
                let Some(s) = state_of(*id) else {
                    return ReplicaStatus {
                        id: *id,
                        role: "unknown".into(),
                        lag_entries: 0,
                        lag_bytes: 0,
                        log_end_offset: 0,
                    };
                };
                let (lag_entries, lag_bytes) = match leader_state {
                    Some(l) => {
                        let matched = l
                            .raft
                            .progress
                            .iter()
                            .find(|p| p.id == *id)
                            .map_or(s.raft.last_index, |p| p.matched);
                        (
                            l.raft.last_index.saturating_sub(matched),
                            l.bytes.saturating_sub(s.bytes),
                        )
                    }
                    None => (0, 0),
                };
                ReplicaStatus {
                    id: *id,
                    role: s.raft.role.clone(),
                    lag_entries,
                    lag_bytes,
                    log_end_offset: s.log_end_offset,
                }
            })
            .collect();
        let under_replicated = leader == 0 || isr.len() < replicas.len();
        if leader == 0 {
            problems.push(format!("{topic}-{partition} has no leader"));
        }
        if under_replicated {
            under.push(format!("{topic}-{partition}"));
            if leader != 0 {
                problems.push(format!(
                    "{topic}-{partition} is under-replicated (ISR {isr:?} of {replicas:?})"
                ));
            }
        }
        partitions.push(PartitionStatus {
            topic,
            partition,
            replicas,
            leader,
            isr,
            under_replicated,
            replica_status,
        });
    }
    ClusterStatus {
        answered_by: me,
        healthy: problems.is_empty(),
        problems,
        nodes,
        partitions,
        under_replicated: under,
    }
}

/// Query of the leader endpoints.
#[derive(Deserialize)]
pub struct LeaderParams {
    /// The replica that should lead.
    to: Option<u64>,
    /// How long to wait (default 30 s).
    timeout_ms: Option<u64>,
}

fn op_timeout(ms: Option<u64>) -> Duration {
    Duration::from_millis(ms.unwrap_or(30_000).min(MAX_OP_TIMEOUT_MS))
}

/// `POST /partitions/{topic}/{partition}/leader?to=N`.
pub async fn transfer_leader(
    State(node): State<Arc<Node>>,
    Path((topic, partition)): Path<(String, u32)>,
    Query(params): Query<LeaderParams>,
) -> Response {
    let Some(to) = params.to else {
        return error(StatusCode::BAD_REQUEST, "missing ?to=NODE");
    };
    let started = std::time::Instant::now();
    match node
        .transfer_leader(&topic, partition, to, op_timeout(params.timeout_ms))
        .await
    {
        Ok(()) => Json(LeaderTransferred {
            elapsed_ms: started.elapsed().as_millis() as u64,
            leader: to,
            partition,
            topic,
        })
        .into_response(),
        Err(e @ TransferError::NoPartition(..)) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ TransferError::NotAReplica { .. }) => error(StatusCode::BAD_REQUEST, e.to_string()),
        Err(e @ TransferError::Timeout { .. }) => error(StatusCode::GATEWAY_TIMEOUT, e.to_string()),
        Err(e @ TransferError::Propose(_)) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// `POST /leaders/balance`: every partition whose leader is not its preferred replica is asked
/// to hand over (ElectPreferredLeader); answers what moved and what did not within the timeout.
pub async fn balance_leaders(
    State(node): State<Arc<Node>>,
    Query(params): Query<LeaderParams>,
) -> Response {
    let timeout = op_timeout(params.timeout_ms);
    let deadline = std::time::Instant::now() + timeout;
    let mut wanted = Vec::new();
    let mut names = node.topic_names();
    names.sort();
    for name in names {
        let Some(l) = node.topic_layout(&name) else {
            continue;
        };
        for (p, replicas) in l.replicas.iter().enumerate() {
            let Some(preferred) = replicas.first().copied() else {
                continue;
            };
            let p = p as u32;
            if node.current_leader(&name, l.incarnation, p) != Some(preferred) {
                wanted.push((name.clone(), l.incarnation, p, preferred));
            }
        }
    }
    for (name, incarnation, p, _) in &wanted {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if let Err(e) = node
            .elect_preferred_leader(name, *incarnation, *p, left)
            .await
        {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("asking {name}-{p} to move failed: {e}"),
            );
        }
    }
    let pending = |node: &Node| -> Vec<String> {
        wanted
            .iter()
            .filter(|(n, i, p, preferred)| node.current_leader(n, *i, *p) != Some(*preferred))
            .map(|(n, _, p, _)| format!("{n}-{p}"))
            .collect()
    };
    loop {
        let left = pending(&node);
        if left.is_empty() || std::time::Instant::now() >= deadline {
            let moved = wanted.len() - left.len();
            let code = if left.is_empty() {
                StatusCode::OK
            } else {
                StatusCode::GATEWAY_TIMEOUT
            };
            let body = LeadersBalanced {
                asked: wanted.len() as u64,
                moved: moved as u64,
                not_moved: left,
            };
            return (code, Json(body)).into_response();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Query of the segment endpoints.
#[derive(Deserialize)]
pub struct SegmentParams {
    /// Delete the segments wholly below this offset.
    before: Option<u64>,
    /// Answer with this node's replica only (no forwarding).
    local: Option<bool>,
    /// How long to wait for the deletion to be applied (default 30 s).
    timeout_ms: Option<u64>,
}

/// The local replica of `topic`-`partition` that serves an operator request, or the answer to
/// send instead: the leader's own answer when this node does not lead it and `local` is off
/// (see [`forward_to_leader`]), 404 when this node holds no replica of it.
async fn replica_to_serve(
    node: &Arc<Node>,
    caller: &Caller,
    topic: &str,
    partition: u32,
    method: &'static str,
    path_and_query: String,
    local: bool,
) -> Result<LogStream, Response> {
    if let Some(answer) = forward_to_leader(
        node,
        caller,
        topic,
        partition,
        method,
        path_and_query,
        local,
    )
    .await
    {
        return Err(answer);
    }
    node.partition(topic, partition).ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            format!("no replica of {topic}-{partition} here"),
        )
    })
}

/// Forwards the request to the partition's leader when this node is not it (or hosts no
/// replica); `None` when this node should answer.
async fn forward_to_leader(
    node: &Arc<Node>,
    caller: &Caller,
    topic: &str,
    partition: u32,
    method: &'static str,
    path_and_query: String,
    local: bool,
) -> Option<Response> {
    let incarnation = node.topic_layout(topic)?.incarnation;
    let leader = node.current_leader(topic, incarnation, partition);
    let me = node.config().id;
    if local || leader == Some(me) {
        return None;
    }
    let Some(leader) = leader else {
        return Some(error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{topic}-{partition} has no leader now"),
        ));
    };
    let Some(address) = node.admin_addresses().get(&leader).cloned() else {
        return Some(error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the admin address of node {leader} (the leader) is not known"),
        ));
    };
    let sep = if path_and_query.contains('?') {
        '&'
    } else {
        '?'
    };
    let path = format!("{path_and_query}{sep}local=true");
    Some(
        match call_peer_as(
            &node.config().admin,
            caller.authorization.as_ref(),
            &address,
            method,
            &path,
            Duration::from_secs(60),
        )
        .await
        {
            Ok((code, body)) => (
                StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY),
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response(),
            Err(e) => error(StatusCode::BAD_GATEWAY, e),
        },
    )
}

fn segment_entries(stream: &LogStream) -> Vec<SegmentEntry> {
    stream
        .segments()
        .into_iter()
        .map(|s| SegmentEntry {
            base_index: s.base_index,
            last_index: s.last_index,
            first_offset: s.first_offset,
            next_offset: s.next_offset,
            bytes: s.bytes,
            active: s.active,
        })
        .collect()
}

/// `GET /partitions/{topic}/{partition}/segments`: the leader's segment files, and for a
/// compacted topic the cleaner's figures of that replica.
pub async fn list_segments(
    State(node): State<Arc<Node>>,
    Extension(caller): Extension<Caller>,
    Path((topic, partition)): Path<(String, u32)>,
    Query(params): Query<SegmentParams>,
) -> Response {
    let path = format!("/partitions/{topic}/{partition}/segments");
    let local = params.local.unwrap_or(false);
    let stream = match replica_to_serve(&node, &caller, &topic, partition, "GET", path, local).await
    {
        Ok(stream) => stream,
        Err(answer) => return answer,
    };
    let cleaner = node.cleaner_stats(&stream).map(|c| CleanerFigures {
        cleanable_bytes: c.cleanable_bytes,
        cleaned_bytes: c.clean_bytes,
        dirty_ratio: c.dirty_ratio(),
        first_dirty_offset: c.first_dirty_offset,
        last_clean_ms: c.last_clean_ms,
    });
    Json(SegmentList {
        cleaner,
        node: node.config().id,
        partition,
        segments: segment_entries(&stream),
        topic,
    })
    .into_response()
}

/// `POST /partitions/{topic}/{partition}/segments/delete?before=OFFSET`: on the leader, finds
/// the sealed segments that lie wholly below OFFSET and below every voter's matched index,
/// and raises the partition's log start offset (a replicated DeleteRecords) to the end of the
/// last of them, so every replica's retention removes them. Refused (403) unless
/// `storage.operator_delete_allowed` is on.
pub async fn delete_segments(
    State(node): State<Arc<Node>>,
    Extension(caller): Extension<Caller>,
    Path((topic, partition)): Path<(String, u32)>,
    Query(params): Query<SegmentParams>,
) -> Response {
    let Some(before) = params.before else {
        return error(StatusCode::BAD_REQUEST, "missing ?before=OFFSET");
    };
    if !node.config().storage.operator_delete_allowed {
        return error(
            StatusCode::FORBIDDEN,
            "segment deletion is not permitted on this node (storage.operator_delete_allowed = false)",
        );
    }
    let path = format!("/partitions/{topic}/{partition}/segments/delete?before={before}");
    let local = params.local.unwrap_or(false);
    let stream =
        match replica_to_serve(&node, &caller, &topic, partition, "POST", path, local).await {
            Ok(stream) => stream,
            Err(answer) => return answer,
        };
    if stream.incarnation() == 0 {
        return error(
            StatusCode::BAD_REQUEST,
            format!("{topic} is a stream configured at start ([streams] initial): segment deletion applies to topics; its retention settings govern it"),
        );
    }
    let Some(report) = stream.describe_replicas().await else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the partition's group is busy",
        );
    };
    if report.role != "leader" {
        return error(
            StatusCode::MISDIRECTED_REQUEST,
            "this node no longer leads the partition",
        );
    }
    // Never below what a voter still needs: its matched index.
    let needed = report.progress.iter().map(|p| p.matched).min().unwrap_or(0);
    let segments = segment_entries(&stream);
    let doomed: Vec<SegmentEntry> = segments
        .iter()
        .filter(|s| !s.active && s.next_offset <= before && s.last_index <= needed)
        .cloned()
        .collect();
    let Some(floor) = doomed.last().map(|s| s.next_offset) else {
        return Json(SegmentsDeleted {
            deleted: Vec::new(),
            log_start_offset: stream.visible().log_start_offset,
        })
        .into_response();
    };
    let timeout = op_timeout(params.timeout_ms);
    if floor > stream.visible().log_start_offset {
        let command = node.current_incarnation(&topic).map(|incarnation| {
            crate::metadata::MetaCommand::DeleteRecords {
                name: topic.clone(),
                incarnation,
                partition,
                offset: floor,
            }
        });
        let proposed = match command {
            Ok(command) => node.metadata_proposer().propose(&command, timeout).await,
            Err(e) => Err(e),
        };
        if let Err(e) = proposed {
            return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
        }
    }
    // The group removes the segments below the new floor in its next turn.
    let deadline = std::time::Instant::now() + timeout;
    while stream
        .segments()
        .first()
        .is_some_and(|s| s.next_offset <= floor && !s.active)
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::info!(topic = %topic, partition, before, log_start_offset = floor, segments = doomed.len(), "segments deleted by an operator");
    Json(SegmentsDeleted {
        deleted: doomed,
        log_start_offset: stream.visible().log_start_offset,
    })
    .into_response()
}
