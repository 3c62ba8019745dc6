//! The sending half of the peer transport: the [`PeerSender`] handle Raft groups send
//! through, one bounded queue per peer (each drained by its sender task, see
//! `super::sender_task`), and starting the senders of a node ([`start_senders`]) or of a
//! simulation that carries the messages itself ([`detached_sender`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use raft::prelude::Message;
use tokio::sync::mpsc;

use super::dial::Link;
use super::sender_task::sender_task;
use super::{LinkFilter, PeerInbox, PeerTls, PEER_QUEUE_MESSAGES};
use crate::replication::direct_send::Direct;
use crate::replication::peer_wire::PeerVersions;

/// A peer's queue for its sender task, and the link's direct path (none for detached senders).
struct PeerQueue {
    tx: mpsc::Sender<(u64, Message)>,
    direct: Option<Arc<Direct>>,
}

type PeerQueues = HashMap<u64, PeerQueue>;

/// The sending half of the transport: one queue per peer.
#[derive(Clone)]
pub struct PeerSender {
    queues: Arc<std::sync::RwLock<PeerQueues>>,
    /// What a sender task for a peer added at runtime needs (None: a detached sender).
    spawn: Option<Arc<SenderContext>>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
    /// Bumped to make every sender reconnect (and so send a new hello).
    hello_generation: Arc<std::sync::atomic::AtomicU64>,
    /// The node's limit on catch-up replication (see [`crate::flow::replication`]).
    catch_up: Arc<crate::flow::replication::ReplicationLimiter>,
}

