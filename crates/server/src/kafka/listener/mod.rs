//! Accepting Kafka connections and running them.
//!
//! Each connection is one task that reads requests continuously and handles up to
//! `max_in_flight_per_connection` of them concurrently, while writing responses strictly in
//! request order (the protocol requires it). A frame's size is checked against
//! `request_max_bytes` before anything is allocated for it; a malformed frame closes that
//! connection only; a connection idle for `connection_idle` is closed.
//!
//! Which connections are accepted at all (per listener, per client address, accept rates) is
//! [`crate::kafka::conn_limits`]. A connection to a TLS or SASL listener must authenticate (the
//! TLS handshake, then SASL) within `kafka.authentication_timeout_ms` of being accepted, or it
//! is closed.
//!
//! Security (per listener, see [`Endpoint`]): on a TLS listener the handshake must complete
//! within [`TLS_HANDSHAKE_TIMEOUT`] (or the authentication deadline, when sooner; a client
//! certificate's subject becomes the principal);
//! on a SASL listener requests go through the connection's [`SaslSession`] first: before
//! authentication frames are limited to `security.sasl_max_receive_bytes` (checked before
//! allocating) and only ApiVersions, SaslHandshake and SaslAuthenticate are served; any other
//! request closes the connection. Authentication requests are handled one at a time, after
//! every earlier response is written. A failed authentication is answered after
//! `security.connection_failed_authentication_delay_ms`, then the connection is closed.
//!
//! The room, one job per file: accepting connections and setting each one up (TLS, SASL
//! session, the direct answer path) is here; `requests.rs` runs a connection's requests
//! (read ahead, handle concurrently, answer in order, drain at shutdown), `sasl.rs`
//! authenticates it, `frames.rs` reads and writes frames within their limits and deadlines.

mod frames;
mod requests;
mod sasl;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

use crate::kafka::conn_limits::{ConnectionLimits, ListenerLimits};
use crate::kafka::connection::ConnectionContext;
use crate::kafka::direct_answer::ClientSocket;
use crate::kafka::host::ConnectionHost;
use crate::security::config::KafkaListenerConfig;
use crate::security::sasl::SaslSession;
use crate::security::tls::ReloadingServerTls;
use crate::shutdown::{ShutdownPhase, ShutdownSignal};
use requests::serve_stream;

/// Longest a client may take to complete the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One Kafka listener: its configuration and, when it uses TLS, its (reloadable) TLS
/// configuration.
pub struct Endpoint {
    /// The listener's configuration.
    pub config: KafkaListenerConfig,
    /// Present exactly when the listener's protocol uses TLS.
    pub tls: Option<Arc<ReloadingServerTls>>,
}

/// The connection limits shared by every Kafka listener of `node`: `kafka.max_connections`
/// (lowered to what the open-file limit allows beside storage, [`crate::runtime::fd_budget`]) and
/// the per-address limits (see [`crate::kafka::conn_limits`]).
pub(crate) fn connection_limits<H: ConnectionHost>(node: &H) -> Arc<ConnectionLimits> {
    let limits = node.config().kafka;
    let nofile = crate::runtime::fd_budget::nofile_limits().map_or(1024, |(soft, _)| soft);
    let max_connections =
        crate::runtime::fd_budget::client_connection_limit(limits.max_connections, nofile);
    if max_connections < limits.max_connections {
        tracing::warn!(
            configured = limits.max_connections,
            allowed = max_connections,
            open_file_limit = nofile,
            "kafka.max_connections lowered to what the open file limit allows beside storage; \
             raise the limit (e.g. LimitNOFILE) to allow more"
        );
    }
    ConnectionLimits::new(
        node.config().connection_limits.clone(),
        max_connections,
        node.security_stats_arc(),
    )
}

