//! The accepting half of the peer transport: the listener ([`serve_peers`]) and each accepted
//! connection: the TLS handshake, the hello admitted by the peer guard, then frames read
//! within their deadlines and their messages checked before they are delivered. What is
//! admitted is described in the transport's module documentation.

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use super::connection_slots::{MemberSlots, PendingSlot};
use super::hello::read_hello;
use super::{PeerFrameError, PeerInbox, PeerStream, PeerTls, MAX_FRAME_BYTES};
use crate::replication::peer_guard::{PeerGuard, PeerStats, Refusal};
use crate::replication::peer_wire::{self, FrameFormat, PeerVersions};
use crate::runtime::timeline::{self, Stage as Hop};

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
        self.versions
            .heard_compacted_entries(from, hello.appends_compacted_entries);
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
#[path = "accept_tests.rs"]
mod tests;
