//! Helpers of the embedded API's integration tests.
#![allow(dead_code)]

#[path = "../../../server/tests/common/kafka.rs"]
pub mod kafka;
#[path = "../../../server/tests/common/requests.rs"]
pub mod requests;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use vdl::{Log, NodeConfig};

/// A free port on 127.0.0.1 in 20000-31999 (below the ephemeral range), checked by binding it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(2_654_435_761);
    let _ = NEXT.compare_exchange(u32::MAX, seed % 12_000, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..12_000 {
        let port = (20_000 + NEXT.fetch_add(7, Ordering::SeqCst) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000-31999");
}

/// A single-node configuration in `dir` whose Kafka port is a free one.
pub fn single_with_kafka(dir: &Path) -> NodeConfig {
    let mut c = NodeConfig::single_node_default();
    c.data_dir = dir.to_owned();
    let peer: SocketAddr = ([127, 0, 0, 1], 0).into();
    c.peer_listen = peer;
    c.members[0].peer_addr = peer;
    c.kafka_listen = ([127, 0, 0, 1], free_port()).into();
    c.kafka_advertised = c.kafka_listen.to_string();
    c
}

/// Waits up to `timeout` for `f` to hold, checking every 10 ms.
pub async fn eventually(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The log among `logs` (not shut down) that leads partition `partition` of `stream` and has
/// committed an entry of its own term, waiting up to `timeout` for one.
pub async fn ready_leader(logs: &[Log], stream: &str, partition: u32, timeout: Duration) -> Log {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        for log in logs.iter().filter(|l| !l.is_closed()) {
            let s = log.stream(stream).await.expect("stream");
            if s.status(partition).is_ok_and(|st| st.leader_ready) {
                return log.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no ready leader for {stream}/{partition} within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
