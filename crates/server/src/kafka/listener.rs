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

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::{decode_request, read_frame_size, Request, Response};
use kafka_proto::header::RequestHeader;
use kafka_proto::messages::sasl_authenticate_response::SaslAuthenticateResponse;
use kafka_proto::messages::sasl_handshake_response::SaslHandshakeResponse;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::kafka::conn_limits::{ConnectionLimits, ListenerLimits};
use crate::kafka::connection::ConnectionContext;
use crate::kafka::direct_answer::{ClientSocket, DirectAnswer};
use crate::kafka::in_order::InOrder;
use crate::kafka::reply::{self, Reply};
use crate::metrics::{NodeMetrics, Stage};
use crate::node::Node;
use crate::runtime::timeline::{self, Stage as Hop};
use crate::security::config::KafkaListenerConfig;
use crate::security::sasl::{AuthStep, Gate, HandshakeOutcome, SaslSession};
use crate::security::tls::ReloadingServerTls;

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
pub fn connection_limits(node: &Node) -> Arc<ConnectionLimits> {
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

/// How far a listener's shutdown has gone (see [`serve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum ShutdownPhase {
    /// Serving.
    #[default]
    Running,
    /// No new connections; the open ones are still served.
    StopAccepting,
    /// Connections read no more requests: they answer those read, then close.
    Drain,
}

/// Tells a listener how far its shutdown has gone.
pub type ShutdownSignal = tokio::sync::watch::Receiver<ShutdownPhase>;

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
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
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

/// The responses a connection owes, in request order: each a response (None: nothing to
/// send) and when it was ready.
type Owed = InOrder<(Option<Vec<Bytes>>, Timing)>;

/// When a request went through each step, for its latency stages.
#[derive(Clone, Copy)]
struct Timing {
    api: i16,
    read_at: Instant,
    dispatched_at: Instant,
    ready_at: Instant,
    /// When a worker wrote the whole response itself (`direct_answer`).
    written_at: Option<Instant>,
}

impl Timing {
    /// Records the stages of a request whose response was written from `write_start` to
    /// `done` (both `ready_at` when nothing was written).
    fn record(&self, metrics: &NodeMetrics, write_start: Instant, done: Instant) {
        // Written by a worker: ready, written and done at that instant (the task may learn of
        // it only with the next frame).
        let (ready_at, write_start, done) = match self.written_at {
            Some(at) => (at, at, at),
            None => (self.ready_at, write_start, done),
        };
        let m = |stage, d: Duration| metrics.observe_request(self.api, stage, d);
        m(Stage::Queue, self.dispatched_at - self.read_at);
        // Produce's local and remote stages are measured per Raft entry by its group.
        if self.api != kafka_proto::api::ApiKey::Produce.as_i16() {
            m(
                Stage::Local,
                ready_at.saturating_duration_since(self.dispatched_at),
            );
        }
        m(
            Stage::ResponseQueue,
            write_start.saturating_duration_since(ready_at),
        );
        m(
            Stage::ResponseSend,
            done.saturating_duration_since(write_start),
        );
        m(Stage::Total, done.saturating_duration_since(self.read_at));
    }
}

