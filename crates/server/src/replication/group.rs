//! One Raft group (one log stream): a state machine that the node's runtime (a fixed pool of
//! worker threads, [`crate::runtime`]) drives in turns.
//!
//! The group owns the raft-rs `RawNode` and is the only writer of the stream's log store (one
//! turn at a time, on whichever worker runs it). A turn takes the queued input (peer messages,
//! proposals, link events), batches the proposals into entries, ticks when the runtime's timer
//! says a tick is due, then handles the `Ready` in raft-rs's required order:
//!
//! 1. send `messages()` — for a leader these are the appends to followers, sent *before* its own
//!    fsync so followers write in parallel with the leader (the pipeline; off when
//!    `pipeline = false`, then they are sent after the fsync);
//! 2. install a snapshot if there is one;
//! 3. apply committed entries (already durable here): move the high watermark, answer proposals;
//! 4. append `entries()` to the store and fsync once for all of them (group commit) when the
//!    store's sync policy asks for it (`sync = "always"`; `interval` fsyncs once the interval
//!    has passed, from the turn when no append comes; `never` does not);
//! 5. persist the hard state when term or vote changed (it must be durable before a vote is
//!    sent);
//! 6. send `persisted_messages()` (votes, follower acknowledgements) — only now, after the fsync;
//! 7. `advance`, then send and apply what the light ready holds.
//!
//! A proposal is answered only when its entry is committed (on a majority's disks) with the
//! term it was appended in; if another leader's entry wins that index, it is answered with
//! [`AppendError::Lost`].
//!
//! The group's jobs live in child modules under `group/`, each an `impl Group` of its own with
//! `pub(super)` methods: this file keeps the state ([`new_group`]), the turn and the input
//! dispatch. `group.rs` with a `group/` folder (rather than `group/mod.rs`) keeps the file's
//! history where it was and needs no `#[path]` attributes; the public types are re-exported
//! here, so other modules keep naming them `crate::replication::group::X`.
//!
//! - `types.rs`: the public input and output types and errors;
//! - `ready.rs`: the Ready loop above, appending, applying and answering proposals;
//! - `proposals.rs`: queueing, the idempotent-producer check, merging and forwarding;
//! - `reads.rs`: read barriers (read index);
//! - `progress.rs`: the in-sync set, durable copies and the replica report;
//! - `membership.rs`: configuration changes toward the asked voters;
//! - `hand_off.rs`: leader transfer (preferred leader, shutdown);
//! - `quiesce.rs`: quiescing an idle group;
//! - `retention.rs`: retention, compaction below snapshots, retries of lost snapshots;
//! - `repair.rs`: repair after storage damage and the hard-state rebuild;
//! - `rejoin.rs`: a replica rejoining after its disk was replaced.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::TrySendError;
use std::time::Instant;

use raft::prelude::Message;
use raft::StateRole;
use tokio::sync::oneshot;

use crate::replication::in_sync::CommitHistory;
use crate::replication::peer_guard::{check_in_group, GroupLimits};
use crate::replication::producers::ProducerTable;
use crate::replication::raft_storage::read;
use crate::runtime::inbox::InboxSender;
use crate::runtime::timeline::{self, Stage as Hop};
use crate::runtime::{Next, Task};

mod first_election;
mod hand_off;
mod membership;
mod progress;
mod proposals;
mod quiesce;
mod reads;
mod ready;
mod rejoin;
mod repair;
mod retention;
mod succession;
mod types;

use proposals::proposal_id;
use rejoin::rejoin_read_epoch;
pub use repair::LOST_ENTRIES_CONTEXT;
use repair::TERM_QUERY_CONTEXT;
pub use types::{
    AbortedList, AnswerHook, AppendError, AppendReply, Appended, DurableCopies, GroupInput,
    GroupParts, Proposal, ProposalData, ReplicaReport, RetentionHold, Visible, VoterProgress,
    MAX_TRACKED_VOTERS,
};

/// Proposals waiting for commit on one group before new ones are refused with
/// [`AppendError::Busy`].
pub const MAX_PENDING_PROPOSALS: usize = 65_536;
/// Inputs drained per loop turn before the Ready is handled (bounds latency under load).
const MAX_INPUTS_PER_TURN: usize = 4096;

