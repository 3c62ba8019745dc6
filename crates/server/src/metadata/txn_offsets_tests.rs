//! Offsets committed in transactions (`txn_offsets.rs`): pending until the transaction ends,
//! committed or dropped then, the newer record winning, and carried by snapshots.

use super::*;

/// Producer `producer_id` commits `offset` for `topic`-`partition` of `group` in a
/// transaction.
fn txn_commit(
    group: &str,
    producer_id: i64,
    topic: &str,
    partition: i32,
    offset: i64,
) -> MetaCommand {
    MetaCommand::CommitTxnOffsets {
        group: group.into(),
        producer_id,
        producer_epoch: 3,
        offsets: vec![offset_of(topic, partition, offset)],
        commit_time_ms: 7_000 + offset,
    }
}

fn offset_of(topic: &str, partition: i32, offset: i64) -> CommittedOffset {
    CommittedOffset {
        topic: topic.into(),
        partition,
        offset,
        leader_epoch: 1,
        metadata: Some(format!("m{offset}")),
    }
}

fn plain_commit(group: &str, topic: &str, partition: i32, offset: i64) -> MetaCommand {
    MetaCommand::CommitOffsets {
        group: group.into(),
        offsets: vec![offset_of(topic, partition, offset)],
        commit_time_ms: 9_000,
    }
}

fn end(producer_id: i64, groups: Option<&[&str]>, commit: bool) -> MetaCommand {
    MetaCommand::EndTxnOffsets {
        producer_id,
        groups: groups.map(|gs| gs.iter().map(|g| g.to_string()).collect()),
        commit,
    }
}

/// The committed offset of `topic`-`partition` in `group`, if any.
fn committed(m: &ClusterMeta, group: &str, topic: &str, partition: i32) -> Option<i64> {
    m.offsets
        .get(group)
        .and_then(|g| g.get(&(topic.to_string(), partition)))
        .map(|o| o.offset)
}

/// Commands for the metadata's history of every kind (`tests.rs`): producer 2000's offsets
/// committed; producer 2001's pending, one of them superseded by a plain commit after it.
pub(super) fn txn_history() -> Vec<MetaCommand> {
    vec![
        txn_commit("tx", 2000, "t", 0, 10),
        txn_commit("tx", 2000, "t", 1, 11),
        end(2000, None, true),
        txn_commit("tx", 2001, "t", 0, 20),
        txn_commit("tx", 2001, "t", 2, 22),
        plain_commit("tx", "t", 2, 30),
    ]
}

fn apply_all(m: &mut ClusterMeta, first_index: u64, cmds: Vec<MetaCommand>) {
    for (index, cmd) in (first_index..).zip(cmds) {
        m.apply_to_state(index, None, cmd);
    }
}

#[test]
fn pending_offsets_are_invisible_until_the_commit_then_committed() {
    let mut m = ClusterMeta::default();
    apply_all(
        &mut m,
        1,
        vec![
            plain_commit("g", "t", 0, 5),
            txn_commit("g", 7, "t", 0, 10),
            txn_commit("g", 7, "t", 1, 11),
            // The same partition again in the same transaction: the newer offset.
            txn_commit("g", 7, "t", 1, 12),
        ],
    );
    assert_eq!(committed(&m, "g", "t", 0), Some(5));
    assert_eq!(committed(&m, "g", "t", 1), None);
    assert!(m.has_pending_txn_offset("g", "t", 0));
    assert!(m.has_pending_txn_offset("g", "t", 1));
    assert!(!m.has_pending_txn_offset("g", "t", 2));
    assert!(!m.has_pending_txn_offset("other", "t", 0));
    assert_eq!(m.pending_txn_groups(7), vec!["g".to_string()]);
    assert_eq!(m.pending_txn_offsets("g", 7).unwrap().producer_epoch, 3);

    // Another producer's end, or another group's, leaves them pending.
    assert_eq!(m.end_txn_offsets(8, None, true), 0);
    assert_eq!(m.end_txn_offsets(7, Some(&["h".to_string()]), true), 0);
    assert!(m.has_pending_txn_offsets("g"));

    m.apply_to_state(5, None, end(7, Some(&["g"]), true));
    assert_eq!(committed(&m, "g", "t", 0), Some(10));
    assert_eq!(committed(&m, "g", "t", 1), Some(12));
    let o = &m.offsets["g"][&("t".to_string(), 1)];
    assert_eq!((o.leader_epoch, o.metadata.as_deref()), (1, Some("m12")));
    assert!(!m.has_pending_txn_offsets("g"));
    assert!(m.all_pending_txn_offsets().is_empty());
    // Ending again does nothing.
    assert_eq!(m.end_txn_offsets(7, None, true), 0);
    // A group known only from a transaction: the commit is its activity, at the time of the
    // latest TxnOffsetCommit.
    let solo = vec![txn_commit("solo", 7, "t", 0, 40), end(7, None, true)];
    apply_all(&mut m, 10, solo);
    assert_eq!(m.group_activity_ms["solo"], 7_040);
}

#[test]
fn an_abort_drops_the_pending_offsets_and_keeps_the_committed_ones() {
    let mut m = ClusterMeta::default();
    apply_all(
        &mut m,
        1,
        vec![
            plain_commit("g", "t", 0, 5),
            txn_commit("g", 7, "t", 0, 10),
            txn_commit("h", 7, "t", 0, 20),
            end(7, None, false),
        ],
    );
    assert_eq!(committed(&m, "g", "t", 0), Some(5));
    assert_eq!(committed(&m, "h", "t", 0), None);
    assert!(m.all_pending_txn_offsets().is_empty());
    assert!(!m.offsets.contains_key("h"));
}

