//! Proposals: queueing, the idempotent-producer check, merging queued proposals into shared
//! entries (group commit), forwarding on a follower of the metadata group, and failing
//! proposals that a leader change lost.
//!
//! A child module of `group.rs`, an `impl Group` of its own.

use super::{AppendError, AppendReply, Appended, Group, Proposal, ProposalData, Waiting};
use crate::replication::producers::{batch_infos, SequenceCheck};
use crate::replication::raft_storage::{read, CTX_META, CTX_RECORDS};
use bytes::{BufMut, Bytes, BytesMut};
use raft::StateRole;
use std::time::Instant;

/// Largest entry built by merging proposals.
const MAX_MERGED_ENTRY_BYTES: usize = 1 << 20;

/// The proposal id in an entry context written by [`Group::context`], if `node` proposed it.
/// Context layout: tag u8 (CTX_RECORDS or CTX_META) | proposing node u64 | proposal id u64.
pub(super) fn proposal_id(ctx: &[u8], node: u64) -> Option<u64> {
    match ctx {
        [tag, rest @ ..] if (*tag == CTX_RECORDS || *tag == CTX_META) && rest.len() >= 16 => {
            let proposer = u64::from_be_bytes(rest[..8].try_into().ok()?);
            let id = u64::from_be_bytes(rest[8..16].try_into().ok()?);
            (proposer == node).then_some(id)
        }
        _ => None,
    }
}

impl Group {
    pub(super) fn leader_hint(&self) -> Option<u64> {
        match self.p.node.raft.leader_id {
            0 => None,
            id => Some(id),
        }
    }

    /// Answers NOT_LEADER to every [`ProposalData::MetaAsLeader`] whose term this replica does not
    /// lead in; the others become plain `Meta` proposals for this leader.
    fn refuse_stale_leader_proposals(&mut self) {
        if !self
            .queued
            .iter()
            .any(|p| matches!(p.data, ProposalData::MetaAsLeader { .. }))
        {
            return;
        }
        let leading = self.p.node.raft.state == StateRole::Leader;
        let current = self.p.node.raft.term;
        let leader = self.leader_hint();
        let queued = std::mem::take(&mut self.queued);
        for p in queued {
            match p.data {
                ProposalData::MetaAsLeader { data, term } if leading && term == current => {
                    self.queued.push(Proposal {
                        data: ProposalData::Meta(data),
                        reply: p.reply,
                    })
                }
                ProposalData::MetaAsLeader { .. } => {
                    let _ = p.reply.send(Err(AppendError::NotLeader { leader }));
                }
                data => self.queued.push(Proposal {
                    data,
                    reply: p.reply,
                }),
            }
        }
    }

