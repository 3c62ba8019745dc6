//! Which partitions of a topic a node opens, and how: the decisions behind a created topic (or
//! one found in a metadata snapshot or replayed at start) becoming Raft groups on the nodes
//! its layout places it on. The opening itself (stores, Raft groups, threads) is the host's,
//! behind [`PartitionHost`]: the node implements it with its runtime, the deterministic
//! simulation with its simulated replicas.

use std::collections::BTreeMap;
use std::path::PathBuf;

use thiserror::Error;

use crate::replication::ids::group_id_for_topic;

use super::data_dir::{DataDir, MigrateError};

/// One partition a node must open for a topic, with the configuration its group starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionToOpen {
    /// The partition index.
    pub partition: u32,
    /// Its Raft group id.
    pub group: u64,
    /// The voters its group starts with (used when its store is new).
    pub voters: Vec<u64>,
    /// The learners its group starts with (this node, when it is a new replica of a
    /// partition being reassigned).
    pub learners: Vec<u64>,
    /// The preferred leader (the first replica of the layout).
    pub preferred: u64,
    /// Whether this node should stand for election at once (it is the preferred leader of a
    /// partition of several replicas that is not being reassigned), so that a new partition
    /// gets a leader without waiting an election timeout and leaders start spread over the
    /// nodes. The host may still hold back (while the metadata log replays at start).
    pub stands_for_election: bool,
}

/// The partitions of incarnation `incarnation` of topic `name` that node `me` must open and
/// that are not open yet (`is_open`), in partition order. `replicas[p]` lists partition `p`'s
/// replicas, preferred leader first; `moving` holds, for a partition being reassigned, its
/// replicas before the move. A partition being reassigned starts from its configuration
/// before the move: a new replica as a learner of the old ones (it is added as one, and
/// promoted once caught up), an old one as a voter until its group removes it.
pub fn partitions_to_open(
    me: u64,
    name: &str,
    incarnation: u64,
    replicas: &[Vec<u64>],
    moving: &BTreeMap<u32, Vec<u64>>,
    is_open: impl Fn(u32) -> bool,
) -> Vec<PartitionToOpen> {
    let mut plans = Vec::new();
    for (partition, layout) in (0u32..).zip(replicas) {
        if is_open(partition) {
            continue;
        }
        let (voters, learners) = match moving.get(&partition) {
            Some(old) if old.contains(&me) => (old.clone(), Vec::new()),
            Some(old) if layout.contains(&me) => (old.clone(), vec![me]),
            _ if layout.contains(&me) => (layout.clone(), Vec::new()),
            _ => continue,
        };
        let Some(&preferred) = layout.first() else {
            continue;
        };
        plans.push(PartitionToOpen {
            partition,
            group: group_id_for_topic(name, incarnation, partition),
            voters,
            learners,
            preferred,
            stands_for_election: preferred == me
                && layout.len() > 1
                && !moving.contains_key(&partition),
        });
    }
    plans
}

/// The topic incarnations open here (`open`) that the metadata no longer holds
/// (`current(name)` is the incarnation it holds under the name, if any): they were deleted
/// or replaced, and are dropped.
pub fn stale_incarnations(
    open: &[(String, u64)],
    current: impl Fn(&str) -> Option<u64>,
) -> Vec<(String, u64)> {
    open.iter()
        .filter(|(name, incarnation)| current(name) != Some(*incarnation))
        .cloned()
        .collect()
}

/// What a node does when the core opens a topic's partitions on it.
pub trait PartitionHost {
    /// Why a partition could not be opened.
    type Error;
    /// This node's id.
    fn me(&self) -> u64;
    /// This node's data directory.
    fn data_dir(&self) -> &DataDir;
    /// The incarnation of topic `name` open here, if any partition of it is.
    fn open_incarnation(&self, name: &str) -> Option<u64>;
    /// Whether partition `partition` of topic `name` is open here.
    fn is_open(&self, name: &str, partition: u32) -> bool;
    /// Whether a `DeleteTopic` of this incarnation was in the metadata log when the node
    /// started (its replay re-runs the create before reaching the delete).
    fn deleted_before_start(&self, name: &str, incarnation: u64) -> bool;
    /// The replicas before the move of the partitions of this incarnation being reassigned.
    fn moving(&self, name: &str, incarnation: u64) -> BTreeMap<u32, Vec<u64>>;
    /// Stops the groups of topic `name` (of `incarnation` only, when given) and deletes
    /// their data here.
    fn drop_topic(&mut self, name: &str, incarnation: Option<u64>);
    /// Opens one partition's group in `dir` as `plan` says, and records it in the catalog.
    fn open_partition(
        &mut self,
        name: &str,
        incarnation: u64,
        plan: &PartitionToOpen,
        dir: PathBuf,
    ) -> Result<(), Self::Error>;
}

