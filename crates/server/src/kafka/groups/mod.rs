//! Consumer groups over the Kafka protocol (the classic group protocol): FindCoordinator,
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
//! DescribeGroups, DeleteGroups and OffsetDelete.
//!
//! **Placement.** The coordinator of every group is the node leading the metadata Raft group.
//! FindCoordinator on any node names it; group requests reaching another node get
//! NOT_COORDINATOR, so clients look the coordinator up again.
//!
//! **State.** Membership (members, generations, assignments) is run in memory on the coordinator
//! ([`coordinator`]) and stored in the metadata log where
//! Kafka's coordinator writes its group metadata record: when a rebalance completes (the leader's
//! SyncGroup), when a static member is replaced, and when a group becomes empty
//! ([`MetaCommand::StoreGroup`], written by a persisting task only while this node coordinates in
//! the record's term). A new coordinator (a new metadata leader, once it has applied the metadata
//! through its term's start) loads the stored groups: members heartbeating to it are recognised
//! in the same generation, without a rebalance. Committed offsets go through the metadata group
//! too (fsynced on a majority before the OffsetCommit is answered, only while the validating
//! coordinator still leads in its term). OffsetFetch, ListGroups and DescribeGroups first take
//! a read barrier on the metadata group (Raft's ReadIndex, no log entry), so the coordinator has
//! applied every offset committed before (also through a previous coordinator) before it reads.

