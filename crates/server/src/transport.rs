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
//! has its own connection). A frame longer than [`MAX_FRAME_BYTES`], a message running past its
//! frame, an unknown version or an undecodable protobuf closes the connection; Raft retransmits.
//!
//! Sending never blocks the caller: messages go into a bounded per-peer queue and are dropped
//! when it is full (Raft tolerates loss). When a connection fails, every group is told the peer
//! is unreachable so raft-rs stops pipelining to it and probes instead.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use protobuf::Message as _;
use raft::prelude::Message;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Largest frame accepted from a peer (a batch of append messages).
pub const MAX_FRAME_BYTES: usize = 64 << 20;
/// Messages queued for one peer before new ones are dropped.
pub const PEER_QUEUE_MESSAGES: usize = 8192;
/// Most messages put into one frame.
const MAX_MESSAGES_PER_FRAME: usize = 512;
/// Bytes after which a frame is flushed even if more messages are waiting.
const FRAME_FLUSH_BYTES: usize = 4 << 20;
const MAGIC: &[u8; 4] = b"VDLP";
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
    /// A peer connected and announced its advertised Kafka address and its directories.
    fn peer_hello(&self, peer: u64, advertised: String, dirs: crate::replicas::HelloDirs) {
        let _ = (peer, advertised, dirs);
    }
    /// What this node's hello to `peer` says about directories.
    fn hello_for(&self, peer: u64) -> crate::replicas::HelloDirs {
        let _ = peer;
        crate::replicas::HelloDirs::default()
    }
    /// A connection from `peer` (announced by `peer_hello`) ended.
    fn peer_gone(&self, peer: u64) {
        let _ = peer;
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
}

/// Lets everything through.
pub struct OpenLinks;

impl LinkFilter for OpenLinks {
    fn allow(&self, _peer: u64) -> bool {
        true
    }
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

async fn sender_task(
    self_id: u64,
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
                continue;
            }
            // Keep a connection up even when Raft has nothing to send to this peer, so the peer
            // always knows this node is alive and where its Kafka listener is.
            () = tokio::time::sleep(backoff), if conn.is_none() => {
                match dial(self_id, &advertised, addr, inbox.hello_for(peer)).await {
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
            if filter.allow(peer) {
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
                match dial(self_id, &advertised, addr, inbox.hello_for(peer)).await {
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
    advertised: &str,
    addr: SocketAddr,
    dirs: crate::replicas::HelloDirs,
) -> std::io::Result<TcpStream> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    s.set_nodelay(true)?;
    let mut hello = BytesMut::with_capacity(32 + advertised.len());
    hello.put_slice(MAGIC);
    hello.put_u16(VERSION);
    hello.put_u64(self_id);
    let adv = &advertised.as_bytes()[..advertised.len().min(1024)];
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

/// Accepts peer connections on `listener` and delivers their messages to `inbox` until the task
/// is dropped or aborted, which also closes every connection it accepted (so a stopped node's
/// peers see their connections fail and reconnect to its successor). Each connection is read by
/// its own task; a bad frame closes only that one.
pub async fn serve_peers(listener: TcpListener, inbox: Arc<dyn PeerInbox>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((sock, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = sock.set_nodelay(true);
                let inbox = inbox.clone();
                connections.spawn(async move {
                    if let Err(e) = read_peer(sock, inbox.as_ref()).await {
                        tracing::debug!("peer connection closed: {e}");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn read_peer(mut sock: TcpStream, inbox: &dyn PeerInbox) -> Result<(), PeerFrameError> {
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
    if adv_len > 1024 {
        return Err(PeerFrameError::BadHello("advertised address too long"));
    }
    let mut adv = vec![0u8; adv_len];
    sock.read_exact(&mut adv).await?;
    let adv = String::from_utf8(adv).map_err(|_| PeerFrameError::BadHello("address not UTF-8"))?;
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
    inbox.peer_hello(from, adv, dirs);
    let result = read_frames(&mut sock, inbox).await;
    inbox.peer_gone(from);
    result
}

async fn read_frames(sock: &mut TcpStream, inbox: &dyn PeerInbox) -> Result<(), PeerFrameError> {
    loop {
        let len = sock.read_u32().await? as usize;
        if len > MAX_FRAME_BYTES {
            return Err(PeerFrameError::FrameTooLarge(len));
        }
        let mut buf = BytesMut::zeroed(len);
        sock.read_exact(&mut buf).await?;
        for (group, msg) in decode_frame(buf.freeze())? {
            inbox.deliver(group, msg);
        }
    }
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
