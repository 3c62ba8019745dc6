//! Changing who replicates a Raft group, one node at a time.
//!
//! The replicated metadata says which nodes should be the voters of each group (the metadata
//! group: every member not leaving, see [`crate::metadata::MemberRecord`]; a partition: its
//! replica list). Each replica of a group is told that target
//! ([`crate::replication::group::GroupInput::SetVoters`]) and the group's leader walks its
//! configuration towards it with single-node raft-rs `ConfChangeV2` changes ([`next_step`]), one in
//! flight at a time:
//!
//! 1. a target node that is not in the configuration is added as a *learner* (it receives the
//!    log, or a snapshot, but does not count for quorums or elections);
//! 2. a learner of the target is promoted to voter once it is caught up: it answered recently
//!    and its matched index is at the leader's commit index;
//! 3. once every target node votes, the voters outside the target are removed, the leader
//!    last: a leader that is itself removed first hands leadership to a caught-up target voter
//!    (raft-rs `transfer_leader`), and the new leader removes it.
//!
//! One change at a time (raft-rs's "simple" changes, each moving one voter) rather than joint
//! consensus: any two consecutive configurations differ by one voter, so their majorities
//! overlap and no joint phase is needed; the price is that a replacement takes two voter
//! changes (add, then remove) instead of one joint step, which costs one commit more and never
//! lowers the fault tolerance below the starting one. Because every replica holds the target
//! and the leader re-derives the next step from its configuration each turn, a new leader
//! elected in the middle of a change simply continues it.

use raft::prelude::{ConfChangeSingle, ConfChangeType, ConfChangeV2};
use thiserror::Error;

use crate::replication::group::AppendError;

/// A member's state and a member as `GET /members` lists it: wire types of the admin API,
/// defined in the `vdl-admin-api` crate.
pub use vdl_admin_api::members::{MemberState, MemberView};

/// Why a membership change was refused or did not finish.
#[derive(Debug, Error)]
pub enum MembershipError {
    /// The id is not a member.
    #[error("node {0} is not a member")]
    Unknown(u64),
    /// The id was removed (or is being removed); a returning node takes a new id.
    #[error("node {0} was removed; add the node under a new id")]
    Removed(u64),
    /// The id is a member at another peer address.
    #[error("node {0} is a member already, at {1}")]
    Conflict(u64, String),
    /// Removing the only member left.
    #[error("the last member cannot be removed")]
    LastMember,
    /// A replica has nowhere to go (every other member holds that partition already).
    #[error("no other member can take the replica of {0}: add a node first")]
    NoRoom(String),
    /// The metadata command did not commit.
    #[error("the metadata command failed: {0}")]
    Propose(AppendError),
    /// Committed, but not finished within the request's timeout (it goes on).
    #[error("not finished in time ({0}); the change goes on, GET /members shows progress")]
    Timeout(&'static str),
}

/// The kinds of single-node configuration change vdl proposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Add a node as a learner.
    AddLearner,
    /// Make a learner a voter.
    Promote,
    /// Remove a node (voter or learner).
    Remove,
}

/// The next thing a group's leader does to reach its target voters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Propose a configuration change for one node.
    Change(ChangeKind, u64),
    /// Hand leadership to this caught-up target voter (the leader itself is removed).
    TransferTo(u64),
}

