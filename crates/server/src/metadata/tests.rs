use std::collections::BTreeMap;

use crate::security::acl::AclBinding;
use crate::security::scram::ScramMechanism;

use super::*;

pub(super) fn id(seq: u64) -> Option<RequestId> {
    Some(RequestId {
        node: 1,
        boot: 42,
        seq,
    })
}

pub(super) fn create(name: &str) -> MetaCommand {
    MetaCommand::CreateTopic {
        name: name.into(),
        partitions: 1,
        replicas: Vec::new(),
        configs: BTreeMap::new(),
    }
}

/// Item 11 of the lifecycle issue: a retried command (same request id) applies once, and a
/// delete naming an older incarnation leaves the newer one alone.
#[test]
fn retries_apply_once_and_deletes_name_their_incarnation() {
    let mut m = ClusterMeta::default();
    assert!(m.apply(5, id(1), create("t")).is_some());
    let delete_old = MetaCommand::DeleteTopic {
        name: "t".into(),
        incarnation: Some(5),
    };
    assert!(m.apply(6, id(2), delete_old.clone()).is_some());
    assert!(m.apply(9, id(3), create("t")).is_some());
    assert_eq!(m.incarnation("t"), Some(9));
    // The delete retried with its request id: nothing happens.
    assert!(m.apply(10, id(2), delete_old.clone()).is_none());
    // The same delete under a new id (a client retry): the current incarnation stays.
    m.apply(11, id(4), delete_old);
    assert_eq!(m.incarnation("t"), Some(9));
    // A producer id allocation retried applies once.
    m.apply(12, id(5), MetaCommand::AllocateProducerId);
    m.apply(13, id(5), MetaCommand::AllocateProducerId);
    assert_eq!(m.next_producer_id, FIRST_PRODUCER_ID + 1);
    assert_eq!(m.allocations.get(&id(5).unwrap()), Some(&FIRST_PRODUCER_ID));
    // Old log entries without ids still decode.
    let bare = serde_json::to_vec(&create("x")).unwrap();
    assert_eq!(MetaEntry::decode(&bare).unwrap(), (None, create("x")));
    let old_delete = br#"{"DeleteTopic":{"name":"x"}}"#;
    assert_eq!(
        MetaEntry::decode(old_delete).unwrap().1,
        MetaCommand::DeleteTopic {
            name: "x".into(),
            incarnation: None
        }
    );
}

/// Partitions only grow, and only for the incarnation the request named; old create
/// commands (before partitions) mean one partition.
#[test]
fn partitions_grow_for_the_named_incarnation_only() {
    let mut m = ClusterMeta::default();
    let created = MetaCommand::CreateTopic {
        name: "t".into(),
        partitions: 3,
        replicas: Vec::new(),
        configs: BTreeMap::new(),
    };
    assert!(m.apply(4, id(1), created).is_some());
    let grow = |incarnation, count| MetaCommand::CreatePartitions {
        name: "t".into(),
        incarnation,
        count,
        replicas: Vec::new(),
    };
    assert!(m.apply(5, id(2), grow(4, 2)).is_none(), "shrinking");
    assert!(
        m.apply(6, id(3), grow(3, 8)).is_none(),
        "another incarnation"
    );
    assert_eq!(m.topics["t"].partitions, 3);
    assert!(m.apply(7, id(4), grow(4, 5)).is_some());
    assert_eq!(m.topics["t"].partitions, 5);
    assert_eq!(m.total_partitions(), 5);
    let old_create = br#"{"CreateTopic":{"name":"x"}}"#;
    assert_eq!(
        MetaEntry::decode(old_create).unwrap().1,
        MetaCommand::CreateTopic {
            name: "x".into(),
            partitions: 1,
            replicas: Vec::new(),
            configs: BTreeMap::new(),
        }
    );
}

