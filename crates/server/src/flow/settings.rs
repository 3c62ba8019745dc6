//! What flow control enforces: the node-wide limits (VDL's six knobs) and Kafka's client
//! quotas, as kept in the replicated metadata.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use vdl_admin_api::rates::Rates;

/// The node-wide limits, the same on every node (each node enforces them on its own traffic):
/// requests and bytes per second for produce, catch-up reads (fetches that stop at their byte
/// limit with more committed data behind them) and tail reads (fetches that reach the high
/// watermark). `None`: unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowLimits {
    /// Produce requests per second.
    pub produce_requests_per_sec: Option<u64>,
    /// Produced record bytes per second.
    pub produce_bytes_per_sec: Option<u64>,
    /// Catch-up fetch requests per second.
    pub catchup_read_requests_per_sec: Option<u64>,
    /// Catch-up fetched bytes per second.
    pub catchup_read_bytes_per_sec: Option<u64>,
    /// Tail fetch requests per second.
    pub tail_read_requests_per_sec: Option<u64>,
    /// Tail fetched bytes per second.
    pub tail_read_bytes_per_sec: Option<u64>,
    /// Bytes per second of catch-up replication this node sends as a leader (appends of
    /// entries already committed: a follower catching up), see [`crate::flow::replication`].
    #[serde(default)]
    pub catchup_replication_bytes_per_sec: Option<u64>,
}

/// The seven limits' names (the admin API's and the configuration's), defined with the admin
/// API's types.
pub use vdl_admin_api::rates::FLOW_LIMIT_NAMES;

/// The limits as the admin API shows them (`GET /rates`), with zero throttling counters.
impl From<FlowLimits> for Rates {
    fn from(limits: FlowLimits) -> Rates {
        Rates {
            catchup_read_bytes_per_sec: limits.catchup_read_bytes_per_sec,
            catchup_read_requests_per_sec: limits.catchup_read_requests_per_sec,
            catchup_replication_bytes_per_sec: limits.catchup_replication_bytes_per_sec,
            produce_bytes_per_sec: limits.produce_bytes_per_sec,
            produce_requests_per_sec: limits.produce_requests_per_sec,
            tail_read_bytes_per_sec: limits.tail_read_bytes_per_sec,
            tail_read_requests_per_sec: limits.tail_read_requests_per_sec,
            throttle_time_ms_total: 0,
            throttled_requests: 0,
        }
    }
}

/// The limits of an admin API answer (its throttling counters are left out).
impl From<Rates> for FlowLimits {
    fn from(rates: Rates) -> FlowLimits {
        FlowLimits {
            produce_requests_per_sec: rates.produce_requests_per_sec,
            produce_bytes_per_sec: rates.produce_bytes_per_sec,
            catchup_read_requests_per_sec: rates.catchup_read_requests_per_sec,
            catchup_read_bytes_per_sec: rates.catchup_read_bytes_per_sec,
            tail_read_requests_per_sec: rates.tail_read_requests_per_sec,
            tail_read_bytes_per_sec: rates.tail_read_bytes_per_sec,
            catchup_replication_bytes_per_sec: rates.catchup_replication_bytes_per_sec,
        }
    }
}

impl FlowLimits {
    /// The limit named `name` (one of [`FLOW_LIMIT_NAMES`]); `None` for another name. Names
    /// map to limits in one place, the admin API's [`Rates::limit_mut`].
    pub fn get(&self, name: &str) -> Option<Option<u64>> {
        Rates::from(*self).limit(name)
    }

    /// Sets the limit named `name` (`None`: unlimited); false when no limit has that name.
    pub fn set(&mut self, name: &str, value: Option<u64>) -> bool {
        let mut rates = Rates::from(*self);
        let Some(slot) = rates.limit_mut(name) else {
            return false;
        };
        // 0 would stop all traffic for good: it means unlimited, as in the config files.
        *slot = value.filter(|v| *v > 0);
        *self = FlowLimits::from(rates);
        true
    }

    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        FLOW_LIMIT_NAMES
            .iter()
            .any(|n| self.get(n).flatten().is_some())
    }
}

