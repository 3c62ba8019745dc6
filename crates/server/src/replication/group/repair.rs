//! Repair after storage damage (see the server README, "Storage faults"): which votes a
//! damaged or rejoining replica may grant and when it may campaign, verifying committed
//! entries read back, handing leadership away from a damaged leader, cutting the log and
//! fetching the lost entries from the leader, and rebuilding a lost hard state (term and vote)
//! from the other voters' terms.
//!
//! A child module of `group.rs`, an `impl Group` of its own.

use super::{AppendError, DurableCopies, Group, Repair, MAX_TRACKED_VOTERS};
use crate::replication::raft_storage::{read, write};
use raft::prelude::Message;
use raft::{RawNode, StateRole};
use std::time::Instant;

/// Context of a rejected append a repairing replica sends its leader to say where its log
/// now ends (see [`Group::lost_entries_reported`]).
pub const LOST_ENTRIES_CONTEXT: &[u8] = b"vdl-lost-entries";

/// Context of a heartbeat response a replica whose hard state was lost sends each voter it
/// has not heard from: the voter answers with [`TERM_REPORT_CONTEXT`] and its current term
/// (see [`Group::rebuild_hard_state`]). Both are consumed before raft-rs; the query carries
/// term 1, which a peer of an older version ignores as a stale message.
pub(super) const TERM_QUERY_CONTEXT: &[u8] = b"vdl-term-query";

/// Context of the answer to [`TERM_QUERY_CONTEXT`].
const TERM_REPORT_CONTEXT: &[u8] = b"vdl-term-report";

impl Group {
    /// Whether this replica must not vote or campaign: its log lacks entries it lost to
    /// corruption, or its term and vote were lost with a damaged hard state.
    pub(super) fn may_not_vote(&self) -> bool {
        self.repair.is_some() || self.hard_state_unknown
    }

    /// Whether this replica must not campaign (nor take leadership handed to it): it may not
    /// vote (above), or it is rejoining after a replaced disk and has not applied its rejoin
    /// target yet. A rejoining replica's own vote counts for a log that may lack committed
    /// entries: with one voter that also lacks them it would win, and the entries are lost;
    /// and a rejoining leader never ends rejoin mode (its target comes from a leader). Found
    /// by the simulation (tests/simulation with `SIM_DISKS=1 SIM_MEMBERSHIP=1`, retention
    /// seed 1001 in one run: a rejoining node led seven groups and stayed rejoining).
    /// Except in a group of two voters ([`Group::other_of_two_voters`]): there it wins only
    /// with the other voter's vote, which proves its log holds every committed entry, and it
    /// asks itself for its target. Without that, a rejoining replica holding an uncommitted
    /// entry the other voter lacks refused the other's (pre-)vote as less up to date and the
    /// group had no leader for good (the simulation with the metadata group: retention seed
    /// 1006 and seed 2010 with `SIM_DISKS=1 SIM_MEMBERSHIP=1`).
    pub(super) fn may_not_campaign(&self) -> bool {
        self.may_not_vote()
            || (self.rejoin_epoch_pending().is_some() && self.other_of_two_voters().is_none())
    }

    /// Protocol-aware recovery (see the README, "Storage faults"): while repairing, a vote
    /// or pre-vote is considered only for a candidate whose log is at least as up to date as
    /// this replica's log was *before* the cut, so it never helps elect a leader lacking an
    /// entry it had (and may have acknowledged); raft-rs then applies its usual rules. With
    /// the hard state lost, no vote at all (it may have voted in this term already). A
    /// leadership transfer to a damaged replica is refused.
    pub(super) fn repair_allows(&mut self, m: &Message) -> bool {
        use raft::prelude::MessageType;
        match m.get_msg_type() {
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote => {
                if self.hard_state_unknown {
                    return false;
                }
                self.repair
                    .is_none_or(|r| r.marker.covered_by(m.index, m.log_term))
            }
            MessageType::MsgTimeoutNow => !self.may_not_campaign(),
            _ => true,
        }
    }

