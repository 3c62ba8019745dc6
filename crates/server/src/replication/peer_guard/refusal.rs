//! Why the peer port refused a connection or a message.

use std::net::IpAddr;

use raft::prelude::MessageType;
use thiserror::Error;

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
    /// A forwarded proposal the sender may not make (see
    /// [`super::ForwardingGroup::authorize`]).
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
