//! What the peer port admits: which connections, which hellos, which Raft messages.
//!
//! Nothing that arrives on the peer port may crash a node, and raft-rs panics (fail-stop) on
//! several messages a correct peer never sends. So every message is checked before it reaches
//! raft-rs, in two steps:
//!
//! 1. [`PeerGuard::check_message`], on the connection's task, with what the message alone says:
//!    `from` is the connection's hello id, `to` is this node, the type may come from the network,
//!    terms and indexes are in range, entries and snapshot are well formed.
//! 2. [`check_in_group`], on the group's thread just before `step`, with what only the group
//!    knows: the sender is in the group's configuration, the group forwards proposals, indexes
//!    acknowledged are in this node's log, a heartbeat's commit is within the log, appended
//!    entries fit the store.
//!
//! A refused message is dropped and counted in [`PeerStats`] (Raft tolerates lost messages). A
//! refused connection is closed before anything it said is recorded.
//!
//! The checks and the raft-rs 0.7 behaviour each one prevents:
//!
//! | check | else |
//! |---|---|
//! | `MsgPropose` only for a group that forwards proposals, with >= 1 entry | `stepped empty MsgProp` panic; proposals into stream groups |
//! | `MsgPropose`, `MsgReadIndex` carry term 0 | a follower forwarding them panics (`term should not be set`) |
//! | every other type carries a term in `1..=MAX_PEER_TERM_OR_INDEX` | term 0 skips term checks (candidates `debug_assert` on it; vote responses panic); `term + 1` overflows |
//! | no `MsgHup`, `MsgBeat`, `MsgUnreachable`, `MsgSnapStatus`, `MsgCheckQuorum`; `request_snapshot == 0` | local-only messages act as this node's own decisions |
//! | `MsgAppend`: entries at `index + 1, + 2, ...`, terms in `1..=term`, non-decreasing from `log_term`; `log_term > 0` when `index > 0`; conf changes only as `EntryConfChangeV2` (the leader's membership steps; raft-rs returns an error, not a panic, for an invalid one when it applies) | `entry conflict with committed entry`, out-of-bounds slicing, entries of term 0 "matching" past the log then `commit_to` panics, store `TermRegression` panics |
//! | `MsgAppend`, `MsgPropose`: Records payloads are valid batches, entries within the store's size limits | the store refuses the append and the group thread panics |
//! | `MsgPropose` entries are metadata entries whose context names the sender | record batches nobody validated; another node's client answered |
//! | `MsgPropose` entries are authorized for their sender by the group's owner ([`ForwardingGroup::authorize`]; the metadata's: they decode, their request id names the sender, node-scoped commands are about the sender) | a member announcing another node's admin address; undecodable metadata committed |
//! | `MsgAppendResponse`: `index`, `reject_hint` <= this node's last index | the leader commits past its log (`commit_to` panics) or overflows |
//! | `MsgHeartbeat`: a commit beyond this node's last index becomes its own commit index | `commit_to` panics (a follower whose disk was wiped: the leader still believes it holds what it acknowledged) |
//! | `MsgReadIndex`, `MsgReadIndexResp` carry exactly one entry | index out of bounds |
//! | `MsgSnapshot`: metadata term in `1..=term`, data decodes, configuration restorable (checked as raft-rs restores it), naming the sender a voter and this node a member (it may differ from the group's: membership changed while this replica was away) | `commit_to` past the log; `unable to restore config` panic |
//! | `MsgSnapshot` at the commit index only with the committed entry's term (below it, raft-rs restores nothing and answers with its commit index, which the leader needs) | a committed entry replaced (raft-rs restores a snapshot at the commit index whatever its term) |
//! | the forwarding group's (the metadata group's) `MsgSnapshot`: its state is at most [`ForwardingGroup::max_snapshot_bytes`] and decodes (format byte, CRC, protobuf) at the snapshot's index (checked by the group before stepping) | a follower's metadata replaced by garbage |
//! | `MsgTransferLeader` only to the leader, in its term | a follower forwarding it panics (`term should not be set`) |
//! | vote responses only while every entry is persisted | `become_leader` asserts all entries are persisted |
//!
//! **Who a sender is.** A connection is admitted for member `n` when its hello claims `n`, it
//! comes from `n`'s configured peer IP and, with `[peer_tls]`, its verified client certificate
//! names `n` (`vdl-node://<n>`, see [`crate::security::peer_tls`] and
//! [`PeerGuard::admit_certified_hello`]); every message on it must then be from `n`. Without
//! `[peer_tls]` the source IP is the only proof, which any process able to send from that IP
//! passes.
//!
//! **What a member is trusted with.** A sender that passes as a member is that member as far as
//! this node can tell, and Raft does not tolerate Byzantine members: it is trusted as Raft
//! requires. It cannot crash a node, but its well-formed lies (forged votes, appends,
//! snapshots, a term pushed to [`MAX_PEER_TERM_OR_INDEX`]) can make a node's log diverge for
//! good or stall a group. Its forwarded metadata proposals are authorized by the metadata's
//! [`ForwardingGroup`] (`crate::metadata::forwarded`): node-scoped commands only about
//! itself; client commands (topics, ACLs, credentials, quotas, membership, ...) are its
//! clients' requests, which it authenticated and authorized where it took them. Peer identity
//! is what keeps non-members out of this trust: a deployment facing an attacker on the network
//! sets `[peer_tls]`.
//!
//! The room, one job per file: `refusal.rs` (why something was refused), `stats.rs` (the
//! counters and the rate-limited log of refusals), `forwarding.rs` (what the node tells the
//! guard about the group that forwards proposals; replication knows nothing of what its
//! entries mean), `message.rs` (step 1), `in_group.rs` (step 2); the connection checks are
//! here.

