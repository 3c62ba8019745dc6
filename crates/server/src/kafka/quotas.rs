//! DescribeClientQuotas and AlterClientQuotas: Kafka's client quotas (`producer_byte_rate`,
//! `consumer_byte_rate`, `request_percentage` per user, client id, or both, with defaults),
//! kept in the replicated metadata and enforced by every node ([`crate::flow`]).
//!
//! As Kafka: entries are answered one by one, each with its own error (INVALID_REQUEST and
//! Kafka's message for an unknown entity type, a repeated type, an unknown key or a value that
//! is not positive); `validate_only` checks without changing anything; a describe filter
//! matches an entity type exactly (a name), its default, or any name (`SPECIFIED`), and a strict
//! filter leaves out entities with types it does not name. Where vdl differs: `ip` entities
//! (connection-creation-rate quotas) and `controller_mutation_rate` are refused with a message
//! saying vdl does not enforce them, where Kafka stores and enforces them.
//!
//! Authorization as Kafka's: describing needs DESCRIBE_CONFIGS on the cluster (else the
//! response carries CLUSTER_AUTHORIZATION_FAILED), altering ALTER_CONFIGS on the cluster (else
//! every entry does).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::alter_client_quotas_request::AlterClientQuotasRequest;
use kafka_proto::messages::alter_client_quotas_response::{
    AlterClientQuotasResponse, EntityData as AlterEntityData, EntryData as AlterEntryData,
};
use kafka_proto::messages::describe_client_quotas_request::DescribeClientQuotasRequest;
use kafka_proto::messages::describe_client_quotas_response::{
    DescribeClientQuotasResponse, EntityData, EntryData, ValueData,
};

use crate::flow::settings::{
    check_quota_value, entity_from_parts, EntityName, FlowSettings, QuotaAlteration, QuotaEntity,
    ENTITY_CLIENT_ID, ENTITY_USER,
};
use crate::kafka::access::Access;
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::host::QuotasHost;
use crate::kafka::reply::{self, Reply};
use crate::metadata::MetaCommand;
use crate::security::acl::AclOperation;

/// How long an alteration waits for the metadata commit (the request carries no timeout).
const ALTER_TIMEOUT: Duration = Duration::from_secs(30);

/// Describe filter match types (Kafka's `ClientQuotaFilterComponent`).
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

/// One component of a describe filter, checked.
struct Component {
    entity_type: String,
    /// `None`: any name of that type; `Some(name)`: exactly it (the default when `Default`).
    name: Option<EntityName>,
}

fn invalid(message: impl Into<String>) -> (ErrorCode, String) {
    (ErrorCode::InvalidRequest, message.into())
}

fn components(req: &DescribeClientQuotasRequest) -> Result<Vec<Component>, (ErrorCode, String)> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(req.components.len());
    for c in &req.components {
        if c.entity_type != ENTITY_USER && c.entity_type != ENTITY_CLIENT_ID {
            return Err(invalid(format!(
                "Custom entity type '{}' not supported",
                c.entity_type
            )));
        }
        if !seen.insert(c.entity_type.clone()) {
            return Err(invalid(format!(
                "Duplicate entity type in filter: {}",
                c.entity_type
            )));
        }
        let name = match c.match_type {
            MATCH_EXACT => match &c.r#match {
                Some(n) => Some(EntityName::Named(n.clone())),
                None => return Err(invalid("Exact match requires a name")),
            },
            MATCH_DEFAULT => Some(EntityName::Default),
            MATCH_SPECIFIED => None,
            other => return Err(invalid(format!("Unknown match type {other}"))),
        };
        out.push(Component {
            entity_type: c.entity_type.clone(),
            name,
        });
    }
    Ok(out)
}

fn side<'a>(entity: &'a QuotaEntity, entity_type: &str) -> Option<&'a EntityName> {
    match entity_type {
        ENTITY_USER => entity.user.as_ref(),
        _ => entity.client_id.as_ref(),
    }
}

fn matches(entity: &QuotaEntity, filter: &[Component], strict: bool) -> bool {
    let all = filter
        .iter()
        .all(|c| match (side(entity, &c.entity_type), &c.name) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(have), Some(want)) => have == want,
        });
    if !all {
        return false;
    }
    if strict {
        let types = usize::from(entity.user.is_some()) + usize::from(entity.client_id.is_some());
        return types == filter.len();
    }
    true
}

