//! Connection limits of the Kafka listener (issue 33): a per-address override closes an
//! address's connections beyond it at once while other addresses are served; a listener's own
//! `max_connections` makes further connections wait in the backlog until one closes; and the
//! per-address creation rate closes connections opened faster than it; at a graceful shutdown's
//! drain an unauthenticated SASL connection closes at once rather than at its deadline. (The flood over TLS with
//! the default limits and the authentication deadline is tests/clients/test_conn_limits.py.)

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster_configs;
use vdl_server::security::config::KafkaListenerConfig;
use vdl_server::shutdown::ShutdownPhase;
use vdl_server::Node;

/// Connects to `addr` from `source` (loopback: every 127/8 address reaches 127.0.0.1).
async fn connect_from(addr: SocketAddr, source: &str) -> TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::new(source.parse::<IpAddr>().unwrap(), 0))
        .unwrap();
    let stream = s.connect(addr).await.unwrap().into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
}

/// Sends ApiVersions v0 and waits up to `within` for an answer: true when one came, false when
/// the connection was closed or stayed silent.
fn answered(s: &mut TcpStream, within: Duration) -> bool {
    let client = b"limits";
    let mut body = Vec::new();
    body.extend_from_slice(&18i16.to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&7i32.to_be_bytes());
    body.extend_from_slice(&(client.len() as i16).to_be_bytes());
    body.extend_from_slice(client);
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    if s.write_all(&frame).is_err() {
        return false;
    }
    s.set_read_timeout(Some(within)).unwrap();
    let mut size = [0u8; 4];
    s.read_exact(&mut size).is_ok()
}

/// Whether the server closed `s` within `within` (it never writes unasked).
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 16];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// One node with its plaintext listener limited to `listener_max` connections and the
/// connection limits `tweak` sets; returns it and its Kafka address.
async fn node_with(
    dir: &std::path::Path,
    listener_max: Option<usize>,
    tweak: impl FnOnce(&mut vdl_server::config::ConnectionLimitSettings),
) -> (Arc<Node>, SocketAddr) {
    let mut configs = cluster_configs(1, dir, &[]);
    let mut c = configs.remove(0);
    let listener = KafkaListenerConfig {
        max_connections: listener_max,
        ..KafkaListenerConfig::plaintext(c.kafka_listen, c.kafka_advertised.clone())
    };
    c.listeners = vec![listener];
    tweak(&mut c.connection_limits);
    let addr = c.kafka_listen;
    let node: Arc<Node> = Node::start(c).await.unwrap();
    node.serve_kafka().await.unwrap();
    (node, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_address_override_and_listener_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (node, addr) = node_with(dir.path(), Some(4), |l| {
        l.max_connections_per_ip_overrides
            .insert("127.0.0.2".parse().unwrap(), 2);
    })
    .await;
    let short = Duration::from_secs(2);
    // 127.0.0.2 may hold two: the third is closed at once, the first two are served.
    let mut a1 = connect_from(addr, "127.0.0.2").await;
    let mut a2 = connect_from(addr, "127.0.0.2").await;
    assert!(answered(&mut a1, short) && answered(&mut a2, short));
    let mut a3 = connect_from(addr, "127.0.0.2").await;
    assert!(
        closed_within(&mut a3, short),
        "a third connection from 127.0.0.2 was kept"
    );
    // Another address is served meanwhile, up to the listener's four connections.
    let mut b1 = connect_from(addr, "127.0.0.3").await;
    let mut b2 = connect_from(addr, "127.0.0.3").await;
    assert!(answered(&mut b1, short) && answered(&mut b2, short));
    // The listener is full: a fifth connection waits in the backlog, unanswered...
    let mut c1 = connect_from(addr, "127.0.0.1").await;
    assert!(!answered(&mut c1, Duration::from_millis(800)));
    // ...until one closes; then it is served.
    drop(b2);
    assert!(answered(&mut c1, Duration::from_secs(5)));
    let stats = node.security_stats().snapshot();
    assert_eq!(stats.connections_refused_per_ip, 1, "{stats:?}");
    let metrics = vdl_server::metrics::encode(node.scrape());
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("vdl_connections_refused_total") && l.ends_with(" 1")),
        "{metrics}"
    );
    drop((a1, a2, b1));
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_address_creation_rate() {
    let dir = tempfile::tempdir().unwrap();
    let (node, addr) = node_with(dir.path(), None, |l| {
        l.max_connection_creation_rate_per_ip = Some(3);
    })
    .await;
    let started = Instant::now();
    let mut conns = Vec::new();
    for _ in 0..6 {
        conns.push(connect_from(addr, "127.0.0.4").await);
    }
    let opened_in = started.elapsed();
    let closed = conns
        .iter_mut()
        .map(|c| closed_within(c, Duration::from_millis(500)))
        .filter(|closed| *closed)
        .count();
    // Three at once (one second's burst); of the rest at most what refilled meanwhile.
    let refill = (opened_in.as_secs_f64() * 3.0).ceil() as usize;
    assert!(
        closed >= 3 - refill.min(3),
        "{closed} closed, opened in {opened_in:?}"
    );
    assert!(closed <= 3, "{closed} closed");
    // Another address is not limited by 127.0.0.4's rate.
    let mut other = connect_from(addr, "127.0.0.5").await;
    assert!(answered(&mut other, Duration::from_secs(2)));
    // After a second the address may connect again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut again = connect_from(addr, "127.0.0.4").await;
    assert!(answered(&mut again, Duration::from_secs(2)));
    let stats = node.security_stats().snapshot();
    assert_eq!(
        stats.connections_refused_rate_per_ip as usize, closed,
        "{stats:?}"
    );
    node.shutdown();
}

/// At a graceful shutdown's drain, a connection to a SASL listener that has not authenticated
/// (and owes nothing) closes at once, not at its authentication deadline (10 s by default),
/// so a SIGTERM does not wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unauthenticated_connection_closes_at_drain_not_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(1, dir.path(), &[]);
    let mut c = configs.remove(0);
    c.listeners = vec![KafkaListenerConfig {
        name: "SASL_PLAINTEXT".to_string(),
        protocol: vdl_server::security::config::SecurityProtocol::SaslPlaintext,
        sasl_mechanisms: vec![vdl_server::security::config::SaslMechanism::Plain],
        ..KafkaListenerConfig::plaintext(c.kafka_listen, c.kafka_advertised.clone())
    }];
    assert_eq!(
        c.connection_limits.authentication_timeout,
        Duration::from_secs(10),
        "the default deadline the test relies on"
    );
    let addr = c.kafka_listen;
    let node: Arc<Node> = Node::start(c).await.unwrap();
    let (phase, signal) = tokio::sync::watch::channel(ShutdownPhase::Running);
    let served = node.serve_kafka_until(signal).await.unwrap();

    // ApiVersions is served before authentication; the client then stays silent.
    let mut client = connect_from(addr, "127.0.0.1").await;
    assert!(answered(&mut client, Duration::from_secs(3)), "not served");
    let mut rest = vec![0u8; 64 << 10];
    let n = client.read(&mut rest).unwrap();
    assert!(n > 0, "the rest of the ApiVersions answer");

    let started = Instant::now();
    phase.send(ShutdownPhase::Drain).unwrap();
    let closed =
        tokio::task::spawn_blocking(move || closed_within(&mut client, Duration::from_secs(5)))
            .await
            .unwrap();
    assert!(
        closed,
        "the connection stayed open after the drain began (until its authentication deadline)"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(phase);
    let _ = tokio::time::timeout(Duration::from_secs(5), served).await;
    node.shutdown();
}
