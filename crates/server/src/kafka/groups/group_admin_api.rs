//! The Kafka handlers of group administration: ListGroups, DescribeGroups and DeleteGroups, over
//! the groups with membership state on the coordinator and those that only have committed
//! offsets.

use std::collections::HashSet;
use std::sync::Arc;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_proto::messages::delete_groups_response::{DeletableGroupResult, DeleteGroupsResponse};
use kafka_proto::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_proto::messages::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup, DescribedGroupMember,
};
use kafka_proto::messages::list_groups_request::ListGroupsRequest;
use kafka_proto::messages::list_groups_response::{ListGroupsResponse, ListedGroup};

use super::limits::COMMIT_TIMEOUT;
use super::node_coordinator::{coordinator, coordinator_term, group_exists, read_barrier};
use super::types::GroupState;
use crate::kafka::access::{Access, GROUP_OPERATIONS};
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::host::GroupsHost;
use crate::kafka::reply::{self, Reply};
use crate::metadata::MetaCommand;
use crate::security::acl::{AclOperation, ResourceType};

/// The group type ListGroups reports for a classic group.
const CLASSIC_TYPE: &str = "classic";
/// The group type ListGroups reports for a consumer-protocol (KIP-848) group, which is also
/// its protocol type.
const CONSUMER_TYPE: &str = "consumer";

/// Groups that only have committed offsets (no membership state): reported as Empty.
fn offset_only_groups<H: GroupsHost>(node: &H, known: &HashSet<String>) -> Vec<String> {
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
pub(crate) fn list_groups<H: GroupsHost>(
    node: &Arc<H>,
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
        let listed = match read_barrier(&*node).await {
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
        let consumer = match coordinator(&node).consumer_list(term) {
            Ok(l) => l,
            Err(e) => {
                return Response::ListGroups(ListGroupsResponse {
                    error_code: e.code(),
                    ..Default::default()
                })
            }
        };
        let mut known: HashSet<String> = listed.iter().map(|g| g.group_id.clone()).collect();
        known.extend(consumer.iter().map(|(id, _)| id.clone()));
        // (id, protocol type, state name, group type)
        let mut all: Vec<(String, String, &'static str, &'static str)> = listed
            .into_iter()
            .map(|g| (g.group_id, g.protocol_type, g.state.name(), CLASSIC_TYPE))
            .collect();
        all.extend(
            consumer
                .into_iter()
                .map(|(id, state)| (id, CONSUMER_TYPE.to_owned(), state.name(), CONSUMER_TYPE)),
        );
        all.extend(
            offset_only_groups(&*node, &known)
                .into_iter()
                .map(|g| (g, String::new(), GroupState::Empty.name(), CLASSIC_TYPE)),
        );
        all.sort_by(|a, b| a.0.cmp(&b.0));
        if !access.cluster(AclOperation::Describe) {
            all.retain(|(g, _, _, _)| access.group(AclOperation::Describe, g));
        }
        let groups = all
            .into_iter()
            .filter(|(_, _, state, group_type)| {
                (req.types_filter.is_empty()
                    || req
                        .types_filter
                        .iter()
                        .any(|t| t.eq_ignore_ascii_case(group_type)))
                    && (req.states_filter.is_empty()
                        || req
                            .states_filter
                            .iter()
                            .any(|s| s.eq_ignore_ascii_case(state)))
            })
            .map(|(group_id, protocol_type, state, group_type)| ListedGroup {
                group_id,
                protocol_type,
                group_state: state.to_owned(),
                group_type: group_type.to_owned(),
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
/// does; v6+: GROUP_ID_NOT_FOUND with a message, as Kafka 4); one that only has committed
/// offsets, Empty. A consumer-protocol group is not a classic group: Kafka 4 reports it as
/// an unknown one (Dead; v6+ GROUP_ID_NOT_FOUND "Group G is not a classic group.").
///
/// As in Kafka: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED for it); its authorized
/// operations when asked for (v3+).
pub(crate) fn describe_groups<H: GroupsHost>(
    node: &Arc<H>,
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
            (Some(_), Some(_)) => read_barrier(&*node).await,
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
                if coordinator(&node).is_consumer_group(&group_id) {
                    return not_found(
                        group_id.clone(),
                        version,
                        format!("Group {group_id} is not a classic group."),
                    );
                }
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
                        if !has_offsets {
                            let message = format!("Group {group_id} not found.");
                            return not_found(group_id, version, message);
                        }
                        DescribedGroup {
                            group_id,
                            group_state: GroupState::Empty.name().to_owned(),
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

/// An unknown group as DescribeGroups reports it: Dead before v6, GROUP_ID_NOT_FOUND with
/// `message` from v6 (Kafka 4).
fn not_found(group_id: String, version: i16, message: String) -> DescribedGroup {
    if version >= 6 {
        DescribedGroup {
            error_code: ErrorCode::GroupIdNotFound.code(),
            error_message: Some(message),
            group_id,
            group_state: GroupState::Dead.name().to_owned(),
            ..Default::default()
        }
    } else {
        DescribedGroup {
            group_id,
            group_state: GroupState::Dead.name().to_owned(),
            ..Default::default()
        }
    }
}

/// One group of DeleteGroups: error 0 once its offsets and membership state are gone.
async fn delete_group<H: GroupsHost>(node: &Arc<H>, group_id: &str) -> ErrorCode {
    let Some(term) = coordinator_term(node) else {
        return ErrorCode::NotCoordinator;
    };
    if !group_exists(node, term, group_id) {
        return ErrorCode::GroupIdNotFound;
    }
    if let Some(Err(code)) = coordinator(node).consumer_remove_empty(term, group_id) {
        return code;
    }
    if let Err(code) = coordinator(node).remove_empty(term, group_id) {
        return code;
    }
    let command = MetaCommand::DeleteGroupOffsets {
        group: group_id.to_owned(),
        partitions: None,
    };
    match node
        .metadata_proposer()
        .propose(&command, COMMIT_TIMEOUT)
        .await
    {
        Ok(_) => ErrorCode::None,
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
pub(crate) fn delete_groups<H: GroupsHost>(
    node: &Arc<H>,
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
