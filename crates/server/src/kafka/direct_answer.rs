//! Direct answers: the Raft group's worker that learns a produce is committed writes the
//! response to the client's socket itself, instead of waking the connection's task to do it.
//!
//! Why: on the synchronous produce path the answer crossed one more hand-off after the commit:
//! the worker sent the outcome on a channel, a parked tokio worker was woken (a futex call on
//! each side), the connection task built the response and wrote it. The timeline
//! (`docs/benchmarks.md`) measured 38-52 us from "answered" to "response written". A
//! non-blocking write from the worker that already has the outcome costs the write syscall.
//!
//! Rules that keep a connection's responses in request order, each written whole exactly once:
//! - Each response a connection owes has a sequence number: its position among the entries
//!   the connection task queued (`answered + pending`). The task publishes how many entries
//!   it has answered ([`ClientSocket::answered`]) after writing each one (or finding it had
//!   nothing to write).
//! - A worker writes response `seq` only when the task has answered every earlier one
//!   (`answered == seq`): then the task is not writing (it writes entry `seq - 1` before it
//!   publishes `seq`) and it will not write anything later than `seq` before `seq`'s future
//!   completes, which happens after the hook has finished writing.
//! - Writes are non-blocking. What the socket did not take (a full buffer, or an error) is
//!   handed back through the request's [`DirectSlot`] and written by the task, as the next
//!   bytes of the stream, so a response is never split around another.
//! - Each request's [`DirectSlot`] is claimed once: by the hook (it wrote, handed back, or
//!   declined and left the outcome) or by the task when the request times out first (the
//!   hook then does nothing).
//! - Only plaintext connections without SASL have a [`ClientSocket`]; TLS and SASL
//!   connections are always answered by their task.
//! - A worker that other groups are queued for leaves the write to the task
//!   ([`crate::runtime::others_waiting`]): the write syscall would delay their turns. Measured
//!   (docs/benchmarks.md): writing from busy workers cost 8 partitions x 8 producers 2-14% of
//!   its throughput; with this rule it is level.
//!
//! Deferred wake-ups: after a whole response is written, the task has nothing left to do for
//! it but count it, so the worker need not wake it (a futex call on each side in this
//! machine's VM) when the task will run anyway before that count matters. The task says so
//! at the top of each turn of its loop ([`ClientSocket::defer_wakes`]): allowed while it
//! reads further requests (a new frame, the client closing, or a shutdown wakes it) and owes
//! no other response; then the worker wakes nobody, and the task finds the request settled
//! the next time it polls its owed responses (it polls all of them whenever it runs, see
//! `in_order`). Not allowed (a response queued behind, the in-flight limit reached, a mute, a
//! drain, a flush), the worker wakes it at once. The permission is read and written under
//! one lock, after the worker settled the request and before the task polls: a worker that
//! saw the permission settled the request before the task's next poll.

