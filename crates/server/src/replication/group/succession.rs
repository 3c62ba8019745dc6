//! What a group does when node liveness reports a peer down or back, and succession: one
//! designated successor per group campaigns at once instead of every group waiting out a
//! randomised election timeout.
//!
//! Measured before (`scripts/bench/idle-cost.sh`, 3 nodes each hosting 10,000 partitions,
//! SIGKILL of the node leading 3,333 of them, 2 s election timeouts): every group the dead
//! node was a voter of woke on the survivors (its followers at the broken connection, its
//! partners' leaders "to check their quorum") and none could quiesce again, since quiescing
//! needed every voter to hold the whole log; about 20,000 groups ticking 20 times a second
//! saturated both survivors, elections spread from 3.6 to 5.7 s after the kill (6.2 s until
//! Metadata named a live leader for all), and on a machine with other load they collapsed
//! into leader step-downs ("quorum is not active") and elections still running two minutes
//! later. Now:
//! - **A leader keeps quiet while it keeps a majority.** A quiesced leader wakes for a silent
//!   or unreachable voter only when the voters not reported down (itself included) are no
//!   longer a majority, and a leader may quiesce while the voters lacking part of its log are
//!   all reported down (the commit index already shows a majority holds it). When such a peer
//!   is heard from again, the leaders it is a voter of wake to bring it up to date.
//! - **The followers of a silent leader wake when liveness reports it down**, not when a
//!   connection to it breaks: that report comes when the check-quorum lease every follower
//!   keeps has run out anyway (both are one election timeout of silence), so waking earlier
//!   only ticked thousands of groups that could not elect yet.
//! - **Succession.** When the report arrives and the peer has no connection to this node open
//!   either (its process is gone: a SIGKILL or a crash closes its connections at once; a peer
//!   merely slow to answer keeps them, and its groups then fail over only as raft-rs's timers
//!   decide), for each group the down peer led, this node votes in and is not leaving: the lease ends here (`election_elapsed` raised to the election
//!   timeout, so this replica grants the pre-vote and vote of whichever voter campaigns
//!   first); one surviving voter, the same on every node, campaigns
//!   [`SUCCESSOR_DELAY_TICKS`] ticks later (long enough for the other survivors' own
//!   reports, from their own 100 ms liveness clocks, to have ended their leases first): the
//!   partition's preferred replica when it is a live voter (so the leader rebalance has
//!   nothing to move back), else the live voters sorted and indexed by the group id (so a
//!   crashed node's groups spread over the survivors); every other voter waits the longest
//!   randomised timeout raft-rs allows, so it does not race the successor into a split vote,
//!   yet still campaigns if the successor cannot win (its log is behind, or it is down too).
//!
//! Nothing here bypasses a Raft rule: pre-vote, the log comparison and the vote are raft-rs's
//! own. Only when groups tick and the election timer's values change, within the range
//! raft-rs's configuration allows, and only on a report that a peer was silent for a whole
//! lease.

use raft::StateRole;

use super::Group;

/// Ticks between the down report and the designated successor's campaign (4 ticks = 200 ms
/// with the default 50 ms tick).
pub(crate) const SUCCESSOR_DELAY_TICKS: usize = 4;

/// The voter that campaigns first for group `group` once its leader is reported down:
/// `preferred` (the partition's preferred replica) when it is among `live` (the voters not
/// reported down, the down leader excluded), else `live` sorted and indexed by the group id.
/// `None` when no voter is left.
pub(crate) fn designated_successor(
    group: u64,
    live: &[u64],
    preferred: Option<u64>,
) -> Option<u64> {
    if let Some(p) = preferred.filter(|p| live.contains(p)) {
        return Some(p);
    }
    let mut left = live.to_vec();
    if left.is_empty() {
        return None;
    }
    left.sort_unstable();
    left.dedup();
    let at = usize::try_from(group % left.len() as u64).unwrap_or(0);
    Some(left[at])
}

impl Group {
    /// The voters of this group that are not reported down, leaving `silent` out too.
    fn live_voters(&self, silent: u64) -> Vec<u64> {
        let raft = &self.p.node.raft;
        raft.prs()
            .conf()
            .voters()
            .ids()
            .iter()
            .filter(|v| *v != silent && (*v == raft.id || !self.p.liveness.is_down(*v)))
            .collect()
    }

