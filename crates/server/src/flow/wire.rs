//! How flow limits and client quotas are stored in the metadata log and its snapshots
//! (protobuf messages of [`crate::metadata::codec`]: commands 27 and 28, snapshot fields 21 and
//! 22; the schema is in that module's documentation).

use std::collections::BTreeMap;

use crate::flow::settings::{
    EntityName, FlowLimits, QuotaAlteration, QuotaEntity, QuotaKind, QuotaValues,
};

/// `SetFlowLimits` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SetFlowLimitsWire {
    /// The new limits.
    #[prost(message, optional, tag = "1")]
    pub limits: Option<FlowLimitsWire>,
}

/// `FlowLimits` on the wire (absent: unlimited).
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct FlowLimitsWire {
    /// Produce requests per second.
    #[prost(uint64, optional, tag = "1")]
    pub produce_requests_per_sec: Option<u64>,
    /// Produced bytes per second.
    #[prost(uint64, optional, tag = "2")]
    pub produce_bytes_per_sec: Option<u64>,
    /// Catch-up fetch requests per second.
    #[prost(uint64, optional, tag = "3")]
    pub catchup_read_requests_per_sec: Option<u64>,
    /// Catch-up fetched bytes per second.
    #[prost(uint64, optional, tag = "4")]
    pub catchup_read_bytes_per_sec: Option<u64>,
    /// Tail fetch requests per second.
    #[prost(uint64, optional, tag = "5")]
    pub tail_read_requests_per_sec: Option<u64>,
    /// Tail fetched bytes per second.
    #[prost(uint64, optional, tag = "6")]
    pub tail_read_bytes_per_sec: Option<u64>,
    /// Catch-up replication bytes per second.
    #[prost(uint64, optional, tag = "7")]
    pub catchup_replication_bytes_per_sec: Option<u64>,
}

impl From<&FlowLimits> for FlowLimitsWire {
    fn from(l: &FlowLimits) -> Self {
        FlowLimitsWire {
            produce_requests_per_sec: l.produce_requests_per_sec,
            produce_bytes_per_sec: l.produce_bytes_per_sec,
            catchup_read_requests_per_sec: l.catchup_read_requests_per_sec,
            catchup_read_bytes_per_sec: l.catchup_read_bytes_per_sec,
            tail_read_requests_per_sec: l.tail_read_requests_per_sec,
            tail_read_bytes_per_sec: l.tail_read_bytes_per_sec,
            catchup_replication_bytes_per_sec: l.catchup_replication_bytes_per_sec,
        }
    }
}

impl From<FlowLimitsWire> for FlowLimits {
    fn from(w: FlowLimitsWire) -> Self {
        let mut l = FlowLimits::default();
        // Through `set`, so a 0 from any writer means unlimited here too.
        l.set("produce_requests_per_sec", w.produce_requests_per_sec);
        l.set("produce_bytes_per_sec", w.produce_bytes_per_sec);
        l.set(
            "catchup_read_requests_per_sec",
            w.catchup_read_requests_per_sec,
        );
        l.set("catchup_read_bytes_per_sec", w.catchup_read_bytes_per_sec);
        l.set("tail_read_requests_per_sec", w.tail_read_requests_per_sec);
        l.set("tail_read_bytes_per_sec", w.tail_read_bytes_per_sec);
        l.set(
            "catchup_replication_bytes_per_sec",
            w.catchup_replication_bytes_per_sec,
        );
        l
    }
}

/// `AlterClientQuotas` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterClientQuotasWire {
    /// The alterations.
    #[prost(message, repeated, tag = "1")]
    pub alterations: Vec<QuotaAlterationWire>,
}

/// One entity's quota change on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct QuotaAlterationWire {
    /// The entity.
    #[prost(message, optional, tag = "1")]
    pub entity: Option<QuotaEntityWire>,
    /// Quotas set.
    #[prost(message, repeated, tag = "2")]
    pub set: Vec<QuotaValueWire>,
    /// Quota keys removed.
    #[prost(string, repeated, tag = "3")]
    pub remove: Vec<String>,
}

