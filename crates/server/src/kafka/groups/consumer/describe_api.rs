//! The Kafka handler of ConsumerGroupDescribe (API 69, v0-1): each consumer-protocol group's
//! state, epochs, assignor and members with their current and target assignments (topic ids
//! with names).

use std::sync::Arc;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::consumer_group_describe_request::ConsumerGroupDescribeRequest;
use kafka_proto::messages::consumer_group_describe_response::{
    Assignment as WireAssignment, ConsumerGroupDescribeResponse, DescribedGroup, Member,
    TargetAssignment, TargetTopicPartitions, TopicPartitions,
};

use super::super::node_coordinator::{coordinator, coordinator_term, read_barrier};
use super::assignors::Assignment;
use super::group::ConsumerGroup;
use super::member::LEFT_STATIC_EPOCH;
use crate::kafka::access::{Access, GROUP_OPERATIONS};
use crate::kafka::host::GroupsHost;
use crate::kafka::reply::{self, Reply};
use crate::metadata::ClusterMeta;
use crate::security::acl::{AclOperation, ResourceType};

/// KIP-1099's member type of a consumer-protocol member.
const MEMBER_TYPE_CONSUMER: i8 = 1;
/// KIP-1099's member type of a classic-protocol member.
const MEMBER_TYPE_CLASSIC: i8 = 0;

fn named(meta: &ClusterMeta, a: &Assignment) -> Vec<(kafka_proto::Uuid, String, Vec<i32>)> {
    a.iter()
        .map(|(t, ps)| {
            (
                *t,
                meta.topic_name_by_id(*t).unwrap_or_default().to_owned(),
                ps.iter().copied().collect(),
            )
        })
        .collect()
}

/// Group `group_id` described (`g`), with its topics' names from `meta`.
pub(crate) fn described(
    group_id: String,
    g: &ConsumerGroup,
    meta: &ClusterMeta,
    version: i16,
) -> DescribedGroup {
    DescribedGroup {
        group_id,
        group_state: g.state().name().to_owned(),
        group_epoch: g.group_epoch,
        assignment_epoch: g.assignment_epoch,
        assignor_name: if g.assignor.is_empty() {
            g.assignor_name().to_owned()
        } else {
            g.assignor.clone()
        },
        members: g
            .members
            .iter()
            .map(|(id, m)| Member {
                member_id: id.clone(),
                instance_id: m.instance_id.clone(),
                rack_id: m.rack.clone(),
                member_epoch: if m.epoch == LEFT_STATIC_EPOCH {
                    m.previous_epoch
                } else {
                    m.epoch
                },
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_topic_names: m.subscribed_names.iter().cloned().collect(),
                // Kafka 4.1 sends "" for a member without a regex.
                subscribed_topic_regex: Some(m.subscribed_regex.clone().unwrap_or_default()),
                assignment: WireAssignment {
                    topic_partitions: named(meta, &m.assigned)
                        .into_iter()
                        .map(|(topic_id, topic_name, partitions)| TopicPartitions {
                            topic_id,
                            topic_name,
                            partitions,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                },
                target_assignment: TargetAssignment {
                    topic_partitions: named(meta, &g.target.get(id).cloned().unwrap_or_default())
                        .into_iter()
                        .map(|(topic_id, topic_name, partitions)| TargetTopicPartitions {
                            topic_id,
                            topic_name,
                            partitions,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                },
                member_type: if version < 1 {
                    -1
                } else if m.classic.is_some() {
                    MEMBER_TYPE_CLASSIC
                } else {
                    MEMBER_TYPE_CONSUMER
                },
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Handles ConsumerGroupDescribe: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED);
/// a group that is not a consumer-protocol group here is GROUP_ID_NOT_FOUND, as in Kafka.
pub(crate) fn consumer_group_describe<H: GroupsHost>(
    node: &Arc<H>,
    access: &Access,
    req: ConsumerGroupDescribeRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let term = coordinator_term(node);
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let barrier = match (term, req.group_ids.first()) {
            (Some(_), Some(_)) => read_barrier(&*node).await,
            _ => None,
        };
        let groups = req
            .group_ids
            .into_iter()
            .map(|group_id| {
                let error =
                    |e: ErrorCode, message: Option<String>, group_id: String| DescribedGroup {
                        error_code: e.code(),
                        error_message: message,
                        group_id,
                        ..Default::default()
                    };
                if !access.group(AclOperation::Describe, &group_id) {
                    return error(ErrorCode::GroupAuthorizationFailed, None, group_id);
                }
                let (Some(term), None) = (term, barrier) else {
                    return error(barrier.unwrap_or(ErrorCode::NotCoordinator), None, group_id);
                };
                let Some(g) = coordinator(&node).consumer_snapshot(term, &group_id) else {
                    let message = if coordinator(&node).describe(term, &group_id).is_some() {
                        format!("Group {group_id} is not a consumer group.")
                    } else {
                        format!("Group {group_id} not found.")
                    };
                    return error(ErrorCode::GroupIdNotFound, Some(message), group_id);
                };
                let meta = node.metadata();
                let mut d = described(group_id, &g, &meta, version);
                if req.include_authorized_operations {
                    d.authorized_operations =
                        access.operations(ResourceType::Group, &d.group_id, GROUP_OPERATIONS);
                }
                d
            })
            .collect();
        Response::ConsumerGroupDescribe(ConsumerGroupDescribeResponse {
            groups,
            ..Default::default()
        })
    })
}