/// One side of a quota entity: a specific name, or the default for that entity type (Kafka's
/// `<default>`, a null name on the wire).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntityName {
    /// The default for every name without a quota of its own.
    Default,
    /// This name.
    Named(String),
}

impl EntityName {
    /// The name as Kafka's wire carries it: `None` for the default.
    pub fn as_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }

    /// From the wire: a null name is the default.
    pub fn from_wire(name: Option<&str>) -> EntityName {
        match name {
            None => EntityName::Default,
            Some(n) => EntityName::Named(n.to_string()),
        }
    }
}

/// What a client quota applies to, as Kafka's: a user, a client id, or both; either side may be
/// the default.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity {
    /// The user (the principal's name), if the entity names one.
    pub user: Option<EntityName>,
    /// The client id, if the entity names one.
    pub client_id: Option<EntityName>,
}

impl fmt::Display for QuotaEntity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |n: &EntityName| match n {
            EntityName::Default => "<default>".to_string(),
            EntityName::Named(s) => s.clone(),
        };
        match (&self.user, &self.client_id) {
            (Some(u), Some(c)) => write!(f, "user {} client-id {}", show(u), show(c)),
            (Some(u), None) => write!(f, "user {}", show(u)),
            (None, Some(c)) => write!(f, "client-id {}", show(c)),
            (None, None) => write!(f, "(empty entity)"),
        }
    }
}

/// The quota kinds vdl enforces, by Kafka's config names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaKind {
    /// `producer_byte_rate`: produced bytes per second.
    ProducerByteRate,
    /// `consumer_byte_rate`: fetched bytes per second.
    ConsumerByteRate,
    /// `request_percentage`: percent of one request handler's time (100 = one whole handler).
    RequestPercentage,
}

impl QuotaKind {
    /// Every kind.
    pub const ALL: [QuotaKind; 3] = [
        QuotaKind::ProducerByteRate,
        QuotaKind::ConsumerByteRate,
        QuotaKind::RequestPercentage,
    ];

    /// Kafka's config key.
    pub fn key(self) -> &'static str {
        match self {
            QuotaKind::ProducerByteRate => "producer_byte_rate",
            QuotaKind::ConsumerByteRate => "consumer_byte_rate",
            QuotaKind::RequestPercentage => "request_percentage",
        }
    }

    /// The kind of a Kafka config key.
    pub fn from_key(key: &str) -> Option<QuotaKind> {
        QuotaKind::ALL.into_iter().find(|k| k.key() == key)
    }
}

/// Why a quota alteration is refused (answered with INVALID_REQUEST and this message, as
/// Kafka answers the same mistakes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// The entity has an unknown type, no type, or a type twice.
    #[error("{0}")]
    BadEntity(String),
    /// The key is not a quota vdl enforces.
    #[error("{0}")]
    BadKey(String),
    /// The value is not usable.
    #[error("{0}")]
    BadValue(String),
}

/// Kafka's entity type names.
pub const ENTITY_USER: &str = "user";
/// Kafka's entity type names.
pub const ENTITY_CLIENT_ID: &str = "client-id";
/// Kafka's entity type names (connection-rate quotas by IP; not enforced by vdl).
pub const ENTITY_IP: &str = "ip";

