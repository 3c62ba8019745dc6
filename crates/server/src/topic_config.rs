//! Topic configuration: the topic-level settings Kafka's tools read and change
//! (`kafka-configs.sh`, `kafka-topics.sh --config`, AdminClient's describe/alter configs).
//!
//! A topic's configuration is its *overrides*, a map from Kafka config name to value, kept in
//! the replicated metadata ([`crate::metadata::TopicMeta::configs`]): set at creation
//! (CreateTopics' configs) and changed by AlterConfigs / IncrementalAlterConfigs, so every node
//! holds the same overrides and they survive restarts. What a name not overridden means comes
//! from the node's configuration (the broker-level setting, reported as
//! `STATIC_BROKER_CONFIG`) or Kafka's default (`DEFAULT_CONFIG`).
//!
//! [`TopicSettings`] is the effective result every replica acts on: retention and segment size
//! on the partitions' stores, the record size limit, `min.insync.replicas` and the timestamp
//! type on the produce path.
//!
//! Names and values are validated as Kafka validates them, with Kafka's messages
//! (`Invalid value x for configuration retention.ms: Not a number of type LONG`, `Unknown topic
//! config name: x`), with two deliberate differences, both refused with INVALID_CONFIG and a
//! message that says why: an empty `cleanup.policy` (Kafka 3.9 accepts it and then neither
//! deletes nor compacts) and `segment.bytes` below 1 MiB (Kafka 3.9 allows 14 bytes, Kafka 4.0
//! raised the floor to 1 MiB, which is also the floor of the node-level
//! `storage.segment_bytes`). Names Kafka knows but vdl does not act on (`compression.type`,
//! `unclean.leader.election.enable`, ...) are refused rather than stored without effect.
//!
//! Log compaction (`cleanup.policy` with `compact`): `min.compaction.lag.ms`,
//! `max.compaction.lag.ms`, `min.cleanable.dirty.ratio`, `delete.retention.ms` are read by the
//! node's cleaner ([`crate::compaction::cleaner`]), `segment.ms` by every partition's group
//! (the active segment rolls once it is that old, so a quiet partition's data becomes
//! cleanable). As in Kafka, retention (`retention.ms`, `retention.bytes`) deletes segments only
//! when the policy includes `delete`.

use std::collections::BTreeMap;
use std::time::Duration;

use thiserror::Error;

use crate::config::NodeConfig;

/// Where a reported config value comes from (Kafka's `ConfigSource` ids, DescribeConfigs v1+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic (creation or alter).
    DynamicTopic = 1,
    /// Set in this node's configuration file.
    StaticBroker = 4,
    /// Kafka's default.
    Default = 5,
}

impl ConfigSource {
    /// The id DescribeConfigs reports.
    pub fn id(self) -> i8 {
        self as i8
    }
}

/// Kafka's config value types (DescribeConfigs v3+ `config_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    /// `true`/`false`.
    Boolean = 1,
    /// Free text or one of a set.
    String = 2,
    /// 32-bit integer.
    Int = 3,
    /// 64-bit integer.
    Long = 5,
    /// 64-bit floating point.
    Double = 6,
    /// Comma-separated list.
    List = 7,
}

impl ConfigType {
    /// The id DescribeConfigs reports.
    pub fn id(self) -> i8 {
        self as i8
    }
}

/// A topic config name or value that is refused: INVALID_CONFIG with [`ConfigError::message`]
/// (which names the key, as Kafka's messages do).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// Not a topic config name vdl knows.
    #[error("Unknown topic config name: {0}")]
    UnknownName(String),
    /// A topic config Kafka has that vdl does not act on.
    #[error("Topic config {0} is not supported by vdl (supported: {SUPPORTED})")]
    Unsupported(String),
    /// A value that does not parse or is out of range.
    #[error("Invalid value {value} for configuration {name}: {reason}")]
    InvalidValue {
        /// The config name.
        name: String,
        /// The value given.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// A name given without a value where a value is needed (AlterConfigs with a null value).
    #[error("Null value not supported for topic configs: {0}")]
    NullValue(String),
    /// Two values that contradict each other (Kafka's message).
    #[error("conflict topic config setting min.compaction.lag.ms ({min}) > max.compaction.lag.ms ({max})")]
    CompactionLagConflict {
        /// The `min.compaction.lag.ms` given.
        min: i64,
        /// The `max.compaction.lag.ms` given.
        max: i64,
    },
}

