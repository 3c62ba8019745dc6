//! Quiescing an idle group: the leader counts idle ticks, tells its followers to quiesce
//! and stops ticking (see [`crate::runtime::quiesce`]).
//!
//! A child module of `group.rs`, an `impl Group` of its own.

use super::Group;

impl Group {
    /// On the leader, once per tick: counts idle ticks and, after an election timeout of them,
    /// broadcasts the quiesce heartbeat and stops ticking (see [`crate::runtime::quiesce`]). The
    /// metadata group never quiesces.
    pub(super) fn maybe_quiesce(&mut self) {
        let idle = !self.p.forward_proposals
            && (self.target_voters.is_none() || self.visible.membership_settled)
            && self.queued.is_empty()
            && self.proposed.is_empty()
            && self.appended.is_empty()
            && self.pending_count == 0
            && self.leader_may_quiesce();
        if !idle {
            self.idle_ticks = 0;
            return;
        }
        self.idle_ticks += 1;
        let needed = self.p.node.raft.election_timeout()
            * crate::runtime::quiesce::QUIESCE_AFTER_IDLE_ELECTIONS;
        if self.idle_ticks >= needed {
            self.p.node.raft.ping();
            self.mark_quiesce_heartbeats = true;
            self.set_quiesced(true);
            // No turn may come for a long time: the in-sync set it publishes must already
            // leave out the voters reported down (it may quiesce without them).
            self.update_in_sync();
        }
    }

    /// On a leader: its Raft state allows quiescing
    /// ([`crate::runtime::quiesce::leader_may_quiesce`]) and every voter lacking part of its
    /// log is reported down.
    pub(super) fn leader_may_quiesce(&self) -> bool {
        crate::runtime::quiesce::leader_may_quiesce(&self.p.node.raft)
            && self.voters_behind_are_down()
    }

    /// Enters or leaves quiescence, publishing the change.
    pub(super) fn set_quiesced(&mut self, quiesced: bool) {
        if self.visible.quiesced != quiesced {
            self.idle_ticks = 0;
            self.visible.quiesced = quiesced;
            self.publish();
        }
    }
}
