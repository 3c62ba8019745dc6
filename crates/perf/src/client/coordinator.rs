//! Requests to coordinators, one at a time on a [`Connection`]: FindCoordinator, the classic
//! consumer-group calls (JoinGroup, SyncGroup, Heartbeat, OffsetCommit, OffsetFetch,
//! LeaveGroup) and InitProducerId for an idempotent producer. Each function sends one request
//! and turns a top-level or partition error code into [`ClientError::Broker`].

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_proto::messages::heartbeat_request::HeartbeatRequest;
use kafka_proto::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_proto::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use kafka_proto::messages::join_group_response::JoinGroupResponse;
use kafka_proto::messages::leave_group_request::{LeaveGroupRequest, MemberIdentity};
use kafka_proto::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_proto::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestTopic};
use kafka_proto::messages::sync_group_request::{SyncGroupRequest, SyncGroupRequestAssignment};

use super::{ClientError, Connection};

/// FindCoordinator version (v4: batched keys).
pub const FIND_COORDINATOR_VERSION: i16 = 4;
/// JoinGroup version.
pub const JOIN_GROUP_VERSION: i16 = 9;
/// SyncGroup version.
pub const SYNC_GROUP_VERSION: i16 = 5;
/// Heartbeat version.
pub const HEARTBEAT_VERSION: i16 = 4;
/// OffsetCommit version (v8: flexible, the last before KIP-848's member epochs).
pub const OFFSET_COMMIT_VERSION: i16 = 8;
/// OffsetFetch version (v7: one group per request, `require_stable`).
pub const OFFSET_FETCH_VERSION: i16 = 7;
/// LeaveGroup version.
pub const LEAVE_GROUP_VERSION: i16 = 5;
/// InitProducerId version.
pub const INIT_PRODUCER_ID_VERSION: i16 = 4;

/// `Ok` for error code 0, else the broker's error for request `what`.
pub(super) fn broker(code: i16, what: &'static str) -> Result<(), ClientError> {
    match ErrorCode::from_code(code) {
        ErrorCode::None => Ok(()),
        code => Err(ClientError::Broker { code, what }),
    }
}

/// The error for a response that is not the `what` response asked for.
pub(super) fn unexpected(what: &str) -> ClientError {
    ClientError::Unexpected(format!("not a {what} response"))
}

/// The address (`host:port`) of the coordinator of `key`: a group (`key_type` 0) or a
/// transactional id (1), as the broker on `conn` names it.
pub async fn find_coordinator(
    conn: &mut Connection,
    key: &str,
    key_type: i8,
) -> Result<String, ClientError> {
    let req = FindCoordinatorRequest {
        key_type,
        coordinator_keys: vec![key.into()],
        ..Default::default()
    };
    let Response::FindCoordinator(r) = conn.request(FIND_COORDINATOR_VERSION, &req.into()).await?
    else {
        return Err(unexpected("FindCoordinator"));
    };
    let c = r
        .coordinators
        .first()
        .ok_or_else(|| ClientError::Unexpected("no coordinator in the response".into()))?;
    broker(c.error_code, "FindCoordinator")?;
    Ok(format!("{}:{}", c.host, c.port))
}

/// The timeouts a member joins with.
#[derive(Debug, Clone, Copy)]
pub struct MemberTimeouts {
    /// `session.timeout.ms`.
    pub session_ms: i32,
    /// `max.poll.interval.ms` (JoinGroup's rebalance timeout).
    pub rebalance_ms: i32,
}

/// One JoinGroup of a consumer-protocol member (`member_id` empty for a new member) using
/// the "range" assignor with `subscription` as its metadata. The whole answer, error code
/// included (MEMBER_ID_REQUIRED carries the id to join with).
pub async fn join_group(
    conn: &mut Connection,
    group: &str,
    member_id: &str,
    timeouts: MemberTimeouts,
    subscription: Bytes,
) -> Result<JoinGroupResponse, ClientError> {
    let req = JoinGroupRequest {
        group_id: group.into(),
        session_timeout_ms: timeouts.session_ms,
        rebalance_timeout_ms: timeouts.rebalance_ms,
        member_id: member_id.into(),
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            metadata: subscription,
            ..Default::default()
        }],
        ..Default::default()
    };
    match conn.request(JOIN_GROUP_VERSION, &req.into()).await? {
        Response::JoinGroup(r) => Ok(r),
        _ => Err(unexpected("JoinGroup")),
    }
}

