//! Which partitions of a topic a node opens, and how: the decisions behind a created topic (or
//! one found in a metadata snapshot or replayed at start) becoming Raft groups on the nodes
//! its layout places it on. The opening itself (stores, Raft groups, threads) is the host's,
//! behind [`PartitionHost`]: the node implements it with its runtime, the deterministic
//! simulation with its simulated replicas.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use thiserror::Error;

use crate::metadata::{MetaCommand, MetaEntry};
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
    /// The partitions of topic `name` open here: (partition, incarnation, group) of each, in
    /// partition order.
    fn open_partitions(&self, name: &str) -> Vec<(u32, u64, u64)>;
    /// Stops the group `group` of a partition open here (appends waiting on it fail).
    fn stop_group(&mut self, group: u64);
    /// Forgets every partition of topic `name` in the catalog.
    fn forget_topic(&mut self, name: &str);
    /// Forgets partition `partition` of topic `name` in the catalog.
    fn forget_partition(&mut self, name: &str, partition: u32);
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
            drop_topic(host, name, Some(open));
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

/// The directories that dropping topic `name` removes on a node: with an incarnation, every
/// directory of that incarnation on disk (also when another one is open under the name);
/// without one, those of the incarnation open under the name (`open`, that of its first open
/// partition), or the directory of the stream configured at start when that is what is open
/// (incarnation 0) or nothing is.
pub fn dirs_of_dropped_topic(
    data_dir: &DataDir,
    name: &str,
    incarnation: Option<u64>,
    open: Option<u64>,
) -> Vec<PathBuf> {
    match (incarnation, open) {
        (Some(i), _) => data_dir.topic_dirs_on_disk(name, i),
        (None, Some(i)) if i > 0 => data_dir.topic_dirs_on_disk(name, i),
        (None, _) => vec![data_dir.stream_dir(name)],
    }
}

/// Stops topic `name`'s groups open on `host` (every partition; only those of `incarnation`
/// when given) and deletes its data there (see [`dirs_of_dropped_topic`]): a newer
/// incarnation open under the name stays, and an older one's directories are removed if they
/// are still there. The catalog forgets the topic last: once it is gone from the catalog, its
/// data is gone too. A directory that cannot be removed is logged.
pub fn drop_topic<H: PartitionHost>(host: &mut H, name: &str, incarnation: Option<u64>) {
    let open: Vec<(u32, u64, u64)> = host
        .open_partitions(name)
        .into_iter()
        .filter(|(_, i, _)| incarnation.is_none_or(|wanted| wanted == *i))
        .collect();
    for (_, _, group) in &open {
        host.stop_group(*group);
    }
    let dirs = dirs_of_dropped_topic(
        host.data_dir(),
        name,
        incarnation,
        open.first().map(|(_, i, _)| *i),
    );
    for dir in dirs.iter().filter(|d| d.exists()) {
        if let Err(e) = std::fs::remove_dir_all(dir) {
            tracing::warn!(stream = %name, dir = %dir.display(), "removing a deleted stream's data failed: {e}");
        }
    }
    if !open.is_empty() {
        host.forget_topic(name);
    }
}

/// Stops partition `partition` of incarnation `incarnation` of topic `name` on `host` and
/// deletes its data there (its replica moved to another node); the catalog forgets it. Nothing
/// when that partition of that incarnation is not open here. A directory that cannot be
/// removed is logged.
pub fn drop_partition<H: PartitionHost>(
    host: &mut H,
    name: &str,
    incarnation: u64,
    partition: u32,
) {
    let Some((_, _, group)) = host
        .open_partitions(name)
        .into_iter()
        .find(|(p, i, _)| *p == partition && *i == incarnation)
    else {
        return;
    };
    host.stop_group(group);
    host.forget_partition(name, partition);
    let dir = host.data_dir().topic_dir(name, incarnation, partition);
    if dir.exists() {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!(topic = %name, partition, dir = %dir.display(), "removing a moved replica's data failed: {e}");
        }
    }
}

