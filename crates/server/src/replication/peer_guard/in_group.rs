//! Step 2 of the peer guard's checks (see [`super`]): what a message must satisfy against its
//! group's Raft state, on the group's thread just before it is stepped.

use raft::prelude::{ConfState, Message, MessageType};
use raft::{Raft, StateRole, Storage};

use super::Refusal;
use crate::replication::raft_storage::{record_count_of, CTX_RECORDS};

/// What a group lets through beyond its Raft state: built by the group thread.
#[derive(Debug, Clone, Copy)]
pub struct GroupLimits {
    /// The group forwards proposals (the metadata group): `MsgPropose` may arrive.
    pub forward_proposals: bool,
    /// The group's log may be compacted, so a leader may send a snapshot (every group now:
    /// the metadata group's log is compacted below its state snapshots).
    pub snapshots: bool,
    /// Largest entry (payload + context) the group's store accepts.
    pub max_entry_bytes: u64,
    /// Entries the store can still take in the next append batch.
    pub batch_entries_left: usize,
    /// Bytes (with [`logstore::ENTRY_OVERHEAD_BYTES`] per entry) the store can still take in
    /// the next append batch.
    pub batch_bytes_left: u64,
}

impl GroupLimits {
    /// Entries and bytes an append's or a proposal's entries take from the batch budget.
    pub fn append_cost(msg: &Message) -> (usize, u64) {
        let bytes = msg
            .entries
            .iter()
            .map(|e| {
                (e.data.len() + e.context.len()) as u64 + logstore::ENTRY_OVERHEAD_BYTES as u64
            })
            .sum();
        (msg.entries.len(), bytes)
    }
}