async fn run_connection(
    sock: TcpStream,
    peer: SocketAddr,
    node: Arc<Node>,
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

/// Serves requests read from `reader`, answering on `writer` (and, for produces, through
/// `direct`: the same socket written by the workers, see `direct_answer`).
#[allow(clippy::too_many_arguments)]
async fn serve_stream<R, W>(
    mut reader: R,
    mut writer: W,
    node: &Arc<Node>,
    conn: ConnectionContext,
    sasl: Option<SaslSession>,
    direct: Option<Arc<ClientSocket>>,
    auth_deadline: Option<Instant>,
    shutdown: ShutdownSignal,
) -> Result<(), ConnectionEnd>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send,
{
    let limits = node.config().kafka;
    // Before SASL authentication a frame may be at most `sasl_max_receive_bytes`; the limit
    // is raised once the client is authenticated (the reader reads it for every frame).
    let frame_limit = Arc::new(AtomicUsize::new(match sasl {
        Some(_) => limits
            .request_max_bytes
            .min(node.config().security.sasl_max_receive_bytes),
        None => limits.request_max_bytes,
    }));
    // A reader task owns the read half: a frame is never abandoned half-read when the loop
    // below is busy writing. Its queue is small; the in-flight bound is enforced below.
    let (frames_tx, mut frames) =
        tokio::sync::mpsc::channel::<Result<(Bytes, Instant), ConnectionEnd>>(4);
    let reader_limit = frame_limit.clone();
    let reader_task = tokio::spawn(async move {
        loop {
            let next = tokio::time::timeout(
                limits.connection_idle,
                read_frame(&mut reader, &reader_limit),
            )
            .await;
            let item = match next {
                Err(_) => Err(ConnectionEnd::Idle),
                Ok(Ok(Some(frame))) => {
                    timeline::stamp(Hop::FrameRead, api_key_tag(&frame));
                    Ok((frame, Instant::now()))
                }
                Ok(Ok(None)) => return,
                Ok(Err(e)) => Err(e),
            };
            let stop = item.is_err();
            if frames_tx.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    let mut state = ConnState {
        conn,
        sasl,
        frame_limit,
        direct,
        answered: 0,
        auth_deadline,
    };
    let result = connection_loop(
        node,
        &mut state,
        &mut frames,
        &mut writer,
        limits.max_in_flight_per_connection,
        shutdown,
    )
    .await;
    reader_task.abort();
    result
}

/// What a connection knows about its client, and its SASL state.
struct ConnState {
    conn: ConnectionContext,
    sasl: Option<SaslSession>,
    frame_limit: Arc<AtomicUsize>,
    /// The socket as the workers answering produces directly see it (plaintext, no SASL).
    direct: Option<Arc<ClientSocket>>,
    /// Responses answered so far (written, or found to have nothing to write), in order.
    answered: u64,
    /// When the connection is closed unless SASL authentication has succeeded (cleared when
    /// it has); `None`: no SASL on this listener.
    auth_deadline: Option<Instant>,
}

impl ConnState {
    /// Notes that the next queued response has been answered, and tells the direct path.
    fn answered_one(&mut self) {
        self.answered += 1;
        if let Some(d) = &self.direct {
            d.answered(self.answered);
        }
    }
}

/// What the SASL layer decided about one frame.
enum SaslOutcome {
    /// Answer these bytes (already framed) and go on.
    Answer(Vec<Bytes>),
    /// Answer these bytes after the failed-authentication delay, then close.
    Fail(Vec<Bytes>),
    /// Close at once, without an answer.
    Close,
}

async fn connection_loop<W: AsyncWrite + Unpin + Send>(
    node: &Arc<Node>,
    state: &mut ConnState,
    frames: &mut tokio::sync::mpsc::Receiver<Result<(Bytes, Instant), ConnectionEnd>>,
    writer: &mut W,
    max_in_flight: usize,
    mut shutdown: ShutdownSignal,
) -> Result<(), ConnectionEnd> {
    let metrics = node.metrics().clone();
    let metrics = &*metrics;
    let write_timeout = node
        .config()
        .kafka
        .connection_idle
        .min(RESPONSE_WRITE_TIMEOUT);
    let mut pending: Owed = InOrder::default();
    let mut reading = *shutdown.borrow() < ShutdownPhase::Drain;
    let mut chain = crate::kafka::produce::ProduceChain::default();
    loop {
        // A throttled request mutes its connection (KIP-219): responses still go out, but
        // no further request is read until the mute ends.
        let muted_until = state.conn.mute.muted_until(Instant::now());
        let can_read = reading && pending.len() < max_in_flight && muted_until.is_none();
        if let Some(direct) = &state.direct {
            // Reading on, and owing no response but the one in flight: a worker that answers
            // it may leave this task's wake-up to the next frame (see `direct_answer`).
            direct.defer_wakes(can_read && pending.len() <= 1);
        }
        tokio::select! {
            // Not authenticated in time: closed (the deadline is cleared on success).
            _ = sleep_until_muted(state.auth_deadline), if state.auth_deadline.is_some() => {
                node.security_stats().authentication_timed_out();
                tracing::debug!(peer = %state.conn.peer, "closing: not authenticated in time");
                return Err(ConnectionEnd::AuthenticationTimeout);
            }
            _ = sleep_until_muted(muted_until), if muted_until.is_some() => {}
            // Responses go out in request order as they complete.
            Some((response, timing)) = pending.next_done(), if !pending.is_empty() => {
                let api = u64::from(timing.api.unsigned_abs());
                // (A response written directly by a worker is stamped there.)
                let stamp = response.is_some();
                if stamp {
                    timeline::stamp(Hop::ResponseReady, api);
                }
                write_timed(writer, response, timing, metrics, write_timeout).await?;
                state.answered_one();
                if stamp {
                    timeline::stamp(Hop::ResponseWritten, api);
                }
            }
            // Shutting down: read no more requests; answer those read, then close.
            // (A dropped sender counts as a shutdown.)
            changed = shutdown.changed(), if reading => {
                reading = changed.is_ok() && *shutdown.borrow() < ShutdownPhase::Drain;
            }
            frame = frames.recv(), if can_read => {
                let (frame, read_at) = match frame {
                    None => { reading = false; continue; }
                    Some(Err(e)) => return Err(e),
                    Some(Ok(frame)) => frame,
                };
                timeline::stamp(Hop::Dispatched, api_key_tag(&frame));
                let dispatched_at = Instant::now();
                let timing = move |api| Timing { api, read_at, dispatched_at, ready_at: Instant::now(), written_at: None };
                // After a v0 SaslHandshake the tokens come as bare frames.
                if state.sasl.as_ref().is_some_and(SaslSession::expects_raw_token) {
                    flush(&mut pending, writer, state, write_timeout, metrics).await?;
                    let verdict = plain_verdict(node, state, &frame).await;
                    let outcome = raw_token(node, state, &frame, verdict);
                    finish_sasl(node, outcome, writer, write_timeout).await?;
                    continue;
                }
                match decode_request(frame) {
                    Ok((header, request)) => {
                        let api = request.api_key();
                        let gate = match &state.sasl {
                            Some(s) => s.gate(api, Instant::now()),
                            None => Gate::Serve,
                        };
                        match gate {
                            Gate::Serve => {}
                            Gate::Authenticate => {
                                // One at a time, after what is owed for earlier requests.
                                flush(&mut pending, writer, state, write_timeout, metrics).await?;
                                let verdict = match &request {
                                    Request::SaslAuthenticate(r) => plain_verdict(node, state, &r.auth_bytes).await,
                                    _ => None,
                                };
                                let outcome = authenticate(node, state, &header, request, verdict);
                                finish_sasl(node, outcome, writer, write_timeout).await?;
                                continue;
                            }
                            Gate::Close => {
                                let expired = state.sasl.as_ref().is_some_and(SaslSession::is_authenticated);
                                if expired {
                                    node.security_stats().expired_session();
                                } else {
                                    node.security_stats().unauthenticated_request();
                                }
                                tracing::debug!(peer = %state.conn.peer, ?api, expired, "closing: request before authentication");
                                flush(&mut pending, writer, state, write_timeout, metrics).await?;
                                return Err(ConnectionEnd::NotAuthenticated(api));
                            }
                        }
                        if state.sasl.is_none() && matches!(request, Request::SaslHandshake(_) | Request::SaslAuthenticate(_)) {
                            // SASL on a listener without it: ILLEGAL_SASL_STATE, as Kafka.
                            let outcome = sasl_not_enabled(&header, api);
                            finish_sasl(node, outcome, writer, write_timeout).await?;
                            continue;
                        }
                        // request_percentage quotas charge the time spent handling.
                        let settings = node.flow_settings();
                        let quota_client = (!settings.client_quotas.is_empty())
                            .then(|| header.client_id.clone().unwrap_or_default());
                        let started = Instant::now();
                        // This request's response will be the next after those queued.
                        let direct = state.direct.as_ref().map(|socket| DirectAnswer {
                            socket: Arc::downgrade(socket),
                            seq: state.answered + pending.len() as u64,
                        });
                        let reply = crate::kafka::handlers::dispatch(node, header, request, &state.conn, &mut chain, direct);
                        if let Some(client_id) = quota_client {
                            let now = Instant::now();
                            let throttle = node.flow().charge_request_time(
                                &settings,
                                state.conn.client(&client_id),
                                now - started,
                                now,
                            );
                            state.conn.mute.mute_for(throttle, now);
                        }
                        let api = api.as_i16();
                        match reply {
                            Reply::Now(segments) => {
                                let t = timing(api);
                                pending.push_back(Box::pin(async move { (Some(segments), t) }));
                            }
                            Reply::Later(fut) => pending.push_back(Box::pin(async move {
                                let response = fut.await;
                                (response, timing(api))
                            })),
                            Reply::Direct(fut) => pending.push_back(Box::pin(async move {
                                let (response, written_at) = fut.await;
                                (response, Timing { written_at, ..timing(api) })
                            })),
                            Reply::None => {
                                let t = timing(api);
                                pending.push_back(Box::pin(async move { (None, t) }));
                            }
                            Reply::Close => {
                                flush(&mut pending, writer, state, write_timeout, metrics).await?;
                                return Ok(());
                            }
                        }
                    }
                    Err(err) => {
                        // ApiVersions of a newer version: answer in v0 format (KIP-511).
                        if let Some(Ok(segments)) = err.api_versions_fallback() {
                            let t = timing(kafka_proto::api::ApiKey::ApiVersions.as_i16());
                            pending.push_back(Box::pin(async move { (Some(segments), t) }));
                            continue;
                        }
                        tracing::debug!(peer = %state.conn.peer, "closing connection: {err}");
                        // Write what is owed for earlier requests, then close.
                        flush(&mut pending, writer, state, write_timeout, metrics).await?;
                        return Err(ConnectionEnd::BadRequest(err));
                    }
                }
            }
            else => {
                // The client closed its side and every response is written.
                return Ok(());
            }
        }
    }
}

/// The timeline tag of a request frame: its API key (the frame's first two bytes).
fn api_key_tag(frame: &[u8]) -> u64 {
    frame.get(..2).map_or(u64::MAX >> 8, |b| {
        u64::from(u16::from_be_bytes([b[0], b[1]]))
    })
}

/// Waits until `until` (a connection's mute end, or its authentication deadline).
async fn sleep_until_muted(until: Option<Instant>) {
    if let Some(until) = until {
        tokio::time::sleep_until(until.into()).await;
    }
}

/// Writes what the SASL layer decided: an answer, or (after the delay) a failure and the end
/// of the connection.
async fn finish_sasl<W: AsyncWrite + Unpin>(
    node: &Node,
    outcome: SaslOutcome,
    writer: &mut W,
    write_timeout: Duration,
) -> Result<(), ConnectionEnd> {
    match outcome {
        SaslOutcome::Answer(segments) => {
            write_segments(writer, &segments, write_timeout).await?;
            Ok(())
        }
        SaslOutcome::Fail(segments) => {
            tokio::time::sleep(node.config().security.failed_authentication_delay).await;
            write_segments(writer, &segments, write_timeout).await?;
            let _ = writer.flush().await;
            let _ = writer.shutdown().await;
            Err(ConnectionEnd::AuthenticationFailed)
        }
        SaslOutcome::Close => Err(ConnectionEnd::AuthenticationFailed),
    }
}

fn encoded(header: &RequestHeader, response: Response) -> Option<Vec<Bytes>> {
    reply::frame(header.correlation_id, header.api_version, &response)
}

/// SaslHandshake / SaslAuthenticate on a listener without SASL.
fn sasl_not_enabled(header: &RequestHeader, api: kafka_proto::api::ApiKey) -> SaslOutcome {
    let response = if api == kafka_proto::api::ApiKey::SaslHandshake {
        Response::SaslHandshake(SaslHandshakeResponse {
            error_code: ErrorCode::IllegalSaslState.code(),
            mechanisms: Vec::new(),
        })
    } else {
        Response::SaslAuthenticate(SaslAuthenticateResponse {
            error_code: ErrorCode::IllegalSaslState.code(),
            error_message: Some("SASL is not enabled on this listener".into()),
            ..Default::default()
        })
    };
    encoded(header, response).map_or(SaslOutcome::Close, SaslOutcome::Fail)
}

/// Records a completed authentication on the connection.
fn authenticated(
    node: &Node,
    state: &mut ConnState,
    principal: crate::security::Principal,
    reauth: bool,
) {
    node.security_stats().authenticated(reauth);
    tracing::debug!(peer = %state.conn.peer, %principal, reauth, "SASL authentication succeeded");
    state.conn.principal = principal;
    state.auth_deadline = None;
    state
        .frame_limit
        .store(node.config().kafka.request_max_bytes, Ordering::Relaxed);
}

/// When `token` is a PLAIN message the session expects: whether its password is the user's,
/// checked off the runtime threads through the process-wide gate
/// ([`crate::security::password`]; a full gate refuses the login).
async fn plain_verdict(node: &Node, state: &ConnState, token: &[u8]) -> Option<bool> {
    let (user, password) = state.sasl.as_ref()?.plain_attempt(token)?;
    match crate::security::password::verify_user(node, &user, password).await {
        Ok(ok) => Some(ok),
        Err(e) => {
            tracing::warn!(peer = %state.conn.peer, "PLAIN login refused: {e}");
            Some(false)
        }
    }
}

/// The credentials of `node`, with a PLAIN verdict computed beforehand ([`plain_verdict`]).
struct NodeLookup<'a> {
    node: &'a Node,
    plain: Option<bool>,
}

impl crate::security::sasl::CredentialLookup for NodeLookup<'_> {
    fn credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::ScramMechanism,
    ) -> Option<crate::security::scram::ScramCredential> {
        self.node.scram_credential(user, mechanism)
    }

    fn password_matches(&self, _user: &str, _password: &str) -> bool {
        // Never derive here (on a runtime thread): no verdict means refused.
        self.plain.unwrap_or(false)
    }
}

/// Handles SaslHandshake or SaslAuthenticate on a SASL listener.
fn authenticate(
    node: &Node,
    state: &mut ConnState,
    header: &RequestHeader,
    request: Request,
    plain: Option<bool>,
) -> SaslOutcome {
    let Some(sasl) = state.sasl.as_mut() else {
        return SaslOutcome::Close;
    };
    match request {
        Request::SaslHandshake(req) => {
            let outcome = sasl.handshake(&req.mechanism, header.api_version);
            let error_code = match outcome {
                HandshakeOutcome::Accepted => ErrorCode::None,
                HandshakeOutcome::Unsupported => ErrorCode::UnsupportedSaslMechanism,
                HandshakeOutcome::IllegalState => ErrorCode::IllegalSaslState,
            };
            let response = Response::SaslHandshake(SaslHandshakeResponse {
                error_code: error_code.code(),
                mechanisms: sasl.enabled_names(),
            });
            match (encoded(header, response), outcome) {
                (Some(s), HandshakeOutcome::Accepted) => SaslOutcome::Answer(s),
                (Some(s), _) => {
                    node.security_stats().authentication_failed();
                    SaslOutcome::Fail(s)
                }
                (None, _) => SaslOutcome::Close,
            }
        }
        Request::SaslAuthenticate(req) => {
            let lookup = NodeLookup { node, plain };
            let reauth = sasl.is_authenticated();
            let step = sasl.authenticate(&req.auth_bytes, &lookup, Instant::now());
            let mut response = SaslAuthenticateResponse::default();
            let fail = match step {
                AuthStep::Challenge(bytes) => {
                    response.auth_bytes = Bytes::from(bytes);
                    false
                }
                AuthStep::Done {
                    response: bytes,
                    principal,
                    session_lifetime_ms,
                } => {
                    response.auth_bytes = Bytes::from(bytes);
                    response.session_lifetime_ms = session_lifetime_ms;
                    authenticated(node, state, principal, reauth);
                    false
                }
                AuthStep::Failed(message) => {
                    response.error_code = ErrorCode::SaslAuthenticationFailed.code();
                    response.error_message = Some(message);
                    true
                }
                AuthStep::IllegalState => {
                    response.error_code = ErrorCode::IllegalSaslState.code();
                    response.error_message = Some(
                        "Unexpected SaslAuthenticate request: no SaslHandshake before it".into(),
                    );
                    true
                }
            };
            match encoded(header, Response::SaslAuthenticate(response)) {
                Some(s) if fail => {
                    node.security_stats().authentication_failed();
                    SaslOutcome::Fail(s)
                }
                Some(s) => SaslOutcome::Answer(s),
                None => SaslOutcome::Close,
            }
        }
        _ => SaslOutcome::Close,
    }
}

/// Handles a bare token after a v0 SaslHandshake: the answer is a bare length-prefixed token;
/// a failure closes the connection without an answer (there is no error field), after the
/// delay.
fn raw_token(node: &Node, state: &mut ConnState, token: &[u8], plain: Option<bool>) -> SaslOutcome {
    let Some(sasl) = state.sasl.as_mut() else {
        return SaslOutcome::Close;
    };
    let lookup = NodeLookup { node, plain };
    let reauth = sasl.is_authenticated();
    let bare = |bytes: Vec<u8>| {
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        vec![
            Bytes::copy_from_slice(&len.to_be_bytes()),
            Bytes::from(bytes),
        ]
    };
    match sasl.authenticate(token, &lookup, Instant::now()) {
        AuthStep::Challenge(bytes) => SaslOutcome::Answer(bare(bytes)),
        AuthStep::Done {
            response,
            principal,
            ..
        } => {
            authenticated(node, state, principal, reauth);
            SaslOutcome::Answer(bare(response))
        }
        AuthStep::Failed(_) | AuthStep::IllegalState => {
            node.security_stats().authentication_failed();
            SaslOutcome::Fail(Vec::new())
        }
    }
}

/// Writes every response still owed, in order.
async fn flush<W: AsyncWrite + Unpin>(
    pending: &mut Owed,
    writer: &mut W,
    state: &mut ConnState,
    write_timeout: Duration,
    metrics: &NodeMetrics,
) -> std::io::Result<()> {
    if let Some(direct) = &state.direct {
        // Waiting for every response: none may wait for a frame to be counted.
        direct.defer_wakes(false);
    }
    while let Some((response, timing)) = pending.next_done().await {
        write_timed(writer, response, timing, metrics, write_timeout).await?;
        state.answered_one();
    }
    Ok(())
}

/// Writes one response (if any) and records its request's latency stages.
async fn write_timed<W: AsyncWrite + Unpin>(
    writer: &mut W,
    response: Option<Vec<Bytes>>,
    timing: Timing,
    metrics: &NodeMetrics,
    write_timeout: Duration,
) -> std::io::Result<()> {
    let write_start = Instant::now();
    if let Some(segments) = response {
        write_segments(writer, &segments, write_timeout).await?;
    }
    timing.record(metrics, write_start, Instant::now());
    Ok(())
}

/// Reads one frame body of at most `max_bytes` (read when the frame's size arrives); `None`
/// at a clean end of stream between frames.
async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_bytes: &AtomicUsize,
) -> Result<Option<Bytes>, ConnectionEnd> {
    let mut prefix = [0u8; 4];
    match reader.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let size = read_frame_size(prefix, max_bytes.load(Ordering::Relaxed))
        .map_err(ConnectionEnd::BadFrame)?;
    let mut buf = BytesMut::zeroed(size);
    reader.read_exact(&mut buf).await?;
    Ok(Some(buf.freeze()))
}