/// Replica lists travel in the commands: stored as given, refused when malformed, every
/// member for commands from before placement; growth takes the lists of the new partitions
/// only, by partition index, so two racing grow requests agree.
#[test]
fn replica_lists_come_from_the_commands() {
    let mut m = ClusterMeta::new(vec![3, 1, 2, 4, 5]);
    let lists = crate::replication::placement::assign(&[1, 2, 3, 4, 5], 3, 0, 4, 2, 1);
    let create = |name: &str, replicas: Vec<Vec<u64>>| MetaCommand::CreateTopic {
        name: name.into(),
        partitions: replicas.len().max(1) as u32,
        replicas,
        configs: BTreeMap::new(),
    };
    assert!(m.apply(1, id(1), create("t", lists.clone())).is_some());
    assert_eq!(m.topics["t"].replicas, lists);
    // Malformed: node id 0, a duplicate, a partition without replicas. An id this node
    // does not know is applied (a node that joined later replays commands from before it
    // knew every member; see `resolve_replicas`).
    assert!(m.apply(2, id(2), create("bad", vec![vec![1, 0]])).is_none());
    assert!(m
        .apply(2, id(20), create("bad", vec![vec![1, 1]]))
        .is_none());
    assert!(m.apply(3, id(3), create("bad", vec![vec![]])).is_none());
    assert!(!m.topics.contains_key("bad"));
    // Before placement: every member, rotated.
    assert!(m.apply(4, id(4), create("old", Vec::new())).is_some());
    assert_eq!(m.topics["old"].replicas[0].len(), 5);
    let all = crate::replication::placement::assign(&[1, 2, 3, 4, 5], 3, 0, 8, 2, 1);
    let grow = |count: u32, replicas: Vec<Vec<u64>>| MetaCommand::CreatePartitions {
        name: "t".into(),
        incarnation: 1,
        count,
        replicas,
    };
    assert!(m.apply(5, id(5), grow(6, all[..6].to_vec())).is_some());
    // A request made when the topic had 4 partitions, applied after it grew to 6.
    assert!(m.apply(6, id(6), grow(8, all.clone())).is_some());
    assert_eq!(m.topics["t"].replicas, all);
    assert!(
        m.apply(7, id(7), grow(9, all.clone())).is_none(),
        "8 lists for 9"
    );
    assert_eq!(m.topics["t"].partitions, 8);
    // Encoded without the field when empty, so older nodes read new commands of old shape.
    let json = serde_json::to_string(&create("x", Vec::new())).unwrap();
    assert!(!json.contains("replicas"), "{json}");
}

/// Item 6: deleting a topic removes every group's committed offsets for it.
#[test]
fn a_deleted_topics_offsets_are_removed() {
    let mut m = ClusterMeta::default();
    m.apply(1, id(1), create("t"));
    let offset = |topic: &str| CommittedOffset {
        topic: topic.into(),
        partition: 0,
        offset: 100,
        leader_epoch: -1,
        metadata: None,
    };
    m.apply(
        2,
        id(2),
        MetaCommand::CommitOffsets {
            group: "g".into(),
            offsets: vec![offset("t"), offset("other")],
            commit_time_ms: 0,
        },
    );
    m.apply(
        3,
        id(3),
        MetaCommand::DeleteTopic {
            name: "t".into(),
            incarnation: Some(1),
        },
    );
    let g = &m.offsets["g"];
    assert!(!g.contains_key(&("t".to_string(), 0)));
    assert!(g.contains_key(&("other".to_string(), 0)));
}

