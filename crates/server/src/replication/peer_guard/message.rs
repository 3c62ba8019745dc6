//! Step 1 of the peer guard's checks (see [`super`]): what a message must satisfy on its own,
//! on the connection's task, before it is handed to its group.

use raft::prelude::{EntryType, Message, MessageType};

use super::{ForwardingGroup, Refusal, MAX_PEER_TERM_OR_INDEX};
use crate::replication::raft_storage::{decode_snapshot_data, CTX_META};

/// Step 1 of the peer guard's checks as a pure function: what `msg`, received by node
/// `self_id` on a connection whose hello announced `hello`, for group `group`, must satisfy on
/// its own; `forwarding` says what the group that forwards proposals admits.
pub fn check_message(
    self_id: u64,
    hello: u64,
    group: u64,
    msg: &Message,
    forwarding: &dyn ForwardingGroup,
) -> Result<(), Refusal> {
    use MessageType::*;
    if msg.from != hello {
        return Err(Refusal::WrongSender {
            from: msg.from,
            hello,
        });
    }
    if msg.to != self_id {
        return Err(Refusal::WrongRecipient {
            to: msg.to,
            me: self_id,
        });
    }
    let kind = msg.get_msg_type();
    if matches!(
        kind,
        MsgHup | MsgBeat | MsgUnreachable | MsgSnapStatus | MsgCheckQuorum
    ) {
        return Err(Refusal::LocalOnly(kind));
    }
    // Forwarded proposals and read requests carry no term (raft-rs's `send` never sets one
    // on them, and panics forwarding one that has it); everything else carries one.
    let untermed = matches!(kind, MsgPropose | MsgReadIndex);
    if untermed != (msg.term == 0) || msg.term > MAX_PEER_TERM_OR_INDEX {
        return Err(Refusal::BadTerm {
            kind,
            term: msg.term,
        });
    }
    for (field, value) in [
        ("index", msg.index),
        ("log_term", msg.log_term),
        ("commit", msg.commit),
        ("commit_term", msg.commit_term),
        ("reject_hint", msg.reject_hint),
    ] {
        if value > MAX_PEER_TERM_OR_INDEX {
            return Err(Refusal::OutOfRange { field, value });
        }
    }
    if !untermed {
        // A node's log holds no entry of a term above its current term.
        for (field, value) in [("log_term", msg.log_term), ("commit_term", msg.commit_term)] {
            if value > msg.term {
                return Err(Refusal::OutOfRange { field, value });
            }
        }
    }
    if msg.request_snapshot != 0 {
        return Err(Refusal::OutOfRange {
            field: "request_snapshot",
            value: msg.request_snapshot,
        });
    }
    match kind {
        MsgAppend => check_append(msg)?,
        MsgPropose => check_proposal(msg, forwarding)?,
        MsgReadIndex | MsgReadIndexResp => {
            if msg.entries.len() != 1 {
                return Err(Refusal::BadEntries(
                    "a read index message carries one entry",
                ));
            }
        }
        _ => {
            if !msg.entries.is_empty() {
                return Err(Refusal::BadEntries("this message type carries no entries"));
            }
        }
    }
    if kind == MsgSnapshot {
        let snap = msg.get_snapshot();
        let meta = snap.get_metadata();
        if meta.term == 0 || meta.term > msg.term {
            return Err(Refusal::BadSnapshot("term not in 1..=message term"));
        }
        if meta.index == 0 || meta.index > MAX_PEER_TERM_OR_INDEX {
            return Err(Refusal::BadSnapshot("index out of range"));
        }
        if forwarding.is_group(group) {
            // The state machine's state (decoded and checked by the group before raft-rs
            // takes it).
            if snap.data.is_empty() || snap.data.len() > forwarding.max_snapshot_bytes() {
                return Err(Refusal::BadSnapshot("metadata state size out of range"));
            }
        } else if decode_snapshot_data(&snap.data).is_none() {
            return Err(Refusal::BadSnapshot("data is not a next offset"));
        }
    }
    Ok(())
}

fn check_append(msg: &Message) -> Result<(), Refusal> {
    if msg.index > 0 && msg.log_term == 0 {
        // Every entry has a term >= 1; raft-rs takes term 0 past its log as a match.
        return Err(Refusal::BadEntries("log_term 0 after index 0"));
    }
    let mut prev_term = msg.log_term;
    let mut expected = msg.index;
    for e in msg.entries.iter() {
        expected += 1;
        if e.index != expected {
            return Err(Refusal::BadEntries(
                "entry indexes are not consecutive after the message's index",
            ));
        }
        if e.term == 0 || e.term > msg.term {
            return Err(Refusal::BadEntries("entry term not in 1..=message term"));
        }
        if e.term < prev_term {
            return Err(Refusal::BadEntries("entry terms decrease"));
        }
        prev_term = e.term;
        if e.get_entry_type() == EntryType::EntryConfChange {
            // vdl changes membership with ConfChangeV2 only (see `crate::replication::membership`);
            // a leader's v2 change is applied through raft-rs, which refuses invalid ones.
            return Err(Refusal::BadEntries(
                "version 1 configuration change entries",
            ));
        }
    }
    Ok(())
}