    /// With the hard state lost, records the highest term heard from each peer (see
    /// [`Group::rebuild_hard_state`]).
    pub(super) fn note_term_heard(&mut self, m: &Message) {
        use raft::prelude::MessageType;
        if !self.hard_state_unknown || m.term == 0 {
            return;
        }
        let term = match m.get_msg_type() {
            // A pre-vote asks for the term after the candidate's own.
            MessageType::MsgRequestPreVote => m.term - 1,
            // Answers to pre-votes this replica never sent (it does not campaign meanwhile).
            MessageType::MsgRequestPreVoteResponse => return,
            _ => m.term,
        };
        let heard = self.terms_heard.entry(m.from).or_insert(0);
        *heard = (*heard).max(term);
    }

    /// Ends the no-vote state of a replica whose hard state was lost, once every other voter
    /// of its configuration has been heard from since it started: the terms it may have voted
    /// in before are at most the highest of their current terms (the candidate it voted for is
    /// one of them, and its term only grows; its messages arrive in order, so any sent after
    /// that vote request carries that term or a higher one). The replica takes that term with
    /// a vote that grants nothing (its own id) unless it already follows that term's leader,
    /// so it votes only in later terms. Hearing only a leader is not enough: a deposed leader
    /// of an old term, taken as the vote, let the replica vote again in a term it had voted
    /// in. A voter that stays silent keeps the replica from voting (never from following).
    pub(super) fn rebuild_hard_state(&mut self) {
        if !self.hard_state_unknown {
            return;
        }
        let raft = &self.p.node.raft;
        let me = raft.id;
        let conf = raft.prs().conf().to_conf_state();
        let mut floor = raft.term;
        for id in conf.voters.iter().chain(conf.voters_outgoing.iter()) {
            if *id == me {
                continue;
            }
            match self.terms_heard.get(id) {
                Some(term) => floor = floor.max(*term),
                None => return,
            }
        }
        let raft = &mut self.p.node.raft;
        if floor > raft.term {
            raft.become_follower(floor, raft::INVALID_ID);
        }
        if raft.vote == raft::INVALID_ID {
            raft.vote = me;
        }
        // Durable before the marker goes: a restart in between finds the marker again.
        let state = logstore::HardState {
            term: raft.term,
            vote: raft.vote,
            commit: raft.raft_log.committed.min(self.visible.applied_index),
        };
        let (term, vote) = (state.term, state.vote);
        let saved = {
            let mut s = write(&self.p.store);
            s.save_hard_state(&state)
                .unwrap_or_else(|e| panic!("persisting hard state failed: {e}"));
            s.clear_vote_unknown()
        };
        if let Err(e) = saved {
            tracing::warn!(stream = %self.p.name, "removing the vote-unknown marker failed (retried later): {e}");
            return;
        }
        self.persisted_term = term;
        self.persisted_vote = vote;
        tracing::info!(stream = %self.p.name, term, vote, "hard state rebuilt: votes only in terms above every voter's current term");
        self.hard_state_unknown = false;
        self.terms_heard.clear();
        if self.repair.is_none() {
            self.p.faults.mark_repaired(&self.p.name);
        }
    }

    /// After a message from a peer was stepped into a damaged replica: learns the leader's
    /// commit index (the repair target) from its first append, takes the term (and counts
    /// the leader as its vote) when the hard state was lost, and tells a leader that still
    /// believes it holds its lost entries (see [`Group::lost_entries_reported`]).
    pub(super) fn after_repair_input(
        &mut self,
        (kind, from, term, commit, snap_index): (raft::prelude::MessageType, u64, u64, u64, u64),
    ) {
        use raft::prelude::MessageType;
        let from_leader = matches!(
            kind,
            MessageType::MsgAppend | MessageType::MsgHeartbeat | MessageType::MsgSnapshot
        ) && self.p.node.raft.leader_id == from
            && self.p.node.raft.term == term;
        if !from_leader {
            return;
        }
        if self.hard_state_unknown && self.p.node.raft.vote == 0 {
            // The leader of `term` won its election: this replica's vote in that term (if it
            // cast one) could only matter to it, so recording it as the vote never lets a
            // second candidate win the same term. Later terms: see `rebuild_hard_state`.
            self.p.node.raft.vote = from;
        }
        let Some(repair) = self.repair.as_mut() else {
            return;
        };
        match kind {
            MessageType::MsgAppend if repair.target.is_none() => repair.target = Some(commit),
            MessageType::MsgSnapshot if repair.target.is_none() && snap_index > 0 => {
                repair.target = Some(snap_index)
            }
            MessageType::MsgHeartbeat => {
                // A quiet leader sends no appends; tell it where this log ends.
                let last = read(&self.p.store).last_index();
                self.send_lost_entries(from, last);
            }
            _ => {}
        }
    }