/// The names a topic may override, as listed in error messages.
const SUPPORTED: &str = "cleanup.policy, delete.retention.ms, max.compaction.lag.ms, \
                         max.message.bytes, message.timestamp.type, min.cleanable.dirty.ratio, \
                         min.compaction.lag.ms, min.insync.replicas, retention.bytes, \
                         retention.ms, segment.bytes, segment.ms";

/// Smallest `segment.bytes` accepted (see the module documentation).
pub const MIN_SEGMENT_BYTES: i64 = 1 << 20;

/// Kafka's topic config names that vdl reports but does not let a topic change.
const KNOWN_UNSUPPORTED: &[&str] = &[
    "compression.type",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.zstd.level",
    "confluent.placement.constraints",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "index.interval.bytes",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "message.downconversion.enable",
    "message.format.version",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms",
    "preallocate",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.storage.enable",
    "segment.index.bytes",
    "segment.jitter.ms",
    "unclean.leader.election.enable",
];

/// One topic config vdl acts on: its Kafka name, type, broker-level synonym and Kafka default.
struct ConfigDef {
    name: &'static str,
    config_type: ConfigType,
    /// The broker config that supplies the value when the topic has no override.
    broker_synonym: &'static str,
}

const DEFS: &[ConfigDef] = &[
    ConfigDef {
        name: "cleanup.policy",
        config_type: ConfigType::List,
        broker_synonym: "log.cleanup.policy",
    },
    ConfigDef {
        name: "delete.retention.ms",
        config_type: ConfigType::Long,
        broker_synonym: "log.cleaner.delete.retention.ms",
    },
    ConfigDef {
        name: "max.compaction.lag.ms",
        config_type: ConfigType::Long,
        broker_synonym: "log.cleaner.max.compaction.lag.ms",
    },
    ConfigDef {
        name: "max.message.bytes",
        config_type: ConfigType::Int,
        broker_synonym: "message.max.bytes",
    },
    ConfigDef {
        name: "message.timestamp.type",
        config_type: ConfigType::String,
        broker_synonym: "log.message.timestamp.type",
    },
    ConfigDef {
        name: "min.cleanable.dirty.ratio",
        config_type: ConfigType::Double,
        broker_synonym: "log.cleaner.min.cleanable.ratio",
    },
    ConfigDef {
        name: "min.compaction.lag.ms",
        config_type: ConfigType::Long,
        broker_synonym: "log.cleaner.min.compaction.lag.ms",
    },
    ConfigDef {
        name: "min.insync.replicas",
        config_type: ConfigType::Int,
        broker_synonym: "min.insync.replicas",
    },
    ConfigDef {
        name: "retention.bytes",
        config_type: ConfigType::Long,
        broker_synonym: "log.retention.bytes",
    },
    ConfigDef {
        name: "retention.ms",
        config_type: ConfigType::Long,
        broker_synonym: "log.retention.ms",
    },
    ConfigDef {
        name: "segment.bytes",
        config_type: ConfigType::Int,
        broker_synonym: "log.segment.bytes",
    },
    ConfigDef {
        name: "segment.ms",
        config_type: ConfigType::Long,
        broker_synonym: "log.roll.ms",
    },
];

/// Kafka's defaults of the compaction configs and `segment.ms`.
pub mod defaults {
    /// `min.compaction.lag.ms`: records may be compacted at once.
    pub const MIN_COMPACTION_LAG_MS: i64 = 0;
    /// `max.compaction.lag.ms`: no deadline.
    pub const MAX_COMPACTION_LAG_MS: i64 = i64::MAX;
    /// `min.cleanable.dirty.ratio`.
    pub const MIN_CLEANABLE_DIRTY_RATIO: f64 = 0.5;
    /// `delete.retention.ms`: one day.
    pub const DELETE_RETENTION_MS: i64 = 86_400_000;
    /// `segment.ms`: seven days.
    pub const SEGMENT_MS: i64 = 604_800_000;
}

