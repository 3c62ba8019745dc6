//! One peer's sender task: it drains the peer's queue, batches what is waiting into one frame
//! (in the version the peer speaks), writes it, and redials with backoff when the connection
//! fails, the peer closes it, or the hello or the peer TLS files changed. A connection is kept
//! up even when Raft has nothing to send, so the peer always knows this node is alive.

use std::sync::Arc;
use std::time::Duration;

use raft::prelude::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::dial::{Link, OutStream, Outgoing};
use super::{LinkFilter, PeerInbox};
use crate::replication::direct_send::Direct;
use crate::replication::peer_wire::{self, FrameFormat, FrameWriter};
use crate::runtime::timeline::{self, Stage as Hop};

/// Most messages put into one frame.
const MAX_MESSAGES_PER_FRAME: usize = 512;
/// Bytes after which a frame is flushed even if more messages are waiting.
const FRAME_FLUSH_BYTES: usize = 4 << 20;
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(1000);

/// Runs the sender task of `link`'s peer until its queue `rx` is closed.
pub(super) async fn sender_task(
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

#[cfg(test)]
#[path = "sender_task_tests.rs"]
mod tests;