/// A replica repairing a log that lost entries to corruption (see the server README,
/// "Storage faults").
#[derive(Debug, Clone, Copy)]
struct Repair {
    /// What was lost (from the store's durable repair marker).
    marker: logstore::RepairMarker,
    /// The commit index of the first append a leader sent after the repair (None: not heard
    /// yet). The repair ends once this replica applied it and its log is at least as up to
    /// date as it was before the cut.
    target: Option<u64>,
}

struct Waiting {
    term: u64,
    proposals: Vec<(AppendReply, u32)>,
    /// When it was proposed to raft-rs; once appended and fsynced here, when that finished
    /// (Produce's local and remote stages, see [`crate::metrics::Stage`]).
    proposed_at: Instant,
    /// Records (not metadata): its stages are Produce's.
    records: bool,
}

/// The state of a running group.
struct Group {
    p: GroupParts,
    queued: Vec<Proposal>,
    /// Proposed to raft-rs, identified by id in the entry context, not yet appended.
    proposed: HashMap<u64, Waiting>,
    /// Appended at a known index, waiting for commit.
    appended: BTreeMap<u64, Waiting>,
    next_proposal_id: u64,
    pending_count: usize,
    persisted_term: u64,
    persisted_vote: u64,
    visible: Visible,
    /// Rejoin epoch in which this group caught up (see [`crate::replication::replicas`]).
    rejoin_done: u64,
    /// In rejoin mode: (epoch, commit index a leader confirmed with a quorum in it).
    rejoin_target: Option<(u64, u64)>,
    /// In rejoin mode: (epoch, ticks since) this replica last asked its leader for the
    /// target. Counted in ticks, not wall-clock time: the group keeps ticking while it waits
    /// (it does not quiesce), and the simulation replays it.
    rejoin_target_asked: Option<(u64, usize)>,
    /// Entries and bytes of peer appends stepped since the last Ready was handled: the next
    /// Ready's append must fit the store's batch limits.
    unpersisted: (usize, u64),
    /// The store's entry and batch limits.
    store_limits: (u64, usize, u64),
    /// The term in which this node, as leader, committed and applied an entry of its own term
    /// (0: none); see [`Visible::leader_ready`].
    ready_term: u64,
    /// On the leader: consecutive ticks its log was idle (see [`crate::runtime::quiesce`]).
    idle_ticks: usize,
    /// A new partition's first election, on the replica that campaigned at open (see
    /// [`first_election`]).
    first_election: first_election::FirstElection,
    /// The heartbeats of the Ready being handled tell followers to quiesce.
    mark_quiesce_heartbeats: bool,
    /// When the retention rules are applied next.
    next_retention: Instant,
    /// When the leader checks next whether to hand leadership to the preferred replica.
    next_rebalance: Option<Instant>,
    /// When each peer last sent this group a message that was stepped (see
    /// [`Group::update_in_sync`]).
    heard_from: HashMap<u64, Instant>,
    /// On the leader: since when each peer's progress waits for a snapshot to arrive (see
    /// [`Group::retry_lost_snapshots`]).
    snapshot_waits: HashMap<u64, Instant>,
    /// Since when this replica leads (None: not leading): a peer not heard from since counts
    /// as silent from then on (see [`Group::retention_floor`]).
    leading_since: Option<Instant>,
    /// On the leader: its commit index over the last `in_sync_max_lag` (the in-sync rule).
    commit_history: CommitHistory,
    /// Entries applied since the producer table was last saved (see
    /// [`Group::save_producers`]).
    producers_unsaved: u64,
    /// The version of the aborted-transaction list last published on
    /// [`GroupParts::aborted`] (None: not published yet).
    aborted_published: Option<u64>,
    /// Read barriers asked of raft-rs, by the id in their context (at most
    /// [`MAX_PENDING_READS`]).
    reads_asked: HashMap<u64, oneshot::Sender<Result<u64, AppendError>>>,
    /// Read barriers confirmed by a quorum: (read index, reply), answered once applied.
    reads_confirmed: Vec<(u64, oneshot::Sender<Result<u64, AppendError>>)>,
    /// The next read barrier's id.
    next_read_id: u64,
    /// The state machine's newest durable snapshot (0: none): its log may be compacted below.
    snapshot_index: u64,
    /// The voters asked by [`GroupInput::SetVoters`] (None: keep the configuration).
    target_voters: Option<Vec<u64>>,
    /// Set while the log lacks entries it lost to corruption.
    repair: Option<Repair>,
    /// The `hardstate` file was damaged: term and vote are unknown until every other voter
    /// was heard from (see [`Group::rebuild_hard_state`]).
    hard_state_unknown: bool,
    /// While `hard_state_unknown`: the highest term heard from each peer since the start.
    terms_heard: HashMap<u64, u64>,
    /// While `hard_state_unknown`: when the voters not heard from were last asked their term.
    terms_asked: Option<Instant>,
    /// On a leader whose store found damage: when it asked a healthy follower to take over.
    handover_since: Option<Instant>,
    /// Committed entries through this index were read back intact (see
    /// [`Group::verify_committed`]).
    verified_through: u64,
    /// The last index on disk when the group started: entries after it came through this
    /// process and are read from its cache or fresh writes.
    unverified_through: u64,
    /// When a damaged replica last asked its peers for a leader ([`Group::call_for_leader`]).
    called_for_leader: Option<Instant>,
    /// The node is shutting down and handed leadership away: never take it back.
    leaving: bool,
}