fn def(name: &str) -> Option<&'static ConfigDef> {
    DEFS.iter().find(|d| d.name == name)
}

fn invalid(name: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        name: name.to_owned(),
        value: value.to_owned(),
        reason: reason.into(),
    }
}

fn parse_long(name: &str, value: &str, min: i64) -> Result<i64, ConfigError> {
    let v: i64 = value
        .trim()
        .parse()
        .map_err(|_| invalid(name, value, "Not a number of type LONG"))?;
    if v < min {
        return Err(invalid(
            name,
            value,
            format!("Value must be at least {min}"),
        ));
    }
    Ok(v)
}

fn parse_ratio(name: &str, value: &str) -> Result<f64, ConfigError> {
    let v: f64 = value
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| invalid(name, value, "Not a number of type DOUBLE"))?;
    if v < 0.0 {
        return Err(invalid(name, value, "Value must be at least 0"));
    }
    if v > 1.0 {
        return Err(invalid(name, value, "Value must be no more than 1"));
    }
    Ok(v)
}

/// The items of a valid `cleanup.policy` value (see [`validate`]).
fn cleanup_items(name: &str, value: &str) -> Result<Vec<&'static str>, ConfigError> {
    let mut items = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let known = match item {
            "delete" => "delete",
            "compact" => "compact",
            _ => {
                return Err(invalid(
                    name,
                    value,
                    format!("String must be one of: compact, delete (got {item})"),
                ))
            }
        };
        if !items.contains(&known) {
            items.push(known);
        }
    }
    if items.is_empty() {
        // Kafka 3.9 accepts an empty list (no cleanup at all); vdl asks for a policy.
        return Err(invalid(
            name,
            value,
            "an empty cleanup policy is not supported; use delete, compact or compact,delete",
        ));
    }
    Ok(items)
}

fn parse_int(name: &str, value: &str, min: i64) -> Result<i64, ConfigError> {
    let v: i32 = value
        .trim()
        .parse()
        .map_err(|_| invalid(name, value, "Not a number of type INT"))?;
    if i64::from(v) < min {
        return Err(invalid(
            name,
            value,
            format!("Value must be at least {min}"),
        ));
    }
    Ok(i64::from(v))
}

/// Checks one override: the name is a topic config vdl acts on and the value is valid for it.
/// Returns the value as stored (trimmed, lists normalised), or why it is refused.
pub fn validate(name: &str, value: Option<&str>) -> Result<String, ConfigError> {
    let Some(def) = def(name) else {
        return Err(if KNOWN_UNSUPPORTED.contains(&name) {
            ConfigError::Unsupported(name.to_owned())
        } else {
            ConfigError::UnknownName(name.to_owned())
        });
    };
    let Some(value) = value else {
        return Err(ConfigError::NullValue(name.to_owned()));
    };
    let stored = match def.name {
        "cleanup.policy" => cleanup_items(name, value)?.join(","),
        "delete.retention.ms" | "min.compaction.lag.ms" => parse_long(name, value, 0)?.to_string(),
        "max.compaction.lag.ms" | "segment.ms" => parse_long(name, value, 1)?.to_string(),
        "min.cleanable.dirty.ratio" => {
            parse_ratio(name, value)?;
            value.trim().to_owned()
        }
        "max.message.bytes" => parse_int(name, value, 0)?.to_string(),
        "message.timestamp.type" => match value.trim() {
            v @ ("CreateTime" | "LogAppendTime") => v.to_owned(),
            _ => {
                return Err(invalid(
                    name,
                    value,
                    "String must be one of: CreateTime, LogAppendTime",
                ))
            }
        },
        "min.insync.replicas" => parse_int(name, value, 1)?.to_string(),
        "retention.bytes" => parse_long(name, value, i64::MIN)?.to_string(),
        "retention.ms" => parse_long(name, value, -1)?.to_string(),
        "segment.bytes" => parse_int(name, value, MIN_SEGMENT_BYTES)?.to_string(),
        other => unreachable!("every name in DEFS is handled: {other}"),
    };
    Ok(stored)
}

