//! The core under simulation: each simulated node carries out what its metadata replica asked
//! through the server's core, as the node does: the core's one dispatch of the metadata's
//! effects (`core::effects::carry_out`) onto the simulated node as its `EffectHost`, the core's
//! decisions of which partitions a topic's layout places on the node and with what
//! configuration, where their files live, what dropping a (deleted) topic stops and removes
//! from the catalog and the disk, and how a node comes in line with a metadata snapshot
//! (`core::effects::bring_in_line`, at start and when one is installed from the leader). The
//! simulated node opens partitions as simulated replicas (the real group state machine over a
//! real store on the simulated disk) and keeps them in the core's catalog.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use vdl_server::core::catalog::{Catalog, PartitionHandle};
use vdl_server::core::data_dir::DataDir;
use vdl_server::core::effects::{bring_in_line, EffectHost};
use vdl_server::core::membership::{reconcile_replicas, ReplicaHost};
use vdl_server::core::topics::{
    drop_partition, drop_topic, open_topic, PartitionHost, PartitionToOpen,
};
use vdl_server::metadata::{ClusterMeta, TopicMeta};
use vdl_server::replication::group::{try_deliver, GroupInput};
use vdl_server::replication::replicas::Directories;
use vdl_server::replication::transport::PeerSender;

use crate::open::{open_partition_group, HostEvent, SimMeta};
use std::collections::BTreeSet;

use vdl_server::metadata::{MetaCommand, METADATA_GROUP_ID};

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
    /// The incarnations a `DeleteTopic` in the metadata log deleted when the node started
    /// (the core's scan of the log, as the node's).
    pub deleted_before_start: BTreeSet<(String, u64)>,
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

    fn deleted_before_start(&self, name: &str, incarnation: u64) -> bool {
        self.deleted_before_start
            .contains(&(name.to_owned(), incarnation))
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

    fn open_partitions(&self, name: &str) -> Vec<(u32, u64, u64)> {
        self.catalog
            .iter()
            .filter(|(n, _, _)| *n == name)
            .map(|(_, p, h)| (p, h.incarnation, h.group))
            .collect()
    }

    /// The group's replica is dropped as it stands (its task ends; appends waiting on it
    /// fail).
    fn stop_group(&mut self, group: u64) {
        self.groups.remove(&group);
    }

    fn forget_topic(&mut self, name: &str) {
        self.catalog.remove_topic(name);
    }

    fn forget_partition(&mut self, name: &str, partition: u32) {
        self.catalog.remove_partition(name, partition);
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

/// The simulated node as the host of what the metadata's effects call for. The simulation's
/// clients create and delete topics (and allocate producer ids); membership changes (a
/// member removed, its partitions reassigned: see [`crate::membership_removal`]) go through
/// the core's reconciliation as on the node; the other effects (configs, DeleteRecords, preferred leaders, admin addresses, transaction
/// work) come
/// from commands it does not send, and are nothing here.
impl EffectHost for SimPartitions<'_> {
    type OpenError = Infallible;

    fn data_dir(&self) -> &DataDir {
        self.data_dir
    }

    fn open_topic_incarnations(&self) -> Vec<(String, u64)> {
        self.catalog.open_topic_incarnations()
    }

    /// Opens through the core; a partition that cannot be opened fails the run.
    fn open_topic(
        &mut self,
        name: &str,
        incarnation: u64,
        replicas: &[Vec<u64>],
    ) -> Result<(), Infallible> {
        open_topic(self, name, incarnation, replicas)
            .unwrap_or_else(|e| panic!("node {}: open topic {name}~{incarnation}: {e}", self.me));
        Ok(())
    }

    fn drop_topic(&mut self, name: &str, incarnation: Option<u64>) {
        drop_topic(self, name, incarnation);
    }

    fn apply_topic_settings(&mut self, _name: &str, _incarnation: u64) {}

    fn delete_records_before(&mut self, _: &str, _: u64, _: u32, _: u64) {}

    fn hand_leadership_to(&mut self, _: &str, _: u64, _: u32, _: u64) {}

    /// The core's reconciliation of the partitions here with the replica lists (the node
    /// also admits members and retargets the metadata group; the simulation's metadata group
    /// keeps its three voters, the removed member included).
    fn reconcile_membership(&mut self) {
        let topics = self.topics();
        reconcile_replicas(self, &topics);
    }

    fn note_admin_address(&mut self, _id: u64, _address: String) {}

    /// The simulation runs no transaction tasks.
    fn note_transaction_work(&mut self) {}
}

/// The simulated node as the host of the core's replica reconciliation.
impl ReplicaHost for SimPartitions<'_> {
    type OpenError = Infallible;

    fn me(&self) -> u64 {
        self.me
    }

    fn open_topic(
        &mut self,
        name: &str,
        incarnation: u64,
        replicas: &[Vec<u64>],
    ) -> Result<(), Infallible> {
        EffectHost::open_topic(self, name, incarnation, replicas)
    }

    fn open_partitions(&self, name: &str) -> Vec<(u32, u64)> {
        PartitionHost::open_partitions(self, name)
            .into_iter()
            .map(|(p, i, _)| (p, i))
            .collect()
    }

    fn set_voters(&mut self, name: &str, partition: u32, voters: Vec<u64>) {
        let group = self.catalog.get(name, partition).map(|p| p.group);
        if let Some(sg) = group.and_then(|g| self.groups.get(&g)) {
            try_deliver(&sg.inbox, GroupInput::SetVoters(voters));
        }
    }

    fn drop_partition(&mut self, name: &str, incarnation: u64, partition: u32) {
        drop_partition(self, name, incarnation, partition);
    }
}

