//! What the node tells the peer guard about the one group whose followers forward proposals to
//! their leader (the node's metadata group). Replication checks the shape of every message;
//! what that group's entries and state mean is its owner's business, asked through
//! [`ForwardingGroup`] (the metadata's answer is `crate::metadata::forwarded`).

use super::Refusal;

/// The checks of the group that forwards proposals that only its owner can make. Shared by
/// every peer connection's task, so it holds no per-connection state.
pub trait ForwardingGroup: Send + Sync + std::fmt::Debug {
    /// Whether `group` is the group that forwards proposals (its snapshots carry the owner's
    /// state, not a stream's next offset).
    fn is_group(&self, group: u64) -> bool;

    /// Largest snapshot state (bytes) the group takes from a peer; the state itself is
    /// checked by the group's state machine before raft-rs takes it.
    fn max_snapshot_bytes(&self) -> usize;

    /// Whether node `from` may have the entry payload `data` proposed through this node (its
    /// proposals forwarded to the leader); `Err` says why not
    /// ([`Refusal::BadEntries`] for a payload that does not decode, [`Refusal::Unauthorized`]
    /// for one the sender may not propose). Called for every forwarded entry, whose context
    /// already names the sender.
    fn authorize(&self, from: u64, data: &[u8]) -> Result<(), Refusal>;
}