/// Checks a whole set of overrides (CreateTopics' configs, the result of an alter) and the
/// rules between them; `replicas` is the topic's replication factor.
pub fn validate_all(
    overrides: &BTreeMap<String, String>,
    replicas: usize,
) -> Result<(), ConfigError> {
    for (name, value) in overrides {
        validate(name, Some(value))?;
    }
    let lag = |name: &str, default: i64| {
        overrides
            .get(name)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(default)
    };
    let min_lag = lag("min.compaction.lag.ms", defaults::MIN_COMPACTION_LAG_MS);
    let max_lag = lag("max.compaction.lag.ms", defaults::MAX_COMPACTION_LAG_MS);
    if min_lag > max_lag {
        return Err(ConfigError::CompactionLagConflict {
            min: min_lag,
            max: max_lag,
        });
    }
    if let Some(v) = overrides.get("min.insync.replicas") {
        let min: usize = v.parse().unwrap_or(usize::MAX);
        if min > replicas {
            // Kafka accepts this and then refuses every acks=all produce with
            // NOT_ENOUGH_REPLICAS; saying so at once is kinder and loses nothing.
            return Err(invalid(
                "min.insync.replicas",
                v,
                format!("the topic has only {replicas} replicas"),
            ));
        }
    }
    Ok(())
}

/// How records of a topic get their timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    /// The producer's timestamps are kept (validated against the node's time bounds).
    #[default]
    CreateTime,
    /// The leader stamps each batch with its clock when appending.
    LogAppendTime,
}

/// What the cleaner does with a compacted topic's partitions (Kafka's compaction configs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionSettings {
    /// A record younger than this is not compacted (`min.compaction.lag.ms`).
    pub min_lag_ms: i64,
    /// A partition whose oldest dirty record is older than this is cleaned whatever its dirty
    /// ratio (`max.compaction.lag.ms`).
    pub max_lag_ms: i64,
    /// Clean a partition once its dirty bytes are at least this share of its sealed bytes
    /// (`min.cleanable.dirty.ratio`, 0 to 1).
    pub min_cleanable_dirty_ratio: f64,
    /// Tombstones are kept this long after a pass kept them (`delete.retention.ms`).
    pub delete_retention_ms: i64,
}

impl Default for CompactionSettings {
    /// Kafka's defaults.
    fn default() -> CompactionSettings {
        CompactionSettings {
            min_lag_ms: defaults::MIN_COMPACTION_LAG_MS,
            max_lag_ms: defaults::MAX_COMPACTION_LAG_MS,
            min_cleanable_dirty_ratio: defaults::MIN_CLEANABLE_DIRTY_RATIO,
            delete_retention_ms: defaults::DELETE_RETENTION_MS,
        }
    }
}

/// The effective settings of one topic, as every replica acts on them.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicSettings {
    /// Delete segments whose newest record is older than this (None: never by age, and always
    /// None when `cleanup.policy` lacks `delete`).
    pub retention_age: Option<Duration>,
    /// Delete old segments while the partition is larger than this (None: never by size, and
    /// always None when `cleanup.policy` lacks `delete`).
    pub retention_bytes: Option<u64>,
    /// Roll the active segment at this size.
    pub segment_bytes: u64,
    /// Roll the active segment once it is this old: `segment.ms`, or `max.compaction.lag.ms`
    /// when the topic compacts and that is shorter (Kafka's `LogConfig.maxSegmentMs`), so a
    /// record leaves the active segment, and can be cleaned, within the max lag.
    pub segment_age: Duration,
    /// `cleanup.policy` includes `compact`: keyless records are refused and the cleaner
    /// compacts the partitions with [`TopicSettings::compaction`].
    pub compact: bool,
    /// The compaction configs (read only when `compact`).
    pub compaction: CompactionSettings,
    /// Largest record batch a produce may carry, in bytes.
    pub max_message_bytes: usize,
    /// Replicas that must be in sync for an acks=all produce (None: a majority, which the Raft
    /// commit needs anyway).
    pub min_insync_replicas: Option<usize>,
    /// How records get their timestamps.
    pub timestamp_type: TimestampType,
}