/// Kafka keeps the record later in the offsets log: a plain commit after the transactional
/// one wins, one before loses; of two transactions, the later write wins whatever the order of
/// their commits.
#[test]
fn the_later_write_of_a_partition_wins() {
    let mut m = ClusterMeta::default();
    apply_all(
        &mut m,
        1,
        vec![
            txn_commit("g", 7, "t", 0, 10),
            plain_commit("g", "t", 0, 50),
            txn_commit("g", 7, "t", 1, 11),
        ],
    );
    // Superseded, but still pending until the transaction ends.
    assert!(m.has_pending_txn_offset("g", "t", 0));
    assert_eq!(m.end_txn_offsets(7, None, true), 1);
    assert_eq!(committed(&m, "g", "t", 0), Some(50));
    assert_eq!(committed(&m, "g", "t", 1), Some(11));

    // Producer 8 writes before producer 9; 9 commits first, then 8: 9's offset stays.
    apply_all(
        &mut m,
        10,
        vec![
            txn_commit("g", 8, "t", 2, 80),
            txn_commit("g", 9, "t", 2, 90),
            end(9, None, true),
            end(8, None, true),
        ],
    );
    assert_eq!(committed(&m, "g", "t", 2), Some(90));
    // Written after 9's and committed after it: the later write wins.
    apply_all(
        &mut m,
        20,
        vec![
            txn_commit("g", 8, "t", 3, 81),
            txn_commit("g", 9, "t", 3, 91),
            txn_commit("g", 8, "t", 3, 82),
            end(9, None, true),
            end(8, None, true),
        ],
    );
    assert_eq!(committed(&m, "g", "t", 3), Some(82));
}

/// A deleted topic's pending offsets go with it; a group with pending offsets does not expire.
#[test]
fn topic_deletion_drops_pending_offsets_and_pending_groups_do_not_expire() {
    let mut m = ClusterMeta::default();
    apply_all(
        &mut m,
        1,
        vec![
            MetaCommand::CreateTopic {
                name: "t".into(),
                partitions: 1,
                replicas: Vec::new(),
                configs: Default::default(),
            },
            plain_commit("g", "u", 0, 1),
            txn_commit("g", 7, "t", 0, 10),
            txn_commit("g", 7, "u", 0, 11),
        ],
    );
    assert!(m.expired_groups(i64::MAX, 1, 10).is_empty());
    m.apply_to_state(
        5,
        None,
        MetaCommand::ExpireGroupOffsets {
            group: "g".into(),
            activity_ms: 9_000,
        },
    );
    assert_eq!(committed(&m, "g", "u", 0), Some(1));
    m.apply_to_state(
        6,
        None,
        MetaCommand::DeleteTopic {
            name: "t".into(),
            incarnation: None,
        },
    );
    assert!(!m.has_pending_txn_offset("g", "t", 0));
    assert!(m.has_pending_txn_offset("g", "u", 0));
    m.apply_to_state(7, None, end(7, None, false));
    assert_eq!(m.expired_groups(i64::MAX, 1, 10), vec![("g".into(), 9_000)]);
}

/// Deleting a group's offsets (DeleteGroups, OffsetDelete) deletes its pending ones too: a
/// transaction committing later does not bring them back.
#[test]
fn deleted_group_offsets_take_the_pending_ones_with_them() {
    let mut m = ClusterMeta::default();
    apply_all(
        &mut m,
        1,
        vec![
            txn_commit("g", 7, "t", 0, 10),
            txn_commit("g", 7, "t", 1, 11),
            txn_commit("h", 7, "t", 0, 12),
            MetaCommand::DeleteGroupOffsets {
                group: "g".into(),
                partitions: Some(vec![("t".into(), 1)]),
            },
        ],
    );
    assert!(m.has_pending_txn_offset("g", "t", 0));
    assert!(!m.has_pending_txn_offset("g", "t", 1));
    let delete_group = MetaCommand::DeleteGroupOffsets {
        group: "g".into(),
        partitions: None,
    };
    m.apply_to_state(5, None, delete_group);
    assert!(!m.has_pending_txn_offsets("g"));
    assert_eq!(m.end_txn_offsets(7, None, true), 1);
    assert!(!m.offsets.contains_key("g"));
    assert_eq!(committed(&m, "h", "t", 0), Some(12));
}

/// Pending offsets, superseded or not, survive a snapshot exactly, and ending them after the
/// snapshot gives what ending them without one gives.
#[test]
fn pending_offsets_survive_a_snapshot() {
    let mut m = ClusterMeta::new(vec![1]);
    apply_all(&mut m, 1, txn_history());
    let pending = m.pending_txn_offsets("tx", 2001).unwrap();
    assert_eq!(pending.offsets.len(), 2);
    assert!(pending.offsets.values().any(|p| p.superseded));
    assert_eq!(committed(&m, "tx", "t", 1), Some(11));

    let bytes = crate::metadata::codec::encode_snapshot(&m.to_snapshot(6, 1));
    let wire = crate::metadata::codec::decode_snapshot(&bytes).unwrap();
    assert_eq!(wire.txn_offsets.len(), 1);
    let mut back = ClusterMeta::from_snapshot(vec![1], wire);
    assert_eq!(back, m);

    m.apply_to_state(7, None, end(2001, Some(&["tx"]), true));
    back.apply_to_state(7, None, end(2001, Some(&["tx"]), true));
    assert_eq!(back, m);
    assert_eq!(committed(&m, "tx", "t", 0), Some(20));
    assert_eq!(
        committed(&m, "tx", "t", 2),
        Some(30),
        "the later plain commit"
    );
}