/// Read barriers waiting at once per group; more get [`AppendError::Busy`].
pub const MAX_PENDING_READS: usize = 4096;

/// Builds a group's state machine, to run on the node's [`crate::runtime::Runtime`] until it
/// receives [`GroupInput::Stop`] or its slot is stopped.
pub fn new_group(parts: GroupParts) -> Box<dyn Task> {
    let (hs, store_limits, marker, hs_damage, last_at_open) = {
        let s = read(&parts.store);
        let c = s.config();
        (
            s.hard_state(),
            (c.max_entry_bytes, c.max_batch_entries, c.max_batch_bytes),
            s.repair_marker(),
            s.hard_state_damage().map(str::to_owned).or_else(|| {
                s.vote_unknown()
                    .then(|| "votes still unknown after an earlier hard-state damage".to_owned())
            }),
            s.last_index(),
        )
    };
    if let Some(why) = &hs_damage {
        tracing::error!(stream = %parts.name, "{why}: term and vote are lost; this replica will not vote or campaign until it has heard from every other voter, and then votes only in later terms");
        parts
            .faults
            .mark_damaged(crate::storage_faults::DamagedReplica {
                stream: parts.name.clone(),
                first_bad_index: 0,
                lost_last_index: 0,
                detail: why.clone(),
            });
    }
    if let Some(m) = marker {
        tracing::warn!(stream = %parts.name, first_bad_index = m.first_bad_index, lost_last_index = m.lost_last_index, "log cut before damaged entries; repairing from the leader");
        parts
            .faults
            .mark_damaged(crate::storage_faults::DamagedReplica {
                stream: parts.name.clone(),
                first_bad_index: m.first_bad_index,
                lost_last_index: m.lost_last_index,
                detail: "found at open".into(),
            });
    }
    let visible = *parts.visible.borrow();
    let snapshot_index = parts
        .state_machine
        .as_ref()
        .map_or(0, |sm| sm.newest_snapshot());
    let now = Instant::now();
    let next_retention = now + parts.retention_interval;
    let next_rebalance = parts.preferred_leader.map(|(_, every)| now + every);
    Box::new(Group {
        p: parts,
        queued: Vec::new(),
        proposed: HashMap::new(),
        appended: BTreeMap::new(),
        // Entry contexts name (node, proposal id); ids start from a per-start nonce (the clock
        // in nanoseconds), so an entry proposed before a restart can never be taken for a
        // proposal made after it.
        next_proposal_id: crate::replication::ids::boot_nonce(),
        pending_count: 0,
        persisted_term: hs.term,
        persisted_vote: hs.vote,
        visible,
        rejoin_done: 0,
        rejoin_target: None,
        rejoin_target_asked: None,
        unpersisted: (0, 0),
        store_limits,
        ready_term: 0,
        idle_ticks: 0,
        first_election: first_election::FirstElection::default(),
        mark_quiesce_heartbeats: false,
        heard_from: HashMap::new(),
        leading_since: None,
        snapshot_waits: HashMap::new(),
        commit_history: CommitHistory::default(),
        producers_unsaved: 0,
        aborted_published: None,
        next_retention,
        next_rebalance,
        reads_asked: HashMap::new(),
        reads_confirmed: Vec::new(),
        next_read_id: 0,
        snapshot_index,
        target_voters: None,
        repair: marker.map(|marker| Repair {
            marker,
            target: None,
        }),
        hard_state_unknown: hs_damage.is_some(),
        terms_heard: HashMap::new(),
        terms_asked: None,
        handover_since: None,
        verified_through: visible.applied_index,
        unverified_through: last_at_open,
        called_for_leader: None,
        leaving: false,
    })
}

