//! A group's membership as the metadata stores it ([`GroupRecord`]): the record the coordinator
//! writes when a rebalance completes, a static member is replaced or the group empties, and the
//! Stable group a later coordinator loads from it.

use std::time::Instant;

use bytes::Bytes;

use super::group::{Group, Member};
use super::limits::{rebalance_timeout, session_timeout};
use super::types::GroupState;
use crate::metadata::{GroupMemberRecord, GroupRecord};

impl Group {
    /// A Stable group as stored in the metadata by a previous coordinator: the same generation,
    /// members, protocol, leader and assignments; every session starts now (as when Kafka's
    /// coordinator loads a group).
    pub(super) fn from_record(r: GroupRecord, now: Instant) -> Group {
        let mut g = Group::new();
        g.state = GroupState::Stable;
        g.generation = r.generation;
        g.protocol_type = Some(r.protocol_type);
        g.protocol = Some(r.protocol);
        for (seq, m) in r.members.into_iter().enumerate() {
            let session_timeout = session_timeout(m.session_timeout_ms);
            if let Some(instance) = &m.instance_id {
                g.static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            g.members.insert(
                m.member_id,
                Member {
                    instance_id: m.instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout,
                    rebalance_timeout: rebalance_timeout(m.rebalance_timeout_ms),
                    protocols: m
                        .protocols
                        .into_iter()
                        .map(|(name, metadata)| (name, Bytes::from(metadata)))
                        .collect(),
                    assignment: Bytes::from(m.assignment),
                    heartbeat_deadline: now + session_timeout,
                    join_waiter: None,
                    sync_waiter: None,
                    seq: seq as u64,
                },
            );
        }
        g.next_seq = g.members.len() as u64;
        g.leader = g
            .members
            .contains_key(&r.leader)
            .then_some(r.leader)
            .or_else(|| {
                g.members
                    .iter()
                    .min_by_key(|(_, m)| m.seq)
                    .map(|(id, _)| id.clone())
            });
        g.stored = true;
        g
    }

    /// The group's membership as the metadata stores it.
    pub(super) fn record(&self) -> GroupRecord {
        let mut ordered: Vec<(&String, &Member)> = self.members.iter().collect();
        ordered.sort_by_key(|(_, m)| m.seq);
        GroupRecord {
            generation: self.generation,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: self.protocol.clone().unwrap_or_default(),
            leader: self.leader.clone().unwrap_or_default(),
            members: ordered
                .into_iter()
                .map(|(id, m)| GroupMemberRecord {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: i32::try_from(m.session_timeout.as_millis())
                        .unwrap_or(i32::MAX),
                    rebalance_timeout_ms: i32::try_from(m.rebalance_timeout.as_millis())
                        .unwrap_or(i32::MAX),
                    protocols: m
                        .protocols
                        .iter()
                        .map(|(name, metadata)| (name.clone(), metadata.to_vec()))
                        .collect(),
                    assignment: m.assignment.to_vec(),
                })
                .collect(),
        }
    }

    /// Whether the metadata must learn of this group's membership (see
    /// [`Shared::note`](super::coordinator::Shared::note)).
    pub(super) fn needs_store(&self) -> bool {
        (self.dirty && self.state == GroupState::Stable) || (self.members.is_empty() && self.stored)
    }
}
