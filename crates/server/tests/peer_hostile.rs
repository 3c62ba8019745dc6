//! Hostile input on the Raft peer port of an in-process 3-node cluster: nothing that arrives
//! there may crash a node, rewrite what a node knows about its peers, or stop the cluster from
//! committing. Also: a follower whose disk was wiped catches up instead of crashing.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use common::peer::{
    assert_cluster_commits, closed_within, connect, connect_from, entry, frame, frame_v3, hello,
    hello_v3, msg, start_all, wait_for_leader, STREAM, TIMEOUT,
};
use common::{batch, cluster_configs};
use raft::prelude::MessageType;
use tokio::io::AsyncWriteExt;
use vdl_server::metadata::METADATA_GROUP_ID;
use vdl_server::Node;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_peer_input_crashes_no_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let configs = cluster_configs(3, dir.path(), &[STREAM]);
    let nodes = start_all(&configs).await;
    wait_for_leader(&nodes, true).await;
    wait_for_leader(&nodes, false).await;
    let stream_group = nodes[0].stream(STREAM).expect("stream").group_id();
    let brokers: Vec<_> = nodes.iter().map(|n| n.live_brokers()).collect();
    // Every node sees both peers before the attack starts.
    let deadline = Instant::now() + TIMEOUT;
    while nodes.iter().any(|n| n.live_brokers().len() < 3) {
        assert!(Instant::now() < deadline, "peers did not connect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let brokers_before: Vec<_> = nodes.iter().map(|n| n.live_brokers()).collect();
    drop(brokers);
    let addr = |i: usize| configs[i].peer_listen;
    let id = |i: usize| configs[i].id;
    let other = |i: usize| (i + 1) % 3;
    let third = |i: usize| (i + 2) % 3;

    // 1. The reproduced crash, byte for byte: a hello with no advertised address, then an
    //    empty MsgPropose (type and recipient only) for the metadata group: 36 bytes, to
    //    every node.
    for i in 0..3 {
        let mut bytes = hello(id(other(i)), "");
        bytes.extend(frame(&[(
            METADATA_GROUP_ID,
            msg(MessageType::MsgPropose, 0, id(i), 0),
        )]));
        assert_eq!(bytes.len(), 36);
        let mut s = connect(addr(i)).await;
        s.write_all(&bytes).await.expect("write");
        assert!(closed_within(&mut s, TIMEOUT).await);
        // The same in the current protocol version.
        let mut bytes = hello_v3(id(other(i)), "");
        bytes.extend(frame_v3(&[(
            METADATA_GROUP_ID,
            msg(MessageType::MsgPropose, 0, id(i), 0),
        )]));
        let mut s = connect(addr(i)).await;
        s.write_all(&bytes).await.expect("write");
        assert!(closed_within(&mut s, TIMEOUT).await);
    }

    // 2. Identity: another member's id from an address that is not its own, this node's own
    //    id, an unknown id. Each is closed and nothing about the peers changes.
    for (source, claimed, target) in [
        (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), id(1), 0),
        (IpAddr::V4(Ipv4Addr::LOCALHOST), id(0), 0),
        (IpAddr::V4(Ipv4Addr::LOCALHOST), 99, 1),
    ] {
        let mut s = connect_from(addr(target), source).await;
        let _ = s.write_all(&hello(claimed, "evil.example:9092")).await;
        assert!(
            closed_within(&mut s, TIMEOUT).await,
            "hello claiming {claimed} from {source} was not closed"
        );
    }
    for (n, before) in nodes.iter().zip(&brokers_before) {
        assert_eq!(&n.live_brokers(), before, "advertised addresses changed");
    }

    // 3. Garbage: a bad magic, a frame claiming 2 GiB, a frame of random bytes, a message
    //    running past its frame.
    let garbage: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        [
            hello(id(1), &configs[1].kafka_advertised),
            (2u32 << 30).to_be_bytes().to_vec(),
        ]
        .concat(),
        [
            hello(id(1), &configs[1].kafka_advertised),
            20u32.to_be_bytes().to_vec(),
            (0u8..20).map(|b| b.wrapping_mul(97)).collect(),
        ]
        .concat(),
        [
            hello(id(1), &configs[1].kafka_advertised),
            16u32.to_be_bytes().to_vec(),
            1u64.to_be_bytes().to_vec(),
            1000u32.to_be_bytes().to_vec(),
            vec![0; 4],
        ]
        .concat(),
        // The same in version 3: a 2 GiB claim, a message running past its frame, a hello
        // longer than allowed, a version from the future.
        [
            hello_v3(id(1), &configs[1].kafka_advertised),
            (2u32 << 30).to_be_bytes().to_vec(),
        ]
        .concat(),
        [
            hello_v3(id(1), &configs[1].kafka_advertised),
            4u32.to_be_bytes().to_vec(),
            vec![0x0a, 0x64, 0x08, 0x01],
        ]
        .concat(),
        [
            b"VDLP\x00\x03".to_vec(),
            (1u32 << 20).to_be_bytes().to_vec(),
        ]
        .concat(),
        b"VDLP\x00\x04\x00\x00\x00\x00".to_vec(),
    ];
    for g in garbage {
        let mut s = connect(addr(0)).await;
        s.write_all(&g).await.expect("write");
        assert!(
            closed_within(&mut s, TIMEOUT).await,
            "garbage was not closed"
        );
    }

    // 4. Hostile but well-formed messages, on admitted connections (a member's id from its
    //    address: 127.0.0.1 here) to every node, for the metadata group and the stream.
    let refused_before: u64 = nodes
        .iter()
        .map(|n| n.peer_stats().refused_messages())
        .sum();
    let mut held = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let j = other(i);
        let mut msgs = Vec::new();
        for group in [METADATA_GROUP_ID, stream_group] {
            let v = if group == METADATA_GROUP_ID {
                node.metadata_group().expect("metadata").visible()
            } else {
                node.stream(STREAM).expect("stream").visible()
            };
            let (me, from, term) = (id(i), id(j), v.term);
            // An empty proposal with a valid hello (and one for a stream group).
            msgs.push((group, msg(MessageType::MsgPropose, from, me, 0)));
            // A heartbeat whose commit lies far beyond the log.
            let mut m = msg(MessageType::MsgHeartbeat, from, me, term);
            m.commit = 1 << 40;
            msgs.push((group, m));
            // The same from a sender that is not the connection's.
            let mut m = msg(MessageType::MsgHeartbeat, id(third(i)), me, term);
            m.commit = 1 << 40;
            msgs.push((group, m));
            // Appends whose entries do not follow the message's index.
            let mut m = msg(MessageType::MsgAppend, from, me, term);
            m.index = v.applied_index;
            m.log_term = term;
            m.commit = 1 << 40;
            m.entries = vec![entry(1, term), entry(2, term)].into();
            msgs.push((group, m));
            let mut m = msg(MessageType::MsgAppend, from, me, term);
            m.index = v.applied_index;
            m.log_term = term;
            m.entries = vec![entry(v.applied_index + 1, term + 5)].into();
            msgs.push((group, m));
            // Local-only messages.
            for kind in [
                MessageType::MsgHup,
                MessageType::MsgBeat,
                MessageType::MsgUnreachable,
                MessageType::MsgCheckQuorum,
                MessageType::MsgSnapStatus,
            ] {
                msgs.push((group, msg(kind, from, me, 0)));
                msgs.push((group, msg(kind, from, me, term)));
            }
            // Acknowledgements of entries the leader does not have.
            let mut m = msg(MessageType::MsgAppendResponse, from, me, term);
            m.index = u64::MAX - 1;
            msgs.push((group, m));
            let mut m = msg(MessageType::MsgAppendResponse, from, me, term);
            m.index = 1 << 40;
            m.reject = true;
            m.reject_hint = 1 << 40;
            msgs.push((group, m));
            // A read index without its entry, a vote with term 0, a term about to overflow.
            msgs.push((group, msg(MessageType::MsgReadIndex, from, me, 0)));
            msgs.push((group, msg(MessageType::MsgRequestVote, from, me, 0)));
            msgs.push((
                group,
                msg(MessageType::MsgRequestPreVote, from, me, u64::MAX),
            ));
            // A message to another node and one for a group that does not exist.
            msgs.push((group, msg(MessageType::MsgHeartbeat, from, 42, term)));
            msgs.push((7, msg(MessageType::MsgHeartbeat, from, me, term)));
        }
        // On a connection of an earlier release's version and on one of the current version.
        let (advertised, claimed) = (&configs[j].kafka_advertised, id(j));
        for (greeting, hostile) in [
            (hello(claimed, advertised), frame(&msgs)),
            (hello_v3(claimed, advertised), frame_v3(&msgs)),
        ] {
            let mut s = connect(addr(i)).await;
            s.write_all(&greeting).await.expect("hello");
            s.write_all(&hostile).await.expect("hostile frame");
            held.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refused_after: u64 = nodes
        .iter()
        .map(|n| n.peer_stats().refused_messages())
        .sum();
    assert!(
        refused_after >= refused_before + 2 * 3 * 2 * 20,
        "refused messages: {refused_before} -> {refused_after}"
    );
    drop(held);

    // 5. Connections past the limit (4 per member still in their hello: 8 here): the excess is
    //    closed at once, the rest when their hello deadline (5 s) passes.
    let mut idle = Vec::new();
    for _ in 0..14 {
        idle.push(connect(addr(2)).await);
    }
    let mut closed_at_once = 0;
    for s in idle.iter_mut() {
        if closed_within(s, Duration::from_millis(200)).await {
            closed_at_once += 1;
        }
    }
    assert!(
        closed_at_once >= 6,
        "only {closed_at_once} of 14 connections were refused"
    );
    let deadline = Instant::now() + Duration::from_secs(8);
    for s in idle.iter_mut() {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            closed_within(s, left).await,
            "a connection without hello outlived its deadline"
        );
    }
    assert!(nodes
        .iter()
        .all(|n| n.peer_stats().refused_connections() > 0));

    // Afterwards: the peers are as they were, and the cluster commits.
    for (n, before) in nodes.iter().zip(&brokers_before) {
        assert_eq!(&n.live_brokers(), before, "advertised addresses changed");
    }
    assert_cluster_commits(&nodes, "after-hostile", true).await;
    for n in &nodes {
        n.shutdown();
    }
}

