//! Partition administration: DeleteRecords, DescribeLogDirs, DescribeProducers, ElectLeaders
//! and ListPartitionReassignments.
//!
//! - **DeleteRecords** (sent to each partition's leader, as Kafka's AdminClient does): offset -1
//!   means the high watermark; beyond it is OFFSET_OUT_OF_RANGE; at or below the current log
//!   start offset nothing changes. Otherwise a `DeleteRecords` command goes through the
//!   replicated metadata, so every replica raises its log start offset (reads below it get
//!   OFFSET_OUT_OF_RANGE, consumers reset) and drops the segments wholly below it; the answer
//!   comes once this node (the leader) applied it and publishes the new low watermark
//!   (REQUEST_TIMED_OUT when that takes longer than the request's timeout). It survives
//!   restarts (the metadata log is replayed).
//! - **DescribeLogDirs** (sent to each broker): one log directory, the node's data directory,
//!   with every partition replica it holds and its size on disk; v4 adds the file system's
//!   total and usable bytes.
//! - **DescribeProducers** (sent to leaders): the idempotent producers the partition's log
//!   shows, with epoch, last sequence and the first offset of the transaction each has open
//!   (-1: none; no last timestamp or coordinator epoch is kept: -1).
//! - **ElectLeaders**: PREFERRED sends an `ElectPreferredLeader` command through the replicated
//!   metadata; the node leading the partition, wherever it is, applies it by starting a raft-rs
//!   leader transfer to the first replica. The answer waits until the preferred replica leads:
//!   ELECTION_NOT_NEEDED when it led already, PREFERRED_LEADER_NOT_AVAILABLE when it did not
//!   take over in time (down, or not caught up). UNCLEAN: vdl never elects
//!   a replica that may lack committed records, so ELECTION_NOT_NEEDED when a leader exists
//!   and ELIGIBLE_LEADERS_NOT_AVAILABLE otherwise.
//! - **ListPartitionReassignments**: the partitions being moved off a member that is being
//!   removed (see [`crate::replication::membership`]): replicas = new and old together,
//!   adding = new ones, removing = old ones (`kafka-topics --describe` asks it). vdl starts
//!   reassignments itself (AlterPartitionReassignments is not served).

use std::sync::Arc;
use std::time::Duration;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::delete_records_request::DeleteRecordsRequest;
use kafka_proto::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsResponse, DeleteRecordsTopicResult,
};
use kafka_proto::messages::describe_log_dirs_request::DescribeLogDirsRequest;
use kafka_proto::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResponse, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_proto::messages::describe_producers_request::DescribeProducersRequest;
use kafka_proto::messages::describe_producers_response::{
    DescribeProducersResponse, PartitionResponse, ProducerState, TopicResponse,
};
use kafka_proto::messages::elect_leaders_request::ElectLeadersRequest;
use kafka_proto::messages::elect_leaders_response::{
    ElectLeadersResponse, PartitionResult, ReplicaElectionResult,
};
use kafka_proto::messages::list_partition_reassignments_request::{
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsTopics,
};
use kafka_proto::messages::list_partition_reassignments_response::{
    ListPartitionReassignmentsResponse, OngoingPartitionReassignment, OngoingTopicReassignment,
};

use crate::kafka::access::Access;
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::fields::admin_timeout;
use crate::kafka::host::{NodeView, PartitionAdminHost};
use crate::kafka::metadata::{locate_partition, PartitionHome};
use crate::kafka::reply::{self, Reply};
use crate::replication::stream::LogStream;
use crate::security::acl::AclOperation;

/// How often ElectLeaders looks whether the preferred replica took over.
const ELECTION_POLL: Duration = Duration::from_millis(20);

/// The partition's stream when this node leads it, or the error to answer.
fn led_here<N: NodeView + ?Sized>(
    node: &N,
    topic: &str,
    index: i32,
) -> Result<LogStream, ErrorCode> {
    match locate_partition(node, topic, index) {
        PartitionHome::Here(s) if s.visible().leader == node.config().id => Ok(s),
        PartitionHome::Here(_) | PartitionHome::Elsewhere => Err(ErrorCode::NotLeaderOrFollower),
        PartitionHome::Unknown => Err(ErrorCode::UnknownTopicOrPartition),
    }
}

