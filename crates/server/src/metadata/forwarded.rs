//! What a member may propose into the metadata group through another node: the authorization
//! of forwarded proposals (`MsgPropose` from a peer), checked by [`authorize`] on every entry
//! before the proposal reaches raft-rs (the peer guard's message check asks it through
//! [`MetadataForwarding`], the [`ForwardingGroup`] the node gives its guard; the entry's
//! context must already name the sender).
//!
//! A member forwards proposals for two reasons, and they are authorized differently:
//!
//! - **Its own state** (node-scoped commands): [`MetaCommand::AdminAddress`] announces where
//!   the *proposing* node serves its admin API. A member may announce only its own: `node`
//!   must be the sender. Without this a member (or an impersonator of one) could redirect the
//!   admin requests other nodes forward for another node.
//! - **Its clients' requests** (every other command: topics, partitions, records deletion,
//!   consumer groups, producer ids, ACLs, SCRAM credentials, quotas, flow limits, leader
//!   transfers, membership, reassignment completion): these come from a Kafka client or an
//!   admin API caller of that member, which authenticated and authorized them there (SASL or
//!   TLS and the ACLs on the Kafka port, the admin API's own checks), or from the member's own
//!   duties (the group coordinator's offsets and group records, a partition leader finishing a
//!   reassignment). The leader cannot re-check a client it never saw, so it trusts a member
//!   that proved its identity on the peer port: Raft does not tolerate Byzantine members
//!   anyway (a member can also forge votes and appends). What makes this sound is that only a
//!   member can pass as one: with `[peer_tls]` its certificate must name its node id (see
//!   [`crate::security::peer_tls`]).
//!
//! Every forwarded entry must decode as a metadata entry of a format this node reads, and its
//! request id (when it carries one) must name the sender: a request id of another node would
//! answer that node's waiting client.

use crate::metadata::{snapshot::MAX_SNAPSHOT_BYTES, MetaCommand, MetaEntry, METADATA_GROUP_ID};
use crate::replication::peer_guard::{ForwardingGroup, Refusal};

/// What the metadata group admits from peers beyond the shape of their messages: its
/// snapshots are at most [`MAX_SNAPSHOT_BYTES`], and forwarded entries pass [`authorize`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MetadataForwarding;

impl ForwardingGroup for MetadataForwarding {
    fn is_group(&self, group: u64) -> bool {
        group == METADATA_GROUP_ID
    }

    fn max_snapshot_bytes(&self) -> usize {
        MAX_SNAPSHOT_BYTES
    }

    fn authorize(&self, from: u64, data: &[u8]) -> Result<(), Refusal> {
        authorize(from, data)
    }
}

/// Whether node `from` may have the metadata entry `data` proposed through the leader (see
/// the module documentation).
pub fn authorize(from: u64, data: &[u8]) -> Result<(), Refusal> {
    let (request, command) = MetaEntry::decode(data)
        .map_err(|_| Refusal::BadEntries("a proposal that does not decode as metadata"))?;
    if request.is_some_and(|r| r.node != from) {
        return Err(Refusal::Unauthorized("its request id names another node"));
    }
    match command {
        MetaCommand::AdminAddress { node, .. } if node != from => Err(Refusal::Unauthorized(
            "a node may announce only its own admin address",
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::RequestId;

    fn entry(node: u64, command: MetaCommand) -> Vec<u8> {
        MetaEntry {
            request: RequestId {
                node,
                boot: 1,
                seq: 1,
            },
            command,
        }
        .encode()
    }

    /// A node announces its own admin address only; request ids name the sender; entries that
    /// do not decode are refused; client commands pass.
    #[test]
    fn forwarded_proposals_are_authorized_for_their_sender() {
        let own = MetaCommand::AdminAddress {
            node: 2,
            address: "10.0.0.2:9292".into(),
        };
        let other = MetaCommand::AdminAddress {
            node: 1,
            address: "10.0.0.66:9292".into(),
        };
        assert_eq!(authorize(2, &entry(2, own.clone())), Ok(()));
        assert!(matches!(
            authorize(2, &entry(2, other)),
            Err(Refusal::Unauthorized(_))
        ));
        assert!(matches!(
            authorize(2, &entry(3, own)),
            Err(Refusal::Unauthorized(_))
        ));
        assert_eq!(
            authorize(2, &entry(2, MetaCommand::AllocateProducerId)),
            Ok(())
        );
        for garbage in [&b""[..], b"{}", b"\x01\xff\xff", b"x"] {
            assert!(matches!(authorize(2, garbage), Err(Refusal::BadEntries(_))));
        }
    }

    /// The peer guard asks the metadata through [`MetadataForwarding`]: a forwarded proposal
    /// of the metadata group passes for its sender only, and only the metadata group's
    /// snapshots carry its state.
    #[test]
    fn the_peer_guard_checks_forwarded_metadata_through_it() {
        use crate::replication::peer_guard::check_message;
        use raft::prelude::{Entry, Message, MessageType};

        let propose = |from: u64, command: MetaCommand| {
            let mut ctx = vec![crate::replication::raft_storage::CTX_META];
            ctx.extend_from_slice(&from.to_be_bytes());
            ctx.extend_from_slice(&7u64.to_be_bytes());
            let mut m = Message::default();
            m.set_msg_type(MessageType::MsgPropose);
            m.from = from;
            m.to = 1;
            m.entries = vec![Entry {
                context: ctx.into(),
                data: entry(from, command).into(),
                ..Default::default()
            }]
            .into();
            m
        };
        let forwarding = MetadataForwarding;
        let own = propose(
            2,
            MetaCommand::AdminAddress {
                node: 2,
                address: "10.0.0.2:9292".into(),
            },
        );
        assert_eq!(
            check_message(1, 2, METADATA_GROUP_ID, &own, &forwarding),
            Ok(())
        );
        let other = propose(
            2,
            MetaCommand::AdminAddress {
                node: 3,
                address: "10.0.0.66:9292".into(),
            },
        );
        assert!(matches!(
            check_message(1, 2, METADATA_GROUP_ID, &other, &forwarding),
            Err(Refusal::Unauthorized(_))
        ));
        assert!(forwarding.is_group(METADATA_GROUP_ID) && !forwarding.is_group(7));
        assert_eq!(forwarding.max_snapshot_bytes(), MAX_SNAPSHOT_BYTES);
    }
}
