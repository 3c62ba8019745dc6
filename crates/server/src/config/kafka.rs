//! The `[kafka]` section: the Kafka listener's limits and topic defaults (its connection limits
//! and `[[kafka.listeners]]` are read by [`super::NodeConfig::from_toml`]).

use std::time::Duration;

use kafka_proto::records::ProduceLimits;
use serde::Deserialize;

use super::security::FileKafkaListener;
use super::values::{invalid, positive_ms};
use super::ConfigError;

/// Limits of the Kafka listener, named after the Kafka settings they mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaSettings {
    /// Connections accepted at once (`max.connections`); further ones wait in the backlog.
    pub max_connections: usize,
    /// Requests read ahead and handled concurrently on one connection before reading pauses.
    pub max_in_flight_per_connection: usize,
    /// Largest request frame (`socket.request.max.bytes`).
    pub request_max_bytes: usize,
    /// Largest record batch accepted in a produce (`message.max.bytes`).
    pub message_max_bytes: usize,
    /// How far ahead of this node's clock a produced record's create-time timestamp may be, in
    /// milliseconds (`message.timestamp.after.max.ms`, Kafka 4.0's default of one hour);
    /// beyond it the partition is refused with INVALID_TIMESTAMP.
    pub message_timestamp_after_max_ms: u64,
    /// A connection with no request for this long is closed (`connections.max.idle.ms`).
    pub connection_idle: Duration,
    /// Whether a Metadata request for an unknown topic creates it, when the client allows it
    /// (`auto.create.topics.enable`).
    pub auto_create_topics: bool,
    /// Most topics the cluster may hold: CreateTopics beyond it gets POLICY_VIOLATION and
    /// auto-creation stops (each topic costs its replicas at least one Raft group and open file).
    pub max_topics: usize,
    /// Partitions of an auto-created topic, and of a CreateTopics request that leaves the count
    /// to the broker (-1) (`num.partitions`).
    pub num_partitions: u32,
    /// Most partitions the cluster may hold, over all topics: CreateTopics and CreatePartitions
    /// beyond it get POLICY_VIOLATION. Each partition costs each of its replicas a Raft group
    /// on the shared worker pool, a store and one open file (the active segment), so a node
    /// hosting P partitions needs an open-file limit above 2P (see `fd_budget.rs`).
    pub max_partitions: u32,
    /// Replicas of each partition of a topic created without a replication factor (auto-created,
    /// or CreateTopics with -1): Kafka's `default.replication.factor`. `None`: the smaller of 3
    /// and the number of members (see [`NodeConfig::default_replication_factor`]).
    pub default_replication_factor: Option<usize>,
    /// How long a consumer group without members keeps its committed offsets after its last
    /// activity (its last commit, or becoming empty): Kafka's `offsets.retention.minutes`,
    /// 7 days by default.
    pub offsets_retention: Duration,
    /// How often the group coordinator looks for expired offsets
    /// (`offsets.retention.check.interval.ms`, 10 minutes by default).
    pub offsets_retention_check_interval: Duration,
    /// How long the transaction coordinator keeps a transactional id with no transaction
    /// ongoing after its last change (`transactional.id.expiration.ms`, 7 days by default).
    pub transactional_id_expiration: Duration,
    /// A follower is in sync (Kafka's ISR) while it holds everything the leader had committed
    /// this long ago (`replica.lag.time.max.ms`, 30 s by default) and was heard from within two
    /// election timeouts.
    pub replica_lag_time_max: Duration,
    /// A consumer-protocol (KIP-848) group member that does not heartbeat for this long leaves
    /// its group (`group.consumer.session.timeout.ms`, 45 s by default).
    pub consumer_group_session_timeout: Duration,
    /// How often consumer-protocol group members are told to heartbeat
    /// (`group.consumer.heartbeat.interval.ms`, 5 s by default).
    pub consumer_group_heartbeat_interval: Duration,
    /// Most members of one consumer-protocol group (`group.consumer.max.size`; 1000 here,
    /// unbounded in Kafka): a further join gets GROUP_MAX_SIZE_REACHED.
    pub consumer_group_max_size: usize,
    /// Which conversions between a classic group with members and a consumer-protocol group
    /// the coordinator performs online (`group.consumer.migration.policy`, bidirectional by
    /// default, as Kafka 4.1).
    pub consumer_group_migration_policy: MigrationPolicy,
}

