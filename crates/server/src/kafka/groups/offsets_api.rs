//! The Kafka handlers of committed offsets: OffsetCommit (checked against the group's
//! membership, then committed through the metadata group), OffsetFetch (read after a read
//! barrier) and OffsetDelete.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
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

use super::consumer::coordinator_ops::OffsetsCheck;
use super::limits::COMMIT_TIMEOUT;
use super::node_coordinator::{coordinator, coordinator_term, group_exists, read_barrier};
use crate::kafka::access::Access;
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::host::GroupsHost;
use crate::kafka::metadata::{locate_partition, PartitionHome};
use crate::kafka::reply::{self, Reply};
use crate::metadata::{wall_clock_ms, CommittedOffset, MetaCommand};
use crate::security::acl::AclOperation;

/// Longest committed metadata string accepted (Kafka's `offset.metadata.max.bytes`).
const MAX_OFFSET_METADATA_BYTES: usize = 4096;

/// Handles OffsetCommit: checks the member and generation, then commits the offsets through the
/// metadata group and answers once they are committed.
///
/// As in Kafka: READ on the group (else GROUP_AUTHORIZATION_FAILED for every partition), and
/// READ on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions).
pub(crate) fn offset_commit<H: GroupsHost>(
    node: &Arc<H>,
    access: &Access,
    req: OffsetCommitRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let term = coordinator_term(node);
    let group_error = match term {
        _ if !access.group(AclOperation::Read, &req.group_id) => {
            ErrorCode::GroupAuthorizationFailed
        }
        None => ErrorCode::NotCoordinator,
        Some(_) if req.group_id.is_empty() => ErrorCode::InvalidGroupId,
        Some(term) => {
            let epoch = if version >= 1 {
                req.generation_id_or_member_epoch
            } else {
                -1
            };
            // A consumer-protocol group checks the member epoch (v9+).
            coordinator(node)
                .consumer_validate_offsets(
                    term,
                    &req.group_id,
                    Some(&req.member_id),
                    epoch,
                    OffsetsCheck::Commit { version },
                )
                .unwrap_or_else(|| {
                    coordinator(node).validate_commit(
                        term,
                        &req.group_id,
                        epoch,
                        &req.member_id,
                        req.group_instance_id.as_deref(),
                        Instant::now(),
                    )
                })
        }
    };
    let (topics, offsets) = check_offsets(&**node, access, group_error, requested_offsets!(req));
    let respond = move |commit: Option<ErrorCode>| {
        Response::OffsetCommit(OffsetCommitResponse {
            topics: answer_topics(
                topics,
                commit,
                |name, partitions| OffsetCommitResponseTopic {
                    name,
                    partitions,
                    ..Default::default()
                },
                |partition_index, error_code| OffsetCommitResponsePartition {
                    partition_index,
                    error_code,
                    ..Default::default()
                },
            ),
            ..Default::default()
        })
    };
    if offsets.is_empty() {
        return reply::now(correlation_id, version, respond(None));
    }
    let command = MetaCommand::CommitOffsets {
        group: req.group_id,
        offsets,
        commit_time_ms: wall_clock_ms(),
    };
    commit_then_answer(node, term, command, correlation_id, version, respond)
}

/// Proposes a validated commit (`command`) in metadata term `term`, then answers with
/// `respond` (given the commit's error code when it failed).
///
/// Validated against this term's membership: committed only while this node still leads in it
/// (a deposed coordinator's commit fails NOT_COORDINATOR; the client retries at the new
/// coordinator, against the membership there).
pub(super) fn commit_then_answer<H: GroupsHost>(
    node: &Arc<H>,
    term: Option<u64>,
    command: MetaCommand,
    correlation_id: i32,
    version: i16,
    respond: impl FnOnce(Option<ErrorCode>) -> Response + Send + 'static,
) -> Reply {
    let node = node.clone();
    reply::later(
        correlation_id,
        version,
        commit_and_respond(node, term, command, respond),
    )
}

/// Proposes `command` (offsets) in the coordinator's `term`, then the response `respond`
/// builds with the commit's error, if any.
pub(super) async fn commit_and_respond<H: GroupsHost>(
    node: Arc<H>,
    term: Option<u64>,
    command: MetaCommand,
    respond: impl FnOnce(Option<ErrorCode>) -> Response + Send + 'static,
) -> Response {
    let result = node
        .metadata_proposer()
        .propose_in_term(&command, term.unwrap_or_default(), COMMIT_TIMEOUT)
        .await;
    if let Err(e) = &result {
        tracing::debug!(?command, "offset commit failed: {e}");
    }
    respond(
        result
            .err()
            .map(|e| append_error_code(&e, Proposal::OffsetCommit)),
    )
}