/// Writes one response, failing with `TimedOut` when it is not written within `timeout` (the
/// client stopped reading).
async fn write_segments<W: AsyncWrite + Unpin>(
    writer: &mut W,
    segments: &[Bytes],
    timeout: Duration,
) -> std::io::Result<()> {
    tokio::time::timeout(timeout, write_all_segments(writer, segments))
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client did not read its response in time",
            )
        })?
}

async fn write_all_segments<W: AsyncWrite + Unpin>(
    writer: &mut W,
    segments: &[Bytes],
) -> std::io::Result<()> {
    // Vectored writes: record chunks go out without being copied into one buffer.
    let mut slices: Vec<std::io::IoSlice<'_>> =
        segments.iter().map(|s| std::io::IoSlice::new(s)).collect();
    let mut bufs: &mut [std::io::IoSlice<'_>] = &mut slices;
    while !bufs.is_empty() {
        let n = writer.write_vectored(bufs).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frame limit is read when each frame's size arrives: a size above it (the
    /// pre-authentication limit) is refused before anything is allocated or read, and raising
    /// the limit (after authentication) admits the same size.
    #[tokio::test]
    async fn frame_limits_are_checked_before_reading_the_body() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let limit = AtomicUsize::new(1024);
        // A 1 MiB frame claimed by its size alone: refused, its body never sent.
        client.write_all(&(1u32 << 20).to_be_bytes()).await.unwrap();
        assert!(matches!(
            read_frame(&mut server, &limit).await,
            Err(ConnectionEnd::BadFrame(_))
        ));
        // Within the limit: read whole.
        let (mut client, mut server) = tokio::io::duplex(4096);
        client.write_all(&5u32.to_be_bytes()).await.unwrap();
        client.write_all(b"hello").await.unwrap();
        let frame = read_frame(&mut server, &limit).await.unwrap().unwrap();
        assert_eq!(&frame[..], b"hello");
        // 2000 bytes: too large before authentication, fine once the limit is raised.
        client.write_all(&2000u32.to_be_bytes()).await.unwrap();
        assert!(read_frame(&mut server, &limit).await.is_err());
        let (mut client, mut server) = tokio::io::duplex(4096);
        limit.store(1 << 20, Ordering::Relaxed);
        let writer = tokio::spawn(async move {
            client.write_all(&2000u32.to_be_bytes()).await.unwrap();
            client.write_all(&[7u8; 2000]).await.unwrap();
            client
        });
        let frame = read_frame(&mut server, &limit).await.unwrap().unwrap();
        assert_eq!(frame.len(), 2000);
        drop(writer.await.unwrap());
        // A clean end of stream between frames is no error.
        assert!(read_frame(&mut server, &limit).await.unwrap().is_none());
    }
}
