//! Membership decisions of one node for the partitions it hosts: whether a topic's layout
//! (with the reassignments under way) involves it, what a partition open here must do when the
//! replica lists change (take its new voters, or be dropped), and when a reassignment it leads
//! is done.

use crate::metadata::TopicMeta;

/// What a partition open on a node does after the replica lists changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaChange {
    /// The partition is being reassigned: its group is told its target voters (its leader
    /// adds the new replicas as learners, promotes them once caught up, removes the old).
    SetVoters(Vec<u64>),
    /// The reassignment away from this node finished: the replica is dropped here.
    Drop,
}

/// Whether node `me` is a replica of some partition of `topic`: in its replica lists, or in a
/// moving partition's replicas before the move.
pub fn hosts_topic(me: u64, topic: &TopicMeta) -> bool {
    topic
        .replicas
        .iter()
        .chain(topic.moving.values())
        .any(|r| r.contains(&me))
}

/// What partition `partition` of `topic`, open on node `me`, must do now (None: nothing; a
/// partition the layout does not know is left alone).
pub fn replica_change(me: u64, topic: &TopicMeta, partition: u32) -> Option<ReplicaChange> {
    let new = topic.replicas.get(partition as usize)?;
    if topic.moving.contains_key(&partition) {
        Some(ReplicaChange::SetVoters(new.clone()))
    } else if !new.contains(&me) {
        Some(ReplicaChange::Drop)
    } else {
        None
    }
}

/// The partitions of `topic` being reassigned, each with its new replicas in ascending order
/// (as a group's voters are listed).
pub fn moving_partitions(topic: &TopicMeta) -> Vec<(u32, Vec<u64>)> {
    topic
        .moving
        .keys()
        .filter_map(|p| {
            let mut new = topic.replicas.get(*p as usize)?.clone();
            new.sort_unstable();
            Some((*p, new))
        })
        .collect()
}

/// Whether a reassignment to `new` (ascending) is done as node `me` sees its group: `me` leads
/// it, its configuration change is settled, and its voters (ascending, 0 for none) are `new`.
pub fn reassignment_done(
    me: u64,
    new: &[u64],
    leader: u64,
    membership_settled: bool,
    voters: &[u64],
) -> bool {
    let voters: Vec<u64> = voters.iter().copied().filter(|id| *id != 0).collect();
    leader == me && membership_settled && voters == new
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn topic(replicas: Vec<Vec<u64>>, moving: BTreeMap<u32, Vec<u64>>) -> TopicMeta {
        TopicMeta {
            created_at_index: 7,
            partitions: replicas.len() as u32,
            replicas,
            configs: BTreeMap::new(),
            deleted_before: Vec::new(),
            moving,
        }
    }

    #[test]
    fn a_node_hosts_a_topic_in_its_lists_or_before_a_move() {
        let t = topic(
            vec![vec![1, 2], vec![4, 2]],
            BTreeMap::from([(1, vec![3, 2])]),
        );
        assert!(hosts_topic(1, &t));
        assert!(hosts_topic(3, &t));
        assert!(hosts_topic(4, &t));
        assert!(!hosts_topic(5, &t));
    }

    #[test]
    fn a_moving_partition_takes_its_new_voters_and_a_moved_replica_is_dropped() {
        let t = topic(
            vec![vec![1, 2], vec![4, 2], vec![2, 3]],
            BTreeMap::from([(1, vec![3, 2])]),
        );
        assert_eq!(replica_change(1, &t, 0), None);
        assert_eq!(
            replica_change(3, &t, 1),
            Some(ReplicaChange::SetVoters(vec![4, 2]))
        );
        assert_eq!(replica_change(1, &t, 2), Some(ReplicaChange::Drop));
        assert_eq!(replica_change(1, &t, 9), None);
        assert_eq!(moving_partitions(&t), [(1, vec![2, 4])]);
    }

    #[test]
    fn a_reassignment_is_done_once_its_leader_here_has_the_new_voters_settled() {
        assert!(reassignment_done(2, &[2, 4], 2, true, &[2, 4, 0]));
        assert!(!reassignment_done(2, &[2, 4], 4, true, &[2, 4]));
        assert!(!reassignment_done(2, &[2, 4], 2, false, &[2, 4]));
        assert!(!reassignment_done(2, &[2, 4], 2, true, &[2, 3, 4]));
    }
}
