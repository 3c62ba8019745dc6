//! A member removed through the metadata (`member_removal`): topics are placed on two of the
//! three nodes (explicit replica lists, as a client's CreateTopic with an assignment), and once
//! the faults stop the simulation proposes `RemoveMember` for node [`REMOVED`] while clients
//! go on appending. The metadata's own placement (`ClusterMeta::remove_member`) reassigns each
//! partition that had a replica there to the other node (`TopicMeta::moving`); every node
//! carries the `MembershipChanged` effect out through the core
//! (`core::membership::reconcile_replicas`: the new replica opened as a learner, the moving
//! partitions' groups told their new voters); each node proposes `FinishReassignment` for the
//! moving partitions it leads once their groups have the new voters
//! (`core::membership::reassignment_done`, as the node's background task does), and the
//! removed node drops its replicas (their directories removed) when it applies it.
//!
//! Checked at the end: the removed node is leaving in the agreed state, holds no replica of
//! any partition and no topic directory; no partition is still moving, and none names it;
//! and (with the other checks of `main.rs`, which compare the replicas each group's metadata
//! places) every acknowledged append is on the partition's new replicas.

use vdl_server::core::membership::{moving_partitions, reassignment_done};
use vdl_server::metadata::{MetaCommand, METADATA_GROUP_ID};

use crate::world::{World, NODES};

/// The member removed.
pub const REMOVED: u64 = 3;
/// Steps in which the partitions must have moved off the removed member.
const MOVE_STEPS_MAX: u64 = 8_000;
/// Steps of the move with the run's faults (cut-offs, loss, crashes, power cuts at an
/// fsync) before the heal.
const MOVE_FAULT_STEPS: u64 = 600;
/// How often (in steps) the nodes propose `FinishReassignment` and the removal is sent again
/// while it is not applied (the node's background task runs every 200 ms).
const EVERY_STEPS: u64 = 25;

impl World {
    /// A new topic's replica lists: empty (every member) unless a member is removed in this
    /// run; then two distinct nodes per partition, chosen among the members not removed.
    pub(crate) fn replica_lists(&mut self, partitions: u32) -> Vec<Vec<u64>> {
        if !self.options.member_removal {
            return Vec::new();
        }
        let removed = self.removed;
        let eligible: Vec<u64> = NODES
            .iter()
            .copied()
            .filter(|n| Some(*n) != removed)
            .collect();
        (0..partitions)
            .map(|_| {
                let first = self.rng.below(eligible.len() as u64) as usize;
                let second = (first + 1 + self.rng.below(eligible.len() as u64 - 1) as usize)
                    % eligible.len();
                vec![eligible[first], eligible[second]]
            })
            .collect()
    }

    /// Every [`EVERY_STEPS`] steps, each running node proposes `FinishReassignment` for the
    /// moving partitions whose group it leads with exactly the new voters, settled.
    pub(crate) fn finish_reassignments(&mut self) {
        if !self.options.member_removal || self.step % EVERY_STEPS != 0 {
            return;
        }
        let mut done = Vec::new();
        for n in self.nodes.iter().filter(|n| n.up) {
            let Some(meta) = n.metadata() else {
                continue;
            };
            let state = meta.state.read().unwrap();
            for (name, t) in &state.topics {
                for (partition, new) in moving_partitions(t) {
                    let Some(group) = n
                        .catalog
                        .get(name, partition)
                        .filter(|h| h.incarnation == t.created_at_index)
                        .map(|h| h.group)
                    else {
                        continue;
                    };
                    let Some(sg) = n.groups.get(&group) else {
                        continue;
                    };
                    let v = *sg.visible.borrow();
                    if reassignment_done(n.id, &new, v.leader, v.membership_settled, &v.voters) {
                        done.push(MetaCommand::FinishReassignment {
                            name: name.clone(),
                            incarnation: t.created_at_index,
                            partition,
                        });
                    }
                }
            }
        }
        for command in done {
            self.finish_sent += 1;
            self.send_metadata_command(command);
        }
    }

    /// Whether every running node's metadata state has member `id` leaving.
    fn removal_applied(&self, id: u64) -> bool {
        self.nodes.iter().all(|n| {
            n.metadata().is_some_and(|m| {
                let state = m.state.read().unwrap();
                state.member_records.get(&id).is_some_and(|r| r.leaving)
            })
        })
    }

    /// Whether the moves off member `id` are done as every node sees them: no partition
    /// moving or naming it, and it has no partition open.
    fn moved_off(&self, id: u64) -> bool {
        self.nodes.iter().all(|n| {
            let Some(meta) = n.metadata() else {
                return false;
            };
            let state = meta.state.read().unwrap();
            state
                .topics
                .values()
                .all(|t| t.moving.is_empty() && t.replicas.iter().all(|r| !r.contains(&id)))
        }) && self.nodes[(id - 1) as usize].catalog.is_empty()
    }