pub(crate) mod coordinator;
mod coordinator_admin;
mod coordinator_membership;
mod coordinator_tasks;
#[cfg(test)]
mod coordinator_tests;
mod deadlines;
mod group;
mod group_record;
mod limits;
pub(crate) mod node_coordinator;
mod types;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_proto::messages::delete_groups_response::{DeletableGroupResult, DeleteGroupsResponse};
use kafka_proto::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_proto::messages::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup, DescribedGroupMember,
};
use kafka_proto::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_proto::messages::find_coordinator_response::{Coordinator, FindCoordinatorResponse};
use kafka_proto::messages::heartbeat_request::HeartbeatRequest;
use kafka_proto::messages::heartbeat_response::HeartbeatResponse;
use kafka_proto::messages::join_group_request::JoinGroupRequest;
use kafka_proto::messages::join_group_response::{JoinGroupResponse, JoinGroupResponseMember};
use kafka_proto::messages::leave_group_request::LeaveGroupRequest;
use kafka_proto::messages::leave_group_response::{LeaveGroupResponse, MemberResponse};
use kafka_proto::messages::list_groups_request::ListGroupsRequest;
use kafka_proto::messages::list_groups_response::{ListGroupsResponse, ListedGroup};
use kafka_proto::messages::offset_commit_request::OffsetCommitRequest;
use kafka_proto::messages::offset_commit_response::{
    OffsetCommitResponse, OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_proto::messages::offset_delete_request::OffsetDeleteRequest;
use kafka_proto::messages::offset_delete_response::{
    OffsetDeleteResponse, OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_proto::messages::offset_fetch_request::OffsetFetchRequest;
use kafka_proto::messages::offset_fetch_response::{
    OffsetFetchResponse, OffsetFetchResponseGroup, OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions, OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_proto::messages::sync_group_request::SyncGroupRequest;
use kafka_proto::messages::sync_group_response::SyncGroupResponse;

use crate::kafka::access::{Access, GROUP_OPERATIONS};
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::fields::split_host_port;
use crate::kafka::metadata::{locate_partition, PartitionHome};
use crate::kafka::reply::{self, Reply};
use crate::metadata::{wall_clock_ms, CommittedOffset, MetaCommand};
use crate::node::Node;
use crate::security::acl::{AclOperation, ResourceType};
use limits::COMMIT_TIMEOUT;
use node_coordinator::{coordinator, coordinator_term};
use types::{GroupState, JoinOutcome, JoinParams, Pending, SyncOutcome, SyncParams};

/// Longest an OffsetFetch waits for its read barrier.
pub const FETCH_BARRIER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest committed metadata string accepted (Kafka's `offset.metadata.max.bytes`).
pub const MAX_OFFSET_METADATA_BYTES: usize = 4096;
/// The group type ListGroups reports (every group here uses the classic protocol).
pub const GROUP_TYPE: &str = "classic";

/// The coordinator's (node id, host, port), or why there is none.
fn locate(
    node: &Node,
    key_type: i8,
    listener: &str,
) -> Result<(i32, String, i32), (ErrorCode, String)> {
    match key_type {
        0 => {}
        1 => {
            return Err((
                ErrorCode::InvalidRequest,
                "transactions are not supported by this server".into(),
            ))
        }
        t => {
            return Err((
                ErrorCode::InvalidRequest,
                format!("unsupported coordinator key type {t}"),
            ))
        }
    }
    let leader = node.metadata_group().map_or(0, |g| g.visible().leader);
    if leader == 0 {
        return Err((
            ErrorCode::CoordinatorNotAvailable,
            "no metadata leader is known".into(),
        ));
    }
    let Some((_, addr)) = node
        .live_brokers_on(listener)
        .into_iter()
        .find(|(id, _)| *id == leader)
    else {
        return Err((
            ErrorCode::CoordinatorNotAvailable,
            format!("the coordinator (node {leader}) is not reachable"),
        ));
    };
    let (host, port) = split_host_port(&addr);
    Ok((i32::try_from(leader).unwrap_or(-1), host, port))
}

/// Handles FindCoordinator (v4+: several keys at once).
///
/// As in Kafka a group key needs DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED) and a
/// transaction key DESCRIBE on the transactional id (else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
pub fn find_coordinator(
    node: &Arc<Node>,
    access: &Access,
    req: FindCoordinatorRequest,
    version: i16,
    correlation_id: i32,
    listener: &str,
) -> Reply {
    let located = locate(node, req.key_type, listener);
    let refused = |key: &str| -> Option<(ErrorCode, String)> {
        // Kafka's messages for these errors.
        match req.key_type {
            0 if !access.group(AclOperation::Describe, key) => Some((
                ErrorCode::GroupAuthorizationFailed,
                "Group authorization failed.".into(),
            )),
            1 if !access.transactional_id(AclOperation::Describe, key) => Some((
                ErrorCode::TransactionalIdAuthorizationFailed,
                "Transactional Id authorization failed.".into(),
            )),
            _ => None,
        }
    };
    let mut resp = FindCoordinatorResponse::default();
    if version >= 4 {
        resp.coordinators = req
            .coordinator_keys
            .iter()
            .cloned()
            .map(
                |key| match refused(&key).map(Err).unwrap_or(located.clone()) {
                    Ok((id, host, port)) => Coordinator {
                        key,
                        node_id: id,
                        host,
                        port,
                        ..Default::default()
                    },
                    Err((code, message)) => Coordinator {
                        key,
                        node_id: -1,
                        host: String::new(),
                        port: -1,
                        error_code: code.code(),
                        error_message: Some(message),
                        ..Default::default()
                    },
                },
            )
            .collect();
    } else {
        match refused(&req.key).map(Err).unwrap_or(located) {
            Ok((id, host, port)) => {
                resp.node_id = id;
                resp.host = host;
                resp.port = port;
            }
            Err((code, message)) => {
                resp.error_code = code.code();
                resp.error_message = Some(message);
                resp.node_id = -1;
                resp.port = -1;
            }
        }
    }
    reply::now(correlation_id, version, Response::FindCoordinator(resp))
}

fn join_response(o: JoinOutcome, version: i16) -> JoinGroupResponse {
    JoinGroupResponse {
        error_code: o.error.code(),
        generation_id: o.generation_id,
        protocol_type: o.protocol_type,
        // Nullable from v7 only.
        protocol_name: o.protocol_name.or_else(|| (version < 7).then(String::new)),
        leader: o.leader,
        skip_assignment: o.skip_assignment && version >= 9,
        member_id: o.member_id,
        members: o
            .members
            .into_iter()
            .map(|m| JoinGroupResponseMember {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                metadata: m.metadata,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Handles JoinGroup: answered when the rebalance completes (or at once for errors,
/// MEMBER_ID_REQUIRED and rejoins that change nothing).
pub fn join_group(
    node: &Arc<Node>,
    access: &Access,
    client_id: Option<String>,
    client_host: String,
    req: JoinGroupRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let respond = move |o: JoinOutcome| Response::JoinGroup(join_response(o, version));
    // Kafka: READ on the group.
    if !access.group(AclOperation::Read, &req.group_id) {
        return reply::now(
            correlation_id,
            version,
            respond(JoinOutcome::error(
                ErrorCode::GroupAuthorizationFailed,
                &req.member_id,
            )),
        );
    }
    let Some(term) = coordinator_term(node) else {
        return reply::now(
            correlation_id,
            version,
            respond(JoinOutcome::error(
                ErrorCode::NotCoordinator,
                &req.member_id,
            )),
        );
    };
    let member_id = req.member_id.clone();
    let params = JoinParams {
        group_id: req.group_id,
        member_id: req.member_id,
        group_instance_id: req.group_instance_id,
        client_id: client_id.unwrap_or_default(),
        client_host,
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms: if version >= 1 && req.rebalance_timeout_ms >= 0 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        },
        protocol_type: req.protocol_type,
        protocols: req
            .protocols
            .into_iter()
            .map(|p| (p.name, p.metadata))
            .collect(),
        require_known_member_id: version >= 4,
    };
    match coordinator(node).join(term, params, Instant::now()) {
        Pending::Now(o) => reply::now(correlation_id, version, respond(o)),
        Pending::Wait(rx, wait) => reply::later(correlation_id, version, async move {
            let o = match tokio::time::timeout(wait, rx).await {
                Ok(Ok(o)) => o,
                _ => JoinOutcome::error(ErrorCode::CoordinatorNotAvailable, &member_id),
            };
            respond(o)
        }),
    }
}

fn sync_response(o: SyncOutcome) -> SyncGroupResponse {
    SyncGroupResponse {
        error_code: o.error.code(),
        protocol_type: o.protocol_type,
        protocol_name: o.protocol_name,
        assignment: o.assignment,
        ..Default::default()
    }
}

/// Handles SyncGroup: the leader's carries the assignment; every member's is answered with its
/// own assignment once the leader's arrives.
pub fn sync_group(
    node: &Arc<Node>,
    access: &Access,
    req: SyncGroupRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let respond = |o: SyncOutcome| Response::SyncGroup(sync_response(o));
    let term = coordinator_term(node);
    let req_group_id = req.group_id.clone();
    let allowed = access.group(AclOperation::Read, &req.group_id);
    let pending = match term {
        _ if !allowed => Pending::Now(SyncOutcome::error(ErrorCode::GroupAuthorizationFailed)),
        None => Pending::Now(SyncOutcome::error(ErrorCode::NotCoordinator)),
        Some(term) => coordinator(node).sync(
            term,
            SyncParams {
                group_id: req.group_id,
                generation_id: req.generation_id,
                member_id: req.member_id,
                group_instance_id: req.group_instance_id,
                protocol_type: req.protocol_type,
                protocol_name: req.protocol_name,
                assignments: req
                    .assignments
                    .into_iter()
                    .map(|a| (a.member_id, a.assignment))
                    .collect(),
            },
            Instant::now(),
        ),
    };
    let node = node.clone();
    let group_id = req_group_id;
    reply::later(correlation_id, version, async move {
        let o = match pending {
            Pending::Now(o) => o,
            Pending::Wait(rx, wait) => match tokio::time::timeout(wait, rx).await {
                Ok(Ok(o)) => o,
                _ => SyncOutcome::error(ErrorCode::CoordinatorNotAvailable),
            },
        };
        let o = match (o.error, term) {
            (ErrorCode::None, Some(term)) => match wait_stored(&node, term, &group_id).await {
                Ok(()) => o,
                Err(e) => SyncOutcome::error(e),
            },
            _ => o,
        };
        respond(o)
    })
}

/// Waits until group `group_id`'s last membership record (of coordinator term `term`) is
/// written, as Kafka answers SyncGroup only once the group's record is: a coordinator failover
/// right after finds the generation the members were given. NOT_COORDINATOR when this node
/// stops coordinating first; after [`COMMIT_TIMEOUT`] it answers anyway (the record follows or
/// is lost: a later failover then makes the members rejoin).
async fn wait_stored(node: &Arc<Node>, term: u64, group_id: &str) -> Result<(), ErrorCode> {
    let Some((seq, mut stored)) = coordinator(node).unstored(term, group_id) else {
        return Ok(());
    };
    let deadline = tokio::time::Instant::now() + COMMIT_TIMEOUT;
    loop {
        if *stored.borrow_and_update() >= seq {
            return Ok(());
        }
        if coordinator_term(node) != Some(term) {
            return Err(ErrorCode::NotCoordinator);
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(group = %group_id, "answering SyncGroup before the group's record is written");
            return Ok(());
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), stored.changed()).await;
    }
}

/// Handles Heartbeat.
pub fn heartbeat(
    node: &Arc<Node>,
    access: &Access,
    req: HeartbeatRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let error = match coordinator_term(node) {
        _ if !access.group(AclOperation::Read, &req.group_id) => {
            ErrorCode::GroupAuthorizationFailed
        }
        None => ErrorCode::NotCoordinator,
        Some(term) => coordinator(node).heartbeat(
            term,
            &req.group_id,
            req.generation_id,
            &req.member_id,
            req.group_instance_id.as_deref(),
            Instant::now(),
        ),
    };
    reply::now(
        correlation_id,
        version,
        Response::Heartbeat(HeartbeatResponse {
            error_code: error.code(),
            ..Default::default()
        }),
    )
}

/// Handles LeaveGroup (v3+: several members at once).
pub fn leave_group(
    node: &Arc<Node>,
    access: &Access,
    req: LeaveGroupRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let identities: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .into_iter()
            .map(|m| (m.member_id, m.group_instance_id))
            .collect()
    } else {
        vec![(req.member_id, None)]
    };
    let mut resp = LeaveGroupResponse::default();
    match coordinator_term(node) {
        _ if !access.group(AclOperation::Read, &req.group_id) => {
            resp.error_code = ErrorCode::GroupAuthorizationFailed.code()
        }
        None => resp.error_code = ErrorCode::NotCoordinator.code(),
        Some(term) => {
            let errors = coordinator(node).leave(term, &req.group_id, &identities, Instant::now());
            if version >= 3 {
                resp.members = identities
                    .into_iter()
                    .zip(errors)
                    .map(|((member_id, group_instance_id), e)| MemberResponse {
                        member_id,
                        group_instance_id,
                        error_code: e.code(),
                        ..Default::default()
                    })
                    .collect();
            } else {
                resp.error_code = errors.first().map_or(0, |e| e.code());
            }
        }
    }
    reply::now(correlation_id, version, Response::LeaveGroup(resp))
}

/// Handles OffsetCommit: checks the member and generation, then commits the offsets through the
/// metadata group and answers once they are committed.
///
/// As in Kafka: READ on the group (else GROUP_AUTHORIZATION_FAILED for every partition), and
/// READ on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions).
pub fn offset_commit(
    node: &Arc<Node>,
    access: &Access,
    req: OffsetCommitRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    // Per topic: (name, [(partition, error)]); NONE entries are in `offsets`.
    let term = coordinator_term(node);
    let group_error = match term {
        _ if !access.group(AclOperation::Read, &req.group_id) => {
            ErrorCode::GroupAuthorizationFailed
        }
        None => ErrorCode::NotCoordinator,
        Some(_) if req.group_id.is_empty() => ErrorCode::InvalidGroupId,
        Some(term) => coordinator(node).validate_commit(
            term,
            &req.group_id,
            if version >= 1 {
                req.generation_id_or_member_epoch
            } else {
                -1
            },
            &req.member_id,
            req.group_instance_id.as_deref(),
            Instant::now(),
        ),
    };
    let mut offsets = Vec::new();
    let topics: Vec<(String, Vec<(i32, ErrorCode)>)> = req
        .topics
        .into_iter()
        .map(|t| {
            let partition_count = node.topic_layout(&t.name).map_or(0, |l| l.replicas.len());
            let topic_allowed =
                group_error != ErrorCode::None || access.topic(AclOperation::Read, &t.name);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let error = if group_error != ErrorCode::None {
                        group_error
                    } else if !topic_allowed {
                        ErrorCode::TopicAuthorizationFailed
                    } else if usize::try_from(p.partition_index)
                        .map_or(true, |i| i >= partition_count)
                    {
                        ErrorCode::UnknownTopicOrPartition
                    } else if p
                        .committed_metadata
                        .as_ref()
                        .is_some_and(|m| m.len() > MAX_OFFSET_METADATA_BYTES)
                    {
                        ErrorCode::OffsetMetadataTooLarge
                    } else {
                        offsets.push(CommittedOffset {
                            topic: t.name.clone(),
                            partition: p.partition_index,
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: p.committed_metadata,
                        });
                        ErrorCode::None
                    };
                    (p.partition_index, error)
                })
                .collect();
            (t.name, partitions)
        })
        .collect();
    let respond = move |commit: Option<ErrorCode>| {
        let topics = topics
            .into_iter()
            .map(|(name, partitions)| OffsetCommitResponseTopic {
                name,
                partitions: partitions
                    .into_iter()
                    .map(|(partition_index, e)| OffsetCommitResponsePartition {
                        partition_index,
                        error_code: match (e, commit) {
                            (ErrorCode::None, Some(c)) => c.code(),
                            (e, _) => e.code(),
                        },
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect();
        Response::OffsetCommit(OffsetCommitResponse {
            topics,
            ..Default::default()
        })
    };
    if offsets.is_empty() {
        return reply::now(correlation_id, version, respond(None));
    }
    let node = node.clone();
    let group = req.group_id;
    // Validated against this term's membership: committed only while this node still leads in
    // it (a deposed coordinator's commit fails NOT_COORDINATOR; the client retries at the new
    // coordinator, against the membership there).
    let term = term.unwrap_or_default();
    reply::later(correlation_id, version, async move {
        let result = node
            .propose_metadata_in_term(
                &MetaCommand::CommitOffsets {
                    group: group.clone(),
                    offsets,
                    commit_time_ms: wall_clock_ms(),
                },
                term,
                COMMIT_TIMEOUT,
            )
            .await;
        if let Err(e) = &result {
            tracing::debug!(%group, "offset commit failed: {e}");
        }
        respond(
            result
                .err()
                .map(|e| append_error_code(&e, Proposal::OffsetCommit)),
        )
    })
}

/// One partition's committed offset as read: (partition, offset, leader epoch, metadata).
type PartitionOffset = (i32, i64, i32, Option<String>);

/// One group's offsets as read, by topic.
type GroupOffsets = Vec<(String, Vec<PartitionOffset>)>;

/// Requested topics: None for all of the group's.
type TopicSelection = Option<Vec<(String, Vec<i32>)>>;

/// Reads a group's committed offsets as applied on this node; partitions without one get -1.
fn read_offsets(node: &Node, group: &str, topics: &TopicSelection) -> GroupOffsets {
    let meta = node.metadata();
    let committed = meta.offsets.get(group);
    let entry = |topic: &str, partition: i32| {
        committed
            .and_then(|g| g.get(&(topic.to_owned(), partition)))
            .map_or((partition, -1, -1, Some(String::new())), |o| {
                (
                    partition,
                    o.offset,
                    o.leader_epoch,
                    Some(o.metadata.clone().unwrap_or_default()),
                )
            })
    };
    match topics {
        Some(list) => list
            .iter()
            .map(|(t, parts)| (t.clone(), parts.iter().map(|p| entry(t, *p)).collect()))
            .collect(),
        None => {
            let mut by_topic: BTreeMap<String, Vec<PartitionOffset>> = BTreeMap::new();
            for ((t, p), _) in committed.into_iter().flatten() {
                by_topic.entry(t.clone()).or_default().push(entry(t, *p));
            }
            by_topic.into_iter().collect()
        }
    }
}

/// A read barrier on the metadata group (Raft's ReadIndex: a quorum confirms this node still
/// leads, no log entry is written): every offset committed before (also through a previous
/// coordinator) is applied here before the read, and a node deposed without knowing it yet
/// does not answer from stale state. None once done.
async fn read_barrier(node: &Node) -> Option<ErrorCode> {
    let Some(group) = node.metadata_group() else {
        return Some(ErrorCode::NotCoordinator);
    };
    group
        .read_index(FETCH_BARRIER_TIMEOUT)
        .await
        .err()
        .map(|e| append_error_code(&e, Proposal::ReadBarrier))
}

/// Handles OffsetFetch (v8+: several groups at once; v2+: null topics means all).
///
/// As in Kafka: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED for it) and on each
/// topic: a named topic without it answers TOPIC_AUTHORIZATION_FAILED per partition, and a
/// group's "all topics" leaves such topics out.
pub fn offset_fetch(
    node: &Arc<Node>,
    access: &Access,
    req: OffsetFetchRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let groups: Vec<(String, TopicSelection)> = if version >= 8 {
        req.groups
            .into_iter()
            .map(|g| {
                let topics = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name, t.partition_indexes))
                        .collect()
                });
                (g.group_id, topics)
            })
            .collect()
    } else {
        let topics = req.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.name, t.partition_indexes))
                .collect()
        });
        vec![(req.group_id, topics)]
    };
    let term = coordinator_term(node);
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let error = match (term, groups.first()) {
            (None, _) => Some(ErrorCode::NotCoordinator),
            (Some(_), None) => None,
            // Everything committed before this barrier is applied here once it commits.
            (Some(_), Some(_)) => read_barrier(&node).await,
        };
        let results: Vec<(String, TopicSelection, Result<GroupOffsets, ErrorCode>)> = groups
            .into_iter()
            .map(|(g, topics)| {
                let r = match error {
                    _ if !access.group(AclOperation::Describe, &g) => {
                        Err(ErrorCode::GroupAuthorizationFailed)
                    }
                    Some(e) => Err(e),
                    None => Ok(read_offsets(&node, &g, &topics)
                        .into_iter()
                        .filter(|(t, _)| {
                            topics.is_some() || access.topic(AclOperation::Describe, t)
                        })
                        .collect()),
                };
                (g, topics, r)
            })
            .collect();
        let topic_error = |name: &str| {
            if access.topic(AclOperation::Describe, name) {
                0
            } else {
                ErrorCode::TopicAuthorizationFailed.code()
            }
        };
        let resp = if version >= 8 {
            OffsetFetchResponse {
                groups: results
                    .into_iter()
                    .map(|(group_id, _, r)| match r {
                        Ok(topics) => OffsetFetchResponseGroup {
                            group_id,
                            topics: topics
                                .into_iter()
                                .map(|(name, parts)| {
                                    let error = topic_error(&name);
                                    OffsetFetchResponseTopics {
                                        partitions: parts
                                            .into_iter()
                                            .map(|(p, o, epoch, metadata)| {
                                                let refused = error != 0;
                                                OffsetFetchResponsePartitions {
                                                    partition_index: p,
                                                    committed_offset: if refused { -1 } else { o },
                                                    committed_leader_epoch: if refused {
                                                        -1
                                                    } else {
                                                        epoch
                                                    },
                                                    metadata,
                                                    error_code: error,
                                                    ..Default::default()
                                                }
                                            })
                                            .collect(),
                                        name,
                                        ..Default::default()
                                    }
                                })
                                .collect(),
                            ..Default::default()
                        },
                        Err(e) => OffsetFetchResponseGroup {
                            group_id,
                            error_code: e.code(),
                            ..Default::default()
                        },
                    })
                    .collect(),
                ..Default::default()
            }
        } else {
            let (_, requested, r) = results
                .into_iter()
                .next()
                .unwrap_or_else(|| (String::new(), None, Ok(Vec::new())));
            let partition =
                |(p, o, epoch, metadata): PartitionOffset, e: i16| OffsetFetchResponsePartition {
                    partition_index: p,
                    committed_offset: o,
                    committed_leader_epoch: epoch,
                    metadata,
                    error_code: e,
                    ..Default::default()
                };
            match r {
                Ok(topics) => OffsetFetchResponse {
                    topics: topics
                        .into_iter()
                        .map(|(name, parts)| {
                            let error = topic_error(&name);
                            OffsetFetchResponseTopic {
                                partitions: parts
                                    .into_iter()
                                    .map(|(p, o, epoch, metadata)| {
                                        if error != 0 {
                                            partition((p, -1, -1, metadata), error)
                                        } else {
                                            partition((p, o, epoch, metadata), 0)
                                        }
                                    })
                                    .collect(),
                                name,
                                ..Default::default()
                            }
                        })
                        .collect(),
                    ..Default::default()
                },
                // v2+ carry the group's error at the top; v0-1 only per partition.
                Err(e) => OffsetFetchResponse {
                    error_code: e.code(),
                    topics: if version < 2 {
                        requested
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(name, parts)| OffsetFetchResponseTopic {
                                name,
                                partitions: parts
                                    .into_iter()
                                    .map(|p| partition((p, -1, -1, Some(String::new())), e.code()))
                                    .collect(),
                                ..Default::default()
                            })
                            .collect()
                    } else {
                        Vec::new()
                    },
                    ..Default::default()
                },
            }
        };
        Response::OffsetFetch(resp)
    })
}

