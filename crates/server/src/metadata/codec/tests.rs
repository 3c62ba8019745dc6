//! Round trips of every command and of snapshots, the fixed bytes of the format, and the JSON
//! entries of older releases.

use std::collections::BTreeMap;

use super::*;
use crate::flow::settings::{EntityName, FlowLimits, QuotaAlteration, QuotaEntity};
use crate::metadata::{CommittedOffset, GroupMemberRecord, GroupRecord};
use crate::security::acl::AclBinding;

fn request(seq: u64) -> RequestId {
    RequestId {
        node: 3,
        boot: 0xdead_beef_0042,
        seq,
    }
}

/// One command of every kind, with values that differ from the protobuf defaults and some
/// that equal them (0, empty, None), so both encodings are exercised.
fn every_command() -> Vec<MetaCommand> {
    vec![
        MetaCommand::CreateTopic {
            name: "orders".into(),
            partitions: 12,
            replicas: vec![vec![1, 2, 3], vec![3, 1, 2], vec![2, 3, 1]],
            configs: [("retention.ms".to_string(), "-1".to_string())].into(),
        },
        MetaCommand::CreateTopic {
            name: String::new(),
            partitions: 0,
            replicas: vec![],
            configs: BTreeMap::new(),
        },
        MetaCommand::CreatePartitions {
            name: "orders".into(),
            incarnation: u64::MAX,
            count: 40,
            replicas: vec![vec![5, 1, 2], vec![u64::MAX]],
        },
        MetaCommand::DeleteTopic {
            name: "orders".into(),
            incarnation: Some(0),
        },
        MetaCommand::DeleteTopic {
            name: "gone".into(),
            incarnation: None,
        },
        MetaCommand::AllocateProducerId,
        MetaCommand::CommitOffsets {
            group: "g".into(),
            offsets: vec![
                CommittedOffset {
                    topic: "orders".into(),
                    partition: 7,
                    offset: i64::MAX,
                    leader_epoch: -1,
                    metadata: Some(String::new()),
                },
                CommittedOffset {
                    topic: "\u{e9}t\u{e9}".into(),
                    partition: -1,
                    offset: 0,
                    leader_epoch: 5,
                    metadata: None,
                },
            ],
            commit_time_ms: 1_795_000_000_123,
        },
        MetaCommand::CommitOffsets {
            group: String::new(),
            offsets: Vec::new(),
            commit_time_ms: 0,
        },
        MetaCommand::AlterTopicConfigs {
            name: "orders".into(),
            incarnation: 9,
            set: [("segment.bytes".to_string(), "1048576".to_string())].into(),
            remove: vec!["retention.ms".into()],
            replace_all: false,
        },
        MetaCommand::AlterTopicConfigs {
            name: "orders".into(),
            incarnation: 0,
            set: BTreeMap::new(),
            remove: Vec::new(),
            replace_all: true,
        },
        MetaCommand::DeleteRecords {
            name: "orders".into(),
            incarnation: 3,
            partition: 2,
            offset: u64::MAX,
        },
        MetaCommand::DeleteGroupOffsets {
            group: "g".into(),
            partitions: None,
        },
        MetaCommand::ElectPreferredLeader {
            name: "orders".into(),
            incarnation: 5,
            partition: 0,
        },
        MetaCommand::TransferLeader {
            name: "orders".into(),
            incarnation: 5,
            partition: 1,
            to: 3,
        },
        MetaCommand::AdminAddress {
            node: 2,
            address: "127.0.0.1:9293".into(),
        },
        MetaCommand::CommitTxnOffsets {
            group: "g".into(),
            producer_id: i64::MAX,
            producer_epoch: i16::MIN,
            offsets: vec![CommittedOffset {
                topic: "orders".into(),
                partition: 3,
                offset: 42,
                leader_epoch: -1,
                metadata: None,
            }],
            commit_time_ms: 1_795_000_000_123,
        },
        MetaCommand::CommitTxnOffsets {
            group: String::new(),
            producer_id: 0,
            producer_epoch: 0,
            offsets: Vec::new(),
            commit_time_ms: 0,
        },
        MetaCommand::EndTxnOffsets {
            producer_id: 1000,
            groups: Some(vec!["g".into(), String::new()]),
            commit: true,
        },
        MetaCommand::EndTxnOffsets {
            producer_id: -1,
            groups: None,
            commit: false,
        },
        // An empty list is not "every group".
        MetaCommand::EndTxnOffsets {
            producer_id: 5,
            groups: Some(Vec::new()),
            commit: true,
        },
        MetaCommand::DeleteGroupOffsets {
            group: "g".into(),
            partitions: Some(vec![("orders".into(), 1)]),
        },
        MetaCommand::DeleteGroupOffsets {
            group: "g".into(),
            partitions: Some(Vec::new()),
        },
        MetaCommand::StoreGroup {
            group: "g".into(),
            record: Some(GroupRecord {
                generation: 7,
                protocol_type: "consumer".into(),
                protocol: "range".into(),
                leader: "m1".into(),
                members: vec![
                    GroupMemberRecord {
                        member_id: "m1".into(),
                        instance_id: Some("i1".into()),
                        client_id: "c".into(),
                        client_host: "/127.0.0.1".into(),
                        session_timeout_ms: 45_000,
                        rebalance_timeout_ms: i32::MAX,
                        protocols: vec![
                            ("range".into(), vec![0, 1, 255]),
                            ("cooperative-sticky".into(), Vec::new()),
                        ],
                        assignment: vec![9; 40],
                    },
                    GroupMemberRecord {
                        member_id: String::new(),
                        instance_id: None,
                        client_id: String::new(),
                        client_host: String::new(),
                        session_timeout_ms: 0,
                        rebalance_timeout_ms: -1,
                        protocols: Vec::new(),
                        assignment: Vec::new(),
                    },
                ],
            }),
            time_ms: 1_795_000_000_000,
        },
        MetaCommand::StoreGroup {
            group: "g".into(),
            record: None,
            time_ms: 0,
        },
        MetaCommand::StoreConsumerGroup {
            group: "cg".into(),
            record: Some(crate::metadata::codec::ConsumerGroupRecord {
                group_epoch: 5,
                assignment_epoch: 4,
                assignor: "uniform".into(),
                members: vec![crate::metadata::codec::ConsumerMemberRecord {
                    member_id: "m".into(),
                    instance_id: Some("i".into()),
                    rack: None,
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    subscribed_names: vec!["t".into()],
                    subscribed_regex: Some("t.*".into()),
                    server_assignor: None,
                    rebalance_timeout_ms: 300_000,
                    epoch: 4,
                    previous_epoch: 3,
                    state: 1,
                    assigned: vec![crate::metadata::codec::TopicPartitionsRecord {
                        topic_id: vec![7; 16],
                        partitions: vec![0, 2],
                    }],
                    pending_revocation: vec![crate::metadata::codec::TopicPartitionsRecord {
                        topic_id: vec![7; 16],
                        partitions: vec![1],
                    }],
                    target: Vec::new(),
                    classic: Some(crate::metadata::codec::ClassicMemberRecord {
                        session_timeout_ms: 10_000,
                        protocols: vec![crate::metadata::codec::ClassicProtocolRecord {
                            name: "range".into(),
                            metadata: vec![0, 0, 0, 0, 0, 0],
                        }],
                    }),
                }],
                partition_counts: vec![crate::metadata::codec::TopicPartitionCount {
                    topic_id: vec![7; 16],
                    partitions: 3,
                }],
            }),
            time_ms: 1_795_000_000_000,
        },
        MetaCommand::StoreConsumerGroup {
            group: "cg".into(),
            record: None,
            time_ms: 0,
        },
        MetaCommand::ExpireGroupOffsets {
            group: "g".into(),
            activity_ms: 1_795_000_000_000,
        },
        MetaCommand::CreateAcls {
            acls: vec![
                AclBinding::from_kafka(2, "orders-", 4, "User:alice", "*", 3, 3).unwrap(),
                AclBinding::from_kafka(4, "kafka-cluster", 3, "User:*", "10.0.0.1", 2, 2).unwrap(),
            ],
        },
        MetaCommand::DeleteAcls { acls: vec![] },
        MetaCommand::DeleteAcls {
            acls: vec![AclBinding::from_kafka(3, "g", 3, "User:b", "*", 8, 3).unwrap()],
        },
        MetaCommand::UpsertScramCredential {
            user: "alice".into(),
            mechanism: 2,
            salt: vec![1, 2, 3],
            iterations: 8192,
            stored_key: vec![7; 64],
            server_key: vec![9; 64],
        },
        MetaCommand::DeleteScramCredential {
            user: "alice".into(),
            mechanism: 1,
        },
        MetaCommand::ImportScramUsers {
            credentials: vec![crate::security::scram_import::ImportedCredential {
                user: "admin".into(),
                mechanism: 1,
                salt: vec![4, 5],
                iterations: 4096,
                stored_key: vec![1; 32],
                server_key: vec![2; 32],
            }],
        },
        MetaCommand::ImportScramUsers {
            credentials: vec![],
        },
        MetaCommand::PutTransaction {
            transactional_id: "tx-1".into(),
            record: crate::metadata::TxnRecord {
                producer_id: 1_000,
                producer_epoch: i16::MAX,
                timeout_ms: 60_000,
                status: crate::metadata::TxnStatus::PrepareCommit,
                partitions: [("orders".to_string(), 3), ("audit".to_string(), 0)].into(),
                groups: ["g".to_string()].into(),
                start_ms: 1_700_000_000_000,
                update_ms: 1_700_000_000_500,
                coordinator_epoch: 4,
                transaction_version: 2,
                next_producer_id: Some(2_000),
                previous_producer_id: Some(500),
            },
        },
        MetaCommand::PutTransaction {
            transactional_id: String::new(),
            record: crate::metadata::TxnRecord {
                producer_id: 0,
                producer_epoch: 0,
                timeout_ms: 0,
                status: crate::metadata::TxnStatus::Empty,
                partitions: Default::default(),
                groups: Default::default(),
                start_ms: -1,
                update_ms: 0,
                coordinator_epoch: 0,
                transaction_version: 0,
                next_producer_id: None,
                previous_producer_id: None,
            },
        },
        MetaCommand::RequestTxnPartitions {
            transactional_id: "tx-1".into(),
            producer_id: 1_000,
            producer_epoch: 3,
            partitions: vec![("orders".into(), 3), ("audit".into(), 0)],
        },
        MetaCommand::TxnMarkersWritten {
            transactional_id: "tx-1".into(),
            producer_id: 1_000,
            producer_epoch: -1,
            partitions: vec![("orders".into(), 3)],
            time_ms: 5,
        },
        MetaCommand::ExpireTransactionalId {
            transactional_id: "tx-1".into(),
            producer_id: 1_000,
            producer_epoch: 7,
            update_ms: 1_800_000_000_000,
        },
        MetaCommand::SetFlowLimits {
            limits: FlowLimits {
                produce_requests_per_sec: Some(10),
                catchup_read_bytes_per_sec: Some(1 << 30),
                ..FlowLimits::default()
            },
        },
        MetaCommand::SetFlowLimits {
            limits: FlowLimits::default(),
        },
        MetaCommand::AlterClientQuotas {
            alterations: vec![QuotaAlteration {
                entity: QuotaEntity {
                    user: Some(EntityName::Default),
                    client_id: Some(EntityName::Named("app".into())),
                },
                set: vec![("consumer_byte_rate".into(), 4096.0)],
                remove: vec!["producer_byte_rate".into()],
            }],
        },
    ]
}