impl Task for Group {
    /// One turn: take the queued inputs (at most [`MAX_INPUTS_PER_TURN`]; the rest make the
    /// runtime schedule another turn), turn proposals into entries, tick when due and not
    /// quiesced, handle the Ready, then the slow timers (retention, leader rebalance).
    fn turn(&mut self, tick: bool) -> Next {
        timeline::stamp(Hop::TurnStart, self.p.id);
        for _ in 0..MAX_INPUTS_PER_TURN {
            match self.p.inbox.try_recv() {
                Ok(input) => {
                    if !self.take(input) {
                        return Next::Done;
                    }
                }
                Err(_) => break,
            }
        }
        self.propose_queued();
        if tick && !self.visible.quiesced {
            if self.may_not_campaign() {
                // A replica repairing lost entries, whose term and vote are unknown, or
                // rejoining after a replaced disk, never campaigns: its election timer is held
                // just short of firing. It still ticks,
                // so its leader lease (check_quorum) expires and it can vote for a candidate
                // `repair_allows` admits once the leader is gone.
                let raft = &mut self.p.node.raft;
                let hold = raft.randomized_election_timeout().saturating_sub(2);
                raft.election_elapsed = raft.election_elapsed.min(hold);
            }
            self.p.node.tick();
            if let Some((_, ticks)) = self.rejoin_target_asked.as_mut() {
                *ticks += 1;
            }
            self.retry_first_election();
            self.maybe_quiesce();
            self.retry_lost_snapshots();
        }
        if self.verify_committed() {
            self.handle_ready();
            if self.change_membership() {
                self.handle_ready();
            }
        }
        self.publish_membership();
        self.ask_rejoin_target();
        self.check_damage();
        self.call_for_leader();
        self.ask_terms();
        let now = Instant::now();
        if now >= self.next_retention {
            self.roll_aged_segment();
            self.apply_retention();
            self.next_retention = Instant::now() + self.retention_every();
        }
        if let (Some(at), Some((_, every))) = (self.next_rebalance, self.p.preferred_leader) {
            if now >= at {
                self.hand_over_to_preferred();
                self.next_rebalance = Some(Instant::now() + every);
            }
        }
        let sync_due = self.sync_when_due();
        // A quiesced group wakes only for input and its slow timers (and a due sync).
        let slow = self
            .rebalance_wake()
            .map_or(self.next_retention, |r| r.min(self.next_retention));
        let slow = sync_due.map_or(slow, |d| d.min(slow));
        Next::Continue {
            ticking: !self.visible.quiesced,
            wake_at: Some(slow),
        }
    }

    fn has_input(&self) -> bool {
        self.p.inbox.has_items()
    }

    fn finish(&mut self) {
        self.fail_all(AppendError::Stopped);
        self.save_producers(true);
    }
}