/// The offsets an OffsetCommit or TxnOffsetCommit request (`$req`, whose topics have the same
/// fields) asks to commit, by topic: `Vec<(String, Vec<CommittedOffset>)>`.
macro_rules! requested_offsets {
    ($req:expr) => {
        $req.topics
            .into_iter()
            .map(|t| {
                let name = t.name;
                let partitions = t
                    .partitions
                    .into_iter()
                    .map(|p| crate::metadata::CommittedOffset {
                        topic: name.clone(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata,
                    })
                    .collect::<Vec<_>>();
                (name, partitions)
            })
            .collect::<Vec<_>>()
    };
}
pub(super) use requested_offsets;

/// A commit's answer, topic by topic (built by `topic` from the name and the partitions built
/// by `partition` from the index and error code): each partition's check error, or for those
/// committed the commit's error (`None`: committed).
pub(super) fn answer_topics<T, P>(
    topics: CommitErrors,
    commit: Option<ErrorCode>,
    topic: impl Fn(String, Vec<P>) -> T,
    partition: impl Fn(i32, i16) -> P,
) -> Vec<T> {
    topics
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(index, e)| match (e, commit) {
                    (ErrorCode::None, Some(c)) => partition(index, c.code()),
                    (e, _) => partition(index, e.code()),
                })
                .collect();
            topic(name, partitions)
        })
        .collect()
}

/// Each partition's answer to a commit, by topic: (name, [(partition, error)]).
pub(super) type CommitErrors = Vec<(String, Vec<(i32, ErrorCode)>)>;

/// The per-partition checks of an OffsetCommit or TxnOffsetCommit, as Kafka's: `group_error`
/// (the group's authorization and membership) answers every partition; otherwise READ on the
/// topic (else TOPIC_AUTHORIZATION_FAILED), an existing partition (else
/// UNKNOWN_TOPIC_OR_PARTITION) and metadata of at most `offset.metadata.max.bytes` (else
/// OFFSET_METADATA_TOO_LARGE). Returns every partition's error (NONE for those to commit) and
/// the offsets to commit.
pub(super) fn check_offsets<H: GroupsHost>(
    node: &H,
    access: &Access,
    group_error: ErrorCode,
    requested: Vec<(String, Vec<CommittedOffset>)>,
) -> (CommitErrors, Vec<CommittedOffset>) {
    let mut offsets = Vec::new();
    let topics = requested
        .into_iter()
        .map(|(name, partitions)| {
            let partition_count = node.topic_layout(&name).map_or(0, |l| l.replicas.len());
            let topic_allowed =
                group_error != ErrorCode::None || access.topic(AclOperation::Read, &name);
            let partitions = partitions
                .into_iter()
                .map(|o| {
                    let partition = o.partition;
                    let error = if group_error != ErrorCode::None {
                        group_error
                    } else if !topic_allowed {
                        ErrorCode::TopicAuthorizationFailed
                    } else if usize::try_from(partition).map_or(true, |i| i >= partition_count) {
                        ErrorCode::UnknownTopicOrPartition
                    } else if o
                        .metadata
                        .as_ref()
                        .is_some_and(|m| m.len() > MAX_OFFSET_METADATA_BYTES)
                    {
                        ErrorCode::OffsetMetadataTooLarge
                    } else {
                        offsets.push(o);
                        ErrorCode::None
                    };
                    (partition, error)
                })
                .collect();
            (name, partitions)
        })
        .collect();
    (topics, offsets)
}

/// One partition's committed offset as read: (partition, offset, leader epoch, metadata, error
/// code).
type PartitionOffset = (i32, i64, i32, Option<String>, i16);

/// One group's offsets as read, by topic.
type GroupOffsets = Vec<(String, Vec<PartitionOffset>)>;

/// Requested topics: None for all of the group's.
type TopicSelection = Option<Vec<(String, Vec<i32>)>>;

