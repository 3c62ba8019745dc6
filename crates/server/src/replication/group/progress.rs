//! Replica progress: the leader's in-sync set and durable copies (published in
//! [`Visible`](super::Visible) and [`DurableCopies`]) and the replica report of
//! [`GroupInput::DescribeReplicas`](super::GroupInput::DescribeReplicas).
//!
//! A child module of `group.rs`, an `impl Group` of its own.

use super::{DurableCopies, Group, ReplicaReport, VoterProgress, MAX_TRACKED_VOTERS};
use crate::replication::in_sync::durable_copies;
use raft::StateRole;
use std::time::Instant;

impl Group {
    pub(super) fn describe_replicas(&self) -> ReplicaReport {
        let raft = &self.p.node.raft;
        let role = match raft.state {
            StateRole::Leader => "leader",
            StateRole::Follower => "follower",
            StateRole::Candidate => "candidate",
            StateRole::PreCandidate => "pre_candidate",
        };
        let mut progress: Vec<VoterProgress> = if raft.state == StateRole::Leader {
            let voters: Vec<u64> = raft.prs().conf().voters().ids().iter().collect();
            raft.prs()
                .iter()
                .filter(|(id, _)| voters.contains(id))
                .map(|(id, pr)| VoterProgress {
                    id: *id,
                    matched: if *id == raft.id {
                        raft.raft_log.last_index()
                    } else {
                        pr.matched
                    },
                    recent_active: *id == raft.id || pr.recent_active,
                })
                .collect()
        } else {
            Vec::new()
        };
        progress.sort_by_key(|p| p.id);
        ReplicaReport {
            role: role.to_owned(),
            term: raft.term,
            commit_index: raft.raft_log.committed,
            last_index: raft.raft_log.last_index(),
            progress,
        }
    }

    /// On the leader, the voters that are in sync (Kafka's ISR, in Raft terms): holding
    /// everything committed `in_sync_max_lag` ago (Kafka's `replica.lag.time.max.ms`; see
    /// [`CommitHistory`](crate::replication::in_sync::CommitHistory)), and heard from recently: since raft-rs's last quorum check, or
    /// within two election timeouts (the quorum check clears raft-rs's flag every election
    /// timeout, before the followers' next answers), or at all while the group is quiesced
    /// unless node liveness reports the voter down (a group quiesces with every voter holding
    /// the whole log but the ones reported down; the set is computed again when it quiesces
    /// and when a voter is reported down). Also publishes, with the term,
    /// how many voters hold each index durably and what every replica holds
    /// ([`DurableCopies`]; all zero when not leading).
    pub(super) fn update_in_sync(&mut self) {
        let mut in_sync = [0u64; MAX_TRACKED_VOTERS];
        let mut durable_on = DurableCopies::default();
        let raft = &self.p.node.raft;
        if raft.state == StateRole::Leader {
            let committed = raft.raft_log.committed;
            let lagging_below =
                self.commit_history
                    .note(Instant::now(), committed, self.p.in_sync_max_lag);
            let me = raft.id;
            durable_on = durable_copies(raft);
            let recent =
                self.p.tick * 2 * u32::try_from(raft.election_timeout()).unwrap_or(u32::MAX);
            let quiesced = self.visible.quiesced;
            let heard = |id: &u64| {
                self.heard_from
                    .get(id)
                    .is_some_and(|at| at.elapsed() <= recent)
            };
            let mut ids: Vec<u64> = raft
                .prs()
                .iter()
                .filter(|(id, pr)| {
                    // Voters only: a learner catching up is not a replica clients count on.
                    let voter = raft.prs().conf().voters().contains(**id);
                    // A quiesced group's voters all hold the whole log, except the ones
                    // reported down (a leader may quiesce without them: `succession.rs`).
                    **id == me
                        || (voter
                            && pr.matched >= lagging_below
                            && if quiesced {
                                !self.p.liveness.is_down(**id)
                            } else {
                                pr.recent_active || heard(id)
                            })
                })
                .map(|(id, _)| *id)
                .collect();
            ids.sort_unstable();
            for (slot, id) in in_sync.iter_mut().zip(ids) {
                *slot = id;
            }
        }
        // Committed in its own term and applied up to the commit index: from then on the
        // high watermark this leader publishes is at least every one published before.
        let leader_ready = raft.state == StateRole::Leader
            && (self.ready_term == raft.term
                || (raft.commit_to_current_term()
                    && self.visible.applied_index >= raft.raft_log.committed));
        if leader_ready {
            self.ready_term = raft.term;
        }
        self.p.durable_copies.send_if_modified(|copies| {
            let changed = *copies != durable_on;
            *copies = durable_on;
            changed
        });
        if in_sync != self.visible.in_sync || leader_ready != self.visible.leader_ready {
            self.visible.in_sync = in_sync;
            self.visible.leader_ready = leader_ready;
            self.publish();
        }
    }
}
