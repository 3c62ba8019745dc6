//! Random messages near a raft-rs node's state through both of the peer guard's checks and
//! into raft-rs: nothing may panic.

use protobuf::ProtobufEnum;
use raft::prelude::MessageType;
use raft::storage::MemStorage;
use raft::RawNode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::test_fixtures::{entry, limits, msg, node, proposal_entry, SenderNamed};
use super::{check_in_group, check_message};
use crate::replication::raft_storage::encode_snapshot_data;

/// Persists and applies what `n` has ready, as the group thread does.
fn handle_ready(n: &mut RawNode<MemStorage>) {
    if !n.has_ready() {
        return;
    }
    let mut rd = n.ready();
    let store = n.raft.raft_log.store.clone();
    if !rd.snapshot().is_empty() {
        let _ = store.wl().apply_snapshot(rd.snapshot().clone());
    }
    if !rd.entries().is_empty() {
        store.wl().append(rd.entries()).expect("append");
    }
    if let Some(hs) = rd.hs() {
        store.wl().set_hardstate(hs.clone());
    }
    let _ = rd.take_messages();
    let _ = rd.take_persisted_messages();
    let mut light = n.advance(rd);
    if let Some(commit) = light.commit_index() {
        store.wl().mut_hard_state().set_commit(commit);
    }
    let _ = light.take_messages();
    n.advance_apply();
}

fn near(rng: &mut StdRng, v: u64) -> u64 {
    match rng.gen_range(0..12) {
        0..=5 => v,
        6 | 7 => v.saturating_sub(rng.gen_range(1..3)),
        8 | 9 => v.saturating_add(rng.gen_range(1..3)),
        10 => rng.gen_range(0..4),
        _ => [u64::MAX, (1 << 62) + 1, 1 << 40, rng.gen()][rng.gen_range(0..4)],
    }
}

/// Random messages near a raft-rs node's state, through both checks, into `step`, with
/// Readies handled in between: nothing may panic. `PEER_GUARD_CASES` sets the count.
#[test]
fn guarded_random_messages_never_panic_raft_rs() {
    let cases: u64 = std::env::var("PEER_GUARD_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let mut rng = StdRng::seed_from_u64(cases);
    let mut n = node();
    let l = limits();
    for i in 0..cases {
        let (term, last) = (n.raft.term, n.raft.raft_log.last_index());
        let mut m = msg(
            MessageType::from_i32(rng.gen_range(0..19)).expect("a type"),
            rng.gen_range(2..4),
            1,
            match rng.gen_range(0..8) {
                0 => 0,
                _ => near(&mut rng, term.max(1)),
            },
        );
        m.index = near(&mut rng, last);
        m.log_term = near(&mut rng, term).min(m.term);
        m.commit = near(&mut rng, last);
        m.commit_term = near(&mut rng, term).min(m.term);
        m.reject = rng.gen();
        m.reject_hint = near(&mut rng, last);
        let count = rng.gen_range(0..4);
        let mut entries = Vec::new();
        for k in 0..count {
            let mut e = if rng.gen_range(0..3) == 0 {
                proposal_entry(m.from)
            } else {
                entry(m.index.wrapping_add(k + 1), m.term.max(1))
            };
            if rng.gen_range(0..5) == 0 {
                e.index = near(&mut rng, last);
            }
            entries.push(e);
        }
        m.entries = entries.into();
        if m.get_msg_type() == MessageType::MsgSnapshot {
            let meta = m.mut_snapshot().mut_metadata();
            meta.index = near(&mut rng, last);
            meta.term = near(&mut rng, term);
            let cs = meta.mut_conf_state();
            // Mostly the group's configuration, sometimes another (valid or not).
            match rng.gen_range(0..8) {
                0 => cs.voters = vec![1, 2],
                1 => {
                    cs.voters = vec![2, 4];
                    cs.learners = vec![1];
                }
                2 => {
                    cs.voters = vec![1, 2, 4];
                    cs.voters_outgoing = vec![1, 2, 3];
                    cs.auto_leave = rng.gen();
                }
                3 => {
                    cs.voters = vec![1, 2];
                    cs.learners = vec![2, 3];
                    cs.learners_next = vec![rng.gen_range(0..5)];
                }
                _ => cs.voters = vec![1, 2, 3],
            }
            m.mut_snapshot().data = encode_snapshot_data(0);
        }
        let hello = m.from;
        if check_message(1, hello, 7, &m, &SenderNamed).is_ok()
            && check_in_group(&n.raft, &l, &mut m).is_ok()
        {
            let _ = n.step(m);
        }
        if i % 3 == 0 {
            n.tick();
        }
        if i % 5 == 0 {
            handle_ready(&mut n);
        }
    }
}