/// Groups that only have committed offsets (no membership state): reported as Empty.
fn offset_only_groups(node: &Node, known: &HashSet<String>) -> Vec<String> {
    let meta = node.metadata();
    let mut v: Vec<String> = meta
        .offsets
        .iter()
        .filter(|(g, o)| !g.is_empty() && !o.is_empty() && !known.contains(*g))
        .map(|(g, _)| g.clone())
        .collect();
    v.sort();
    v
}

/// Handles ListGroups: the coordinator lists every group; other nodes list none (clients ask
/// every broker and merge).
///
/// As in Kafka: with DESCRIBE on the cluster every group, else only the groups the principal
/// may DESCRIBE.
pub fn list_groups(
    node: &Arc<Node>,
    access: &Access,
    req: ListGroupsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let Some(term) = coordinator_term(node) else {
        return reply::now(
            correlation_id,
            version,
            Response::ListGroups(ListGroupsResponse::default()),
        );
    };
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let listed = match read_barrier(&node).await {
            Some(e) => Err(e),
            None => coordinator(&node).list(term),
        };
        let listed = match listed {
            Ok(l) => l,
            Err(e) => {
                let resp = ListGroupsResponse {
                    error_code: e.code(),
                    ..Default::default()
                };
                return Response::ListGroups(resp);
            }
        };
        let known: HashSet<String> = listed.iter().map(|g| g.group_id.clone()).collect();
        let mut all: Vec<(String, String, GroupState)> = listed
            .into_iter()
            .map(|g| (g.group_id, g.protocol_type, g.state))
            .collect();
        all.extend(
            offset_only_groups(&node, &known)
                .into_iter()
                .map(|g| (g, String::new(), GroupState::Empty)),
        );
        all.sort_by(|a, b| a.0.cmp(&b.0));
        if !access.cluster(AclOperation::Describe) {
            all.retain(|(g, _, _)| access.group(AclOperation::Describe, g));
        }
        let type_ok = req.types_filter.is_empty()
            || req
                .types_filter
                .iter()
                .any(|t| t.eq_ignore_ascii_case(GROUP_TYPE));
        let groups = all
            .into_iter()
            .filter(|(_, _, state)| {
                type_ok
                    && (req.states_filter.is_empty()
                        || req
                            .states_filter
                            .iter()
                            .any(|s| s.eq_ignore_ascii_case(state.name())))
            })
            .map(|(group_id, protocol_type, state)| ListedGroup {
                group_id,
                protocol_type,
                group_state: state.name().to_owned(),
                group_type: GROUP_TYPE.to_owned(),
                ..Default::default()
            })
            .collect();
        Response::ListGroups(ListGroupsResponse {
            groups,
            ..Default::default()
        })
    })
}

