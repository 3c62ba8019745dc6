//! CreateTopics, CreatePartitions and DeleteTopics, through the replicated cluster metadata.
//!
//! A topic has one or more partitions; each is its own log stream and Raft group, replicated to
//! `replication_factor` nodes placed by [`crate::replication::placement`]. A partition count of -1
//! takes `kafka.num_partitions`; 0 or below -1 gets INVALID_PARTITIONS, as in Kafka. A replication
//! factor of -1 takes `kafka.default_replication_factor` (default: the smaller of 3 and the number
//! of nodes); 0, below -1 or above the number of nodes gets INVALID_REPLICATION_FACTOR. Explicit
//! replica assignments get INVALID_REPLICA_ASSIGNMENT: vdl places replicas itself. Configs
//! given at creation become the topic's overrides ([`crate::topic_config`]); an unknown name or
//! a bad value gets INVALID_CONFIG naming the key. Passing
//! `kafka.max_topics` or `kafka.max_partitions` gets POLICY_VIOLATION.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::create_partitions_request::CreatePartitionsRequest;
use kafka_proto::messages::create_partitions_response::{
    CreatePartitionsResponse, CreatePartitionsTopicResult,
};
use kafka_proto::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_proto::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse,
};
use kafka_proto::messages::delete_topics_request::DeleteTopicsRequest;
use kafka_proto::messages::delete_topics_response::{DeletableTopicResult, DeleteTopicsResponse};

use crate::config::valid_stream_name;
use crate::kafka::access::Access;
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::fields::admin_timeout;
use crate::kafka::host::TopicsHost;
use crate::kafka::metadata::{topic_id_of, topic_name_by_id};
use crate::kafka::reply::{self, Reply};
use crate::security::acl::AclOperation;
use crate::topic_config;

/// A topic to create, as checked: partition count, replication factor, config overrides.
type Creatable = (u32, usize, BTreeMap<String, String>);

/// Checks one topic of a CreateTopics request; `Ok` carries what to create it with, `Err` the
/// error and its message.
fn check_creatable<H: TopicsHost>(
    node: &H,
    t: &CreatableTopic,
) -> Result<Creatable, (ErrorCode, String)> {
    let (name, partitions, replication) = (&t.name, t.num_partitions, t.replication_factor);
    let assigned = !t.assignments.is_empty();
    let nodes = node.placement_members().len();
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
    if assigned {
        return Err((
            ErrorCode::InvalidReplicaAssignment,
            "explicit replica assignments are not supported: vdl places replicas itself".into(),
        ));
    }
    let partitions = match partitions {
        -1 => node.config().kafka.num_partitions,
        n => u32::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
            (
                ErrorCode::InvalidPartitions,
                "Number of partitions must be larger than 0.".to_owned(),
            )
        })?,
    };
    node.check_limits(&node.metadata(), 1, partitions)
        .map_err(|e| (ErrorCode::PolicyViolation, e.to_string()))?;
    let replication = match replication {
        -1 => node.default_replication_factor(),
        r => usize::try_from(r)
            .ok()
            .filter(|r| (1..=nodes).contains(r))
            .ok_or_else(|| {
                (
                    ErrorCode::InvalidReplicationFactor,
                    format!(
                        "Replication factor: {r} larger than available brokers: {nodes}, or not positive."
                    ),
                )
            })?,
    };
    let mut configs = BTreeMap::new();
    for c in &t.configs {
        let value = topic_config::validate(&c.name, c.value.as_deref())
            .map_err(|e| (ErrorCode::InvalidConfig, e.to_string()))?;
        configs.insert(c.name.clone(), value);
    }
    topic_config::validate_all(&configs, replication)
        .map_err(|e| (ErrorCode::InvalidConfig, e.to_string()))?;
    Ok((partitions, replication, configs))
}

