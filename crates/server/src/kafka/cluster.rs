//! InitProducerId, DescribeCluster and DescribeConfigs.

use std::sync::Arc;
use std::time::Duration;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::describe_cluster_request::DescribeClusterRequest;
use kafka_proto::messages::describe_cluster_response::{
    DescribeClusterBroker, DescribeClusterResponse,
};
use kafka_proto::messages::describe_configs_request::DescribeConfigsRequest;
use kafka_proto::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
    DescribeConfigsSynonym,
};
use kafka_proto::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_proto::messages::init_producer_id_response::InitProducerIdResponse;

use crate::kafka::access::{Access, CLUSTER_OPERATIONS, OPERATIONS_NOT_REQUESTED};
use crate::kafka::fields::split_host_port;
use crate::kafka::host::{ClusterHost, TxnHost};
use crate::kafka::metadata::cluster_id;
use crate::kafka::reply::{self, Reply};
use crate::kafka::txn::init_producer_id::init_transactional;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_RESOURCE_NAME};
use crate::topic_config::{ConfigSource, ConfigType, DescribedConfig};

/// How long InitProducerId waits for the replicated allocation.
const ALLOCATE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handles InitProducerId: a new cluster-unique producer id with epoch 0 for an idempotent
/// producer; the same id with the next epoch when a producer asks to bump its epoch (KIP-360,
/// v3+); for a transactional id, what its coordinator decides
/// ([`crate::kafka::txn::init_producer_id`]).
///
/// Authorization as Kafka's: with a transactional id, WRITE on it (else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without, IDEMPOTENT_WRITE on the cluster or WRITE on
/// at least one topic (else CLUSTER_AUTHORIZATION_FAILED).
pub(crate) fn init_producer_id<H: TxnHost>(
    node: &Arc<H>,
    access: &Access,
    req: InitProducerIdRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let refused = match &req.transactional_id {
        Some(id) if !access.transactional_id(AclOperation::Write, id) => {
            Some(ErrorCode::TransactionalIdAuthorizationFailed)
        }
        Some(_) => None,
        None if access.cluster(AclOperation::IdempotentWrite)
            || access.any_topic(AclOperation::Write) =>
        {
            None
        }
        None => Some(ErrorCode::ClusterAuthorizationFailed),
    };
    let node = node.clone();
    reply::later(correlation_id, version, async move {
        let mut r = InitProducerIdResponse {
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        };
        if let Some(code) = refused {
            r.error_code = code.code();
        } else if let Some(id) = req.transactional_id.as_deref() {
            match init_transactional(&node, id, &req, version).await {
                Ok((producer_id, producer_epoch)) => {
                    r.producer_id = producer_id;
                    r.producer_epoch = producer_epoch;
                }
                Err(code) => r.error_code = code.code(),
            }
        } else if req.producer_id >= 0
            && req.producer_epoch >= 0
            && req.producer_epoch < i16::MAX - 1
        {
            r.producer_id = req.producer_id;
            r.producer_epoch = req.producer_epoch + 1;
        } else {
            match node.allocate_producer_id(ALLOCATE_TIMEOUT).await {
                Ok(id) => {
                    r.producer_id = id;
                    r.producer_epoch = 0;
                }
                Err(e) => {
                    tracing::warn!("allocating a producer id failed: {e}");
                    r.error_code = ErrorCode::CoordinatorNotAvailable.code();
                }
            }
        }
        Response::InitProducerId(r)
    })
}

/// Handles DescribeCluster: the cluster id, a controller (the metadata group's leader) and every
/// live broker, with its address on listener `listener`. As in Kafka anyone may ask; the cluster's authorized operations, when asked
/// for, are reported only to a principal with DESCRIBE on the cluster (else 0).
pub fn describe_cluster<H: ClusterHost>(
    node: &Arc<H>,
    access: &Access,
    req: &DescribeClusterRequest,
    listener: &str,
) -> DescribeClusterResponse {
    let cluster_authorized_operations = if !req.include_cluster_authorized_operations {
        OPERATIONS_NOT_REQUESTED
    } else if access.cluster(AclOperation::Describe) {
        access.operations(
            ResourceType::Cluster,
            CLUSTER_RESOURCE_NAME,
            CLUSTER_OPERATIONS,
        )
    } else {
        0
    };
    let controller = node
        .metadata_group()
        .map(|g| g.visible().leader)
        .filter(|l| *l != 0)
        .map_or(-1, |l| i32::try_from(l).unwrap_or(-1));
    DescribeClusterResponse {
        cluster_id: cluster_id(node.config()),
        controller_id: controller,
        brokers: node
            .live_brokers_on(listener)
            .into_iter()
            .map(|(id, addr)| {
                let (host, port) = split_host_port(&addr);
                DescribeClusterBroker {
                    broker_id: i32::try_from(id).unwrap_or(-1),
                    host,
                    port,
                    rack: None,
                    ..Default::default()
                }
            })
            .collect(),
        cluster_authorized_operations,
        ..Default::default()
    }
}

/// Kafka's resource types.
pub(crate) const TOPIC: i8 = 2;
pub(crate) const BROKER: i8 = 4;
/// Kafka's config sources.
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;
/// Kafka's config types.
const BOOLEAN: i8 = 1;
const INT: i8 = 3;
const LONG: i8 = 5;

