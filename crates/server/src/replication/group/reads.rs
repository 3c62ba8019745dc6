//! Read barriers (read index): asked of raft-rs, confirmed by a quorum, answered once
//! applied.
//!
//! A child module of `group.rs`, an `impl Group` of its own.

use super::{rejoin_read_epoch, AppendError, Group, MAX_PENDING_READS};
use raft::StateRole;
use tokio::sync::oneshot;

impl Group {
    /// Starts a read barrier: raft-rs confirms this leader's commit index with a quorum (its
    /// safe read-only mode) and reports it as a read state in a later Ready.
    pub(super) fn ask_read_index(&mut self, reply: oneshot::Sender<Result<u64, AppendError>>) {
        if self.p.node.raft.state != StateRole::Leader {
            let _ = reply.send(Err(AppendError::NotLeader {
                leader: self.leader_hint(),
            }));
            return;
        }
        if self.reads_asked.len() >= MAX_PENDING_READS {
            // Barriers raft-rs dropped (a leader without a commit of its term yet) leave
            // closed replies behind once their callers gave up.
            self.reads_asked.retain(|_, r| !r.is_closed());
            if self.reads_asked.len() >= MAX_PENDING_READS {
                let _ = reply.send(Err(AppendError::Busy));
                return;
            }
        }
        self.set_quiesced(false);
        let id = self.next_read_id;
        self.next_read_id = self.next_read_id.wrapping_add(1);
        self.reads_asked.insert(id, reply);
        self.p.node.read_index(id.to_be_bytes().to_vec());
    }

    /// Takes the read states raft-rs confirmed, then answers every confirmed barrier this
    /// replica has applied through.
    pub(super) fn answer_reads(&mut self, states: Vec<raft::ReadState>) {
        for rs in states {
            if let Some(epoch) = rejoin_read_epoch(&rs.request_ctx) {
                if self.rejoin_epoch_pending() == Some(epoch) {
                    tracing::info!(stream = %self.p.name, target = rs.index, "rejoin target confirmed by the leader");
                    self.rejoin_target = Some((epoch, rs.index));
                }
                continue;
            }
            let id = <[u8; 8]>::try_from(rs.request_ctx.as_slice()).map(u64::from_be_bytes);
            if let Some(reply) = id.ok().and_then(|id| self.reads_asked.remove(&id)) {
                self.reads_confirmed.push((rs.index, reply));
            }
        }
        let applied = self.visible.applied_index;
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.reads_confirmed)
            .into_iter()
            .partition(|(index, _)| *index <= applied);
        self.reads_confirmed = waiting;
        for (index, reply) in done {
            let _ = reply.send(Ok(index));
        }
    }
}
