//! CreateTopics and DeleteTopics, through the replicated cluster metadata.
//!
//! A topic is one log stream: one partition, replicated to every node of the cluster. A request
//! for more than one partition gets INVALID_PARTITIONS; a replication factor above the number of
//! nodes gets INVALID_REPLICATION_FACTOR (below it is accepted: every topic lives on all nodes).

use std::sync::Arc;
use std::time::Duration;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::create_topics_request::CreateTopicsRequest;
use kafka_proto::messages::create_topics_response::{CreatableTopicResult, CreateTopicsResponse};
use kafka_proto::messages::delete_topics_request::DeleteTopicsRequest;
use kafka_proto::messages::delete_topics_response::{DeletableTopicResult, DeleteTopicsResponse};

use crate::config::valid_stream_name;
use crate::group::AppendError;
use crate::kafka::handlers::{frame, Reply};
use crate::kafka::metadata::{topic_id_of, topic_name_by_id};
use crate::node::Node;

/// Longest a topic creation or deletion waits for the metadata commit.
const MAX_TIMEOUT: Duration = Duration::from_secs(60);

fn timeout(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        .clamp(Duration::from_millis(100), MAX_TIMEOUT)
}

fn metadata_error(e: &AppendError) -> ErrorCode {
    match e {
        AppendError::Timeout => ErrorCode::RequestTimedOut,
        AppendError::Invalid(m) if m.contains("limit of") => ErrorCode::PolicyViolation,
        AppendError::Invalid(_) => ErrorCode::InvalidRequest,
        _ => ErrorCode::NotController,
    }
}

/// Checks one topic of a CreateTopics request; `Err` carries the error and its message.
fn check_creatable(
    node: &Node,
    name: &str,
    partitions: i32,
    replication: i16,
    assigned: bool,
) -> Result<(), (ErrorCode, String)> {
    let nodes = node.config().members.len();
    if !valid_stream_name(name) || name.starts_with("__") {
        return Err((
            ErrorCode::InvalidTopicException,
            format!("invalid topic name {name:?}"),
        ));
    }
    if node.is_topic(name) {
        return Err((
            ErrorCode::TopicAlreadyExists,
            format!("topic {name} already exists"),
        ));
    }
    let max_topics = node.config().kafka.max_topics;
    if node.metadata().topics.len() >= max_topics {
        return Err((
            ErrorCode::PolicyViolation,
            format!("the cluster holds its limit of {max_topics} topics (kafka.max_topics)"),
        ));
    }
    if assigned {
        return Err((
            ErrorCode::InvalidReplicaAssignment,
            "replica assignments are not supported: every topic lives on every node".into(),
        ));
    }
    if partitions != -1 && partitions != 1 {
        return Err((
            ErrorCode::InvalidPartitions,
            format!("topics have exactly one partition here, not {partitions}"),
        ));
    }
    if replication == 0 || replication < -1 || usize::try_from(replication).is_ok_and(|r| r > nodes)
    {
        return Err((
            ErrorCode::InvalidReplicationFactor,
            format!("replication factor {replication} with {nodes} nodes"),
        ));
    }
    Ok(())
}

/// Handles CreateTopics.
pub fn create_topics(
    node: &Arc<Node>,
    req: CreateTopicsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    Reply::Later(Box::pin(async move {
        let wait = timeout(req.timeout_ms);
        let replicas = i16::try_from(node.config().members.len()).unwrap_or(i16::MAX);
        let mut results = Vec::with_capacity(req.topics.len());
        for t in &req.topics {
            let mut r = CreatableTopicResult {
                name: t.name.clone(),
                num_partitions: -1,
                replication_factor: -1,
                ..Default::default()
            };
            let checked = check_creatable(
                &node,
                &t.name,
                t.num_partitions,
                t.replication_factor,
                !t.assignments.is_empty(),
            );
            let outcome = match checked {
                Err(e) => Err(e),
                Ok(()) if req.validate_only => Ok(()),
                Ok(()) => node
                    .create_topic(&t.name, wait)
                    .await
                    .map_err(|e| (metadata_error(&e), e.to_string())),
            };
            match outcome {
                Ok(()) => {
                    r.topic_id = topic_id_of(&node, &t.name);
                    r.num_partitions = 1;
                    r.replication_factor = replicas;
                    r.configs = Some(Vec::new());
                }
                Err((code, message)) => {
                    r.error_code = code.code();
                    r.error_message = Some(message);
                }
            }
            results.push(r);
        }
        frame(
            correlation_id,
            version,
            &Response::CreateTopics(CreateTopicsResponse {
                topics: results,
                ..Default::default()
            }),
        )
    }))
}

/// Handles DeleteTopics (by name, or by topic id in v6).
pub fn delete_topics(
    node: &Arc<Node>,
    req: DeleteTopicsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    Reply::Later(Box::pin(async move {
        let wait = timeout(req.timeout_ms);
        let wanted: Vec<(Option<String>, kafka_proto::Uuid)> = if version >= 6 {
            req.topics
                .iter()
                .map(|t| {
                    let name = t
                        .name
                        .clone()
                        .or_else(|| topic_name_by_id(&node, t.topic_id));
                    (name, t.topic_id)
                })
                .collect()
        } else {
            req.topic_names
                .iter()
                .map(|n| (Some(n.clone()), kafka_proto::Uuid::ZERO))
                .collect()
        };
        let mut results = Vec::with_capacity(wanted.len());
        for (name, id) in wanted {
            let mut r = DeletableTopicResult {
                name: name.clone(),
                topic_id: id,
                ..Default::default()
            };
            match name.filter(|n| node.is_topic(n)) {
                None => {
                    r.error_code = if version >= 6 && !id.is_zero() {
                        ErrorCode::UnknownTopicId.code()
                    } else {
                        ErrorCode::UnknownTopicOrPartition.code()
                    };
                }
                Some(n) => {
                    r.topic_id = topic_id_of(&node, &n);
                    if let Err(e) = node.delete_topic(&n, wait).await {
                        r.error_code = metadata_error(&e).code();
                        r.error_message = Some(e.to_string());
                    }
                }
            }
            results.push(r);
        }
        frame(
            correlation_id,
            version,
            &Response::DeleteTopics(DeleteTopicsResponse {
                responses: results,
                ..Default::default()
            }),
        )
    }))
}
