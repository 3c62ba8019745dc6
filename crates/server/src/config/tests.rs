//! Parsing and validating configuration files: every section, defaults, and the errors that
//! name the key.

use super::*;

const THREE: &str = r#"
    initial_cluster = ["a=1@127.0.0.1:7001", "b=2@127.0.0.1:7002", "c=3@127.0.0.1:7003"]
    [node]
    id = 2
    name = "b"
    data_dir = "/tmp/x"
    [listeners]
    peer = "127.0.0.1:7002"
    kafka = "127.0.0.1:9093"
    [raft]
    heartbeat_ms = 100
    election_timeout_ms = 1000
    [storage]
    sync = "interval:5"
    [streams]
    initial = ["logstream1", "binlog.a"]
"#;

#[test]
fn a_three_node_config_parses() {
    let c = NodeConfig::from_toml(THREE).unwrap();
    assert_eq!(c.id, 2);
    assert_eq!(c.member_ids(), vec![1, 2, 3]);
    assert_eq!(c.kafka_advertised, "127.0.0.1:9093");
    assert_eq!(c.storage.sync, SyncMode::Interval(Duration::from_millis(5)));
    assert_eq!(c.storage.cache_bytes, DEFAULT_CACHE_BYTES, "node-wide");
    assert_eq!(c.storage.max_open_segment_files, 1024);
    assert_eq!(c.storage.max_open_active_files, 1024);
    assert_eq!(
        c.storage.cleaner_dedupe_buffer_bytes,
        128 << 20,
        "Kafka's default"
    );
    assert_eq!(c.storage.cleaner_io_bytes_per_second, None, "unlimited");
    let tuned = NodeConfig::from_toml(&THREE.replace(
        "sync = \"interval:5\"",
        "sync = \"interval:5\"\n    cleaner_dedupe_buffer_bytes = 1048576\n    cleaner_io_max_bytes_per_s = 5000000\n    cleaner_backoff_ms = 200",
    ))
    .unwrap();
    assert_eq!(tuned.storage.cleaner_dedupe_buffer_bytes, 1 << 20);
    assert_eq!(tuned.storage.cleaner_io_bytes_per_second, Some(5_000_000));
    assert_eq!(tuned.storage.cleaner_backoff, Duration::from_millis(200));
    assert_eq!(c.raft.heartbeat_ticks(), 2);
    assert_eq!(c.raft.election_ticks(), 20);
    assert_eq!(c.initial_streams, vec!["logstream1", "binlog.a"]);
}

#[test]
fn unknown_keys_are_named() {
    let text = THREE.replace("heartbeat_ms", "heartbeat_msec");
    let err = NodeConfig::from_toml(&text).unwrap_err().to_string();
    assert!(err.contains("heartbeat_msec"), "{err}");
}

#[test]
fn bad_values_name_their_key() {
    for (from, to, key) in [
        ("id = 2", "id = 0", "node.id"),
        ("interval:5", "sometimes", "storage.sync"),
        (
            "sync = \"interval:5\"",
            "sync = \"interval:5\"\n        max_open_segment_files = 0",
            "storage.max_open_segment_files",
        ),
        (
            "sync = \"interval:5\"",
            "sync = \"interval:5\"\n        max_open_active_files = 0",
            "storage.max_open_active_files",
        ),
        (
            "\"c=3@127.0.0.1:7003\"",
            "\"c=3@nowhere\"",
            "initial_cluster",
        ),
        (
            "election_timeout_ms = 1000",
            "election_timeout_ms = 150",
            "raft.election_timeout_ms",
        ),
        ("name = \"b\"", "name = \"z\"", "node.name"),
        (
            "sync = \"interval:5\"",
            "sync = \"interval:5\"\n        cleaner_io_max_bytes_per_s = 0",
            "storage.cleaner_io_max_bytes_per_s",
        ),
        (
            "sync = \"interval:5\"",
            "sync = \"interval:5\"\n        cleaner_dedupe_buffer_bytes = 10",
            "storage.cleaner_dedupe_buffer_bytes",
        ),
        ("\"binlog.a\"", "\"bad/name\"", "streams.initial"),
    ] {
        let err = NodeConfig::from_toml(&THREE.replace(from, to)).unwrap_err();
        match err {
            ConfigError::Invalid { key: k, .. } => assert_eq!(k, key),
            other => panic!("{from} -> {to}: expected Invalid({key}), got {other}"),
        }
    }
}