/// Builds an entity from the (type, name) pairs of a request, refusing what Kafka refuses
/// (unknown or repeated types, an empty entity) and `ip` entities, whose connection-creation
/// quotas vdl does not enforce (stored without effect would mislead).
pub fn entity_from_parts<'a>(
    parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<QuotaEntity, QuotaError> {
    let mut entity = QuotaEntity {
        user: None,
        client_id: None,
    };
    for (kind, name) in parts {
        let slot = match kind {
            ENTITY_USER => &mut entity.user,
            ENTITY_CLIENT_ID => &mut entity.client_id,
            ENTITY_IP => {
                return Err(QuotaError::BadEntity(
                    "vdl does not enforce ip (connection creation rate) quotas".into(),
                ))
            }
            other => {
                return Err(QuotaError::BadEntity(format!(
                    "Unhandled client quota entity type: {other}"
                )))
            }
        };
        if slot.is_some() {
            return Err(QuotaError::BadEntity(format!(
                "Duplicate {kind} entity type in request"
            )));
        }
        if name == Some("") {
            return Err(QuotaError::BadEntity(format!("Empty {kind} not supported")));
        }
        *slot = Some(EntityName::from_wire(name));
    }
    if entity.user.is_none() && entity.client_id.is_none() {
        return Err(QuotaError::BadEntity(
            "Invalid empty client quota entity".into(),
        ));
    }
    Ok(entity)
}

/// Checks one quota value for `key`: a key vdl enforces and a positive finite value (whole
/// bytes for the byte rates; a request percentage may be fractional and above 100, meaning
/// more than one handler's time, as in Kafka).
pub fn check_quota_value(key: &str, value: f64) -> Result<QuotaKind, QuotaError> {
    let Some(kind) = QuotaKind::from_key(key) else {
        let why = if key == "controller_mutation_rate" {
            "vdl does not enforce controller_mutation_rate quotas".to_string()
        } else {
            format!("Invalid configuration key {key}")
        };
        return Err(QuotaError::BadKey(why));
    };
    if !value.is_finite() || value <= 0.0 {
        return Err(QuotaError::BadValue(format!(
            "Quota {key} must be a positive number, got {value}"
        )));
    }
    if kind != QuotaKind::RequestPercentage && value.fract() != 0.0 {
        return Err(QuotaError::BadValue(format!(
            "Quota {key} must be a whole number of bytes per second, got {value}"
        )));
    }
    Ok(kind)
}

/// The quotas of one entity, by kind.
pub type QuotaValues = BTreeMap<QuotaKind, f64>;

/// Everything flow control enforces, as the replicated metadata holds it.
#[derive(Debug, Clone, Default)]
pub struct FlowSettings {
    /// The node-wide limits.
    pub limits: FlowLimits,
    /// Client quotas by entity (entities with no quota left are removed).
    pub client_quotas: BTreeMap<QuotaEntity, QuotaValues>,
}

impl PartialEq for FlowSettings {
    fn eq(&self, other: &Self) -> bool {
        // Quota values compare by bits: equal states give equal snapshots.
        self.limits == other.limits
            && self.client_quotas.len() == other.client_quotas.len()
            && self
                .client_quotas
                .iter()
                .zip(&other.client_quotas)
                .all(|((ea, va), (eb, vb))| {
                    ea == eb
                        && va.len() == vb.len()
                        && va
                            .iter()
                            .zip(vb)
                            .all(|((ka, xa), (kb, xb))| ka == kb && xa.to_bits() == xb.to_bits())
                })
    }
}

impl Eq for FlowSettings {}

/// Most client quota entities the metadata keeps: an alteration adding more is refused.
pub const MAX_QUOTA_ENTITIES: usize = 10_000;

/// A change to one entity's quotas: keys set, then keys removed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuotaAlteration {
    /// The entity.
    pub entity: QuotaEntity,
    /// (Kafka key, value) to set.
    pub set: Vec<(String, f64)>,
    /// Kafka keys to remove.
    pub remove: Vec<String>,
}

impl PartialEq for QuotaAlteration {
    fn eq(&self, other: &Self) -> bool {
        // Values compare by bits, so equality is an equivalence (commands are `Eq`).
        self.entity == other.entity
            && self.remove == other.remove
            && self.set.len() == other.set.len()
            && self
                .set
                .iter()
                .zip(&other.set)
                .all(|((ka, va), (kb, vb))| ka == kb && va.to_bits() == vb.to_bits())
    }
}