/// Kafka's `group.consumer.migration.policy`: which online conversions between a classic
/// group with members and a consumer-protocol group are performed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigrationPolicy {
    /// Both the upgrade and the downgrade.
    #[default]
    Bidirectional,
    /// Only the upgrade (a consumer-protocol member joining a classic group with members).
    Upgrade,
    /// Only the downgrade (the last consumer-protocol member leaving a group of classic
    /// members).
    Downgrade,
    /// Neither.
    Disabled,
}

impl MigrationPolicy {
    /// The policy named `name` (Kafka's values, case-insensitive).
    pub fn from_name(name: &str) -> Option<MigrationPolicy> {
        match name.to_ascii_lowercase().as_str() {
            "bidirectional" => Some(MigrationPolicy::Bidirectional),
            "upgrade" => Some(MigrationPolicy::Upgrade),
            "downgrade" => Some(MigrationPolicy::Downgrade),
            "disabled" => Some(MigrationPolicy::Disabled),
            _ => None,
        }
    }

    /// Whether a classic group with members is upgraded online.
    pub fn upgrade_enabled(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Upgrade
        )
    }

    /// Whether a consumer group left with classic members only is downgraded online.
    pub fn downgrade_enabled(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Downgrade
        )
    }
}

impl Default for KafkaSettings {
    fn default() -> KafkaSettings {
        KafkaSettings {
            max_connections: 10_000,
            max_in_flight_per_connection: 64,
            request_max_bytes: 100 << 20,
            message_max_bytes: 1 << 20,
            message_timestamp_after_max_ms:
                kafka_proto::records::validate::DEFAULT_TIMESTAMP_AFTER_MAX_MS as u64,
            connection_idle: Duration::from_secs(600),
            auto_create_topics: true,
            max_topics: 1000,
            num_partitions: 1,
            max_partitions: 10_000,
            default_replication_factor: None,
            offsets_retention: Duration::from_secs(7 * 24 * 3600),
            offsets_retention_check_interval: Duration::from_secs(600),
            transactional_id_expiration: Duration::from_secs(7 * 24 * 3600),
            replica_lag_time_max: Duration::from_secs(30),
            consumer_group_session_timeout: Duration::from_secs(45),
            consumer_group_heartbeat_interval: Duration::from_secs(5),
            consumer_group_max_size: 1000,
            consumer_group_migration_policy: MigrationPolicy::Bidirectional,
        }
    }
}

/// Largest records of one partition in one produce request (before and after a legacy message
/// set is converted), whatever `message.max.bytes` says: larger is MESSAGE_TOO_LARGE. One
/// partition's records become one Raft entry (proposals are merged only up to 1 MiB), and the
/// log store refuses entries over 64 MiB (`logstore::StoreConfig::max_entry_bytes`, whose
/// refusal would stop the group) while peer frames stop at 64 MiB
/// (`transport::MAX_FRAME_BYTES`): half of that leaves room for the entry's context and
/// framing. A unit test keeps it there.
pub const MAX_PARTITION_DATA_BYTES: usize = 32 << 20;

// A partition's records, once an entry, always fit a peer frame with room to spare.
const _: () =
    assert!(MAX_PARTITION_DATA_BYTES <= crate::replication::transport::MAX_FRAME_BYTES / 2);