    /// Whether this group wakes because `peer` went silent: `reported_down` when liveness
    /// reports it down, else its connection failed. A follower of `peer` wakes on the report
    /// only; a leader that has `peer` as a voter only when the voters left are no majority.
    pub(super) fn wakes_for_silent_peer(&self, peer: u64, reported_down: bool) -> bool {
        let raft = &self.p.node.raft;
        if raft.leader_id == peer && raft.state != StateRole::Leader {
            return reported_down;
        }
        if !self.leads_with_voter(peer) {
            return false;
        }
        let voters = raft.prs().conf().voters().ids().len();
        self.live_voters(peer).len() < voters / 2 + 1
    }

    /// Whether this replica leads the group and `peer` is one of its voters.
    pub(super) fn leads_with_voter(&self, peer: u64) -> bool {
        let raft = &self.p.node.raft;
        raft.state == StateRole::Leader && raft.prs().conf().voters().contains(peer)
    }

    /// Whether every voter lacking part of the leader's log is reported down (so the leader
    /// may quiesce without it: the commit index shows a majority holds the log).
    pub(super) fn voters_behind_are_down(&self) -> bool {
        let raft = &self.p.node.raft;
        let last = raft.raft_log.last_index();
        raft.prs()
            .iter()
            .all(|(id, pr)| pr.matched == last || (*id != raft.id && self.p.liveness.is_down(*id)))
    }

    /// Node liveness reports `peer` down (silent for an election timeout): if it led this
    /// group and this replica is a voter that may campaign, end the lease here and set the
    /// election timer as the module documentation says.
    pub(super) fn on_leader_reported_down(&mut self, peer: u64) {
        // Only for a leader whose process is gone (no connection open either): a peer merely
        // slow to answer pings (a loaded machine) keeps its leadership; the followers then
        // wake and tick, and elect only if its heartbeats stay away. Never while this node is
        // leaving (graceful shutdown): it is handing leadership away.
        if self.may_not_campaign() || self.leaving || !self.p.liveness.is_gone(peer) {
            return;
        }
        let group = self.p.id;
        let live = self.live_voters(peer);
        let preferred = self.p.preferred_leader.map(|(p, _)| p);
        // raft-rs draws randomised timeouts from [min, max) of the group's configuration.
        let (min, max) = (
            self.p.raft_config.min_election_tick(),
            self.p.raft_config.max_election_tick(),
        );
        let raft = &mut self.p.node.raft;
        if raft.state != StateRole::Follower || raft.leader_id != peer || !live.contains(&raft.id) {
            return;
        }
        let Some(successor) = designated_successor(group, &live, preferred) else {
            return;
        };
        // The lease is over here.
        raft.election_elapsed = raft.election_elapsed.max(raft.election_timeout());
        if max <= min + 1 {
            // One possible timeout (the simulation pins it): nothing to choose.
            return;
        }
        let wait = if successor == raft.id {
            (min + SUCCESSOR_DELAY_TICKS).min(max - 1)
        } else {
            max - 1
        };
        // Always a tick or more ahead of the ticks already elapsed, within raft-rs's range.
        let wait = wait.max(raft.election_elapsed + 1).min(max - 1);
        if wait >= min && wait > raft.election_elapsed {
            raft.set_randomized_election_timeout(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_names_the_same_successor_and_groups_spread_over_the_survivors() {
        let mut count = std::collections::HashMap::new();
        for group in 1..=300u64 {
            let s = designated_successor(group, &[3, 2], None).unwrap();
            // The order the live voters are listed in does not matter.
            assert_eq!(designated_successor(group, &[2, 3], None), Some(s));
            *count.entry(s).or_insert(0) += 1;
        }
        assert_eq!(count.get(&2), Some(&150));
        assert_eq!(count.get(&3), Some(&150));
        assert_eq!(designated_successor(7, &[], None), None);
    }

    #[test]
    fn the_preferred_replica_succeeds_when_it_is_live() {
        assert_eq!(designated_successor(8, &[2, 3], Some(3)), Some(3));
        assert_eq!(designated_successor(9, &[2, 3], Some(2)), Some(2));
        // The preferred replica is the one that went down (or another down one): by group id.
        assert_eq!(designated_successor(8, &[2, 3], Some(1)), Some(2));
        assert_eq!(designated_successor(9, &[2, 3], Some(1)), Some(3));
    }
}
