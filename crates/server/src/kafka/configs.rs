//! AlterConfigs and IncrementalAlterConfigs: changing a topic's config overrides through the
//! replicated metadata (see [`crate::topic_config`] for what each config does).
//!
//! What Kafka does and vdl does alike: resources are answered one by one in request order; a
//! topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION; an unknown name or a bad value gets
//! INVALID_CONFIG with Kafka's message (naming the key); `validate_only` checks without changing
//! anything; AlterConfigs replaces every override of the topic with the given set (so names left
//! out go back to their defaults) while IncrementalAlterConfigs applies SET / DELETE / APPEND /
//! SUBTRACT per name (APPEND and SUBTRACT only on list configs, `cleanup.policy` here). A
//! resource named twice in one request gets INVALID_REQUEST, as in Kafka.
//!
//! Where vdl differs: broker configs are static (the node's configuration file), so altering a
//! BROKER resource gets INVALID_REQUEST naming that, where Kafka would change its dynamic
//! broker configs; resource types other than TOPIC and BROKER get INVALID_REQUEST too.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::alter_configs_request::AlterConfigsRequest;
use kafka_proto::messages::alter_configs_response::{
    AlterConfigsResourceResponse, AlterConfigsResponse,
};
use kafka_proto::messages::incremental_alter_configs_request::IncrementalAlterConfigsRequest;
use kafka_proto::messages::incremental_alter_configs_response::{
    AlterConfigsResourceResponse as IncrementalResourceResponse, IncrementalAlterConfigsResponse,
};

use crate::kafka::access::Access;
use crate::kafka::cluster::{BROKER, TOPIC};
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::host::ConfigsHost;
use crate::kafka::reply::{self, Reply};
use crate::security::acl::AclOperation;
use crate::topic_config::{self, ConfigError};

/// How long an alter waits for the metadata commit (the requests carry no timeout).
const ALTER_TIMEOUT: Duration = Duration::from_secs(30);

/// IncrementalAlterConfigs operations (Kafka's `AlterConfigOp.OpType` ids).
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// A resource's outcome: `Ok`, or Kafka's error code and message.
type Outcome = Result<(), (ErrorCode, String)>;

/// One change to a topic's overrides, as both APIs ask it.
struct TopicChange {
    /// Overrides to set (validated values).
    set: BTreeMap<String, String>,
    /// Overrides to remove.
    remove: Vec<String>,
    /// Replace every override (AlterConfigs).
    replace_all: bool,
}

fn invalid_config(e: ConfigError) -> (ErrorCode, String) {
    (ErrorCode::InvalidConfig, e.to_string())
}

/// Checks that a resource names an existing topic (or says why it cannot be altered); returns
/// its replication factor.
fn alterable_topic<H: ConfigsHost>(
    node: &H,
    resource_type: i8,
    name: &str,
) -> Result<usize, (ErrorCode, String)> {
    match resource_type {
        TOPIC => {}
        BROKER => {
            return Err((
                ErrorCode::InvalidRequest,
                "broker configs are static in vdl: set them in the node's configuration file"
                    .into(),
            ))
        }
        other => {
            return Err((
                ErrorCode::InvalidRequest,
                format!("configs of resource type {other} cannot be altered"),
            ))
        }
    }
    let meta = node.metadata();
    let topic = meta.topics.get(name).ok_or_else(|| {
        (
            ErrorCode::UnknownTopicOrPartition,
            format!("The topic '{name}' does not exist."),
        )
    })?;
    Ok(topic.replicas.first().map_or(1, Vec::len))
}

/// Validates `change` against topic `name`'s `current` overrides and, unless
/// `validate_only`, proposes it.
async fn apply<H: ConfigsHost>(
    node: &H,
    name: &str,
    replicas: usize,
    current: BTreeMap<String, String>,
    change: TopicChange,
    validate_only: bool,
) -> Outcome {
    let mut result = if change.replace_all {
        BTreeMap::new()
    } else {
        current
    };
    for key in &change.remove {
        result.remove(key);
    }
    result.extend(change.set.clone());
    topic_config::validate_all(&result, replicas).map_err(invalid_config)?;
    if validate_only {
        return Ok(());
    }
    let failed = |e: crate::replication::group::AppendError| {
        (
            append_error_code(&e, Proposal::MetadataChange),
            e.to_string(),
        )
    };
    let command = crate::metadata::MetaCommand::AlterTopicConfigs {
        name: name.to_owned(),
        incarnation: node.current_incarnation(name).map_err(failed)?,
        set: change.set,
        remove: change.remove,
        replace_all: change.replace_all,
    };
    node.metadata_proposer()
        .propose(&command, ALTER_TIMEOUT)
        .await
        .map(|_| ())
        .map_err(failed)
}