#[test]
fn the_documented_example_file_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/vdl.example.toml");
    let c = NodeConfig::from_file(&path).unwrap();
    assert_eq!(c.member_ids(), vec![1, 2, 3]);
    assert_eq!(c.raft, RaftTiming::default());
    assert_eq!(c.storage, StorageSettings::default());
    // The file spells the replication factor out; with three members it is the default's.
    assert_eq!(c.default_replication_factor(), 3);
    let spelled_out = KafkaSettings {
        default_replication_factor: None,
        ..c.kafka
    };
    assert_eq!(spelled_out, KafkaSettings::default());
    assert_eq!(c.metadata, MetadataSettings::default());
    // The example names a super user but keeps the default: no authorizer.
    assert_eq!(
        c.security,
        SecuritySettings {
            super_users: vec!["User:admin".into()],
            ..SecuritySettings::default()
        }
    );
}

/// `[security]`: the authorizer is "none" unless "acl", super users are principals, and
/// allow_everyone_if_no_acl_found defaults to false.
#[test]
fn the_security_table_is_checked() {
    use crate::security::authorizer::AuthorizerMode;
    let with = |table: &str| NodeConfig::from_toml(&format!("{THREE}\n[security]\n{table}\n"));
    assert_eq!(
        NodeConfig::from_toml(THREE).unwrap().security,
        SecuritySettings::default()
    );
    assert_eq!(SecuritySettings::default().authorizer, AuthorizerMode::None);
    let on = with(
        "authorizer = \"acl\"\nsuper_users = [\"User:admin\", \"User:CN=ops,O=x\"]\n\
         allow_everyone_if_no_acl_found = true",
    )
    .unwrap()
    .security;
    assert_eq!(on.authorizer, AuthorizerMode::Acl);
    assert_eq!(on.super_users, vec!["User:admin", "User:CN=ops,O=x"]);
    assert!(on.allow_everyone_if_no_acl_found);
    for (table, key) in [
        ("authorizer = \"simple\"", "security.authorizer"),
        ("super_users = [\"admin\"]", "security.super_users"),
    ] {
        match with(table).unwrap_err() {
            ConfigError::Invalid { key: k, .. } => assert_eq!(k, key, "{table}"),
            other => panic!("{table}: {other}"),
        }
    }
    assert!(with("authorizer_typo = \"acl\"").is_err());
}

/// `[[kafka.listeners]]`, `[security]` and `[peer_tls]`: the first listener is the
/// node's `kafka_listen`; the single-listener keys cannot be mixed with the list; without
/// the list the node has one PLAINTEXT listener named PLAINTEXT.
#[test]
fn listeners_security_and_peer_tls_parse() {
    let plain = NodeConfig::from_toml(THREE).unwrap();
    let only = plain.kafka_listeners();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].name, "PLAINTEXT");
    assert_eq!(only[0].listen, plain.kafka_listen);
    assert!(plain.peer_tls.is_none());
    let without_kafka = THREE.replace("kafka = \"127.0.0.1:9093\"", "");
    let text = format!(
        r#"{without_kafka}
        [[kafka.listeners]]
        name = "SASL_SSL"
        listen = "127.0.0.1:9300"
        advertised = "b.example:9300"
        security_protocol = "SASL_SSL"
        tls_cert = "n.pem"
        tls_key = "n.key"
        sasl_mechanisms = ["SCRAM-SHA-512", "PLAIN"]
        [[kafka.listeners]]
        name = "INTERNAL"
        listen = "127.0.0.1:9301"
        [security]
        connections_max_reauth_ms = 60000
        connection_failed_authentication_delay_ms = 5
        [peer_tls]
        cert = "n.pem"
        key = "n.key"
        ca = "peer-ca.pem"
        crl = "peer-crl.pem"
        "#
    );
    let c = NodeConfig::from_toml(&text).unwrap();
    assert_eq!(c.kafka_listen, "127.0.0.1:9300".parse().unwrap());
    assert_eq!(c.kafka_advertised, "b.example:9300");
    assert_eq!(c.kafka_listeners().len(), 2);
    assert_eq!(c.kafka_listeners()[0].sasl_mechanisms.len(), 2);
    assert_eq!(
        c.security.connections_max_reauth,
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        c.security.failed_authentication_delay,
        Duration::from_millis(5)
    );
    let peer_tls = c.peer_tls.as_ref().unwrap();
    assert_eq!(peer_tls.ca, Some("peer-ca.pem".into()));
    assert_eq!(peer_tls.crl, Some("peer-crl.pem".into()));
    let mixed = format!("{THREE}\n[[kafka.listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:1\"\n");
    match NodeConfig::from_toml(&mixed).unwrap_err() {
        ConfigError::Invalid { key, .. } => assert_eq!(key, "kafka.listeners"),
        other => panic!("{other}"),
    }
}

