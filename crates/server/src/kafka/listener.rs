//! Accepting Kafka connections and running them.
//!
//! Each connection is one task that reads requests continuously and handles up to
//! `max_in_flight_per_connection` of them concurrently, while writing responses strictly in
//! request order (the protocol requires it). A frame's size is checked against
//! `request_max_bytes` before anything is allocated for it; a malformed frame closes that
//! connection only; a connection idle for `connection_idle` is closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, StreamExt};
use kafka_proto::frame::{decode_request, read_frame_size};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::kafka::connection::ConnectionContext;
use crate::kafka::handlers::{dispatch, Reply};
use crate::node::Node;

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
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (sock, peer) = tokio::select! {
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
        connections.spawn(async move {
            let _permit = permit;
            if let Err(e) = run_connection(sock, peer, node).await {
                tracing::debug!(%peer, "kafka connection closed: {e}");
            }
        });
    }
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

type ResponseFuture = BoxFuture<'static, Option<Vec<Bytes>>>;

async fn run_connection(
    sock: TcpStream,
    peer: SocketAddr,
    node: Arc<Node>,
) -> Result<(), ConnectionEnd> {
    let limits = node.config().kafka;
    sock.set_nodelay(true)?;
    let (mut reader, mut writer) = sock.into_split();
    // A reader task owns the read half: a frame is never abandoned half-read when the loop
    // below is busy writing. Its queue is small; the in-flight bound is enforced below.
    let (frames_tx, mut frames) = tokio::sync::mpsc::channel::<Result<Bytes, ConnectionEnd>>(4);
    let reader_task = tokio::spawn(async move {
        loop {
            let next = tokio::time::timeout(
                limits.connection_idle,
                read_frame(&mut reader, limits.request_max_bytes),
            )
            .await;
            let item = match next {
                Err(_) => Err(ConnectionEnd::Idle),
                Ok(Ok(Some(frame))) => Ok(frame),
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
    )
    .await;
    reader_task.abort();
    result
}

async fn connection_loop(
    node: &Arc<Node>,
    peer: SocketAddr,
    frames: &mut tokio::sync::mpsc::Receiver<Result<Bytes, ConnectionEnd>>,
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    max_in_flight: usize,
) -> Result<(), ConnectionEnd> {
    let write_timeout = node
        .config()
        .kafka
        .connection_idle
        .min(RESPONSE_WRITE_TIMEOUT);
    let mut pending: FuturesOrdered<ResponseFuture> = FuturesOrdered::new();
    let mut reading = true;
    let mut chain = crate::kafka::produce::ProduceChain::default();
    let conn = ConnectionContext::unauthenticated(peer, "PLAINTEXT");
    loop {
        // A throttled request mutes its connection (KIP-219): responses still go out, but
        // no further request is read until the mute ends.
        let muted_until = conn.mute.muted_until(std::time::Instant::now());
        let can_read = reading && pending.len() < max_in_flight && muted_until.is_none();
        tokio::select! {
            _ = sleep_until_muted(muted_until), if muted_until.is_some() => {}
            // Responses go out in request order as they complete.
            Some(response) = pending.next(), if !pending.is_empty() => {
                if let Some(segments) = response {
                    write_segments(writer, &segments, write_timeout).await?;
                }
            }
            frame = frames.recv(), if can_read => {
                let frame = match frame {
                    None => { reading = false; continue; }
                    Some(Err(e)) => return Err(e),
                    Some(Ok(frame)) => frame,
                };
                match decode_request(frame) {
                    Ok((header, request)) => {
                        // request_percentage quotas charge the time spent handling.
                        let settings = node.flow_settings();
                        let quota_client = (!settings.client_quotas.is_empty())
                            .then(|| header.client_id.clone().unwrap_or_default());
                        let started = std::time::Instant::now();
                        let reply = dispatch(node, header, request, &conn, &mut chain);
                        if let Some(client_id) = quota_client {
                            let now = std::time::Instant::now();
                            let throttle = node.flow().charge_request_time(
                                &settings,
                                conn.client(&client_id),
                                now - started,
                                now,
                            );
                            conn.mute.mute_for(throttle, now);
                        }
                        match reply {
                            Reply::Now(segments) => pending.push_back(Box::pin(async move { Some(segments) })),
                            Reply::Later(fut) => pending.push_back(fut),
                            Reply::None => pending.push_back(Box::pin(async { None })),
                            Reply::Close => {
                                flush(&mut pending, writer, write_timeout).await?;
                                return Ok(());
                            }
                        }
                    }
                    Err(err) => {
                        // ApiVersions of a newer version: answer in v0 format (KIP-511).
                        if let Some(Ok(segments)) = err.api_versions_fallback() {
                            pending.push_back(Box::pin(async move { Some(segments) }));
                            continue;
                        }
                        tracing::debug!(%peer, "closing connection: {err}");
                        // Write what is owed for earlier requests, then close.
                        flush(&mut pending, writer, write_timeout).await?;
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

/// Waits until a connection's mute ends.
async fn sleep_until_muted(until: Option<std::time::Instant>) {
    if let Some(until) = until {
        tokio::time::sleep_until(until.into()).await;
    }
}

/// Writes every response still owed, in order.
async fn flush(
    pending: &mut FuturesOrdered<ResponseFuture>,
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    write_timeout: Duration,
) -> std::io::Result<()> {
    while let Some(response) = pending.next().await {
        if let Some(segments) = response {
            write_segments(writer, &segments, write_timeout).await?;
        }
    }
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