/// One partition of DeleteRecords: the new low watermark, or the error.
async fn delete_partition<H: PartitionAdminHost>(
    node: &H,
    topic: &str,
    index: i32,
    offset: i64,
    wait: Duration,
) -> Result<i64, ErrorCode> {
    let stream = led_here(node, topic, index)?;
    let v = stream.visible();
    let target = match offset {
        -1 => v.high_watermark,
        o if o < 0 || o as u64 > v.high_watermark => return Err(ErrorCode::OffsetOutOfRange),
        o => o as u64,
    };
    if target <= v.log_start_offset {
        return Ok(v.log_start_offset as i64);
    }
    if stream.incarnation() == 0 {
        // A stream configured at start has no entry in the replicated metadata to keep it.
        return Err(ErrorCode::PolicyViolation);
    }
    let failed = |e| append_error_code(&e, Proposal::RecordDeletion);
    let command = crate::metadata::MetaCommand::DeleteRecords {
        name: topic.to_owned(),
        incarnation: node.current_incarnation(topic).map_err(failed)?,
        partition: stream.partition(),
        offset: target,
    };
    let deadline = tokio::time::Instant::now() + wait;
    node.metadata_proposer()
        .propose(&command, wait)
        .await
        .map_err(failed)?;
    // The command is committed; the partition's group publishes the raised log start offset
    // once it applied it here. Answer after that, so a ListOffsets(earliest) that follows the
    // answer sees the new low watermark (Kafka answers once the low watermark is reached too).
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let low = stream
        .wait_for_log_start_at_least(target, left)
        .await
        .log_start_offset;
    if low < target {
        return Err(ErrorCode::RequestTimedOut);
    }
    Ok(low as i64)
}

/// Handles DeleteRecords (API 21). Needs DELETE on each topic (else TOPIC_AUTHORIZATION_FAILED).
pub fn delete_records<H: PartitionAdminHost>(
    node: &Arc<H>,
    access: &Access,
    req: DeleteRecordsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let wait = admin_timeout(req.timeout_ms);
        let mut topics = Vec::with_capacity(req.topics.len());
        for t in &req.topics {
            let mut partitions = Vec::with_capacity(t.partitions.len());
            let allowed = access.topic(AclOperation::Delete, &t.name);
            for p in &t.partitions {
                let mut r = DeleteRecordsPartitionResult {
                    partition_index: p.partition_index,
                    low_watermark: -1,
                    ..Default::default()
                };
                if !allowed {
                    r.error_code = ErrorCode::TopicAuthorizationFailed.code();
                    partitions.push(r);
                    continue;
                }
                match delete_partition(node.as_ref(), &t.name, p.partition_index, p.offset, wait)
                    .await
                {
                    Ok(low) => r.low_watermark = low,
                    Err(code) => r.error_code = code.code(),
                }
                partitions.push(r);
            }
            topics.push(DeleteRecordsTopicResult {
                name: t.name.clone(),
                partitions,
                ..Default::default()
            });
        }
        Response::DeleteRecords(DeleteRecordsResponse {
            topics,
            ..Default::default()
        })
    })
}

/// The total and available bytes of the file system holding `path` (None when unknown).
fn file_system_bytes(path: &std::path::Path) -> Option<(i64, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let block = st.f_frsize as i64;
    Some((
        (st.f_blocks as i64).saturating_mul(block),
        (st.f_bavail as i64).saturating_mul(block),
    ))
}