/// Topic configs: set at creation, changed incrementally or replaced, only for the named
/// incarnation; invalid values never stored. DeleteRecords only raises a partition's floor.
/// Group offsets go per partition or all at once.
#[test]
fn configs_records_floors_and_group_offsets_follow_their_commands() {
    let mut m = ClusterMeta::default();
    let configs: BTreeMap<String, String> = [
        ("retention.ms".to_string(), "1000".to_string()),
        ("no.such".to_string(), "1".to_string()),
    ]
    .into();
    m.apply(
        1,
        id(1),
        MetaCommand::CreateTopic {
            name: "t".into(),
            partitions: 2,
            replicas: Vec::new(),
            configs,
        },
    );
    assert_eq!(
        m.topics["t"].configs.len(),
        1,
        "the unknown name is dropped"
    );
    let alter = |incarnation, set: &[(&str, &str)], remove: &[&str], replace_all| {
        MetaCommand::AlterTopicConfigs {
            name: "t".into(),
            incarnation,
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            remove: remove.iter().map(|k| k.to_string()).collect(),
            replace_all,
        }
    };
    assert!(m
        .apply(
            2,
            id(2),
            alter(1, &[("segment.bytes", "2097152")], &[], false)
        )
        .is_some());
    assert_eq!(m.topics["t"].configs.len(), 2);
    assert!(m
        .apply(3, id(3), alter(7, &[("retention.ms", "5")], &[], false))
        .is_none());
    m.apply(4, id(4), alter(1, &[], &["retention.ms"], false));
    assert_eq!(
        m.topics["t"].configs.keys().collect::<Vec<_>>(),
        ["segment.bytes"]
    );
    m.apply(5, id(5), alter(1, &[("retention.ms", "9")], &[], true));
    assert_eq!(
        m.topics["t"].configs.keys().collect::<Vec<_>>(),
        ["retention.ms"]
    );
    let delete = |partition, offset| MetaCommand::DeleteRecords {
        name: "t".into(),
        incarnation: 1,
        partition,
        offset,
    };
    assert!(m.apply(6, id(6), delete(1, 50)).is_some());
    assert!(m.apply(7, id(7), delete(1, 40)).is_none(), "never lowered");
    assert!(m.apply(8, id(8), delete(2, 40)).is_none(), "no partition 2");
    assert_eq!(m.topics["t"].deleted_before(1), 50);
    assert_eq!(m.topics["t"].deleted_before(0), 0);
    let offset = |partition| CommittedOffset {
        topic: "t".into(),
        partition,
        offset: 1,
        leader_epoch: -1,
        metadata: None,
    };
    m.apply(
        9,
        id(9),
        MetaCommand::CommitOffsets {
            group: "g".into(),
            offsets: vec![offset(0), offset(1)],
            commit_time_ms: 0,
        },
    );
    m.apply(
        10,
        id(10),
        MetaCommand::DeleteGroupOffsets {
            group: "g".into(),
            partitions: Some(vec![("t".into(), 0)]),
        },
    );
    assert_eq!(m.offsets["g"].len(), 1);
    m.apply(
        11,
        id(11),
        MetaCommand::DeleteGroupOffsets {
            group: "g".into(),
            partitions: None,
        },
    );
    assert!(!m.offsets.contains_key("g"));
}

/// Issue 20 item 1: a group's membership is stored, replaced and forgotten by its commands.
#[test]
fn group_membership_is_stored_and_forgotten() {
    let mut m = ClusterMeta::default();
    let record = |generation| GroupRecord {
        generation,
        protocol_type: "consumer".into(),
        protocol: "range".into(),
        leader: "m1".into(),
        members: vec![GroupMemberRecord {
            member_id: "m1".into(),
            instance_id: Some("i1".into()),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 300_000,
            protocols: vec![("range".into(), vec![0, 1])],
            assignment: vec![2, 3],
        }],
    };
    let store = |record| MetaCommand::StoreGroup {
        group: "g".into(),
        record,
        time_ms: 0,
    };
    m.apply(1, id(1), store(Some(record(1))));
    m.apply(2, id(2), store(Some(record(2))));
    assert_eq!(m.groups["g"], record(2));
    m.apply(3, id(3), store(None));
    assert!(m.groups.is_empty());
    m.apply(4, id(4), store(Some(record(3))));
    m.apply(
        5,
        id(5),
        MetaCommand::DeleteGroupOffsets {
            group: "g".into(),
            partitions: None,
        },
    );
    assert!(m.groups.is_empty(), "DeleteGroups forgets the group");
}

