//! Tests of the peer listener: mutual TLS, deadlines, connection limits, refused hellos and
//! messages, large frames, and hellos of earlier versions.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use raft::prelude::{Entry, Message, MessageType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::super::test_fixtures::{
    closed_within, frame_of, hello, hello_in, listen, short_limits, wait_until, Recorder, LOCAL,
};
use super::super::{start_senders, OpenLinks, PeerTls};
use super::*;
use crate::replication::peer_guard::test_fixtures::SenderNamed;
use crate::replication::peer_guard::{PeerGuard, PeerStats};
use crate::replication::peer_wire::{self, FrameFormat, PeerVersions};

/// With mutual TLS the listener reads nothing from a connection that does not present a
/// certificate of the cluster CA: a plain TCP hello and frame, a TLS client without a
/// certificate and one with another CA's certificate are all refused and deliver no
/// message; a sender with a node certificate gets its messages through.
#[tokio::test]
async fn mutual_tls_refuses_connections_without_a_cluster_certificate() {
    use crate::security::certs::{generate, CertSpec};
    use crate::security::config::{ClientAuth, TlsFiles};
    let spec = CertSpec {
        nodes: 2,
        hosts: vec!["127.0.0.1".into()],
        clients: vec![],
        expired_clients: vec![],
        valid_days: 10,
    };
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), &spec).unwrap();
    let other = tempfile::tempdir().unwrap();
    generate(other.path(), &spec).unwrap();
    let files = |d: &std::path::Path, i: usize| TlsFiles {
        cert: d.join(format!("peer-node{i}.pem")),
        key: d.join(format!("peer-node{i}.key")),
        ca: Some(d.join("peer-ca.pem")),
        client_auth: ClientAuth::Required,
        crl: None,
    };
    let listener = TcpListener::bind((LOCAL, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let members = [(1, addr), (2, SocketAddr::new(LOCAL, 1))];
    let inbox = Arc::new(Recorder::default());
    let stats = Arc::new(PeerStats::default());
    let task = tokio::spawn(serve_peers_with(
        listener,
        inbox.clone(),
        Arc::new(PeerGuard::new(1, &members, Arc::new(SenderNamed))),
        stats.clone(),
        Arc::new(PeerVersions::default()),
        short_limits(),
        Some(Arc::new(
            PeerTls::from_files(&files(dir.path(), 1), 1).unwrap(),
        )),
    ));
    let mut heartbeat = Message::default();
    heartbeat.set_msg_type(MessageType::MsgHeartbeat);
    heartbeat.from = 2;
    heartbeat.to = 1;
    heartbeat.term = 3;
    let bytes = [
        hello(2, "h:1"),
        frame_of(FrameFormat::Prost, &[(7, &heartbeat)]),
    ]
    .concat();
    // Plain TCP: the hello and frame are not TLS; closed, nothing read.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain.write_all(&bytes).await.unwrap();
    // The server may answer a TLS alert before closing.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), plain.read_to_end(&mut answer));
    assert!(read.await.is_ok(), "not closed");
    // TLS without a client certificate, and with another CA's node certificate.
    let no_cert = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates({
        let mut roots = rustls::RootCertStore::empty();
        for c in crate::security::tls::read_certs(&dir.path().join("peer-ca.pem")).unwrap() {
            roots.add(c).unwrap();
        }
        roots
    })
    .with_no_client_auth();
    let strangers = [
        tokio_rustls::TlsConnector::from(Arc::new(no_cert)),
        PeerTls::from_files(
            &TlsFiles {
                ca: Some(dir.path().join("peer-ca.pem")),
                ..files(other.path(), 2)
            },
            2,
        )
        .unwrap()
        .connector(),
    ];
    for connector in strangers {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::IpAddress(LOCAL.into());
        // The handshake may seem to succeed on the client side (TLS 1.3 sends the client
        // certificate last); the server then closes without reading application data.
        if let Ok(mut s) = connector.connect(name, tcp).await {
            let _ = s.write_all(&bytes).await;
            let _ = s.flush().await;
            let mut buf = [0u8; 16];
            let r = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await;
            assert!(matches!(r, Ok(Ok(0) | Err(_))), "{r:?}");
        }
    }
    wait_until(|| stats.refused_connections() == 3).await;
    assert!(inbox.delivered.lock().unwrap().is_empty());
    assert!(inbox.hellos.lock().unwrap().is_empty());
    // A member with a certificate of the cluster CA is heard.
    let sender = start_senders(
        2,
        "h:2".into(),
        Vec::new(),
        &members,
        Arc::new(Recorder::default()),
        Arc::new(OpenLinks),
        Arc::new(PeerVersions::default()),
        Some(Arc::new(
            PeerTls::from_files(&files(dir.path(), 2), 2).unwrap(),
        )),
    );
    sender.send(7, heartbeat.clone());
    wait_until(|| inbox.delivered.lock().unwrap().len() == 1).await;
    task.abort();
}

#[tokio::test]
async fn deadlines_close_silent_and_stalled_connections() {
    let (addr, inbox, stats, _versions, task) = listen(LOCAL, short_limits()).await;
    // No hello at all.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(2)).await);
    assert_eq!(stats.refused_connections(), 1);
    // A frame that announces 1 MiB and sends 10 bytes.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled.write_all(&hello(2, "h:1")).await.unwrap();
    stalled
        .write_all(&(1u32 << 20).to_be_bytes())
        .await
        .unwrap();
    stalled.write_all(&[0; 10]).await.unwrap();
    assert!(closed_within(&mut stalled, Duration::from_secs(2)).await);
    wait_until(|| inbox.gone.lock().unwrap().len() == 1).await;
    assert_eq!(inbox.hellos.lock().unwrap().len(), 1);
    task.abort();
}

#[tokio::test]
async fn limits_refuse_excess_connections_and_replace_old_ones() {
    let limits = PeerLimits {
        hello_deadline: Duration::from_secs(5),
        ..short_limits()
    };
    let (addr, inbox, stats, _versions, task) = listen(LOCAL, limits).await;
    // Two may wait for their hello; the third is closed at once.
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    let mut c = TcpStream::connect(addr).await.unwrap();
    assert!(closed_within(&mut c, Duration::from_secs(2)).await);
    assert_eq!(stats.refused_connections(), 1);
    // One admitted connection per member: a newer one replaces the older.
    a.write_all(&hello(2, "old:1")).await.unwrap();
    wait_until(|| inbox.hellos.lock().unwrap().len() == 1).await;
    b.write_all(&hello(2, "new:1")).await.unwrap();
    assert!(closed_within(&mut a, Duration::from_secs(2)).await);
    assert!(!closed_within(&mut b, Duration::from_millis(100)).await);
    let hellos = inbox.hellos.lock().unwrap().clone();
    let gone = inbox.gone.lock().unwrap().clone();
    assert_eq!(hellos.len(), 2);
    assert_eq!(gone, vec![(2, hellos[0].1)]);
    task.abort();
}

#[tokio::test]
async fn foreign_and_forged_hellos_are_closed_unrecorded() {
    // Peers configured at 127.0.0.2: a connection from 127.0.0.1 is no peer's.
    let (addr, inbox, stats, _versions, task) =
        listen(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), short_limits()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // Closed at accept: the write may already fail.
    let _ = s.write_all(&hello(2, "h:1")).await;
    assert!(closed_within(&mut s, Duration::from_secs(2)).await);
    task.abort();
    assert_eq!(stats.refused_connections(), 1);
    // Peers at 127.0.0.1: this node's own id, an unknown id, a bad address, a bad magic.
    let (addr, inbox2, stats, _versions, task) = listen(LOCAL, short_limits()).await;
    for bytes in [
        hello(1, "h:1"),
        hello(9, "h:1"),
        hello(2, ""),
        hello(2, "no port"),
        b"VDLQ\0\x01\0\0\0\0\0\0\0\x02\0\0".to_vec(),
    ] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&bytes).await.unwrap();
        assert!(
            closed_within(&mut s, Duration::from_secs(2)).await,
            "{bytes:?}"
        );
    }
    wait_until(|| stats.refused_connections() == 5).await;
    assert!(inbox.hellos.lock().unwrap().is_empty());
    assert!(inbox2.hellos.lock().unwrap().is_empty());
    task.abort();
}