use std::future::Future;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{ready, Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

use crate::replication::group::{AppendError, Appended};
use crate::runtime::timeline::{self, Stage as Hop};

/// The write half of a plaintext client connection, shared by its task (through
/// [`SharedWriter`]) and the workers answering its produces.
pub struct ClientSocket {
    write: Arc<OwnedWriteHalf>,
    /// How many of the connection's queued responses the task has answered (written, or had
    /// none to write). A worker may write response `seq` only when this equals `seq`.
    answered: AtomicU64,
    /// Whether a worker may leave the task's wake-up to the task's next run (see the module
    /// docs): the task will run, and poll its owed responses, before a written response's
    /// count matters.
    may_defer: Mutex<bool>,
}

impl ClientSocket {
    /// Shares `write` between the connection task (the returned [`SharedWriter`]) and the
    /// workers (the returned socket).
    pub fn new(write: OwnedWriteHalf) -> (Arc<ClientSocket>, SharedWriter) {
        let write = Arc::new(write);
        let socket = Arc::new(ClientSocket {
            write: Arc::clone(&write),
            answered: AtomicU64::new(0),
            may_defer: Mutex::new(false),
        });
        (socket, SharedWriter { write })
    }

    /// The task answered its `count`-th response (every earlier one included).
    pub fn answered(&self, count: u64) {
        self.answered.store(count, Ordering::Release);
    }

    /// Called by the task at the top of each turn of its loop, before it polls its owed
    /// responses: whether workers may leave its wake-up to its next run (it reads further
    /// requests and owes no response but the one in flight).
    pub fn defer_wakes(&self, may_defer: bool) {
        *self.may_defer.lock().unwrap_or_else(|p| p.into_inner()) = may_defer;
    }

    /// A worker's wake-up of a request answered whole: skipped when the task allows.
    fn wake_after_written(&self, waker: Waker) {
        let may_defer = *self.may_defer.lock().unwrap_or_else(|p| p.into_inner());
        if !may_defer {
            waker.wake();
        }
    }

    /// Whether response `seq` is the next one the stream takes.
    fn is_next(&self, seq: u64) -> bool {
        self.answered.load(Ordering::Acquire) == seq
    }

    /// Writes `frame` without blocking; returns the bytes the socket did not take (empty when
    /// it took them all). An error leaves the rest for the task, whose write reports it.
    fn write_now(&self, frame: &[Bytes]) -> Vec<Bytes> {
        let stream: &TcpStream = (*self.write).as_ref();
        let mut slices: Vec<IoSlice<'_>> = frame.iter().map(|b| IoSlice::new(b)).collect();
        let mut bufs: &mut [IoSlice<'_>] = &mut slices;
        let mut written = 0usize;
        while !bufs.is_empty() {
            match stream.try_write_vectored(bufs) {
                Ok(0) => break,
                Ok(n) => {
                    written += n;
                    IoSlice::advance_slices(&mut bufs, n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        rest_after(frame, written)
    }
}

/// The segments of `frame` after its first `written` bytes.
fn rest_after(frame: &[Bytes], mut written: usize) -> Vec<Bytes> {
    let mut rest = Vec::new();
    for b in frame {
        if written >= b.len() {
            written -= b.len();
        } else {
            rest.push(b.slice(written..));
            written = 0;
        }
    }
    rest
}

/// The connection task's writer over a [`ClientSocket`]'s write half: an [`AsyncWrite`] that
/// waits for the socket to be writable and writes without taking the half exclusively.
pub struct SharedWriter {
    write: Arc<OwnedWriteHalf>,
}

impl SharedWriter {
    fn stream(&self) -> &TcpStream {
        (*self.write).as_ref()
    }

    /// Waits until the socket is writable and runs `write` on it, until it does not block.
    fn poll_writing(
        &self,
        cx: &mut Context<'_>,
        write: impl Fn(&TcpStream) -> std::io::Result<usize>,
    ) -> Poll<std::io::Result<usize>> {
        loop {
            ready!(self.stream().poll_write_ready(cx))?;
            match write(self.stream()) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }
}

impl AsyncWrite for SharedWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.poll_writing(cx, |s| s.try_write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.poll_writing(cx, |s| s.try_write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Shuts the write side down (the read half stays open), as the owned half would.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // SAFETY: shutdown(2) on the socket this half owns; no memory is passed.
        let rc = unsafe { libc::shutdown(self.stream().as_raw_fd(), libc::SHUT_WR) };
        Poll::Ready(if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        })
    }
}

/// What became of one request's direct answer.
#[derive(Debug)]
enum SlotState {
    /// Nobody has claimed it yet; the task's waker once it has looked.
    Open(Option<Waker>),
    /// The task gave up waiting (the request timed out) and answers itself.
    GivenUp,
    /// The hook could not write (an earlier response was still owed, the connection is gone,
    /// or encoding failed): the task answers from this outcome.
    Declined(Result<Appended, AppendError>),
    /// The hook wrote the whole response; the partition's error code, for the produce chain,
    /// and when it was written.
    Written(i16, Instant),
    /// The hook started the response; the task writes these bytes next. With the error code.
    Left(Vec<Bytes>, i16),
    /// The task has taken what the hook left.
    Taken,
}

/// What the connection task does with a request whose answer may have been written directly.
#[derive(Debug)]
pub enum Settled {
    /// Build and write the response from this outcome, as without a direct path.
    Answer(Result<Appended, AppendError>),
    /// Already written whole (at that instant); the partition's error code.
    Written(i16, Instant),
    /// Write these bytes (the rest of the response) next; the partition's error code.
    Rest(Vec<Bytes>, i16),
}

/// One produce request's claim on its direct answer, shared by its hook and its task.
#[derive(Debug)]
pub struct DirectSlot(Mutex<SlotState>);

impl DirectSlot {
    /// An unclaimed slot.
    pub fn new() -> Arc<DirectSlot> {
        Arc::new(DirectSlot(Mutex::new(SlotState::Open(None))))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The hook's side, with the append's outcome: when the slot is open and response `seq`
    /// is the next one `socket` takes, encodes the response (`encode`, which also returns the
    /// partition's error code) and writes it; otherwise leaves the outcome to the task. Runs
    /// on a worker; never blocks on the socket.
    pub fn answer(
        &self,
        socket: &Weak<ClientSocket>,
        seq: u64,
        outcome: Result<Appended, AppendError>,
        encode: impl FnOnce(&Result<Appended, AppendError>) -> Option<(Vec<Bytes>, i16)>,
    ) {
        let mut state = self.lock();
        let waker = match &mut *state {
            SlotState::Open(waker) => waker.take(),
            _ => return,
        };
        // A worker other groups are waiting for leaves the write to the connection's task.
        let written = socket
            .upgrade()
            .filter(|s| s.is_next(seq) && !crate::runtime::others_waiting())
            .and_then(|s| encode(&outcome).map(|(frame, code)| (s, frame, code)))
            .map(|(s, frame, code)| (s.write_now(&frame), code, s));
        match written {
            Some((rest, code, socket)) if rest.is_empty() => {
                timeline::stamp(Hop::ResponseWritten, 0);
                *state = SlotState::Written(code, Instant::now());
                drop(state);
                if let Some(w) = waker {
                    socket.wake_after_written(w);
                }
            }
            Some((rest, code, _)) => {
                *state = SlotState::Left(rest, code);
                drop(state);
                if let Some(w) = waker {
                    w.wake();
                }
            }
            None => {
                *state = SlotState::Declined(outcome);
                drop(state);
                if let Some(w) = waker {
                    w.wake();
                }
            }
        }
    }

    /// The task's side: waits until the hook has settled the request, or `timeout` passed
    /// (then the task claims the slot and answers REQUEST_TIMED_OUT; the hook does nothing).
    pub async fn settled(&self, timeout: Duration) -> Settled {
        let sleep = tokio::time::sleep(timeout);
        tokio::pin!(sleep);
        std::future::poll_fn(|cx| {
            let timed_out = sleep.as_mut().poll(cx).is_ready();
            let mut state = self.lock();
            match std::mem::replace(&mut *state, SlotState::Taken) {
                SlotState::Open(_) if timed_out => {
                    *state = SlotState::GivenUp;
                    Poll::Ready(Settled::Answer(Err(AppendError::Timeout)))
                }
                SlotState::Open(_) => {
                    *state = SlotState::Open(Some(cx.waker().clone()));
                    Poll::Pending
                }
                SlotState::Declined(outcome) => Poll::Ready(Settled::Answer(outcome)),
                SlotState::Written(code, at) => Poll::Ready(Settled::Written(code, at)),
                SlotState::Left(rest, code) => Poll::Ready(Settled::Rest(rest, code)),
                SlotState::GivenUp | SlotState::Taken => {
                    unreachable!("a slot is settled for its task once")
                }
            }
        })
        .await
    }
}

/// What a connection hands the produce handler so it may answer directly: the socket, and
/// the sequence number the request's response will have.
#[derive(Clone)]
pub struct DirectAnswer {
    /// The connection's socket (weak: a hook never keeps a closed connection's socket open).
    pub socket: Weak<ClientSocket>,
    /// The response's position among the connection's responses.
    pub seq: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn appended() -> Result<Appended, AppendError> {
        Ok(Appended {
            raft_index: 1,
            base_offset: 0,
            offset_count: 1,
        })
    }

    #[test]
    fn rest_after_skips_whole_and_partial_segments() {
        let frame = vec![Bytes::from_static(b"abc"), Bytes::from_static(b"defg")];
        assert_eq!(rest_after(&frame, 0), frame);
        assert_eq!(
            rest_after(&frame, 2),
            vec![Bytes::from_static(b"c"), Bytes::from_static(b"defg")]
        );
        assert_eq!(rest_after(&frame, 3), vec![Bytes::from_static(b"defg")]);
        assert_eq!(rest_after(&frame, 5), vec![Bytes::from_static(b"fg")]);
        assert!(rest_after(&frame, 7).is_empty());
    }

    /// The task claims a slot the hook has not reached (a timeout): the hook, coming later,
    /// writes nothing.
    #[tokio::test]
    async fn a_slot_given_up_by_the_task_is_not_written_by_the_hook() {
        let (socket, _peer) = connected_socket().await;
        let slot = DirectSlot::new();
        let settled = slot.settled(Duration::from_millis(1)).await;
        assert!(matches!(
            settled,
            Settled::Answer(Err(AppendError::Timeout))
        ));
        let mut encoded = false;
        slot.answer(&Arc::downgrade(&socket), 0, appended(), |_| {
            encoded = true;
            Some((vec![Bytes::from_static(b"x")], 0))
        });
        assert!(!encoded, "a given-up slot is left alone");
    }

    /// A response behind one the task still owes is declined (its outcome left to the task);
    /// the next one in order is written whole and arrives on the socket.
    #[tokio::test]
    async fn only_the_next_response_in_order_is_written_directly() {
        use tokio::io::AsyncReadExt;
        let (socket, mut peer) = connected_socket().await;
        let weak = Arc::downgrade(&socket);
        let behind = DirectSlot::new();
        behind.answer(&weak, 1, appended(), |_| {
            Some((vec![Bytes::from_static(b"late")], 0))
        });
        let settled = behind.settled(Duration::from_secs(5)).await;
        assert!(matches!(settled, Settled::Answer(Ok(_))));
        let next = DirectSlot::new();
        next.answer(&weak, 0, appended(), |_| {
            Some((
                vec![Bytes::from_static(b"resp"), Bytes::from_static(b"onse")],
                7,
            ))
        });
        let settled = next.settled(Duration::from_secs(5)).await;
        assert!(matches!(settled, Settled::Written(7, _)));
        let mut got = [0u8; 8];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"response");
        // Once the task has answered the first, the second's position comes up.
        socket.answered(1);
        assert!(socket.is_next(1));
    }

    /// A closed connection (its socket dropped) declines.
    #[tokio::test]
    async fn a_closed_connection_declines() {
        let (socket, _peer) = connected_socket().await;
        let weak = Arc::downgrade(&socket);
        drop(socket);
        let slot = DirectSlot::new();
        slot.answer(&weak, 0, appended(), |_| {
            Some((vec![Bytes::from_static(b"x")], 0))
        });
        let settled = slot.settled(Duration::from_secs(5)).await;
        assert!(matches!(settled, Settled::Answer(Ok(_))));
    }

    /// A task waiting on its slot is woken at once when it does not allow deferring; when it
    /// does, nobody wakes it and it finds the request settled at its next poll.
    #[tokio::test]
    async fn a_written_answer_wakes_the_task_only_when_it_does_not_defer() {
        use std::sync::atomic::AtomicUsize;
        struct CountWake(AtomicUsize);
        impl std::task::Wake for CountWake {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (socket, _peer) = connected_socket().await;
        let weak = Arc::downgrade(&socket);
        for (seq, defer) in [(0u64, false), (1, true)] {
            socket.defer_wakes(defer);
            let count = Arc::new(CountWake(AtomicUsize::new(0)));
            let waker = Waker::from(Arc::clone(&count));
            let mut cx = Context::from_waker(&waker);
            let slot = DirectSlot::new();
            let mut settled = Box::pin(slot.settled(Duration::from_secs(5)));
            assert!(settled.as_mut().poll(&mut cx).is_pending());
            slot.answer(&weak, seq, appended(), |_| {
                Some((vec![Bytes::from_static(b"r")], 0))
            });
            assert_eq!(
                count.0.load(Ordering::SeqCst),
                usize::from(!defer),
                "defer {defer}"
            );
            assert!(matches!(
                settled.as_mut().poll(&mut cx),
                Poll::Ready(Settled::Written(0, _))
            ));
            socket.answered(seq + 1);
        }
    }

    async fn connected_socket() -> (Arc<ClientSocket>, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (_read, write) = accepted.unwrap().0.into_split();
        let (socket, _writer) = ClientSocket::new(write);
        (socket, client.unwrap())
    }
}
