//! Accepting Kafka connections and running them.
//!
//! Each connection is one task that reads requests continuously and handles up to
//! `max_in_flight_per_connection` of them concurrently, while writing responses strictly in
//! request order (the protocol requires it). A frame's size is checked against
//! `request_max_bytes` before anything is allocated for it; a malformed frame closes that
//! connection only; a connection idle for `connection_idle` is closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, StreamExt};
use kafka_proto::frame::{decode_request, read_frame_size};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::kafka::connection::ConnectionContext;
use crate::kafka::handlers::{dispatch, Reply};
use crate::metrics::{NodeMetrics, Stage};
use crate::node::Node;

/// How far a listener's shutdown has gone (see [`serve_until`]).
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

/// Accepts connections on `listener` until the task is dropped; at most `max_connections` run
/// at once, and never more than the open-file budget leaves after the storage reserve
/// ([`crate::fd_budget`]); further ones wait in the accept backlog. When accept fails, it logs
/// and backs off (up to 1 s) instead of spinning.
pub async fn serve(listener: TcpListener, node: Arc<Node>) {
    // A sender kept for the whole task: the signal never fires.
    let (_keep, never) = tokio::sync::watch::channel(ShutdownPhase::Running);
    serve_until(listener, node, never).await;
}

/// Like [`serve`], with a shutdown: at [`ShutdownPhase::StopAccepting`] it closes the
/// listening socket (no new connections); at [`ShutdownPhase::Drain`] every connection reads
/// no more requests, answers those it has read and closes; it returns once all have closed
/// (a dropped sender counts as `Drain`). Callers bound the wait with a timeout.
pub async fn serve_until(listener: TcpListener, node: Arc<Node>, mut shutdown: ShutdownSignal) {
    let limits = node.config().kafka;
    let nofile = crate::fd_budget::nofile_limits().map_or(1024, |(soft, _)| soft);
    let max_connections = crate::fd_budget::client_connection_limit(limits.max_connections, nofile);
    if max_connections < limits.max_connections {
        tracing::warn!(
            configured = limits.max_connections,
            allowed = max_connections,
            open_file_limit = nofile,
            "kafka.max_connections lowered to what the open file limit allows beside storage; \
             raise the limit (e.g. LimitNOFILE) to allow more"
        );
    }
    let permits = Arc::new(Semaphore::new(max_connections));
    let mut connections = tokio::task::JoinSet::new();
    let mut backoff = Duration::from_millis(10);
    loop {
        if *shutdown.borrow() >= ShutdownPhase::StopAccepting {
            break;
        }
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
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
        let node = node.clone();
        let stop = shutdown.clone();
        connections.spawn(async move {
            let _permit = permit;
            let _gauge = crate::metrics::ConnectionGauge::open(node.metrics().clone());
            if let Err(e) = run_connection(sock, peer, node, stop).await {
                tracing::debug!(%peer, "kafka connection closed: {e}");
            }
        });
    }
    drop(listener);
    tracing::info!(
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
}

/// A response (None: nothing to send) and when it was ready.
type ResponseFuture = BoxFuture<'static, (Option<Vec<Bytes>>, Timing)>;

/// When a request went through each step, for its latency stages.
#[derive(Clone, Copy)]
struct Timing {
    api: i16,
    read_at: Instant,
    dispatched_at: Instant,
    ready_at: Instant,
}

impl Timing {
    /// Records the stages of a request whose response was written from `write_start` to
    /// `done` (both `ready_at` when nothing was written).
    fn record(&self, metrics: &NodeMetrics, write_start: Instant, done: Instant) {
        let m = |stage, d: Duration| metrics.observe_request(self.api, stage, d);
        m(Stage::Queue, self.dispatched_at - self.read_at);
        // Produce's local and remote stages are measured per Raft entry by its group.
        if self.api != kafka_proto::api::ApiKey::Produce.as_i16() {
            m(Stage::Local, self.ready_at - self.dispatched_at);
        }
        m(
            Stage::ResponseQueue,
            write_start.saturating_duration_since(self.ready_at),
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
    shutdown: ShutdownSignal,
) -> Result<(), ConnectionEnd> {
    let limits = node.config().kafka;
    sock.set_nodelay(true)?;
    let (mut reader, mut writer) = sock.into_split();
    // A reader task owns the read half: a frame is never abandoned half-read when the loop
    // below is busy writing. Its queue is small; the in-flight bound is enforced below.
    let (frames_tx, mut frames) =
        tokio::sync::mpsc::channel::<Result<(Bytes, Instant), ConnectionEnd>>(4);
    let reader_task = tokio::spawn(async move {
        loop {
            let next = tokio::time::timeout(
                limits.connection_idle,
                read_frame(&mut reader, limits.request_max_bytes),
            )
            .await;
            let item = match next {
                Err(_) => Err(ConnectionEnd::Idle),
                Ok(Ok(Some(frame))) => Ok((frame, Instant::now())),
                Ok(Ok(None)) => return,
                Ok(Err(e)) => Err(e),
            };
            let stop = item.is_err();
            if frames_tx.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    let result = connection_loop(
        &node,
        peer,
        &mut frames,
        &mut writer,
        limits.max_in_flight_per_connection,
        shutdown,
    )
    .await;
    reader_task.abort();
    result
}

async fn connection_loop(
    node: &Arc<Node>,
    peer: SocketAddr,
    frames: &mut tokio::sync::mpsc::Receiver<Result<(Bytes, Instant), ConnectionEnd>>,
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
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
    let mut pending: FuturesOrdered<ResponseFuture> = FuturesOrdered::new();
    let mut reading = *shutdown.borrow() < ShutdownPhase::Drain;
    let mut chain = crate::kafka::produce::ProduceChain::default();
    let conn = ConnectionContext::unauthenticated(peer, "PLAINTEXT");
    loop {
        let can_read = reading && pending.len() < max_in_flight;
        tokio::select! {
            // Responses go out in request order as they complete.
            Some((response, timing)) = pending.next(), if !pending.is_empty() => {
                write_timed(writer, response, timing, metrics, write_timeout).await?;
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
                let dispatched_at = Instant::now();
                let timing = move |api| Timing { api, read_at, dispatched_at, ready_at: Instant::now() };
                match decode_request(frame) {
                    Ok((header, request)) => {
                        let api = header.api_key;
                        match dispatch(node, header, request, &conn, &mut chain) {
                            Reply::Now(segments) => {
                                let t = timing(api);
                                pending.push_back(Box::pin(async move { (Some(segments), t) }));
                            }
                            Reply::Later(fut) => pending.push_back(Box::pin(async move {
                                let response = fut.await;
                                (response, timing(api))
                            })),
                            Reply::None => {
                                let t = timing(api);
                                pending.push_back(Box::pin(async move { (None, t) }));
                            }
                            Reply::Close => {
                                flush(&mut pending, writer, write_timeout, metrics).await?;
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
                        tracing::debug!(%peer, "closing connection: {err}");
                        // Write what is owed for earlier requests, then close.
                        flush(&mut pending, writer, write_timeout, metrics).await?;
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

/// Writes every response still owed, in order.
async fn flush(
    pending: &mut FuturesOrdered<ResponseFuture>,
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    write_timeout: Duration,
    metrics: &NodeMetrics,
) -> std::io::Result<()> {
    while let Some((response, timing)) = pending.next().await {
        write_timed(writer, response, timing, metrics, write_timeout).await?;
    }
    Ok(())
}

/// Writes one response (if any) and records its request's latency stages.
async fn write_timed(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
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

/// Reads one frame body; `None` at a clean end of stream between frames.
async fn read_frame(
    reader: &mut tokio::net::tcp::OwnedReadHalf,
    max_bytes: usize,
) -> Result<Option<Bytes>, ConnectionEnd> {
    let mut prefix = [0u8; 4];
    match reader.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let size = read_frame_size(prefix, max_bytes).map_err(ConnectionEnd::BadFrame)?;
    let mut buf = BytesMut::zeroed(size);
    reader.read_exact(&mut buf).await?;
    Ok(Some(buf.freeze()))
}

/// Writes one response, failing with `TimedOut` when it is not written within `timeout` (the
/// client stopped reading).
async fn write_segments(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
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

async fn write_all_segments(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
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