mod forwarding;
mod in_group;
mod message;
#[cfg(test)]
mod random_tests;
mod refusal;
mod stats;
#[cfg(test)]
pub(crate) mod test_fixtures;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use raft::prelude::Message;

pub use forwarding::ForwardingGroup;
pub use in_group::{check_in_group, GroupLimits};
pub use message::check_message;
pub use refusal::Refusal;
pub use stats::PeerStats;

/// Largest term or index accepted from a peer. Far beyond anything a real log reaches, and low
/// enough that raft-rs's `+ 1`s on terms and indexes cannot overflow.
pub const MAX_PEER_TERM_OR_INDEX: u64 = 1 << 62;

/// The connection-level and message-level checks of one node (see the module documentation).
#[derive(Debug)]
pub struct PeerGuard {
    self_id: u64,
    /// Every other member's peer IP: configured, or learned from the replicated member list
    /// (a member added at runtime, see [`PeerGuard::add_member`]).
    members: std::sync::RwLock<HashMap<u64, IpAddr>>,
    /// What the group that forwards proposals admits (the node's metadata group).
    forwarding: Arc<dyn ForwardingGroup>,
}

impl PeerGuard {
    /// A guard for node `self_id` of a cluster whose members (this node included) are
    /// `(id, peer address)`, whose group that forwards proposals admits what `forwarding`
    /// says.
    pub fn new(
        self_id: u64,
        members: &[(u64, SocketAddr)],
        forwarding: Arc<dyn ForwardingGroup>,
    ) -> PeerGuard {
        PeerGuard {
            self_id,
            forwarding,
            members: std::sync::RwLock::new(
                members
                    .iter()
                    .filter(|(id, _)| *id != self_id)
                    .map(|(id, addr)| (*id, addr.ip().to_canonical()))
                    .collect(),
            ),
        }
    }

    /// Admits a member added at runtime (its connections and hellos from `addr`'s IP); a
    /// known member's address is replaced.
    pub fn add_member(&self, id: u64, addr: SocketAddr) {
        if id != self.self_id {
            self.members
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, addr.ip().to_canonical());
        }
    }

    fn members(&self) -> std::sync::RwLockReadGuard<'_, HashMap<u64, IpAddr>> {
        self.members.read().unwrap_or_else(|e| e.into_inner())
    }

    /// This node's id.
    pub fn self_id(&self) -> u64 {
        self.self_id
    }

    /// Number of other members.
    pub fn peer_count(&self) -> usize {
        self.members().len()
    }

    /// Accepts a connection only from an IP some other member is configured at.
    pub fn admit_source(&self, source: IpAddr) -> Result<(), Refusal> {
        let ip = source.to_canonical();
        if self.members().values().any(|m| *m == ip) {
            Ok(())
        } else {
            Err(Refusal::UnknownSource(ip))
        }
    }

    /// Accepts a hello claiming `claimed` from `source` only when `claimed` is a member other
    /// than this node and its configured peer IP is `source`.
    pub fn admit_hello(&self, claimed: u64, source: IpAddr) -> Result<(), Refusal> {
        let actual = source.to_canonical();
        match self.members().get(&claimed).copied() {
            None => Err(Refusal::NotAMember(claimed)),
            Some(expected) if expected != actual => Err(Refusal::WrongSource {
                claimed,
                expected,
                actual,
            }),
            Some(_) => Ok(()),
        }
    }

    /// [`PeerGuard::admit_hello`], and with mutual TLS (`certified`: the node id the
    /// connection's verified certificate names) the hello must claim exactly that node.
    pub fn admit_certified_hello(
        &self,
        claimed: u64,
        source: IpAddr,
        certified: Option<u64>,
    ) -> Result<(), Refusal> {
        if let Some(certified) = certified {
            if certified != claimed {
                return Err(Refusal::CertificateOfOtherNode { claimed, certified });
            }
        }
        self.admit_hello(claimed, source)
    }

    /// The checks a message passes on its own, before it is handed to its group (step 1 of the
    /// module documentation). `hello` is the id the connection announced (already admitted).
    pub fn check_message(&self, hello: u64, group: u64, msg: &Message) -> Result<(), Refusal> {
        check_message(self.self_id, hello, group, msg, self.forwarding.as_ref())
    }
}
