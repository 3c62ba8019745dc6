//! The Kafka handler of FindCoordinator: names the node coordinating every group and every
//! transactional id (the metadata group's leader) as reachable on the request's listener.

use std::sync::Arc;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_proto::messages::find_coordinator_response::{Coordinator, FindCoordinatorResponse};

use crate::kafka::access::Access;
use crate::kafka::fields::split_host_port;
use crate::kafka::host::GroupsHost;
use crate::kafka::reply::{self, Reply};
use crate::security::acl::AclOperation;

/// The coordinator's (node id, host, port), or why there is none.
fn locate<H: GroupsHost>(
    node: &H,
    key_type: i8,
    listener: &str,
) -> Result<(i32, String, i32), (ErrorCode, String)> {
    match key_type {
        // Groups and transactions alike: the metadata leader coordinates both.
        0 | 1 => {}
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
pub(crate) fn find_coordinator<H: GroupsHost>(
    node: &Arc<H>,
    access: &Access,
    req: FindCoordinatorRequest,
    version: i16,
    correlation_id: i32,
    listener: &str,
) -> Reply {
    let located = locate(node.as_ref(), req.key_type, listener);
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