#[tokio::test]
async fn only_checked_messages_are_delivered() {
    let (addr, inbox, stats, _versions, task) = listen(LOCAL, short_limits()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&hello(2, "h:1")).await.unwrap();
    let good = {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = 2;
        m.to = 1;
        m.term = 3;
        m
    };
    let mut forged = good.clone();
    forged.from = 3;
    let mut empty_proposal = Message::default();
    empty_proposal.set_msg_type(MessageType::MsgPropose);
    empty_proposal.from = 2;
    empty_proposal.to = 1;
    let frame = frame_of(
        FrameFormat::Prost,
        &[(1, &good), (1, &forged), (1, &empty_proposal)],
    );
    s.write_all(&frame).await.unwrap();
    wait_until(|| stats.refused_messages() == 2).await;
    let delivered = inbox.delivered.lock().unwrap().clone();
    assert_eq!(delivered, vec![(1, good)]);
    task.abort();
}

#[tokio::test]
async fn a_large_frame_arrives_whole_in_pieces() {
    let (addr, inbox, _stats, _versions, task) = listen(LOCAL, short_limits()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&hello(2, "h:1")).await.unwrap();
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgAppend);
    m.from = 2;
    m.to = 1;
    m.term = 1;
    m.entries = vec![Entry {
        index: 1,
        term: 1,
        data: Bytes::from((0..3_000_000u32).map(|i| i as u8).collect::<Vec<u8>>()),
        ..Default::default()
    }]
    .into();
    let frame = frame_of(FrameFormat::Prost, &[(5, &m)]);
    for piece in frame.chunks(700_000) {
        s.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_until(|| inbox.delivered.lock().unwrap().len() == 1).await;
    assert_eq!(inbox.delivered.lock().unwrap()[0], (5, m));
    task.abort();
}

