//! Direct peer writes: a Raft group's worker writes its messages to a peer's socket itself
//! when the link is idle, instead of waking the peer's sender task to do it.
//!
//! Why: on the synchronous produce path a message crosses two such hand-offs (the leader's
//! appends, the follower's acknowledgement). The timeline (`docs/benchmarks.md`, "Where a
//! batch-1 produce spends its time") measured 40-50 us from the leader queuing its appends to
//! the sender task writing them, most of it waking a parked tokio worker; a non-blocking write
//! from the worker that already has the message costs the write syscall only.
//!
//! Rules that keep the link's stream of bytes and its message order what the sender task
//! alone would produce:
//! - A direct write runs under the link's lock; the sender task marks itself writing under
//!   the same lock before it writes (and clears the mark after), so frames never interleave.
//! - A direct write happens only when no message is queued for the task or held by it
//!   (`Direct::queued` is zero), the task is not writing, and no frame is half-written
//!   (`DirectState::leftover` empty): it can never overtake a message sent earlier.
//! - Writes are non-blocking and of small frames only (at most 256 KiB; larger ones go
//!   through the task). What a direct write could not finish (a full socket buffer) is left in
//!   `leftover` for the task, which is woken to finish it before anything else.
//! - A failed direct write marks the connection failed; the task drops it, tells Raft the peer
//!   is unreachable (so it probes again) and dials anew, as after its own failed write.
//! - TLS connections (`[peer_tls]`) have no direct path: their writes go through the task.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use raft::prelude::Message;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Notify;

use super::peer_wire::{FrameFormat, FrameWriter, PeerVersions};
use super::transport::LinkFilter;
use crate::runtime::timeline::{self, Stage as Hop};

/// Largest frame written directly; a larger one (a big append, a metadata snapshot of up to
/// 63 MiB) goes through the task, which waits for the socket as long as it takes. So what a
/// direct write leaves for the task is at most this.
const MAX_DIRECT_FRAME_BYTES: usize = 256 << 10;

/// The direct path of one peer link (shared by the peer's sender task and every sender).
pub struct Direct {
    peer: u64,
    state: Mutex<DirectState>,
    /// Messages queued for the sender task or held by it and not yet written.
    queued: AtomicUsize,
    /// Wakes the sender task: a direct write left bytes, or failed.
    wake: Notify,
    filter: Arc<dyn LinkFilter>,
    /// The versions peers were heard in: a connection dialed in another version than the peer
    /// now needs is left to the task (which redials).
    versions: Arc<PeerVersions>,
    /// Bumped to make every sender redial (see `PeerSender::redial_all`): a connection of an
    /// older generation is left to the task too.
    hello_generation: Arc<AtomicU64>,
}

/// The task's current plaintext connection as the direct path sees it.
#[derive(Clone)]
pub struct DirectConn {
    /// The write half.
    pub write: Arc<OwnedWriteHalf>,
    /// The hello version it was dialed in (fixes its frame format).
    pub version: u16,
    /// The hello generation it was dialed in.
    pub generation: u64,
}

/// What the lock covers.
pub struct DirectState {
    /// The task's current plaintext connection (None: no connection, a TLS one, or one that
    /// failed).
    conn: Option<DirectConn>,
    /// Bytes of a frame a direct write started and the task must finish first.
    leftover: Vec<u8>,
    /// A direct write failed on the current connection; the task must drop it.
    failed: bool,
    /// The task is writing (outside the lock, with the socket possibly full): no direct write
    /// may start until it is done.
    task_writing: bool,
    /// Frame buffer of direct writes.
    frame: FrameWriter,
}

impl Direct {
    /// The direct path of the link to `peer`; messages are checked with `filter` as the task
    /// checks them.
    pub fn new(
        peer: u64,
        filter: Arc<dyn LinkFilter>,
        versions: Arc<PeerVersions>,
        hello_generation: Arc<AtomicU64>,
    ) -> Direct {
        let format = FrameFormat::of_version(super::peer_wire::CURRENT_VERSION);
        Direct {
            peer,
            state: Mutex::new(DirectState {
                conn: None,
                leftover: Vec::new(),
                failed: false,
                task_writing: false,
                frame: FrameWriter::new(format),
            }),
            queued: AtomicUsize::new(0),
            wake: Notify::new(),
            filter,
            versions,
            hello_generation,
        }
    }