/// Handles DescribeLogDirs (API 35): this node's data directory and the replicas in it. Needs
/// DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED and no directories, as Kafka).
pub fn describe_log_dirs<H: PartitionAdminHost>(
    node: &H,
    access: &Access,
    req: &DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    if !access.cluster(AclOperation::Describe) {
        return DescribeLogDirsResponse {
            error_code: ErrorCode::ClusterAuthorizationFailed.code(),
            ..Default::default()
        };
    }
    let wanted = |topic: &str, partition: u32| match &req.topics {
        None => true,
        Some(list) => list
            .iter()
            .any(|t| t.topic == topic && t.partitions.contains(&(partition as i32))),
    };
    let mut topics = Vec::new();
    for name in node.topic_names() {
        let partitions: Vec<DescribeLogDirsPartition> = node
            .partitions(&name)
            .into_iter()
            .filter(|s| wanted(&name, s.partition()))
            .map(|s| DescribeLogDirsPartition {
                partition_index: s.partition() as i32,
                partition_size: i64::try_from(s.storage_size().1).unwrap_or(i64::MAX),
                offset_lag: 0,
                is_future_key: false,
                ..Default::default()
            })
            .collect();
        if !partitions.is_empty() {
            topics.push(DescribeLogDirsTopic {
                name,
                partitions,
                ..Default::default()
            });
        }
    }
    let dir = &node.config().data_dir;
    let (total_bytes, usable_bytes) = file_system_bytes(dir).unwrap_or((-1, -1));
    let log_dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
    DescribeLogDirsResponse {
        results: vec![DescribeLogDirsResult {
            log_dir: log_dir.display().to_string(),
            topics,
            total_bytes,
            usable_bytes,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Handles DescribeProducers (API 61). Needs READ on each topic (else
/// TOPIC_AUTHORIZATION_FAILED).
pub fn describe_producers<H: PartitionAdminHost>(
    node: &Arc<H>,
    access: &Access,
    req: DescribeProducersRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let mut topics = Vec::with_capacity(req.topics.len());
        for t in &req.topics {
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for &index in &t.partition_indexes {
                let mut r = PartitionResponse {
                    partition_index: index,
                    ..Default::default()
                };
                if !access.topic(AclOperation::Read, &t.name) {
                    r.error_code = ErrorCode::TopicAuthorizationFailed.code();
                    partitions.push(r);
                    continue;
                }
                match led_here(node.as_ref(), &t.name, index) {
                    Ok(stream) => {
                        r.active_producers = stream
                            .producers()
                            .await
                            .into_iter()
                            .map(|p| ProducerState {
                                producer_id: p.producer_id,
                                producer_epoch: i32::from(p.epoch),
                                last_sequence: p.last_sequence,
                                last_timestamp: -1,
                                coordinator_epoch: -1,
                                current_txn_start_offset: p
                                    .txn_start_offset
                                    .map_or(-1, |o| o as i64),
                                ..Default::default()
                            })
                            .collect();
                    }
                    Err(code) => r.error_code = code.code(),
                }
                partitions.push(r);
            }
            topics.push(TopicResponse {
                name: t.name.clone(),
                partitions,
                ..Default::default()
            });
        }
        Response::DescribeProducers(DescribeProducersResponse {
            topics,
            ..Default::default()
        })
    })
}

/// Kafka's election types.
const PREFERRED: i8 = 0;

/// The current leader of partition `partition` of topic `name` as this node knows it (0: none).
fn current_leader<N: NodeView + ?Sized>(
    node: &N,
    name: &str,
    incarnation: u64,
    partition: u32,
) -> u64 {
    match node.partition(name, partition) {
        Some(s) => s.visible().leader,
        None => node
            .reported_leader(name, incarnation, partition)
            .map_or(0, |(leader, _)| leader),
    }
}

/// One partition of ElectLeaders: `Ok` when the election happened, the error otherwise.
async fn elect<H: PartitionAdminHost>(
    node: &H,
    name: &str,
    index: i32,
    election_type: i8,
    deadline: tokio::time::Instant,
) -> Result<(), (ErrorCode, String)> {
    let unknown = || {
        (
            ErrorCode::UnknownTopicOrPartition,
            format!("no partition {name}-{index}"),
        )
    };
    let layout = node.topic_layout(name).ok_or_else(unknown)?;
    let partition = u32::try_from(index).map_err(|_| unknown())?;
    let preferred = *layout
        .replicas
        .get(partition as usize)
        .and_then(|r| r.first())
        .ok_or_else(unknown)?;
    let leader = current_leader(node, name, layout.incarnation, partition);
    if election_type != PREFERRED {
        return Err(if leader != 0 {
            (
                ErrorCode::ElectionNotNeeded,
                "the partition has a leader; vdl never elects a replica that may lack committed records"
                    .into(),
            )
        } else {
            (
                ErrorCode::EligibleLeadersNotAvailable,
                "no leader: vdl never elects a replica that may lack committed records".into(),
            )
        });
    }
    if leader == preferred {
        return Err((
            ErrorCode::ElectionNotNeeded,
            "Leader election not needed for topic partition.".into(),
        ));
    }
    let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
    node.elect_preferred_leader(name, layout.incarnation, partition, wait)
        .await
        .map_err(|e| (ErrorCode::RequestTimedOut, e.to_string()))?;
    loop {
        if current_leader(node, name, layout.incarnation, partition) == preferred {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err((
                ErrorCode::PreferredLeaderNotAvailable,
                format!(
                    "replica {preferred} did not take the leadership of {name}-{index} in time \
                     (it must be alive and caught up)"
                ),
            ));
        }
        tokio::time::sleep(ELECTION_POLL).await;
    }
}

/// Handles ElectLeaders (API 43). Needs ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED
/// for the request and each partition named, as Kafka answers).
pub fn elect_leaders<H: PartitionAdminHost>(
    node: &Arc<H>,
    access: &Access,
    req: ElectLeadersRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    if !access.cluster(AclOperation::Alter) {
        let refused = |index: i32| PartitionResult {
            partition_id: index,
            error_code: ErrorCode::ClusterAuthorizationFailed.code(),
            error_message: Some("Cluster authorization failed.".into()),
            ..Default::default()
        };
        let results = req
            .topic_partitions
            .iter()
            .flatten()
            .map(|t| ReplicaElectionResult {
                topic: t.topic.clone(),
                partition_result: t.partitions.iter().copied().map(refused).collect(),
                ..Default::default()
            })
            .collect();
        return reply::now(
            correlation_id,
            version,
            Response::ElectLeaders(ElectLeadersResponse {
                error_code: ErrorCode::ClusterAuthorizationFailed.code(),
                replica_election_results: results,
                ..Default::default()
            }),
        );
    }
    let node = node.clone();
    reply::later(correlation_id, version, async move {
        let deadline = tokio::time::Instant::now() + admin_timeout(req.timeout_ms);
        // Null: every partition of every topic (Kafka: all partitions whose preferred replica
        // does not lead); those needing no election are then left out of the answer.
        let all = req.topic_partitions.is_none();
        let asked: Vec<(String, Vec<i32>)> = match &req.topic_partitions {
            Some(list) => list
                .iter()
                .map(|t| (t.topic.clone(), t.partitions.clone()))
                .collect(),
            None => node
                .topic_names()
                .into_iter()
                .filter_map(|name| {
                    let layout = node.topic_layout(&name)?;
                    let n = layout.replicas.len() as i32;
                    Some((name, (0..n).collect()))
                })
                .collect(),
        };
        let mut results = Vec::with_capacity(asked.len());
        for (topic, partitions) in asked {
            let mut out = Vec::with_capacity(partitions.len());
            for index in partitions {
                let mut r = PartitionResult {
                    partition_id: index,
                    error_message: None,
                    ..Default::default()
                };
                match elect(node.as_ref(), &topic, index, req.election_type, deadline).await {
                    Ok(()) => {}
                    Err((ErrorCode::ElectionNotNeeded, _)) if all => continue,
                    Err((code, message)) => {
                        r.error_code = code.code();
                        r.error_message = Some(message);
                    }
                }
                out.push(r);
            }
            if !out.is_empty() || !all {
                results.push(ReplicaElectionResult {
                    topic,
                    partition_result: out,
                    ..Default::default()
                });
            }
        }
        Response::ElectLeaders(ElectLeadersResponse {
            replica_election_results: results,
            ..Default::default()
        })
    })
}

/// Handles ListPartitionReassignments (API 46): the partitions being reassigned, of the
/// topics asked (all when none are named), in topic and partition order. Needs DESCRIBE on the
/// cluster (else CLUSTER_AUTHORIZATION_FAILED).
pub fn list_partition_reassignments<H: PartitionAdminHost>(
    node: &H,
    access: &Access,
    req: &ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    if !access.cluster(AclOperation::Describe) {
        return ListPartitionReassignmentsResponse {
            error_code: ErrorCode::ClusterAuthorizationFailed.code(),
            error_message: Some("Cluster authorization failed.".into()),
            ..Default::default()
        };
    }
    ListPartitionReassignmentsResponse {
        error_message: None,
        topics: ongoing_reassignments(&node.metadata(), req.topics.as_deref()),
        ..Default::default()
    }
}

/// The reassignments in `meta` of the topics and partitions `asked` (all when `None`).
fn ongoing_reassignments(
    meta: &crate::metadata::ClusterMeta,
    asked: Option<&[ListPartitionReassignmentsTopics]>,
) -> Vec<OngoingTopicReassignment> {
    let ids = |v: &[u64]| -> Vec<i32> {
        v.iter()
            .map(|id| i32::try_from(*id).unwrap_or(i32::MAX))
            .collect()
    };
    let mut topics = Vec::new();
    for (name, t) in &meta.topics {
        let wanted = match asked {
            None => None,
            Some(list) => match list.iter().find(|a| a.name == *name) {
                Some(a) => Some(&a.partition_indexes),
                None => continue,
            },
        };
        let partitions: Vec<OngoingPartitionReassignment> = t
            .moving
            .iter()
            .filter(|(p, _)| {
                wanted.is_none_or(|ps| ps.iter().any(|a| i64::from(*a) == i64::from(**p)))
            })
            .filter_map(|(p, old)| {
                let new = t.replicas.get(*p as usize)?;
                let mut all = new.clone();
                all.extend(old.iter().filter(|o| !new.contains(o)));
                let adding: Vec<u64> = new.iter().copied().filter(|n| !old.contains(n)).collect();
                let removing: Vec<u64> = old.iter().copied().filter(|o| !new.contains(o)).collect();
                Some(OngoingPartitionReassignment {
                    partition_index: i32::try_from(*p).unwrap_or(i32::MAX),
                    replicas: ids(&all),
                    adding_replicas: ids(&adding),
                    removing_replicas: ids(&removing),
                    ..Default::default()
                })
            })
            .collect();
        if !partitions.is_empty() {
            topics.push(OngoingTopicReassignment {
                name: name.clone(),
                partitions,
                ..Default::default()
            });
        }
    }
    topics
}

#[cfg(test)]
mod reassignment_tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::metadata::{ClusterMeta, MetaCommand};

    /// A partition moving off a leaving member is listed with its adding and removing
    /// replicas, only when asked for (or when nothing is named), and no longer once finished.
    #[test]
    fn moving_partitions_are_listed() {
        let mut m = ClusterMeta::new(vec![1, 2, 3, 4]);
        let create = MetaCommand::CreateTopic {
            name: "t".into(),
            partitions: 2,
            replicas: vec![vec![1, 2, 3], vec![2, 3, 4]],
            configs: BTreeMap::new(),
        };
        m.apply_for_test(1, create);
        m.apply_for_test(
            2,
            MetaCommand::RemoveMember {
                id: 1,
                members: BTreeMap::new(),
            },
        );
        let all = ongoing_reassignments(&m, None);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].name, "t");
        let p = &all[0].partitions;
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].partition_index, 0);
        assert_eq!(p[0].replicas, vec![4, 2, 3, 1]);
        assert_eq!(p[0].adding_replicas, vec![4]);
        assert_eq!(p[0].removing_replicas, vec![1]);
        let other = [ListPartitionReassignmentsTopics {
            name: "t".into(),
            partition_indexes: vec![1],
            ..Default::default()
        }];
        assert!(ongoing_reassignments(&m, Some(&other)).is_empty());
        m.apply_for_test(
            3,
            MetaCommand::FinishReassignment {
                name: "t".into(),
                incarnation: 1,
                partition: 0,
            },
        );
        assert!(ongoing_reassignments(&m, None).is_empty());
    }
}
