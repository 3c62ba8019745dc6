//! Unit tests of [`super::check_in_group`]: the checks that need the group's Raft state (who
//! is a member, the commit index, the configuration a snapshot carries).

use bytes::Bytes;
use raft::prelude::{Message, MessageType};

use super::{check_in_group, GroupLimits, Refusal, CTX_RECORDS};
use crate::replication::peer_guard::test_fixtures::{entry, limits, msg, node, proposal_entry};

/// A leader whose snapshot was overtaken (the follower caught up by appends meanwhile)
/// waits in its snapshot state for the follower's answer: the guard lets a snapshot below
/// the commit index through, and raft-rs restores nothing and answers with its commit
/// index. At the commit index only the committed entry's term passes.
#[test]
fn a_snapshot_below_the_commit_index_is_answered_not_dropped() {
    let mut n = node();
    let l = limits();
    // Leader 2 of term 2 appends 1..=6 and commits 5.
    let mut a = msg(MessageType::MsgAppend, 2, 1, 2);
    a.entries = (1..=6).map(|i| entry(i, 2)).collect::<Vec<_>>().into();
    a.commit = 5;
    assert_eq!(check_in_group(&n.raft, &l, &mut a), Ok(()));
    n.step(a).expect("append");
    let rd = n.ready();
    n.mut_store().wl().append(rd.entries()).expect("store");
    let mut light = n.advance(rd);
    n.advance_apply_to(light.commit_index().unwrap_or(5));
    let _ = light.take_messages();
    assert_eq!(n.raft.raft_log.committed, 5);

    let snapshot_at = |index: u64, term: u64| {
        let mut s = msg(MessageType::MsgSnapshot, 2, 1, 2);
        let meta = s.mut_snapshot().mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.mut_conf_state().voters = vec![1, 2, 3];
        s
    };
    let mut below = snapshot_at(3, 2);
    assert_eq!(check_in_group(&n.raft, &l, &mut below), Ok(()));
    n.step(below).expect("snapshot");
    let rd = n.ready();
    assert!(rd.snapshot().is_empty(), "nothing restored");
    let answers: Vec<Message> = rd
        .messages()
        .iter()
        .chain(rd.persisted_messages())
        .cloned()
        .collect();
    assert!(
        answers
            .iter()
            .any(|m| m.get_msg_type() == MessageType::MsgAppendResponse
                && m.to == 2
                && m.index == 5
                && !m.reject),
        "answered with the commit index: {answers:?}"
    );
    let _ = n.advance(rd);
    // At the commit index: the committed entry's term only.
    assert_eq!(check_in_group(&n.raft, &l, &mut snapshot_at(5, 2)), Ok(()));
    assert!(matches!(
        check_in_group(&n.raft, &l, &mut snapshot_at(5, 1)),
        Err(Refusal::BadSnapshot(_))
    ));
}