impl TopicSettings {
    /// The settings of a topic with `overrides` on a node configured as `config`. Overrides
    /// are validated before they are stored, so one that no longer parses (impossible unless
    /// the metadata was written by a different validator) falls back to the node's setting.
    pub fn resolve(config: &NodeConfig, overrides: &BTreeMap<String, String>) -> TopicSettings {
        let s = &config.storage;
        let get = |name: &str| -> Option<i64> {
            overrides
                .get(name)
                .and_then(|v| validate(name, Some(v)).ok())
                .and_then(|v| v.parse().ok())
        };
        let policy = overrides
            .get("cleanup.policy")
            .and_then(|v| cleanup_items("cleanup.policy", v).ok())
            .unwrap_or_else(|| vec!["delete"]);
        let delete = policy.contains(&"delete");
        let ratio = overrides
            .get("min.cleanable.dirty.ratio")
            .and_then(|v| parse_ratio("min.cleanable.dirty.ratio", v).ok())
            .unwrap_or(defaults::MIN_CLEANABLE_DIRTY_RATIO);
        let compaction = CompactionSettings {
            min_lag_ms: get("min.compaction.lag.ms").unwrap_or(defaults::MIN_COMPACTION_LAG_MS),
            max_lag_ms: get("max.compaction.lag.ms").unwrap_or(defaults::MAX_COMPACTION_LAG_MS),
            min_cleanable_dirty_ratio: ratio,
            delete_retention_ms: get("delete.retention.ms")
                .unwrap_or(defaults::DELETE_RETENTION_MS),
        };
        let compact = policy.contains(&"compact");
        let mut segment_ms = get("segment.ms").unwrap_or(defaults::SEGMENT_MS);
        if compact && compaction.max_lag_ms > 0 {
            segment_ms = segment_ms.min(compaction.max_lag_ms);
        }
        TopicSettings {
            retention_age: match get("retention.ms") {
                _ if !delete => None,
                Some(ms) if ms < 0 => None,
                Some(ms) => Some(Duration::from_millis(ms as u64)),
                None => s.retention_age,
            },
            retention_bytes: match get("retention.bytes") {
                _ if !delete => None,
                Some(b) if b < 0 => None,
                Some(b) => Some(b as u64),
                None => s.retention_bytes,
            },
            segment_bytes: get("segment.bytes").map_or(s.segment_bytes, |b| b as u64),
            segment_age: Duration::from_millis(u64::try_from(segment_ms).unwrap_or(1)),
            compact,
            compaction,
            max_message_bytes: get("max.message.bytes")
                .map_or(config.kafka.message_max_bytes, |b| b as usize),
            min_insync_replicas: get("min.insync.replicas").map(|m| m as usize),
            timestamp_type: match overrides.get("message.timestamp.type").map(String::as_str) {
                Some("LogAppendTime") => TimestampType::LogAppendTime,
                _ => TimestampType::CreateTime,
            },
        }
    }

    /// Replicas that must be in sync before an acks=all produce is accepted, for a partition
    /// with `replicas` replicas, when that is more than the majority a Raft commit needs anyway
    /// (`min.insync.replicas` set above it); `None` otherwise: the commit itself waits for a
    /// majority, so no check before the append is needed (and a leader just elected, which has
    /// not heard every follower yet, is not refused).
    pub fn in_sync_required_beyond_majority(&self, replicas: usize) -> Option<usize> {
        let majority = replicas / 2 + 1;
        self.min_insync_replicas.filter(|m| *m > majority)
    }
}

/// One config as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedConfig {
    /// Kafka's name.
    pub name: &'static str,
    /// The effective value.
    pub value: String,
    /// Its type.
    pub config_type: ConfigType,
    /// Where the effective value comes from.
    pub source: ConfigSource,
    /// False for the configs a topic may override.
    pub read_only: bool,
    /// Every place a value is set, most specific first (the first is the effective one), as
    /// Kafka's synonyms: (name, value, source).
    pub synonyms: Vec<(&'static str, String, ConfigSource)>,
}

