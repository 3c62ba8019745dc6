//! Consumer-protocol groups (KIP-848) in the metadata: `StoreConsumerGroup` applied.

use super::tests::id;
use super::*;

/// A consumer-protocol group's state, with one member at `epoch`.
pub(super) fn consumer_record(epoch: i32) -> crate::metadata::codec::ConsumerGroupRecord {
    crate::metadata::codec::ConsumerGroupRecord {
        group_epoch: epoch,
        assignment_epoch: epoch,
        assignor: "uniform".into(),
        members: vec![crate::metadata::codec::ConsumerMemberRecord {
            member_id: "m".into(),
            subscribed_names: vec!["t".into()],
            epoch,
            previous_epoch: epoch - 1,
            assigned: vec![crate::metadata::codec::TopicPartitionsRecord {
                topic_id: vec![1; 16],
                partitions: vec![0, 1],
            }],
            ..Default::default()
        }],
        partition_counts: Vec::new(),
    }
}

/// KIP-848: a consumer-protocol group's state is stored (replacing the classic membership of
/// a converted group), replaced, forgotten, and goes with DeleteGroups.
#[test]
fn consumer_group_state_is_stored_and_forgotten() {
    let mut m = ClusterMeta::default();
    m.apply(
        1,
        id(1),
        MetaCommand::StoreGroup {
            group: "g".into(),
            record: Some(GroupRecord {
                generation: 1,
                protocol_type: "consumer".into(),
                protocol: "range".into(),
                leader: String::new(),
                members: Vec::new(),
            }),
            time_ms: 0,
        },
    );
    let store = |record| MetaCommand::StoreConsumerGroup {
        group: "g".into(),
        record,
        time_ms: 0,
    };
    m.apply(2, id(2), store(Some(consumer_record(1))));
    m.apply(3, id(3), store(Some(consumer_record(2))));
    assert_eq!(m.consumer_groups["g"], consumer_record(2));
    assert!(!m.groups.contains_key("g"));
    m.apply(4, id(4), store(None));
    assert!(m.consumer_groups.is_empty());
    m.apply(5, id(5), store(Some(consumer_record(3))));
    m.apply(
        6,
        id(6),
        MetaCommand::DeleteGroupOffsets {
            group: "g".into(),
            partitions: None,
        },
    );
    assert!(
        m.consumer_groups.is_empty(),
        "DeleteGroups forgets the group"
    );
}