/// Alters one resource of a request whose resources are `all` (type, name): refuses a resource
/// named twice and anything but an existing topic, then asks `change` for the change given the
/// topic's current overrides, validates the result and (unless `validate_only`) proposes it.
/// Authorization first, as in Kafka: ALTER_CONFIGS on the topic (else
/// TOPIC_AUTHORIZATION_FAILED) or, for a broker, on the cluster (else
/// CLUSTER_AUTHORIZATION_FAILED).
async fn alter_resource<H: ConfigsHost>(
    node: &H,
    access: &Access,
    all: &[(i8, &str)],
    (resource_type, name): (i8, &str),
    validate_only: bool,
    change: impl FnOnce(&BTreeMap<String, String>) -> Result<TopicChange, (ErrorCode, String)>,
) -> Outcome {
    let refused = match resource_type {
        TOPIC if !access.topic(AclOperation::AlterConfigs, name) => {
            Some(ErrorCode::TopicAuthorizationFailed)
        }
        BROKER if !access.cluster(AclOperation::AlterConfigs) => {
            Some(ErrorCode::ClusterAuthorizationFailed)
        }
        _ => None,
    };
    if let Some(code) = refused {
        return Err((code, "Authorization failed.".into()));
    }
    if all.iter().filter(|r| **r == (resource_type, name)).count() > 1 {
        return Err(duplicate_error());
    }
    let replicas = alterable_topic(node, resource_type, name)?;
    let current = node
        .metadata()
        .topics
        .get(name)
        .map(|t| t.configs.clone())
        .unwrap_or_default();
    let change = change(&current)?;
    apply(node, name, replicas, current, change, validate_only).await
}

/// The error code and message fields of a resource's answer.
fn outcome_fields(outcome: Outcome) -> (i16, Option<String>) {
    match outcome {
        Ok(()) => (0, None),
        Err((code, message)) => (code.code(), Some(message)),
    }
}

fn duplicate_error() -> (ErrorCode, String) {
    (
        ErrorCode::InvalidRequest,
        "Error due to duplicate config keys or resources in the request".into(),
    )
}

/// The change an AlterConfigs resource asks: exactly `configs` (name, value) as the topic's
/// overrides.
fn replacement(configs: &[(String, Option<String>)]) -> Result<TopicChange, (ErrorCode, String)> {
    let mut set = BTreeMap::new();
    for (name, value) in configs {
        let v = topic_config::validate(name, value.as_deref()).map_err(invalid_config)?;
        if set.insert(name.clone(), v).is_some() {
            return Err(duplicate_error());
        }
    }
    Ok(TopicChange {
        set,
        remove: Vec::new(),
        replace_all: true,
    })
}

/// Handles AlterConfigs (API 33): each topic's overrides become exactly the given set.
pub fn alter_configs<H: ConfigsHost>(
    node: &Arc<H>,
    access: &Access,
    req: AlterConfigsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let all: Vec<(i8, &str)> = req
            .resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str()))
            .collect();
        let mut responses = Vec::with_capacity(req.resources.len());
        for r in &req.resources {
            let configs: Vec<(String, Option<String>)> = r
                .configs
                .iter()
                .map(|c| (c.name.clone(), c.value.clone()))
                .collect();
            let this = (r.resource_type, r.resource_name.as_str());
            let outcome = alter_resource(
                node.as_ref(),
                &access,
                &all,
                this,
                req.validate_only,
                |_| replacement(&configs),
            )
            .await;
            let (error_code, error_message) = outcome_fields(outcome);
            responses.push(AlterConfigsResourceResponse {
                error_code,
                error_message,
                resource_type: r.resource_type,
                resource_name: r.resource_name.clone(),
                ..Default::default()
            });
        }
        Response::AlterConfigs(AlterConfigsResponse {
            responses,
            ..Default::default()
        })
    })
}