/// A node of an earlier release (hello version 1 or 2, fixed-layout frames) is still
/// admitted, its frames are read in its format, and its version is recorded so this node
/// dials it back in its version; a hello of a later version is refused.
#[tokio::test]
async fn older_versions_are_read_and_recorded_newer_refused() {
    let (addr, inbox, stats, versions, task) = listen(LOCAL, short_limits()).await;
    let mut heartbeat = Message::default();
    heartbeat.set_msg_type(MessageType::MsgHeartbeat);
    heartbeat.to = 1;
    heartbeat.term = 3;
    let mut conns = Vec::new();
    for (from, version, format) in [
        (2, peer_wire::VERSION_1, FrameFormat::Legacy),
        (3, peer_wire::VERSION_2, FrameFormat::Legacy),
        (3, peer_wire::VERSION_3, FrameFormat::Prost),
    ] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&hello_in(version, from, "h:1")).await.unwrap();
        let mut m = heartbeat.clone();
        m.from = from;
        s.write_all(&frame_of(format, &[(7, &m)])).await.unwrap();
        let n = inbox.delivered.lock().unwrap().len();
        wait_until(|| inbox.delivered.lock().unwrap().len() == n + 1).await;
        assert_eq!(inbox.delivered.lock().unwrap()[n], (7, m));
        assert_eq!(versions.dial_version(from), version);
        conns.push(s);
    }
    assert_eq!(versions.dial_version(2), peer_wire::VERSION_1);
    assert_eq!(stats.refused_connections(), 0);
    let mut newer = TcpStream::connect(addr).await.unwrap();
    newer.write_all(b"VDLP\x00\x04\x00\x00").await.unwrap();
    assert!(closed_within(&mut newer, Duration::from_secs(2)).await);
    wait_until(|| stats.refused_connections() == 1).await;
    task.abort();
}
