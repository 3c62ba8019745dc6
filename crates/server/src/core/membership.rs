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

/// What a node does to its partitions when the replica lists change: the node on its
/// runtime, the simulation on its simulated replicas.
pub trait ReplicaHost {
    /// Why a topic's partitions could not be opened (logged).
    type OpenError: std::fmt::Display;
    /// This node's id.
    fn me(&self) -> u64;
    /// Opens the partitions of the topic placed here that are not open yet (see
    /// [`super::topics::open_topic`]).
    fn open_topic(
        &mut self,
        name: &str,
        incarnation: u64,
        replicas: &[Vec<u64>],
    ) -> Result<(), Self::OpenError>;
    /// The partitions of topic `name` open here: (partition, incarnation).
    fn open_partitions(&self, name: &str) -> Vec<(u32, u64)>;
    /// Tells partition `partition`'s group its target voters.
    fn set_voters(&mut self, name: &str, partition: u32, voters: Vec<u64>);
    /// Drops the replica of a partition that moved away (see
    /// [`super::topics::drop_partition`]).
    fn drop_partition(&mut self, name: &str, incarnation: u64, partition: u32);
}

/// Brings the partitions on `host` in line with the replica lists of `topics` (the metadata
/// state): opens the partitions of every topic the node is a replica of that are not open
/// yet (a new replica of a moving partition as a learner), tells each partition open here
/// that is being reassigned its target voters, and drops those whose reassignment away from
/// this node finished ([`replica_change`]). Partitions of another incarnation are left alone.
pub fn reconcile_replicas<H: ReplicaHost + ?Sized>(host: &mut H, topics: &[(String, TopicMeta)]) {
    let me = host.me();
    for (name, t) in topics {
        if hosts_topic(me, t) {
            if let Err(e) = host.open_topic(name, t.created_at_index, &t.replicas) {
                tracing::error!(topic = %name, "cannot open a reassigned partition: {e}");
            }
        }
        for (p, incarnation) in host.open_partitions(name) {
            if incarnation != t.created_at_index {
                continue;
            }
            match replica_change(me, t, p) {
                Some(ReplicaChange::SetVoters(new)) => host.set_voters(name, p, new),
                Some(ReplicaChange::Drop) => {
                    tracing::info!(topic = %name, partition = p, "replica moved away: dropping it");
                    host.drop_partition(name, t.created_at_index, p);
                }
                None => {}
            }
        }
    }
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

    /// Node 1's partitions: (partition, incarnation); records what it is asked.
    struct Replicas {
        open: Vec<(String, u32, u64)>,
        calls: Vec<String>,
    }

    impl ReplicaHost for Replicas {
        type OpenError = String;
        fn me(&self) -> u64 {
            1
        }
        fn open_topic(&mut self, name: &str, i: u64, _: &[Vec<u64>]) -> Result<(), String> {
            self.calls.push(format!("open {name}~{i}"));
            Ok(())
        }
        fn open_partitions(&self, name: &str) -> Vec<(u32, u64)> {
            self.open
                .iter()
                .filter(|(n, _, _)| n == name)
                .map(|(_, p, i)| (*p, *i))
                .collect()
        }
        fn set_voters(&mut self, name: &str, p: u32, voters: Vec<u64>) {
            self.calls.push(format!("voters {name}-{p} {voters:?}"));
        }
        fn drop_partition(&mut self, name: &str, i: u64, p: u32) {
            self.calls.push(format!("drop {name}~{i}-{p}"));
        }
    }

    #[test]
    fn reconciling_opens_hosted_topics_retargets_moving_partitions_and_drops_moved_ones() {
        // "a": partition 0 moves from {1, 2} to {3, 2}; partition 1 moved from 1 already.
        let mut a = topic(
            vec![vec![3, 2], vec![2, 3]],
            BTreeMap::from([(0, vec![1, 2])]),
        );
        a.created_at_index = 7;
        // "b": not on node 1 (and its open partition is of an older incarnation).
        let mut b = topic(vec![vec![2, 3]], BTreeMap::new());
        b.created_at_index = 9;
        let mut h = Replicas {
            open: vec![
                ("a".to_owned(), 0, 7),
                ("a".to_owned(), 1, 7),
                ("b".to_owned(), 0, 4),
            ],
            calls: Vec::new(),
        };
        reconcile_replicas(&mut h, &[("a".to_owned(), a), ("b".to_owned(), b)]);
        assert_eq!(h.calls, ["open a~7", "voters a-0 [3, 2]", "drop a~7-1"]);
    }
}
