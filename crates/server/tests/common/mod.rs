//! Helpers shared by the server's integration tests: free ports, cluster configs, and minimal
//! record batches.
#![allow(dead_code)]

pub mod peer;

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
pub mod bit_flip;
pub mod compacted;
pub mod faults;
pub mod kafka;
pub mod procs;
pub mod requests;
pub mod serving;

use kafka_proto::records::{build_batch, Compression, NewRecord};
use vdl_server::config::{Member, NodeConfig, RaftTiming};

/// The index in `nodes` (None: a stopped node) of the node whose replica of `topic` (its
/// first partition) leads and is ready, waiting up to 15 s.
pub async fn ready_leader_of(
    nodes: &[Option<std::sync::Arc<vdl_server::Node>>],
    topic: &str,
) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(i) = nodes.iter().position(|n| {
            n.as_ref().is_some_and(|n| {
                let v = n.stream(topic).unwrap().visible();
                v.leader == n.config().id && v.leader_ready
            })
        }) {
            return i;
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reserves `n` distinct free TCP ports on 127.0.0.1 (bound and released at once), below the
/// kernel's ephemeral range (32768+): a port taken from that range can be handed to an outgoing
/// connection (of this test or another) before the node binds it ("address in use"). Ports go
/// round 20000-31999 from a start drawn from the clock and process id, so tests running at once
/// in one binary never get the same port, and each is checked free by binding it.
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(2_654_435_761);
    let _ = NEXT.compare_exchange(u32::MAX, seed % COUNT, Ordering::SeqCst, Ordering::SeqCst);
    let mut listeners = Vec::with_capacity(n);
    for _ in 0..COUNT {
        if listeners.len() == n {
            break;
        }
        let port = (FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % COUNT) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(l);
        }
    }
    assert_eq!(listeners.len(), n, "no {n} free ports in 20000-31999");
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

/// Raft timing for tests: fast elections so tests finish quickly.
pub fn fast_timing() -> RaftTiming {
    RaftTiming {
        tick: Duration::from_millis(10),
        heartbeat: Duration::from_millis(30),
        election_timeout: Duration::from_millis(300),
        ..RaftTiming::default()
    }
}

/// Configs for an `n`-node cluster on 127.0.0.1 with data under `root`, serving `streams`.
pub fn cluster_configs(n: usize, root: &Path, streams: &[&str]) -> Vec<NodeConfig> {
    let ports = free_ports(2 * n);
    let members: Vec<Member> = (0..n)
        .map(|i| Member {
            name: format!("vdl{}", i + 1),
            id: i as u64 + 1,
            peer_addr: SocketAddr::from(([127, 0, 0, 1], ports[i])),
        })
        .collect();
    (0..n)
        .map(|i| {
            let mut c = NodeConfig::single_node_default();
            c.id = i as u64 + 1;
            c.name = format!("vdl{}", i + 1);
            c.data_dir = root.join(format!("node{}", i + 1));
            c.peer_listen = members[i].peer_addr;
            c.kafka_listen = SocketAddr::from(([127, 0, 0, 1], ports[n + i]));
            c.kafka_advertised = c.kafka_listen.to_string();
            c.members = members.clone();
            c.raft = fast_timing();
            c.initial_streams = streams.iter().map(|s| s.to_string()).collect();
            c
        })
        .collect()
}

/// A Kafka record batch (magic 2, uncompressed) of `count` records, each with value `tag`,
/// stamped now: retention by time (7 days by default) never deletes what a test wrote.
pub fn batch(count: u32, tag: &[u8]) -> Bytes {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    batch_at(now_ms, count, tag)
}

/// [`batch`] with every record stamped `timestamp_ms`: the same bytes on every call (the
/// simulation's runs are the same for the same seed).
pub fn batch_at(timestamp_ms: i64, count: u32, tag: &[u8]) -> Bytes {
    assert!(count > 0);
    let records: Vec<NewRecord> = (0..count)
        .map(|_| NewRecord::new(timestamp_ms, Bytes::copy_from_slice(tag)))
        .collect();
    build_batch(Compression::None, &records).expect("build a record batch")
}

/// Splits concatenated record batches into (base offset, record count, first record's value),
/// validating each batch's CRC.
pub fn split_batches(data: &[u8]) -> Vec<(u64, u32, Vec<u8>)> {
    let mut out = Vec::new();
    for b in kafka_proto::records::split_batches(Bytes::copy_from_slice(data)) {
        let b = b.expect("a whole batch");
        b.validate().expect("batch CRC and shape");
        let records = b.records_vec(1 << 20).expect("records decode");
        let value = records[0].value.clone().unwrap_or_default().to_vec();
        out.push((b.base_offset() as u64, b.record_count() as u32, value));
    }
    out
}

/// A `kcat` command (Debian's package, installed by scripts/test-deps.sh).
pub fn kcat() -> Command {
    let path = ["/usr/bin/kcat", "/usr/local/bin/kcat"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("kcat is not installed: run scripts/test-deps.sh");
    Command::new(path)
}

/// Runs a command with a deadline, feeding `input` on stdin; returns (success, stdout,
/// stderr). Kills it and panics when the deadline passes.
pub fn run_with_deadline(
    mut cmd: Command,
    input: &[u8],
    timeout: Duration,
) -> (bool, String, String) {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the command");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (
                status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "command timed out; stdout: {} stderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A v2 batch with these header fields (attributes, record count; lastOffsetDelta = count - 1,
/// timestamps of now) around a records section taken as given, with a valid CRC: for tests of
/// batches whose header lies about their records.
pub fn raw_batch(attributes: i16, count: i32, records: &[u8]) -> Bytes {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut b = Vec::new();
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&((49 + records.len()) as i32).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.push(2);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&attributes.to_be_bytes());
    b.extend_from_slice(&count.wrapping_sub(1).to_be_bytes());
    b.extend_from_slice(&ts.to_be_bytes());
    b.extend_from_slice(&ts.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes());
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(records);
    let crc = kafka_proto::records::RecordBatch::new(Bytes::copy_from_slice(&b))
        .expect("a batch header")
        .compute_crc();
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

/// The index in `nodes` of the node that leads the metadata group (every consumer group's
/// coordinator), if one does.
pub fn metadata_leader(nodes: &[std::sync::Arc<vdl_server::Node>]) -> Option<usize> {
    nodes.iter().position(|n| {
        n.metadata_group()
            .is_some_and(|g| g.visible().leader == n.config().id)
    })
}

/// A node's advertised Kafka address.
pub fn kafka_addr(n: &vdl_server::Node) -> SocketAddr {
    n.config().kafka_advertised.parse().unwrap()
}

/// Shuts `nodes[leader]` down and waits (up to 10 s) until one of the others leads the
/// metadata group: the others, and the new leader's index among them.
pub async fn kill_metadata_leader(
    nodes: &[std::sync::Arc<vdl_server::Node>],
    leader: usize,
) -> (Vec<std::sync::Arc<vdl_server::Node>>, usize) {
    nodes[leader].shutdown();
    let rest: Vec<_> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, n)| n.clone())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(l) = metadata_leader(&rest) {
            return (rest, l);
        }
        assert!(Instant::now() < deadline, "no new metadata leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Calls `call` (a group request to a coordinator that just took over, answering its error
/// code) until it answers something other than NOT_COORDINATOR (16; the new coordinator may
/// still be applying the metadata of its term's start), for at most 10 s: that answer.
pub fn until_coordinator_serves(mut call: impl FnMut() -> i16) -> i16 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let e = call();
        if e != 16 {
            return e;
        }
        assert!(
            Instant::now() < deadline,
            "the new coordinator never served"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
