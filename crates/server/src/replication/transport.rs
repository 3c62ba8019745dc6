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

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use raft::prelude::Message;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::replication::direct_send::{Direct, DirectConn};
use crate::replication::peer_guard::{PeerGuard, PeerStats, Refusal};
use crate::replication::peer_wire::{
    self, FrameFormat, FrameWriter, Hello, PeerVersions, WireError,
};
use crate::runtime::timeline::{self, Stage as Hop};

/// A byte stream between two nodes: TCP, or TLS over TCP.
pub trait PeerStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> PeerStream for T {}

pub use crate::security::peer_tls::PeerTls;

/// Largest frame accepted from a peer (a batch of append messages).
pub const MAX_FRAME_BYTES: usize = 64 << 20;
/// Messages queued for one peer before new ones are dropped.
pub const PEER_QUEUE_MESSAGES: usize = 8192;
/// Most messages put into one frame.
const MAX_MESSAGES_PER_FRAME: usize = 512;
/// Bytes after which a frame is flushed even if more messages are waiting.
const FRAME_FLUSH_BYTES: usize = 4 << 20;
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(1000);

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

/// Each peer's outgoing queue of (group, message).
/// A peer's queue for its sender task, and the link's direct path (none for detached senders).
struct PeerQueue {
    tx: mpsc::Sender<(u64, Message)>,
    direct: Option<Arc<Direct>>,
}

type PeerQueues = HashMap<u64, PeerQueue>;

/// The sending half of the transport: one queue per peer.
#[derive(Clone)]
pub struct PeerSender {
    queues: Arc<std::sync::RwLock<PeerQueues>>,
    /// What a sender task for a peer added at runtime needs (None: a detached sender).
    spawn: Option<Arc<SenderContext>>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
    /// Bumped to make every sender reconnect (and so send a new hello).
    hello_generation: Arc<std::sync::atomic::AtomicU64>,
    /// The node's limit on catch-up replication (see [`crate::flow::replication`]).
    catch_up: Arc<crate::flow::replication::ReplicationLimiter>,
}