    /// Turns queued proposals into raft-rs proposals: Records proposals are merged into entries
    /// of up to [`MAX_MERGED_ENTRY_BYTES`] (group commit), each entry's context listing the
    /// proposals it holds.
    pub(super) fn propose_queued(&mut self) {
        if self.queued.is_empty() {
            return;
        }
        self.refuse_stale_leader_proposals();
        if self.queued.is_empty() {
            return;
        }
        let can_forward = self.p.forward_proposals && self.leader_hint().is_some();
        let transferring = self.p.node.raft.state == StateRole::Leader
            && self.p.node.raft.lead_transferee.is_some();
        if transferring || (self.p.node.raft.state != StateRole::Leader && !can_forward) {
            // During a leader transfer raft-rs drops proposals: they are refused here before
            // the producer check, so a client's pipelined batches are all NOT_LEADER (not some
            // out of sequence behind a dropped one) and the producer table stays as it was.
            let leader = self.leader_hint();
            for p in self.queued.drain(..) {
                let _ = p.reply.send(Err(AppendError::NotLeader { leader }));
            }
            return;
        }
        let queued = std::mem::take(&mut self.queued);
        let queued = self.check_producers(queued);
        let mut iter = queued.into_iter().peekable();
        while let Some((first, undo_mark)) = iter.next() {
            let proposed = match first.data {
                ProposalData::Meta(data) | ProposalData::MetaAsLeader { data, .. } => {
                    let id = self.next_id();
                    let ctx = self.context(CTX_META, id);
                    self.propose_entry(id, ctx, data, vec![(first.reply, 0)])
                }
                ProposalData::Records {
                    batches,
                    offset_span,
                } => {
                    let mut members = vec![(first.reply, offset_span)];
                    let mut parts = vec![batches];
                    let mut size = parts[0].len();
                    // Group commit: merge the Records proposals queued behind this one.
                    let merge = self.p.group_commit;
                    while let Some((next, _)) = iter.next_if(|(p, _)| match &p.data {
                        ProposalData::Records { batches, .. } => {
                            merge && size + batches.len() <= MAX_MERGED_ENTRY_BYTES
                        }
                        ProposalData::Meta(_) | ProposalData::MetaAsLeader { .. } => false,
                    }) {
                        if let ProposalData::Records {
                            batches,
                            offset_span,
                        } = next.data
                        {
                            size += batches.len();
                            parts.push(batches);
                            members.push((next.reply, offset_span));
                        }
                    }
                    let data = if parts.len() == 1 {
                        parts.pop().unwrap_or_default()
                    } else {
                        let mut buf = BytesMut::with_capacity(size);
                        for p in &parts {
                            buf.put_slice(p);
                        }
                        buf.freeze()
                    };
                    let id = self.next_id();
                    let ctx = self.context(CTX_RECORDS, id);
                    self.propose_entry(id, ctx, data, members)
                }
            };
            if !proposed {
                // Not appended (raft-rs drops proposals during a leader transfer): neither are
                // the proposals behind it, or a producer's next batch would be written after a
                // gap. The producer batches they staged are forgotten, so the clients' retries
                // continue the sequences (this node may stay leader: a transfer given up).
                if let Some(table) = self.p.producers.as_mut() {
                    table.roll_back_to(undo_mark);
                }
                let leader = self.leader_hint();
                for (p, _) in iter {
                    let _ = p.reply.send(Err(AppendError::NotLeader { leader }));
                }
                return;
            }
            if !self.p.group_commit {
                // One proposal per Ready: each gets its own entry and its own fsync.
                if let Some(table) = self.p.producers.as_mut() {
                    // The proposals put back are checked again in the next round.
                    let next = iter.peek().map(|(_, mark)| *mark);
                    if let Some(mark) = next {
                        table.roll_back_to(mark);
                    }
                }
                self.queued.extend(iter.map(|(p, _)| p));
                return;
            }
        }
    }

    /// Checks idempotent producers' batches in arrival order (see
    /// [`crate::replication::producers`]): retries of committed batches are answered with their
    /// original offsets, batches out of sequence are refused, the rest go on to be proposed,
    /// each with the producer table's undo mark from before its check (to forget what it and
    /// the proposals after it staged, should they not be appended).
    fn check_producers(&mut self, queued: Vec<Proposal>) -> Vec<(Proposal, usize)> {
        let Some(table) = self.p.producers.as_mut() else {
            return queued.into_iter().map(|p| (p, 0)).collect();
        };
        table.start_undo();
        let mut out = Vec::with_capacity(queued.len());
        for p in queued {
            let mark = table.undo_mark();
            let ProposalData::Records {
                batches,
                offset_span,
            } = &p.data
            else {
                out.push((p, mark));
                continue;
            };
            let infos = batch_infos(batches);
            match table.check(&infos) {
                SequenceCheck::Append => out.push((p, mark)),
                SequenceCheck::Duplicate { base_offset } => {
                    let _ = p.reply.send(Ok(Appended {
                        raft_index: 0,
                        base_offset,
                        offset_count: *offset_span,
                    }));
                }
                SequenceCheck::Reject(e) => {
                    let _ = p.reply.send(Err(AppendError::Sequence(e)));
                }
            }
        }
        out
    }