impl Eq for QuotaAlteration {}

impl FlowSettings {
    /// Whether nothing is limited (the request path then skips flow control entirely).
    pub fn is_unlimited(&self) -> bool {
        !self.limits.any() && self.client_quotas.is_empty()
    }

    /// Applies one alteration (already validated by the proposer; keys it does not know are
    /// skipped so every node applies the same thing). An entity left with no quota is removed;
    /// a new entity beyond [`MAX_QUOTA_ENTITIES`] is not added.
    pub fn alter(&mut self, alteration: &QuotaAlteration) {
        let exists = self.client_quotas.contains_key(&alteration.entity);
        if !exists && self.client_quotas.len() >= MAX_QUOTA_ENTITIES && !alteration.set.is_empty() {
            tracing::warn!(entity = %alteration.entity, "client quota not stored: too many quota entities");
            return;
        }
        let values = self
            .client_quotas
            .entry(alteration.entity.clone())
            .or_default();
        for (key, value) in &alteration.set {
            if let Some(kind) = QuotaKind::from_key(key) {
                values.insert(kind, *value);
            }
        }
        for key in &alteration.remove {
            if let Some(kind) = QuotaKind::from_key(key) {
                values.remove(&kind);
            }
        }
        if values.is_empty() {
            self.client_quotas.remove(&alteration.entity);
        }
    }

