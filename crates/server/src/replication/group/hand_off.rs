//! Leader transfer: to the preferred replica when it is live and caught up, to the best
//! voter when this node shuts down (which peers' failures concern a group: `succession.rs`).
//!
//! A child module of `group.rs`, an `impl Group` of its own.

use super::Group;
use raft::StateRole;

impl Group {
    /// On the leader: hands leadership to the preferred replica when it is not this node, is
    /// in the configuration, was heard from recently and has every committed entry (raft-rs
    /// then sends it TimeoutNow once it matches the whole log; proposals arriving meanwhile are
    /// refused as on any leader change, and clients retry).
    pub(super) fn hand_over_to_preferred(&mut self) {
        let Some((preferred, _)) = self.p.preferred_leader else {
            return;
        };
        let raft = &self.p.node.raft;
        if raft.state != StateRole::Leader || raft.id == preferred || raft.lead_transferee.is_some()
        {
            return;
        }
        let committed = raft.raft_log.committed;
        let ready = raft
            .prs()
            .get(preferred)
            .is_some_and(|pr| pr.recent_active && pr.matched >= committed);
        if ready {
            tracing::info!(stream = %self.p.name, to = preferred, "handing leadership to the preferred replica");
            self.set_quiesced(false);
            self.p.node.transfer_leader(preferred);
        }
    }

    /// On the leader: starts a transfer to the voter not in `tried` with the highest matched
    /// index (recently active ones first) and returns its id; None when not leading or no
    /// such voter.
    pub(super) fn hand_off(&mut self, tried: &[u64]) -> Option<u64> {
        let raft = &self.p.node.raft;
        if raft.state != StateRole::Leader {
            return None;
        }
        let me = raft.id;
        let voters: Vec<u64> = raft.prs().conf().voters().ids().iter().collect();
        let target = raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != me && voters.contains(id) && !tried.contains(id))
            .max_by_key(|(id, pr)| (pr.recent_active, pr.matched, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id)?;
        self.set_quiesced(false);
        tracing::info!(stream = %self.p.name, to = target, "shutting down: handing leadership over");
        self.p.node.transfer_leader(target);
        Some(target)
    }
}