impl SimPartitions<'_> {
    /// The topics of the node's metadata state.
    fn topics(&self) -> Vec<(String, TopicMeta)> {
        self.state
            .read()
            .unwrap()
            .topics
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect()
    }

    /// Brings the node in line with its metadata state, loaded from a snapshot at `index`
    /// (at start, `reconcile` false) or installed from the leader (`reconcile`), as the node
    /// does: through the core.
    pub fn bring_in_line(&mut self, index: u64, reconcile: bool) {
        let topics = self.topics();
        bring_in_line(self, index, &topics, reconcile);
    }

    /// Carries out what the metadata replica asked since the last time, in order, through the
    /// core's dispatch.
    pub fn carry_out(&mut self, events: Vec<HostEvent>) {
        for event in events {
            match event {
                HostEvent::Effect(effect) => vdl_server::core::effects::carry_out(self, effect),
                HostEvent::SnapshotInstalled(index) => self.bring_in_line(index, true),
            }
        }
    }
}

impl SimNode {
    /// The node's metadata replica (None while down).
    pub(crate) fn metadata(&self) -> Option<&SimMeta> {
        self.groups.get(&METADATA_GROUP_ID)?.meta.as_ref()
    }

    /// The node as the core's host of its topic partitions (None while down).
    pub(crate) fn partitions_host(&mut self) -> Option<SimPartitions<'_>> {
        let meta = self.metadata()?;
        let state = meta.state.clone();
        let deleted_before_start = meta.deleted_before_start.clone();
        Some(SimPartitions {
            me: self.id,
            data_dir: &self.data_dir,
            catalog: &mut self.catalog,
            groups: &mut self.groups,
            state,
            peers: self.sender.clone()?,
            options: self.options,
            directories: self.dirs.clone()?,
            deleted_before_start,
        })
    }

    /// Carries out, through the core, what the node's metadata replica asked since the last
    /// call (partitions of created topics opened; snapshots installed reconciled).
    pub(crate) fn carry_out_metadata(&mut self) {
        let Some(meta) = self.metadata() else {
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
        let Some(meta) = self.metadata() else {
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

impl World {
    /// With topic deletes, now and then a delete of a topic the node at `at` knows, of the
    /// incarnation it knows (as the Kafka path proposes it).
    pub(crate) fn topic_delete(&mut self, at: usize) -> Option<MetaCommand> {
        if !self.options.topic_deletes || !self.rng.chance(200) {
            return None;
        }
        let meta = self.nodes[at].metadata()?;
        let topics: Vec<(String, u64)> = {
            let state = meta.state.read().unwrap();
            state
                .topics
                .iter()
                .map(|(n, t)| (n.clone(), t.created_at_index))
                .collect()
        };
        if topics.is_empty() {
            return None;
        }
        let (name, incarnation) = topics[self.rng.below(topics.len() as u64) as usize].clone();
        if !self.deleted_names.contains(&name) {
            self.deleted_names.push(name.clone());
        }
        Some(MetaCommand::DeleteTopic {
            name,
            incarnation: Some(incarnation),
        })
    }

    /// A new topic's name: a new one, or with topic deletes now and then one a delete was sent
    /// for (created again: a new incarnation, when the delete committed first).
    pub(crate) fn topic_name(&mut self) -> String {
        if self.options.topic_deletes && !self.deleted_names.is_empty() && self.rng.chance(400) {
            let i = self.rng.below(self.deleted_names.len() as u64) as usize;
            self.recreates_sent += 1;
            return self.deleted_names[i].clone();
        }
        format!("t{}", self.next_request)
    }

    /// Checked after every step: a node serves only topic incarnations its metadata state
    /// holds (its catalog's partitions are of the incarnation its state has under the name:
    /// a deleted or replaced incarnation is dropped in the step its delete is applied, and a
    /// restarted node does not open again one its log deletes), and it runs no group of a
    /// topic partition its catalog does not hold (a dropped partition's replica is gone).
    pub fn check_serving(&self) {
        let bare: BTreeSet<u64> = all_groups().into_iter().collect();
        for n in self.nodes.iter().filter(|n| n.up) {
            let Some(meta) = n.metadata() else {
                continue;
            };
            let state = meta.state.read().unwrap();
            for (name, p, h) in n.catalog.iter() {
                let held = state.topics.get(name).map(|t| t.created_at_index);
                assert_eq!(
                    held,
                    Some(h.incarnation),
                    "step {}: node {}: partition {p} of {name}~{} is open, its metadata holds \
                     incarnation {held:?}",
                    self.step,
                    n.id,
                    h.incarnation
                );
            }
            for g in n.groups.keys().filter(|g| !bare.contains(g)) {
                assert!(
                    n.catalog.owner_of_group(*g).is_some(),
                    "step {}: node {}: group {g} runs, no partition of its catalog is it",
                    self.step,
                    n.id
                );
            }
        }
    }
}

/// What the topic deletes of a run came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// `DeleteTopic` commands acknowledged.
    pub deletes_acknowledged: usize,
    /// Creates sent under a name deleted before.
    pub recreates_sent: u64,
    /// Topics of the agreed state that are a new incarnation of a name whose acknowledged
    /// delete removed an older one.
    pub recreated: usize,
    /// Appends acknowledged to partitions of incarnations deleted since (gone with them).
    pub acknowledged_to_deleted: usize,
    /// Topic incarnations' directories found on the nodes' disks at the end (all of live
    /// incarnations).
    pub topic_dirs: usize,
}

/// After the heal, on every node: every directory under `topics/` is of an incarnation the
/// agreed metadata state (`state`, node 1's) holds under its name: a deleted incarnation's
/// files are gone from the disk (also when its node crashed or lost power around the delete);
/// every acknowledged delete removed its incarnation from the state; and no node runs a
/// group of a deleted incarnation to which an append was acknowledged.
pub fn check_deletes(seed: u64, w: &World, live_groups: &BTreeSet<u64>) -> DeleteOutcome {
    let meta = w.nodes[0].groups[&METADATA_GROUP_ID]
        .meta
        .as_ref()
        .expect("the metadata state");
    let state = meta.state.read().unwrap();
    let mut outcome = DeleteOutcome {
        recreates_sent: w.recreates_sent,
        ..DeleteOutcome::default()
    };
    for n in &w.nodes {
        let Ok(entries) = std::fs::read_dir(n.data_dir.root().join("topics")) else {
            continue;
        };
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let (name, incarnation) = vdl_server::core::data_dir::parse_topic_dir(&file)
                .unwrap_or_else(|| panic!("seed {seed}: node {}: stray topics/{file}", n.id));
            assert_eq!(
                state.topics.get(name).map(|t| t.created_at_index),
                Some(incarnation),
                "seed {seed}: node {}: topics/{file} is left of an incarnation the metadata \
                 no longer holds",
                n.id
            );
            outcome.topic_dirs += 1;
        }
    }
    let mut recreated = BTreeSet::new();
    for acked in &w.acked_meta {
        if let MetaCommand::DeleteTopic {
            name,
            incarnation: Some(incarnation),
        } = &acked.command
        {
            outcome.deletes_acknowledged += 1;
            let now = state.topics.get(name).map(|t| t.created_at_index);
            assert_ne!(
                now,
                Some(*incarnation),
                "seed {seed}: metadata: the acknowledged delete of {name}~{incarnation} did not \
                 remove it"
            );
            if now.is_some() {
                recreated.insert(name.clone());
            }
        }
    }
    outcome.recreated = recreated.len();
    for (g, _, _) in &w.acked {
        if live_groups.contains(g) {
            continue;
        }
        outcome.acknowledged_to_deleted += 1;
        for n in &w.nodes {
            assert!(
                !n.groups.contains_key(g),
                "seed {seed}: node {}: group {g} of a deleted incarnation still runs",
                n.id
            );
        }
    }
    outcome
}