/// The node-level value and Kafka default of a topic config with `replicas` replicas.
fn broker_level(config: &NodeConfig, name: &str, replicas: usize) -> (String, ConfigSource) {
    let s = &config.storage;
    let defaults = crate::config::StorageSettings::default();
    let kafka_defaults = crate::config::KafkaSettings::default();
    let source = |differs: bool| {
        if differs {
            ConfigSource::StaticBroker
        } else {
            ConfigSource::Default
        }
    };
    match name {
        "cleanup.policy" => ("delete".into(), ConfigSource::Default),
        "delete.retention.ms" => (
            defaults::DELETE_RETENTION_MS.to_string(),
            ConfigSource::Default,
        ),
        "max.compaction.lag.ms" => (
            defaults::MAX_COMPACTION_LAG_MS.to_string(),
            ConfigSource::Default,
        ),
        "min.cleanable.dirty.ratio" => (
            defaults::MIN_CLEANABLE_DIRTY_RATIO.to_string(),
            ConfigSource::Default,
        ),
        "min.compaction.lag.ms" => (
            defaults::MIN_COMPACTION_LAG_MS.to_string(),
            ConfigSource::Default,
        ),
        "segment.ms" => (defaults::SEGMENT_MS.to_string(), ConfigSource::Default),
        "max.message.bytes" => (
            config.kafka.message_max_bytes.to_string(),
            source(config.kafka.message_max_bytes != kafka_defaults.message_max_bytes),
        ),
        "message.timestamp.type" => ("CreateTime".into(), ConfigSource::Default),
        // What Raft needs: a majority of the partition's replicas.
        "min.insync.replicas" => ((replicas / 2 + 1).to_string(), ConfigSource::Default),
        "retention.bytes" => (
            s.retention_bytes
                .map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX))
                .to_string(),
            source(s.retention_bytes != defaults.retention_bytes),
        ),
        "retention.ms" => (
            s.retention_age
                .map_or(-1, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                .to_string(),
            source(s.retention_age != defaults.retention_age),
        ),
        "segment.bytes" => (
            s.segment_bytes.to_string(),
            source(s.segment_bytes != defaults.segment_bytes),
        ),
        other => unreachable!("broker_level is asked for DEFS names only: {other}"),
    }
}

/// A topic's configuration as DescribeConfigs reports it: every config vdl acts on (override,
/// node setting or default, with synonyms), then the Kafka configs it reports at their fixed
/// values (read-only).
pub fn describe(
    config: &NodeConfig,
    overrides: &BTreeMap<String, String>,
    replicas: usize,
) -> Vec<DescribedConfig> {
    let mut out: Vec<DescribedConfig> = DEFS
        .iter()
        .map(|d| {
            let (broker_value, broker_source) = broker_level(config, d.name, replicas);
            let mut synonyms = Vec::new();
            if let Some(v) = overrides.get(d.name) {
                synonyms.push((d.name, v.clone(), ConfigSource::DynamicTopic));
            }
            synonyms.push((d.broker_synonym, broker_value.clone(), broker_source));
            let (value, source) = match overrides.get(d.name) {
                Some(v) => (v.clone(), ConfigSource::DynamicTopic),
                None => (broker_value, broker_source),
            };
            DescribedConfig {
                name: d.name,
                value,
                config_type: d.config_type,
                source,
                read_only: false,
                synonyms,
            }
        })
        .collect();
    for (name, value, config_type) in [
        ("compression.type", "producer", ConfigType::String),
        (
            "unclean.leader.election.enable",
            "false",
            ConfigType::Boolean,
        ),
    ] {
        out.push(DescribedConfig {
            name,
            value: value.into(),
            config_type,
            source: ConfigSource::Default,
            read_only: true,
            synonyms: vec![(name, value.into(), ConfigSource::Default)],
        });
    }
    out.sort_by_key(|c| c.name);
    out
}

#[cfg(test)]
#[path = "topic_config_tests.rs"]
mod tests;