/// A follower whose data directory was wiped restarts empty while the leader still believes
/// it holds everything it acknowledged: the leader's heartbeats name a commit index beyond
/// its log. It must catch up, not crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_with_wiped_disk_catches_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let configs = cluster_configs(3, dir.path(), &[STREAM]);
    let mut nodes = start_all(&configs).await;
    wait_for_leader(&nodes, true).await;
    let leader = wait_for_leader(&nodes, false).await;
    let s = nodes[leader].stream(STREAM).expect("stream");
    for i in 0..50u32 {
        s.append(batch(1, &i.to_be_bytes()), 1, TIMEOUT)
            .await
            .expect("append");
    }
    let victim = (leader + 1) % 3;
    let hw = s.visible().high_watermark;
    let vs = nodes[victim].stream(STREAM).expect("stream");
    let deadline = Instant::now() + TIMEOUT;
    while vs.visible().high_watermark < hw {
        assert!(Instant::now() < deadline, "follower did not catch up first");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(vs);
    nodes[victim].shutdown();
    std::fs::remove_dir_all(&configs[victim].data_dir).expect("wipe the follower");
    nodes[victim] = Node::start(configs[victim].clone())
        .await
        .expect("restart empty");
    for i in 50..60u32 {
        let leader = wait_for_leader(&nodes, false).await;
        let s = nodes[leader].stream(STREAM).expect("stream");
        s.append(batch(1, &i.to_be_bytes()), 1, TIMEOUT)
            .await
            .expect("append after the wipe");
    }
    let leader = wait_for_leader(&nodes, false).await;
    let hw = nodes[leader]
        .stream(STREAM)
        .expect("stream")
        .visible()
        .high_watermark;
    let vs = nodes[victim].stream(STREAM).expect("stream");
    let deadline = Instant::now() + Duration::from_secs(20);
    while vs.visible().high_watermark < hw {
        assert!(
            nodes[victim].stopped_groups().is_empty(),
            "the wiped follower crashed"
        );
        assert!(
            Instant::now() < deadline,
            "the wiped follower did not catch up: {} < {hw}",
            vs.visible().high_watermark
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_cluster_commits(&nodes, "after-wipe", true).await;
    for n in &nodes {
        n.shutdown();
    }
}
