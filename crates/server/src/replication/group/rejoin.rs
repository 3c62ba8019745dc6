//! A replica rejoining after its node's disk was replaced (see
//! [`crate::replication::replicas`]): which votes it may grant, when it may campaign, how it
//! asks a leader for its rejoin target (a read-index round) and when it has caught up. A
//! child module of `group.rs`, an `impl Group` of its own.

use raft::prelude::Message;

use super::Group;

/// Start of the context of a rejoining replica's read-index request (then the rejoin epoch,
/// 8 bytes big-endian); leaders' own read barriers use 8-byte contexts.
const REJOIN_READ_CONTEXT: &[u8] = b"vdl-rejoin";

fn rejoin_read_context(epoch: u64) -> Vec<u8> {
    [REJOIN_READ_CONTEXT, &epoch.to_be_bytes()].concat()
}

pub(super) fn rejoin_read_epoch(ctx: &[u8]) -> Option<u64> {
    let epoch = ctx.strip_prefix(REJOIN_READ_CONTEXT)?;
    Some(u64::from_be_bytes(epoch.try_into().ok()?))
}

impl Group {
    /// In rejoin mode (this node's disk was replaced), until this group has applied its
    /// target: no vote is granted (the message is dropped, as if this node were down), except
    /// to the other voter of a group of two. Why that one is safe: with two voters every
    /// committed entry was acknowledged by both, so the other voter holds all of them (it
    /// campaigns only when its own log is whole: a replica repairing never does, a rejoining
    /// one only in a group of two, where it needs this replica's vote), and this replica's vote elects no log that lacks one. Without it a group of
    /// two with a replaced disk had no leader for good once the other lost leadership (the
    /// rejoining replica gets its target only from a leader).
    pub(super) fn rejoin_allows(&mut self, m: &Message) -> bool {
        use raft::prelude::MessageType;
        if self.rejoin_epoch_pending().is_none() {
            return true;
        }
        if !matches!(
            m.get_msg_type(),
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
        ) {
            return true;
        }
        self.other_of_two_voters() == Some(m.from)
    }

    /// In a group of exactly two voters (no joint configuration) that includes this replica:
    /// the other voter. There every committed entry is held by both voters, so the other one
    /// holds all of them, and its vote (which raft-rs grants only to a log at least as up to
    /// date as its own) is what makes an election safe: a rejoining replica may vote for it,
    /// and may campaign itself (it wins only with that vote).
    pub(super) fn other_of_two_voters(&self) -> Option<u64> {
        let cs = self.p.node.raft.prs().conf().to_conf_state();
        let me = self.p.node.raft.id;
        match cs.voters[..] {
            [a, b] if cs.voters_outgoing.is_empty() && (a == me || b == me) && a != b => {
                Some(if a == me { b } else { a })
            }
            _ => None,
        }
    }

    /// The rejoin epoch this group has not caught up in yet (None: not rejoining, or done).
    pub(super) fn rejoin_epoch_pending(&self) -> Option<u64> {
        let rejoin = self.p.rejoin.rejoin();
        let epoch = rejoin.epoch();
        (rejoin.is_active() && self.rejoin_done != epoch).then_some(epoch)
    }

    /// In rejoin mode, once a leader is known: asks it for the rejoin target with a read-index
    /// round (raft-rs forwards it; the leader answers with its commit index once a quorum of
    /// the current term confirmed its leadership), again after an election timeout (in ticks)
    /// without an answer (a new leader drops it until it has committed in its term). Never
    /// the commit index an append carries (a deposed leader's, or a lagging one's) nor a
    /// snapshot's index (where retention cut, below the commit): the replica must hold
    /// everything committed before it votes again.
    pub(super) fn ask_rejoin_target(&mut self) {
        let Some(epoch) = self.rejoin_epoch_pending() else {
            return;
        };
        // A group that was quiesced when rejoin mode began ticks again, so that it asks
        // again when an answer does not come.
        if self.visible.quiesced {
            self.set_quiesced(false);
        }
        // A rejoining leader (only of a group of two voters, see `may_not_campaign`) asks
        // itself: raft-rs answers once the other voter confirmed its leadership in its term.
        let leads = self.p.node.raft.leader_id == self.p.node.raft.id;
        if self.rejoin_target.is_some_and(|(e, _)| e == epoch)
            || self.p.node.raft.leader_id == 0
            || (leads && self.other_of_two_voters().is_none())
        {
            return;
        }
        let timeout_ticks = self.p.node.raft.election_timeout();
        if self
            .rejoin_target_asked
            .is_some_and(|(e, ticks)| e == epoch && ticks < timeout_ticks)
        {
            return;
        }
        self.rejoin_target_asked = Some((epoch, 0));
        self.p.node.read_index(rejoin_read_context(epoch));
    }

    /// Reports this group caught up once it has applied its rejoin target.
    pub(super) fn check_rejoined(&mut self) {
        if let Some((epoch, target)) = self.rejoin_target {
            if self.visible.applied_index >= target && self.rejoin_done != epoch {
                self.rejoin_done = epoch;
                self.p.rejoin.rejoin().caught_up(self.p.id, epoch);
                tracing::info!(stream = %self.p.name, applied = self.visible.applied_index, "caught up after the replaced disk");
            }
        }
    }
}