/// A topic's configs as CreateTopics v5+ reports them.
fn created_configs<H: TopicsHost>(
    node: &H,
    configs: &BTreeMap<String, String>,
    replication: usize,
) -> Vec<CreatableTopicConfigs> {
    topic_config::describe(node.config(), configs, replication)
        .into_iter()
        .map(|c| CreatableTopicConfigs {
            name: c.name.to_owned(),
            value: Some(c.value),
            read_only: c.read_only,
            config_source: c.source.id(),
            is_sensitive: false,
            ..Default::default()
        })
        .collect()
}

/// Kafka's message for a refused topic operation.
const AUTHORIZATION_FAILED: &str = "Authorization failed.";

/// Handles CreateTopics. Each topic needs CREATE on the cluster or on the topic (else
/// TOPIC_AUTHORIZATION_FAILED); its configs are reported only with DESCRIBE_CONFIGS on it.
pub fn create_topics<H: TopicsHost>(
    node: &Arc<H>,
    access: &Access,
    req: CreateTopicsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    let may_create_any = access.cluster(AclOperation::Create);
    let authorized: Vec<(bool, bool)> = req
        .topics
        .iter()
        .map(|t| {
            (
                may_create_any || access.topic(AclOperation::Create, &t.name),
                access.topic(AclOperation::DescribeConfigs, &t.name),
            )
        })
        .collect();
    reply::later(correlation_id, version, async move {
        let wait = admin_timeout(req.timeout_ms);
        let mut results = Vec::with_capacity(req.topics.len());
        for (t, (may_create, may_describe_configs)) in req.topics.iter().zip(authorized) {
            let mut r = CreatableTopicResult {
                name: t.name.clone(),
                // Null unless there is an error, as Kafka sends it.
                error_message: None,
                num_partitions: -1,
                replication_factor: -1,
                ..Default::default()
            };
            let checked = if may_create {
                check_creatable(node.as_ref(), t)
            } else {
                Err((
                    ErrorCode::TopicAuthorizationFailed,
                    AUTHORIZATION_FAILED.to_owned(),
                ))
            };
            let outcome = match checked {
                Err(e) => Err(e),
                Ok(created) if req.validate_only => Ok(created),
                Ok((partitions, replication, configs)) => node
                    .create_topic_configured(
                        &t.name,
                        partitions,
                        replication,
                        configs.clone(),
                        wait,
                    )
                    .await
                    .map(|()| (partitions, replication, configs))
                    .map_err(|e| {
                        (
                            append_error_code(&e, Proposal::MetadataChange),
                            e.to_string(),
                        )
                    }),
            };
            match outcome {
                Ok((partitions, replication, configs)) => {
                    r.topic_id = topic_id_of(node.as_ref(), &t.name);
                    r.num_partitions = i32::try_from(partitions).unwrap_or(i32::MAX);
                    r.replication_factor = i16::try_from(replication).unwrap_or(i16::MAX);
                    if may_describe_configs {
                        r.configs = Some(created_configs(node.as_ref(), &configs, replication));
                    } else {
                        r.topic_config_error_code = ErrorCode::TopicAuthorizationFailed.code();
                    }
                }
                Err((code, message)) => {
                    r.error_code = code.code();
                    r.error_message = Some(message);
                }
            }
            results.push(r);
        }
        Response::CreateTopics(CreateTopicsResponse {
            topics: results,
            ..Default::default()
        })
    })
}