/// Issue 20 item 5: offsets of a group without members expire once its last activity is
/// older than the retention, unless it was active again or has a stored membership by the
/// time the expiry applies; offsets without a recorded time never expire.
#[test]
fn idle_groups_offsets_expire_unless_active_again() {
    let mut m = ClusterMeta::default();
    let commit = |group: &str, at| MetaCommand::CommitOffsets {
        group: group.into(),
        offsets: vec![CommittedOffset {
            topic: "t".into(),
            partition: 0,
            offset: 5,
            leader_epoch: -1,
            metadata: None,
        }],
        commit_time_ms: at,
    };
    m.apply(1, id(1), commit("idle", 1_000));
    m.apply(2, id(2), commit("busy", 1_000));
    m.apply(3, id(3), commit("old", 0));
    // An empty barrier is no activity.
    m.apply(
        4,
        id(4),
        MetaCommand::CommitOffsets {
            group: "idle".into(),
            offsets: Vec::new(),
            commit_time_ms: 50_000,
        },
    );
    let mut due = m.expired_groups(11_000, 10_000, 10);
    due.sort();
    assert_eq!(
        due,
        vec![("busy".to_string(), 1_000), ("idle".to_string(), 1_000)]
    );
    assert!(m.expired_groups(10_999, 10_000, 10).is_empty());
    // "busy" commits again before its expiry applies; "idle" gets members stored.
    m.apply(5, id(5), commit("busy", 10_500));
    let expire = |group: &str, activity_ms| MetaCommand::ExpireGroupOffsets {
        group: group.into(),
        activity_ms,
    };
    m.apply(6, id(6), expire("busy", 1_000));
    assert!(m.offsets.contains_key("busy"), "active again: kept");
    m.apply(7, id(7), expire("idle", 1_000));
    assert!(!m.offsets.contains_key("idle"), "idle: expired");
    assert!(!m.group_activity_ms.contains_key("idle"));
    assert!(m
        .expired_groups(i64::MAX, 10_000, 10)
        .iter()
        .all(|(g, _)| g != "old"));
    // A group with a stored membership keeps its offsets.
    m.apply(8, id(8), commit("members", 1_000));
    m.apply(
        9,
        id(9),
        MetaCommand::StoreGroup {
            group: "members".into(),
            record: Some(GroupRecord {
                generation: 1,
                protocol_type: "consumer".into(),
                protocol: "range".into(),
                leader: "m".into(),
                members: vec![GroupMemberRecord {
                    member_id: "m".into(),
                    instance_id: None,
                    client_id: String::new(),
                    client_host: String::new(),
                    session_timeout_ms: 10_000,
                    rebalance_timeout_ms: 10_000,
                    protocols: Vec::new(),
                    assignment: Vec::new(),
                }],
            }),
            time_ms: 2_000,
        },
    );
    assert_eq!(m.group_activity_ms["members"], 2_000);
    m.apply(10, id(10), expire("members", 2_000));
    assert!(m.offsets.contains_key("members"));
}

