//! Quiescing an idle group: the leader counts idle ticks, tells its followers to quiesce
//! and stops ticking (see [`crate::runtime::quiesce`]).
//!
//! A child module of `group.rs`, an `impl Group` of its own.

use std::time::{Duration, Instant};

use raft::StateRole;

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
    /// A woken group's retention check comes within the ordinary interval again.
    pub(super) fn set_quiesced(&mut self, quiesced: bool) {
        if self.visible.quiesced != quiesced {
            self.idle_ticks = 0;
            self.visible.quiesced = quiesced;
            if !quiesced {
                self.next_retention = self
                    .next_retention
                    .min(Instant::now() + self.p.retention_interval);
            }
            self.publish();
        }
    }

    /// How long until the next retention check (and roll by age): the configured interval
    /// while the group runs; [`QUIESCED_RETENTION_FACTOR`] times it while quiesced, since
    /// nothing is written then and only age moves (Kafka checks every 5 minutes by default).
    pub(super) fn retention_every(&self) -> Duration {
        if self.visible.quiesced {
            self.p
                .retention_interval
                .saturating_mul(QUIESCED_RETENTION_FACTOR)
        } else {
            self.p.retention_interval
        }
    }

    /// When the group must take a turn for the preferred-leader check, if at all: never while
    /// quiesced unless this replica leads and is not the preferred one (a quiesced follower or
    /// preferred leader has nothing to hand over, and leading again wakes the group).
    pub(super) fn rebalance_wake(&self) -> Option<Instant> {
        let at = self.next_rebalance?;
        let raft = &self.p.node.raft;
        let may_hand_over = raft.state == StateRole::Leader
            && self
                .p
                .preferred_leader
                .is_some_and(|(preferred, _)| preferred != raft.id);
        (!self.visible.quiesced || may_hand_over).then_some(at)
    }
}

/// A quiesced group checks retention this many times less often than a running one: with the
/// default 10 s interval, once a minute. Each check is a turn of the group; at 10,000 idle
/// partitions per node the 10 s checks alone were 1,000 turns a second (about 4% of a core).
pub(crate) const QUIESCED_RETENTION_FACTOR: u32 = 6;