/// A quota entity on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct QuotaEntityWire {
    /// The user side, if any.
    #[prost(message, optional, tag = "1")]
    pub user: Option<EntityNameWire>,
    /// The client id side, if any.
    #[prost(message, optional, tag = "2")]
    pub client_id: Option<EntityNameWire>,
}

/// One side of a quota entity on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EntityNameWire {
    /// The default for the entity type (then `name` is empty).
    #[prost(bool, tag = "1")]
    pub is_default: bool,
    /// The name.
    #[prost(string, tag = "2")]
    pub name: String,
}

/// One quota value on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct QuotaValueWire {
    /// Kafka's key (`producer_byte_rate`, ...).
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value.
    #[prost(double, tag = "2")]
    pub value: f64,
}

/// One entity's quotas in a snapshot.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClientQuotaWire {
    /// The entity.
    #[prost(message, optional, tag = "1")]
    pub entity: Option<QuotaEntityWire>,
    /// Its quotas.
    #[prost(message, repeated, tag = "2")]
    pub values: Vec<QuotaValueWire>,
}

fn entity_name_to_wire(n: &EntityName) -> EntityNameWire {
    match n {
        EntityName::Default => EntityNameWire {
            is_default: true,
            name: String::new(),
        },
        EntityName::Named(s) => EntityNameWire {
            is_default: false,
            name: s.clone(),
        },
    }
}

fn entity_name_from_wire(w: EntityNameWire) -> EntityName {
    if w.is_default {
        EntityName::Default
    } else {
        EntityName::Named(w.name)
    }
}

impl From<&QuotaEntity> for QuotaEntityWire {
    fn from(e: &QuotaEntity) -> Self {
        QuotaEntityWire {
            user: e.user.as_ref().map(entity_name_to_wire),
            client_id: e.client_id.as_ref().map(entity_name_to_wire),
        }
    }
}

impl From<QuotaEntityWire> for QuotaEntity {
    fn from(w: QuotaEntityWire) -> Self {
        QuotaEntity {
            user: w.user.map(entity_name_from_wire),
            client_id: w.client_id.map(entity_name_from_wire),
        }
    }
}

impl From<&QuotaAlteration> for QuotaAlterationWire {
    fn from(a: &QuotaAlteration) -> Self {
        QuotaAlterationWire {
            entity: Some(QuotaEntityWire::from(&a.entity)),
            set: a
                .set
                .iter()
                .map(|(key, value)| QuotaValueWire {
                    key: key.clone(),
                    value: *value,
                })
                .collect(),
            remove: a.remove.clone(),
        }
    }
}

impl From<QuotaAlterationWire> for QuotaAlteration {
    fn from(w: QuotaAlterationWire) -> Self {
        QuotaAlteration {
            entity: QuotaEntity::from(w.entity.unwrap_or_default()),
            set: w.set.into_iter().map(|v| (v.key, v.value)).collect(),
            remove: w.remove,
        }
    }
}

/// Client quotas for a snapshot, in entity order.
pub fn client_quotas_to_wire(quotas: &BTreeMap<QuotaEntity, QuotaValues>) -> Vec<ClientQuotaWire> {
    quotas
        .iter()
        .map(|(entity, values)| ClientQuotaWire {
            entity: Some(QuotaEntityWire::from(entity)),
            values: values
                .iter()
                .map(|(kind, value)| QuotaValueWire {
                    key: kind.key().to_string(),
                    value: *value,
                })
                .collect(),
        })
        .collect()
}

/// Client quotas from a snapshot (keys this version does not know are dropped).
pub fn client_quotas_from_wire(quotas: Vec<ClientQuotaWire>) -> BTreeMap<QuotaEntity, QuotaValues> {
    let mut out = BTreeMap::new();
    for q in quotas {
        let values: QuotaValues = q
            .values
            .into_iter()
            .filter_map(|v| QuotaKind::from_key(&v.key).map(|k| (k, v.value)))
            .collect();
        if !values.is_empty() {
            out.insert(QuotaEntity::from(q.entity.unwrap_or_default()), values);
        }
    }
    out
}