/// The topic incarnations deleted by a `DeleteTopic` (naming its incarnation) in the metadata
/// log `store`, read at start before the replay: their `CreateTopic`, replayed first, must not
/// open them again (see [`open_topic`]). A read error ends the scan with what was found (and
/// is logged); an undecodable entry is skipped.
pub fn deleted_incarnations(store: &logstore::LogStore) -> BTreeSet<(String, u64)> {
    let mut deleted = BTreeSet::new();
    let mut lo = store.first_index();
    let hi = store.last_index() + 1;
    while lo < hi {
        let entries = match store.entries(lo, hi, 4 << 20) {
            Ok(entries) if !entries.is_empty() => entries,
            Ok(_) => break,
            Err(e) => {
                tracing::warn!("reading the metadata log for deleted topics failed: {e}");
                break;
            }
        };
        lo = entries.last().map_or(hi, |e| e.index + 1);
        for e in entries
            .iter()
            .filter(|e| e.kind == logstore::EntryKind::Meta)
        {
            if let Ok((
                _,
                MetaCommand::DeleteTopic {
                    name,
                    incarnation: Some(incarnation),
                },
            )) = MetaEntry::decode(&e.payload)
            {
                deleted.insert((name, incarnation));
            }
        }
    }
    deleted
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

    /// A host whose catalog holds one topic's partitions: (incarnation, group) by partition.
    struct Host {
        data_dir: DataDir,
        open: BTreeMap<u32, (u64, u64)>,
        stopped: Vec<u64>,
        forgotten: Vec<String>,
    }

    impl PartitionHost for Host {
        type Error = std::io::Error;
        fn me(&self) -> u64 {
            1
        }
        fn data_dir(&self) -> &DataDir {
            &self.data_dir
        }
        fn open_incarnation(&self, _: &str) -> Option<u64> {
            self.open.values().next().map(|(i, _)| *i)
        }
        fn is_open(&self, _: &str, partition: u32) -> bool {
            self.open.contains_key(&partition)
        }
        fn deleted_before_start(&self, _: &str, _: u64) -> bool {
            false
        }
        fn moving(&self, _: &str, _: u64) -> BTreeMap<u32, Vec<u64>> {
            BTreeMap::new()
        }
        fn open_partitions(&self, _: &str) -> Vec<(u32, u64, u64)> {
            self.open.iter().map(|(p, (i, g))| (*p, *i, *g)).collect()
        }
        fn stop_group(&mut self, group: u64) {
            self.stopped.push(group);
        }
        fn forget_topic(&mut self, name: &str) {
            self.open.clear();
            self.forgotten.push(name.to_owned());
        }
        fn forget_partition(&mut self, name: &str, partition: u32) {
            self.open.remove(&partition);
            self.forgotten.push(format!("{name}-{partition}"));
        }
        fn open_partition(
            &mut self,
            _: &str,
            incarnation: u64,
            plan: &PartitionToOpen,
            dir: PathBuf,
        ) -> Result<(), std::io::Error> {
            std::fs::create_dir_all(dir)?;
            self.open.insert(plan.partition, (incarnation, plan.group));
            Ok(())
        }
    }

    fn host(label: &str) -> Host {
        let dir =
            std::env::temp_dir().join(format!("vdl-core-topics-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("topics")).unwrap();
        Host {
            data_dir: DataDir::new(dir),
            open: BTreeMap::new(),
            stopped: Vec::new(),
            forgotten: Vec::new(),
        }
    }

    #[test]
    fn dropping_a_topic_stops_its_groups_removes_its_files_and_forgets_it_last() {
        let mut h = host("drop");
        open_topic(&mut h, "t", 5, &[vec![1, 2], vec![2, 1]]).unwrap();
        assert_eq!(h.data_dir.topic_dirs_on_disk("t", 5).len(), 2);
        // Dropping another incarnation leaves the open one alone (and removes that one's
        // files, if any are left).
        std::fs::create_dir_all(h.data_dir.topic_dir("t", 2, 0)).unwrap();
        drop_topic(&mut h, "t", Some(2));
        assert!(h.stopped.is_empty() && h.forgotten.is_empty());
        assert!(h.data_dir.topic_dirs_on_disk("t", 2).is_empty());
        drop_topic(&mut h, "t", Some(5));
        assert_eq!(
            h.stopped,
            [group_id_for_topic("t", 5, 0), group_id_for_topic("t", 5, 1)]
        );
        assert_eq!(h.forgotten, ["t"]);
        assert!(h.data_dir.topic_dirs_on_disk("t", 5).is_empty());
        // A new incarnation under the name opens in its own directories, from nothing.
        open_topic(&mut h, "t", 9, &[vec![1]]).unwrap();
        assert_eq!(
            h.data_dir.topic_dirs_on_disk("t", 9),
            [h.data_dir.topic_dir("t", 9, 0)]
        );
        assert_eq!(h.open[&0], (9, group_id_for_topic("t", 9, 0)));
        let _ = std::fs::remove_dir_all(h.data_dir.root());
    }

    #[test]
    fn without_an_incarnation_the_open_one_or_the_configured_stream_is_dropped() {
        let d = DataDir::new("/data");
        assert_eq!(
            dirs_of_dropped_topic(&d, "s", None, Some(0)),
            [d.stream_dir("s")]
        );
        assert_eq!(
            dirs_of_dropped_topic(&d, "s", None, None),
            [d.stream_dir("s")]
        );
        let mut h = host("drop-open");
        open_topic(&mut h, "t", 4, &[vec![1]]).unwrap();
        drop_topic(&mut h, "t", None);
        assert_eq!(h.stopped, [group_id_for_topic("t", 4, 0)]);
        assert!(h.data_dir.topic_dirs_on_disk("t", 4).is_empty());
        let _ = std::fs::remove_dir_all(h.data_dir.root());
    }

    #[test]
    fn dropping_a_moved_partition_removes_that_replica_only() {
        let mut h = host("drop-partition");
        open_topic(&mut h, "t", 5, &[vec![1, 2], vec![1, 3]]).unwrap();
        drop_partition(&mut h, "t", 4, 1);
        assert!(h.stopped.is_empty());
        drop_partition(&mut h, "t", 5, 1);
        assert_eq!(h.stopped, [group_id_for_topic("t", 5, 1)]);
        assert_eq!(h.forgotten, ["t-1"]);
        assert_eq!(
            h.data_dir.topic_dirs_on_disk("t", 5),
            [h.data_dir.topic_dir("t", 5, 0)]
        );
        let _ = std::fs::remove_dir_all(h.data_dir.root());
    }

    #[test]
    fn a_newer_incarnation_replaces_the_open_one() {
        let mut h = host("replace");
        open_topic(&mut h, "t", 4, &[vec![1]]).unwrap();
        open_topic(&mut h, "t", 8, &[vec![1]]).unwrap();
        assert_eq!(h.stopped, [group_id_for_topic("t", 4, 0)]);
        assert!(h.data_dir.topic_dirs_on_disk("t", 4).is_empty());
        assert_eq!(h.open[&0], (8, group_id_for_topic("t", 8, 0)));
        let _ = std::fs::remove_dir_all(h.data_dir.root());
    }
}
