//! A rolling upgrade: two nodes of this release and, in the third member's place, the test
//! speaking peer protocol version 2 as the previous release does (its hellos, fixed-layout
//! frames, and refusing version 3 hellos). The new nodes must dial it back in version 2, send it
//! frames it can read, and write metadata commands in the JSON it reads while it is heard; once
//! it is gone and the nodes restart, metadata commands are protobuf again.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster_configs;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use vdl_server::metadata::codec::FORMAT_PROST_V1;
use vdl_server::metadata::METADATA_STREAM;
use vdl_server::replication::peer_wire::{self, FrameFormat};
use vdl_server::replication::replicas::HelloDirs;
use vdl_server::Node;

const T: Duration = Duration::from_secs(10);

/// What the emulated old node saw on one connection dialed to it: the hello's version and
/// sender, and the number of messages to it in the first frame (decoded as version 2 frames).
type Seen = (u16, u64, usize);

/// Accepts connections as a node of the previous release does: a version 3 hello is refused
/// (closed); a version 1 or 2 hello is read, then one frame in the fixed layout.
async fn old_node_listener(listener: TcpListener, me: u64, seen: mpsc::Sender<Seen>) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut start = [0u8; 6];
            if s.read_exact(&mut start).await.is_err() {
                return;
            }
            let Ok(version) = peer_wire::check_hello_start(&start) else {
                return;
            };
            if version >= peer_wire::VERSION_3 {
                // The previous release refuses this version: it closes the connection.
                let _ = seen.send((version, 0, 0)).await;
                return;
            }
            let mut head = [0u8; peer_wire::LEGACY_HEAD_BYTES];
            s.read_exact(&mut head).await.expect("hello head");
            let (from, adv_len) = peer_wire::parse_legacy_head(&head).expect("legacy head");
            let mut rest = vec![0u8; adv_len + peer_wire::LEGACY_V2_TAIL_BYTES];
            s.read_exact(&mut rest).await.expect("hello rest");
            let len = s.read_u32().await.expect("frame length") as usize;
            let mut body = vec![0u8; len];
            s.read_exact(&mut body).await.expect("frame body");
            let messages = peer_wire::decode_frame(FrameFormat::Legacy, Bytes::from(body))
                .expect("a version 2 frame");
            let to_me = messages.iter().filter(|(_, m)| m.to == me).count();
            assert_eq!(to_me, messages.len(), "messages for another node");
            let _ = seen.send((version, from, to_me)).await;
            // Keep reading so the sender's connection stays up.
            let mut sink = vec![0u8; 64 << 10];
            while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
        });
    }
}

/// The metadata entries in `node`'s metadata log (its Raft group must be stopped).
fn metadata_entries(data_dir: &std::path::Path) -> Vec<Bytes> {
    let store = logstore::LogStore::open(
        &data_dir.join(METADATA_STREAM),
        logstore::StoreConfig::default(),
    )
    .expect("open the metadata log");
    let (first, last) = (store.first_index(), store.last_index());
    let mut out = Vec::new();
    let mut lo = first;
    while lo <= last {
        let entries = store.entries(lo, last + 1, 1 << 20).expect("entries");
        lo += entries.len() as u64;
        // Meta entries carry context byte 2 (`raft_storage::CTX_META`).
        out.extend(
            entries
                .into_iter()
                .filter(|e| e.context.first() == Some(&2) && !e.payload.is_empty())
                .map(|e| e.payload),
        );
    }
    out
}

fn entry_naming(entries: &[Bytes], topic: &str) -> Bytes {
    entries
        .iter()
        .find(|e| e.windows(topic.len()).any(|w| w == topic.as_bytes()))
        .unwrap_or_else(|| panic!("no metadata entry names {topic}"))
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_nodes_talk_to_a_node_of_the_previous_release_in_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[]);
    let old = &configs[2];
    let listener = TcpListener::bind(old.peer_listen)
        .await
        .expect("old node's port");
    let (seen_tx, mut seen_rx) = mpsc::channel(1024);
    let old_task = tokio::spawn(old_node_listener(listener, old.id, seen_tx));

    let mut nodes: Vec<Arc<Node>> = Vec::new();
    for c in &configs[..2] {
        nodes.push(Node::start(c.clone()).await.unwrap());
    }
    // The old node dials both new nodes with its version 2 hello and keeps the connections.
    let dirs = HelloDirs {
        dir: 0x5eed,
        sender_settled: true,
        ..HelloDirs::default()
    };
    let mut old_outgoing = Vec::new();
    for c in &configs[..2] {
        let mut s = TcpStream::connect(c.peer_listen).await.unwrap();
        let hello =
            peer_wire::encode_hello(peer_wire::VERSION_2, old.id, &old.kafka_advertised, dirs);
        s.write_all(&hello).await.unwrap();
        old_outgoing.push(s);
    }

    // Both new nodes come to dial it in version 2 and send it frames it can read.
    let mut dialed_in_v2 = HashSet::new();
    let deadline = Instant::now() + T;
    while dialed_in_v2.len() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        let (version, from, messages) = tokio::time::timeout(left, seen_rx.recv())
            .await
            .expect("both new nodes dial the old one in version 2 within 10 s")
            .expect("listener runs");
        if version == peer_wire::VERSION_2 {
            assert!(messages > 0);
            dialed_in_v2.insert(from);
        }
    }
    assert_eq!(dialed_in_v2, HashSet::from([configs[0].id, configs[1].id]));

    // A metadata command while the old node is heard: written in its JSON.
    nodes[0].create_topic("during-upgrade", 1, T).await.unwrap();
    let deadline = Instant::now() + T;
    while !nodes[1].is_topic("during-upgrade") {
        assert!(
            Instant::now() < deadline,
            "the topic never reached the other new node"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The old node goes away (it is being upgraded); the new nodes restart and hear only
    // version 3 from each other: metadata commands are protobuf again.
    old_task.abort();
    drop(old_outgoing);
    for n in nodes.drain(..) {
        n.shutdown();
    }
    for c in &configs[..2] {
        nodes.push(Node::start(c.clone()).await.unwrap());
    }
    let deadline = Instant::now() + T;
    loop {
        match nodes[1].create_topic("after-upgrade", 1, T).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("create after restart: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no metadata command after restart: {e}"),
        }
    }
    assert!(nodes[0].is_topic("during-upgrade"));
    for n in nodes.drain(..) {
        n.shutdown();
    }
    // Shut down: the stores are closed once the group threads ended.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let entries = metadata_entries(&configs[0].data_dir);
    let during = entry_naming(&entries, "during-upgrade");
    assert_eq!(
        during.first(),
        Some(&b'{'),
        "JSON while an old node is heard"
    );
    let after = entry_naming(&entries, "after-upgrade");
    assert_eq!(after.first(), Some(&FORMAT_PROST_V1), "protobuf afterwards");
}
