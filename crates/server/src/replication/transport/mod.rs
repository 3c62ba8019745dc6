//! Raft peer transport: TCP between nodes, one outgoing connection per peer carrying the
//! messages of every Raft group, batched, with bounded queues and reconnect with backoff.
//!
//! Wire format: see [`crate::replication::peer_wire`] (a hello, then length-prefixed frames;
//! version 3 is protobuf, versions 1 and 2 of earlier releases are still read, and a peer that
//! speaks one of them is dialed in its version).
//!
//! The dialer sends `hello` once, then frames; the acceptor never writes (each direction of a pair
//! has its own connection). The dialer connects from its own configured peer IP.
//!
//! What the acceptor admits (see [`crate::replication::peer_guard`] for the message checks):
//!
//! - **Connections**: only from an IP some other member is configured at; at most
//!   [`PeerLimits::max_pending`] ([`PEER_CONNECTIONS_PER_MEMBER`] x peers) still in their hello;
//!   others are closed at once.
//! - **Hello**: within [`HELLO_DEADLINE`]; magic, version 1 to 3 (at most
//!   [`peer_wire::MAX_HELLO_BYTES`] of protobuf in version 3), `from_node` a configured member
//!   other than this node whose configured peer IP is the connection's source IP, `advertised`
//!   at most 1024 bytes of `HOST:PORT`. Otherwise the connection is closed (logged at warn, at
//!   most 5 a second) and nothing it said is recorded. An admitted connection's advertised
//!   address counts while it is open (the newest open connection of a peer wins); at most
//!   [`PEER_CONNECTIONS_PER_MEMBER`] are open per peer, a newer one closing the oldest.
//! - **Frames**: at most [`MAX_FRAME_BYTES`]; once its length is read a frame must arrive
//!   whole within [`FRAME_DEADLINE`], and its buffer grows with the bytes that arrived (not
//!   with the length claimed). A longer frame, a late one, a message running past its frame,
//!   more than [`peer_wire::MAX_MESSAGES_PER_FRAME_RECEIVED`] messages or an undecodable
//!   protobuf closes the connection; Raft retransmits.
//! - **Messages**: each one is checked ([`PeerGuard::check_message`]: sender is the hello's
//!   node, recipient is this node, type and fields fit) before it is queued for its group,
//!   which checks it again against its Raft state (`peer_guard::check_in_group`) before
//!   stepping it. A refused message is dropped and counted ([`PeerStats`]); the connection
//!   stays.
//!
//! **Mutual TLS** (`[peer_tls]`, [`PeerTls`], see [`crate::security::peer_tls`]): when
//! configured, every connection is TLS (1.2 or 1.3, rustls with ring) in both directions. The
//! acceptor requires a client certificate that chains to the peer CA, is not revoked and names
//! a node (`vdl-node://<id>`); the hello must claim that node (besides coming from its IP).
//! The dialer checks the acceptor's certificate for the peer's IP and that it names the node
//! it dialed. The handshake must complete within the hello deadline; a connection without a
//! valid certificate naming a node is closed (counted as a refused connection) before any
//! byte of hello or Raft message is read, one whose hello claims another node right after the
//! hello. A reload of the peer TLS files closes the connections opened before it, incoming
//! ([`PeerFrameError::TlsReloaded`]) and outgoing (redialed), so they handshake again under the
//! new files.
//!
//! Sending never blocks the caller: messages go into a bounded per-peer queue and are dropped
//! when it is full (Raft tolerates loss). When a connection fails or the peer closes it, every
//! group is told the peer is unreachable so raft-rs stops pipelining to it and probes instead.
//!
//! This file holds what both sides share: the [`PeerInbox`] that receives, the [`LinkFilter`]
//! that may hold messages back, [`PeerFrameError`] and the limits. Each submodule does one job:
//! - `sender`: the [`PeerSender`] handle Raft groups send through, one queue per peer, and
//!   starting the senders ([`start_senders`], [`detached_sender`]);
//! - `sender_task`: one peer's sender task: queued messages batched into frames, written, and
//!   the connection redialed with backoff when it fails or the peer closes it;
//! - `dial`: opening an outgoing connection: TCP from this node's peer IP, TLS with the
//!   peer's certificate checked, this node's hello;
//! - `accept`: the listener ([`serve_peers`]) and each accepted connection: TLS, hello
//!   admission, frames read within their deadlines and their messages checked and delivered;
//! - `hello`: a hello of any version read off an accepted connection;
//! - `connection_slots`: how many connections the listener holds, in their hello and per member.
//!
//! [`peer_wire::MAX_HELLO_BYTES`]: crate::replication::peer_wire::MAX_HELLO_BYTES
//! [`peer_wire::MAX_MESSAGES_PER_FRAME_RECEIVED`]:
//!     crate::replication::peer_wire::MAX_MESSAGES_PER_FRAME_RECEIVED
//! [`PeerGuard::check_message`]: crate::replication::peer_guard::PeerGuard::check_message
//! [`PeerStats`]: crate::replication::peer_guard::PeerStats