impl PeerSender {
    /// Sends `msg` of `group` to its destination (`msg.to`): written to the peer's socket at
    /// once when the link is idle (see [`crate::replication::direct_send`]), else queued for
    /// the peer's sender task. Never blocks; drops the message when the queue is full or the
    /// peer is unknown, and counts the drop.
    pub fn send(&self, group: u64, msg: Message) {
        // Catch-up appends over the node's limit wait for Raft to send them again.
        if !self.catch_up.admit(&msg) {
            return;
        }
        let queues = self.queues.read().unwrap_or_else(|e| e.into_inner());
        match queues.get(&msg.to) {
            Some(q) => {
                let msg = match &q.direct {
                    Some(direct) => match direct.try_send(group, msg) {
                        None => return,
                        Some(msg) => {
                            direct.note_queued();
                            msg
                        }
                    },
                    None => msg,
                };
                if q.tx.try_send((group, msg)).is_err() {
                    if let Some(direct) = &q.direct {
                        direct.note_taken(1);
                    }
                    self.dropped
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            None => {
                self.dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// The node's limit on catch-up replication.
    pub fn catch_up_limiter(&self) -> &crate::flow::replication::ReplicationLimiter {
        &self.catch_up
    }

    /// Makes every sender reconnect with a fresh hello (after what it says changed), at its
    /// next message.
    pub fn redial_all(&self) {
        self.hello_generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Starts sending to a member added at runtime (see [`crate::replication::membership`]),
    /// dialing `addr`; a peer known already keeps its sender. Callable from any thread.
    pub fn add_peer(&self, peer: u64, addr: SocketAddr) {
        let Some(ctx) = self.spawn.as_ref() else {
            return;
        };
        if peer == ctx.self_id {
            return;
        }
        let mut queues = self.queues.write().unwrap_or_else(|e| e.into_inner());
        if queues.contains_key(&peer) {
            return;
        }
        let (tx, rx) = mpsc::channel(PEER_QUEUE_MESSAGES);
        let direct = ctx.spawn(peer, addr, rx, self.hello_generation.clone());
        queues.insert(
            peer,
            PeerQueue {
                tx,
                direct: Some(direct),
            },
        );
    }

    /// Messages dropped so far (full queue or unknown peer).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A sender whose per-peer queues are handed back instead of being drained by sender tasks
/// (no sockets, no tokio runtime needed): for simulators and tests that carry the messages
/// themselves. Each queue holds at most [`PEER_QUEUE_MESSAGES`] messages, as a real one.
pub fn detached_sender(
    self_id: u64,
    peers: &[u64],
) -> (PeerSender, HashMap<u64, mpsc::Receiver<(u64, Message)>>) {
    let mut queues = HashMap::new();
    let mut receivers = HashMap::new();
    for &peer in peers.iter().filter(|p| **p != self_id) {
        let (tx, rx) = mpsc::channel(PEER_QUEUE_MESSAGES);
        queues.insert(peer, PeerQueue { tx, direct: None });
        receivers.insert(peer, rx);
    }
    let sender = PeerSender {
        queues: Arc::new(std::sync::RwLock::new(queues)),
        spawn: None,
        dropped: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        hello_generation: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        catch_up: Arc::default(),
    };
    (sender, receivers)
}

/// Starts one sender task per peer (dialing `addr`, reconnecting with backoff) and returns the
/// handle used by Raft groups to send. Each peer is dialed in the hello version `versions`
/// says it speaks (the listener records it). Must be called inside a tokio runtime.
#[allow(clippy::too_many_arguments)]
pub fn start_senders(
    self_id: u64,
    advertised: String,
    listeners: Vec<(String, String)>,
    peers: &[(u64, SocketAddr)],
    inbox: Arc<dyn PeerInbox>,
    filter: Arc<dyn LinkFilter>,
    versions: Arc<PeerVersions>,
    tls: Option<Arc<PeerTls>>,
) -> PeerSender {
    // Dial from this node's own configured peer IP, so peers see the source address they
    // admit (see `PeerGuard::admit_hello`) even on a host with several addresses.
    let local_ip = peers
        .iter()
        .find(|(id, _)| *id == self_id)
        .map(|(_, addr)| addr.ip())
        .filter(|ip| !ip.is_unspecified());
    let mut queues = HashMap::new();
    let hello_generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ctx = Arc::new(SenderContext {
        self_id,
        local_ip,
        advertised,
        listeners,
        tls,
        inbox,
        filter,
        versions,
        runtime: tokio::runtime::Handle::current(),
    });
    for &(peer, addr) in peers {
        if peer == self_id {
            continue;
        }
        let (tx, rx) = mpsc::channel(PEER_QUEUE_MESSAGES);
        let direct = ctx.spawn(peer, addr, rx, hello_generation.clone());
        queues.insert(
            peer,
            PeerQueue {
                tx,
                direct: Some(direct),
            },
        );
    }
    PeerSender {
        queues: Arc::new(std::sync::RwLock::new(queues)),
        spawn: Some(ctx),
        dropped: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        hello_generation,
        catch_up: Arc::default(),
    }
}

/// What every sender task of a node shares: who this node is and what it announces.
struct SenderContext {
    self_id: u64,
    local_ip: Option<IpAddr>,
    advertised: String,
    /// This node's Kafka listeners (name, advertised address), announced in hellos.
    listeners: Vec<(String, String)>,
    /// Mutual TLS between nodes, when configured.
    tls: Option<Arc<PeerTls>>,
    inbox: Arc<dyn PeerInbox>,
    filter: Arc<dyn LinkFilter>,
    versions: Arc<PeerVersions>,
    /// The runtime the senders run on (peers are added from the group workers' threads).
    runtime: tokio::runtime::Handle,
}

impl SenderContext {
    /// Starts the sender task of `peer` at `addr`, draining `rx`; returns the link's direct
    /// path.
    fn spawn(
        &self,
        peer: u64,
        addr: SocketAddr,
        rx: mpsc::Receiver<(u64, Message)>,
        hello_generation: Arc<std::sync::atomic::AtomicU64>,
    ) -> Arc<Direct> {
        let direct = Arc::new(Direct::new(
            peer,
            self.filter.clone(),
            self.versions.clone(),
            hello_generation.clone(),
        ));
        let link = Link {
            self_id: self.self_id,
            local_ip: self.local_ip,
            advertised: self.advertised.clone(),
            listeners: self.listeners.clone(),
            peer,
            addr,
            versions: self.versions.clone(),
            tls: self.tls.clone(),
        };
        self.runtime.spawn(sender_task(
            link,
            rx,
            self.inbox.clone(),
            self.filter.clone(),
            hello_generation,
            direct.clone(),
        ));
        direct
    }
}