/// Step 2 of the peer guard's checks: checks `msg` (already through
/// [`super::check_message`]) against the group's Raft state just before it is stepped, and
/// clamps a heartbeat's commit to what this node's log holds. Run on the group's thread,
/// between steps.
pub fn check_in_group<S: Storage>(
    raft: &Raft<S>,
    limits: &GroupLimits,
    msg: &mut Message,
) -> Result<(), Refusal> {
    use MessageType::*;
    let conf = raft.prs().conf();
    let member = conf.voters().contains(msg.from) || conf.learners().contains(&msg.from);
    // A snapshot may come from a leader this replica does not know yet: a member added while
    // it was down, or after its disk was replaced (its configuration then starts from the
    // config file's members). The snapshot's own configuration must name the sender a voter.
    let snapshot_from_its_voter = msg.get_msg_type() == MsgSnapshot
        && configuration_voters(msg.get_snapshot().get_metadata().get_conf_state())
            .contains(&msg.from);
    if !member && !snapshot_from_its_voter {
        return Err(Refusal::NotInGroup(msg.from));
    }
    let last = raft.raft_log.last_index();
    let kind = msg.get_msg_type();
    match kind {
        MsgPropose if !limits.forward_proposals => return Err(Refusal::NotAccepted(kind)),
        MsgPropose => check_entries_fit(limits, msg)?,
        MsgTransferLeader if raft.state != StateRole::Leader || msg.term != raft.term => {
            return Err(Refusal::NotAccepted(kind));
        }
        MsgRequestVoteResponse | MsgRequestPreVoteResponse if raft.raft_log.persisted < last => {
            return Err(Refusal::NotAccepted(kind));
        }
        MsgAppendResponse => {
            for (field, value) in [("index", msg.index), ("reject_hint", msg.reject_hint)] {
                if value > last {
                    return Err(Refusal::OutOfRange { field, value });
                }
            }
        }
        MsgHeartbeat if msg.commit > last => {
            // The leader believes this node holds entries it does not (its disk was wiped, or
            // it lost an unsynced tail): commit nothing new; the leader's next appends are
            // refused and it probes back to where this log ends.
            msg.commit = raft.raft_log.committed;
        }
        MsgAppend => check_entries_fit(limits, msg)?,
        MsgSnapshot if !limits.snapshots => return Err(Refusal::NotAccepted(kind)),
        MsgSnapshot => {
            let meta = msg.get_snapshot().get_metadata();
            let committed = raft.raft_log.committed;
            if meta.index < committed {
                // raft-rs restores nothing below its commit index and answers with that index
                // (an append response), which is how a leader whose snapshot was overtaken
                // (the follower caught up by appends meanwhile) learns where the follower is
                // and leaves its snapshot state. Dropped here, the leader waited for that
                // answer for good and never sent the follower another entry (found by the
                // simulation: SIM_MEMBERSHIP=1, retention seed 1002).
                return Ok(());
            }
            if meta.index == committed && raft.raft_log.term(committed).ok() != Some(meta.term) {
                // At the commit index a correct leader's snapshot has the committed entry's
                // term (raft-rs then only fast-forwards and answers); raft-rs would restore
                // one of another term, replacing a committed entry.
                return Err(Refusal::BadSnapshot(
                    "at the commit index with another term",
                ));
            }
            // Its configuration is the group's as committed at the snapshot's index, which may
            // differ from what this replica last applied (membership changed while it was
            // away): taken when raft-rs can restore it, it names the sender a voter and this
            // node a member (raft-rs ignores a snapshot that leaves it out).
            let cs = msg.get_snapshot().get_metadata().get_conf_state();
            let voters = configuration_voters(cs);
            if !voters.contains(&msg.from) {
                return Err(Refusal::BadSnapshot("its configuration lacks the sender"));
            }
            if !voters.contains(&raft.id) && !cs.learners.contains(&raft.id) {
                return Err(Refusal::BadSnapshot("its configuration lacks this node"));
            }
            if !restorable_configuration(cs) {
                return Err(Refusal::BadSnapshot("its configuration cannot be restored"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// The entries of an append or a proposal fit the store: sizes, record batches, the budget
/// of the next append batch.
fn check_entries_fit(limits: &GroupLimits, msg: &Message) -> Result<(), Refusal> {
    for e in msg.entries.iter() {
        let size = (e.data.len() + e.context.len()) as u64;
        if size > limits.max_entry_bytes {
            return Err(Refusal::OutOfRange {
                field: "entry size",
                value: size,
            });
        }
        // An entry carrying its record count (read from the leader's store, maybe
        // compacted: see `raft_storage`): its batches may leave gaps or be gone; they must
        // be whole batches taking no more offsets than the count, which must be positive
        // (the store checks that each lies inside the entry's offsets).
        if let Some(count) = record_count_of(e) {
            let taken = if e.data.is_empty() {
                Ok(0)
            } else {
                logstore::records_offset_count(&e.data)
            };
            match taken {
                Ok(n) if count > 0 && n <= u64::from(count) => continue,
                Ok(n) => {
                    return Err(Refusal::BadRecords {
                        index: e.index,
                        reason: format!("{n} offsets of batches in an entry of {count} records"),
                    })
                }
                Err(reason) => {
                    return Err(Refusal::BadRecords {
                        index: e.index,
                        reason,
                    })
                }
            }
        }
        // Mirrors `raft_storage::to_store_entry`: these become Records entries.
        if !e.data.is_empty() && e.context.first() == Some(&CTX_RECORDS) {
            match logstore::records_offset_count(&e.data) {
                Ok(n) if n <= u64::from(u32::MAX) => {}
                Ok(n) => {
                    return Err(Refusal::BadRecords {
                        index: e.index,
                        reason: format!("{n} offsets in one entry"),
                    })
                }
                Err(reason) => {
                    return Err(Refusal::BadRecords {
                        index: e.index,
                        reason,
                    })
                }
            }
        }
    }
    let (entries, bytes) = GroupLimits::append_cost(msg);
    if entries > limits.batch_entries_left || bytes > limits.batch_bytes_left {
        return Err(Refusal::OutOfRange {
            field: "append batch bytes",
            value: bytes,
        });
    }
    Ok(())
}

/// Most members (voters and learners, incoming and outgoing) a configuration from a peer may
/// name: far above any group's, a bound on the work of checking it.
const MAX_CONFIGURATION_MEMBERS: usize = 32;

/// The voters of a configuration, incoming and outgoing (a joint one has both).
fn configuration_voters(cs: &ConfState) -> Vec<u64> {
    cs.voters
        .iter()
        .chain(cs.voters_outgoing.iter())
        .copied()
        .collect()
}

/// Whether raft-rs can restore `cs` (a snapshot's configuration), checked the way raft-rs
/// restores it, on a scratch tracker: raft-rs panics on a configuration it cannot restore.
fn restorable_configuration(cs: &ConfState) -> bool {
    let members = cs.voters.len() + cs.learners.len() + cs.voters_outgoing.len();
    if cs.voters.is_empty() || members + cs.learners_next.len() > MAX_CONFIGURATION_MEMBERS {
        return false;
    }
    // raft-rs restores one change at a time and would take a learner listed among the voters
    // as a demotion: a configuration raft-rs writes never lists an id twice.
    let mut ids: Vec<u64> = cs
        .voters
        .iter()
        .chain(cs.learners.iter())
        .copied()
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() != cs.voters.len() + cs.learners.len()
        || cs.learners.iter().any(|id| cs.voters_outgoing.contains(id))
    {
        return false;
    }
    let single = |id: u64, kind: raft::prelude::ConfChangeType| {
        let mut cc = raft::prelude::ConfChangeSingle::default();
        cc.set_change_type(kind);
        cc.node_id = id;
        cc
    };
    use raft::prelude::ConfChangeType::{AddLearnerNode, AddNode, RemoveNode};
    let mut tracker = raft::ProgressTracker::new(1);
    let apply =
        |tracker: &mut raft::ProgressTracker, changes: &[_]| match raft::Changer::new(tracker)
            .simple(changes)
        {
            Ok((cfg, map)) => {
                tracker.apply_conf(cfg, map, 1);
                true
            }
            Err(_) => false,
        };
    let incoming: Vec<_> = cs
        .voters_outgoing
        .iter()
        .map(|id| single(*id, RemoveNode))
        .chain(cs.voters.iter().map(|id| single(*id, AddNode)))
        .chain(cs.learners.iter().map(|id| single(*id, AddLearnerNode)))
        .chain(
            cs.learners_next
                .iter()
                .map(|id| single(*id, AddLearnerNode)),
        )
        .collect();
    let replayed = if cs.voters_outgoing.is_empty() {
        if !cs.learners_next.is_empty() || cs.auto_leave {
            return false;
        }
        incoming
            .iter()
            .all(|cc| apply(&mut tracker, std::slice::from_ref(cc)))
    } else {
        cs.voters_outgoing
            .iter()
            .all(|id| apply(&mut tracker, &[single(*id, AddNode)]))
            && match raft::Changer::new(&tracker).enter_joint(cs.auto_leave, &incoming) {
                Ok((cfg, map)) => {
                    tracker.apply_conf(cfg, map, 1);
                    true
                }
                Err(_) => false,
            }
    };
    // raft-rs asserts (and stops the process otherwise) that the restored tracker describes
    // the snapshot's configuration exactly, as sets: a replay that accepted every change but
    // dropped or moved an id (a learner in the outgoing voters of a joint configuration, an
    // id listed twice in one list) must be refused here.
    replayed && same_configuration(&tracker.conf().to_conf_state(), cs)
}

/// Whether two configurations name the same voters, outgoing voters, learners and next
/// learners (each compared as a set, as raft-rs compares them after a restore) and the same
/// auto-leave flag.
fn same_configuration(a: &ConfState, b: &ConfState) -> bool {
    let sorted = |ids: &[u64]| {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids
    };
    sorted(&a.voters) == sorted(&b.voters)
        && sorted(&a.voters_outgoing) == sorted(&b.voters_outgoing)
        && sorted(&a.learners) == sorted(&b.learners)
        && sorted(&a.learners_next) == sorted(&b.learners_next)
        && a.auto_leave == b.auto_leave
}

#[cfg(test)]
#[path = "in_group_tests.rs"]
mod tests;