impl KafkaSettings {
    /// The limits a Produce request's records are validated against: `message.max.bytes` (capped
    /// by [`MAX_PARTITION_DATA_BYTES`]), the decompression bound derived from it, this node's clock
    /// and `message.timestamp.after.max.ms`.
    pub fn produce_limits(&self, now_ms: i64) -> ProduceLimits {
        let message_max_bytes = self.message_max_bytes.min(MAX_PARTITION_DATA_BYTES);
        ProduceLimits::new(message_max_bytes, now_ms).with_timestamp_after_max_ms(
            i64::try_from(self.message_timestamp_after_max_ms).unwrap_or(i64::MAX),
        )
    }
}

/// Highest value `kafka.max_partitions` and `kafka.num_partitions` accept (Kafka's partition
/// index is an int32; this bound keeps a typo from promising what no node can hold).
pub const MAX_PARTITIONS_LIMIT: u32 = 100_000;

/// `[kafka]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileKafka {
    max_connections: Option<usize>,
    max_in_flight_per_connection: Option<usize>,
    request_max_bytes: Option<usize>,
    message_max_bytes: Option<usize>,
    message_timestamp_after_max_ms: Option<u64>,
    connection_idle_ms: Option<u64>,
    auto_create_topics: Option<bool>,
    max_topics: Option<usize>,
    num_partitions: Option<u32>,
    max_partitions: Option<u32>,
    default_replication_factor: Option<usize>,
    offsets_retention_ms: Option<u64>,
    offsets_retention_check_ms: Option<u64>,
    transactional_id_expiration_ms: Option<u64>,
    replica_lag_time_max_ms: Option<u64>,
    consumer_group_session_timeout_ms: Option<u64>,
    consumer_group_heartbeat_interval_ms: Option<u64>,
    consumer_group_max_size: Option<usize>,
    consumer_group_migration_policy: Option<String>,
    pub(super) listeners: Option<Vec<FileKafkaListener>>,
    pub(super) max_connections_per_ip: Option<usize>,
    pub(super) max_connections_per_ip_overrides: Option<std::collections::BTreeMap<String, usize>>,
    pub(super) max_connection_creation_rate: Option<u32>,
    pub(super) max_connection_creation_rate_per_ip: Option<u32>,
    pub(super) authentication_timeout_ms: Option<u64>,
}

