//! Fuzzing the Raft peer port of a running in-process 3-node cluster through real sockets:
//! well-formed but hostile Raft messages (random types, terms, indexes, commits, entries,
//! snapshots; many near the node's real terms and indexes so they reach raft-rs's deeper paths)
//! on admitted connections that claim to be the other two members, in the current peer
//! protocol (version 3, protobuf frames) and in an earlier release's (version 1), plus garbage
//! frames and hellos, all sent to one node (the victim). Afterwards nothing has panicked and every group
//! thread runs; the victim is stopped and the other two still commit.
//!
//! Why one victim, stopped at the end: a sender that passes as a member (its id, from its
//! address) is a Byzantine member, and Raft does not tolerate those. Accepted hostile appends
//! and snapshots may leave the victim's log diverged for good (it never crashes, but it may
//! never agree with the others again), and while it runs it may win elections and stall the
//! cluster. The two others only ever hear the victim's own raft-rs, so they stay consistent with
//! each other and commit once it is gone. For the same reason vote responses here are always
//! rejections: a forged vote grant could make the victim a second leader of a term, which
//! breaks Raft's safety between the healthy nodes too (the guard cannot tell a forged grant
//! from a real one). Forged membership changes are left out for the same reason: once the
//! victim wins an election it replicates its log, forged entries included, to the two others
//! (a member's log is trusted; peer TLS decides who is a member), and a committed change that
//! adds a voter nobody runs, or removes a healthy one, leaves the two without a majority once
//! the victim stops. Conf-change entries still come with garbage data and with changes that
//! name the current voters as voters (raft-rs's apply path, no membership effect); snapshots
//! carry configurations whose majorities nodes 2 and 3 can still form, or that leave the
//! victim out (it then never leads, so spreads nothing).
//! Likewise no term or index is sent exactly at the guard's bound: a
//! group pushed there can hold no further election (refusing what lies beyond is what keeps
//! raft-rs from overflowing).
//!
//! `PEER_FUZZ_CASES` sets the number of messages (default 20,000); `PEER_FUZZ_SEED` the seed
//! (default: from the clock; printed, so a failure can be replayed).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::peer::STREAM;
use common::peer::{
    assert_cluster_commits, connect, frame, frame_v3, hello, hello_v3, start_all, wait_for_leader,
};
use common::{batch, cluster_configs};
use protobuf::ProtobufEnum;
use raft::prelude::{
    ConfChangeSingle, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, Message,
    MessageType, Snapshot,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use vdl_server::metadata::METADATA_GROUP_ID;
use vdl_server::Node;

static PANICKED: AtomicBool = AtomicBool::new(false);

/// Where a node's group stands, so hostile messages can land near it.
#[derive(Clone, Copy)]
struct Hint {
    term: u64,
    index: u64,
}

/// One of: exactly `near`, a little off it, a small number, anything, the extremes.
fn near(rng: &mut StdRng, near: u64) -> u64 {
    match rng.gen_range(0..20) {
        0..=8 => near,
        9..=11 => near.saturating_sub(rng.gen_range(1..4)),
        12..=15 => near.saturating_add(rng.gen_range(1..4)),
        16 | 17 => rng.gen_range(0..8),
        18 => rng.gen(),
        // Past the guard's bound (refused), or far ahead but leaving room for elections (a
        // value at the bound itself would stall a group for good, as any Byzantine member
        // can: see the module documentation).
        _ => [
            u64::MAX,
            u64::MAX - 1,
            (1 << 62) + 1,
            1 << 61,
            (1 << 32) + near,
        ][rng.gen_range(0..5)],
    }
}

/// Mostly a value in `0..=cap` (as a correct peer sends), sometimes anything near `hint`.
fn at_most(rng: &mut StdRng, cap: u64, hint: u64) -> u64 {
    match rng.gen_range(0..10) {
        0..=4 => cap.min(hint),
        5 | 6 => cap,
        7 => 0,
        8 => rng.gen_range(0..=cap),
        _ => near(rng, hint),
    }
}

/// The types a peer sends, and now and then any type.
const NETWORK_TYPES: [MessageType; 14] = [
    MessageType::MsgPropose,
    MessageType::MsgAppend,
    MessageType::MsgAppendResponse,
    MessageType::MsgRequestVote,
    MessageType::MsgRequestVoteResponse,
    MessageType::MsgSnapshot,
    MessageType::MsgHeartbeat,
    MessageType::MsgHeartbeatResponse,
    MessageType::MsgTransferLeader,
    MessageType::MsgTimeoutNow,
    MessageType::MsgReadIndex,
    MessageType::MsgReadIndexResp,
    MessageType::MsgRequestPreVote,
    MessageType::MsgRequestPreVoteResponse,
];

fn random_bytes(rng: &mut StdRng, max: usize) -> Bytes {
    let n = rng.gen_range(0..=max);
    Bytes::from((0..n).map(|_| rng.gen()).collect::<Vec<u8>>())
}

fn hostile_entry(rng: &mut StdRng, index: u64, term: u64, from: u64) -> Entry {
    let mut e = Entry {
        index,
        term,
        ..Default::default()
    };
    e.set_entry_type(match rng.gen_range(0..12) {
        0 => EntryType::EntryConfChange,
        1 => EntryType::EntryConfChangeV2,
        _ => EntryType::EntryNormal,
    });
    let proposer = |tag: u8, who: u64, rng: &mut StdRng| {
        let mut c = vec![tag];
        c.extend_from_slice(&who.to_be_bytes());
        c.extend_from_slice(&rng.gen::<u64>().to_be_bytes());
        Bytes::from(c)
    };
    e.context = match rng.gen_range(0..6) {
        0 => Bytes::new(),
        1 => proposer(1, from, rng),
        2 | 5 => proposer(2, from, rng),
        3 => proposer(rng.gen_range(1..3), rng.gen_range(0..5), rng),
        _ => random_bytes(rng, 20),
    };
    e.data = match rng.gen_range(0..4) {
        0 => Bytes::new(),
        1 => batch(rng.gen_range(1..4), b"fuzz"),
        2 => {
            // A record batch with a byte or two changed.
            let mut b = batch(1, b"fuzz").to_vec();
            for _ in 0..rng.gen_range(1..3) {
                let at = rng.gen_range(0..b.len());
                b[at] = rng.gen();
            }
            Bytes::from(b)
        }
        _ => random_bytes(rng, 100),
    };
    if e.get_entry_type() != EntryType::EntryNormal {
        e.data = without_membership_effect(e.data);
    }
    e
}

/// `data` unless it decodes as a conf change that would change who votes (see the crate
/// doc): then the same change keeping only its steps that add a current voter (1..=3) as a
/// voter, re-encoded.
fn without_membership_effect(data: Bytes) -> Bytes {
    let mut cc = ConfChangeV2::default();
    if protobuf::Message::merge_from_bytes(&mut cc, &data).is_err() {
        return data;
    }
    let harmless = |c: &ConfChangeSingle| {
        c.get_change_type() == ConfChangeType::AddNode && (1..=3).contains(&c.node_id)
    };
    if cc.get_changes().iter().all(harmless) {
        return data;
    }
    let kept: Vec<ConfChangeSingle> = cc
        .get_changes()
        .iter()
        .filter(|c| harmless(c))
        .cloned()
        .collect();
    cc.set_changes(kept.into());
    Bytes::from(protobuf::Message::write_to_bytes(&cc).expect("encoding a conf change"))
}

/// A hostile message for node `me` of group state `hint`, claiming to come from `from`.
fn hostile_message(rng: &mut StdRng, hint: Hint, me: u64, from: u64) -> Message {
    let mut m = Message::default();
    let kind = if rng.gen_range(0..10) == 0 {
        MessageType::from_i32(rng.gen_range(0..19)).expect("0..=18 are message types")
    } else {
        NETWORK_TYPES[rng.gen_range(0..NETWORK_TYPES.len())]
    };
    let untermed = matches!(kind, MessageType::MsgPropose | MessageType::MsgReadIndex);
    m.set_msg_type(kind);
    m.to = if rng.gen_range(0..50) == 0 {
        rng.gen_range(0..5)
    } else {
        me
    };
    m.from = if rng.gen_range(0..50) == 0 {
        rng.gen_range(0..5)
    } else {
        from
    };
    m.term = match rng.gen_range(0..10) {
        0 if !untermed => 0,
        0..=7 if untermed => 0,
        1 | 2 => hint.term + 1,
        _ => near(rng, hint.term),
    };
    m.index = near(rng, hint.index);
    m.log_term = at_most(rng, m.term, hint.term);
    m.commit = match rng.gen_range(0..6) {
        0 => 0,
        1 => 1 << 40,
        _ => near(rng, hint.index),
    };
    m.commit_term = at_most(rng, m.term, hint.term);
    m.reject = rng.gen()
        || matches!(
            kind,
            MessageType::MsgRequestVoteResponse | MessageType::MsgRequestPreVoteResponse
        );
    m.reject_hint = near(rng, hint.index);
    if rng.gen_range(0..50) == 0 {
        m.request_snapshot = near(rng, hint.index);
    }
    if rng.gen_range(0..4) == 0 {
        m.context = random_bytes(rng, 16);
    }
    let carries = matches!(
        kind,
        MessageType::MsgAppend
            | MessageType::MsgPropose
            | MessageType::MsgReadIndex
            | MessageType::MsgReadIndexResp
    );
    let entries = match rng.gen_range(0..10) {
        _ if !carries && rng.gen_range(0..10) != 0 => 0,
        0 | 1 => 0,
        2..=5 => 1,
        _ => rng.gen_range(2..6),
    };
    let consecutive = rng.gen_range(0..4) != 0;
    let mut v = Vec::new();
    for k in 0..entries {
        let index = if consecutive {
            m.index.wrapping_add(k + 1)
        } else {
            near(rng, hint.index)
        };
        let term = match rng.gen_range(0..6) {
            0..=2 => m.term,
            3 | 4 => m.log_term,
            _ => near(rng, hint.term),
        };
        v.push(hostile_entry(rng, index, term, from));
    }
    m.entries = v.into();
    if kind == MessageType::MsgSnapshot || rng.gen_range(0..30) == 0 {
        let mut s = Snapshot {
            data: match rng.gen_range(0..3) {
                0 => Bytes::copy_from_slice(&near(rng, hint.index).to_be_bytes()),
                1 => Bytes::copy_from_slice(&rng.gen_range(0u64..100).to_be_bytes()),
                _ => random_bytes(rng, 12),
            },
            ..Default::default()
        };
        let meta = s.mut_metadata();
        meta.index = near(rng, hint.index);
        meta.term = at_most(rng, m.term, hint.term);
        let mut cs = ConfState {
            // No configuration the victim could spread that needs more than nodes 2 and 3
            // for a majority (see the crate doc): not [1, 2, 3, 4], no outgoing [1, 2].
            voters: match rng.gen_range(0..8) {
                0 => vec![2, 3],
                1 => vec![3, 2, 1],
                2 => vec![rng.gen_range(0..5)],
                _ => vec![1, 2, 3],
            },
            ..Default::default()
        };
        if rng.gen_range(0..8) == 0 {
            cs.learners = vec![rng.gen_range(0..5)];
        }
        if rng.gen_range(0..8) == 0 {
            cs.voters_outgoing = vec![2, 3];
        }
        meta.set_conf_state(cs);
        m.set_snapshot(s);
    }
    m
}

/// Garbage for a fresh connection: bad hellos, frames of random bytes, truncated messages.
fn garbage(rng: &mut StdRng, claimed: u64, advertised: &str) -> Vec<u8> {
    let good = if rng.gen() {
        hello_v3(claimed, advertised)
    } else {
        hello(claimed, advertised)
    };
    match rng.gen_range(0..5) {
        0 => random_bytes(rng, 64).to_vec(),
        1 => {
            let mut h = good;
            let at = rng.gen_range(0..h.len());
            h[at] = rng.gen();
            h
        }
        2 => {
            let mut b = good;
            let body = random_bytes(rng, 200);
            b.extend_from_slice(&(body.len() as u32).to_be_bytes());
            b.extend_from_slice(&body);
            b
        }
        3 => {
            let mut b = good;
            b.extend_from_slice(&rng.gen::<u32>().to_be_bytes());
            b.extend_from_slice(&random_bytes(rng, 100));
            b
        }
        _ => {
            // A valid message whose length runs past its frame.
            let mut b = good;
            let body_len = rng.gen_range(12u32..40);
            b.extend_from_slice(&body_len.to_be_bytes());
            b.extend_from_slice(&METADATA_GROUP_ID.to_be_bytes());
            b.extend_from_slice(&(body_len + rng.gen_range(1..100)).to_be_bytes());
            b.extend_from_slice(&random_bytes(rng, body_len as usize - 12));
            b
        }
    }
}

fn hints(nodes: &[Arc<Node>]) -> Vec<HashMap<u64, Hint>> {
    nodes
        .iter()
        .map(|n| {
            let mut h = HashMap::new();
            let meta = n.metadata_group().expect("metadata group").visible();
            h.insert(
                METADATA_GROUP_ID,
                Hint {
                    term: meta.term,
                    index: meta.applied_index,
                },
            );
            let s = n.stream(STREAM).expect("stream");
            let v = s.visible();
            h.insert(
                s.group_id(),
                Hint {
                    term: v.term,
                    index: v.applied_index,
                },
            );
            h
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_messages_through_real_sockets_crash_nothing() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICKED.store(true, Ordering::SeqCst);
        default_hook(info);
    }));
    let cases: u64 = std::env::var("PEER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let seed: u64 = std::env::var("PEER_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("peer fuzz: PEER_FUZZ_CASES={cases} PEER_FUZZ_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    let dir = tempfile::tempdir().expect("tempdir");
    let configs = cluster_configs(3, dir.path(), &[STREAM]);
    let nodes = start_all(&configs).await;
    wait_for_leader(&nodes, true).await;
    wait_for_leader(&nodes, false).await;
    let stream_group = nodes[0].stream(STREAM).expect("stream").group_id();

    // All hostile input goes to the victim, on one admitted connection per claimed member
    // (reopened when closed).
    let target = 0;
    // Keyed by (claimed member, current protocol version): both the frames of version 3 and
    // those of earlier releases are fuzzed.
    let mut conns: HashMap<(usize, bool), TcpStream> = HashMap::new();
    let mut state = hints(&nodes);
    let started = Instant::now();
    let mut sent: u64 = 0;
    let mut frames: u64 = 0;
    let mut garbage_conns: u64 = 0;
    while sent < cases {
        if frames % 64 == 0 {
            state = hints(&nodes);
        }
        let claimed = rng.gen_range(1..3);
        if rng.gen_range(0..200) == 0 {
            let mut s = connect(configs[target].peer_listen).await;
            let g = garbage(
                &mut rng,
                configs[claimed].id,
                &configs[claimed].kafka_advertised,
            );
            let _ = s.write_all(&g).await;
            garbage_conns += 1;
            continue;
        }
        let count = rng.gen_range(1..=64u64).min(cases - sent);
        let mut msgs = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let group = match rng.gen_range(0..20) {
                0 => rng.gen_range(0..4),
                1..=9 => METADATA_GROUP_ID,
                _ => stream_group,
            };
            let hint = state[target]
                .get(&group)
                .copied()
                .unwrap_or(Hint { term: 1, index: 1 });
            let m = hostile_message(&mut rng, hint, configs[target].id, configs[claimed].id);
            msgs.push((group, m));
        }
        let v3 = rng.gen();
        let bytes = if v3 { frame_v3(&msgs) } else { frame(&msgs) };
        let key = (claimed, v3);
        for _attempt in 0..2 {
            if let std::collections::hash_map::Entry::Vacant(slot) = conns.entry(key) {
                let mut s = connect(configs[target].peer_listen).await;
                let (id, advertised) = (configs[claimed].id, &configs[claimed].kafka_advertised);
                let greeting = if v3 {
                    hello_v3(id, advertised)
                } else {
                    hello(id, advertised)
                };
                s.write_all(&greeting).await.expect("hello");
                slot.insert(s);
            }
            let s = conns.get_mut(&key).expect("connection");
            if s.write_all(&bytes).await.is_ok() {
                break;
            }
            conns.remove(&key);
        }
        sent += count;
        frames += 1;
        assert!(
            !PANICKED.load(Ordering::SeqCst),
            "a panic after {sent} messages (PEER_FUZZ_SEED={seed})"
        );
    }
    drop(conns);
    let elapsed = started.elapsed();
    let refused: u64 = nodes
        .iter()
        .map(|n| n.peer_stats().refused_messages())
        .sum();
    let delivered: u64 = nodes
        .iter()
        .map(|n| n.peer_stats().delivered_messages())
        .sum();
    let dropped: u64 = nodes
        .iter()
        .map(|n| n.peer_stats().dropped_messages())
        .sum();
    let refused_conns: u64 = nodes
        .iter()
        .map(|n| n.peer_stats().refused_connections())
        .sum();
    eprintln!(
        "peer fuzz: {sent} messages in {frames} frames, {garbage_conns} garbage connections, \
         {:.1} s ({:.0} messages/s); refused {refused} messages, {refused_conns} connections; \
         {delivered} messages queued for groups (legitimate ones included), {dropped} dropped \
         on full inboxes",
        elapsed.as_secs_f64(),
        sent as f64 / elapsed.as_secs_f64()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !PANICKED.load(Ordering::SeqCst),
        "a panic (PEER_FUZZ_SEED={seed})"
    );
    for n in &nodes {
        assert!(
            n.stopped_groups().is_empty(),
            "node {}: group threads ended (PEER_FUZZ_SEED={seed})",
            n.config().id
        );
    }
    nodes[target].shutdown();
    let healthy: Vec<Arc<Node>> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != target)
        .map(|(_, n)| n.clone())
        .collect();
    assert_cluster_commits(&healthy, "after-fuzz", true).await;
    assert!(
        !PANICKED.load(Ordering::SeqCst),
        "a panic (PEER_FUZZ_SEED={seed})"
    );
    for n in &nodes {
        n.shutdown();
    }
}