fn check_proposal(msg: &Message, forwarding: &dyn ForwardingGroup) -> Result<(), Refusal> {
    if msg.entries.is_empty() {
        return Err(Refusal::BadEntries("a proposal without entries"));
    }
    for e in msg.entries.iter() {
        if e.get_entry_type() != EntryType::EntryNormal {
            return Err(Refusal::BadEntries("configuration change entries"));
        }
        // Only the metadata group forwards proposals, and only metadata ones; the context
        // names the proposer (see `Group::context`), which is the sender: a proposal claiming
        // to come from another node would be answered to that node's waiting client.
        let ctx = &e.context;
        let proposer_ok =
            ctx.len() == 17 && ctx[0] == CTX_META && ctx[1..9] == msg.from.to_be_bytes();
        if !proposer_ok {
            return Err(Refusal::BadEntries(
                "a proposal's context does not name its sender",
            ));
        }
        forwarding.authorize(msg.from, &e.data)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use raft::prelude::{Entry, Snapshot};

    use super::*;
    use crate::replication::peer_guard::test_fixtures::{
        entry, msg, proposal_entry, SenderNamed, SENDER_NAMED_GROUP,
    };
    use crate::replication::raft_storage::encode_snapshot_data;

    #[test]
    fn check_message_admits_what_peers_send() {
        let mut append = msg(MessageType::MsgAppend, 2, 1, 3);
        append.index = 5;
        append.log_term = 2;
        append.commit = 5;
        append.entries = vec![entry(6, 2), entry(7, 3)].into();
        let mut propose = msg(MessageType::MsgPropose, 2, 1, 0);
        propose.entries = vec![proposal_entry(2)].into();
        let mut read = msg(MessageType::MsgReadIndex, 2, 1, 0);
        read.entries = vec![Entry::default()].into();
        let mut snap = msg(MessageType::MsgSnapshot, 2, 1, 3);
        let mut s = Snapshot {
            data: encode_snapshot_data(10),
            ..Default::default()
        };
        s.mut_metadata().index = 9;
        s.mut_metadata().term = 2;
        snap.set_snapshot(s);
        for m in [
            append,
            propose,
            read,
            snap,
            msg(MessageType::MsgHeartbeat, 2, 1, 3),
            msg(MessageType::MsgAppendResponse, 2, 1, 3),
            msg(MessageType::MsgRequestPreVote, 2, 1, 4),
            msg(MessageType::MsgRequestVoteResponse, 2, 1, 3),
            msg(MessageType::MsgTimeoutNow, 2, 1, 3),
        ] {
            assert_eq!(check_message(1, 2, 7, &m, &SenderNamed), Ok(()), "{m:?}");
        }
    }

    #[test]
    fn check_message_refuses_what_raft_rs_would_panic_on() {
        let refused = |m: &Message| check_message(1, 2, 7, m, &SenderNamed).expect_err("refused");
        // The reproduced crash: an empty proposal.
        assert!(matches!(
            refused(&msg(MessageType::MsgPropose, 2, 1, 0)),
            Refusal::BadEntries(_)
        ));
        assert!(matches!(
            refused(&msg(MessageType::MsgHeartbeat, 3, 1, 3)),
            Refusal::WrongSender { from: 3, hello: 2 }
        ));
        assert!(matches!(
            refused(&msg(MessageType::MsgHeartbeat, 2, 3, 3)),
            Refusal::WrongRecipient { to: 3, me: 1 }
        ));
        for kind in [
            MessageType::MsgHup,
            MessageType::MsgBeat,
            MessageType::MsgUnreachable,
            MessageType::MsgSnapStatus,
            MessageType::MsgCheckQuorum,
        ] {
            assert_eq!(refused(&msg(kind, 2, 1, 3)), Refusal::LocalOnly(kind));
        }
        // Terms: none on forwarded proposals, some everywhere else, never past the bound.
        let mut p = msg(MessageType::MsgPropose, 2, 1, 3);
        p.entries = vec![proposal_entry(2)].into();
        assert!(matches!(refused(&p), Refusal::BadTerm { .. }));
        assert!(matches!(
            refused(&msg(MessageType::MsgRequestVote, 2, 1, 0)),
            Refusal::BadTerm { .. }
        ));
        assert!(matches!(
            refused(&msg(MessageType::MsgRequestVote, 2, 1, u64::MAX)),
            Refusal::BadTerm { .. }
        ));
        let mut m = msg(MessageType::MsgAppendResponse, 2, 1, 3);
        m.index = u64::MAX;
        assert!(matches!(refused(&m), Refusal::OutOfRange { .. }));
        let mut m = msg(MessageType::MsgRequestVote, 2, 1, 3);
        m.log_term = 4;
        assert!(matches!(refused(&m), Refusal::OutOfRange { .. }));
        let mut m = msg(MessageType::MsgAppendResponse, 2, 1, 3);
        m.request_snapshot = 5;
        assert!(matches!(refused(&m), Refusal::OutOfRange { .. }));
        // Appends: indexes, terms, types.
        let append = |index: u64, log_term: u64, entries: Vec<Entry>| {
            let mut m = msg(MessageType::MsgAppend, 2, 1, 3);
            m.index = index;
            m.log_term = log_term;
            m.entries = entries.into();
            m
        };
        for m in [
            append(5, 2, vec![entry(1, 2), entry(2, 2)]),
            append(5, 2, vec![entry(6, 2), entry(8, 2)]),
            append(5, 2, vec![entry(6, 4)]),
            append(5, 2, vec![entry(6, 1)]),
            append(5, 2, vec![entry(6, 0)]),
            append(5, 0, vec![]),
            append(
                5,
                2,
                vec![{
                    let mut e = entry(6, 2);
                    e.set_entry_type(EntryType::EntryConfChange);
                    e
                }],
            ),
        ] {
            assert!(matches!(refused(&m), Refusal::BadEntries(_)), "{m:?}");
        }
        // Proposals must name their sender; read index messages carry one entry.
        let mut p = msg(MessageType::MsgPropose, 2, 1, 0);
        p.entries = vec![proposal_entry(3)].into();
        assert!(matches!(refused(&p), Refusal::BadEntries(_)));
        assert!(matches!(
            refused(&msg(MessageType::MsgReadIndex, 2, 1, 0)),
            Refusal::BadEntries(_)
        ));
        let mut m = msg(MessageType::MsgHeartbeat, 2, 1, 3);
        m.entries = vec![entry(1, 1)].into();
        assert!(matches!(refused(&m), Refusal::BadEntries(_)));
        // Snapshots: term 0 or garbage data.
        let mut m = msg(MessageType::MsgSnapshot, 2, 1, 3);
        m.mut_snapshot().mut_metadata().index = 9;
        m.mut_snapshot().data = encode_snapshot_data(1);
        assert!(matches!(refused(&m), Refusal::BadSnapshot(_)));
        m.mut_snapshot().mut_metadata().term = 2;
        m.mut_snapshot().data = Bytes::from_static(b"junk");
        assert!(matches!(refused(&m), Refusal::BadSnapshot(_)));
    }

    /// What the group that forwards proposals admits is its owner's say: its entries are
    /// authorized for their sender, its snapshots bounded by its size; other groups'
    /// snapshots hold a next offset.
    #[test]
    fn check_message_asks_the_forwarding_group() {
        let check = |m: &Message, group| check_message(1, 2, group, m, &SenderNamed);
        let propose = |data: Vec<u8>| {
            let mut p = msg(MessageType::MsgPropose, 2, 1, 0);
            let mut e = proposal_entry(2);
            e.data = Bytes::from(data);
            p.entries = vec![e].into();
            p
        };
        assert_eq!(check(&propose(SenderNamed::payload(2)), 7), Ok(()));
        assert!(matches!(
            check(&propose(SenderNamed::payload(3)), 7),
            Err(Refusal::Unauthorized(_))
        ));
        assert!(matches!(
            check(&propose(b"junk".to_vec()), 7),
            Err(Refusal::BadEntries(_))
        ));
        let snapshot = |data: Vec<u8>| {
            let mut m = msg(MessageType::MsgSnapshot, 2, 1, 3);
            m.mut_snapshot().mut_metadata().index = 9;
            m.mut_snapshot().mut_metadata().term = 2;
            m.mut_snapshot().data = Bytes::from(data);
            m
        };
        let state = |len: usize| vec![7u8; len];
        assert_eq!(check(&snapshot(state(1024)), SENDER_NAMED_GROUP), Ok(()));
        for bad in [state(0), state(1025)] {
            assert!(matches!(
                check(&snapshot(bad), SENDER_NAMED_GROUP),
                Err(Refusal::BadSnapshot(_))
            ));
        }
        // Another group's snapshot is a next offset, whatever its size.
        assert!(matches!(
            check(&snapshot(state(100)), 7),
            Err(Refusal::BadSnapshot(_))
        ));
        assert_eq!(
            check(&snapshot(encode_snapshot_data(3).to_vec()), 7),
            Ok(())
        );
    }
}