    /// Tells `leader` that this replica's log ends at `last` (a rejected append with that
    /// hint and the marker context), so a leader that still believes it holds more sends
    /// the lost entries again.
    fn send_lost_entries(&self, leader: u64, last: u64) {
        let mut m = Message::default();
        m.set_msg_type(raft::prelude::MessageType::MsgAppendResponse);
        m.to = leader;
        m.from = self.p.node.raft.id;
        // Peers refuse term 0 (a replica whose hard state was lost starts there); a term
        // other than the leader's only wakes it (see `lost_entries_reported`).
        m.term = self.p.node.raft.term.max(1);
        m.reject = true;
        m.index = last;
        m.reject_hint = last;
        m.context = LOST_ENTRIES_CONTEXT.to_vec().into();
        self.p.peers.send(self.p.id, m);
    }

    /// On the leader: a follower rejected an append with a hint below what it acknowledged
    /// before (it lost entries to corruption and cut its log). raft-rs ignores such a
    /// rejection in replicate state (it takes it for a stale one), so the follower's
    /// progress restarts from its hint here (its log up to the hint matched this leader's:
    /// it matched further before, and a cut changes no entry it keeps) and the rest is sent
    /// again. The marked message (from [`Group::send_lost_entries`]) is consumed here: true.
    pub(super) fn lost_entries_reported(&mut self, m: &Message) -> bool {
        if m.get_msg_type() != raft::prelude::MessageType::MsgAppendResponse || !m.reject {
            return false;
        }
        let marked = m.context.as_ref() == LOST_ENTRIES_CONTEXT;
        let raft = &mut self.p.node.raft;
        if raft.state != StateRole::Leader || m.term != raft.term {
            return marked;
        }
        let Some(pr) = raft.mut_prs().get_mut(m.from) else {
            return marked;
        };
        if m.reject_hint < pr.matched {
            tracing::warn!(stream = %self.p.name, follower = m.from, matched = pr.matched, follower_last = m.reject_hint, "follower lost entries it had acknowledged; sending them again");
            pr.matched = m.reject_hint;
            pr.become_probe();
            self.set_quiesced(false);
            self.p.node.raft.send_append(m.from);
        }
        marked
    }

    /// With the hard state lost: once per election timeout, asks every voter not heard from
    /// yet for its current term (a follower of a healthy group sends this replica nothing
    /// until an election).
    pub(super) fn ask_terms(&mut self) {
        if !self.hard_state_unknown {
            return;
        }
        let raft = &self.p.node.raft;
        let timeout = self.p.tick * u32::try_from(raft.election_timeout()).unwrap_or(u32::MAX);
        if self.terms_asked.is_some_and(|at| at.elapsed() < timeout) {
            return;
        }
        self.terms_asked = Some(Instant::now());
        let me = raft.id;
        let conf = raft.prs().conf().to_conf_state();
        for id in conf.voters.iter().chain(conf.voters_outgoing.iter()) {
            if *id != me && !self.terms_heard.contains_key(id) {
                let mut m = Message::default();
                m.set_msg_type(raft::prelude::MessageType::MsgHeartbeatResponse);
                m.to = *id;
                m.from = me;
                m.term = 1;
                m.context = TERM_QUERY_CONTEXT.to_vec().into();
                self.p.peers.send(self.p.id, m);
            }
        }
    }

    /// Consumes a term query or report (see [`TERM_QUERY_CONTEXT`]): answers a query with
    /// this replica's term; a report was noted already. True: consumed.
    pub(super) fn term_query_answered(&mut self, m: &Message) -> bool {
        if m.get_msg_type() != raft::prelude::MessageType::MsgHeartbeatResponse {
            return false;
        }
        let context = m.context.as_ref();
        if context == TERM_REPORT_CONTEXT {
            return true;
        }
        if context != TERM_QUERY_CONTEXT {
            return false;
        }
        let raft = &self.p.node.raft;
        if raft.term > 0 {
            let mut answer = Message::default();
            answer.set_msg_type(raft::prelude::MessageType::MsgHeartbeatResponse);
            answer.to = m.from;
            answer.from = raft.id;
            answer.term = raft.term;
            answer.context = TERM_REPORT_CONTEXT.to_vec().into();
            self.p.peers.send(self.p.id, answer);
        }
        true
    }