/// One SyncGroup after `joined` (the leader passes every member's assignment, the others
/// none); the member's own assignment bytes.
pub async fn sync_group(
    conn: &mut Connection,
    group: &str,
    joined: &JoinGroupResponse,
    assignments: Vec<(String, Bytes)>,
) -> Result<Bytes, ClientError> {
    let req = SyncGroupRequest {
        group_id: group.into(),
        generation_id: joined.generation_id,
        member_id: joined.member_id.clone(),
        protocol_type: Some("consumer".into()),
        protocol_name: joined.protocol_name.clone(),
        assignments: assignments
            .into_iter()
            .map(|(member_id, assignment)| SyncGroupRequestAssignment {
                member_id,
                assignment,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let Response::SyncGroup(r) = conn.request(SYNC_GROUP_VERSION, &req.into()).await? else {
        return Err(unexpected("SyncGroup"));
    };
    broker(r.error_code, "SyncGroup")?;
    Ok(r.assignment)
}

/// One Heartbeat of `member_id` in `generation`.
pub async fn heartbeat(
    conn: &mut Connection,
    group: &str,
    member_id: &str,
    generation: i32,
) -> Result<(), ClientError> {
    let req = HeartbeatRequest {
        group_id: group.into(),
        generation_id: generation,
        member_id: member_id.into(),
        ..Default::default()
    };
    let Response::Heartbeat(r) = conn.request(HEARTBEAT_VERSION, &req.into()).await? else {
        return Err(unexpected("Heartbeat"));
    };
    broker(r.error_code, "Heartbeat")
}

/// Commits `offsets` ((partition, next offset to read)) of `topic` for `member_id` in
/// `generation` (-1 and an empty member id: a commit from outside the group). The first
/// partition error, if any, is the error.
pub async fn offset_commit(
    conn: &mut Connection,
    group: &str,
    member_id: &str,
    generation: i32,
    topic: &str,
    offsets: &[(i32, i64)],
) -> Result<(), ClientError> {
    let req = OffsetCommitRequest {
        group_id: group.into(),
        generation_id_or_member_epoch: generation,
        member_id: member_id.into(),
        topics: vec![OffsetCommitRequestTopic {
            name: topic.into(),
            partitions: offsets
                .iter()
                .map(
                    |&(partition_index, committed_offset)| OffsetCommitRequestPartition {
                        partition_index,
                        committed_offset,
                        committed_metadata: Some(String::new()),
                        ..Default::default()
                    },
                )
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::OffsetCommit(r) = conn.request(OFFSET_COMMIT_VERSION, &req.into()).await? else {
        return Err(unexpected("OffsetCommit"));
    };
    for p in r.topics.iter().flat_map(|t| t.partitions.iter()) {
        broker(p.error_code, "OffsetCommit")?;
    }
    Ok(())
}

/// The committed offsets of `partitions` of `topic` in `group`, in the order asked; -1 where
/// nothing is committed. `require_stable` so offsets pending in a transaction are not read.
pub async fn offset_fetch(
    conn: &mut Connection,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> Result<Vec<i64>, ClientError> {
    let req = OffsetFetchRequest {
        group_id: group.into(),
        topics: Some(vec![OffsetFetchRequestTopic {
            name: topic.into(),
            partition_indexes: partitions.to_vec(),
            ..Default::default()
        }]),
        require_stable: true,
        ..Default::default()
    };
    let Response::OffsetFetch(r) = conn.request(OFFSET_FETCH_VERSION, &req.into()).await? else {
        return Err(unexpected("OffsetFetch"));
    };
    broker(r.error_code, "OffsetFetch")?;
    let answered: Vec<_> = r
        .topics
        .iter()
        .filter(|t| t.name == topic)
        .flat_map(|t| t.partitions.iter())
        .collect();
    partitions
        .iter()
        .map(|&p| {
            let a = answered
                .iter()
                .find(|a| a.partition_index == p)
                .ok_or_else(|| {
                    ClientError::Unexpected(format!("OffsetFetch did not answer for {p}"))
                })?;
            broker(a.error_code, "OffsetFetch")?;
            Ok(a.committed_offset)
        })
        .collect()
}

/// Leaves `group` as `member_id` (the member's own error, if any, is the error).
pub async fn leave_group(
    conn: &mut Connection,
    group: &str,
    member_id: &str,
) -> Result<(), ClientError> {
    let req = LeaveGroupRequest {
        group_id: group.into(),
        members: vec![MemberIdentity {
            member_id: member_id.into(),
            reason: Some("vdl-perf verify: done".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::LeaveGroup(r) = conn.request(LEAVE_GROUP_VERSION, &req.into()).await? else {
        return Err(unexpected("LeaveGroup"));
    };
    broker(r.error_code, "LeaveGroup")?;
    for m in &r.members {
        broker(m.error_code, "LeaveGroup")?;
    }
    Ok(())
}

/// A producer id and epoch for an idempotent (non-transactional) producer.
pub async fn init_producer_id(conn: &mut Connection) -> Result<(i64, i16), ClientError> {
    let req = InitProducerIdRequest {
        transactional_id: None,
        transaction_timeout_ms: 60_000,
        ..Default::default()
    };
    let Response::InitProducerId(r) = conn.request(INIT_PRODUCER_ID_VERSION, &req.into()).await?
    else {
        return Err(unexpected("InitProducerId"));
    };
    broker(r.error_code, "InitProducerId")?;
    Ok((r.producer_id, r.producer_epoch))
}
