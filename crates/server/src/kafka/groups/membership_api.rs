//! The Kafka handlers of group membership: JoinGroup, SyncGroup, Heartbeat and LeaveGroup. Each
//! turns its request into the coordinator's call and the outcome into the response; JoinGroup
//! and SyncGroup answer later when the coordinator makes them wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::heartbeat_request::HeartbeatRequest;
use kafka_proto::messages::heartbeat_response::HeartbeatResponse;
use kafka_proto::messages::join_group_request::JoinGroupRequest;
use kafka_proto::messages::join_group_response::{JoinGroupResponse, JoinGroupResponseMember};
use kafka_proto::messages::leave_group_request::LeaveGroupRequest;
use kafka_proto::messages::leave_group_response::{LeaveGroupResponse, MemberResponse};
use kafka_proto::messages::sync_group_request::SyncGroupRequest;
use kafka_proto::messages::sync_group_response::SyncGroupResponse;

use super::consumer::classic_api;
use super::limits::COMMIT_TIMEOUT;
use super::node_coordinator::{coordinator, coordinator_term};
use super::types::{JoinOutcome, JoinParams, Pending, SyncOutcome, SyncParams};
use crate::kafka::access::Access;
use crate::kafka::host::GroupsHost;
use crate::kafka::reply::{self, Reply};
use crate::security::acl::AclOperation;

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
pub(crate) fn join_group<H: GroupsHost>(
    node: &Arc<H>,
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
    // A consumer-protocol group with members: the member joins it as a classic-type member.
    if super::coordinator::Coordinator::join_checks(&params).is_ok() {
        if let Some(answer) = classic_api::join(node, term, &params) {
            return reply::later(
                correlation_id,
                version,
                async move { respond(answer.await) },
            );
        }
    }
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
pub(crate) fn sync_group<H: GroupsHost>(
    node: &Arc<H>,
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
        Some(term) => {
            let p = SyncParams {
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
            };
            match classic_api::sync(node, term, &p) {
                Some(o) => return reply::now(correlation_id, version, respond(o)),
                None => coordinator(node).sync(term, p, Instant::now()),
            }
        }
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
async fn wait_stored<H: GroupsHost>(
    node: &Arc<H>,
    term: u64,
    group_id: &str,
) -> Result<(), ErrorCode> {
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
pub(crate) fn heartbeat<H: GroupsHost>(
    node: &Arc<H>,
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
        Some(term) => classic_api::heartbeat(
            node,
            term,
            &req.group_id,
            req.generation_id,
            &req.member_id,
            req.group_instance_id.as_deref(),
        )
        .unwrap_or_else(|| {
            coordinator(node).heartbeat(
                term,
                &req.group_id,
                req.generation_id,
                &req.member_id,
                req.group_instance_id.as_deref(),
                Instant::now(),
            )
        }),
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
pub(crate) fn leave_group<H: GroupsHost>(
    node: &Arc<H>,
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
            if let Some(answer) = classic_api::leave(node, term, &req.group_id, &identities) {
                return reply::later(correlation_id, version, async move {
                    let errors = answer.await;
                    Response::LeaveGroup(leave_response(identities, errors, version))
                });
            }
            let errors = coordinator(node).leave(term, &req.group_id, &identities, Instant::now());
            resp = leave_response(identities, errors, version);
        }
    }
    reply::now(correlation_id, version, Response::LeaveGroup(resp))
}

/// The LeaveGroup response of one error per member.
fn leave_response(
    identities: Vec<(String, Option<String>)>,
    errors: Vec<ErrorCode>,
    version: i16,
) -> LeaveGroupResponse {
    let mut resp = LeaveGroupResponse::default();
    {
        {
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
    resp
}