impl Group {
    /// Takes one input; false means stop.
    fn take(&mut self, input: GroupInput) -> bool {
        match input {
            GroupInput::Raft(mut m) => {
                if self.leaving && m.get_msg_type() == raft::prelude::MessageType::MsgTimeoutNow {
                    tracing::debug!(stream = %self.p.name, "leaving: not taking leadership back");
                    return true;
                }
                let quiesce = crate::runtime::quiesce::is_quiesce_heartbeat(&m);
                // Followers answer the quiesce heartbeat: a quiesced leader stays quiesced
                // unless the answer shows the group is not idle after all.
                let answer = self.visible.quiesced
                    && m.get_msg_type() == raft::prelude::MessageType::MsgHeartbeatResponse;
                if quiesce {
                    // Stepped as a plain heartbeat; the mark is for this layer only.
                    m.context = Default::default();
                } else if !answer {
                    self.set_quiesced(false);
                }
                if m.context.as_ref() != TERM_QUERY_CONTEXT {
                    self.note_term_heard(&m);
                }
                if self.term_query_answered(&m) {
                    self.rebuild_hard_state();
                    return true;
                }
                if self.lost_entries_reported(&m) {
                    return true;
                }
                if self.rejoin_allows(&m) && self.repair_allows(&m) {
                    let heartbeat = quiesce.then(|| m.clone());
                    let repair_input = self.may_not_vote().then(|| {
                        (
                            m.get_msg_type(),
                            m.from,
                            m.term,
                            m.commit,
                            // A snapshot at or below the commit index restores nothing (raft-rs
                            // only answers it): no repair target.
                            Some(m.get_snapshot().get_metadata().index)
                                .filter(|i| *i > self.p.node.raft.raft_log.committed)
                                .unwrap_or(0),
                        )
                    });
                    self.step_peer_message(m);
                    if let Some(input) = repair_input {
                        self.after_repair_input(input);
                    }
                    self.rebuild_hard_state();
                    if let Some(hb) = heartbeat {
                        // A replica waiting for its rejoin target keeps ticking so that it
                        // asks again: a leader that has not committed in its term yet drops
                        // the read-index request (raft-rs), and a quiesced group would not
                        // ask again until some input came.
                        let agree = !self.p.forward_proposals
                            && self.rejoin_epoch_pending().is_none()
                            && crate::runtime::quiesce::follower_may_quiesce(
                                &self.p.node.raft,
                                &hb,
                            );
                        self.set_quiesced(agree);
                    }
                    if answer && !self.leader_may_quiesce() {
                        self.set_quiesced(false);
                    }
                }
            }
            GroupInput::PeerDown(peer) => {
                if self.wakes_for_silent_peer(peer, true) {
                    self.set_quiesced(false);
                    self.on_leader_reported_down(peer);
                }
                if self.p.node.raft.state == StateRole::Leader {
                    // A leader that stays quiesced drops the voter from its in-sync set now.
                    self.update_in_sync();
                }
            }
            GroupInput::PeerUp(peer) => {
                if self.leads_with_voter(peer) {
                    self.set_quiesced(false);
                }
            }
            GroupInput::PeerReplaced(peer) => {
                self.set_quiesced(false);
                // Only a voter of this group has progress (raft-rs's send_append panics for
                // others); with replica placement most peers are not voters of most groups.
                if self.p.node.raft.state == StateRole::Leader {
                    if let Some(pr) = self.p.node.raft.mut_prs().get_mut(peer) {
                        pr.matched = 0;
                        pr.become_probe();
                        self.p.node.raft.send_append(peer);
                    }
                }
            }
            GroupInput::Propose(p) => {
                self.set_quiesced(false);
                if self.pending_count + self.queued.len() >= MAX_PENDING_PROPOSALS {
                    let _ = p.reply.send(Err(AppendError::Busy));
                } else {
                    self.queued.push(p);
                }
            }
            GroupInput::Unreachable(peer) => {
                if self.wakes_for_silent_peer(peer, false) {
                    self.set_quiesced(false);
                }
                self.p.node.report_unreachable(peer);
            }
            GroupInput::Campaign => {
                self.set_quiesced(false);
                if !self.may_not_campaign() {
                    let _ = self.p.node.campaign();
                    self.arm_first_election();
                }
            }
            GroupInput::CheckDamage => self.set_quiesced(false),
            GroupInput::TransferLeader(to) => {
                self.set_quiesced(false);
                self.p.node.transfer_leader(to);
            }
            GroupInput::RecordsFloorRaised => {
                let start = read(&self.p.store).first_readable_offset();
                if start != self.visible.log_start_offset {
                    self.visible.log_start_offset = start;
                    self.publish();
                }
                self.apply_retention();
            }
            GroupInput::DescribeProducers(reply) => {
                let producers = self
                    .p
                    .producers
                    .as_ref()
                    .map(ProducerTable::describe)
                    .unwrap_or_default();
                let _ = reply.send(producers);
            }
            GroupInput::ReadIndex(reply) => self.ask_read_index(reply),
            GroupInput::SetVoters(mut voters) => {
                self.set_quiesced(false);
                voters.sort_unstable();
                voters.dedup();
                if !voters.is_empty() && voters.len() <= MAX_TRACKED_VOTERS {
                    self.target_voters = Some(voters);
                }
            }
            GroupInput::HandOff(tried, reply) => {
                self.leaving = true;
                let _ = reply.send(self.hand_off(&tried));
            }
            GroupInput::DescribeReplicas(reply) => {
                let _ = reply.send(self.describe_replicas());
            }
            GroupInput::Stop => return false,
        }
        true
    }