/// Reads a group's committed offsets as applied on this node; partitions without one get -1.
/// With `require_stable` (OffsetFetch v7+, a read_committed consumer), a partition with an
/// offset pending in a transaction answers UNSTABLE_OFFSET_COMMIT (and -1), as Kafka's does;
/// the consumer retries until the transaction ends.
fn read_offsets<H: GroupsHost>(
    node: &H,
    group: &str,
    topics: &TopicSelection,
    require_stable: bool,
) -> GroupOffsets {
    let meta = node.metadata();
    let committed = meta.offsets.get(group);
    let entry = |topic: &str, partition: i32| {
        if require_stable && meta.has_pending_txn_offset(group, topic, partition) {
            return (
                partition,
                -1,
                -1,
                Some(String::new()),
                ErrorCode::UnstableOffsetCommit.code(),
            );
        }
        committed
            .and_then(|g| g.get(&(topic.to_owned(), partition)))
            .map_or((partition, -1, -1, Some(String::new()), 0), |o| {
                (
                    partition,
                    o.offset,
                    o.leader_epoch,
                    Some(o.metadata.clone().unwrap_or_default()),
                    0,
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

/// Handles OffsetFetch (v8+: several groups at once; v2+: null topics means all; v7+:
/// `require_stable`, see [`read_offsets`]).
///
/// As in Kafka: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED for it) and on each
/// topic: a named topic without it answers TOPIC_AUTHORIZATION_FAILED per partition, and a
/// group's "all topics" leaves such topics out.
pub(crate) fn offset_fetch<H: GroupsHost>(
    node: &Arc<H>,
    access: &Access,
    req: OffsetFetchRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    // A read_committed consumer's (v7+): no offset of a transaction still pending.
    let require_stable = version >= 7 && req.require_stable;
    // v9+: the member of a consumer-protocol group fetching, and its epoch.
    let mut members: Vec<(Option<String>, i32)> = Vec::new();
    let groups: Vec<(String, TopicSelection)> = if version >= 8 {
        req.groups
            .into_iter()
            .map(|g| {
                let topics = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name, t.partition_indexes))
                        .collect()
                });
                members.push((g.member_id, g.member_epoch));
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
            (Some(_), Some(_)) => read_barrier(&*node).await,
        };
        let results: Vec<(String, TopicSelection, Result<GroupOffsets, ErrorCode>)> = groups
            .into_iter()
            .enumerate()
            .map(|(i, (g, topics))| {
                let member_error = match (term, members.get(i)) {
                    (Some(term), Some((member_id, epoch))) if version >= 9 => coordinator(&node)
                        .consumer_validate_offsets(
                            term,
                            &g,
                            member_id.as_deref(),
                            *epoch,
                            OffsetsCheck::Fetch,
                        )
                        .filter(|e| *e != ErrorCode::None),
                    _ => None,
                };
                let r = match error.or(member_error) {
                    _ if !access.group(AclOperation::Describe, &g) => {
                        Err(ErrorCode::GroupAuthorizationFailed)
                    }
                    Some(e) => Err(e),
                    None => Ok(read_offsets(&*node, &g, &topics, require_stable)
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
                                            .map(|(p, o, epoch, metadata, e)| {
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
                                                    error_code: if refused { error } else { e },
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
                |(p, o, epoch, metadata, e): PartitionOffset| OffsetFetchResponsePartition {
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
                                    .map(|(p, o, epoch, metadata, e)| {
                                        if error != 0 {
                                            partition((p, -1, -1, metadata, error))
                                        } else {
                                            partition((p, o, epoch, metadata, e))
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
                                    .map(|p| partition((p, -1, -1, Some(String::new()), e.code())))
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

/// Handles OffsetDelete (API 47): removes a group's committed offsets of the named partitions.
/// As in Kafka: NOT_COORDINATOR off the coordinator, GROUP_ID_NOT_FOUND for an unknown group,
/// NON_EMPTY_GROUP for a group with members that does not use the consumer protocol, and per
/// partition GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to its topic and
/// UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist.
/// Authorization as Kafka's: DELETE on the group (else GROUP_AUTHORIZATION_FAILED), READ on
/// each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions).
pub(crate) fn offset_delete<H: GroupsHost>(
    node: &Arc<H>,
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
                        let command = MetaCommand::DeleteGroupOffsets {
                            group: req.group_id.clone(),
                            partitions: Some(delete),
                        };
                        match node
                            .metadata_proposer()
                            .propose(&command, COMMIT_TIMEOUT)
                            .await
                        {
                            Ok(_) => None,
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
