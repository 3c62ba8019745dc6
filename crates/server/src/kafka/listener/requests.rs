//! One connection's requests: a reader task reads frames ahead, up to
//! `max_in_flight_per_connection` requests are handled concurrently, and their responses are
//! written strictly in request order, each with its latency stages recorded; at
//! [`ShutdownPhase::Drain`] the connection reads no more, answers what it read and closes.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_proto::frame::{decode_request, Request};
use tokio::io::{AsyncRead, AsyncWrite};

use super::frames::{read_frame, write_segments};
use super::sasl::{authenticate, finish_sasl, plain_verdict, raw_token, sasl_not_enabled};
use super::{ConnectionEnd, RESPONSE_WRITE_TIMEOUT};
use crate::kafka::connection::ConnectionContext;
use crate::kafka::direct_answer::{ClientSocket, DirectAnswer};
use crate::kafka::host::ConnectionHost;
use crate::kafka::in_order::InOrder;
use crate::kafka::reply::Reply;
use crate::metrics::{NodeMetrics, Stage};
use crate::runtime::timeline::{self, Stage as Hop};
use crate::security::sasl::{Gate, SaslSession};
use crate::shutdown::{ShutdownPhase, ShutdownSignal};

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

/// Serves requests read from `reader`, answering on `writer` (and, for produces, through
/// `direct`: the same socket written by the workers, see `direct_answer`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn serve_stream<R, W, H: ConnectionHost>(
    mut reader: R,
    mut writer: W,
    node: &Arc<H>,
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
pub(super) struct ConnState {
    pub(super) conn: ConnectionContext,
    pub(super) sasl: Option<SaslSession>,
    pub(super) frame_limit: Arc<AtomicUsize>,
    /// The socket as the workers answering produces directly see it (plaintext, no SASL).
    pub(super) direct: Option<Arc<ClientSocket>>,
    /// Responses answered so far (written, or found to have nothing to write), in order.
    pub(super) answered: u64,
    /// When the connection is closed unless SASL authentication has succeeded (cleared when
    /// it has); `None`: no SASL on this listener.
    pub(super) auth_deadline: Option<Instant>,
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

async fn connection_loop<W: AsyncWrite + Unpin + Send, H: ConnectionHost>(
    node: &Arc<H>,
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
            // Not authenticated in time: closed (the deadline is cleared on success). Only
            // while reading: a connection whose client left (or that drains for shutdown)
            // closes as soon as what it owes is written, not at the deadline.
            _ = sleep_until_muted(state.auth_deadline), if reading && state.auth_deadline.is_some() => {
                node.security_stats().authentication_timed_out();
                tracing::debug!(peer = %state.conn.peer, "closing: not authenticated in time");
                return Err(ConnectionEnd::AuthenticationTimeout);
            }
            // The mute ends: reading resumes (nothing to wait for once reading stopped).
            _ = sleep_until_muted(muted_until), if reading && muted_until.is_some() => {}
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
                    let verdict = plain_verdict(&**node, state, &frame).await;
                    let outcome = raw_token(&**node, state, &frame, verdict);
                    finish_sasl(&**node, outcome, writer, write_timeout).await?;
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
                                    Request::SaslAuthenticate(r) => plain_verdict(&**node, state, &r.auth_bytes).await,
                                    _ => None,
                                };
                                let outcome = authenticate(&**node, state, &header, request, verdict);
                                finish_sasl(&**node, outcome, writer, write_timeout).await?;
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
                            finish_sasl(&**node, outcome, writer, write_timeout).await?;
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