/// With `VDL_FUZZ_SEEDS_DIR` set, writes every command's encoded entry (protobuf and
/// JSON) there as seeds for the `metadata_command` fuzz target (fuzz/seed-corpus.sh);
/// otherwise checks only that they decode.
#[test]
fn fuzz_seeds_decode() {
    let dir = std::env::var_os("VDL_FUZZ_SEEDS_DIR").map(std::path::PathBuf::from);
    for (seq, command) in every_command().into_iter().enumerate() {
        let entry = MetaEntry {
            request: request(seq as u64),
            command,
        };
        for (kind, bytes) in [
            ("pb", encode_entry(&entry)),
            ("json", encode_entry_json(&entry)),
        ] {
            decode_entry(&bytes).unwrap();
            if let Some(dir) = &dir {
                std::fs::write(dir.join(format!("entry-{seq:02}-{kind}")), &bytes).unwrap();
            }
        }
    }
}

#[test]
fn every_command_round_trips_with_its_request_id() {
    for (seq, command) in every_command().into_iter().enumerate() {
        let entry = MetaEntry {
            request: request(seq as u64),
            command: command.clone(),
        };
        let bytes = encode_entry(&entry);
        assert_eq!(bytes[0], FORMAT_PROST_V1);
        assert_eq!(
            decode_entry(&bytes).unwrap(),
            (Some(request(seq as u64)), command)
        );
    }
}