/// Validates `[kafka]` over the defaults; `member_count` bounds the default replication factor.
pub(super) fn parse_kafka(k: FileKafka, member_count: usize) -> Result<KafkaSettings, ConfigError> {
    let mut kafka = KafkaSettings::default();
    for (key, value, target) in [
        (
            "kafka.max_connections",
            k.max_connections,
            &mut kafka.max_connections,
        ),
        (
            "kafka.max_in_flight_per_connection",
            k.max_in_flight_per_connection,
            &mut kafka.max_in_flight_per_connection,
        ),
        (
            "kafka.request_max_bytes",
            k.request_max_bytes,
            &mut kafka.request_max_bytes,
        ),
        (
            "kafka.message_max_bytes",
            k.message_max_bytes,
            &mut kafka.message_max_bytes,
        ),
        ("kafka.max_topics", k.max_topics, &mut kafka.max_topics),
    ] {
        if let Some(v) = value {
            if v == 0 {
                return invalid(key, "must be positive");
            }
            *target = v;
        }
    }
    kafka.auto_create_topics = k.auto_create_topics.unwrap_or(kafka.auto_create_topics);
    for (key, value, target) in [
        (
            "kafka.num_partitions",
            k.num_partitions,
            &mut kafka.num_partitions,
        ),
        (
            "kafka.max_partitions",
            k.max_partitions,
            &mut kafka.max_partitions,
        ),
    ] {
        if let Some(v) = value {
            if v == 0 || v > MAX_PARTITIONS_LIMIT {
                return invalid(key, &format!("must be in 1..={MAX_PARTITIONS_LIMIT}"));
            }
            *target = v;
        }
    }
    if kafka.num_partitions > kafka.max_partitions {
        return invalid(
            "kafka.num_partitions",
            "must be at most kafka.max_partitions",
        );
    }
    if let Some(r) = k.default_replication_factor {
        if r == 0 || r > member_count {
            return invalid(
                "kafka.default_replication_factor",
                &format!(
                    "must be in 1..={} (the number of members in initial_cluster)",
                    member_count
                ),
            );
        }
        kafka.default_replication_factor = Some(r);
    }
    if let Some(ms) = k.connection_idle_ms {
        kafka.connection_idle = positive_ms("kafka.connection_idle_ms", ms)?;
    }
    if let Some(ms) = k.offsets_retention_ms {
        if i64::try_from(ms).is_err() {
            return invalid(
                "kafka.offsets_retention_ms",
                "must be at most 9223372036854775807",
            );
        }
        kafka.offsets_retention = positive_ms("kafka.offsets_retention_ms", ms)?;
    }
    if let Some(ms) = k.offsets_retention_check_ms {
        kafka.offsets_retention_check_interval =
            positive_ms("kafka.offsets_retention_check_ms", ms)?;
    }
    if let Some(ms) = k.transactional_id_expiration_ms {
        kafka.transactional_id_expiration =
            positive_ms("kafka.transactional_id_expiration_ms", ms)?;
    }
    if let Some(ms) = k.consumer_group_session_timeout_ms {
        if ms > i32::MAX as u64 {
            return invalid(
                "kafka.consumer_group_session_timeout_ms",
                "must fit an int32",
            );
        }
        kafka.consumer_group_session_timeout =
            positive_ms("kafka.consumer_group_session_timeout_ms", ms)?;
    }
    if let Some(ms) = k.consumer_group_heartbeat_interval_ms {
        if ms > i32::MAX as u64 {
            return invalid(
                "kafka.consumer_group_heartbeat_interval_ms",
                "must fit an int32",
            );
        }
        kafka.consumer_group_heartbeat_interval =
            positive_ms("kafka.consumer_group_heartbeat_interval_ms", ms)?;
    }
    if kafka.consumer_group_heartbeat_interval >= kafka.consumer_group_session_timeout {
        return invalid(
            "kafka.consumer_group_heartbeat_interval_ms",
            "must be less than kafka.consumer_group_session_timeout_ms",
        );
    }
    if let Some(n) = k.consumer_group_max_size {
        if n == 0 || n > 100_000 {
            return invalid("kafka.consumer_group_max_size", "must be in 1..=100000");
        }
        kafka.consumer_group_max_size = n;
    }
    if let Some(name) = &k.consumer_group_migration_policy {
        let Some(policy) = MigrationPolicy::from_name(name) else {
            return invalid(
                "kafka.consumer_group_migration_policy",
                "must be bidirectional, upgrade, downgrade or disabled",
            );
        };
        kafka.consumer_group_migration_policy = policy;
    }
    if let Some(ms) = k.replica_lag_time_max_ms {
        kafka.replica_lag_time_max = positive_ms("kafka.replica_lag_time_max_ms", ms)?;
    }
    if let Some(ms) = k.message_timestamp_after_max_ms {
        if i64::try_from(ms).is_err() {
            return invalid(
                "kafka.message_timestamp_after_max_ms",
                "must be at most 9223372036854775807",
            );
        }
        kafka.message_timestamp_after_max_ms = ms;
    }
    Ok(kafka)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_partitions_records_always_fit_a_raft_entry_and_a_peer_frame() {
        let entry_limit = logstore::StoreConfig::default().max_entry_bytes;
        assert!(MAX_PARTITION_DATA_BYTES as u64 <= entry_limit / 2);
        // A configured message.max.bytes above the cap is capped.
        let settings = KafkaSettings {
            message_max_bytes: 1 << 30,
            ..KafkaSettings::default()
        };
        assert_eq!(
            settings.produce_limits(0).max_batch_bytes,
            MAX_PARTITION_DATA_BYTES
        );
    }
}
