//! The core under simulation: each simulated node carries out what its metadata replica asked
//! (topics created, snapshots installed) through the server's core, as the node does: the core
//! decides which partitions the topic's layout places on the node and with what
//! configuration, and where their files live; the simulated node opens them as simulated
//! replicas (the real group state machine over a real store on the simulated disk) and keeps
//! them in the core's catalog.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use vdl_server::core::catalog::{Catalog, PartitionHandle};
use vdl_server::core::data_dir::DataDir;
use vdl_server::core::topics::{open_topic, PartitionHost, PartitionToOpen};
use vdl_server::metadata::{ClusterMeta, Effect};
use vdl_server::replication::group::{try_deliver, GroupInput};
use vdl_server::replication::replicas::Directories;
use vdl_server::replication::transport::PeerSender;

use crate::open::{open_partition_group, HostEvent};
use std::collections::BTreeSet;

use vdl_server::metadata::METADATA_GROUP_ID;

use crate::world::{all_groups, SimGroup, SimNode, SimOptions, World};

/// A simulated node's handle on one open partition: its group (in the node's groups) and
/// the topic incarnation it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimPartition {
    pub group: u64,
    pub incarnation: u64,
}

impl PartitionHandle for SimPartition {
    fn incarnation(&self) -> u64 {
        self.incarnation
    }

    fn group(&self) -> u64 {
        self.group
    }
}

/// One simulated node as the host of the partitions the core opens.
pub struct SimPartitions<'a> {
    pub me: u64,
    pub data_dir: &'a DataDir,
    pub catalog: &'a mut Catalog<SimPartition>,
    pub groups: &'a mut BTreeMap<u64, SimGroup>,
    pub state: Arc<RwLock<ClusterMeta>>,
    pub peers: PeerSender,
    pub options: SimOptions,
    pub directories: Arc<Directories>,
}

impl PartitionHost for SimPartitions<'_> {
    type Error = Infallible;

    fn me(&self) -> u64 {
        self.me
    }

    fn data_dir(&self) -> &DataDir {
        self.data_dir
    }

    fn open_incarnation(&self, name: &str) -> Option<u64> {
        self.catalog.open_incarnation(name)
    }

    fn is_open(&self, name: &str, partition: u32) -> bool {
        self.catalog.get(name, partition).is_some()
    }

    /// The simulation deletes no topic.
    fn deleted_before_start(&self, _name: &str, _incarnation: u64) -> bool {
        false
    }

    fn moving(&self, name: &str, incarnation: u64) -> BTreeMap<u32, Vec<u64>> {
        self.state
            .read()
            .unwrap()
            .topics
            .get(name)
            .filter(|t| t.created_at_index == incarnation)
            .map(|t| t.moving.clone())
            .unwrap_or_default()
    }

    fn drop_topic(&mut self, name: &str, incarnation: Option<u64>) {
        let open = self.catalog.partitions(name);
        if open
            .iter()
            .any(|p| incarnation.is_some_and(|i| i != p.incarnation))
        {
            return;
        }
        for p in self.catalog.remove_topic(name) {
            self.groups.remove(&p.group);
        }
        if let Some(i) = incarnation {
            for dir in self.data_dir.topic_dirs_on_disk(name, i) {
                std::fs::remove_dir_all(&dir).expect("remove a dropped partition's directory");
            }
        }
    }

    fn open_partition(
        &mut self,
        name: &str,
        incarnation: u64,
        plan: &PartitionToOpen,
        dir: PathBuf,
    ) -> Result<(), Infallible> {
        assert!(
            !self.groups.contains_key(&plan.group),
            "node {}: partition {} of {name}~{incarnation} has the id of an open group ({})",
            self.me,
            plan.partition,
            plan.group
        );
        let sg = open_partition_group(
            &dir,
            self.me,
            plan.group,
            plan.voters.clone(),
            plan.learners.clone(),
            self.peers.clone(),
            self.options,
            &self.directories,
        );
        if plan.stands_for_election {
            try_deliver(&sg.inbox, GroupInput::Campaign);
        }
        self.groups.insert(plan.group, sg);
        let earlier = self.catalog.insert(
            name,
            plan.partition,
            SimPartition {
                group: plan.group,
                incarnation,
            },
        );
        assert!(
            earlier.is_none(),
            "partition {} of {name} opened twice",
            plan.partition
        );
        Ok(())
    }
}

