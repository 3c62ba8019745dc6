//! Raft peer transport: TCP between nodes, one outgoing connection per peer carrying the
//! messages of every Raft group, batched, with bounded queues and reconnect with backoff.
//!
//! Wire format (all integers big-endian):
//!
//! ```text
//! connection := hello frame*
//! hello      := magic "VDLP" (4) | version u16 (=2) | from_node u64 | advertised_len u16 | advertised (UTF-8)
//!               | directory_id u128 | known_directory_of_receiver u128 | flags u8
//!               -- version 1 (older nodes) ends after `advertised`
//!               -- flags: bit 0 the receiver is rejoining in the sender's view, bit 1 the
//!                  sender is settled (not rejoining itself); see `crate::replicas`
//! frame      := frame_len u32 | message*            -- frame_len counts the bytes after itself
//! message    := group_id u64 | msg_len u32 | raft Message (protobuf, msg_len bytes)
//! ```
//!
//! The dialer sends `hello` once, then frames; the acceptor never writes (each direction of a pair
//! has its own connection). The dialer connects from its own configured peer IP.
//!
//! What the acceptor admits (see [`crate::peer_guard`] for the message checks):
//!
//! - **Connections**: only from an IP some other member is configured at; at most
//!   [`PeerLimits::max_pending`] ([`PEER_CONNECTIONS_PER_MEMBER`] x peers) still in their hello;
//!   others are closed at once.
//! - **Hello**: within [`HELLO_DEADLINE`]; magic, version 1, `from_node` a configured member
//!   other than this node whose configured peer IP is the connection's source IP, `advertised`
//!   at most 1024 bytes of `HOST:PORT`. Otherwise the connection is closed (logged at warn, at
//!   most 5 a second) and nothing it said is recorded. An admitted connection's advertised
//!   address counts while it is open (the newest open connection of a peer wins); at most
//!   [`PEER_CONNECTIONS_PER_MEMBER`] are open per peer, a newer one closing the oldest.
//! - **Frames**: at most [`MAX_FRAME_BYTES`]; once its length is read a frame must arrive
//!   whole within [`FRAME_DEADLINE`], and its buffer grows with the bytes that arrived (not
//!   with the length claimed). A longer frame, a late one, a message running past its frame or
//!   an undecodable protobuf closes the connection; Raft retransmits.
//! - **Messages**: each one is checked ([`PeerGuard::check_message`]: sender is the hello's
//!   node, recipient is this node, type and fields fit) before it is queued for its group,
//!   which checks it again against its Raft state (`peer_guard::check_in_group`) before
//!   stepping it. A refused message is dropped and counted ([`PeerStats`]); the connection
//!   stays.
//!
//! Sending never blocks the caller: messages go into a bounded per-peer queue and are dropped
//! when it is full (Raft tolerates loss). When a connection fails or the peer closes it, every
//! group is told the peer is unreachable so raft-rs stops pipelining to it and probes instead.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use protobuf::Message as _;
use raft::prelude::Message;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::peer_guard::{PeerGuard, PeerStats, Refusal};

/// Largest frame accepted from a peer (a batch of append messages).
pub const MAX_FRAME_BYTES: usize = 64 << 20;
/// Messages queued for one peer before new ones are dropped.
pub const PEER_QUEUE_MESSAGES: usize = 8192;
/// Most messages put into one frame.
const MAX_MESSAGES_PER_FRAME: usize = 512;
/// Bytes after which a frame is flushed even if more messages are waiting.
const FRAME_FLUSH_BYTES: usize = 4 << 20;
const MAGIC: &[u8; 4] = b"VDLP";
/// Longest advertised Kafka address a hello may carry.
const MAX_ADVERTISED_BYTES: usize = 1024;
const VERSION: u16 = 2;
/// The hello version of nodes before directory ids, still accepted.
const VERSION_1: u16 = 1;
const FLAG_RECEIVER_REJOINING: u8 = 1;
const FLAG_SENDER_SETTLED: u8 = 2;
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(1000);