    /// The quota of `kind` that applies to a client (`user`, `client_id`), in Kafka's order of
    /// precedence, with the entity it is kept under: the matched entity with each default
    /// replaced by the client's own name, so clients matched by a default each get their own
    /// quota while clients matched by a named entity share it.
    pub fn resolve(
        &self,
        kind: QuotaKind,
        user: &str,
        client_id: &str,
    ) -> Option<(QuotaEntity, f64)> {
        use EntityName::{Default as D, Named as N};
        let u = || N(user.to_string());
        let c = || N(client_id.to_string());
        // Kafka's precedence, most specific first.
        let order: [(Option<EntityName>, Option<EntityName>); 8] = [
            (Some(u()), Some(c())),
            (Some(u()), Some(D)),
            (Some(u()), None),
            (Some(D), Some(c())),
            (Some(D), Some(D)),
            (Some(D), None),
            (None, Some(c())),
            (None, Some(D)),
        ];
        for (user_side, client_side) in order {
            let entity = QuotaEntity {
                user: user_side,
                client_id: client_side,
            };
            if let Some(value) = self.client_quotas.get(&entity).and_then(|v| v.get(&kind)) {
                let concrete = QuotaEntity {
                    user: entity.user.as_ref().map(|_| u()),
                    client_id: entity.client_id.as_ref().map(|_| c()),
                };
                return Some((concrete, *value));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(s: &str) -> Option<EntityName> {
        Some(EntityName::Named(s.into()))
    }

    fn set(
        settings: &mut FlowSettings,
        user: Option<EntityName>,
        client: Option<EntityName>,
        v: f64,
    ) {
        settings.alter(&QuotaAlteration {
            entity: QuotaEntity {
                user,
                client_id: client,
            },
            set: vec![("producer_byte_rate".into(), v)],
            remove: vec![],
        });
    }

    #[test]
    fn resolution_follows_kafkas_precedence() {
        let mut s = FlowSettings::default();
        let p = QuotaKind::ProducerByteRate;
        assert!(s.resolve(p, "alice", "app").is_none());
        set(&mut s, None, Some(EntityName::Default), 8.0);
        assert_eq!(s.resolve(p, "alice", "app").unwrap().1, 8.0);
        set(&mut s, None, named("app"), 7.0);
        assert_eq!(s.resolve(p, "alice", "app").unwrap().1, 7.0);
        set(&mut s, Some(EntityName::Default), None, 6.0);
        assert_eq!(s.resolve(p, "alice", "app").unwrap().1, 6.0);
        set(
            &mut s,
            Some(EntityName::Default),
            Some(EntityName::Default),
            5.0,
        );
        assert_eq!(s.resolve(p, "alice", "app").unwrap().1, 5.0);
        set(&mut s, Some(EntityName::Default), named("app"), 4.0);
        assert_eq!(s.resolve(p, "alice", "app").unwrap().1, 4.0);
        set(&mut s, named("alice"), None, 3.0);
        assert_eq!(s.resolve(p, "alice", "app").unwrap().1, 3.0);
        set(&mut s, named("alice"), Some(EntityName::Default), 2.0);
        assert_eq!(s.resolve(p, "alice", "app").unwrap().1, 2.0);
        set(&mut s, named("alice"), named("app"), 1.0);
        assert_eq!(s.resolve(p, "alice", "app").unwrap().1, 1.0);
        // Another user falls back to the user default with its client id.
        assert_eq!(s.resolve(p, "bob", "app").unwrap().1, 4.0);
        // Other kinds are resolved on their own.
        assert!(s
            .resolve(QuotaKind::ConsumerByteRate, "alice", "app")
            .is_none());
    }

    #[test]
    fn a_default_quota_is_kept_per_client_a_named_one_is_shared() {
        let mut s = FlowSettings::default();
        let p = QuotaKind::ProducerByteRate;
        set(&mut s, None, Some(EntityName::Default), 8.0);
        let (a, _) = s.resolve(p, "ANONYMOUS", "a").unwrap();
        let (b, _) = s.resolve(p, "ANONYMOUS", "b").unwrap();
        assert_ne!(a, b);
        set(&mut s, named("ANONYMOUS"), None, 9.0);
        let (a, _) = s.resolve(p, "ANONYMOUS", "a").unwrap();
        let (b, _) = s.resolve(p, "ANONYMOUS", "b").unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn removing_the_last_quota_removes_the_entity() {
        let mut s = FlowSettings::default();
        set(&mut s, named("u"), None, 1.0);
        assert!(!s.is_unlimited());
        s.alter(&QuotaAlteration {
            entity: QuotaEntity {
                user: named("u"),
                client_id: None,
            },
            set: vec![],
            remove: vec!["producer_byte_rate".into()],
        });
        assert!(s.is_unlimited());
    }

    #[test]
    fn entities_and_values_are_checked_as_kafka_checks_them() {
        assert!(entity_from_parts([("user", Some("a")), ("client-id", None)]).is_ok());
        assert!(entity_from_parts([]).is_err());
        assert!(entity_from_parts([("user", Some("a")), ("user", Some("b"))]).is_err());
        assert!(entity_from_parts([("group", Some("a"))]).is_err());
        assert!(entity_from_parts([("ip", Some("1.2.3.4"))]).is_err());
        assert!(entity_from_parts([("user", Some(""))]).is_err());
        assert!(check_quota_value("producer_byte_rate", 1024.0).is_ok());
        assert!(check_quota_value("producer_byte_rate", 0.0).is_err());
        assert!(check_quota_value("producer_byte_rate", 1.5).is_err());
        assert!(check_quota_value("request_percentage", 12.5).is_ok());
        assert!(check_quota_value("nonsense", 1.0).is_err());
    }

    #[test]
    fn flow_limits_by_name() {
        let mut l = FlowLimits::default();
        assert!(!l.any());
        for n in FLOW_LIMIT_NAMES {
            assert!(l.set(n, Some(5)));
            assert_eq!(l.get(n), Some(Some(5)));
        }
        assert!(l.set("produce_bytes_per_sec", Some(0)));
        assert_eq!(l.get("produce_bytes_per_sec"), Some(None));
        assert!(!l.set("nope", Some(1)));
    }
}
