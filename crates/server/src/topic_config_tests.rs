//! Unit tests of the topic configs: validation, resolution and DescribeConfigs.

use super::*;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn values_are_validated_with_kafkas_messages() {
    assert_eq!(validate("retention.ms", Some(" 60000")).unwrap(), "60000");
    assert_eq!(validate("retention.ms", Some("-1")).unwrap(), "-1");
    assert_eq!(
        validate("retention.ms", Some("abc"))
            .unwrap_err()
            .to_string(),
        "Invalid value abc for configuration retention.ms: Not a number of type LONG"
    );
    assert_eq!(
        validate("retention.ms", Some("-2"))
            .unwrap_err()
            .to_string(),
        "Invalid value -2 for configuration retention.ms: Value must be at least -1"
    );
    assert_eq!(
        validate("no.such", Some("1")).unwrap_err().to_string(),
        "Unknown topic config name: no.such"
    );
    assert!(matches!(
        validate("segment.jitter.ms", Some("1")),
        Err(ConfigError::Unsupported(_))
    ));
    // Compaction is accepted, alone or with delete in either order.
    assert_eq!(
        validate("cleanup.policy", Some("compact")).unwrap(),
        "compact"
    );
    assert_eq!(
        validate("cleanup.policy", Some(" compact , delete")).unwrap(),
        "compact,delete"
    );
    assert_eq!(
        validate("cleanup.policy", Some("delete,compact")).unwrap(),
        "delete,compact"
    );
    let bad = validate("cleanup.policy", Some("compact,shred")).unwrap_err();
    assert!(bad.to_string().contains("cleanup.policy"), "{bad}");
    assert!(validate("cleanup.policy", Some(" , ")).is_err());
    assert_eq!(
        validate("cleanup.policy", Some("delete")).unwrap(),
        "delete"
    );
    assert!(validate("segment.bytes", Some("1000")).is_err());
    assert!(
        validate("segment.bytes", Some("4294967296")).is_err(),
        "INT"
    );
    assert!(validate("message.timestamp.type", Some("LogAppendTime")).is_ok());
    assert!(validate("message.timestamp.type", Some("logappendtime")).is_err());
    assert!(validate("min.insync.replicas", Some("0")).is_err());
    assert!(validate("retention.ms", None).is_err());
}

#[test]
fn min_insync_above_the_replication_factor_is_refused() {
    assert!(validate_all(&map(&[("min.insync.replicas", "3")]), 3).is_ok());
    assert!(validate_all(&map(&[("min.insync.replicas", "4")]), 3).is_err());
}

#[test]
fn overrides_win_over_the_node_config_and_describe_says_where_values_come_from() {
    let config = NodeConfig::single_node_default();
    let overrides = map(&[
        ("retention.ms", "-1"),
        ("segment.bytes", "2097152"),
        ("min.insync.replicas", "3"),
        ("message.timestamp.type", "LogAppendTime"),
    ]);
    let s = TopicSettings::resolve(&config, &overrides);
    assert_eq!(s.retention_age, None);
    assert_eq!(s.segment_bytes, 2 << 20);
    assert_eq!(s.timestamp_type, TimestampType::LogAppendTime);
    assert_eq!(s.in_sync_required_beyond_majority(3), Some(3));
    assert_eq!(s.in_sync_required_beyond_majority(5), None);
    let plain = TopicSettings::resolve(&config, &BTreeMap::new());
    assert_eq!(plain.in_sync_required_beyond_majority(3), None);
    assert_eq!(plain.retention_age, config.storage.retention_age);
    let described = describe(&config, &overrides, 3);
    let get = |n: &str| described.iter().find(|c| c.name == n).unwrap().clone();
    let retention = get("retention.ms");
    assert_eq!(retention.value, "-1");
    assert_eq!(retention.source, ConfigSource::DynamicTopic);
    assert_eq!(retention.synonyms.len(), 2);
    assert_eq!(retention.synonyms[1].0, "log.retention.ms");
    let bytes = get("retention.bytes");
    assert_eq!(bytes.source, ConfigSource::Default);
    assert_eq!(bytes.value, "-1");
    assert!(get("compression.type").read_only);
}

#[test]
fn compaction_configs_are_validated_as_kafka_does() {
    assert_eq!(validate("min.compaction.lag.ms", Some("0")).unwrap(), "0");
    assert_eq!(
        validate("min.compaction.lag.ms", Some("-1"))
            .unwrap_err()
            .to_string(),
        "Invalid value -1 for configuration min.compaction.lag.ms: Value must be at least 0"
    );
    assert!(validate("max.compaction.lag.ms", Some("0")).is_err());
    assert_eq!(validate("max.compaction.lag.ms", Some("1")).unwrap(), "1");
    assert_eq!(validate("delete.retention.ms", Some("0")).unwrap(), "0");
    assert!(validate("delete.retention.ms", Some("-1")).is_err());
    assert!(validate("segment.ms", Some("0")).is_err());
    assert_eq!(validate("segment.ms", Some("1000")).unwrap(), "1000");
    assert_eq!(
        validate("min.cleanable.dirty.ratio", Some("0.01")).unwrap(),
        "0.01"
    );
    assert_eq!(
        validate("min.cleanable.dirty.ratio", Some("1.5"))
            .unwrap_err()
            .to_string(),
        "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"
    );
    assert_eq!(
        validate("min.cleanable.dirty.ratio", Some("x"))
            .unwrap_err()
            .to_string(),
        "Invalid value x for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"
    );
    assert!(validate("min.cleanable.dirty.ratio", Some("NaN")).is_err());
    assert!(validate("min.cleanable.dirty.ratio", Some("-0.1")).is_err());
    // The lags must not contradict each other (Kafka's message).
    let conflict = validate_all(
        &map(&[
            ("min.compaction.lag.ms", "10"),
            ("max.compaction.lag.ms", "5"),
        ]),
        3,
    )
    .unwrap_err();
    assert_eq!(
        conflict.to_string(),
        "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"
    );
    assert!(validate_all(&map(&[("max.compaction.lag.ms", "5")]), 3).is_ok());
}

