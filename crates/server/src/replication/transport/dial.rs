//! Opening an outgoing peer connection: TCP from this node's own configured peer IP, then,
//! with mutual TLS, the handshake and a check that the peer's certificate names the node
//! dialed, then this node's hello in the version the peer speaks.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use super::{PeerInbox, PeerStream, PeerTls, HELLO_DEADLINE};
use crate::replication::direct_send::DirectConn;
use crate::replication::peer_wire::{self, PeerVersions};

/// Where and how a sender task dials its peer.
pub(super) struct Link {
    pub(super) self_id: u64,
    pub(super) local_ip: Option<IpAddr>,
    pub(super) advertised: String,
    pub(super) listeners: Vec<(String, String)>,
    pub(super) peer: u64,
    pub(super) addr: SocketAddr,
    pub(super) versions: Arc<PeerVersions>,
    pub(super) tls: Option<Arc<PeerTls>>,
}

/// An open outgoing connection and the hello version it was opened with (which fixes its frame
/// format).
pub(super) struct Outgoing {
    pub(super) stream: OutStream,
    pub(super) version: u16,
}

/// The byte stream of an outgoing connection.
pub(super) enum OutStream {
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
    pub(super) fn direct_half(&self, generation: u64) -> Option<DirectConn> {
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
    pub(super) async fn dial(&self, inbox: &dyn PeerInbox) -> std::io::Result<Outgoing> {
        let version = self.versions.dial_version(self.peer);
        let hello = peer_wire::encode_hello_with_listeners(
            version,
            self.self_id,
            &self.advertised,
            &self.listeners,
            inbox.hello_for(self.peer),
        );
        let mut tcp = tcp_connect(self.local_ip, self.addr).await?;
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

/// Connects to `addr` from `local_ip` (when it is of the same family).
async fn tcp_connect(local_ip: Option<IpAddr>, addr: SocketAddr) -> std::io::Result<TcpStream> {
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