    /// Entry context: kind tag, proposing node, proposal id (see [`proposal_id`]).
    pub(super) fn context(&self, tag: u8, id: u64) -> Bytes {
        let mut ctx = BytesMut::with_capacity(17);
        ctx.put_u8(tag);
        ctx.put_u64(self.p.node.raft.id);
        ctx.put_u64(id);
        ctx.freeze()
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_proposal_id;
        self.next_proposal_id = self.next_proposal_id.wrapping_add(1);
        id
    }

    /// Proposes one entry; false when raft-rs refused it (its proposals are answered).
    fn propose_entry(
        &mut self,
        id: u64,
        ctx: Bytes,
        data: Bytes,
        members: Vec<(AppendReply, u32)>,
    ) -> bool {
        let term = self.p.node.raft.term;
        match self.p.node.propose(ctx.to_vec(), data.to_vec()) {
            Ok(()) => {
                self.pending_count += members.len();
                self.proposed.insert(
                    id,
                    Waiting {
                        term,
                        proposals: members,
                        proposed_at: Instant::now(),
                        records: ctx.first() == Some(&CTX_RECORDS),
                    },
                );
                true
            }
            Err(e) => {
                let err = match e {
                    raft::Error::ProposalDropped => {
                        self.p
                            .metrics
                            .proposals_dropped
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        AppendError::NotLeader {
                            leader: self.leader_hint(),
                        }
                    }
                    other => AppendError::Invalid(other.to_string()),
                };
                for (reply, _) in members {
                    let _ = reply.send(Err(err.clone()));
                }
                false
            }
        }
    }

    /// Proposals made in an earlier term and never appended will not be: their leader is gone
    /// (a forwarded proposal dies with it). They are answered `Lost`.
    pub(super) fn fail_stale_proposals(&mut self, term: u64) {
        let stale: Vec<u64> = self
            .proposed
            .iter()
            .filter(|(_, w)| w.term < term)
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            if let Some(w) = self.proposed.remove(&id) {
                self.pending_count -= w.proposals.len();
                for (reply, _) in w.proposals {
                    let _ = reply.send(Err(AppendError::Lost));
                }
            }
        }
    }

    /// A new leader: the producer batches of entries it holds beyond its applied index (from
    /// earlier terms, committed only with its first entry) are pending in its producer table,
    /// so a retry of one of them is refused as in flight instead of being written twice.
    pub(super) fn mark_unapplied_pending(&mut self) {
        let Some(table) = self.p.producers.as_mut() else {
            return;
        };
        let s = read(&self.p.store);
        let mut lo = self.visible.applied_index + 1;
        let hi = s.last_index() + 1;
        while lo < hi {
            let Ok(entries) = s.entries(lo, hi, 4 << 20) else {
                break;
            };
            let Some(last) = entries.last().map(|e| e.index) else {
                break;
            };
            for e in entries {
                if e.kind == logstore::EntryKind::Records {
                    table.mark_pending(&batch_infos(&e.payload));
                }
            }
            lo = last + 1;
        }
    }

    /// This node stopped leading: the proposals it appended as leader are answered at once with
    /// [`AppendError::NotLeader`] instead of waiting for the caller's deadline (an entry may
    /// still commit under the new leader, as after a timeout: clients retry, and idempotent
    /// producers' retries are deduplicated). A group that forwards proposals keeps its
    /// forwarded ones waiting: the new leader may append them.
    pub(super) fn fail_deposed(&mut self, leader: u64) {
        let err = AppendError::NotLeader {
            leader: (leader != 0).then_some(leader),
        };
        let reads = std::mem::take(&mut self.reads_asked).into_values().chain(
            std::mem::take(&mut self.reads_confirmed)
                .into_iter()
                .map(|(_, r)| r),
        );
        for reply in reads {
            let _ = reply.send(Err(err.clone()));
        }
        let mut waits: Vec<Waiting> = std::mem::take(&mut self.appended).into_values().collect();
        if !self.p.forward_proposals {
            waits.extend(self.proposed.drain().map(|(_, w)| w));
        }
        for w in waits {
            self.pending_count -= w.proposals.len();
            for (reply, _) in w.proposals {
                let _ = reply.send(Err(err.clone()));
            }
        }
    }
}