/// `metadata.snapshot_interval_entries`: 0 (never) or at least the minimum.
#[test]
fn the_metadata_snapshot_interval_is_checked() {
    let with = |n: u64| {
        NodeConfig::from_toml(&format!(
            "{THREE}\n[metadata]\nsnapshot_interval_entries = {n}\n"
        ))
    };
    assert_eq!(with(0).unwrap().metadata.snapshot_interval_entries, 0);
    assert_eq!(with(500).unwrap().metadata.snapshot_interval_entries, 500);
    let err = with(MIN_SNAPSHOT_INTERVAL_ENTRIES - 1)
        .unwrap_err()
        .to_string();
    assert!(err.contains("metadata.snapshot_interval_entries"), "{err}");
    assert_eq!(
        NodeConfig::from_toml(THREE)
            .unwrap()
            .metadata
            .snapshot_interval_entries,
        10_000
    );
}

/// The default replication factor: min(3, members) unless set, and never above the
/// number of members.
#[test]
fn the_replication_factor_fits_the_cluster() {
    let c = NodeConfig::from_toml(THREE).unwrap();
    assert_eq!(c.default_replication_factor(), 3);
    assert_eq!(
        NodeConfig::single_node_default().default_replication_factor(),
        1
    );
    let five = THREE.replace(
        r#""c=3@127.0.0.1:7003"]"#,
        r#""c=3@127.0.0.1:7003", "d=4@127.0.0.1:7004", "e=5@127.0.0.1:7005"]"#,
    );
    assert_eq!(
        NodeConfig::from_toml(&five)
            .unwrap()
            .default_replication_factor(),
        3
    );
    let two = format!("{five}\n[kafka]\ndefault_replication_factor = 2\n");
    assert_eq!(
        NodeConfig::from_toml(&two)
            .unwrap()
            .default_replication_factor(),
        2
    );
    for bad in [0, 4] {
        let text = format!("{THREE}\n[kafka]\ndefault_replication_factor = {bad}\n");
        match NodeConfig::from_toml(&text).unwrap_err() {
            ConfigError::Invalid { key, .. } => {
                assert_eq!(key, "kafka.default_replication_factor")
            }
            other => panic!("{bad}: {other}"),
        }
    }
}

#[test]
fn the_embedded_default_is_a_single_node_on_9092() {
    let c = NodeConfig::single_node_default();
    assert_eq!(c.kafka_listen.port(), 9092);
    assert_eq!(c.member_ids(), vec![1]);
    assert_eq!(c.storage.sync, SyncMode::Always);
}

#[test]
fn the_consumer_group_migration_policy_is_kafkas() {
    let with = |v: &str| {
        NodeConfig::from_toml(&format!(
            "{THREE}\n[kafka]\nconsumer_group_migration_policy = \"{v}\"\n"
        ))
    };
    assert_eq!(
        NodeConfig::from_toml(THREE)
            .unwrap()
            .kafka
            .consumer_group_migration_policy,
        MigrationPolicy::Bidirectional
    );
    for (v, policy) in [
        ("bidirectional", MigrationPolicy::Bidirectional),
        ("upgrade", MigrationPolicy::Upgrade),
        ("DOWNGRADE", MigrationPolicy::Downgrade),
        ("disabled", MigrationPolicy::Disabled),
    ] {
        assert_eq!(
            with(v).unwrap().kafka.consumer_group_migration_policy,
            policy
        );
    }
    assert!(with("sideways").is_err());
    assert!(MigrationPolicy::Upgrade.upgrade_enabled());
    assert!(!MigrationPolicy::Upgrade.downgrade_enabled());
    assert!(!MigrationPolicy::Disabled.upgrade_enabled());
}