/// Handles DescribeGroups. An unknown group is reported Dead (as Kafka's classic coordinator
/// does); one that only has committed offsets, Empty.
///
/// As in Kafka: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED for it); its authorized
/// operations when asked for (v3+).
pub fn describe_groups(
    node: &Arc<Node>,
    access: &Access,
    req: DescribeGroupsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let term = coordinator_term(node);
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let barrier = match (term, req.groups.first()) {
            (Some(_), Some(_)) => read_barrier(&node).await,
            _ => None,
        };
        let groups = req
            .groups
            .into_iter()
            .map(|group_id| {
                if !access.group(AclOperation::Describe, &group_id) {
                    return DescribedGroup {
                        error_code: ErrorCode::GroupAuthorizationFailed.code(),
                        group_id,
                        ..Default::default()
                    };
                }
                let (Some(term), None) = (term, barrier) else {
                    return DescribedGroup {
                        error_code: barrier.unwrap_or(ErrorCode::NotCoordinator).code(),
                        group_id,
                        group_state: GroupState::Dead.name().to_owned(),
                        ..Default::default()
                    };
                };
                match coordinator(&node).describe(term, &group_id) {
                    Some(d) => DescribedGroup {
                        group_id,
                        group_state: d.state.name().to_owned(),
                        protocol_type: d.protocol_type,
                        protocol_data: d.protocol,
                        members: d
                            .members
                            .into_iter()
                            .map(|m| DescribedGroupMember {
                                member_id: m.member_id,
                                group_instance_id: m.group_instance_id,
                                client_id: m.client_id,
                                client_host: m.client_host,
                                member_metadata: m.metadata,
                                member_assignment: m.assignment,
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    },
                    None => {
                        let has_offsets = node
                            .metadata()
                            .offsets
                            .get(&group_id)
                            .is_some_and(|o| !o.is_empty());
                        let state = if has_offsets {
                            GroupState::Empty
                        } else {
                            GroupState::Dead
                        };
                        DescribedGroup {
                            group_id,
                            group_state: state.name().to_owned(),
                            ..Default::default()
                        }
                    }
                }
            })
            .map(|mut g: DescribedGroup| {
                if req.include_authorized_operations && g.error_code == 0 {
                    g.authorized_operations =
                        access.operations(ResourceType::Group, &g.group_id, GROUP_OPERATIONS);
                }
                g
            })
            .collect();
        Response::DescribeGroups(DescribeGroupsResponse {
            groups,
            ..Default::default()
        })
    })
}