    /// A damaged replica that knows no leader asks every other voter, once per election
    /// timeout, with the marked rejection of [`Group::send_lost_entries`]: a quiesced leader
    /// wakes on it and its heartbeats start the repair (other replicas drop it).
    pub(super) fn call_for_leader(&mut self) {
        if !self.may_not_vote() || self.p.node.raft.leader_id != 0 {
            return;
        }
        let timeout =
            self.p.tick * u32::try_from(self.p.node.raft.election_timeout()).unwrap_or(u32::MAX);
        if self
            .called_for_leader
            .is_some_and(|at| at.elapsed() < timeout)
        {
            return;
        }
        self.called_for_leader = Some(Instant::now());
        let last = read(&self.p.store).last_index();
        let me = self.p.node.raft.id;
        let voters: Vec<u64> = self
            .p
            .node
            .raft
            .prs()
            .conf()
            .voters()
            .ids()
            .iter()
            .filter(|id| *id != me)
            .collect();
        for id in voters {
            self.send_lost_entries(id, last);
        }
    }

    /// raft-rs reads committed entries from the store to apply them and panics on any read
    /// error, so the committed entries that were on disk when the group started are read
    /// back (CRC-checked) before raft-rs gets to them. Damage there is repaired at once (a
    /// leader steps down without a handover: it cannot go on). False: do not handle a Ready
    /// this turn.
    pub(super) fn verify_committed(&mut self) -> bool {
        let committed = self
            .p
            .node
            .raft
            .raft_log
            .committed
            .min(self.unverified_through);
        if committed <= self.verified_through {
            return true;
        }
        let mut lo = self.verified_through + 1;
        let bad = {
            let s = read(&self.p.store);
            lo = lo.max(s.first_index());
            let mut bad = None;
            while lo <= committed {
                match s.entries(lo, committed + 1, 4 << 20) {
                    Ok(v) => lo += v.len().max(1) as u64,
                    Err(logstore::LogStoreError::Corruption { .. }) => {
                        bad = Some(s.damaged_from().unwrap_or(lo));
                        break;
                    }
                    Err(_) => break,
                }
            }
            bad
        };
        match bad {
            None => {
                self.verified_through = committed;
                true
            }
            Some(suspect) => {
                self.repair_now(suspect);
                self.verified_through = self.verified_through.min(read(&self.p.store).last_index());
                false
            }
        }
    }

    /// Acts on damage the store found. A follower cuts its log before the first damaged entry
    /// (durably, with a repair marker), raft-rs is rebuilt over the shorter log, and the
    /// repair rules apply until the lost range is back. A leader never cuts: its copy may be
    /// one of the majority that made damaged entries committed, and no other replica may
    /// hold them yet. It first checks the damage is on disk, then hands leadership to the
    /// live voter holding every committed entry with the highest matched index (raft-rs sends
    /// it what it lacks, then TimeoutNow), trying again each election timeout until one takes
    /// over; as a follower it then repairs. With no such voter it goes on leading over the
    /// damaged log (reads of the damaged entries fail) rather than lose a committed copy.
    pub(super) fn check_damage(&mut self) {
        if self.p.node.raft.state == StateRole::Leader {
            self.hand_over_damaged_leadership();
            return;
        }
        self.handover_since = None;
        let Some(suspect) = read(&self.p.store).damaged_from() else {
            self.check_repaired();
            return;
        };
        self.repair_now(suspect);
    }