/// The change one IncrementalAlterConfigs resource asks of a topic whose overrides are
/// `current`.
fn incremental_change(
    current: &BTreeMap<String, String>,
    ops: &[(String, i8, Option<String>)],
) -> Result<TopicChange, (ErrorCode, String)> {
    let mut change = TopicChange {
        set: BTreeMap::new(),
        remove: Vec::new(),
        replace_all: false,
    };
    let mut seen = std::collections::HashSet::new();
    for (name, op, value) in ops {
        if !seen.insert(name.as_str()) {
            return Err(duplicate_error());
        }
        match *op {
            OP_SET => {
                let v = topic_config::validate(name, value.as_deref()).map_err(invalid_config)?;
                change.set.insert(name.clone(), v);
            }
            // Deleting an override that is not there is no error (Kafka's behaviour too).
            OP_DELETE => change.remove.push(name.clone()),
            OP_APPEND | OP_SUBTRACT => {
                if name != "cleanup.policy" {
                    // Checks the name first: an unknown one gets its own message.
                    topic_config::validate(name, Some("")).or_else(|e| match e {
                        ConfigError::InvalidValue { .. } => Ok(String::new()),
                        other => Err(invalid_config(other)),
                    })?;
                    let verb = if *op == OP_APPEND {
                        "append"
                    } else {
                        "subtract"
                    };
                    return Err((
                        ErrorCode::InvalidConfig,
                        format!("Config value {verb} is not allowed for config key: {name}"),
                    ));
                }
                let mut items: Vec<String> = current
                    .get(name)
                    .map_or("delete", String::as_str)
                    .split(',')
                    .map(str::to_owned)
                    .collect();
                let given: Vec<String> = value
                    .as_deref()
                    .unwrap_or_default()
                    .split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect();
                if *op == OP_APPEND {
                    for g in given {
                        if !items.contains(&g) {
                            items.push(g);
                        }
                    }
                } else {
                    items.retain(|i| !given.contains(i));
                }
                let joined = items.join(",");
                let v = topic_config::validate(name, Some(&joined)).map_err(invalid_config)?;
                change.set.insert(name.clone(), v);
            }
            other => {
                return Err((
                    ErrorCode::InvalidRequest,
                    format!("unknown config operation {other} for {name}"),
                ))
            }
        }
    }
    Ok(change)
}

/// Handles IncrementalAlterConfigs (API 44): SET / DELETE / APPEND / SUBTRACT per topic config.
pub fn incremental_alter_configs<H: ConfigsHost>(
    node: &Arc<H>,
    access: &Access,
    req: IncrementalAlterConfigsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let all: Vec<(i8, &str)> = req
            .resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str()))
            .collect();
        let mut responses = Vec::with_capacity(req.resources.len());
        for r in &req.resources {
            let ops: Vec<(String, i8, Option<String>)> = r
                .configs
                .iter()
                .map(|c| (c.name.clone(), c.config_operation, c.value.clone()))
                .collect();
            let this = (r.resource_type, r.resource_name.as_str());
            let outcome = alter_resource(
                node.as_ref(),
                &access,
                &all,
                this,
                req.validate_only,
                |current| incremental_change(current, &ops),
            )
            .await;
            let (error_code, error_message) = outcome_fields(outcome);
            responses.push(IncrementalResourceResponse {
                error_code,
                error_message,
                resource_type: r.resource_type,
                resource_name: r.resource_name.clone(),
                ..Default::default()
            });
        }
        Response::IncrementalAlterConfigs(IncrementalAlterConfigsResponse {
            responses,
            ..Default::default()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, op: i8, value: Option<&str>) -> (String, i8, Option<String>) {
        (name.to_owned(), op, value.map(str::to_owned))
    }

    #[test]
    fn incremental_operations_as_kafka_applies_them() {
        let current = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
        let c = incremental_change(
            &current,
            &[
                op("retention.ms", OP_DELETE, None),
                op("segment.bytes", OP_SET, Some("2097152")),
            ],
        )
        .ok()
        .unwrap();
        assert_eq!(c.remove, ["retention.ms"]);
        assert_eq!(c.set["segment.bytes"], "2097152");
        // APPEND on a list config; on other configs it is refused naming the key.
        let c = incremental_change(&current, &[op("cleanup.policy", OP_APPEND, Some("delete"))])
            .ok()
            .unwrap();
        assert_eq!(c.set["cleanup.policy"], "delete");
        let (code, message) =
            incremental_change(&current, &[op("retention.ms", OP_APPEND, Some("1"))])
                .err()
                .unwrap();
        assert_eq!(code, ErrorCode::InvalidConfig);
        assert!(message.contains("retention.ms"), "{message}");
        // Appending compact to the default policy makes the topic compacted and deleted.
        let c = incremental_change(
            &current,
            &[op("cleanup.policy", OP_APPEND, Some("compact"))],
        )
        .ok()
        .unwrap();
        assert_eq!(c.set["cleanup.policy"], "delete,compact");
        let (code, _) =
            incremental_change(&current, &[op("cleanup.policy", OP_APPEND, Some("shred"))])
                .err()
                .unwrap();
        assert_eq!(code, ErrorCode::InvalidConfig);
        // Unknown names and bad values.
        let (code, message) = incremental_change(&current, &[op("no.such", OP_SET, Some("1"))])
            .err()
            .unwrap();
        assert_eq!(code, ErrorCode::InvalidConfig);
        assert_eq!(message, "Unknown topic config name: no.such");
        let (code, _) = incremental_change(
            &current,
            &[
                op("retention.ms", OP_SET, Some("1")),
                op("retention.ms", OP_DELETE, None),
            ],
        )
        .err()
        .unwrap();
        assert_eq!(code, ErrorCode::InvalidRequest);
    }
}