/// Whether group `group_id` exists for DeleteGroups / OffsetDelete: it has membership state
/// on this coordinator or committed offsets.
fn group_exists(node: &Arc<Node>, term: u64, group_id: &str) -> bool {
    coordinator(node).describe(term, group_id).is_some()
        || node
            .metadata()
            .offsets
            .get(group_id)
            .is_some_and(|o| !o.is_empty())
}

/// One group of DeleteGroups: error 0 once its offsets and membership state are gone.
async fn delete_group(node: &Arc<Node>, group_id: &str) -> ErrorCode {
    let Some(term) = coordinator_term(node) else {
        return ErrorCode::NotCoordinator;
    };
    if !group_exists(node, term, group_id) {
        return ErrorCode::GroupIdNotFound;
    }
    if let Err(code) = coordinator(node).remove_empty(term, group_id) {
        return code;
    }
    match node
        .delete_group_offsets(group_id, None, COMMIT_TIMEOUT)
        .await
    {
        Ok(()) => ErrorCode::None,
        Err(e) => {
            let code = append_error_code(&e, Proposal::OffsetDeletion);
            if code != ErrorCode::NotCoordinator {
                tracing::warn!(group = %group_id, "deleting a group's offsets failed: {e}");
            }
            code
        }
    }
}

/// Handles DeleteGroups (API 42): a group with members gets NON_EMPTY_GROUP, an unknown one
/// GROUP_ID_NOT_FOUND, as in Kafka; otherwise its committed offsets (replicated) and its
/// membership state go.
/// Each group needs DELETE on it (else GROUP_AUTHORIZATION_FAILED).
pub fn delete_groups(
    node: &Arc<Node>,
    access: &Access,
    req: DeleteGroupsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let mut results = Vec::with_capacity(req.groups_names.len());
        for group_id in &req.groups_names {
            let code = if access.group(AclOperation::Delete, group_id) {
                delete_group(&node, group_id).await
            } else {
                ErrorCode::GroupAuthorizationFailed
            };
            results.push(DeletableGroupResult {
                group_id: group_id.clone(),
                error_code: code.code(),
                ..Default::default()
            });
        }
        Response::DeleteGroups(DeleteGroupsResponse {
            results,
            ..Default::default()
        })
    })
}