#[test]
fn check_in_group_uses_the_group_state() {
    let mut n = node();
    let l = limits();
    let raft = &n.raft;
    let mut m = msg(MessageType::MsgHeartbeat, 4, 1, 1);
    assert_eq!(
        check_in_group(raft, &l, &mut m),
        Err(Refusal::NotInGroup(4))
    );
    // A heartbeat's commit beyond the log is clamped, not refused.
    let mut m = msg(MessageType::MsgHeartbeat, 2, 1, 1);
    m.commit = 1 << 40;
    assert_eq!(check_in_group(raft, &l, &mut m), Ok(()));
    assert_eq!(m.commit, raft.raft_log.committed);
    let mut m = msg(MessageType::MsgAppendResponse, 2, 1, 1);
    m.index = 1;
    assert!(check_in_group(raft, &l, &mut m).is_err());
    let mut p = msg(MessageType::MsgPropose, 2, 1, 0);
    p.entries = vec![proposal_entry(2)].into();
    let streams = GroupLimits {
        forward_proposals: false,
        ..l
    };
    assert!(check_in_group(raft, &streams, &mut p.clone()).is_err());
    assert_eq!(check_in_group(raft, &l, &mut p), Ok(()));
    let mut m = msg(MessageType::MsgTransferLeader, 2, 1, 1);
    assert!(check_in_group(raft, &l, &mut m).is_err());
    // Snapshots: with a configuration raft-rs can restore that names the sender a voter
    // and this node a member (it may differ from the group's: membership changed while
    // this replica was away, even to a leader it does not know), only where logs are
    // compacted.
    let mut snap = msg(MessageType::MsgSnapshot, 2, 1, 1);
    snap.mut_snapshot().mut_metadata().index = 5;
    snap.mut_snapshot().mut_metadata().term = 1;
    let with_voters = |voters: Vec<u64>, learners: Vec<u64>, from: u64| {
        let mut m = snap.clone();
        m.from = from;
        let cs = m.mut_snapshot().mut_metadata().mut_conf_state();
        cs.voters = voters;
        cs.learners = learners;
        check_in_group(raft, &l, &mut m)
    };
    assert_eq!(with_voters(vec![3, 2, 1], vec![], 2), Ok(()));
    assert_eq!(with_voters(vec![1, 2], vec![], 2), Ok(()));
    assert_eq!(with_voters(vec![2, 4, 5], vec![1], 2), Ok(()));
    assert_eq!(with_voters(vec![1, 4, 5], vec![], 4), Ok(()));
    assert!(
        with_voters(vec![2, 3], vec![], 2).is_err(),
        "lacks this node"
    );
    assert!(
        with_voters(vec![1, 3], vec![], 2).is_err(),
        "lacks the sender"
    );
    assert!(with_voters(vec![], vec![1, 2], 2).is_err(), "no voters");
    assert!(
        with_voters(vec![1, 2], vec![2], 2).is_err(),
        "voter and learner"
    );
    assert_eq!(
        with_voters(vec![1, 3, 4], vec![], 5),
        Err(Refusal::NotInGroup(5)),
        "an unknown sender the snapshot does not name"
    );
    snap.mut_snapshot().mut_metadata().mut_conf_state().voters = vec![3, 2, 1];
    let metadata = GroupLimits {
        snapshots: false,
        ..l
    };
    assert!(check_in_group(raft, &metadata, &mut snap).is_err());
    // Record batches and sizes are what the store accepts.
    let mut a = msg(MessageType::MsgAppend, 2, 1, 1);
    let mut e = entry(1, 1);
    e.context = Bytes::from_static(&[CTX_RECORDS]);
    e.data = Bytes::from_static(b"not a record batch");
    a.entries = vec![e].into();
    assert!(matches!(
        check_in_group(raft, &l, &mut a),
        Err(Refusal::BadRecords { .. })
    ));
    // An entry carrying its record count (compacted on the leader): an empty payload and
    // batches taking fewer offsets than the count are accepted; more offsets, a zero count
    // or damaged batches are not.
    let batch = kafka_proto::records::build_batch(
        kafka_proto::records::Compression::None,
        &[kafka_proto::records::NewRecord::new(1, "v")],
    )
    .unwrap();
    for (data, count, ok) in [
        (Bytes::new(), 5u32, true),
        (batch.clone(), 5, true),
        (batch.clone(), 1, true),
        (Bytes::new(), 0, false),
        ([batch.clone(), batch.clone()].concat().into(), 1, false),
        (Bytes::from_static(b"not a record batch"), 5, false),
    ] {
        let mut a = msg(MessageType::MsgAppend, 2, 1, 1);
        let mut e = entry(1, 1);
        let mut ctx = vec![CTX_RECORDS];
        ctx.extend_from_slice(&count.to_be_bytes());
        e.context = ctx.into();
        e.data = data;
        a.entries = vec![e].into();
        assert_eq!(
            check_in_group(raft, &l, &mut a).is_ok(),
            ok,
            "count {count}"
        );
    }
    let mut a = msg(MessageType::MsgAppend, 2, 1, 1);
    a.entries = vec![entry(1, 1); 2].into();
    let tight = GroupLimits {
        batch_entries_left: 1,
        ..l
    };
    assert!(check_in_group(raft, &tight, &mut a).is_err());
    // While an entry is unpersisted, vote responses could elect this node with it.
    let mut a = msg(MessageType::MsgAppend, 2, 1, 1);
    a.entries = vec![entry(1, 1)].into();
    n.step(a).expect("append");
    let mut v = msg(MessageType::MsgRequestVoteResponse, 2, 1, 2);
    assert_eq!(
        check_in_group(&n.raft, &l, &mut v),
        Err(Refusal::NotAccepted(MessageType::MsgRequestVoteResponse))
    );
}

/// A snapshot's configuration passes only when raft-rs would restore exactly it: raft-rs
/// stops the process when the restored configuration differs. The refused shape is the one a
/// fuzzed peer message carried (full run 21, `PEER_FUZZ_SEED=1795954056424717086`): a joint
/// configuration whose learner 0 raft-rs dropped in the restore.
#[test]
fn a_snapshot_configuration_raft_rs_would_not_restore_exactly_is_refused() {
    let conf = |voters: &[u64], learners: &[u64], outgoing: &[u64]| raft::prelude::ConfState {
        voters: voters.to_vec(),
        learners: learners.to_vec(),
        voters_outgoing: outgoing.to_vec(),
        ..Default::default()
    };
    assert!(!super::restorable_configuration(&conf(
        &[1, 2, 3],
        &[0],
        &[2, 3]
    )));
    // Ordinary configurations, joint ones included, still pass.
    assert!(super::restorable_configuration(&conf(&[1, 2, 3], &[], &[])));
    assert!(super::restorable_configuration(&conf(
        &[3, 1, 2],
        &[4],
        &[]
    )));
    assert!(super::restorable_configuration(&conf(
        &[1, 2, 4],
        &[],
        &[1, 2, 3]
    )));
    assert!(super::restorable_configuration(&conf(
        &[1, 2, 4],
        &[5],
        &[1, 2, 3]
    )));
}