/// The entries of `settings` a describe filter selects, in entity order.
fn describe(settings: &FlowSettings, filter: &[Component], strict: bool) -> Vec<EntryData> {
    settings
        .client_quotas
        .iter()
        .filter(|(entity, _)| matches(entity, filter, strict))
        .map(|(entity, values)| EntryData {
            entity: entity_to_wire(entity)
                .into_iter()
                .map(|(entity_type, entity_name)| EntityData {
                    entity_type,
                    entity_name,
                    ..Default::default()
                })
                .collect(),
            values: values
                .iter()
                .map(|(kind, value)| ValueData {
                    key: kind.key().to_string(),
                    value: *value,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect()
}

/// An entity as Kafka's (type, name) pairs, user first.
fn entity_to_wire(entity: &QuotaEntity) -> Vec<(String, Option<String>)> {
    let mut out = Vec::with_capacity(2);
    if let Some(u) = &entity.user {
        out.push((ENTITY_USER.to_string(), u.as_wire().map(str::to_string)));
    }
    if let Some(c) = &entity.client_id {
        out.push((
            ENTITY_CLIENT_ID.to_string(),
            c.as_wire().map(str::to_string),
        ));
    }
    out
}

/// Handles DescribeClientQuotas (API 48).
pub fn describe_client_quotas<H: QuotasHost>(
    node: &H,
    access: &Access,
    req: DescribeClientQuotasRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let mut response = DescribeClientQuotasResponse::default();
    let checked = if access.cluster(AclOperation::DescribeConfigs) {
        components(&req)
    } else {
        Err((
            ErrorCode::ClusterAuthorizationFailed,
            "Cluster authorization failed.".to_string(),
        ))
    };
    match checked {
        Ok(filter) => {
            response.entries = Some(describe(&node.flow_settings(), &filter, req.strict));
        }
        Err((code, message)) => {
            response.error_code = code.code();
            response.error_message = Some(message);
            response.entries = None;
        }
    }
    reply::now(
        correlation_id,
        version,
        Response::DescribeClientQuotas(response),
    )
}

/// Checks one AlterClientQuotas entry, giving the alteration it asks for.
fn alteration(
    entry: &kafka_proto::messages::alter_client_quotas_request::EntryData,
) -> Result<QuotaAlteration, (ErrorCode, String)> {
    let entity = entity_from_parts(
        entry
            .entity
            .iter()
            .map(|e| (e.entity_type.as_str(), e.entity_name.as_deref())),
    )
    .map_err(|e| invalid(e.to_string()))?;
    let mut keys = HashSet::new();
    let mut alteration = QuotaAlteration {
        entity,
        set: Vec::new(),
        remove: Vec::new(),
    };
    for op in &entry.ops {
        if !keys.insert(op.key.as_str()) {
            return Err(invalid(format!(
                "Duplicate quota key {} in request",
                op.key
            )));
        }
        if op.remove {
            crate::flow::settings::QuotaKind::from_key(&op.key)
                .ok_or_else(|| invalid(format!("Invalid configuration key {}", op.key)))?;
            alteration.remove.push(op.key.clone());
        } else {
            check_quota_value(&op.key, op.value).map_err(|e| invalid(e.to_string()))?;
            alteration.set.push((op.key.clone(), op.value));
        }
    }
    Ok(alteration)
}

/// Handles AlterClientQuotas (API 49): the valid entries are committed as one metadata
/// command; each entry is answered with its own outcome.
pub fn alter_client_quotas<H: QuotasHost>(
    node: &Arc<H>,
    access: &Access,
    req: AlterClientQuotasRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    let allowed = access.cluster(AclOperation::AlterConfigs);
    reply::later(correlation_id, version, async move {
        let mut outcomes: Vec<Result<(), (ErrorCode, String)>> = Vec::new();
        let mut valid = Vec::new();
        for entry in &req.entries {
            let checked = if allowed {
                alteration(entry)
            } else {
                Err((
                    ErrorCode::ClusterAuthorizationFailed,
                    "Cluster authorization failed.".to_string(),
                ))
            };
            match checked {
                Ok(a) => {
                    valid.push(a);
                    outcomes.push(Ok(()));
                }
                Err(e) => outcomes.push(Err(e)),
            }
        }
        if !req.validate_only && !valid.is_empty() {
            let command = MetaCommand::AlterClientQuotas { alterations: valid };
            if let Err(e) = node
                .metadata_proposer()
                .propose(&command, ALTER_TIMEOUT)
                .await
            {
                let code = append_error_code(&e, Proposal::MetadataChange);
                for o in outcomes.iter_mut().filter(|o| o.is_ok()) {
                    *o = Err((code, e.to_string()));
                }
            }
        }
        let entries = req
            .entries
            .iter()
            .zip(outcomes)
            .map(|(entry, outcome)| {
                let (error_code, error_message) = match outcome {
                    Ok(()) => (0, None),
                    Err((code, message)) => (code.code(), Some(message)),
                };
                AlterEntryData {
                    error_code,
                    error_message,
                    entity: entry
                        .entity
                        .iter()
                        .map(|e| AlterEntityData {
                            entity_type: e.entity_type.clone(),
                            entity_name: e.entity_name.clone(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }
            })
            .collect();
        Response::AlterClientQuotas(AlterClientQuotasResponse {
            entries,
            ..Default::default()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> FlowSettings {
        let mut s = FlowSettings::default();
        for (user, client) in [
            (Some(EntityName::Named("alice".into())), None),
            (
                Some(EntityName::Named("alice".into())),
                Some(EntityName::Default),
            ),
            (None, Some(EntityName::Named("app".into()))),
            (Some(EntityName::Default), None),
        ] {
            s.alter(&QuotaAlteration {
                entity: QuotaEntity {
                    user,
                    client_id: client,
                },
                set: vec![("producer_byte_rate".into(), 100.0)],
                remove: vec![],
            });
        }
        s
    }

    fn filter(parts: &[(&str, i8, Option<&str>)]) -> Vec<Component> {
        let req = DescribeClientQuotasRequest {
            components: parts
                .iter()
                .map(|(t, m, n)| {
                    kafka_proto::messages::describe_client_quotas_request::ComponentData {
                        entity_type: t.to_string(),
                        match_type: *m,
                        r#match: n.map(str::to_string),
                        ..Default::default()
                    }
                })
                .collect(),
            ..Default::default()
        };
        components(&req).unwrap()
    }

    #[test]
    fn describe_filters_as_kafka() {
        let s = settings();
        // No component, not strict: everything.
        assert_eq!(describe(&s, &[], false).len(), 4);
        // Any user, not strict: the three entities with a user side.
        assert_eq!(
            describe(&s, &filter(&[("user", MATCH_SPECIFIED, None)]), false).len(),
            3
        );
        // Any user, strict: only the user-only entities.
        assert_eq!(
            describe(&s, &filter(&[("user", MATCH_SPECIFIED, None)]), true).len(),
            2
        );
        // Exactly alice, not strict: alice and alice/<default>.
        assert_eq!(
            describe(&s, &filter(&[("user", MATCH_EXACT, Some("alice"))]), false).len(),
            2
        );
        // The default user.
        assert_eq!(
            describe(&s, &filter(&[("user", MATCH_DEFAULT, None)]), false).len(),
            1
        );
        // Default client id under alice.
        let f = filter(&[
            ("user", MATCH_EXACT, Some("alice")),
            ("client-id", MATCH_DEFAULT, None),
        ]);
        let got = describe(&s, &f, true);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].entity[1].entity_name, None);
    }

    #[test]
    fn bad_filters_are_refused() {
        let req = |t: &str, m: i8| DescribeClientQuotasRequest {
            components: vec![
                kafka_proto::messages::describe_client_quotas_request::ComponentData {
                    entity_type: t.into(),
                    match_type: m,
                    r#match: None,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert!(components(&req("group", MATCH_SPECIFIED)).is_err());
        assert!(components(&req("user", 7)).is_err());
        assert!(components(&req("user", MATCH_EXACT)).is_err());
    }
}