/// Handles DeleteTopics (by name, or by topic id in v6). Each topic needs DELETE on it (else
/// TOPIC_AUTHORIZATION_FAILED).
pub fn delete_topics<H: TopicsHost>(
    node: &Arc<H>,
    access: &Access,
    req: DeleteTopicsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let wait = admin_timeout(req.timeout_ms);
        let wanted: Vec<(Option<String>, kafka_proto::Uuid)> = if version >= 6 {
            req.topics
                .iter()
                .map(|t| {
                    let name = t
                        .name
                        .clone()
                        .or_else(|| topic_name_by_id(node.as_ref(), t.topic_id));
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
            if name
                .as_deref()
                .is_some_and(|n| !access.topic(AclOperation::Delete, n))
            {
                r.error_code = ErrorCode::TopicAuthorizationFailed.code();
                r.error_message = Some(AUTHORIZATION_FAILED.to_owned());
                results.push(r);
                continue;
            }
            match name.filter(|n| node.is_topic(n)) {
                None => {
                    r.error_code = if version >= 6 && !id.is_zero() {
                        ErrorCode::UnknownTopicId.code()
                    } else {
                        ErrorCode::UnknownTopicOrPartition.code()
                    };
                }
                Some(n) => {
                    r.topic_id = topic_id_of(node.as_ref(), &n);
                    // The incarnation this node knows now: a retried or late delete never
                    // removes a topic created again under the same name.
                    let command = crate::metadata::MetaCommand::DeleteTopic {
                        incarnation: node.metadata().incarnation(&n),
                        name: n.clone(),
                    };
                    if let Err(e) = node.metadata_proposer().propose(&command, wait).await {
                        r.error_code = append_error_code(&e, Proposal::MetadataChange).code();
                        r.error_message = Some(e.to_string());
                    }
                }
            }
            results.push(r);
        }
        Response::DeleteTopics(DeleteTopicsResponse {
            responses: results,
            ..Default::default()
        })
    })
}

/// Checks one topic of a CreatePartitions request against what this node has applied; `Ok`
/// carries the new partition count.
fn check_growable<H: TopicsHost>(
    node: &H,
    name: &str,
    count: i32,
    assigned: bool,
) -> Result<u32, (ErrorCode, String)> {
    let current = {
        let meta = node.metadata();
        let Some(topic) = meta.topics.get(name) else {
            return Err((
                ErrorCode::UnknownTopicOrPartition,
                format!("topic {name} does not exist"),
            ));
        };
        topic.partitions
    };
    let count = u32::try_from(count).unwrap_or(0);
    if count < current {
        return Err((
            ErrorCode::InvalidPartitions,
            format!("Topic currently has {current} partitions, which is higher than the requested {count}."),
        ));
    }
    if count == current {
        return Err((
            ErrorCode::InvalidPartitions,
            format!("Topic already has {current} partitions."),
        ));
    }
    if assigned {
        return Err((
            ErrorCode::InvalidReplicaAssignment,
            "explicit replica assignments are not supported: vdl places replicas itself".into(),
        ));
    }
    node.check_limits(&node.metadata(), 0, count - current)
        .map_err(|e| (ErrorCode::PolicyViolation, e.to_string()))?;
    Ok(count)
}

/// Handles CreatePartitions: grows each topic to its new count (partitions are only added, as
/// in Kafka). A topic named twice in one request gets INVALID_REQUEST each time; one the
/// principal may not ALTER gets TOPIC_AUTHORIZATION_FAILED.
pub fn create_partitions<H: TopicsHost>(
    node: &Arc<H>,
    access: &Access,
    req: CreatePartitionsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let wait = admin_timeout(req.timeout_ms);
        let mut results = Vec::with_capacity(req.topics.len());
        for t in &req.topics {
            let duplicate = req.topics.iter().filter(|o| o.name == t.name).count() > 1;
            let outcome = if duplicate {
                Err((
                    ErrorCode::InvalidRequest,
                    "Duplicate topic in request.".to_owned(),
                ))
            } else if !access.topic(AclOperation::Alter, &t.name) {
                Err((
                    ErrorCode::TopicAuthorizationFailed,
                    AUTHORIZATION_FAILED.to_owned(),
                ))
            } else {
                match check_growable(node.as_ref(), &t.name, t.count, t.assignments.is_some()) {
                    Err(e) => Err(e),
                    Ok(_) if req.validate_only => Ok(()),
                    Ok(count) => node
                        .create_partitions(&t.name, count, wait)
                        .await
                        .map_err(|e| {
                            (
                                append_error_code(&e, Proposal::MetadataChange),
                                e.to_string(),
                            )
                        }),
                }
            };
            let mut r = CreatePartitionsTopicResult {
                name: t.name.clone(),
                ..Default::default()
            };
            if let Err((code, message)) = outcome {
                r.error_code = code.code();
                r.error_message = Some(message);
            }
            results.push(r);
        }
        Response::CreatePartitions(CreatePartitionsResponse {
            results,
            ..Default::default()
        })
    })
}