/// What a node writes while an earlier release runs in the cluster is exactly that
/// release's JSON, and decodes to the same entry.
#[test]
fn json_written_for_earlier_releases_round_trips() {
    for (seq, command) in every_command().into_iter().enumerate() {
        let entry = MetaEntry {
            request: request(seq as u64),
            command: command.clone(),
        };
        let json = encode_entry_json(&entry);
        assert_eq!(json, serde_json::to_vec(&entry).unwrap());
        assert!(json.starts_with(b"{"));
        assert_eq!(
            decode_entry(&json).unwrap(),
            (Some(request(seq as u64)), command)
        );
    }
}

/// Entries as earlier versions wrote them (JSON with a request id, and bare commands from
/// before request ids) decode to what they decoded to before.
#[test]
fn json_entries_of_older_versions_still_decode() {
    for (seq, command) in every_command().into_iter().enumerate() {
        let entry = MetaEntry {
            request: request(seq as u64),
            command: command.clone(),
        };
        let json = serde_json::to_vec(&entry).unwrap();
        assert_eq!(
            decode_entry(&json).unwrap(),
            (Some(request(seq as u64)), command.clone())
        );
        let bare = serde_json::to_vec(&command).unwrap();
        assert_eq!(decode_entry(&bare).unwrap(), (None, command));
    }
    // Literal bytes as versions before partitions and incarnations wrote them.
    let cases: [(&[u8], MetaCommand); 4] = [
        (
            br#"{"CreateTopic":{"name":"x"}}"#,
            MetaCommand::CreateTopic {
                name: "x".into(),
                partitions: 1,
                replicas: vec![],
                configs: BTreeMap::new(),
            },
        ),
        (
            br#"{"DeleteTopic":{"name":"x"}}"#,
            MetaCommand::DeleteTopic {
                name: "x".into(),
                incarnation: None,
            },
        ),
        (br#""AllocateProducerId""#, MetaCommand::AllocateProducerId),
        (
            br#"{"request":{"node":2,"boot":9,"seq":4},"command":{"CreateTopic":{"name":"y","partitions":3}}}"#,
            MetaCommand::CreateTopic {
                name: "y".into(),
                partitions: 3,
                replicas: vec![],
                configs: BTreeMap::new(),
            },
        ),
    ];
    for (bytes, command) in cases {
        assert_eq!(decode_entry(bytes).unwrap().1, command);
    }
}

/// The field numbers are the on-disk format: these bytes must decode the same forever.
#[test]
fn field_numbers_are_fixed() {
    let entry = MetaEntry {
        request: RequestId {
            node: 1,
            boot: 2,
            seq: 3,
        },
        command: MetaCommand::CreateTopic {
            name: "t".into(),
            partitions: 4,
            replicas: vec![],
            configs: BTreeMap::new(),
        },
    };
    // 0x01 | field 1 (request) {1: 1, 2: 2, 3: 3} | field 2 (create_topic) {1: "t", 2: 4}
    let expected = [
        0x01, 0x0a, 0x06, 0x08, 0x01, 0x10, 0x02, 0x18, 0x03, 0x12, 0x05, 0x0a, 0x01, b't', 0x10,
        0x04,
    ];
    assert_eq!(encode_entry(&entry), expected);
    assert_eq!(
        decode_entry(&expected).unwrap(),
        (Some(entry.request), entry.command)
    );
    // StoreGroup is field 11: 0x5a = (11 << 3) | 2.
    let store = MetaEntry {
        request: entry.request,
        command: MetaCommand::StoreGroup {
            group: "g".into(),
            record: None,
            time_ms: 0,
        },
    };
    let expected = [
        0x01, 0x0a, 0x06, 0x08, 0x01, 0x10, 0x02, 0x18, 0x03, 0x5a, 0x03, 0x0a, 0x01, b'g',
    ];
    assert_eq!(encode_entry(&store), expected);
    // DeleteScramCredential is field 16: 0x82 0x01 = (16 << 3) | 2.
    let delete = MetaEntry {
        request: entry.request,
        command: MetaCommand::DeleteScramCredential {
            user: "u".into(),
            mechanism: 2,
        },
    };
    let expected = [
        0x01, 0x0a, 0x06, 0x08, 0x01, 0x10, 0x02, 0x18, 0x03, 0x82, 0x01, 0x05, 0x0a, 0x01, b'u',
        0x10, 0x02,
    ];
    assert_eq!(encode_entry(&delete), expected);
    // TxnMarkersWritten is field 43: 0xda 0x02 = (43 << 3) | 2, then its length and
    // transactional id "t" (field 1).
    let markers = MetaEntry {
        request: entry.request,
        command: MetaCommand::TxnMarkersWritten {
            transactional_id: "t".into(),
            producer_id: 0,
            producer_epoch: 0,
            partitions: vec![],
            time_ms: 0,
        },
    };
    let expected = [
        0x01, 0x0a, 0x06, 0x08, 0x01, 0x10, 0x02, 0x18, 0x03, 0xda, 0x02, 0x03, 0x0a, 0x01, b't',
    ];
    assert_eq!(encode_entry(&markers), expected);
    // StoreConsumerGroup is field 46: 0xf2 0x02 = (46 << 3) | 2, then its length and group
    // "g" (field 1); a node that does not know field 46 skips the entry.
    let consumer = MetaEntry {
        request: entry.request,
        command: MetaCommand::StoreConsumerGroup {
            group: "g".into(),
            record: None,
            time_ms: 0,
        },
    };
    let expected = [
        0x01, 0x0a, 0x06, 0x08, 0x01, 0x10, 0x02, 0x18, 0x03, 0xf2, 0x02, 0x03, 0x0a, 0x01, b'g',
    ];
    assert_eq!(encode_entry(&consumer), expected);
}

#[test]
fn unknown_kinds_formats_and_damaged_entries_are_errors() {
    // A newer version's command kind (field 100) with a request id: no command we know.
    let newer = [FORMAT_PROST_V1, 0x0a, 0x02, 0x08, 0x01, 0xa2, 0x06, 0x00];
    assert!(matches!(
        decode_entry(&newer),
        Err(MetaDecodeError::UnknownCommand)
    ));
    // Unknown fields inside a known command are ignored.
    let extra = [
        FORMAT_PROST_V1,
        0x12,
        0x07,
        0x0a,
        0x01,
        b't',
        0x10,
        0x02,
        0x78,
        0x05, // field 15 of CreateTopic, varint 5: unknown to this version
    ];
    assert_eq!(
        decode_entry(&extra).unwrap(),
        (
            None,
            MetaCommand::CreateTopic {
                name: "t".into(),
                partitions: 2,
                replicas: vec![],
                configs: BTreeMap::new(),
            }
        )
    );
    assert!(matches!(decode_entry(&[]), Err(MetaDecodeError::Empty)));
    assert!(matches!(
        decode_entry(&[0x02, 0x00]),
        Err(MetaDecodeError::UnknownFormat(0x02))
    ));
    assert!(matches!(
        decode_entry(b"{not json"),
        Err(MetaDecodeError::Json(_))
    ));
    // Every truncation of a valid entry is an error or a shorter valid entry, never a panic.
    let full = encode_entry(&MetaEntry {
        request: request(1),
        command: every_command().remove(6),
    });
    for cut in 1..full.len() {
        let _ = decode_entry(&full[..cut]);
    }
    // A length claim past the end, and a name that is not UTF-8.
    assert!(decode_entry(&[FORMAT_PROST_V1, 0x12, 0x7f]).is_err());
    assert!(decode_entry(&[FORMAT_PROST_V1, 0x12, 0x03, 0x0a, 0x01, 0xff]).is_err());
}