    /// Writes `msg` of `group` now if the link is idle; returns it when the caller must queue
    /// it for the task instead (then the caller must call [`Direct::note_queued`] first).
    pub fn try_send(&self, group: u64, msg: Message) -> Option<Message> {
        if self.queued.load(Ordering::SeqCst) != 0 {
            return Some(msg);
        }
        let mut st = self.lock();
        if self.queued.load(Ordering::SeqCst) != 0
            || !st.leftover.is_empty()
            || st.failed
            || st.task_writing
        {
            return Some(msg);
        }
        let Some(conn) = st.conn.clone() else {
            return Some(msg);
        };
        if conn.generation != self.hello_generation.load(Ordering::SeqCst)
            || conn.version != self.versions.dial_version(self.peer)
        {
            return Some(msg);
        }
        if !self.filter.allow_message(self.peer, &msg) {
            return None;
        }
        st.frame.clear(FrameFormat::of_version(conn.version));
        st.frame.push(group, &msg);
        if st.frame.len() > MAX_DIRECT_FRAME_BYTES {
            return Some(msg);
        }
        let DirectState {
            frame, leftover, ..
        } = &mut *st;
        let bytes = frame.finish();
        match write_nonblocking(&conn.write, bytes) {
            Ok(n) if n == bytes.len() => {
                timeline::stamp(Hop::PeerFrameWritten, self.peer);
            }
            Ok(n) => {
                leftover.extend_from_slice(&bytes[n..]);
                drop(st);
                self.wake.notify_one();
            }
            Err(_) => {
                // A broken connection: the frame is lost with it; Raft sends again after the
                // task's redial.
                st.failed = true;
                st.conn = None;
                drop(st);
                self.wake.notify_one();
            }
        }
        None
    }

    /// A message is about to be queued for the task.
    pub fn note_queued(&self) {
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// `n` messages queued earlier were written (or dropped) by the task.
    pub fn note_taken(&self, n: usize) {
        let before = self.queued.fetch_sub(n, Ordering::SeqCst);
        assert!(
            before >= n,
            "more messages taken than queued on a peer link"
        );
    }

    /// The task's new plaintext connection (None: none, or TLS, which has no direct path).
    pub fn set_connection(&self, conn: Option<DirectConn>) {
        let mut st = self.lock();
        st.conn = conn;
        st.leftover.clear();
        st.failed = false;
    }

    /// Whether a direct write failed on the current connection (the task must drop it).
    pub fn failed(&self) -> bool {
        self.lock().failed
    }

    /// Resolves when a direct write left work for the task.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Writes `frame` on the plaintext connection `conn` after whatever a direct write left
    /// (`frame` may be empty: just finish that). Direct writes stay off until it returns.
    pub async fn write_plain(
        &self,
        conn: &Arc<OwnedWriteHalf>,
        frame: &[u8],
    ) -> std::io::Result<()> {
        let pending = {
            let mut st = self.lock();
            if st.failed {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "a direct write failed on this connection",
                ));
            }
            let mut pending = std::mem::take(&mut st.leftover);
            pending.extend_from_slice(frame);
            st.task_writing = true;
            pending
        };
        let mut written = 0;
        let result = loop {
            if written == pending.len() {
                break Ok(());
            }
            match write_nonblocking(conn, &pending[written..]) {
                Ok(0) => {
                    if let Err(e) = conn.writable().await {
                        break Err(e);
                    }
                }
                Ok(n) => written += n,
                Err(e) => break Err(e),
            }
        };
        let mut st = self.lock();
        st.task_writing = false;
        if result.is_err() {
            st.failed = true;
            st.conn = None;
        }
        result
    }

    fn lock(&self) -> MutexGuard<'_, DirectState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One non-blocking write; `Ok(0)` when the socket buffer is full.
