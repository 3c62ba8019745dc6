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
//! | `MsgPropose` entries decode, their request id names the sender, node-scoped commands are about the sender ([`crate::replication::forwarded`]) | a member announcing another node's admin address; undecodable metadata committed |
//! | `MsgAppendResponse`: `index`, `reject_hint` <= this node's last index | the leader commits past its log (`commit_to` panics) or overflows |
//! | `MsgHeartbeat`: a commit beyond this node's last index becomes its own commit index | `commit_to` panics (a follower whose disk was wiped: the leader still believes it holds what it acknowledged) |
//! | `MsgReadIndex`, `MsgReadIndexResp` carry exactly one entry | index out of bounds |
//! | `MsgSnapshot`: metadata term in `1..=term`, data decodes, configuration restorable (checked as raft-rs restores it), naming the sender a voter and this node a member (it may differ from the group's: membership changed while this replica was away) | `commit_to` past the log; `unable to restore config` panic |
//! | `MsgSnapshot` at the commit index only with the committed entry's term (below it, raft-rs restores nothing and answers with its commit index, which the leader needs) | a committed entry replaced (raft-rs restores a snapshot at the commit index whatever its term) |
//! | the metadata group's `MsgSnapshot`: its state decodes (format byte, CRC, protobuf) at the snapshot's index (checked by the group before stepping) | a follower's metadata replaced by garbage |
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
//! good or stall a group. Its forwarded metadata proposals are authorized by
//! [`crate::replication::forwarded`]: node-scoped commands only about itself; client commands
//! (topics, ACLs, credentials, quotas, membership, ...) are its clients' requests, which it
//! authenticated and authorized where it took them. Peer identity is what keeps non-members
//! out of this trust: a deployment facing an attacker on the network sets `[peer_tls]`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use raft::prelude::{ConfState, EntryType, Message, MessageType};
use raft::{Raft, StateRole, Storage};
use thiserror::Error;

use crate::replication::raft_storage::{decode_snapshot_data, CTX_META, CTX_RECORDS};

/// Largest term or index accepted from a peer. Far beyond anything a real log reaches, and low
/// enough that raft-rs's `+ 1`s on terms and indexes cannot overflow.
pub const MAX_PEER_TERM_OR_INDEX: u64 = 1 << 62;

/// Refused connections logged at warn per second at most; the rest go to debug.
const WARNINGS_PER_SECOND: u64 = 5;