/// A command list touching every kind of state: topics with configs, partitions grown,
/// floors, a topic deleted and created again, producer ids (one retried), offsets with and
/// without times, stored and forgotten groups, expiry, and a retried commit.
fn history() -> Vec<(u64, Option<RequestId>, MetaCommand)> {
    let commit = |group: &str, topic: &str, partition, offset, at| MetaCommand::CommitOffsets {
        group: group.into(),
        offsets: vec![CommittedOffset {
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: 3,
            metadata: Some(format!("m{offset}")),
        }],
        commit_time_ms: at,
    };
    let member = GroupMemberRecord {
        member_id: "m1".into(),
        instance_id: Some("i1".into()),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 300_000,
        protocols: vec![("range".into(), vec![0, 1])],
        assignment: vec![2, 3],
    };
    let store = |group: &str, generation| MetaCommand::StoreGroup {
        group: group.into(),
        record: Some(GroupRecord {
            generation,
            protocol_type: "consumer".into(),
            protocol: "range".into(),
            leader: "m1".into(),
            members: vec![member.clone()],
        }),
        time_ms: 5_000 + i64::from(generation),
    };
    let mut cmds = vec![
        MetaCommand::CreateTopic {
            name: "t".into(),
            partitions: 2,
            replicas: Vec::new(),
            configs: [("retention.ms".to_string(), "1000".to_string())].into(),
        },
        MetaCommand::CreateTopic {
            name: "gone".into(),
            partitions: 1,
            replicas: Vec::new(),
            configs: BTreeMap::new(),
        },
        MetaCommand::AllocateProducerId,
        MetaCommand::CreatePartitions {
            name: "t".into(),
            incarnation: 1,
            count: 3,
            replicas: Vec::new(),
        },
        MetaCommand::DeleteRecords {
            name: "t".into(),
            incarnation: 1,
            partition: 1,
            offset: 77,
        },
        MetaCommand::AlterTopicConfigs {
            name: "t".into(),
            incarnation: 1,
            set: [("cleanup.policy".to_string(), "compact,delete".to_string())].into(),
            remove: Vec::new(),
            replace_all: false,
        },
        commit("g", "t", 0, 10, 1_000),
        commit("g", "gone", 0, 11, 1_000),
        commit("old", "t", 2, 12, 0),
        commit("idle", "t", 1, 13, 2_000),
        store("g", 1),
        MetaCommand::DeleteTopic {
            name: "gone".into(),
            incarnation: Some(2),
        },
        MetaCommand::AllocateProducerId,
        store("h", 4),
        MetaCommand::StoreGroup {
            group: "h".into(),
            record: None,
            time_ms: 0,
        },
        store("g", 2),
        MetaCommand::StoreConsumerGroup {
            group: "cg".into(),
            record: Some(super::consumer_groups_tests::consumer_record(3)),
            time_ms: 0,
        },
        MetaCommand::ExpireGroupOffsets {
            group: "idle".into(),
            activity_ms: 2_000,
        },
        MetaCommand::SetFlowLimits {
            limits: crate::flow::settings::FlowLimits {
                produce_bytes_per_sec: Some(1 << 20),
                tail_read_requests_per_sec: Some(100),
                ..Default::default()
            },
        },
        MetaCommand::AlterClientQuotas {
            alterations: vec![
                crate::flow::settings::QuotaAlteration {
                    entity: crate::flow::settings::QuotaEntity {
                        user: Some(crate::flow::settings::EntityName::Named("alice".into())),
                        client_id: Some(crate::flow::settings::EntityName::Default),
                    },
                    set: vec![
                        ("producer_byte_rate".into(), 1024.0),
                        ("request_percentage".into(), 12.5),
                    ],
                    remove: vec![],
                },
                crate::flow::settings::QuotaAlteration {
                    entity: crate::flow::settings::QuotaEntity {
                        user: None,
                        client_id: Some(crate::flow::settings::EntityName::Named("x".into())),
                    },
                    set: vec![("consumer_byte_rate".into(), 2048.0)],
                    remove: vec![],
                },
            ],
        },
        MetaCommand::CreateTopic {
            name: "gone".into(),
            partitions: 1,
            replicas: Vec::new(),
            configs: BTreeMap::new(),
        },
        MetaCommand::CreateAcls {
            acls: vec![
                AclBinding::from_kafka(2, "t", 3, "User:a", "*", 3, 3).unwrap(),
                AclBinding::from_kafka(2, "t", 3, "User:b", "*", 3, 3).unwrap(),
                AclBinding::from_kafka(3, "g-", 4, "User:*", "*", 2, 2).unwrap(),
            ],
        },
        MetaCommand::DeleteAcls {
            acls: vec![AclBinding::from_kafka(2, "t", 3, "User:b", "*", 3, 3).unwrap()],
        },
        MetaCommand::UpsertScramCredential {
            user: "alice".into(),
            mechanism: 2,
            salt: vec![5; 16],
            iterations: 8192,
            stored_key: vec![1; 64],
            server_key: vec![2; 64],
        },
        MetaCommand::UpsertScramCredential {
            user: "bob".into(),
            mechanism: 1,
            salt: vec![6; 16],
            iterations: 4096,
            stored_key: vec![3; 32],
            server_key: vec![4; 32],
        },
        MetaCommand::DeleteScramCredential {
            user: "bob".into(),
            mechanism: 1,
        },
        // An unknown mechanism is not applied.
        MetaCommand::UpsertScramCredential {
            user: "carol".into(),
            mechanism: 9,
            salt: vec![],
            iterations: 4096,
            stored_key: vec![],
            server_key: vec![],
        },
        MetaCommand::AddMember {
            id: 4,
            name: "vdl4".into(),
            peer_addr: "127.0.0.1:9195".into(),
            kafka_addr: "127.0.0.1:9095".into(),
            members: BTreeMap::new(),
        },
        MetaCommand::RemoveMember {
            id: 1,
            members: BTreeMap::new(),
        },
        MetaCommand::FinishReassignment {
            name: "t".into(),
            incarnation: 1,
            partition: 0,
        },
    ];
    // Transactional offsets: one producer's committed, another's pending, partly superseded.
    cmds.extend(super::txn_offsets_tests::txn_history());
    cmds.extend((0..40).map(|i| commit("many", "t", i % 3, i64::from(i), 3_000 + i64::from(i))));
    let mut out: Vec<_> = (1u64..)
        .zip(cmds)
        .map(|(index, cmd)| (index, id(index), cmd))
        .collect();
    // Retries of earlier requests (an allocation, a commit: refused), one without an id.
    let n = out.len() as u64;
    out.push((n + 1, id(3), MetaCommand::AllocateProducerId));
    out.push((n + 2, id(7), commit("g", "t", 0, 999, 9_000)));
    out.push((n + 3, None, MetaCommand::AllocateProducerId));
    out
}

