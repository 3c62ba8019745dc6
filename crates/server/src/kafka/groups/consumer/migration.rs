//! The online conversions between a classic group with members and a consumer-protocol group
//! (Kafka 4.1's `group.consumer.migration.policy`): the upgrade, when a consumer-protocol
//! member joins a classic group of consumers (its members become classic-type members that keep
//! their assignments at their generation, Kafka's `ConsumerGroup.fromClassicGroup`), and the
//! downgrade, when the last consumer-protocol member leaves a group whose other members all
//! use the classic protocol (a classic group at the group epoch with their assignments, which
//! then rebalances, Kafka's `ClassicGroup.fromConsumerGroup`). Pure: the caller passes `now`
//! and the cluster's topics.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::super::group::{Group, Member as ClassicGroupMember};
use super::super::limits::{rebalance_timeout, session_timeout};
use super::super::types::GroupState;
use super::assignors::select;
use super::classic_member::{by_id, by_name};
use super::classic_protocol::{
    decode_assignment, decode_subscription, encode_assignment, CONSUMER_PROTOCOL_TYPE,
};
use super::group::ConsumerGroup;
use super::member::{ClassicMember, Member, MemberState};
use super::types::TopicView;

impl ConsumerGroup {
    /// Classic group `g` (with members) as a consumer group: every member a classic-type member
    /// at epoch `g.generation` owning (and targeted with) its current assignment. Err: why it
    /// cannot be upgraded (Kafka's words after "Cannot upgrade classic group G to consumer
    /// group because ").
    pub(in crate::kafka::groups) fn from_classic(
        g: &Group,
        topics: &dyn TopicView,
        max_size: usize,
        now: Instant,
    ) -> Result<ConsumerGroup, String> {
        if g.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
            return Err("the group does not use the consumer embedded protocol.".into());
        }
        if g.members.len() > max_size {
            return Err("its group size exceeds the consumer group maximum size.".into());
        }
        let protocol = g.protocol.clone().unwrap_or_default();
        let mut out = ConsumerGroup {
            group_epoch: g.generation.max(0),
            assignment_epoch: g.generation.max(0),
            assignor: select(std::iter::empty()).to_owned(),
            dirty: true,
            ..ConsumerGroup::default()
        };
        for (id, m) in &g.members {
            let metadata = if protocol.is_empty() {
                m.protocols
                    .first()
                    .map(|(_, b)| b.clone())
                    .unwrap_or_default()
            } else {
                m.metadata_for(&protocol)
            };
            let Some(sub) = decode_subscription(&metadata) else {
                return Err("the group does not use the consumer embedded protocol.".into());
            };
            let assigned = decode_assignment(&m.assignment)
                .map(|a| by_id(&a, topics))
                .unwrap_or_default();
            let session_ms = i32::try_from(m.session_timeout.as_millis()).unwrap_or(i32::MAX);
            let member = Member {
                instance_id: m.instance_id.clone(),
                rack: sub.rack.clone().filter(|r| !r.is_empty()),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_names: sub.topics.iter().cloned().collect::<BTreeSet<_>>(),
                subscribed_regex: None,
                server_assignor: None,
                rebalance_timeout_ms: i32::try_from(m.rebalance_timeout.as_millis())
                    .unwrap_or(i32::MAX),
                epoch: out.group_epoch,
                previous_epoch: out.group_epoch,
                state: MemberState::Stable,
                assigned: assigned.clone(),
                pending_revocation: Default::default(),
                session_deadline: now + m.session_timeout,
                revoke_deadline: None,
                classic: Some(ClassicMember {
                    session_timeout_ms: session_ms,
                    protocols: m
                        .protocols
                        .iter()
                        .map(|(n, b)| (n.clone(), b.to_vec()))
                        .collect(),
                }),
            };
            out.members.insert(id.clone(), member);
            out.target.insert(id.clone(), assigned);
        }
        out.partition_counts = out.subscribed_counts(topics, now);
        Ok(out)
    }

    /// Whether the group's members all use the classic protocol (and there is one at least).
    pub(crate) fn all_classic(&self) -> bool {
        !self.members.is_empty() && self.members.values().all(|m| m.classic.is_some())
    }

    /// The group (all classic members) as a classic group at generation `generation` (the
    /// group epoch before the last consumer-protocol member left, the one its stable classic
    /// members hold), its members holding their current assignments, in a rebalance (the
    /// members rejoin classically).
    pub(in crate::kafka::groups) fn to_classic(
        &self,
        generation: i32,
        topics: &dyn TopicView,
        now: Instant,
    ) -> Group {
        let mut g = Group::new();
        g.generation = generation;
        g.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.to_owned());
        // A protocol every member supports (the first member's first such), as the group's.
        let classic: Vec<&ClassicMember> = self
            .members
            .values()
            .filter_map(|m| m.classic.as_ref())
            .collect();
        g.protocol = classic.first().and_then(|first| {
            first
                .protocols
                .iter()
                .map(|(n, _)| n)
                .find(|n| {
                    classic
                        .iter()
                        .all(|c| c.protocols.iter().any(|(o, _)| o == *n))
                })
                .cloned()
        });
        for (id, m) in &self.members {
            let Some(c) = &m.classic else {
                continue;
            };
            let session = session_timeout(c.session_timeout_ms);
            let member = ClassicGroupMember {
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout: session,
                rebalance_timeout: rebalance_timeout(m.rebalance_timeout_ms),
                protocols: c
                    .protocols
                    .iter()
                    .map(|(n, b)| (n.clone(), Bytes::from(b.clone())))
                    .collect(),
                assignment: Bytes::from(encode_assignment(
                    c.subscription_version(),
                    &by_name(&m.assigned, topics),
                )),
                heartbeat_deadline: now + session.max(Duration::from_millis(1)),
                join_waiter: None,
                sync_waiter: None,
                seq: g.next_seq,
            };
            g.next_seq += 1;
            if g.leader.is_none() {
                g.leader = Some(id.clone());
            }
            if let Some(instance) = &m.instance_id {
                g.static_members.insert(instance.clone(), id.clone());
            }
            g.members.insert(id.clone(), member);
        }
        g.state = GroupState::Stable;
        g.prepare_rebalance(now);
        g
    }
}