    /// On a leader whose store noted damage (see [`Group::check_damage`]).
    fn hand_over_damaged_leadership(&mut self) {
        let timeout =
            self.p.tick * u32::try_from(self.p.node.raft.election_timeout()).unwrap_or(u32::MAX);
        if self.handover_since.is_some_and(|at| at.elapsed() < timeout) {
            return;
        }
        if self.handover_since.is_none() {
            let suspect = {
                let s = read(&self.p.store);
                match s.damaged_from() {
                    None => return,
                    Some(suspect) => s.confirm_damage(suspect),
                }
            };
            match suspect {
                Ok(Some(first_bad)) => {
                    // Noted again, for the repair once this replica follows.
                    read(&self.p.store).report_damage(first_bad);
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(stream = %self.p.name, "checking damage on the leader failed: {e}");
                    return;
                }
            }
        }
        self.handover_since = Some(Instant::now());
        let raft = &self.p.node.raft;
        let committed = raft.raft_log.committed;
        let me = raft.id;
        let voters = raft.prs().conf().voters();
        let healthy = raft
            .prs()
            .iter()
            .filter(|(id, pr)| {
                **id != me && voters.contains(**id) && pr.recent_active && pr.matched >= committed
            })
            .max_by_key(|(id, pr)| (pr.matched, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id);
        match healthy {
            Some(to) => {
                tracing::warn!(stream = %self.p.name, to, "damaged log on the leader: handing leadership over");
                self.p.node.transfer_leader(to);
            }
            None => {
                tracing::error!(stream = %self.p.name, "damaged log on the leader and no live voter holds every committed entry: leading on without cutting the log");
            }
        }
    }

    /// Cuts the log before the damage at or before `suspect`, rebuilds raft-rs as a follower
    /// over the shorter log and starts the repair.
    fn repair_now(&mut self, suspect: u64) {
        self.handover_since = None;
        let leader = self.p.node.raft.leader_id;
        let marker = match write(&self.p.store).repair(suspect) {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(stream = %self.p.name, "cutting the damaged log failed: {e}");
                return;
            }
        };
        tracing::warn!(stream = %self.p.name, first_bad_index = marker.first_bad_index, lost_last_index = marker.lost_last_index, "damaged entries found; log cut before them, repairing from the leader");
        self.p
            .faults
            .mark_damaged(crate::storage_faults::DamagedReplica {
                stream: self.p.name.clone(),
                first_bad_index: marker.first_bad_index,
                lost_last_index: marker.lost_last_index,
                detail: "found while running".into(),
            });
        self.rebuild_raft(AppendError::NotLeader { leader: None });
        self.repair = Some(Repair {
            marker,
            target: None,
        });
        if leader != 0 && leader != self.p.node.raft.id {
            let last = read(&self.p.store).last_index();
            self.send_lost_entries(leader, last);
        }
    }

    /// Ends the repair once the log holds what it lost: this replica applied the commit
    /// index a leader announced after the cut, and its log is at least as up to date as it
    /// was before the cut.
    fn check_repaired(&mut self) {
        let Some(r) = self.repair else {
            return;
        };
        let Some(target) = r.target else {
            return;
        };
        let (last_index, last_term) = {
            let s = read(&self.p.store);
            (s.last_index(), s.last_term())
        };
        if self.visible.applied_index < target || !r.marker.covered_by(last_index, last_term) {
            return;
        }
        if let Err(e) = write(&self.p.store).finish_repair() {
            tracing::error!(stream = %self.p.name, "removing the repair marker failed: {e}");
            return;
        }
        self.repair = None;
        if !self.hard_state_unknown {
            self.p.faults.mark_repaired(&self.p.name);
        }
        tracing::info!(stream = %self.p.name, last_index, target, "log repaired from the leader");
    }

    /// Rebuilds raft-rs over the store's log (cut by a repair, or missing entries a write
    /// failed to take): a follower in the same term with the same vote, its commit and
    /// applied index at most the last index. Proposals waiting here fail with `why`.
    pub(super) fn rebuild_raft(&mut self, why: AppendError) {
        let storage = self.p.node.store().clone();
        let commit = match raft::Storage::initial_state(&storage) {
            Ok(st) => st.hard_state.commit,
            Err(_) => 0,
        };
        let mut cfg = self.p.raft_config.clone();
        cfg.applied = commit;
        let logger = crate::replication::raft_log::group_logger(&self.p.name);
        match RawNode::new(&cfg, storage, &logger) {
            Ok(node) => self.p.node = node,
            Err(e) => {
                tracing::error!(stream = %self.p.name, "rebuilding raft after a repair failed: {e}");
                return;
            }
        }
        self.fail_all(why);
        if let Some(t) = self.p.producers.as_mut() {
            *t = crate::replication::producer_snapshot::rebuild_producers(&self.p.store, commit);
        }
        let s = read(&self.p.store);
        self.visible.leader = 0;
        self.visible.applied_index = commit;
        self.visible.high_watermark = s
            .next_offset_after_index(commit)
            .unwrap_or(self.visible.high_watermark.min(s.next_offset()));
        self.visible.leader_ready = false;
        self.visible.in_sync = [0; MAX_TRACKED_VOTERS];
        self.p.durable_copies.send_replace(DurableCopies::default());
        drop(s);
        self.ready_term = 0;
        self.publish();
    }
}
