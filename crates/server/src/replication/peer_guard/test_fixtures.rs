//! What the peer guard's unit tests share: messages, entries, limits, a raft-rs node, and a
//! [`ForwardingGroup`] that stands for the metadata's.

use bytes::Bytes;
use raft::prelude::{Entry, Message, MessageType};
use raft::storage::MemStorage;
use raft::RawNode;

use super::{ForwardingGroup, GroupLimits, Refusal};
use crate::replication::raft_storage::CTX_META;

/// The group [`SenderNamed`] forwards proposals for.
pub(crate) const SENDER_NAMED_GROUP: u64 = 1;

/// A [`ForwardingGroup`] for group [`SENDER_NAMED_GROUP`] whose entries are
/// `proposed by <node>`: a node may propose only entries naming itself, and snapshots hold at
/// most 1 KiB.
#[derive(Debug)]
pub(crate) struct SenderNamed;

impl SenderNamed {
    /// The payload node `from` may propose.
    pub(crate) fn payload(from: u64) -> Vec<u8> {
        format!("proposed by {from}").into_bytes()
    }
}

impl ForwardingGroup for SenderNamed {
    fn is_group(&self, group: u64) -> bool {
        group == SENDER_NAMED_GROUP
    }

    fn max_snapshot_bytes(&self) -> usize {
        1024
    }

    fn authorize(&self, from: u64, data: &[u8]) -> Result<(), Refusal> {
        let text = std::str::from_utf8(data)
            .ok()
            .and_then(|t| t.strip_prefix("proposed by "))
            .ok_or(Refusal::BadEntries("a proposal that does not decode"))?;
        if text != from.to_string() {
            return Err(Refusal::Unauthorized("it names another node"));
        }
        Ok(())
    }
}

pub(crate) fn msg(kind: MessageType, from: u64, to: u64, term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(kind);
    m.from = from;
    m.to = to;
    m.term = term;
    m
}

pub(crate) fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        data: Bytes::from_static(b"x"),
        ..Default::default()
    }
}

pub(crate) fn proposal_entry(from: u64) -> Entry {
    let mut ctx = vec![CTX_META];
    ctx.extend_from_slice(&from.to_be_bytes());
    ctx.extend_from_slice(&7u64.to_be_bytes());
    let data = SenderNamed::payload(from);
    Entry {
        context: Bytes::from(ctx),
        data: Bytes::from(data),
        ..Default::default()
    }
}

pub(crate) fn limits() -> GroupLimits {
    GroupLimits {
        forward_proposals: true,
        snapshots: true,
        max_entry_bytes: 1 << 20,
        batch_entries_left: 1000,
        batch_bytes_left: 8 << 20,
    }
}

/// Node 1 of a group of voters 1, 2, 3, term 1, nothing in its log.
pub(crate) fn node() -> RawNode<MemStorage> {
    let storage = MemStorage::new_with_conf_state((vec![1, 2, 3], vec![]));
    let cfg = raft::Config {
        id: 1,
        election_tick: 10,
        heartbeat_tick: 2,
        check_quorum: true,
        pre_vote: true,
        ..Default::default()
    };
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    RawNode::new(&cfg, storage, &logger).expect("raft node")
}