/// Longest a response may take to be written: a client that stops reading its responses is
/// disconnected after this (or after `connection_idle`, when shorter), so it cannot pin its
/// connection and the responses queued for it.
pub const RESPONSE_WRITE_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest pause between accept attempts after accept failed (out of descriptors, say).
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Accepts connections on `listener` (the listener `endpoint`) until the task is dropped or
/// `shutdown` says so; at most as many run at once as the listener's `max_connections` and
/// `limits` allow (the node's, all listeners together, see [`connection_limits`]); further
/// ones wait in the accept backlog, as do those beyond the listener's accept rate. A connection
/// whose address holds its most connections, or opens them too fast, is closed as soon as it
/// is accepted (counted in the security counters). When accept fails, it
/// logs and backs off (up to 1 s) instead of spinning. At [`ShutdownPhase::StopAccepting`] it
/// closes the listening socket; at [`ShutdownPhase::Drain`] every connection reads no more
/// requests, answers those it has read and closes; it returns once all have closed (a dropped
/// sender counts as `Drain`). Callers bound the wait with a timeout.
pub(crate) async fn serve<H: ConnectionHost>(
    listener: TcpListener,
    node: Arc<H>,
    endpoint: Arc<Endpoint>,
    limits: Arc<ConnectionLimits>,
    mut shutdown: ShutdownSignal,
) {
    let mut connections = tokio::task::JoinSet::new();
    let mut backoff = Duration::from_millis(10);
    let mut own = ListenerLimits::new(
        endpoint.config.max_connections,
        endpoint
            .config
            .max_connection_creation_rate
            .or(limits.settings().max_connection_creation_rate),
    );
    loop {
        if *shutdown.borrow() >= ShutdownPhase::StopAccepting {
            break;
        }
        // The listener's own slot first, then the node's: a listener at its limit holds none
        // of the node's.
        let slots = tokio::select! {
            p = async {
                let listener_slot = own.acquire().await?;
                let node_slot = limits.node_permits.clone().acquire_owned().await.ok()?;
                own.pace().await;
                Some((listener_slot, node_slot))
            } => match p {
                Some(p) => p,
                None => return,
            },
            changed = shutdown.changed() => match changed {
                Ok(()) => continue,
                Err(_) => break,
            },
        };
        let (sock, peer) = tokio::select! {
            changed = shutdown.changed() => match changed {
                Ok(()) => continue,
                Err(_) => break,
            },
            accepted = listener.accept() => match accepted {
                Ok(a) => {
                    backoff = Duration::from_millis(10);
                    a
                }
                Err(e) => {
                    tracing::warn!(retry_in_ms = backoff.as_millis() as u64, "kafka accept failed: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let accepted_at = Instant::now();
        let ip_slot = match limits.admit(peer.ip(), accepted_at) {
            Ok(slot) => slot,
            Err(refused) => {
                tracing::debug!(%peer, listener = %endpoint.config.name, "kafka connection refused: {refused}");
                drop(sock);
                continue;
            }
        };
        let auth_deadline = accepted_at + limits.settings().authentication_timeout;
        let node = node.clone();
        let endpoint = endpoint.clone();
        let stop = shutdown.clone();
        connections.spawn(async move {
            let _slots = (slots, ip_slot);
            let _gauge = crate::metrics::ConnectionGauge::open(node.metrics().clone());
            if let Err(e) = run_connection(sock, peer, node, endpoint, auth_deadline, stop).await {
                tracing::debug!(%peer, "kafka connection closed: {e}");
            }
        });
    }
    drop(listener);
    tracing::info!(
        listener = %endpoint.config.name,
        connections = connections.len(),
        "kafka listener closed; answering the requests in flight"
    );
    while connections.join_next().await.is_some() {}
}

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionEnd {
    /// The socket failed or the client closed it.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The frame size was invalid or too large.
    #[error("bad frame: {0}")]
    BadFrame(kafka_proto::DecodeError),
    /// A request could not be decoded and cannot be answered.
    #[error("undecodable request: {0}")]
    BadRequest(kafka_proto::frame::RequestError),
    /// No request for longer than the idle limit.
    #[error("idle for too long")]
    Idle,
    /// The TLS handshake failed or took too long.
    #[error("TLS handshake: {0}")]
    TlsHandshake(String),
    /// A request other than ApiVersions / SaslHandshake / SaslAuthenticate before
    /// authentication, or after the SASL session expired.
    #[error("{0:?} request while not authenticated")]
    NotAuthenticated(kafka_proto::api::ApiKey),
    /// SASL authentication failed (the failure was answered after the delay).
    #[error("authentication failed")]
    AuthenticationFailed,
    /// The connection had not authenticated within `kafka.authentication_timeout_ms`.
    #[error("not authenticated in time")]
    AuthenticationTimeout,
}

async fn run_connection<H: ConnectionHost>(
    sock: TcpStream,
    peer: SocketAddr,
    node: Arc<H>,
    endpoint: Arc<Endpoint>,
    auth_deadline: Instant,
    shutdown: ShutdownSignal,
) -> Result<(), ConnectionEnd> {
    sock.set_nodelay(true)?;
    // SASL must be done by the deadline too (TLS listeners without SASL authenticate with
    // the handshake).
    let sasl_deadline = endpoint
        .config
        .protocol
        .uses_sasl()
        .then_some(auth_deadline);
    let mut conn = ConnectionContext::unauthenticated(peer, endpoint.config.name.clone());
    let sasl = endpoint.config.protocol.uses_sasl().then(|| {
        SaslSession::new(
            endpoint.config.sasl_mechanisms.clone(),
            node.config().security.connections_max_reauth,
        )
    });
    match &endpoint.tls {
        None => {
            let (reader, writer) = sock.into_split();
            match sasl {
                // Plaintext without SASL: produce responses may be written by the workers
                // that learn their commits (see `direct_answer`).
                None => {
                    let (socket, writer) = ClientSocket::new(writer);
                    serve_stream(
                        reader,
                        writer,
                        &node,
                        conn,
                        None,
                        Some(socket),
                        None,
                        shutdown,
                    )
                    .await
                }
                Some(_) => {
                    serve_stream(
                        reader,
                        writer,
                        &node,
                        conn,
                        sasl,
                        None,
                        sasl_deadline,
                        shutdown,
                    )
                    .await
                }
            }
        }
        Some(tls) => {
            let handshake_deadline = auth_deadline.min(Instant::now() + TLS_HANDSHAKE_TIMEOUT);
            let accepted =
                tokio::time::timeout_at(handshake_deadline.into(), tls.acceptor().accept(sock))
                    .await;
            let stream = match accepted {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    node.security_stats().tls_handshake_failed();
                    return Err(ConnectionEnd::TlsHandshake(e.to_string()));
                }
                Err(_) => {
                    node.security_stats().tls_handshake_failed();
                    if handshake_deadline == auth_deadline {
                        node.security_stats().authentication_timed_out();
                    }
                    return Err(ConnectionEnd::TlsHandshake("timed out".into()));
                }
            };
            if let Some(cert) = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
            {
                match crate::security::tls::certificate_principal(cert) {
                    Some(p) => conn.principal = p,
                    None => {
                        node.security_stats().tls_handshake_failed();
                        return Err(ConnectionEnd::TlsHandshake(
                            "the client certificate's subject does not parse".into(),
                        ));
                    }
                }
            }
            let (reader, writer) = tokio::io::split(stream);
            serve_stream(
                reader,
                writer,
                &node,
                conn,
                sasl,
                None,
                sasl_deadline,
                shutdown,
            )
            .await
        }
    }
}