/// Why a connection or a message from the peer port was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    /// The connection's source address is no other member's peer address.
    #[error("source address {0} is not another member's peer address")]
    UnknownSource(IpAddr),
    /// The hello names no configured member other than this node.
    #[error("hello claims node {0}, which is not another member")]
    NotAMember(u64),
    /// The hello names a member configured at another address.
    #[error("hello claims node {claimed} (configured at {expected}) from {actual}")]
    WrongSource {
        /// The id the hello claimed.
        claimed: u64,
        /// That member's configured peer address.
        expected: IpAddr,
        /// Where the connection came from.
        actual: IpAddr,
    },
    /// The listener already holds as many connections as it accepts.
    #[error("too many peer connections")]
    TooManyConnections,
    /// With `[peer_tls]`: the client certificate (valid for the peer CA) names no node (a Kafka
    /// client certificate, say), see [`crate::security::peer_tls`].
    #[error("peer certificate refused: {0}")]
    UncertifiedPeer(crate::security::peer_tls::NodeNameError),
    /// With `[peer_tls]`: the hello claims another node than the certificate names.
    #[error("hello claims node {claimed} with a certificate of node {certified}")]
    CertificateOfOtherNode {
        /// The id the hello claimed.
        claimed: u64,
        /// The id the connection's certificate names.
        certified: u64,
    },
    /// A forwarded metadata proposal the sender may not make (see
    /// [`crate::replication::forwarded`]).
    #[error("forwarded proposal refused: {0}")]
    Unauthorized(&'static str),
    /// A message's `from` is not the connection's hello id.
    #[error("message from node {from} on the connection of node {hello}")]
    WrongSender {
        /// `msg.from`.
        from: u64,
        /// The id the connection's hello announced.
        hello: u64,
    },
    /// A message is not addressed to this node.
    #[error("message to node {to}, this is node {me}")]
    WrongRecipient {
        /// `msg.to`.
        to: u64,
        /// This node's id.
        me: u64,
    },
    /// The message names a group this node does not run.
    #[error("no group {0} on this node")]
    UnknownGroup(u64),
    /// A liveness ping's leader report does not decode or is too long (see
    /// [`crate::replication::leaders`]); the ping still counts as a sign of life.
    #[error("leader report refused: {0}")]
    BadLeaderReport(crate::replication::leaders::ReportError),
    /// The sender is neither voter nor learner of the group's configuration.
    #[error("node {0} is not in the group's configuration")]
    NotInGroup(u64),
    /// A message type only raft-rs itself or this node may produce.
    #[error("{0:?} may not come from the network")]
    LocalOnly(MessageType),
    /// A message type this group does not take now (see the module table).
    #[error("{0:?} is not accepted by this group now")]
    NotAccepted(MessageType),
    /// The message's term is not what its type requires.
    #[error("{kind:?} with term {term}")]
    BadTerm {
        /// The message type.
        kind: MessageType,
        /// Its term.
        term: u64,
    },
    /// A field is out of its range.
    #[error("{field} = {value} is out of range")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// The entries do not fit the message type.
    #[error("bad entries: {0}")]
    BadEntries(&'static str),
    /// A Records entry's payload is not what the store accepts.
    #[error("bad record batches at index {index}: {reason}")]
    BadRecords {
        /// The entry's index.
        index: u64,
        /// What is wrong.
        reason: String,
    },
    /// The snapshot is malformed or does not fit the group.
    #[error("bad snapshot: {0}")]
    BadSnapshot(&'static str),
}

/// Counters of what the peer port refused. Shared by the listener, the registry and the groups.
#[derive(Debug)]
pub struct PeerStats {
    refused_connections: AtomicU64,
    refused_messages: AtomicU64,
    delivered_messages: AtomicU64,
    dropped_messages: AtomicU64,
    /// Start of the current warning second (ms since `epoch`) and warnings logged in it.
    warn_second: AtomicU64,
    warned: AtomicU64,
    epoch: Instant,
}

impl Default for PeerStats {
    fn default() -> PeerStats {
        PeerStats {
            refused_connections: AtomicU64::new(0),
            refused_messages: AtomicU64::new(0),
            delivered_messages: AtomicU64::new(0),
            dropped_messages: AtomicU64::new(0),
            warn_second: AtomicU64::new(0),
            warned: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl PeerStats {
    /// Connections closed because of a [`Refusal`] (source, hello, limit) or a hello that did
    /// not arrive in time, so far.
    pub fn refused_connections(&self) -> u64 {
        self.refused_connections.load(Ordering::Relaxed)
    }

    /// Raft messages dropped because of a [`Refusal`], so far.
    pub fn refused_messages(&self) -> u64 {
        self.refused_messages.load(Ordering::Relaxed)
    }

    /// Raft messages admitted by [`check_message`] and queued for their group (which may
    /// still refuse them with [`check_in_group`]), so far.
    pub fn delivered_messages(&self) -> u64 {
        self.delivered_messages.load(Ordering::Relaxed)
    }

    /// Raft messages admitted but dropped because their group's inbox was full, so far.
    pub fn dropped_messages(&self) -> u64 {
        self.dropped_messages.load(Ordering::Relaxed)
    }

    /// Counts a message queued for its group (`queued`) or dropped on a full inbox.
    pub fn count_delivery(&self, queued: bool) {
        if queued {
            self.delivered_messages.fetch_add(1, Ordering::Relaxed);
        } else {
            self.dropped_messages.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a refused connection and logs it: at warn, at most 5 a second, otherwise at debug.
    pub fn refuse_connection(&self, source: SocketAddr, why: &dyn std::fmt::Display) {
        self.refused_connections.fetch_add(1, Ordering::Relaxed);
        if self.may_warn() {
            tracing::warn!(%source, "peer connection refused: {why}");
        } else {
            tracing::debug!(%source, "peer connection refused: {why}");
        }
    }

    /// Counts a dropped message and logs it at debug.
    pub fn refuse_message(&self, group: u64, why: &Refusal) {
        self.refused_messages.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(group, "peer message refused: {why}");
    }

    fn may_warn(&self) -> bool {
        let now = self.epoch.elapsed().as_millis() as u64;
        let second = self.warn_second.load(Ordering::Relaxed);
        if now >= second + 1000
            && self
                .warn_second
                .compare_exchange(second, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.warned.store(0, Ordering::Relaxed);
        }
        self.warned.fetch_add(1, Ordering::Relaxed) < WARNINGS_PER_SECOND
    }
}

/// The connection-level and message-level checks of one node (see the module documentation).
#[derive(Debug)]
pub struct PeerGuard {
    self_id: u64,
    /// Every other member's peer IP: configured, or learned from the replicated member list
    /// (a member added at runtime, see [`PeerGuard::add_member`]).
    members: std::sync::RwLock<HashMap<u64, IpAddr>>,
}

impl PeerGuard {
    /// A guard for node `self_id` of a cluster whose members (this node included) are
    /// `(id, peer address)`.
    pub fn new(self_id: u64, members: &[(u64, SocketAddr)]) -> PeerGuard {
        PeerGuard {
            self_id,
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
        check_message(self.self_id, hello, group, msg)
    }
}

/// Step 1 of the module documentation as a pure function: what `msg`, received by node
/// `self_id` on a connection whose hello announced `hello`, for group `group`, must satisfy on
/// its own.
pub fn check_message(self_id: u64, hello: u64, group: u64, msg: &Message) -> Result<(), Refusal> {
    use MessageType::*;
    if msg.from != hello {
        return Err(Refusal::WrongSender {
            from: msg.from,
            hello,
        });
    }
    if msg.to != self_id {
        return Err(Refusal::WrongRecipient {
            to: msg.to,
            me: self_id,
        });
    }
    let kind = msg.get_msg_type();
    if matches!(
        kind,
        MsgHup | MsgBeat | MsgUnreachable | MsgSnapStatus | MsgCheckQuorum
    ) {
        return Err(Refusal::LocalOnly(kind));
    }
    // Forwarded proposals and read requests carry no term (raft-rs's `send` never sets one
    // on them, and panics forwarding one that has it); everything else carries one.
    let untermed = matches!(kind, MsgPropose | MsgReadIndex);
    if untermed != (msg.term == 0) || msg.term > MAX_PEER_TERM_OR_INDEX {
        return Err(Refusal::BadTerm {
            kind,
            term: msg.term,
        });
    }
    for (field, value) in [
        ("index", msg.index),
        ("log_term", msg.log_term),
        ("commit", msg.commit),
        ("commit_term", msg.commit_term),
        ("reject_hint", msg.reject_hint),
    ] {
        if value > MAX_PEER_TERM_OR_INDEX {
            return Err(Refusal::OutOfRange { field, value });
        }
    }
    if !untermed {
        // A node's log holds no entry of a term above its current term.
        for (field, value) in [("log_term", msg.log_term), ("commit_term", msg.commit_term)] {
            if value > msg.term {
                return Err(Refusal::OutOfRange { field, value });
            }
        }
    }
    if msg.request_snapshot != 0 {
        return Err(Refusal::OutOfRange {
            field: "request_snapshot",
            value: msg.request_snapshot,
        });
    }
    match kind {
        MsgAppend => check_append(msg)?,
        MsgPropose => check_proposal(msg)?,
        MsgReadIndex | MsgReadIndexResp => {
            if msg.entries.len() != 1 {
                return Err(Refusal::BadEntries(
                    "a read index message carries one entry",
                ));
            }
        }
        _ => {
            if !msg.entries.is_empty() {
                return Err(Refusal::BadEntries("this message type carries no entries"));
            }
        }
    }
    if kind == MsgSnapshot {
        let snap = msg.get_snapshot();
        let meta = snap.get_metadata();
        if meta.term == 0 || meta.term > msg.term {
            return Err(Refusal::BadSnapshot("term not in 1..=message term"));
        }
        if meta.index == 0 || meta.index > MAX_PEER_TERM_OR_INDEX {
            return Err(Refusal::BadSnapshot("index out of range"));
        }
        if group == crate::metadata::METADATA_GROUP_ID {
            // The metadata state (decoded and checked by the group before raft-rs takes it).
            if snap.data.is_empty()
                || snap.data.len() > crate::metadata::snapshot::MAX_SNAPSHOT_BYTES
            {
                return Err(Refusal::BadSnapshot("metadata state size out of range"));
            }
        } else if decode_snapshot_data(&snap.data).is_none() {
            return Err(Refusal::BadSnapshot("data is not a next offset"));
        }
    }
    Ok(())
}

fn check_append(msg: &Message) -> Result<(), Refusal> {
    if msg.index > 0 && msg.log_term == 0 {
        // Every entry has a term >= 1; raft-rs takes term 0 past its log as a match.
        return Err(Refusal::BadEntries("log_term 0 after index 0"));
    }
    let mut prev_term = msg.log_term;
    let mut expected = msg.index;
    for e in msg.entries.iter() {
        expected += 1;
        if e.index != expected {
            return Err(Refusal::BadEntries(
                "entry indexes are not consecutive after the message's index",
            ));
        }
        if e.term == 0 || e.term > msg.term {
            return Err(Refusal::BadEntries("entry term not in 1..=message term"));
        }
        if e.term < prev_term {
            return Err(Refusal::BadEntries("entry terms decrease"));
        }
        prev_term = e.term;
        if e.get_entry_type() == EntryType::EntryConfChange {
            // vdl changes membership with ConfChangeV2 only (see `crate::replication::membership`);
            // a leader's v2 change is applied through raft-rs, which refuses invalid ones.
            return Err(Refusal::BadEntries(
                "version 1 configuration change entries",
            ));
        }
    }
    Ok(())
}

fn check_proposal(msg: &Message) -> Result<(), Refusal> {
    if msg.entries.is_empty() {
        return Err(Refusal::BadEntries("a proposal without entries"));
    }
    for e in msg.entries.iter() {
        if e.get_entry_type() != EntryType::EntryNormal {
            return Err(Refusal::BadEntries("configuration change entries"));
        }
        // Only the metadata group forwards proposals, and only metadata ones; the context
        // names the proposer (see `Group::context`), which is the sender: a proposal claiming
        // to come from another node would be answered to that node's waiting client.
        let ctx = &e.context;
        let proposer_ok =
            ctx.len() == 17 && ctx[0] == CTX_META && ctx[1..9] == msg.from.to_be_bytes();
        if !proposer_ok {
            return Err(Refusal::BadEntries(
                "a proposal's context does not name its sender",
            ));
        }
        crate::replication::forwarded::authorize(msg.from, &e.data)?;
    }
    Ok(())
}

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

/// Step 2 of the module documentation: checks `msg` (already through [`check_message`])
/// against the group's Raft state just before it is stepped, and clamps a heartbeat's commit
/// to what this node's log holds. Run on the group's thread, between steps.
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
    if cs.voters_outgoing.is_empty() {
        if !cs.learners_next.is_empty() || cs.auto_leave {
            return false;
        }
        return incoming
            .iter()
            .all(|cc| apply(&mut tracker, std::slice::from_ref(cc)));
    }
    for id in &cs.voters_outgoing {
        if !apply(&mut tracker, &[single(*id, AddNode)]) {
            return false;
        }
    }
    match raft::Changer::new(&tracker).enter_joint(cs.auto_leave, &incoming) {
        Ok((cfg, map)) => {
            tracker.apply_conf(cfg, map, 1);
            true
        }
        Err(_) => false,
    }
}

#[cfg(test)]
#[path = "peer_guard_in_group_tests.rs"]
mod in_group_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use protobuf::ProtobufEnum;
    use raft::prelude::{Entry, Snapshot};
    use raft::storage::MemStorage;
    use raft::RawNode;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use crate::replication::raft_storage::encode_snapshot_data;

    pub(super) fn msg(kind: MessageType, from: u64, to: u64, term: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(kind);
        m.from = from;
        m.to = to;
        m.term = term;
        m
    }

    pub(super) fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: Bytes::from_static(b"x"),
            ..Default::default()
        }
    }

    pub(super) fn proposal_entry(from: u64) -> Entry {
        let mut ctx = vec![CTX_META];
        ctx.extend_from_slice(&from.to_be_bytes());
        ctx.extend_from_slice(&7u64.to_be_bytes());
        let data = crate::metadata::MetaEntry {
            request: crate::metadata::RequestId {
                node: from,
                boot: 1,
                seq: 1,
            },
            command: crate::metadata::MetaCommand::AllocateProducerId,
        }
        .encode();
        Entry {
            context: Bytes::from(ctx),
            data: Bytes::from(data),
            ..Default::default()
        }
    }

    pub(super) fn limits() -> GroupLimits {
        GroupLimits {
            forward_proposals: true,
            snapshots: true,
            max_entry_bytes: 1 << 20,
            batch_entries_left: 1000,
            batch_bytes_left: 8 << 20,
        }
    }

    /// Node 1 of a group of voters 1, 2, 3, term 1, nothing in its log.
    pub(super) fn node() -> RawNode<MemStorage> {
        let storage = MemStorage::new_with_conf_state((vec![1, 2, 3], vec![]));
        let cfg = raft::Config {
            id: 1,
            election_tick: 10,
            heartbeat_tick: 2,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        RawNode::new(&cfg, storage, &logger).expect("raft node")
    }

    #[test]
    fn check_message_admits_what_peers_send() {
        let mut append = msg(MessageType::MsgAppend, 2, 1, 3);
        append.index = 5;
        append.log_term = 2;
        append.commit = 5;
        append.entries = vec![entry(6, 2), entry(7, 3)].into();
        let mut propose = msg(MessageType::MsgPropose, 2, 1, 0);
        propose.entries = vec![proposal_entry(2)].into();
        let mut read = msg(MessageType::MsgReadIndex, 2, 1, 0);
        read.entries = vec![Entry::default()].into();
        let mut snap = msg(MessageType::MsgSnapshot, 2, 1, 3);
        let mut s = Snapshot {
            data: encode_snapshot_data(10),
            ..Default::default()
        };
        s.mut_metadata().index = 9;
        s.mut_metadata().term = 2;
        snap.set_snapshot(s);
        for m in [
            append,
            propose,
            read,
            snap,
            msg(MessageType::MsgHeartbeat, 2, 1, 3),
            msg(MessageType::MsgAppendResponse, 2, 1, 3),
            msg(MessageType::MsgRequestPreVote, 2, 1, 4),
            msg(MessageType::MsgRequestVoteResponse, 2, 1, 3),
            msg(MessageType::MsgTimeoutNow, 2, 1, 3),
        ] {
            assert_eq!(check_message(1, 2, 7, &m), Ok(()), "{m:?}");
        }
    }

    #[test]
    fn check_message_refuses_what_raft_rs_would_panic_on() {
        let refused = |m: &Message| check_message(1, 2, 7, m).expect_err("refused");
        // The reproduced crash: an empty proposal.
        assert!(matches!(
            refused(&msg(MessageType::MsgPropose, 2, 1, 0)),
            Refusal::BadEntries(_)
        ));
        assert!(matches!(
            refused(&msg(MessageType::MsgHeartbeat, 3, 1, 3)),
            Refusal::WrongSender { from: 3, hello: 2 }
        ));
        assert!(matches!(
            refused(&msg(MessageType::MsgHeartbeat, 2, 3, 3)),
            Refusal::WrongRecipient { to: 3, me: 1 }
        ));
        for kind in [
            MessageType::MsgHup,
            MessageType::MsgBeat,
            MessageType::MsgUnreachable,
            MessageType::MsgSnapStatus,
            MessageType::MsgCheckQuorum,
        ] {
            assert_eq!(refused(&msg(kind, 2, 1, 3)), Refusal::LocalOnly(kind));
        }
        // Terms: none on forwarded proposals, some everywhere else, never past the bound.
        let mut p = msg(MessageType::MsgPropose, 2, 1, 3);
        p.entries = vec![proposal_entry(2)].into();
        assert!(matches!(refused(&p), Refusal::BadTerm { .. }));
        assert!(matches!(
            refused(&msg(MessageType::MsgRequestVote, 2, 1, 0)),
            Refusal::BadTerm { .. }
        ));
        assert!(matches!(
            refused(&msg(MessageType::MsgRequestVote, 2, 1, u64::MAX)),
            Refusal::BadTerm { .. }
        ));
        let mut m = msg(MessageType::MsgAppendResponse, 2, 1, 3);
        m.index = u64::MAX;
        assert!(matches!(refused(&m), Refusal::OutOfRange { .. }));
        let mut m = msg(MessageType::MsgRequestVote, 2, 1, 3);
        m.log_term = 4;
        assert!(matches!(refused(&m), Refusal::OutOfRange { .. }));
        let mut m = msg(MessageType::MsgAppendResponse, 2, 1, 3);
        m.request_snapshot = 5;
        assert!(matches!(refused(&m), Refusal::OutOfRange { .. }));
        // Appends: indexes, terms, types.
        let append = |index: u64, log_term: u64, entries: Vec<Entry>| {
            let mut m = msg(MessageType::MsgAppend, 2, 1, 3);
            m.index = index;
            m.log_term = log_term;
            m.entries = entries.into();
            m
        };
        for m in [
            append(5, 2, vec![entry(1, 2), entry(2, 2)]),
            append(5, 2, vec![entry(6, 2), entry(8, 2)]),
            append(5, 2, vec![entry(6, 4)]),
            append(5, 2, vec![entry(6, 1)]),
            append(5, 2, vec![entry(6, 0)]),
            append(5, 0, vec![]),
            append(
                5,
                2,
                vec![{
                    let mut e = entry(6, 2);
                    e.set_entry_type(EntryType::EntryConfChange);
                    e
                }],
            ),
        ] {
            assert!(matches!(refused(&m), Refusal::BadEntries(_)), "{m:?}");
        }
        // Proposals must name their sender; read index messages carry one entry.
        let mut p = msg(MessageType::MsgPropose, 2, 1, 0);
        p.entries = vec![proposal_entry(3)].into();
        assert!(matches!(refused(&p), Refusal::BadEntries(_)));
        assert!(matches!(
            refused(&msg(MessageType::MsgReadIndex, 2, 1, 0)),
            Refusal::BadEntries(_)
        ));
        let mut m = msg(MessageType::MsgHeartbeat, 2, 1, 3);
        m.entries = vec![entry(1, 1)].into();
        assert!(matches!(refused(&m), Refusal::BadEntries(_)));
        // Snapshots: term 0 or garbage data.
        let mut m = msg(MessageType::MsgSnapshot, 2, 1, 3);
        m.mut_snapshot().mut_metadata().index = 9;
        m.mut_snapshot().data = encode_snapshot_data(1);
        assert!(matches!(refused(&m), Refusal::BadSnapshot(_)));
        m.mut_snapshot().mut_metadata().term = 2;
        m.mut_snapshot().data = Bytes::from_static(b"junk");
        assert!(matches!(refused(&m), Refusal::BadSnapshot(_)));
    }

    /// Persists and applies what `n` has ready, as the group thread does.
    fn handle_ready(n: &mut RawNode<MemStorage>) {
        if !n.has_ready() {
            return;
        }
        let mut rd = n.ready();
        let store = n.raft.raft_log.store.clone();
        if !rd.snapshot().is_empty() {
            let _ = store.wl().apply_snapshot(rd.snapshot().clone());
        }
        if !rd.entries().is_empty() {
            store.wl().append(rd.entries()).expect("append");
        }
        if let Some(hs) = rd.hs() {
            store.wl().set_hardstate(hs.clone());
        }
        let _ = rd.take_messages();
        let _ = rd.take_persisted_messages();
        let mut light = n.advance(rd);
        if let Some(commit) = light.commit_index() {
            store.wl().mut_hard_state().set_commit(commit);
        }
        let _ = light.take_messages();
        n.advance_apply();
    }

    fn near(rng: &mut StdRng, v: u64) -> u64 {
        match rng.gen_range(0..12) {
            0..=5 => v,
            6 | 7 => v.saturating_sub(rng.gen_range(1..3)),
            8 | 9 => v.saturating_add(rng.gen_range(1..3)),
            10 => rng.gen_range(0..4),
            _ => [u64::MAX, (1 << 62) + 1, 1 << 40, rng.gen()][rng.gen_range(0..4)],
        }
    }

    /// Random messages near a raft-rs node's state, through both checks, into `step`, with
    /// Readies handled in between: nothing may panic. `PEER_GUARD_CASES` sets the count.
    #[test]
    fn guarded_random_messages_never_panic_raft_rs() {
        let cases: u64 = std::env::var("PEER_GUARD_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000);
        let mut rng = StdRng::seed_from_u64(cases);
        let mut n = node();
        let l = limits();
        for i in 0..cases {
            let (term, last) = (n.raft.term, n.raft.raft_log.last_index());
            let mut m = msg(
                MessageType::from_i32(rng.gen_range(0..19)).expect("a type"),
                rng.gen_range(2..4),
                1,
                match rng.gen_range(0..8) {
                    0 => 0,
                    _ => near(&mut rng, term.max(1)),
                },
            );
            m.index = near(&mut rng, last);
            m.log_term = near(&mut rng, term).min(m.term);
            m.commit = near(&mut rng, last);
            m.commit_term = near(&mut rng, term).min(m.term);
            m.reject = rng.gen();
            m.reject_hint = near(&mut rng, last);
            let count = rng.gen_range(0..4);
            let mut entries = Vec::new();
            for k in 0..count {
                let mut e = if rng.gen_range(0..3) == 0 {
                    proposal_entry(m.from)
                } else {
                    entry(m.index.wrapping_add(k + 1), m.term.max(1))
                };
                if rng.gen_range(0..5) == 0 {
                    e.index = near(&mut rng, last);
                }
                entries.push(e);
            }
            m.entries = entries.into();
            if m.get_msg_type() == MessageType::MsgSnapshot {
                let meta = m.mut_snapshot().mut_metadata();
                meta.index = near(&mut rng, last);
                meta.term = near(&mut rng, term);
                let cs = meta.mut_conf_state();
                // Mostly the group's configuration, sometimes another (valid or not).
                match rng.gen_range(0..8) {
                    0 => cs.voters = vec![1, 2],
                    1 => {
                        cs.voters = vec![2, 4];
                        cs.learners = vec![1];
                    }
                    2 => {
                        cs.voters = vec![1, 2, 4];
                        cs.voters_outgoing = vec![1, 2, 3];
                        cs.auto_leave = rng.gen();
                    }
                    3 => {
                        cs.voters = vec![1, 2];
                        cs.learners = vec![2, 3];
                        cs.learners_next = vec![rng.gen_range(0..5)];
                    }
                    _ => cs.voters = vec![1, 2, 3],
                }
                m.mut_snapshot().data = encode_snapshot_data(0);
            }
            let hello = m.from;
            if check_message(1, hello, 7, &m).is_ok() && check_in_group(&n.raft, &l, &mut m).is_ok()
            {
                let _ = n.step(m);
            }
            if i % 3 == 0 {
                n.tick();
            }
            if i % 5 == 0 {
                handle_ready(&mut n);
            }
        }
    }
}