fn write_nonblocking(conn: &OwnedWriteHalf, bytes: &[u8]) -> std::io::Result<usize> {
    match conn.try_write(bytes) {
        Ok(n) => Ok(n),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::peer_wire::{decode_frame, CURRENT_VERSION};
    use crate::replication::transport::OpenLinks;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    struct Closed;
    impl LinkFilter for Closed {
        fn allow(&self, _peer: u64) -> bool {
            false
        }
    }

    fn message(to: u64, index: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(raft::prelude::MessageType::MsgAppendResponse);
        m.from = 1;
        m.to = to;
        m.term = 3;
        m.index = index;
        m
    }

    /// A connected pair: the direct path's write half, the peer's end, and the read half
    /// (kept so the connection stays whole).
    async fn pair() -> (
        Arc<OwnedWriteHalf>,
        TcpStream,
        tokio::net::tcp::OwnedReadHalf,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dial = TcpStream::connect(listener.local_addr().unwrap());
        let (dialed, accepted) = tokio::join!(dial, listener.accept());
        let (read, write) = dialed.unwrap().into_split();
        (Arc::new(write), accepted.unwrap().0, read)
    }

    fn direct_path(filter: Arc<dyn LinkFilter>) -> Direct {
        Direct::new(2, filter, Arc::default(), Arc::default())
    }

    fn conn(write: &Arc<OwnedWriteHalf>) -> DirectConn {
        DirectConn {
            write: write.clone(),
            version: CURRENT_VERSION,
            generation: 0,
        }
    }

    async fn read_frame(peer: &mut TcpStream) -> Vec<(u64, Message)> {
        let len = peer.read_u32().await.unwrap() as usize;
        let mut body = vec![0u8; len];
        peer.read_exact(&mut body).await.unwrap();
        decode_frame(FrameFormat::of_version(CURRENT_VERSION), body.into()).unwrap()
    }

    #[tokio::test]
    async fn an_idle_link_is_written_at_once_and_a_busy_one_is_left_to_the_task() {
        let direct = direct_path(Arc::new(OpenLinks));
        // No connection yet: the task's queue takes the message.
        assert!(direct.try_send(7, message(2, 1)).is_some());
        let (write, mut peer, _read) = pair().await;
        direct.set_connection(Some(conn(&write)));
        assert!(direct.try_send(7, message(2, 2)).is_none());
        let got = read_frame(&mut peer).await;
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0, got[0].1.index), (7, 2));
        // A message queued for the task holds direct writes off until the task took it.
        direct.note_queued();
        assert!(direct.try_send(7, message(2, 3)).is_some());
        direct.note_taken(1);
        assert!(direct.try_send(7, message(2, 4)).is_none());
        assert_eq!(read_frame(&mut peer).await[0].1.index, 4);
    }

    #[tokio::test]
    async fn a_large_frame_is_left_to_the_task() {
        let direct = direct_path(Arc::new(OpenLinks));
        let (write, _peer, _read) = pair().await;
        direct.set_connection(Some(conn(&write)));
        let mut big = message(2, 1);
        big.set_msg_type(raft::prelude::MessageType::MsgAppend);
        let entry = raft::prelude::Entry {
            index: 2,
            term: 3,
            data: vec![7u8; MAX_DIRECT_FRAME_BYTES].into(),
            ..Default::default()
        };
        big.entries = vec![entry].into();
        assert!(direct.try_send(7, big).is_some());
        assert!(
            direct.try_send(7, message(2, 2)).is_none(),
            "small ones still go direct"
        );
    }

    #[tokio::test]
    async fn the_task_finishes_a_leftover_before_its_own_frame() {
        let format = FrameFormat::of_version(CURRENT_VERSION);
        let direct = direct_path(Arc::new(OpenLinks));
        let (write, mut peer, _read) = pair().await;
        direct.set_connection(Some(conn(&write)));
        let mut first = FrameWriter::new(format);
        first.push(7, &message(2, 10));
        let first = first.finish().to_vec();
        let mut second = FrameWriter::new(format);
        second.push(7, &message(2, 11));
        let second = second.finish().to_vec();
        // As if a direct write got only part of `first` out.
        let split = 3;
        write.try_write(&first[..split]).unwrap();
        direct.lock().leftover = first[split..].to_vec();
        assert!(
            direct.try_send(7, message(2, 12)).is_some(),
            "leftover pending"
        );
        direct.write_plain(&write, &second).await.unwrap();
        assert_eq!(read_frame(&mut peer).await[0].1.index, 10);
        assert_eq!(read_frame(&mut peer).await[0].1.index, 11);
        // Done: direct writes resume.
        assert!(direct.try_send(7, message(2, 13)).is_none());
        assert_eq!(read_frame(&mut peer).await[0].1.index, 13);
    }

    #[tokio::test]
    async fn a_cut_link_drops_the_message_and_a_broken_one_is_marked_failed() {
        let cut = direct_path(Arc::new(Closed));
        let (write, mut peer, _read) = pair().await;
        cut.set_connection(Some(conn(&write)));
        assert!(cut.try_send(7, message(2, 1)).is_none());
        drop(cut);
        let mut buf = [0u8; 1];
        let read =
            tokio::time::timeout(std::time::Duration::from_millis(100), peer.read(&mut buf)).await;
        assert!(
            read.is_err() || matches!(read, Ok(Ok(0))),
            "nothing was written"
        );

        let direct = direct_path(Arc::new(OpenLinks));
        let (write, peer, _read) = pair().await;
        direct.set_connection(Some(conn(&write)));
        drop(peer);
        // Writes to a closed peer fail within a few attempts (the first may still be buffered).
        for i in 0..50 {
            if direct.failed() {
                break;
            }
            let _ = direct.try_send(7, message(2, i));
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(direct.failed());
        assert!(
            direct.try_send(7, message(2, 99)).is_some(),
            "failed: the task's turn"
        );
        direct.set_connection(None);
        assert!(!direct.failed());
    }
}