use raft::prelude::Message;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::replication::peer_guard::Refusal;
use crate::replication::peer_wire::WireError;

mod accept;
mod connection_slots;
mod dial;
mod hello;
mod sender;
mod sender_task;
#[cfg(test)]
mod test_fixtures;

pub use accept::{
    serve_peers, serve_peers_with, PeerLimits, FRAME_DEADLINE, HELLO_DEADLINE,
    PEER_CONNECTIONS_PER_MEMBER,
};
pub use sender::{detached_sender, start_senders, PeerSender};

/// A byte stream between two nodes: TCP, or TLS over TCP.
pub trait PeerStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> PeerStream for T {}

pub use crate::security::peer_tls::PeerTls;

/// Largest frame accepted from a peer (a batch of append messages).
pub const MAX_FRAME_BYTES: usize = 64 << 20;
/// Messages queued for one peer before new ones are dropped.
pub const PEER_QUEUE_MESSAGES: usize = 8192;

/// Why bytes from a peer were rejected.
#[derive(Debug, Error)]
pub enum PeerFrameError {
    /// The connection does not start with a valid hello.
    #[error("bad hello: {0}")]
    BadHello(&'static str),
    /// The hello is of a peer protocol version this node does not speak.
    #[error("{0}")]
    UnsupportedVersion(WireError),
    /// The hello did not arrive whole within [`PeerLimits::hello_deadline`].
    #[error("no hello within the deadline")]
    HelloTimeout,
    /// The TLS handshake failed (no certificate, one not from the cluster CA, not TLS).
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    /// The hello was refused (see [`Refusal`]).
    #[error("hello refused: {0}")]
    Refused(Refusal),
    /// A frame did not arrive whole within [`PeerLimits::frame_deadline`] of its length.
    #[error("frame not complete within the deadline")]
    FrameTimeout,
    /// A newer connection of the same member replaced this one.
    #[error("replaced by a newer connection of the same peer")]
    Replaced,
    /// The peer TLS files were reloaded: connections opened before are closed, the peer
    /// reconnects under the new ones.
    #[error("closed: the peer TLS certificates were reloaded")]
    TlsReloaded,
    /// A frame claims more than [`MAX_FRAME_BYTES`].
    #[error("frame of {0} bytes exceeds the limit")]
    FrameTooLarge(usize),
    /// A frame's contents did not decode (truncated, too many messages, bad protobuf).
    #[error("bad frame: {0}")]
    Frame(WireError),
    /// Socket error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Where incoming peer messages and link events go. Implemented by the node's group registry.
pub trait PeerInbox: Send + Sync + 'static {
    /// A Raft message for `group` arrived from `from`.
    fn deliver(&self, group: u64, msg: Message);
    /// Sending to `peer` failed; every group should `report_unreachable(peer)`.
    fn peer_unreachable(&self, peer: u64);
    /// An admitted connection (`connection`, unique on this node) of `peer` announced its
    /// advertised Kafka address, its Kafka listeners `(name, HOST:PORT)` (empty from older
    /// releases) and what it says about data directories.
    fn peer_hello(
        &self,
        peer: u64,
        connection: u64,
        advertised: String,
        listeners: Vec<(String, String)>,
        dirs: crate::replication::replicas::HelloDirs,
    ) {
        let _ = (peer, connection, advertised, listeners, dirs);
    }
    /// What this node's hello to `peer` says about directories.
    fn hello_for(&self, peer: u64) -> crate::replication::replicas::HelloDirs {
        let _ = peer;
        crate::replication::replicas::HelloDirs::default()
    }
    /// A connection announced by `peer_hello` ended.
    fn peer_gone(&self, peer: u64, connection: u64) {
        let _ = (peer, connection);
    }
}

/// Filters messages on a link; tests use it to cut or delay links between nodes.
pub trait LinkFilter: Send + Sync + 'static {
    /// Whether a message from this node to `peer` may be sent now.
    fn allow(&self, peer: u64) -> bool;
    /// Whether this message to `peer` may be sent now (by default: whether the link is open).
    fn allow_message(&self, peer: u64, msg: &Message) -> bool {
        let _ = msg;
        self.allow(peer)
    }
}

/// Lets everything through.
pub struct OpenLinks;

impl LinkFilter for OpenLinks {
    fn allow(&self, _peer: u64) -> bool {
        true
    }
}