/// Why a topic's partitions could not be opened.
#[derive(Debug, Error)]
pub enum OpenTopicError<E: std::error::Error + 'static> {
    /// Its directory from before partitions could not be moved.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    /// The host could not open a partition.
    #[error(transparent)]
    Open(E),
}

/// Opens (creating on first use) the partitions of incarnation `incarnation` of topic `name`
/// that `host` is a replica of (`replicas[p]` lists partition `p`'s, preferred leader first)
/// and that are not open yet. An older incarnation still open under the name is dropped
/// first; a directory from before partitions is moved to partition 0's.
///
/// Replaying the metadata log at start re-runs every `CreateTopic`, also those of incarnations
/// deleted since. Such an incarnation's data is gone (its delete was applied here before, so it
/// was committed and is in the local log); opening it again would show clients an empty topic
/// under the name until the replay reaches its delete (a produce accepted then would be lost
/// with it). So it is not opened at all.
pub fn open_topic<H>(
    host: &mut H,
    name: &str,
    incarnation: u64,
    replicas: &[Vec<u64>],
) -> Result<(), OpenTopicError<H::Error>>
where
    H: PartitionHost,
    H::Error: std::error::Error + 'static,
{
    if let Some(open) = host.open_incarnation(name) {
        if open != incarnation {
            host.drop_topic(name, Some(open));
        }
    }
    if host.data_dir().migrate_topic_dir(name, incarnation)? {
        tracing::info!(topic = %name, incarnation, "moved a topic to the partitioned layout");
    }
    let gone = host
        .data_dir()
        .topic_dirs_on_disk(name, incarnation)
        .is_empty()
        && host.deleted_before_start(name, incarnation);
    if gone {
        tracing::debug!(topic = %name, incarnation, "a deleted incarnation is not reopened on replay");
        return Ok(());
    }
    let moving = host.moving(name, incarnation);
    let plans = partitions_to_open(host.me(), name, incarnation, replicas, &moving, |p| {
        host.is_open(name, p)
    });
    for plan in plans {
        let dir = host.data_dir().topic_dir(name, incarnation, plan.partition);
        host.open_partition(name, incarnation, &plan, dir)
            .map_err(OpenTopicError::Open)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Vec<Vec<u64>> {
        vec![vec![1, 2, 3], vec![2, 3, 1], vec![3, 1, 2], vec![2, 3]]
    }

    #[test]
    fn a_node_opens_the_partitions_placed_on_it_and_stands_where_preferred() {
        let plans = partitions_to_open(1, "t", 9, &layout(), &BTreeMap::new(), |_| false);
        let parts: Vec<u32> = plans.iter().map(|p| p.partition).collect();
        assert_eq!(parts, [0, 1, 2]);
        assert!(plans[0].stands_for_election);
        assert!(!plans[1].stands_for_election);
        assert_eq!(plans[1].voters, [2, 3, 1]);
        assert_eq!(plans[1].preferred, 2);
        assert_eq!(plans[2].group, group_id_for_topic("t", 9, 2));
        assert!(plans.iter().all(|p| p.learners.is_empty()));
    }

    #[test]
    fn open_partitions_are_skipped_and_a_single_replica_does_not_campaign() {
        let plans = partitions_to_open(2, "t", 9, &layout(), &BTreeMap::new(), |p| p == 1);
        let parts: Vec<u32> = plans.iter().map(|p| p.partition).collect();
        assert_eq!(parts, [0, 2, 3]);
        let single = partitions_to_open(5, "t", 9, &[vec![5]], &BTreeMap::new(), |_| false);
        assert_eq!(single.len(), 1);
        assert!(!single[0].stands_for_election);
    }

    #[test]
    fn a_moving_partition_starts_from_its_replicas_before_the_move() {
        // Partition 0 moves from {1, 2, 3} to {4, 2, 3}.
        let replicas = vec![vec![4, 2, 3]];
        let moving = BTreeMap::from([(0, vec![1, 2, 3])]);
        let new = partitions_to_open(4, "t", 9, &replicas, &moving, |_| false);
        assert_eq!(new[0].voters, [1, 2, 3]);
        assert_eq!(new[0].learners, [4]);
        assert!(!new[0].stands_for_election);
        let old = partitions_to_open(1, "t", 9, &replicas, &moving, |_| false);
        assert_eq!(old[0].voters, [1, 2, 3]);
        assert!(old[0].learners.is_empty());
        let other = partitions_to_open(5, "t", 9, &replicas, &moving, |_| false);
        assert!(other.is_empty());
    }

    #[test]
    fn incarnations_the_metadata_no_longer_holds_are_stale() {
        let open = vec![
            ("a".to_owned(), 3),
            ("b".to_owned(), 4),
            ("c".to_owned(), 5),
        ];
        let current = |n: &str| match n {
            "a" => Some(3),
            "b" => Some(8),
            _ => None,
        };
        assert_eq!(
            stale_incarnations(&open, current),
            [("b".to_owned(), 4), ("c".to_owned(), 5)]
        );
    }
}