/// The next step for leader `me` with configuration `voters` / `learners` towards `target`
/// voters (see the module documentation for the order); `caught_up(id)` says whether a replica
/// answered recently and holds every committed entry. `None`: nothing to do now (done, or
/// waiting for a learner to catch up).
pub fn next_step(
    me: u64,
    target: &[u64],
    voters: &[u64],
    learners: &[u64],
    caught_up: impl Fn(u64) -> bool,
) -> Option<Step> {
    if target.is_empty() {
        return None;
    }
    let mut target = target.to_vec();
    target.sort_unstable();
    if let Some(&missing) = target
        .iter()
        .find(|t| !voters.contains(t) && !learners.contains(t))
    {
        return Some(Step::Change(ChangeKind::AddLearner, missing));
    }
    let mut waiting = false;
    for &t in target.iter().filter(|t| learners.contains(t)) {
        if caught_up(t) {
            return Some(Step::Change(ChangeKind::Promote, t));
        }
        waiting = true;
    }
    if waiting {
        return None;
    }
    let mut extra: Vec<u64> = voters
        .iter()
        .copied()
        .filter(|v| !target.contains(v))
        .collect();
    extra.sort_unstable();
    if let Some(&other) = extra.iter().find(|v| **v != me) {
        // A voter leaves only while every other target voter is caught up (etcd's strict
        // reconfiguration check): removing a live voter while a target voter is down or
        // behind leaves fewer live voters than the new configuration's quorum. Found by the
        // simulation (tests/simulation, retention seed 1001): {1, 2, 3} -> {2, 3} while 2 was
        // down for a replaced disk left 3 alone; 2 came back empty and, rejoining, grants no
        // vote until it has caught up from a leader: the group had no leader ever again.
        if target.iter().any(|t| *t != me && !caught_up(*t)) {
            return None;
        }
        return Some(Step::Change(ChangeKind::Remove, other));
    }
    if extra.contains(&me) {
        return target
            .iter()
            .copied()
            .find(|t| *t != me && caught_up(*t))
            .map(Step::TransferTo);
    }
    let mut stale: Vec<u64> = learners
        .iter()
        .copied()
        .filter(|l| !target.contains(l))
        .collect();
    stale.sort_unstable();
    stale.first().map(|&l| Step::Change(ChangeKind::Remove, l))
}

/// The raft-rs change for one node (a single change with the automatic transition: raft-rs
/// applies it as a simple change, without a joint configuration).
pub fn conf_change(kind: ChangeKind, node: u64) -> ConfChangeV2 {
    let mut single = ConfChangeSingle::default();
    single.set_change_type(match kind {
        ChangeKind::AddLearner => ConfChangeType::AddLearnerNode,
        ChangeKind::Promote => ConfChangeType::AddNode,
        ChangeKind::Remove => ConfChangeType::RemoveNode,
    });
    single.node_id = node;
    let mut cc = ConfChangeV2::default();
    cc.set_changes(vec![single].into());
    cc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_adds_a_learner_promotes_it_then_removes_the_old_voter() {
        let all = |_| true;
        let none = |_| false;
        // 1 -> 4 in {1, 2, 3}, led by 2.
        assert_eq!(
            next_step(2, &[2, 3, 4], &[1, 2, 3], &[], all),
            Some(Step::Change(ChangeKind::AddLearner, 4))
        );
        assert_eq!(next_step(2, &[2, 3, 4], &[1, 2, 3], &[4], none), None);
        assert_eq!(
            next_step(2, &[2, 3, 4], &[1, 2, 3], &[4], all),
            Some(Step::Change(ChangeKind::Promote, 4))
        );
        assert_eq!(
            next_step(2, &[2, 3, 4], &[1, 2, 3, 4], &[], all),
            Some(Step::Change(ChangeKind::Remove, 1))
        );
        assert_eq!(next_step(2, &[2, 3, 4], &[2, 3, 4], &[], all), None);
    }

    #[test]
    fn a_voter_leaves_only_while_every_other_target_voter_is_caught_up() {
        // {1, 2, 3} -> {2, 3}, led by 3, while 2 is down (or back empty after a replaced
        // disk): removing 1 would leave 3 as the only live voter of a two-voter group.
        assert_eq!(next_step(3, &[2, 3], &[1, 2, 3], &[], |id| id != 2), None);
        assert_eq!(
            next_step(3, &[2, 3], &[1, 2, 3], &[], |_| true),
            Some(Step::Change(ChangeKind::Remove, 1))
        );
        // The leader's own progress does not count (it holds everything).
        assert_eq!(
            next_step(3, &[2, 3], &[1, 2, 3], &[], |id| id == 2),
            Some(Step::Change(ChangeKind::Remove, 1))
        );
    }

    #[test]
    fn a_removed_leader_hands_over_first() {
        let all = |_| true;
        assert_eq!(
            next_step(1, &[2, 3, 4], &[1, 2, 3, 4], &[], all),
            Some(Step::TransferTo(2))
        );
        assert_eq!(
            next_step(1, &[2, 3, 4], &[1, 2, 3, 4], &[], |id| id == 4),
            Some(Step::TransferTo(4))
        );
        assert_eq!(next_step(1, &[2, 3], &[1, 2, 3], &[], |_| false), None);
        // Stale learners go last.
        assert_eq!(
            next_step(2, &[2, 3], &[2, 3], &[5], all),
            Some(Step::Change(ChangeKind::Remove, 5))
        );
    }
}
