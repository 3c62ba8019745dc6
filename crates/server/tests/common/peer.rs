//! Raft peer port helpers for the hostile-input tests: raw hellos and frames, connections from
//! a chosen source address, a 3-node cluster and the check that it still commits.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use protobuf::Message as _;
use raft::prelude::{Entry, Message, MessageType};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};
use vdl_server::config::NodeConfig;
use vdl_server::metadata::MetaCommand;
use vdl_server::replication::peer_wire;
use vdl_server::Node;

use super::batch;

/// The stream every node serves in these tests.
pub const STREAM: &str = "logstream1";
/// Bound on every wait in these tests.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The peer hello of an earlier release: magic, version 1, claimed node id, advertised Kafka
/// address (still accepted; frames after it are [`frame`]s).
pub fn hello(from: u64, advertised: &str) -> Vec<u8> {
    let mut b = b"VDLP".to_vec();
    b.extend_from_slice(&1u16.to_be_bytes());
    b.extend_from_slice(&from.to_be_bytes());
    b.extend_from_slice(&(advertised.len() as u16).to_be_bytes());
    b.extend_from_slice(advertised.as_bytes());
    b
}

/// The current peer hello (version 3, protobuf), claiming `from`, settled, without directory
/// ids; frames after it are [`frame_v3`]s.
pub fn hello_v3(from: u64, advertised: &str) -> Vec<u8> {
    let dirs = vdl_server::replication::replicas::HelloDirs {
        sender_settled: true,
        ..Default::default()
    };
    peer_wire::encode_hello(peer_wire::VERSION_3, from, advertised, dirs)
}

/// One version 3 frame (a protobuf `PeerFrame`) carrying `msgs` as (group, message).
pub fn frame_v3(msgs: &[(u64, Message)]) -> Vec<u8> {
    let mut w = peer_wire::FrameWriter::new(peer_wire::FrameFormat::Prost);
    for (group, m) in msgs {
        w.push(*group, m);
    }
    w.finish().to_vec()
}

/// One frame of versions 1 and 2 carrying `msgs` as (group, message).
pub fn frame(msgs: &[(u64, Message)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (group, m) in msgs {
        let raw = m.write_to_bytes().expect("encode");
        body.extend_from_slice(&group.to_be_bytes());
        body.extend_from_slice(&(raw.len() as u32).to_be_bytes());
        body.extend_from_slice(&raw);
    }
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(&body);
    f
}

/// A message of `kind` from `from` to `to` at `term`.
pub fn msg(kind: MessageType, from: u64, to: u64, term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(kind);
    m.from = from;
    m.to = to;
    m.term = term;
    m
}

/// A normal entry with a small payload.
pub fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        data: Bytes::from_static(b"hostile"),
        ..Default::default()
    }
}

/// Connects to `addr` from `source` (any port).
pub async fn connect_from(addr: SocketAddr, source: IpAddr) -> TcpStream {
    let s = TcpSocket::new_v4().expect("socket");
    s.bind(SocketAddr::new(source, 0)).expect("bind source");
    s.connect(addr).await.expect("connect")
}

/// Connects to `addr` from 127.0.0.1.
pub async fn connect(addr: SocketAddr) -> TcpStream {
    connect_from(addr, IpAddr::V4(Ipv4Addr::LOCALHOST)).await
}

/// Whether the peer closes `s` within `within` (the acceptor never writes).
pub async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(within, s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Starts a node per config.
pub async fn start_all(configs: &[NodeConfig]) -> Vec<Arc<Node>> {
    let mut nodes = Vec::new();
    for c in configs {
        nodes.push(Node::start(c.clone()).await.expect("node starts"));
    }
    nodes
}

/// Waits until a node leads the metadata group (`metadata`) or the stream; its position.
pub async fn wait_for_leader(nodes: &[Arc<Node>], metadata: bool) -> usize {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        for (i, n) in nodes.iter().enumerate() {
            let v = if metadata {
                n.metadata_group().expect("metadata group").visible()
            } else {
                n.stream(STREAM).expect("stream").visible()
            };
            if v.leader == n.config().id {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "no leader within {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every node is alive and the cluster commits a metadata command through every node and a
/// stream append that every node then holds (`all`), or at least a majority.
pub async fn assert_cluster_commits(nodes: &[Arc<Node>], tag: &str, all: bool) {
    for n in nodes {
        assert!(
            n.stopped_groups().is_empty(),
            "node {}: group threads ended: {:?}",
            n.config().id,
            n.stopped_groups()
        );
    }
    if all {
        for (i, n) in nodes.iter().enumerate() {
            let topic = format!("{tag}-{i}");
            n.metadata_proposer()
                .propose(
                    &MetaCommand::CreateTopic {
                        name: topic,
                        partitions: 1,
                        replicas: Vec::new(),
                        configs: Default::default(),
                    },
                    TIMEOUT,
                )
                .await
                .unwrap_or_else(|e| panic!("metadata command through node {}: {e}", i + 1));
        }
    } else {
        // A node the hostile input made diverge may never see its own command commit; the
        // metadata leader does.
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let leader = wait_for_leader(nodes, true).await;
            let cmd = MetaCommand::CreateTopic {
                name: tag.to_owned(),
                partitions: 1,
                replicas: Vec::new(),
                configs: Default::default(),
            };
            match nodes[leader]
                .metadata_proposer()
                .propose(&cmd, TIMEOUT)
                .await
            {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("metadata command after hostile input: {e}; retrying");
                }
                Err(e) => panic!("no metadata command committed after hostile input: {e}"),
            }
        }
    }
    let deadline = Instant::now() + TIMEOUT;
    let appended = loop {
        let leader = wait_for_leader(nodes, false).await;
        let s = nodes[leader].stream(STREAM).expect("stream");
        match s.append(batch(1, tag.as_bytes()), 1, TIMEOUT).await {
            Ok(a) => break a,
            Err(e) if Instant::now() < deadline => {
                eprintln!("append after hostile input: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no append committed after hostile input: {e}"),
        }
    };
    let want = appended.base_offset + 1;
    let needed = if all {
        nodes.len()
    } else {
        nodes.len() / 2 + 1
    };
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let reached: Vec<bool> = nodes
            .iter()
            .map(|n| n.stream(STREAM).expect("stream").visible().high_watermark >= want)
            .collect();
        if reached.iter().filter(|r| **r).count() >= needed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than {needed} nodes reached high watermark {want}: {reached:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