/// (name, value, type, source) of a broker's configuration.
type ConfigEntry = (&'static str, String, i8, i8);

/// A topic's configs as DescribeConfigs reports them (see [`crate::topic_config::describe`]).
fn topic_configs<H: ClusterHost>(node: &H, name: &str, voters: usize) -> Vec<DescribedConfig> {
    let overrides = node
        .metadata()
        .topics
        .get(name)
        .map(|t| t.configs.clone())
        .unwrap_or_default();
    crate::topic_config::describe(node.config(), &overrides, voters)
}

fn broker_configs<H: ClusterHost>(node: &H) -> Vec<ConfigEntry> {
    let c = node.config();
    let mut v = vec![
        (
            "auto.create.topics.enable",
            c.kafka.auto_create_topics.to_string(),
            BOOLEAN,
            STATIC_BROKER_CONFIG,
        ),
        ("broker.id", c.id.to_string(), INT, STATIC_BROKER_CONFIG),
        (
            "connections.max.idle.ms",
            c.kafka.connection_idle.as_millis().to_string(),
            LONG,
            STATIC_BROKER_CONFIG,
        ),
        (
            "default.replication.factor",
            c.default_replication_factor().to_string(),
            INT,
            STATIC_BROKER_CONFIG,
        ),
        (
            "message.max.bytes",
            c.kafka.message_max_bytes.to_string(),
            INT,
            STATIC_BROKER_CONFIG,
        ),
        (
            "num.partitions",
            c.kafka.num_partitions.to_string(),
            INT,
            if c.kafka.num_partitions == 1 {
                DEFAULT_CONFIG
            } else {
                STATIC_BROKER_CONFIG
            },
        ),
        (
            "socket.request.max.bytes",
            c.kafka.request_max_bytes.to_string(),
            INT,
            STATIC_BROKER_CONFIG,
        ),
    ];
    let voters = c.default_replication_factor();
    v.push((
        "min.insync.replicas",
        (voters / 2 + 1).to_string(),
        INT,
        STATIC_BROKER_CONFIG,
    ));
    v
}

/// A broker config as a described config (its own synonym, as Kafka lists it).
fn broker_entry((name, value, config_type, source): ConfigEntry) -> DescribedConfig {
    let source = if source == DEFAULT_CONFIG {
        ConfigSource::Default
    } else {
        ConfigSource::StaticBroker
    };
    DescribedConfig {
        name,
        value: value.clone(),
        config_type: match config_type {
            BOOLEAN => ConfigType::Boolean,
            INT => ConfigType::Int,
            LONG => ConfigType::Long,
            _ => ConfigType::String,
        },
        source,
        read_only: true,
        synonyms: vec![(name, value, source)],
    }
}

/// Handles DescribeConfigs for topics (their effective settings) and brokers. A topic needs
/// DESCRIBE_CONFIGS on it (else TOPIC_AUTHORIZATION_FAILED), a broker DESCRIBE_CONFIGS on the
/// cluster (else CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
pub fn describe_configs<H: ClusterHost>(
    node: &Arc<H>,
    access: &Access,
    req: &DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let results = req
        .resources
        .iter()
        .map(|res| {
            let mut out = DescribeConfigsResult {
                resource_type: res.resource_type,
                resource_name: res.resource_name.clone(),
                ..Default::default()
            };
            let refused = match res.resource_type {
                TOPIC if !access.topic(AclOperation::DescribeConfigs, &res.resource_name) => {
                    Some(ErrorCode::TopicAuthorizationFailed)
                }
                BROKER if !access.cluster(AclOperation::DescribeConfigs) => {
                    Some(ErrorCode::ClusterAuthorizationFailed)
                }
                _ => None,
            };
            if let Some(code) = refused {
                out.error_code = code.code();
                out.error_message = Some("Authorization failed.".into());
                return out;
            }
            let entries = match res.resource_type {
                TOPIC => match node.topic_replication_factor(&res.resource_name) {
                    Some(replicas) => topic_configs(node.as_ref(), &res.resource_name, replicas),
                    None => {
                        out.error_code = ErrorCode::UnknownTopicOrPartition.code();
                        out.error_message =
                            Some(format!("The topic '{}' does not exist.", res.resource_name));
                        return out;
                    }
                },
                BROKER
                    if res.resource_name.is_empty()
                        || res.resource_name == node.config().id.to_string() =>
                {
                    broker_configs(node.as_ref())
                        .into_iter()
                        .map(broker_entry)
                        .collect()
                }
                _ => {
                    out.error_code = ErrorCode::InvalidRequest.code();
                    out.error_message =
                        Some("only topic and this broker's configs are described".into());
                    return out;
                }
            };
            out.configs = entries
                .into_iter()
                .filter(|c| {
                    res.configuration_keys
                        .as_ref()
                        .is_none_or(|keys| keys.iter().any(|k| k == c.name))
                })
                .map(|c| DescribeConfigsResourceResult {
                    name: c.name.to_owned(),
                    value: Some(c.value),
                    read_only: c.read_only,
                    is_default: c.source == ConfigSource::Default,
                    config_source: c.source.id(),
                    is_sensitive: false,
                    synonyms: if req.include_synonyms && version >= 1 {
                        c.synonyms
                            .into_iter()
                            .map(|(name, value, source)| DescribeConfigsSynonym {
                                name: name.to_owned(),
                                value: Some(value),
                                source: source.id(),
                                ..Default::default()
                            })
                            .collect()
                    } else {
                        Vec::new()
                    },
                    config_type: if version >= 3 { c.config_type.id() } else { 0 },
                    ..Default::default()
                })
                .collect();
            out
        })
        .collect();
    DescribeConfigsResponse {
        results,
        ..Default::default()
    }
}