/// Why bytes from a peer were rejected.
#[derive(Debug, Error)]
pub enum PeerFrameError {
    /// The connection does not start with a valid hello.
    #[error("bad hello: {0}")]
    BadHello(&'static str),
    /// The hello did not arrive whole within [`PeerLimits::hello_deadline`].
    #[error("no hello within the deadline")]
    HelloTimeout,
    /// The hello was refused (see [`Refusal`]).
    #[error("hello refused: {0}")]
    Refused(Refusal),
    /// A frame did not arrive whole within [`PeerLimits::frame_deadline`] of its length.
    #[error("frame not complete within the deadline")]
    FrameTimeout,
    /// A newer connection of the same member replaced this one.
    #[error("replaced by a newer connection of the same peer")]
    Replaced,
    /// A frame claims more than [`MAX_FRAME_BYTES`].
    #[error("frame of {0} bytes exceeds the limit")]
    FrameTooLarge(usize),
    /// A message runs past the end of its frame.
    #[error("truncated message in frame")]
    Truncated,
    /// The protobuf payload did not decode.
    #[error("undecodable raft message: {0}")]
    Protobuf(String),
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
    /// advertised Kafka address and what it says about data directories.
    fn peer_hello(
        &self,
        peer: u64,
        connection: u64,
        advertised: String,
        dirs: crate::replicas::HelloDirs,
    ) {
        let _ = (peer, connection, advertised, dirs);
    }
    /// What this node's hello to `peer` says about directories.
    fn hello_for(&self, peer: u64) -> crate::replicas::HelloDirs {
        let _ = peer;
        crate::replicas::HelloDirs::default()
    }
    /// A connection announced by `peer_hello` ended.
    fn peer_gone(&self, peer: u64, connection: u64) {
        let _ = (peer, connection);
    }
}

/// The sending half of the transport: one queue per peer.
#[derive(Clone)]
pub struct PeerSender {
    queues: Arc<HashMap<u64, mpsc::Sender<(u64, Message)>>>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
    /// Bumped to make every sender reconnect (and so send a new hello).
    hello_generation: Arc<std::sync::atomic::AtomicU64>,
}

impl PeerSender {
    /// Queues `msg` of `group` for its destination (`msg.to`). Never blocks; drops the message
    /// when the queue is full or the peer is unknown, and counts the drop.
    pub fn send(&self, group: u64, msg: Message) {
        match self.queues.get(&msg.to) {
            Some(q) => {
                if q.try_send((group, msg)).is_err() {
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

    /// Makes every sender reconnect with a fresh hello (after what it says changed), at its
    /// next message.
    pub fn redial_all(&self) {
        self.hello_generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
        queues.insert(peer, tx);
        receivers.insert(peer, rx);
    }
    let sender = PeerSender {
        queues: Arc::new(queues),
        dropped: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        hello_generation: Arc::new(std::sync::atomic::AtomicU64::new(0)),
    };
    (sender, receivers)
}

/// Starts one sender task per peer (dialing `addr`, reconnecting with backoff) and returns the
/// handle used by Raft groups to send. Must be called inside a tokio runtime.
pub fn start_senders(
    self_id: u64,
    advertised: String,
    peers: &[(u64, SocketAddr)],
    inbox: Arc<dyn PeerInbox>,
    filter: Arc<dyn LinkFilter>,
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
    for &(peer, addr) in peers {
        if peer == self_id {
            continue;
        }
        let (tx, rx) = mpsc::channel(PEER_QUEUE_MESSAGES);
        queues.insert(peer, tx);
        tokio::spawn(sender_task(
            self_id,
            local_ip,
            advertised.clone(),
            peer,
            addr,
            rx,
            inbox.clone(),
            filter.clone(),
            hello_generation.clone(),
        ));
    }
    PeerSender {
        queues: Arc::new(queues),
        dropped: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        hello_generation,
    }
}

#[allow(clippy::too_many_arguments)]
async fn sender_task(
    self_id: u64,
    local_ip: Option<IpAddr>,
    advertised: String,
    peer: u64,
    addr: SocketAddr,
    mut rx: mpsc::Receiver<(u64, Message)>,
    inbox: Arc<dyn PeerInbox>,
    filter: Arc<dyn LinkFilter>,
    hello_generation: Arc<std::sync::atomic::AtomicU64>,
) {
    let mut backoff = BACKOFF_MIN;
    let mut conn: Option<TcpStream> = None;
    let mut frame = BytesMut::with_capacity(64 << 10);
    let mut generation = hello_generation.load(std::sync::atomic::Ordering::SeqCst);
    loop {
        let now = hello_generation.load(std::sync::atomic::Ordering::SeqCst);
        if now != generation {
            generation = now;
            conn = None;
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
                conn = None;
                // What was written last may never have been read: Raft must probe this
                // peer again rather than assume its pipeline of appends arrived.
                inbox.peer_unreachable(peer);
                continue;
            }
            // Keep a connection up even when Raft has nothing to send to this peer, so the peer
            // always knows this node is alive and where its Kafka listener is.
            () = tokio::time::sleep(backoff), if conn.is_none() => {
                match dial(self_id, local_ip, &advertised, addr, inbox.hello_for(peer)).await {
                    Ok(s) => {
                        backoff = BACKOFF_MIN;
                        conn = Some(s);
                    }
                    Err(_) => backoff = (backoff * 2).min(BACKOFF_MAX),
                }
                continue;
            }
        };
        // Gather what is already queued into one frame.
        frame.clear();
        frame.put_u32(0);
        let mut count = 0;
        let mut next = Some(first);
        while let Some((group, msg)) = next.take() {
            if filter.allow_message(peer, &msg) {
                encode_message(&mut frame, group, &msg);
                count += 1;
            }
            if count >= MAX_MESSAGES_PER_FRAME || frame.len() >= FRAME_FLUSH_BYTES {
                break;
            }
            next = rx.try_recv().ok();
        }
        if count == 0 {
            continue;
        }
        let body_len = (frame.len() - 4) as u32;
        frame[..4].copy_from_slice(&body_len.to_be_bytes());

        // Write on the current connection; on failure, dial once more and retry the frame.
        let mut sent = false;
        for _attempt in 0..2 {
            if conn.is_none() {
                match dial(self_id, local_ip, &advertised, addr, inbox.hello_for(peer)).await {
                    Ok(s) => {
                        backoff = BACKOFF_MIN;
                        conn = Some(s);
                    }
                    Err(_) => break,
                }
            }
            if let Some(s) = conn.as_mut() {
                if s.write_all(&frame).await.is_ok() {
                    sent = true;
                    break;
                }
                conn = None;
            }
        }
        if !sent {
            inbox.peer_unreachable(peer);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            // Drop what piled up while waiting: it is stale, Raft will resend.
            while rx.try_recv().is_ok() {}
        }
    }
}

/// Resolves when the peer closed `conn` (or sent bytes, which it must not); never resolves when
/// there is no connection.
async fn closed(conn: &mut Option<TcpStream>) {
    match conn.as_mut() {
        Some(s) => {
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf).await;
        }
        None => std::future::pending().await,
    }
}

async fn dial(
    self_id: u64,
    local_ip: Option<IpAddr>,
    advertised: &str,
    addr: SocketAddr,
    dirs: crate::replicas::HelloDirs,
) -> std::io::Result<TcpStream> {
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
    let mut s = tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    s.set_nodelay(true)?;
    let mut hello = BytesMut::with_capacity(32 + advertised.len());
    hello.put_slice(MAGIC);
    hello.put_u16(VERSION);
    hello.put_u64(self_id);
    let adv = &advertised.as_bytes()[..advertised.len().min(MAX_ADVERTISED_BYTES)];
    hello.put_u16(adv.len() as u16);
    hello.put_slice(adv);
    hello.put_u128(dirs.dir);
    hello.put_u128(dirs.known_dir_of_receiver);
    let mut flags = 0u8;
    if dirs.receiver_rejoining {
        flags |= FLAG_RECEIVER_REJOINING;
    }
    if dirs.sender_settled {
        flags |= FLAG_SENDER_SETTLED;
    }
    hello.put_u8(flags);
    s.write_all(&hello).await?;
    Ok(s)
}

fn encode_message(frame: &mut BytesMut, group: u64, msg: &Message) {
    frame.put_u64(group);
    let len_at = frame.len();
    frame.put_u32(0);
    let mut w = frame.writer();
    // Writing into memory cannot fail; an error here would be a protobuf bug.
    msg.write_to_writer(&mut w)
        .expect("encoding a raft message into memory");
    let frame = w.into_inner();
    let len = (frame.len() - len_at - 4) as u32;
    frame[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
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
pub async fn serve_peers(
    listener: TcpListener,
    inbox: Arc<dyn PeerInbox>,
    guard: Arc<PeerGuard>,
    stats: Arc<PeerStats>,
) {
    let limits = PeerLimits::for_peers(guard.peer_count());
    serve_peers_with(listener, inbox, guard, stats, limits).await
}

/// [`serve_peers`] with explicit limits.
pub async fn serve_peers_with(
    listener: TcpListener,
    inbox: Arc<dyn PeerInbox>,
    guard: Arc<PeerGuard>,
    stats: Arc<PeerStats>,
    limits: PeerLimits,
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
                    limits,
                    source,
                };
                connections.spawn(async move {
                    match conn.run(sock, hello_slot).await {
                        Ok(()) => {}
                        Err(e @ (PeerFrameError::BadHello(_)
                        | PeerFrameError::HelloTimeout
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
    limits: PeerLimits,
    source: SocketAddr,
}

impl Connection {
    /// Reads the hello within its deadline, admits it, then delivers the frames' admitted
    /// messages until the connection ends, fails, or a newer connection of the same member
    /// replaces it.
    async fn run(
        &self,
        mut sock: TcpStream,
        hello_slot: PendingSlot,
    ) -> Result<(), PeerFrameError> {
        let (from, advertised, dirs) =
            tokio::time::timeout(self.limits.hello_deadline, read_hello(&mut sock))
                .await
                .map_err(|_| PeerFrameError::HelloTimeout)??;
        self.guard
            .admit_hello(from, self.source.ip())
            .map_err(PeerFrameError::Refused)?;
        drop(hello_slot);
        let (slot, replaced) = self.slots.take(from, self.limits.per_member);
        self.inbox.peer_hello(from, slot.id, advertised, dirs);
        let result = tokio::select! {
            r = self.read_frames(&mut sock, from) => r,
            _ = replaced => Err(PeerFrameError::Replaced),
        };
        self.inbox.peer_gone(from, slot.id);
        result
    }

    async fn read_frames(&self, sock: &mut TcpStream, from: u64) -> Result<(), PeerFrameError> {
        loop {
            let len = sock.read_u32().await? as usize;
            if len > MAX_FRAME_BYTES {
                return Err(PeerFrameError::FrameTooLarge(len));
            }
            let body = tokio::time::timeout(self.limits.frame_deadline, read_body(sock, len))
                .await
                .map_err(|_| PeerFrameError::FrameTimeout)??;
            for (group, msg) in decode_frame(body)? {
                match self.guard.check_message(from, &msg) {
                    Ok(()) => self.inbox.deliver(group, msg),
                    Err(why) => self.stats.refuse_message(group, &why),
                }
            }
        }
    }
}

/// Reads a hello: (the node id it claims, its advertised Kafka address).
async fn read_hello(
    sock: &mut TcpStream,
) -> Result<(u64, String, crate::replicas::HelloDirs), PeerFrameError> {
    let mut head = [0u8; 16];
    sock.read_exact(&mut head).await?;
    if &head[..4] != MAGIC {
        return Err(PeerFrameError::BadHello("magic"));
    }
    let version = u16::from_be_bytes([head[4], head[5]]);
    if version != VERSION && version != VERSION_1 {
        return Err(PeerFrameError::BadHello("version"));
    }
    let from = u64::from_be_bytes(head[6..14].try_into().expect("8 bytes"));
    let adv_len = u16::from_be_bytes([head[14], head[15]]) as usize;
    if adv_len > MAX_ADVERTISED_BYTES {
        return Err(PeerFrameError::BadHello("advertised address too long"));
    }
    let mut adv = vec![0u8; adv_len];
    sock.read_exact(&mut adv).await?;
    let adv = String::from_utf8(adv).map_err(|_| PeerFrameError::BadHello("address not UTF-8"))?;
    if !valid_advertised(&adv) {
        return Err(PeerFrameError::BadHello(
            "advertised address is not HOST:PORT",
        ));
    }
    let mut dirs = crate::replicas::HelloDirs::default();
    if version >= VERSION {
        let mut tail = [0u8; 33];
        sock.read_exact(&mut tail).await?;
        let mut t = &tail[..];
        dirs.dir = t.get_u128();
        dirs.known_dir_of_receiver = t.get_u128();
        let flags = t.get_u8();
        dirs.receiver_rejoining = flags & FLAG_RECEIVER_REJOINING != 0;
        dirs.sender_settled = flags & FLAG_SENDER_SETTLED != 0;
    }
    Ok((from, adv, dirs))
}

/// Whether `a` looks like the `HOST:PORT` a node advertises: printable ASCII without spaces,
/// a non-empty host, a port number.
fn valid_advertised(a: &str) -> bool {
    let Some((host, port)) = a.rsplit_once(':') else {
        return false;
    };
    !host.is_empty() && a.bytes().all(|b| b.is_ascii_graphic()) && port.parse::<u16>().is_ok()
}

/// Reads a frame body of `len` bytes. The buffer grows with the bytes that arrived (doubling,
/// from [`FRAME_READ_CHUNK`]) and never beyond `len`, so a length claim alone allocates little
/// and a frame never holds more than its own size.
async fn read_body(sock: &mut TcpStream, len: usize) -> Result<Bytes, PeerFrameError> {
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

/// Splits one frame body into (group, message) pairs, checking every length.
pub fn decode_frame(mut body: Bytes) -> Result<Vec<(u64, Message)>, PeerFrameError> {
    let mut out = Vec::new();
    while body.has_remaining() {
        if body.remaining() < 12 {
            return Err(PeerFrameError::Truncated);
        }
        let group = body.get_u64();
        let len = body.get_u32() as usize;
        if len > body.remaining() {
            return Err(PeerFrameError::Truncated);
        }
        let raw = body.split_to(len);
        let msg = Message::parse_from_carllerche_bytes(&raw)
            .map_err(|e| PeerFrameError::Protobuf(e.to_string()))?;
        out.push((group, msg));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
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
            _dirs: crate::replicas::HelloDirs,
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
        let task = tokio::spawn(serve_peers_with(
            listener,
            inbox.clone(),
            guard,
            stats.clone(),
            limits,
        ));
        (addr, inbox, stats, task)
    }

    fn short_limits() -> PeerLimits {
        PeerLimits {
            max_pending: 2,
            per_member: 1,
            hello_deadline: Duration::from_millis(300),
            frame_deadline: Duration::from_millis(300),
        }
    }

    /// A version 2 hello: directory id `from`, no known directory for the receiver, settled.
    fn hello(from: u64, advertised: &str) -> Vec<u8> {
        let mut b = BytesMut::new();
        b.put_slice(MAGIC);
        b.put_u16(VERSION);
        b.put_u64(from);
        b.put_u16(advertised.len() as u16);
        b.put_slice(advertised.as_bytes());
        b.put_u128(u128::from(from));
        b.put_u128(0);
        b.put_u8(FLAG_SENDER_SETTLED);
        b.to_vec()
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

    #[tokio::test]
    async fn deadlines_close_silent_and_stalled_connections() {
        let (addr, inbox, stats, task) = listen(LOCAL, short_limits()).await;
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
        let (addr, inbox, stats, task) = listen(LOCAL, limits).await;
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
        let (addr, inbox, stats, task) =
            listen(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), short_limits()).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        // Closed at accept: the write may already fail.
        let _ = s.write_all(&hello(2, "h:1")).await;
        assert!(closed_within(&mut s, Duration::from_secs(2)).await);
        task.abort();
        assert_eq!(stats.refused_connections(), 1);
        // Peers at 127.0.0.1: this node's own id, an unknown id, a bad address, a bad magic.
        let (addr, inbox2, stats, task) = listen(LOCAL, short_limits()).await;
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
        let (addr, inbox, stats, task) = listen(LOCAL, short_limits()).await;
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
        let mut frame = BytesMut::new();
        frame.put_u32(0);
        for m in [&good, &forged, &empty_proposal] {
            encode_message(&mut frame, 1, m);
        }
        let len = (frame.len() - 4) as u32;
        frame[..4].copy_from_slice(&len.to_be_bytes());
        s.write_all(&frame).await.unwrap();
        wait_until(|| stats.refused_messages() == 2).await;
        let delivered = inbox.delivered.lock().unwrap().clone();
        assert_eq!(delivered, vec![(1, good)]);
        task.abort();
    }

    #[tokio::test]
    async fn a_large_frame_arrives_whole_in_pieces() {
        let (addr, inbox, _stats, task) = listen(LOCAL, short_limits()).await;
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
        let mut frame = BytesMut::new();
        frame.put_u32(0);
        encode_message(&mut frame, 5, &m);
        let len = (frame.len() - 4) as u32;
        frame[..4].copy_from_slice(&len.to_be_bytes());
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
            assert!(valid_advertised(ok), "{ok}");
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
            assert!(!valid_advertised(bad), "{bad}");
        }
    }

    #[test]
    fn frames_round_trip_and_reject_truncation() {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.to = 2;
        m.from = 1;
        m.term = 7;
        let e = Entry {
            data: Bytes::from(vec![9u8; 3000]),
            ..Default::default()
        };
        m.entries = vec![e].into();
        let mut frame = BytesMut::new();
        encode_message(&mut frame, 42, &m);
        encode_message(&mut frame, 43, &m);
        let body = frame.freeze();
        let msgs = decode_frame(body.clone()).unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].0, 42);
        assert_eq!(msgs[1].1, m);
        for cut in [1, 11, 12, 100, body.len() - 1] {
            assert!(decode_frame(body.slice(..cut)).is_err(), "cut at {cut}");
        }
    }
}