/// Handles OffsetDelete (API 47): removes a group's committed offsets of the named partitions.
/// As in Kafka: NOT_COORDINATOR off the coordinator, GROUP_ID_NOT_FOUND for an unknown group,
/// NON_EMPTY_GROUP for a group with members that does not use the consumer protocol, and per
/// partition GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to its topic and
/// UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist.
/// Authorization as Kafka's: DELETE on the group (else GROUP_AUTHORIZATION_FAILED), READ on
/// each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions).
pub fn offset_delete(
    node: &Arc<Node>,
    access: &Access,
    req: OffsetDeleteRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let mut resp = OffsetDeleteResponse::default();
        let group_error = match coordinator_term(&node) {
            _ if !access.group(AclOperation::Delete, &req.group_id) => {
                Some(ErrorCode::GroupAuthorizationFailed)
            }
            None => Some(ErrorCode::NotCoordinator),
            Some(term) if !group_exists(&node, term, &req.group_id) => {
                Some(ErrorCode::GroupIdNotFound)
            }
            Some(term) => match coordinator(&node).subscriptions(term, &req.group_id) {
                Some((protocol_type, _)) if protocol_type != "consumer" => {
                    Some(ErrorCode::NonEmptyGroup)
                }
                subscribed => {
                    let topics = subscribed.map(|(_, t)| t).unwrap_or_default();
                    let mut delete = Vec::new();
                    for t in &req.topics {
                        let mut partitions = Vec::with_capacity(t.partitions.len());
                        for p in &t.partitions {
                            let exists = matches!(
                                locate_partition(&node, &t.name, p.partition_index),
                                PartitionHome::Here(_) | PartitionHome::Elsewhere
                            );
                            let code = if !access.topic(AclOperation::Read, &t.name) {
                                ErrorCode::TopicAuthorizationFailed
                            } else if topics.contains(&t.name) {
                                ErrorCode::GroupSubscribedToTopic
                            } else if !exists {
                                ErrorCode::UnknownTopicOrPartition
                            } else {
                                delete.push((t.name.clone(), p.partition_index));
                                ErrorCode::None
                            };
                            partitions.push(OffsetDeleteResponsePartition {
                                partition_index: p.partition_index,
                                error_code: code.code(),
                            });
                        }
                        resp.topics.push(OffsetDeleteResponseTopic {
                            name: t.name.clone(),
                            partitions,
                        });
                    }
                    if delete.is_empty() {
                        None
                    } else {
                        match node
                            .delete_group_offsets(&req.group_id, Some(delete), COMMIT_TIMEOUT)
                            .await
                        {
                            Ok(()) => None,
                            Err(e) => {
                                let code = append_error_code(&e, Proposal::OffsetDeletion);
                                if code != ErrorCode::NotCoordinator {
                                    tracing::warn!(group = %req.group_id, "deleting offsets failed: {e}");
                                }
                                Some(code)
                            }
                        }
                    }
                }
            },
        };
        if let Some(code) = group_error {
            resp.error_code = code.code();
            resp.topics.clear();
        }
        Response::OffsetDelete(resp)
    })
}