    /// Removes member [`REMOVED`] through the metadata, with clients appending and the faults
    /// going on for [`MOVE_FAULT_STEPS`] steps, and runs until its partitions have moved; returns the partitions reassigned (those of
    /// node 1's state that named it when the removal was sent).
    pub fn remove_member(&mut self, seed: u64) -> usize {
        self.removed = Some(REMOVED);
        self.moved_groups = self.nodes[(REMOVED - 1) as usize]
            .catalog
            .iter()
            .map(|(_, _, h)| h.group)
            .collect();
        self.acked_before_removal = self.acked.len();
        let faults_before = self.faults;
        let before = self.partitions_on(REMOVED);
        let mut moved = false;
        for i in 0..MOVE_STEPS_MAX {
            if i % (8 * EVERY_STEPS) == 0 && !self.removal_applied(REMOVED) {
                self.send_metadata_command(MetaCommand::RemoveMember {
                    id: REMOVED,
                    members: Default::default(),
                });
            }
            // The faults go on through the first steps of the move, then heal.
            if i == MOVE_FAULT_STEPS {
                self.heal();
                let f = self.faults;
                self.faults_during_move = (
                    f.cuts - faults_before.cuts,
                    f.crashes - faults_before.crashes,
                    f.power_cuts - faults_before.power_cuts,
                );
            }
            self.step_once(i < MOVE_FAULT_STEPS, true);
            if i >= MOVE_FAULT_STEPS && self.removal_applied(REMOVED) && self.moved_off(REMOVED) {
                moved = true;
                break;
            }
        }
        assert!(
            moved,
            "seed {seed}: the partitions did not move off node {REMOVED} within \
             {MOVE_STEPS_MAX} steps:\n{}",
            self.describe()
        );
        before
    }

    /// How many topic partitions node 1's metadata state places on node `id`.
    fn partitions_on(&self, id: u64) -> usize {
        let meta = self.nodes[0].groups[&METADATA_GROUP_ID]
            .meta
            .as_ref()
            .expect("the metadata state");
        let state = meta.state.read().unwrap();
        state
            .topics
            .values()
            .flat_map(|t| t.replicas.iter())
            .filter(|r| r.contains(&id))
            .count()
    }
}

/// What the removal came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RemovalOutcome {
    /// Partitions that had a replica on the removed member when it was removed.
    pub reassigned: usize,
    /// `FinishReassignment` commands the nodes proposed.
    pub finish_sent: u64,
    /// Appends acknowledged to the reassigned partitions (over the whole run).
    pub acknowledged_to_moved: usize,
    /// Of those, acknowledged after the removal was sent (during the move).
    pub acknowledged_during_move: usize,
    /// Cut-offs, crashes and power cuts at an fsync in the first steps of the move.
    pub faults_during_move: (u64, u64, u64),
}

/// After the heal: the removed member is leaving in the agreed state (node 1's), no partition
/// is moving or names it, and it has no topic partition open and no topic directory on its
/// disk.
pub fn check_removal(seed: u64, w: &World, reassigned: usize) -> RemovalOutcome {
    let Some(id) = w.removed else {
        return RemovalOutcome::default();
    };
    let meta = w.nodes[0].groups[&METADATA_GROUP_ID]
        .meta
        .as_ref()
        .expect("the metadata state");
    let state = meta.state.read().unwrap();
    assert!(
        state.member_records.get(&id).is_some_and(|r| r.leaving),
        "seed {seed}: metadata: node {id} is not leaving after its removal"
    );
    for (name, t) in &state.topics {
        assert!(
            t.moving.is_empty(),
            "seed {seed}: metadata: {name} still has partitions moving: {:?}",
            t.moving
        );
        assert!(
            t.replicas.iter().all(|r| !r.contains(&id)),
            "seed {seed}: metadata: {name} still has a replica on removed node {id}: {:?}",
            t.replicas
        );
    }
    let node = &w.nodes[(id - 1) as usize];
    assert!(
        node.catalog.is_empty(),
        "seed {seed}: removed node {id} still has topic partitions open"
    );
    let left: Vec<String> = std::fs::read_dir(node.data_dir.root().join("topics"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "seed {seed}: removed node {id} still has topic directories: {left:?}"
    );
    let moved_groups: std::collections::BTreeSet<u64> = w.moved_groups.iter().copied().collect();
    RemovalOutcome {
        reassigned,
        finish_sent: w.finish_sent,
        acknowledged_to_moved: w
            .acked
            .iter()
            .filter(|(g, _, _)| moved_groups.contains(g))
            .count(),
        faults_during_move: w.faults_during_move,
        acknowledged_during_move: w.acked[w.acked_before_removal..]
            .iter()
            .filter(|(g, _, _)| moved_groups.contains(g))
            .count(),
    }
}