impl SimPartitions<'_> {
    /// Opens the partitions placed here of every topic in the metadata state (as the node
    /// does after loading a metadata snapshot at start, or installing one from the leader).
    pub fn open_every_topic(&mut self) {
        let topics: Vec<(String, u64, Vec<Vec<u64>>)> = self
            .state
            .read()
            .unwrap()
            .topics
            .iter()
            .map(|(n, t)| (n.clone(), t.created_at_index, t.replicas.clone()))
            .collect();
        let open = self.catalog.open_topic_incarnations();
        let current = |name: &str| {
            topics
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, i, _)| *i)
        };
        for (name, incarnation) in vdl_server::core::topics::stale_incarnations(&open, current) {
            self.drop_topic(&name, Some(incarnation));
        }
        for (name, incarnation, replicas) in &topics {
            open_topic(self, name, *incarnation, replicas).expect("open a topic");
        }
    }

    /// Carries out what the metadata replica asked since the last time, in order.
    pub fn carry_out(&mut self, events: Vec<HostEvent>) {
        for event in events {
            match event {
                HostEvent::Effect(Effect::OpenTopic(name, incarnation, replicas)) => {
                    open_topic(self, &name, incarnation, &replicas).expect("open a topic")
                }
                HostEvent::Effect(Effect::DropTopic(name, incarnation)) => {
                    self.drop_topic(&name, incarnation)
                }
                HostEvent::Effect(_) => {}
                HostEvent::SnapshotInstalled => self.open_every_topic(),
            }
        }
    }
}

impl SimNode {
    /// The node as the core's host of its topic partitions (None while down).
    pub(crate) fn partitions_host(&mut self) -> Option<SimPartitions<'_>> {
        let state = self
            .groups
            .get(&METADATA_GROUP_ID)?
            .meta
            .as_ref()?
            .state
            .clone();
        Some(SimPartitions {
            me: self.id,
            data_dir: &self.data_dir,
            catalog: &mut self.catalog,
            groups: &mut self.groups,
            state,
            peers: self.sender.clone()?,
            options: self.options,
            directories: self.dirs.clone()?,
        })
    }

    /// Carries out, through the core, what the node's metadata replica asked since the last
    /// call (partitions of created topics opened; snapshots installed reconciled).
    pub(crate) fn carry_out_metadata(&mut self) {
        let Some(meta) = self
            .groups
            .get(&METADATA_GROUP_ID)
            .and_then(|g| g.meta.as_ref())
        else {
            return;
        };
        let events = std::mem::take(&mut *meta.host.events.lock().unwrap());
        if events.is_empty() {
            return;
        }
        if let Some(mut host) = self.partitions_host() {
            host.carry_out(events);
        }
    }

    /// The groups of the topic partitions the node's metadata state places on it, as the core
    /// decides them: (topic, partition, group).
    pub fn placed_partitions(&self) -> BTreeSet<(String, u32, u64)> {
        let Some(meta) = self
            .groups
            .get(&METADATA_GROUP_ID)
            .and_then(|g| g.meta.as_ref())
        else {
            return BTreeSet::new();
        };
        let state = meta.state.read().unwrap();
        let mut placed = BTreeSet::new();
        for (name, t) in &state.topics {
            let plans = vdl_server::core::topics::partitions_to_open(
                self.id,
                name,
                t.created_at_index,
                &t.replicas,
                &t.moving,
                |_| false,
            );
            for p in plans {
                placed.insert((name.clone(), p.partition, p.group));
            }
        }
        placed
    }
}

impl World {
    /// The groups of the topic partitions open on some node (sorted).
    pub fn open_topic_groups(&self) -> Vec<u64> {
        let groups: BTreeSet<u64> = self
            .nodes
            .iter()
            .flat_map(|n| n.catalog.iter().map(|(_, _, p)| p.group))
            .collect();
        groups.into_iter().collect()
    }

    /// Every group of the cluster: the metadata group, the bare stream groups, and the
    /// partitions of the topics some node's metadata state holds or some node has open.
    pub fn groups_of_cluster(&self) -> Vec<u64> {
        let mut groups: BTreeSet<u64> = all_groups().into_iter().collect();
        groups.extend(self.open_topic_groups());
        for n in &self.nodes {
            groups.extend(n.placed_partitions().into_iter().map(|(_, _, g)| g));
        }
        groups.into_iter().collect()
    }
}