/// ACLs and SCRAM credentials stop at their bounds, on every node alike; what exists may
/// still be replaced or removed.
#[test]
fn acls_and_credentials_are_bounded() {
    use crate::security::acl::MAX_ACLS;
    use crate::security::scram::MAX_CREDENTIALS;
    let mut m = ClusterMeta::new(vec![1]);
    let binding =
        |i: usize| AclBinding::from_kafka(2, &format!("t{i}"), 3, "User:a", "*", 3, 3).unwrap();
    m.apply(
        1,
        id(1),
        MetaCommand::CreateAcls {
            acls: (0..=MAX_ACLS).map(binding).collect(),
        },
    );
    assert_eq!(m.acls.len(), MAX_ACLS);
    assert!(!m.acls.contains(&binding(MAX_ACLS)));
    m.apply(
        2,
        id(2),
        MetaCommand::DeleteAcls {
            acls: vec![binding(0)],
        },
    );
    m.apply(
        3,
        id(3),
        MetaCommand::CreateAcls {
            acls: vec![binding(MAX_ACLS)],
        },
    );
    assert!(m.acls.contains(&binding(MAX_ACLS)));
    let upsert = |user: String| MetaCommand::UpsertScramCredential {
        user,
        mechanism: 1,
        salt: vec![1],
        iterations: 4096,
        stored_key: vec![2; 32],
        server_key: vec![3; 32],
    };
    for i in 0..=MAX_CREDENTIALS {
        m.apply(10 + i as u64, None, upsert(format!("u{i}")));
    }
    assert_eq!(m.scram_credentials.len(), MAX_CREDENTIALS);
    // Replacing an existing credential is still allowed.
    m.apply(1 << 40, None, upsert("u0".into()));
    assert_eq!(m.scram_credentials.len(), MAX_CREDENTIALS);
}

/// Removing a member moves each of its replicas, in its place, to the member holding none
/// of that partition and the fewest replicas; the old lists wait in `moving` until the
/// partition's reassignment finishes; the metadata group keeps the leaving member while it
/// holds replicas. A member list carried by a command replaces the node's own first.
#[test]
fn removing_a_member_reassigns_its_replicas() {
    let mut m = ClusterMeta::new(vec![1, 2, 3]);
    let create = MetaCommand::CreateTopic {
        name: "t".into(),
        partitions: 2,
        replicas: vec![vec![1, 2, 3], vec![2, 3, 1]],
        configs: BTreeMap::new(),
    };
    assert!(m.apply(1, id(1), create).is_some());
    // A joined node's own list lacks node 1; the command's list is applied first.
    let proposer_view = m.member_records.clone();
    let mut joined = ClusterMeta::new(vec![2, 3]);
    let create_again = MetaCommand::CreateTopic {
        name: "t".into(),
        partitions: 2,
        replicas: vec![vec![1, 2, 3], vec![2, 3, 1]],
        configs: BTreeMap::new(),
    };
    assert!(joined.apply(1, id(1), create_again).is_some());
    let add = MetaCommand::AddMember {
        id: 4,
        name: "vdl4".into(),
        peer_addr: "127.0.0.1:9195".into(),
        kafka_addr: "127.0.0.1:9095".into(),
        members: proposer_view,
    };
    for meta in [&mut m, &mut joined] {
        assert!(meta.apply(2, id(2), add.clone()).is_some());
        let remove = MetaCommand::RemoveMember {
            id: 1,
            members: meta.member_records.clone(),
        };
        assert!(meta.apply(3, id(3), remove).is_some());
    }
    // The same state, but for the configured (bootstrap) list each started from.
    assert_eq!(m.member_records, joined.member_records);
    assert_eq!(m.topics, joined.topics);
    let t = &m.topics["t"];
    assert_eq!(t.replicas, vec![vec![4, 2, 3], vec![2, 3, 4]]);
    assert_eq!(t.moving[&0], vec![1, 2, 3]);
    assert_eq!(m.active_members(), vec![2, 3, 4]);
    assert_eq!(m.metadata_voters(), vec![1, 2, 3, 4]);
    // Removing it again, or an unknown id, changes nothing.
    let again = MetaCommand::RemoveMember {
        id: 1,
        members: BTreeMap::new(),
    };
    assert!(m.apply(4, id(4), again).is_none());
    for p in 0..2 {
        let finish = MetaCommand::FinishReassignment {
            name: "t".into(),
            incarnation: 1,
            partition: p,
        };
        assert!(m
            .apply(5 + u64::from(p), id(5 + u64::from(p)), finish)
            .is_some());
    }
    assert!(m.topics["t"].moving.is_empty());
    assert!(!m.hosts_replicas(1));
    assert_eq!(m.metadata_voters(), vec![2, 3, 4]);
}