impl PeerSender {
    /// Sends `msg` of `group` to its destination (`msg.to`): written to the peer's socket at
    /// once when the link is idle (see [`crate::replication::direct_send`]), else queued for
    /// the peer's sender task. Never blocks; drops the message when the queue is full or the
    /// peer is unknown, and counts the drop.
    pub fn send(&self, group: u64, msg: Message) {
        // Catch-up appends over the node's limit wait for Raft to send them again.
        if !self.catch_up.admit(&msg) {
            return;
        }
        let queues = self.queues.read().unwrap_or_else(|e| e.into_inner());
        match queues.get(&msg.to) {
            Some(q) => {
                let msg = match &q.direct {
                    Some(direct) => match direct.try_send(group, msg) {
                        None => return,
                        Some(msg) => {
                            direct.note_queued();
                            msg
                        }
                    },
                    None => msg,
                };
                if q.tx.try_send((group, msg)).is_err() {
                    if let Some(direct) = &q.direct {
                        direct.note_taken(1);
                    }
                    self.dropped
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            None => {
                self.dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// The node's limit on catch-up replication.
    pub fn catch_up_limiter(&self) -> &crate::flow::replication::ReplicationLimiter {
        &self.catch_up
    }

    /// Makes every sender reconnect with a fresh hello (after what it says changed), at its
    /// next message.
    pub fn redial_all(&self) {
        self.hello_generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Starts sending to a member added at runtime (see [`crate::replication::membership`]),
    /// dialing `addr`; a peer known already keeps its sender. Callable from any thread.
    pub fn add_peer(&self, peer: u64, addr: SocketAddr) {
        let Some(ctx) = self.spawn.as_ref() else {
            return;
        };
        if peer == ctx.self_id {
            return;
        }
        let mut queues = self.queues.write().unwrap_or_else(|e| e.into_inner());
        if queues.contains_key(&peer) {
            return;
        }
        let (tx, rx) = mpsc::channel(PEER_QUEUE_MESSAGES);
        let direct = ctx.spawn(peer, addr, rx, self.hello_generation.clone());
        queues.insert(
            peer,
            PeerQueue {
                tx,
                direct: Some(direct),
            },
        );
    }

    /// Messages dropped so far (full queue or unknown peer).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
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

/// A sender whose per-peer queues are handed back instead of being drained by sender tasks
/// (no sockets, no tokio runtime needed): for simulators and tests that carry the messages
/// themselves. Each queue holds at most [`PEER_QUEUE_MESSAGES`] messages, as a real one.
pub fn detached_sender(
    self_id: u64,
    peers: &[u64],
) -> (PeerSender, HashMap<u64, mpsc::Receiver<(u64, Message)>>) {
    let mut queues = HashMap::new();
    let mut receivers = HashMap::new();
    for &peer in peers.iter().filter(|p| **p != self_id) {
        let (tx, rx) = mpsc::channel(PEER_QUEUE_MESSAGES);
        queues.insert(peer, PeerQueue { tx, direct: None });
        receivers.insert(peer, rx);
    }
    let sender = PeerSender {
        queues: Arc::new(std::sync::RwLock::new(queues)),
        spawn: None,
        dropped: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        hello_generation: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        catch_up: Arc::default(),
    };
    (sender, receivers)
}

/// Starts one sender task per peer (dialing `addr`, reconnecting with backoff) and returns the
/// handle used by Raft groups to send. Each peer is dialed in the hello version `versions`
/// says it speaks (the listener records it). Must be called inside a tokio runtime.
#[allow(clippy::too_many_arguments)]
pub fn start_senders(
    self_id: u64,
    advertised: String,
    listeners: Vec<(String, String)>,
    peers: &[(u64, SocketAddr)],
    inbox: Arc<dyn PeerInbox>,
    filter: Arc<dyn LinkFilter>,
    versions: Arc<PeerVersions>,
    tls: Option<Arc<PeerTls>>,
) -> PeerSender {
    // Dial from this node's own configured peer IP, so peers see the source address they
    // admit (see `PeerGuard::admit_hello`) even on a host with several addresses.
    let local_ip = peers
        .iter()
        .find(|(id, _)| *id == self_id)
        .map(|(_, addr)| addr.ip())
        .filter(|ip| !ip.is_unspecified());
    let mut queues = HashMap::new();
    let hello_generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ctx = Arc::new(SenderContext {
        self_id,
        local_ip,
        advertised,
        listeners,
        tls,
        inbox,
        filter,
        versions,
        runtime: tokio::runtime::Handle::current(),
    });
    for &(peer, addr) in peers {
        if peer == self_id {
            continue;
        }
        let (tx, rx) = mpsc::channel(PEER_QUEUE_MESSAGES);
        let direct = ctx.spawn(peer, addr, rx, hello_generation.clone());
        queues.insert(
            peer,
            PeerQueue {
                tx,
                direct: Some(direct),
            },
        );
    }
    PeerSender {
        queues: Arc::new(std::sync::RwLock::new(queues)),
        spawn: Some(ctx),
        dropped: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        hello_generation,
        catch_up: Arc::default(),
    }
}

/// What every sender task of a node shares: who this node is and what it announces.
struct SenderContext {
    self_id: u64,
    local_ip: Option<IpAddr>,
    advertised: String,
    /// This node's Kafka listeners (name, advertised address), announced in hellos.
    listeners: Vec<(String, String)>,
    /// Mutual TLS between nodes, when configured.
    tls: Option<Arc<PeerTls>>,
    inbox: Arc<dyn PeerInbox>,
    filter: Arc<dyn LinkFilter>,
    versions: Arc<PeerVersions>,
    /// The runtime the senders run on (peers are added from the group workers' threads).
    runtime: tokio::runtime::Handle,
}

impl SenderContext {
    /// Starts the sender task of `peer` at `addr`, draining `rx`; returns the link's direct
    /// path.
    fn spawn(
        &self,
        peer: u64,
        addr: SocketAddr,
        rx: mpsc::Receiver<(u64, Message)>,
        hello_generation: Arc<std::sync::atomic::AtomicU64>,
    ) -> Arc<Direct> {
        let direct = Arc::new(Direct::new(
            peer,
            self.filter.clone(),
            self.versions.clone(),
            hello_generation.clone(),
        ));
        let link = Link {
            self_id: self.self_id,
            local_ip: self.local_ip,
            advertised: self.advertised.clone(),
            listeners: self.listeners.clone(),
            peer,
            addr,
            versions: self.versions.clone(),
            tls: self.tls.clone(),
        };
        self.runtime.spawn(sender_task(
            link,
            rx,
            self.inbox.clone(),
            self.filter.clone(),
            hello_generation,
            direct.clone(),
        ));
        direct
    }
}

/// Where and how a sender task dials its peer.
struct Link {
    self_id: u64,
    local_ip: Option<IpAddr>,
    advertised: String,
    listeners: Vec<(String, String)>,
    peer: u64,
    addr: SocketAddr,
    versions: Arc<PeerVersions>,
    tls: Option<Arc<PeerTls>>,
}

/// An open outgoing connection and the hello version it was opened with (which fixes its frame
/// format).
struct Outgoing {
    stream: OutStream,
    version: u16,
}

/// The byte stream of an outgoing connection.
enum OutStream {
    /// Plain TCP, split so direct writes (see [`crate::replication::direct_send`]) can share the
    /// write half; the task reads the other half only to notice the peer closing.
    Plain {
        read: tokio::net::tcp::OwnedReadHalf,
        write: Arc<tokio::net::tcp::OwnedWriteHalf>,
    },
    /// TLS: written by the task only.
    Tls(Box<dyn PeerStream>),
}

impl Outgoing {
    /// What direct writes may use: a plain connection's write half, its version and the
    /// hello generation it was dialed in.
    fn direct_half(&self, generation: u64) -> Option<DirectConn> {
        match &self.stream {
            OutStream::Plain { write, .. } => Some(DirectConn {
                write: write.clone(),
                version: self.version,
                generation,
            }),
            OutStream::Tls(_) => None,
        }
    }
}

impl Link {
    /// Dials the peer and sends this node's hello in the version the peer speaks.
    async fn dial(&self, inbox: &dyn PeerInbox) -> std::io::Result<Outgoing> {
        let version = self.versions.dial_version(self.peer);
        let hello = peer_wire::encode_hello_with_listeners(
            version,
            self.self_id,
            &self.advertised,
            &self.listeners,
            inbox.hello_for(self.peer),
        );
        let mut tcp = dial(self.local_ip, self.addr).await?;
        let mut stream: Box<dyn PeerStream> = match &self.tls {
            None => {
                tcp.write_all(&hello).await?;
                tcp.flush().await?;
                let (read, write) = tcp.into_split();
                return Ok(Outgoing {
                    stream: OutStream::Plain {
                        read,
                        write: Arc::new(write),
                    },
                    version,
                });
            }
            Some(tls) => {
                let name = rustls::pki_types::ServerName::IpAddress(self.addr.ip().into());
                let handshake = tls.connector().connect(name, tcp);
                let stream = tokio::time::timeout(HELLO_DEADLINE, handshake)
                    .await
                    .map_err(|_| {
                        std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")
                    })?
                    .inspect_err(|e| {
                        // A certificate refused (unknown CA, revoked, wrong IP); at most once a
                        // second per peer (the dial backoff).
                        tracing::warn!(peer = self.peer, addr = %self.addr, "peer TLS handshake failed: {e}");
                    })?;
                // The certificate must name the node dialed, not just any member.
                let named = crate::security::peer_tls::connection_node_id(stream.get_ref().1);
                if named != Ok(self.peer) {
                    let why = match named {
                        Ok(other) => format!("it names node {other}"),
                        Err(e) => e.to_string(),
                    };
                    let message = format!(
                        "the peer certificate at {} does not name node {}: {why}",
                        self.addr, self.peer
                    );
                    tracing::warn!("peer connection not used: {message}");
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        message,
                    ));
                }
                Box::new(stream)
            }
        };
        stream.write_all(&hello).await?;
        stream.flush().await?;
        Ok(Outgoing {
            stream: OutStream::Tls(stream),
            version,
        })
    }
}

async fn sender_task(
    link: Link,
    mut rx: mpsc::Receiver<(u64, Message)>,
    inbox: Arc<dyn PeerInbox>,
    filter: Arc<dyn LinkFilter>,
    hello_generation: Arc<std::sync::atomic::AtomicU64>,
    direct: Arc<Direct>,
) {
    let peer = link.peer;
    let mut backoff = BACKOFF_MIN;
    let mut conn: Option<Outgoing> = None;
    let mut frame = FrameWriter::new(FrameFormat::of_version(peer_wire::CURRENT_VERSION));
    let mut generation = hello_generation.load(std::sync::atomic::Ordering::SeqCst);
    let mut tls_generation = link.tls.as_ref().map_or(0, |t| t.generation());
    loop {
        let now = hello_generation.load(std::sync::atomic::Ordering::SeqCst);
        if now != generation {
            generation = now;
            set_conn(&direct, &mut conn, None, generation);
        }
        // The peer TLS files were reloaded: dial again under the new ones (a revoked peer
        // certificate must not keep a connection opened before).
        let tls_now = link.tls.as_ref().map_or(0, |t| t.generation());
        if tls_now != tls_generation {
            tls_generation = tls_now;
            set_conn(&direct, &mut conn, None, generation);
        }
        // The peer was heard in another version since this connection was dialed (an old node
        // spoke up, or was upgraded): dial again in its version.
        if conn
            .as_ref()
            .is_some_and(|c| c.version != link.versions.dial_version(peer))
        {
            set_conn(&direct, &mut conn, None, generation);
        }
        // Wait for a message, and meanwhile notice when the peer closes the connection (it
        // never writes, so any read event is its end): a restarted peer must not have our
        // next messages written into the dead socket and lost.
        let first = tokio::select! {
            m = rx.recv() => match m {
                Some(m) => m,
                None => return,
            },
            () = closed(&mut conn) => {
                set_conn(&direct, &mut conn, None, generation);
                // What was written last may never have been read: Raft must probe this
                // peer again rather than assume its pipeline of appends arrived.
                inbox.peer_unreachable(peer);
                continue;
            }
            // A direct write left the rest of a frame for this task, or failed.
            () = direct.woken(), if conn.is_some() => {
                let ok = match conn.as_mut() {
                    Some(c) => !direct.failed() && write_frame(&direct, c, &[]).await,
                    None => true,
                };
                if !ok {
                    set_conn(&direct, &mut conn, None, generation);
                    inbox.peer_unreachable(peer);
                }
                continue;
            }
            // Keep a connection up even when Raft has nothing to send to this peer, so the peer
            // always knows this node is alive and where its Kafka listener is.
            () = tokio::time::sleep(backoff), if conn.is_none() => {
                match link.dial(&*inbox).await {
                    Ok(c) => {
                        backoff = BACKOFF_MIN;
                        set_conn(&direct, &mut conn, Some(c), generation);
                    }
                    Err(_) => backoff = (backoff * 2).min(BACKOFF_MAX),
                }
                continue;
            }
        };
        // Gather what is already queued into one frame, in the current connection's format
        // (or the one the next dial will use).
        let version = conn
            .as_ref()
            .map_or_else(|| link.versions.dial_version(peer), |c| c.version);
        frame.clear(FrameFormat::of_version(version));
        let mut taken = 0;
        let mut next = Some(first);
        while let Some((group, msg)) = next.take() {
            taken += 1;
            if filter.allow_message(peer, &msg) {
                frame.push(group, &msg);
            }
            if frame.messages() >= MAX_MESSAGES_PER_FRAME || frame.len() >= FRAME_FLUSH_BYTES {
                break;
            }
            next = rx.try_recv().ok();
        }
        if frame.is_empty() {
            direct.note_taken(taken);
            continue;
        }

        // Write on the current connection; on failure, dial once more and retry the frame.
        let mut sent = false;
        for _attempt in 0..2 {
            if conn.as_ref().is_some() && direct.failed() {
                set_conn(&direct, &mut conn, None, generation);
            }
            if conn.is_none() {
                match link.dial(&*inbox).await {
                    Ok(c) => {
                        backoff = BACKOFF_MIN;
                        set_conn(&direct, &mut conn, Some(c), generation);
                    }
                    Err(_) => break,
                }
            }
            if let Some(c) = conn.as_mut() {
                // A new connection may speak another version than the one the frame was
                // built for.
                frame.convert(FrameFormat::of_version(c.version));
                if write_frame(&direct, c, frame.finish()).await {
                    timeline::stamp(Hop::PeerFrameWritten, peer);
                    sent = true;
                    break;
                }
                set_conn(&direct, &mut conn, None, generation);
            }
        }
        direct.note_taken(taken);
        if !sent {
            inbox.peer_unreachable(peer);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            // Drop what piled up while waiting: it is stale, Raft will resend.
            while rx.try_recv().is_ok() {
                direct.note_taken(1);
            }
        }
    }
}

/// Resolves when the peer closed `conn` (or sent bytes, which it must not); never resolves when
/// there is no connection.
async fn closed(conn: &mut Option<Outgoing>) {
    let mut buf = [0u8; 64];
    match conn.as_mut().map(|c| &mut c.stream) {
        Some(OutStream::Plain { read, .. }) => {
            let _ = read.read(&mut buf).await;
        }
        Some(OutStream::Tls(stream)) => {
            let _ = stream.read(&mut buf).await;
        }
        None => std::future::pending().await,
    }
}

/// Replaces the sender task's connection (dialed in hello `generation`), keeping the link's
/// direct path in step with it.
fn set_conn(direct: &Direct, conn: &mut Option<Outgoing>, new: Option<Outgoing>, generation: u64) {
    direct.set_connection(new.as_ref().and_then(|c| c.direct_half(generation)));
    *conn = new;
}

/// Writes a whole frame on `c` (plain connections through the direct path's lock).
async fn write_frame(direct: &Direct, c: &mut Outgoing, bytes: &[u8]) -> bool {
    match &mut c.stream {
        OutStream::Plain { write, .. } => direct.write_plain(write, bytes).await.is_ok(),
        OutStream::Tls(stream) => {
            stream.write_all(bytes).await.is_ok() && stream.flush().await.is_ok()
        }
    }
}

/// Connects to `addr` from `local_ip` (when it is of the same family).
async fn dial(local_ip: Option<IpAddr>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let connect = async {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(ip) = local_ip.filter(|ip| ip.is_ipv4() == addr.is_ipv4()) {
            if let Err(e) = socket.bind(SocketAddr::new(ip, 0)) {
                tracing::debug!(%ip, "cannot dial from this node's peer address: {e}");
            }
        }
        socket.connect(addr).await
    };
    let s = tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Limits of the peer listener (see [`PeerLimits::for_peers`] for the defaults).
#[derive(Debug, Clone, Copy)]
pub struct PeerLimits {
    /// Connections that have not yet completed their hello, at most.
    pub max_pending: usize,
    /// Admitted connections per member, at most; a newer one closes the oldest (a peer that
    /// restarted or lost its side of a connection reconnects at once).
    pub per_member: usize,
    /// Time a new connection has to send its whole hello.
    pub hello_deadline: Duration,
    /// Time a frame has to arrive whole once its length has been read.
    pub frame_deadline: Duration,
}

/// Connections accepted per member: [`PeerLimits::per_member`] admitted ones, and as many
/// again per member still in their hello.
pub const PEER_CONNECTIONS_PER_MEMBER: usize = 4;
/// Default [`PeerLimits::hello_deadline`].
pub const HELLO_DEADLINE: Duration = Duration::from_secs(5);
/// Default [`PeerLimits::frame_deadline`]: a [`MAX_FRAME_BYTES`] frame at about 2 MB/s.
pub const FRAME_DEADLINE: Duration = Duration::from_secs(30);
/// First allocation for a frame body; it doubles as bytes arrive (see `read_body`).
const FRAME_READ_CHUNK: usize = 256 << 10;

impl PeerLimits {
    /// The defaults for a cluster with `peers` other members: [`PEER_CONNECTIONS_PER_MEMBER`]
    /// per member admitted, as many again in their hello, [`HELLO_DEADLINE`],
    /// [`FRAME_DEADLINE`].
    pub fn for_peers(peers: usize) -> PeerLimits {
        PeerLimits {
            max_pending: PEER_CONNECTIONS_PER_MEMBER * peers.max(1),
            per_member: PEER_CONNECTIONS_PER_MEMBER,
            hello_deadline: HELLO_DEADLINE,
            frame_deadline: FRAME_DEADLINE,
        }
    }
}

/// Accepts peer connections on `listener` and delivers their messages to `inbox` until the task
/// is dropped or aborted, which also closes every connection it accepted (so a stopped node's
/// peers see their connections fail and reconnect to its successor). Each connection is read by
/// its own task; a bad frame closes only that one. Connections, hellos and messages are
/// admitted by `guard` (refusals are counted in `stats`), within the default [`PeerLimits`].
/// Each admitted hello's version is recorded in `versions`, so the senders answer an older
/// peer in its version.
pub async fn serve_peers(
    listener: TcpListener,
    inbox: Arc<dyn PeerInbox>,
    guard: Arc<PeerGuard>,
    stats: Arc<PeerStats>,
    versions: Arc<PeerVersions>,
    tls: Option<Arc<PeerTls>>,
) {
    let limits = PeerLimits::for_peers(guard.peer_count());
    serve_peers_with(listener, inbox, guard, stats, versions, limits, tls).await
}

/// [`serve_peers`] with explicit limits.
pub async fn serve_peers_with(
    listener: TcpListener,
    inbox: Arc<dyn PeerInbox>,
    guard: Arc<PeerGuard>,
    stats: Arc<PeerStats>,
    versions: Arc<PeerVersions>,
    limits: PeerLimits,
    tls: Option<Arc<PeerTls>>,
) {
    let mut connections = tokio::task::JoinSet::new();
    let pending = Arc::new(AtomicUsize::new(0));
    let slots = Arc::new(MemberSlots::default());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((sock, source)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                if let Err(why) = guard.admit_source(source.ip()) {
                    stats.refuse_connection(source, &why);
                    continue;
                }
                let Some(hello_slot) = PendingSlot::take(&pending, limits.max_pending) else {
                    stats.refuse_connection(source, &Refusal::TooManyConnections);
                    continue;
                };
                let _ = sock.set_nodelay(true);
                let conn = Connection {
                    inbox: inbox.clone(),
                    guard: guard.clone(),
                    stats: stats.clone(),
                    slots: slots.clone(),
                    versions: versions.clone(),
                    limits,
                    source,
                    tls: tls.clone(),
                };
                connections.spawn(async move {
                    match conn.run(sock, hello_slot).await {
                        Ok(()) => {}
                        Err(e @ (PeerFrameError::BadHello(_)
                        | PeerFrameError::UnsupportedVersion(_)
                        | PeerFrameError::HelloTimeout
                        | PeerFrameError::Tls(_)
                        | PeerFrameError::Refused(_))) => conn.stats.refuse_connection(source, &e),
                        Err(e) => tracing::debug!(%source, "peer connection closed: {e}"),
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// A place among the connections still in their hello; given back on drop.
struct PendingSlot(Arc<AtomicUsize>);

impl PendingSlot {
    fn take(pending: &Arc<AtomicUsize>, max: usize) -> Option<PendingSlot> {
        pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| PendingSlot(pending.clone()))
    }
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A member's admitted connections, oldest first: (connection id, dropping it closes the
/// connection).
type OpenConnections = VecDeque<(u64, oneshot::Sender<()>)>;

/// Admitted connections per member.
#[derive(Default)]
struct MemberSlots {
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, OpenConnections>>,
}

/// An admitted connection's place in [`MemberSlots`]; given back on drop.
struct MemberSlot {
    slots: Arc<MemberSlots>,
    member: u64,
    id: u64,
}

impl MemberSlots {
    /// Registers a connection of `member`, closing its oldest ones beyond `max`; the receiver
    /// resolves when this connection is closed that way.
    fn take(self: &Arc<Self>, member: u64, max: usize) -> (MemberSlot, oneshot::Receiver<()>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let list = open.entry(member).or_default();
        list.push_back((id, tx));
        while list.len() > max.max(1) {
            // Dropping the sender resolves the oldest connection's receiver.
            list.pop_front();
        }
        let slot = MemberSlot {
            slots: self.clone(),
            member,
            id,
        };
        (slot, rx)
    }
}

impl Drop for MemberSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = open.get_mut(&self.member) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                open.remove(&self.member);
            }
        }
    }
}

/// One accepted connection and what it needs.
struct Connection {
    inbox: Arc<dyn PeerInbox>,
    guard: Arc<PeerGuard>,
    stats: Arc<PeerStats>,
    slots: Arc<MemberSlots>,
    versions: Arc<PeerVersions>,
    limits: PeerLimits,
    source: SocketAddr,
    tls: Option<Arc<PeerTls>>,
}

impl Connection {
    /// Reads the hello within its deadline, admits it, then delivers the frames' admitted
    /// messages until the connection ends, fails, or a newer connection of the same member
    /// replaces it.
    async fn run(&self, sock: TcpStream, hello_slot: PendingSlot) -> Result<(), PeerFrameError> {
        let opened_at = tokio::time::Instant::now();
        // Subscribed before the handshake: a reload after it closes this connection.
        let mut reloads = self.tls.as_ref().map(|t| t.subscribe());
        if let Some(r) = reloads.as_mut() {
            r.borrow_and_update();
        }
        // With mutual TLS, nothing is read before the peer proved it holds a certificate from
        // the cluster CA (rustls refuses the handshake otherwise).
        // The certificate must name a node (a Kafka client certificate names none), which the
        // hello must then claim.
        let (mut sock, certified): (Box<dyn PeerStream>, Option<u64>) = match &self.tls {
            None => (Box::new(sock), None),
            Some(tls) => {
                let handshake = tls.acceptor().accept(sock);
                let stream = tokio::time::timeout(self.limits.hello_deadline, handshake)
                    .await
                    .map_err(|_| PeerFrameError::HelloTimeout)?
                    .map_err(PeerFrameError::Tls)?;
                let id = crate::security::peer_tls::connection_node_id(stream.get_ref().1)
                    .map_err(|e| PeerFrameError::Refused(Refusal::UncertifiedPeer(e)))?;
                (Box::new(stream), Some(id))
            }
        };
        let left = self
            .limits
            .hello_deadline
            .saturating_sub(opened_at.elapsed());
        let hello = tokio::time::timeout(left, read_hello(&mut sock))
            .await
            .map_err(|_| PeerFrameError::HelloTimeout)??;
        let from = hello.from;
        self.guard
            .admit_certified_hello(from, self.source.ip(), certified)
            .map_err(PeerFrameError::Refused)?;
        drop(hello_slot);
        self.versions
            .heard(from, hello.version, &hello.software_version);
        self.versions
            .heard_metadata_snapshots(from, hello.installs_metadata_snapshots);
        let (slot, replaced) = self.slots.take(from, self.limits.per_member);
        self.inbox
            .peer_hello(from, slot.id, hello.advertised, hello.listeners, hello.dirs);
        let format = FrameFormat::of_version(hello.version);
        let result = tokio::select! {
            r = self.read_frames(&mut sock, from, format) => r,
            _ = replaced => Err(PeerFrameError::Replaced),
            () = tls_reloaded(&mut reloads) => Err(PeerFrameError::TlsReloaded),
        };
        self.inbox.peer_gone(from, slot.id);
        result
    }

    async fn read_frames(
        &self,
        sock: &mut Box<dyn PeerStream>,
        from: u64,
        format: FrameFormat,
    ) -> Result<(), PeerFrameError> {
        loop {
            let len = sock.read_u32().await? as usize;
            if len > MAX_FRAME_BYTES {
                return Err(PeerFrameError::FrameTooLarge(len));
            }
            let body = tokio::time::timeout(self.limits.frame_deadline, read_body(sock, len))
                .await
                .map_err(|_| PeerFrameError::FrameTimeout)??;
            let messages = peer_wire::decode_frame(format, body).map_err(PeerFrameError::Frame)?;
            for (group, msg) in messages {
                match self.guard.check_message(from, group, &msg) {
                    Ok(()) => self.inbox.deliver(group, msg),
                    Err(why) => self.stats.refuse_message(group, &why),
                }
            }
            timeline::stamp(Hop::PeerFrameDelivered, from);
        }
    }
}

/// Resolves when the peer TLS files are reloaded (never without TLS).
async fn tls_reloaded(reloads: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    if let Some(r) = reloads.as_mut() {
        if r.changed().await.is_ok() {
            return;
        }
    }
    // No TLS, or the configuration is gone (the node is stopping).
    std::future::pending().await
}

/// Reads a hello of any version this node speaks (see [`crate::replication::peer_wire`]), reading
/// no byte past it.
async fn read_hello(sock: &mut Box<dyn PeerStream>) -> Result<Hello, PeerFrameError> {
    let hello_error = |e| match e {
        WireError::BadHello(why) => PeerFrameError::BadHello(why),
        e @ WireError::UnsupportedVersion(_) => PeerFrameError::UnsupportedVersion(e),
        _ => PeerFrameError::BadHello("malformed"),
    };
    let mut start = [0u8; 6];
    sock.read_exact(&mut start).await?;
    let version = peer_wire::check_hello_start(&start).map_err(hello_error)?;
    if version >= peer_wire::VERSION_3 {
        let mut len = [0u8; 4];
        sock.read_exact(&mut len).await?;
        let len = peer_wire::parse_v3_length(len).map_err(hello_error)?;
        let mut body = vec![0u8; len];
        sock.read_exact(&mut body).await?;
        return peer_wire::decode_v3_hello(&body).map_err(hello_error);
    }
    let mut head = [0u8; peer_wire::LEGACY_HEAD_BYTES];
    sock.read_exact(&mut head).await?;
    let (from, adv_len) = peer_wire::parse_legacy_head(&head).map_err(hello_error)?;
    let mut adv = vec![0u8; adv_len];
    sock.read_exact(&mut adv).await?;
    let advertised =
        String::from_utf8(adv).map_err(|_| PeerFrameError::BadHello("address not UTF-8"))?;
    peer_wire::check_advertised(&advertised).map_err(hello_error)?;
    let mut dirs = crate::replication::replicas::HelloDirs::default();
    if version >= peer_wire::VERSION_2 {
        let mut tail = [0u8; peer_wire::LEGACY_V2_TAIL_BYTES];
        sock.read_exact(&mut tail).await?;
        dirs = peer_wire::parse_legacy_v2_tail(&tail);
    }
    Ok(Hello {
        version,
        from,
        advertised,
        dirs,
        software_version: String::new(),
        installs_metadata_snapshots: false,
        listeners: Vec::new(),
    })
}

/// Reads a frame body of `len` bytes. The buffer grows with the bytes that arrived (doubling,
/// from [`FRAME_READ_CHUNK`]) and never beyond `len`, so a length claim alone allocates little
/// and a frame never holds more than its own size.
async fn read_body(sock: &mut Box<dyn PeerStream>, len: usize) -> Result<Bytes, PeerFrameError> {
    let mut buf: Vec<u8> = Vec::with_capacity(len.min(FRAME_READ_CHUNK));
    while buf.len() < len {
        if buf.len() == buf.capacity() {
            let grow = buf.len().max(FRAME_READ_CHUNK).min(len - buf.len());
            buf.reserve_exact(grow);
        }
        let want = (len - buf.len()).min(buf.capacity() - buf.len());
        let n = (&mut *sock).take(want as u64).read_buf(&mut buf).await?;
        if n == 0 {
            return Err(PeerFrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::replicas::HelloDirs;
    use raft::prelude::{Entry, MessageType};
    use std::net::{IpAddr, Ipv4Addr};

    /// Records what the listener hands over.
    #[derive(Default)]
    struct Recorder {
        delivered: Mutex<Vec<(u64, Message)>>,
        hellos: Mutex<Vec<(u64, u64, String)>>,
        gone: Mutex<Vec<(u64, u64)>>,
    }

    impl PeerInbox for Recorder {
        fn deliver(&self, group: u64, msg: Message) {
            self.delivered.lock().unwrap().push((group, msg));
        }
        fn peer_unreachable(&self, _peer: u64) {}
        fn peer_hello(
            &self,
            peer: u64,
            connection: u64,
            advertised: String,
            _listeners: Vec<(String, String)>,
            _dirs: crate::replication::replicas::HelloDirs,
        ) {
            self.hellos
                .lock()
                .unwrap()
                .push((peer, connection, advertised));
        }
        fn peer_gone(&self, peer: u64, connection: u64) {
            self.gone.lock().unwrap().push((peer, connection));
        }
    }

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    /// A listener of node 1 whose peers 2 and 3 are at `peer_ip`, with short deadlines.
    async fn listen(
        peer_ip: IpAddr,
        limits: PeerLimits,
    ) -> (
        SocketAddr,
        Arc<Recorder>,
        Arc<PeerStats>,
        Arc<PeerVersions>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind((LOCAL, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let members = [
            (1, addr),
            (2, SocketAddr::new(peer_ip, 1)),
            (3, SocketAddr::new(peer_ip, 2)),
        ];
        let guard = Arc::new(PeerGuard::new(1, &members));
        let inbox = Arc::new(Recorder::default());
        let stats = Arc::new(PeerStats::default());
        let versions = Arc::new(PeerVersions::default());
        let task = tokio::spawn(serve_peers_with(
            listener,
            inbox.clone(),
            guard,
            stats.clone(),
            versions.clone(),
            limits,
            None,
        ));
        (addr, inbox, stats, versions, task)
    }

    fn short_limits() -> PeerLimits {
        PeerLimits {
            max_pending: 2,
            per_member: 1,
            hello_deadline: Duration::from_millis(300),
            frame_deadline: Duration::from_millis(300),
        }
    }

    /// A hello of `version`: directory id `from`, no known directory for the receiver, settled.
    fn hello_in(version: u16, from: u64, advertised: &str) -> Vec<u8> {
        let dirs = HelloDirs {
            dir: u128::from(from),
            sender_settled: true,
            ..HelloDirs::default()
        };
        peer_wire::encode_hello(version, from, advertised, dirs)
    }

    /// A hello of the current version.
    fn hello(from: u64, advertised: &str) -> Vec<u8> {
        hello_in(peer_wire::CURRENT_VERSION, from, advertised)
    }

    /// One frame (length prefix included) of `msgs` in `format`.
    fn frame_of(format: FrameFormat, msgs: &[(u64, &Message)]) -> Vec<u8> {
        let mut w = FrameWriter::new(format);
        for (group, m) in msgs {
            w.push(*group, m);
        }
        w.finish().to_vec()
    }

    /// Whether the listener closes `s` within `within`.
    async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 16];
        matches!(
            tokio::time::timeout(within, s.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    async fn wait_until(what: impl Fn() -> bool) {
        for _ in 0..200 {
            if what() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not reached within 2 s");
    }

    /// With mutual TLS the listener reads nothing from a connection that does not present a
    /// certificate of the cluster CA: a plain TCP hello and frame, a TLS client without a
    /// certificate and one with another CA's certificate are all refused and deliver no
    /// message; a sender with a node certificate gets its messages through.
    #[tokio::test]
    async fn mutual_tls_refuses_connections_without_a_cluster_certificate() {
        use crate::security::certs::{generate, CertSpec};
        use crate::security::config::{ClientAuth, TlsFiles};
        let spec = CertSpec {
            nodes: 2,
            hosts: vec!["127.0.0.1".into()],
            clients: vec![],
            expired_clients: vec![],
            valid_days: 10,
        };
        let dir = tempfile::tempdir().unwrap();
        generate(dir.path(), &spec).unwrap();
        let other = tempfile::tempdir().unwrap();
        generate(other.path(), &spec).unwrap();
        let files = |d: &std::path::Path, i: usize| TlsFiles {
            cert: d.join(format!("peer-node{i}.pem")),
            key: d.join(format!("peer-node{i}.key")),
            ca: Some(d.join("peer-ca.pem")),
            client_auth: ClientAuth::Required,
            crl: None,
        };
        let listener = TcpListener::bind((LOCAL, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let members = [(1, addr), (2, SocketAddr::new(LOCAL, 1))];
        let inbox = Arc::new(Recorder::default());
        let stats = Arc::new(PeerStats::default());
        let task = tokio::spawn(serve_peers_with(
            listener,
            inbox.clone(),
            Arc::new(PeerGuard::new(1, &members)),
            stats.clone(),
            Arc::new(PeerVersions::default()),
            short_limits(),
            Some(Arc::new(
                PeerTls::from_files(&files(dir.path(), 1), 1).unwrap(),
            )),
        ));
        let mut heartbeat = Message::default();
        heartbeat.set_msg_type(MessageType::MsgHeartbeat);
        heartbeat.from = 2;
        heartbeat.to = 1;
        heartbeat.term = 3;
        let bytes = [
            hello(2, "h:1"),
            frame_of(FrameFormat::Prost, &[(7, &heartbeat)]),
        ]
        .concat();
        // Plain TCP: the hello and frame are not TLS; closed, nothing read.
        let mut plain = TcpStream::connect(addr).await.unwrap();
        plain.write_all(&bytes).await.unwrap();
        // The server may answer a TLS alert before closing.
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(2), plain.read_to_end(&mut answer));
        assert!(read.await.is_ok(), "not closed");
        // TLS without a client certificate, and with another CA's node certificate.
        let no_cert = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates({
            let mut roots = rustls::RootCertStore::empty();
            for c in crate::security::tls::read_certs(&dir.path().join("peer-ca.pem")).unwrap() {
                roots.add(c).unwrap();
            }
            roots
        })
        .with_no_client_auth();
        let strangers = [
            tokio_rustls::TlsConnector::from(Arc::new(no_cert)),
            PeerTls::from_files(
                &TlsFiles {
                    ca: Some(dir.path().join("peer-ca.pem")),
                    ..files(other.path(), 2)
                },
                2,
            )
            .unwrap()
            .connector(),
        ];
        for connector in strangers {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let name = rustls::pki_types::ServerName::IpAddress(LOCAL.into());
            // The handshake may seem to succeed on the client side (TLS 1.3 sends the client
            // certificate last); the server then closes without reading application data.
            if let Ok(mut s) = connector.connect(name, tcp).await {
                let _ = s.write_all(&bytes).await;
                let _ = s.flush().await;
                let mut buf = [0u8; 16];
                let r = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await;
                assert!(matches!(r, Ok(Ok(0) | Err(_))), "{r:?}");
            }
        }
        wait_until(|| stats.refused_connections() == 3).await;
        assert!(inbox.delivered.lock().unwrap().is_empty());
        assert!(inbox.hellos.lock().unwrap().is_empty());
        // A member with a certificate of the cluster CA is heard.
        let sender = start_senders(
            2,
            "h:2".into(),
            Vec::new(),
            &members,
            Arc::new(Recorder::default()),
            Arc::new(OpenLinks),
            Arc::new(PeerVersions::default()),
            Some(Arc::new(
                PeerTls::from_files(&files(dir.path(), 2), 2).unwrap(),
            )),
        );
        sender.send(7, heartbeat.clone());
        wait_until(|| inbox.delivered.lock().unwrap().len() == 1).await;
        task.abort();
    }

    #[tokio::test]
    async fn deadlines_close_silent_and_stalled_connections() {
        let (addr, inbox, stats, _versions, task) = listen(LOCAL, short_limits()).await;
        // No hello at all.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        assert!(closed_within(&mut silent, Duration::from_secs(2)).await);
        assert_eq!(stats.refused_connections(), 1);
        // A frame that announces 1 MiB and sends 10 bytes.
        let mut stalled = TcpStream::connect(addr).await.unwrap();
        stalled.write_all(&hello(2, "h:1")).await.unwrap();
        stalled
            .write_all(&(1u32 << 20).to_be_bytes())
            .await
            .unwrap();
        stalled.write_all(&[0; 10]).await.unwrap();
        assert!(closed_within(&mut stalled, Duration::from_secs(2)).await);
        wait_until(|| inbox.gone.lock().unwrap().len() == 1).await;
        assert_eq!(inbox.hellos.lock().unwrap().len(), 1);
        task.abort();
    }

    #[tokio::test]
    async fn limits_refuse_excess_connections_and_replace_old_ones() {
        let limits = PeerLimits {
            hello_deadline: Duration::from_secs(5),
            ..short_limits()
        };
        let (addr, inbox, stats, _versions, task) = listen(LOCAL, limits).await;
        // Two may wait for their hello; the third is closed at once.
        let mut a = TcpStream::connect(addr).await.unwrap();
        let mut b = TcpStream::connect(addr).await.unwrap();
        let mut c = TcpStream::connect(addr).await.unwrap();
        assert!(closed_within(&mut c, Duration::from_secs(2)).await);
        assert_eq!(stats.refused_connections(), 1);
        // One admitted connection per member: a newer one replaces the older.
        a.write_all(&hello(2, "old:1")).await.unwrap();
        wait_until(|| inbox.hellos.lock().unwrap().len() == 1).await;
        b.write_all(&hello(2, "new:1")).await.unwrap();
        assert!(closed_within(&mut a, Duration::from_secs(2)).await);
        assert!(!closed_within(&mut b, Duration::from_millis(100)).await);
        let hellos = inbox.hellos.lock().unwrap().clone();
        let gone = inbox.gone.lock().unwrap().clone();
        assert_eq!(hellos.len(), 2);
        assert_eq!(gone, vec![(2, hellos[0].1)]);
        task.abort();
    }

    #[tokio::test]
    async fn foreign_and_forged_hellos_are_closed_unrecorded() {
        // Peers configured at 127.0.0.2: a connection from 127.0.0.1 is no peer's.
        let (addr, inbox, stats, _versions, task) =
            listen(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), short_limits()).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        // Closed at accept: the write may already fail.
        let _ = s.write_all(&hello(2, "h:1")).await;
        assert!(closed_within(&mut s, Duration::from_secs(2)).await);
        task.abort();
        assert_eq!(stats.refused_connections(), 1);
        // Peers at 127.0.0.1: this node's own id, an unknown id, a bad address, a bad magic.
        let (addr, inbox2, stats, _versions, task) = listen(LOCAL, short_limits()).await;
        for bytes in [
            hello(1, "h:1"),
            hello(9, "h:1"),
            hello(2, ""),
            hello(2, "no port"),
            b"VDLQ\0\x01\0\0\0\0\0\0\0\x02\0\0".to_vec(),
        ] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&bytes).await.unwrap();
            assert!(
                closed_within(&mut s, Duration::from_secs(2)).await,
                "{bytes:?}"
            );
        }
        wait_until(|| stats.refused_connections() == 5).await;
        assert!(inbox.hellos.lock().unwrap().is_empty());
        assert!(inbox2.hellos.lock().unwrap().is_empty());
        task.abort();
    }

    #[tokio::test]
    async fn only_checked_messages_are_delivered() {
        let (addr, inbox, stats, _versions, task) = listen(LOCAL, short_limits()).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&hello(2, "h:1")).await.unwrap();
        let good = {
            let mut m = Message::default();
            m.set_msg_type(MessageType::MsgHeartbeat);
            m.from = 2;
            m.to = 1;
            m.term = 3;
            m
        };
        let mut forged = good.clone();
        forged.from = 3;
        let mut empty_proposal = Message::default();
        empty_proposal.set_msg_type(MessageType::MsgPropose);
        empty_proposal.from = 2;
        empty_proposal.to = 1;
        let frame = frame_of(
            FrameFormat::Prost,
            &[(1, &good), (1, &forged), (1, &empty_proposal)],
        );
        s.write_all(&frame).await.unwrap();
        wait_until(|| stats.refused_messages() == 2).await;
        let delivered = inbox.delivered.lock().unwrap().clone();
        assert_eq!(delivered, vec![(1, good)]);
        task.abort();
    }

    #[tokio::test]
    async fn a_large_frame_arrives_whole_in_pieces() {
        let (addr, inbox, _stats, _versions, task) = listen(LOCAL, short_limits()).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&hello(2, "h:1")).await.unwrap();
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.from = 2;
        m.to = 1;
        m.term = 1;
        m.entries = vec![Entry {
            index: 1,
            term: 1,
            data: Bytes::from((0..3_000_000u32).map(|i| i as u8).collect::<Vec<u8>>()),
            ..Default::default()
        }]
        .into();
        let frame = frame_of(FrameFormat::Prost, &[(5, &m)]);
        for piece in frame.chunks(700_000) {
            s.write_all(piece).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        wait_until(|| inbox.delivered.lock().unwrap().len() == 1).await;
        assert_eq!(inbox.delivered.lock().unwrap()[0], (5, m));
        task.abort();
    }

    #[test]
    fn advertised_addresses_are_host_and_port() {
        for ok in ["127.0.0.1:9092", "kafka-1.example:9092", "[::1]:9092"] {
            assert!(peer_wire::valid_advertised(ok), "{ok}");
        }
        for bad in [
            "",
            ":9092",
            "host",
            "host:",
            "host:99999",
            "ho st:1",
            "h\u{e9}:1",
        ] {
            assert!(!peer_wire::valid_advertised(bad), "{bad}");
        }
    }

    /// A node of an earlier release (hello version 1 or 2, fixed-layout frames) is still
    /// admitted, its frames are read in its format, and its version is recorded so this node
    /// dials it back in its version; a hello of a later version is refused.
    #[tokio::test]
    async fn older_versions_are_read_and_recorded_newer_refused() {
        let (addr, inbox, stats, versions, task) = listen(LOCAL, short_limits()).await;
        let mut heartbeat = Message::default();
        heartbeat.set_msg_type(MessageType::MsgHeartbeat);
        heartbeat.to = 1;
        heartbeat.term = 3;
        let mut conns = Vec::new();
        for (from, version, format) in [
            (2, peer_wire::VERSION_1, FrameFormat::Legacy),
            (3, peer_wire::VERSION_2, FrameFormat::Legacy),
            (3, peer_wire::VERSION_3, FrameFormat::Prost),
        ] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&hello_in(version, from, "h:1")).await.unwrap();
            let mut m = heartbeat.clone();
            m.from = from;
            s.write_all(&frame_of(format, &[(7, &m)])).await.unwrap();
            let n = inbox.delivered.lock().unwrap().len();
            wait_until(|| inbox.delivered.lock().unwrap().len() == n + 1).await;
            assert_eq!(inbox.delivered.lock().unwrap()[n], (7, m));
            assert_eq!(versions.dial_version(from), version);
            conns.push(s);
        }
        assert_eq!(versions.dial_version(2), peer_wire::VERSION_1);
        assert_eq!(stats.refused_connections(), 0);
        let mut newer = TcpStream::connect(addr).await.unwrap();
        newer.write_all(b"VDLP\x00\x04\x00\x00").await.unwrap();
        assert!(closed_within(&mut newer, Duration::from_secs(2)).await);
        wait_until(|| stats.refused_connections() == 1).await;
        task.abort();
    }

    /// A sender dials a peer in the version it last heard from it, and re-dials when that
    /// changes: frames reach a listener in the format of the hello they follow.
    #[tokio::test]
    async fn senders_dial_old_peers_in_their_version() {
        // Node 1 listens; node 2 sends to it.
        let (addr, inbox, stats, listener_versions, task) = listen(LOCAL, short_limits()).await;
        let sender_versions = Arc::new(PeerVersions::default());
        let peers = [(1, addr), (2, SocketAddr::new(LOCAL, 1))];
        let sender = start_senders(
            2,
            "h:2".into(),
            Vec::new(),
            &peers,
            Arc::new(Recorder::default()),
            Arc::new(OpenLinks),
            sender_versions.clone(),
            None,
        );
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = 2;
        m.to = 1;
        m.term = 3;
        sender.send(9, m.clone());
        wait_until(|| !inbox.delivered.lock().unwrap().is_empty()).await;
        // Node 1 was heard speaking version 1: node 2 dials it again in version 1.
        sender_versions.heard(1, peer_wire::VERSION_1, "");
        for _ in 0..50 {
            sender.send(9, m.clone());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        wait_until(|| inbox.hellos.lock().unwrap().len() >= 2).await;
        wait_until(|| listener_versions.dial_version(2) == peer_wire::VERSION_1).await;
        let delivered = inbox.delivered.lock().unwrap().clone();
        assert!(delivered.iter().all(|d| *d == (9, m.clone())));
        assert_eq!(stats.refused_connections(), 0);
        assert_eq!(stats.refused_messages(), 0);
        task.abort();
    }
}
