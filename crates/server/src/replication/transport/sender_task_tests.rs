//! Tests of the sender tasks against a real listener.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use raft::prelude::{Message, MessageType};

use super::super::test_fixtures::{listen, short_limits, wait_until, Recorder, LOCAL};
use super::super::{start_senders, OpenLinks};
use crate::replication::peer_wire::{self, PeerVersions};

/// A sender dials a peer in the version it last heard from it, and re-dials when that
/// changes: frames reach a listener in the format of the hello they follow.
#[tokio::test]
async fn senders_dial_old_peers_in_their_version() {
    // Node 1 listens; node 2 sends to it.
    let (addr, inbox, stats, listener_versions, task) = listen(LOCAL, short_limits()).await;
    let sender_versions = Arc::new(PeerVersions::default());
    let peers = [(1, addr), (2, SocketAddr::new(LOCAL, 1))];
    let sender = start_senders(
        2,
        "h:2".into(),
        Vec::new(),
        &peers,
        Arc::new(Recorder::default()),
        Arc::new(OpenLinks),
        sender_versions.clone(),
        None,
    );
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgHeartbeat);
    m.from = 2;
    m.to = 1;
    m.term = 3;
    sender.send(9, m.clone());
    wait_until(|| !inbox.delivered.lock().unwrap().is_empty()).await;
    // Node 1 was heard speaking version 1: node 2 dials it again in version 1.
    sender_versions.heard(1, peer_wire::VERSION_1, "");
    for _ in 0..50 {
        sender.send(9, m.clone());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_until(|| inbox.hellos.lock().unwrap().len() >= 2).await;
    wait_until(|| listener_versions.dial_version(2) == peer_wire::VERSION_1).await;
    let delivered = inbox.delivered.lock().unwrap().clone();
    assert!(delivered.iter().all(|d| *d == (9, m.clone())));
    assert_eq!(stats.refused_connections(), 0);
    assert_eq!(stats.refused_messages(), 0);
    task.abort();
}