/// A snapshot round-trips every kind of content exactly.
#[test]
fn snapshot_round_trips_every_field() {
    let mut m = ClusterMeta::new(vec![1, 2, 3]);
    for (index, request, cmd) in history() {
        m.apply(index, request, cmd);
    }
    assert!(!m.topics.is_empty() && !m.offsets.is_empty() && !m.groups.is_empty());
    assert!(!m.consumer_groups.is_empty());
    assert!(!m.allocations.is_empty() && !m.group_activity_ms.is_empty());
    assert!(m.flow.limits.any() && m.flow.client_quotas.len() == 2);
    assert!(m.topics["t"].deleted_before(1) == 77 && m.topics["t"].configs.len() == 2);
    assert_eq!(m.acls.len(), 2);
    assert_eq!(
        m.scram_credentials.keys().cloned().collect::<Vec<_>>(),
        vec![("alice".to_string(), ScramMechanism::Sha512)]
    );
    assert!(m.member_records.len() == 4 && m.member_records[&1].leaving);
    assert!(m.membership_changed && !m.topics["t"].moving.is_empty());
    let bytes = crate::metadata::codec::encode_snapshot(&m.to_snapshot(60, 7));
    // A seed for the metadata_command fuzz target (fuzz/seed-corpus.sh sets the variable).
    if let Some(dir) = std::env::var_os("VDL_FUZZ_SEEDS_DIR") {
        std::fs::write(std::path::Path::new(&dir).join("snapshot"), &bytes).unwrap();
    }
    let wire = crate::metadata::codec::decode_snapshot(&bytes).unwrap();
    assert_eq!((wire.index, wire.term), (60, 7));
    let back = ClusterMeta::from_snapshot(vec![3, 2, 1], wire);
    assert_eq!(back, m);
    // Deterministic: the same state gives the same bytes.
    assert_eq!(
        crate::metadata::codec::encode_snapshot(&back.to_snapshot(60, 7)),
        bytes
    );
    // Damage is detected, never decoded into a different state.
    for at in [0, 2, bytes.len() / 2, bytes.len() - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x10;
        assert!(
            crate::metadata::codec::decode_snapshot(&bad).is_err(),
            "{at}"
        );
    }
    assert!(crate::metadata::codec::decode_snapshot(&bytes[..4]).is_err());
}

/// Loading a snapshot taken at any index and applying the commands after it gives the state
/// a full replay gives; retried requests after the snapshot are still refused.
#[test]
fn replay_after_a_snapshot_equals_a_full_replay() {
    let commands = history();
    let mut full = ClusterMeta::new(vec![1, 2, 3]);
    for (index, request, cmd) in commands.clone() {
        full.apply(index, request, cmd);
    }
    for cut in 0..=commands.len() {
        let mut before = ClusterMeta::new(vec![1, 2, 3]);
        for (index, request, cmd) in commands[..cut].iter().cloned() {
            before.apply(index, request, cmd);
        }
        let bytes = crate::metadata::codec::encode_snapshot(&before.to_snapshot(cut as u64, 1));
        let wire = crate::metadata::codec::decode_snapshot(&bytes).unwrap();
        let mut after = ClusterMeta::from_snapshot(vec![1, 2, 3], wire);
        for (index, request, cmd) in commands[cut..].iter().cloned() {
            after.apply(index, request, cmd);
        }
        assert_eq!(after, full, "snapshot after {cut} commands");
    }
}