#[test]
fn the_policy_decides_compaction_and_retention() {
    let config = NodeConfig::single_node_default();
    let plain = TopicSettings::resolve(&config, &BTreeMap::new());
    assert!(!plain.compact);
    assert_eq!(plain.compaction, CompactionSettings::default());
    assert_eq!(plain.segment_age, Duration::from_millis(604_800_000));
    assert_eq!(plain.retention_age, config.storage.retention_age);
    // compact alone: no deletion by retention, as Kafka.
    let compacted = TopicSettings::resolve(
        &config,
        &map(&[
            ("cleanup.policy", "compact"),
            ("retention.ms", "1000"),
            ("retention.bytes", "1000"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("min.compaction.lag.ms", "5"),
            ("max.compaction.lag.ms", "500"),
            ("delete.retention.ms", "7"),
            ("segment.ms", "1500"),
        ]),
    );
    assert!(compacted.compact);
    assert_eq!(compacted.retention_age, None);
    assert_eq!(compacted.retention_bytes, None);
    assert_eq!(
        compacted.compaction,
        CompactionSettings {
            min_lag_ms: 5,
            max_lag_ms: 500,
            min_cleanable_dirty_ratio: 0.01,
            delete_retention_ms: 7,
        }
    );
    // The active segment rolls at max.compaction.lag.ms when shorter than segment.ms
    // (Kafka's maxSegmentMs), so a record can be cleaned within the max lag.
    assert_eq!(compacted.segment_age, Duration::from_millis(500));
    let lag_longer = TopicSettings::resolve(
        &config,
        &map(&[
            ("cleanup.policy", "compact"),
            ("max.compaction.lag.ms", "5000"),
            ("segment.ms", "1500"),
        ]),
    );
    assert_eq!(lag_longer.segment_age, Duration::from_millis(1500));
    // Not compacted: the max lag does not roll anything.
    let deleted = TopicSettings::resolve(
        &config,
        &map(&[("max.compaction.lag.ms", "500"), ("segment.ms", "1500")]),
    );
    assert_eq!(deleted.segment_age, Duration::from_millis(1500));
    // compact,delete: both.
    let both = TopicSettings::resolve(
        &config,
        &map(&[
            ("cleanup.policy", "delete,compact"),
            ("retention.ms", "1000"),
        ]),
    );
    assert!(both.compact);
    assert_eq!(both.retention_age, Some(Duration::from_secs(1)));
}

#[test]
fn describe_reports_the_compaction_configs_with_kafkas_defaults_and_synonyms() {
    let config = NodeConfig::single_node_default();
    let overrides = map(&[("cleanup.policy", "compact"), ("segment.ms", "1000")]);
    let described = describe(&config, &overrides, 3);
    let get = |n: &str| described.iter().find(|c| c.name == n).unwrap().clone();
    let policy = get("cleanup.policy");
    assert_eq!(policy.value, "compact");
    assert_eq!(policy.source, ConfigSource::DynamicTopic);
    assert_eq!(policy.synonyms[1].0, "log.cleanup.policy");
    for (name, value, synonym, config_type) in [
        (
            "min.compaction.lag.ms",
            "0",
            "log.cleaner.min.compaction.lag.ms",
            ConfigType::Long,
        ),
        (
            "max.compaction.lag.ms",
            "9223372036854775807",
            "log.cleaner.max.compaction.lag.ms",
            ConfigType::Long,
        ),
        (
            "min.cleanable.dirty.ratio",
            "0.5",
            "log.cleaner.min.cleanable.ratio",
            ConfigType::Double,
        ),
        (
            "delete.retention.ms",
            "86400000",
            "log.cleaner.delete.retention.ms",
            ConfigType::Long,
        ),
    ] {
        let c = get(name);
        assert_eq!(c.value, value, "{name}");
        assert_eq!(c.source, ConfigSource::Default, "{name}");
        assert_eq!(c.config_type, config_type, "{name}");
        assert_eq!(
            c.synonyms,
            vec![(synonym, value.to_owned(), ConfigSource::Default)],
            "{name}"
        );
        assert!(!c.read_only);
    }
    let segment_ms = get("segment.ms");
    assert_eq!(segment_ms.value, "1000");
    assert_eq!(segment_ms.source, ConfigSource::DynamicTopic);
    assert_eq!(
        segment_ms.synonyms[1],
        ("log.roll.ms", "604800000".to_owned(), ConfigSource::Default)
    );
}
