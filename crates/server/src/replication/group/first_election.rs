//! The first election of a new partition: its preferred replica campaigns as it opens the
//! partition (`node::catalog`), but the other replicas open theirs when they apply the same
//! metadata entry, which may be a little later; the pre-votes that reach a node before its
//! replica is open are dropped (a message for an unknown group), and without a retry the
//! partition has no leader until an election timeout fires (2 to 4 s by default; Kafka's
//! controller names a new partition's leader at once, and clients see LEADER_NOT_AVAILABLE
//! meanwhile). So the replica that campaigned at open campaigns again every
//! [`RETRY_TICKS`] ticks, at most [`RETRIES`] times, until a leader is known.
//!
//! Safe because nothing here bypasses Raft: each retry is raft-rs's own campaign, and with
//! pre-vote a retry never disrupts a leader the others already follow (they refuse the
//! pre-vote while their leader's lease lasts). A retry is skipped while a real election
//! (after a won pre-vote) is under way, so it never splits its own vote. The other replicas
//! keep their randomised timeouts, so they do not race the preferred one.
//!
//! A child module of `group.rs`, an `impl Group` of its own.

use raft::StateRole;

use super::Group;

/// Ticks between two campaigns of a new partition's first election (4 ticks = 200 ms with the
/// default 50 ms tick).
pub(crate) const RETRY_TICKS: usize = 4;

/// The most campaigns repeated for a first election (25 at 200 ms: 5 s, past the default
/// election timeout's whole range); then the election timeouts take over.
pub(crate) const RETRIES: u8 = 25;

/// Where a new partition's first election stands on the replica that campaigned at open.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FirstElection {
    /// Campaigns still allowed (0: not retrying).
    retries_left: u8,
    /// Ticks since the last campaign.
    ticks: usize,
}

impl Group {
    /// A campaign was asked for as the partition opened: when no leader was ever known here,
    /// keep campaigning until one is (see the module documentation).
    pub(super) fn arm_first_election(&mut self) {
        if self.p.node.raft.leader_id == 0 && self.visible.last_leader == 0 {
            self.first_election = FirstElection {
                retries_left: RETRIES,
                ticks: 0,
            };
        }
    }

    /// Called on every tick: campaigns again when a first election has gone
    /// [`RETRY_TICKS`] ticks without a leader and no real election is under way.
    pub(super) fn retry_first_election(&mut self) {
        if self.first_election.retries_left == 0 {
            return;
        }
        if self.p.node.raft.leader_id != 0 {
            self.first_election = FirstElection::default();
            return;
        }
        self.first_election.ticks += 1;
        if self.first_election.ticks < RETRY_TICKS {
            return;
        }
        self.first_election.ticks = 0;
        self.first_election.retries_left -= 1;
        if self.p.node.raft.state != StateRole::Candidate && !self.may_not_campaign() {
            let _ = self.p.node.campaign();
        }
    }
}
