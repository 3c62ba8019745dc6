//! Membership changes: stepping the configuration toward the voters asked by
//! [`GroupInput::SetVoters`](super::GroupInput::SetVoters) and publishing the configuration this replica knows.
//!
//! A child module of `group.rs`, an `impl Group` of its own.

use super::{Group, MAX_TRACKED_VOTERS};
use raft::StateRole;

impl Group {
    /// On the leader, one step towards the voters asked by [`GroupInput::SetVoters`](super::GroupInput::SetVoters) when no
    /// configuration change is in flight (see [`crate::replication::membership`] for the order).
    /// Returns whether a change was proposed or leadership handed over.
    pub(super) fn change_membership(&mut self) -> bool {
        let Some(target) = self.target_voters.clone() else {
            return false;
        };
        let raft = &self.p.node.raft;
        if raft.state != StateRole::Leader
            || raft.lead_transferee.is_some()
            || raft.pending_conf_index > raft.raft_log.applied
            || !raft.commit_to_current_term()
        {
            return false;
        }
        let conf = raft.prs().conf();
        let step = crate::replication::membership::next_step(
            raft.id,
            &target,
            &conf.voters().ids().iter().collect::<Vec<u64>>(),
            &conf.learners().iter().copied().collect::<Vec<u64>>(),
            |id| {
                raft.prs()
                    .get(id)
                    .is_some_and(|pr| pr.recent_active && pr.matched >= raft.raft_log.committed)
            },
        );
        let Some(step) = step else {
            return false;
        };
        tracing::info!(stream = %self.p.name, ?step, "membership change");
        match step {
            crate::replication::membership::Step::TransferTo(to) => {
                self.p.node.transfer_leader(to);
                true
            }
            crate::replication::membership::Step::Change(kind, id) => {
                let cc = crate::replication::membership::conf_change(kind, id);
                if let Err(e) = self.p.node.propose_conf_change(Vec::new(), cc) {
                    tracing::warn!(stream = %self.p.name, "proposing a membership change failed: {e}");
                    return false;
                }
                true
            }
        }
    }

    /// Publishes the configuration's voters and whether the asked membership is reached.
    pub(super) fn publish_membership(&mut self) {
        let raft = &self.p.node.raft;
        let conf = raft.prs().conf();
        let mut ids: Vec<u64> = conf.voters().ids().iter().collect();
        ids.sort_unstable();
        let mut voters = [0u64; MAX_TRACKED_VOTERS];
        for (slot, id) in voters.iter_mut().zip(ids.iter()) {
            *slot = *id;
        }
        let settled = raft.state == StateRole::Leader
            && conf.learners().is_empty()
            && raft.pending_conf_index <= raft.raft_log.applied
            && self.target_voters.as_ref().is_none_or(|t| *t == ids);
        if voters != self.visible.voters || settled != self.visible.membership_settled {
            self.visible.voters = voters;
            self.visible.membership_settled = settled;
            self.publish();
        }
    }
}