    /// Steps a message from a peer into raft-rs if [`check_in_group`] admits it; otherwise
    /// drops and counts it.
    fn step_peer_message(&mut self, mut m: Message) {
        let (max_entry, max_entries, max_bytes) = self.store_limits;
        let limits = GroupLimits {
            forward_proposals: self.p.forward_proposals,
            // A state machine's snapshot is checked below, before raft-rs takes it.
            snapshots: true,
            max_entry_bytes: max_entry,
            batch_entries_left: max_entries.saturating_sub(self.unpersisted.0),
            batch_bytes_left: max_bytes.saturating_sub(self.unpersisted.1),
        };
        if let Err(why) = check_in_group(&self.p.node.raft, &limits, &mut m) {
            self.p.peer_stats.refuse_message(self.p.id, &why);
            return;
        }
        if m.get_msg_type() == raft::prelude::MessageType::MsgSnapshot {
            if let Some(sm) = self.p.state_machine.as_ref() {
                let snap = m.get_snapshot();
                if let Err(e) = sm.check_snapshot(snap.get_metadata().index, &snap.data) {
                    tracing::warn!(stream = %self.p.name, from = m.from, "snapshot refused: {e}");
                    self.p.peer_stats.refuse_message(
                        self.p.id,
                        &crate::replication::peer_guard::Refusal::BadSnapshot(
                            "state does not decode",
                        ),
                    );
                    return;
                }
            }
        }
        if matches!(
            m.get_msg_type(),
            raft::prelude::MessageType::MsgAppend | raft::prelude::MessageType::MsgPropose
        ) {
            let (entries, bytes) = GroupLimits::append_cost(&m);
            self.unpersisted.0 += entries;
            self.unpersisted.1 += bytes;
        }
        let from = m.from;
        // Errors here are stale or foreign messages; raft-rs already ignores them.
        let _ = self.p.node.step(m);
        if self.p.node.raft.state == StateRole::Leader {
            self.heard_from.insert(from, Instant::now());
            // An answer may put a follower back in sync without producing a Ready.
            self.update_in_sync();
        }
    }
}

/// Sends `input` to a group without blocking; a full inbox drops the input and returns false
/// (for Raft messages that is a lost message, which Raft tolerates).
pub fn try_deliver(inbox: &InboxSender<GroupInput>, input: GroupInput) -> bool {
    match inbox.try_send(input) {
        Ok(()) => true,
        Err(TrySendError::Full(GroupInput::Propose(p))) => {
            let _ = p.reply.send(Err(AppendError::Busy));
            false
        }
        Err(TrySendError::Disconnected(GroupInput::Propose(p))) => {
            let _ = p.reply.send(Err(AppendError::Stopped));
            false
        }
        Err(_) => false,
    }
}
