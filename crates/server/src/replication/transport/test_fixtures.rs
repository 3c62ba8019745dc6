//! What the transport's tests share: an inbox recording what the listener hands over, a
//! listener of node 1 with short deadlines, hellos and frames as bytes, and waits.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use raft::prelude::Message;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use super::{serve_peers_with, PeerInbox, PeerLimits};
use crate::replication::peer_guard::test_fixtures::SenderNamed;
use crate::replication::peer_guard::{PeerGuard, PeerStats};
use crate::replication::peer_wire::{self, FrameFormat, FrameWriter, PeerVersions};
use crate::replication::replicas::HelloDirs;

/// Records what the listener hands over.
#[derive(Default)]
pub(super) struct Recorder {
    pub(super) delivered: Mutex<Vec<(u64, Message)>>,
    pub(super) hellos: Mutex<Vec<(u64, u64, String)>>,
    pub(super) gone: Mutex<Vec<(u64, u64)>>,
}

impl PeerInbox for Recorder {
    fn deliver(&self, group: u64, msg: Message) {
        self.delivered.lock().unwrap().push((group, msg));
    }
    fn peer_unreachable(&self, _peer: u64) {}
    fn peer_hello(
        &self,
        peer: u64,
        connection: u64,
        advertised: String,
        _listeners: Vec<(String, String)>,
        _dirs: crate::replication::replicas::HelloDirs,
    ) {
        self.hellos
            .lock()
            .unwrap()
            .push((peer, connection, advertised));
    }
    fn peer_gone(&self, peer: u64, connection: u64) {
        self.gone.lock().unwrap().push((peer, connection));
    }
}

pub(super) const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A listener of node 1 whose peers 2 and 3 are at `peer_ip`, with short deadlines.
pub(super) async fn listen(
    peer_ip: IpAddr,
    limits: PeerLimits,
) -> (
    SocketAddr,
    Arc<Recorder>,
    Arc<PeerStats>,
    Arc<PeerVersions>,
    tokio::task::JoinHandle<()>,
) {
    let listener = TcpListener::bind((LOCAL, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let members = [
        (1, addr),
        (2, SocketAddr::new(peer_ip, 1)),
        (3, SocketAddr::new(peer_ip, 2)),
    ];
    let guard = Arc::new(PeerGuard::new(1, &members, Arc::new(SenderNamed)));
    let inbox = Arc::new(Recorder::default());
    let stats = Arc::new(PeerStats::default());
    let versions = Arc::new(PeerVersions::default());
    let task = tokio::spawn(serve_peers_with(
        listener,
        inbox.clone(),
        guard,
        stats.clone(),
        versions.clone(),
        limits,
        None,
    ));
    (addr, inbox, stats, versions, task)
}

pub(super) fn short_limits() -> PeerLimits {
    PeerLimits {
        max_pending: 2,
        per_member: 1,
        hello_deadline: Duration::from_millis(300),
        frame_deadline: Duration::from_millis(300),
    }
}

/// A hello of `version`: directory id `from`, no known directory for the receiver, settled.
pub(super) fn hello_in(version: u16, from: u64, advertised: &str) -> Vec<u8> {
    let dirs = HelloDirs {
        dir: u128::from(from),
        sender_settled: true,
        ..HelloDirs::default()
    };
    peer_wire::encode_hello(version, from, advertised, dirs)
}

/// A hello of the current version.
pub(super) fn hello(from: u64, advertised: &str) -> Vec<u8> {
    hello_in(peer_wire::CURRENT_VERSION, from, advertised)
}

/// One frame (length prefix included) of `msgs` in `format`.
pub(super) fn frame_of(format: FrameFormat, msgs: &[(u64, &Message)]) -> Vec<u8> {
    let mut w = FrameWriter::new(format);
    for (group, m) in msgs {
        w.push(*group, m);
    }
    w.finish().to_vec()
}

/// Whether the listener closes `s` within `within`.
pub(super) async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 16];
    matches!(
        tokio::time::timeout(within, s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Waits until `what` holds, checking every 10 ms; panics after 2 s.
pub(super) async fn wait_until(what: impl Fn() -> bool) {
    for _ in 0..200 {
        if what() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached within 2 s");
}
