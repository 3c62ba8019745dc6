//! What the group administration requests ask of the coordinator: the groups it holds
//! (ListGroups), one group's state and members (DescribeGroups), the topics a group's members
//! subscribe to (OffsetDelete), and removing an empty group's state (DeleteGroups).

use std::collections::HashSet;

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;

use super::coordinator::{lock, Coordinator, GroupRef};
use super::group::Member;
use super::types::{GroupDescription, GroupListing, GroupState, MemberDescription};

impl Coordinator {
    /// Groups with members (or member ids handed out), while leading in metadata term `term`.
    pub(super) fn list(&self, term: u64) -> Result<Vec<GroupListing>, ErrorCode> {
        let _term = self.state(term).ok_or(ErrorCode::NotCoordinator)?;
        let all: Vec<(String, GroupRef)> = self
            .shards
            .iter()
            .flat_map(|shard| {
                lock(shard)
                    .iter()
                    .map(|(id, g)| (id.clone(), g.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut out: Vec<GroupListing> = all
            .into_iter()
            .filter_map(|(id, g)| {
                let g = lock(&g);
                (!g.removed).then(|| GroupListing {
                    group_id: id,
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    state: g.state,
                })
            })
            .collect();
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }

    /// Removes group `group_id`'s membership state (DeleteGroups), while leading in metadata
    /// term `term`: `Ok(true)` when there was state and it had no members, `Ok(false)` when
    /// there was none, NON_EMPTY_GROUP while members remain (nothing removed then).
    pub(super) fn remove_empty(&self, term: u64, group_id: &str) -> Result<bool, ErrorCode> {
        let _term = self.state(term).ok_or(ErrorCode::NotCoordinator)?;
        self.with_group(group_id, |arc, g| {
            if !g.members.is_empty() || !g.pending.is_empty() {
                return Err(ErrorCode::NonEmptyGroup);
            }
            self.remove(group_id, arc, g);
            Ok(true)
        })
        .unwrap_or(Ok(false))
    }

    /// For a group with members (while leading in `term`): its protocol type and the topics
    /// its members subscribe to (read from their `consumer` protocol subscriptions; empty for
    /// other protocol types; for a consumer-protocol group, its members' topic names and the
    /// topics their regexes matched). None when the group has no members here.
    pub(super) fn subscriptions(
        &self,
        term: u64,
        group_id: &str,
    ) -> Option<(String, HashSet<String>)> {
        let _term = self.state(term)?;
        self.with_group(group_id, |_, g| {
            if g.members.is_empty() {
                return None;
            }
            let protocol_type = g.protocol_type.clone().unwrap_or_default();
            let mut topics = HashSet::new();
            if protocol_type == "consumer" {
                let protocol = g.protocol.clone().unwrap_or_default();
                for m in g.members.values() {
                    topics.extend(subscribed_topics(&m.metadata_for(&protocol)));
                }
            }
            Some((protocol_type, topics))
        })
        .flatten()
        .or_else(|| {
            // A consumer-protocol group: the topics its members subscribe to by name or regex.
            self.consumer
                .with(group_id, |_, e| {
                    let g = &e.group;
                    if g.members.is_empty() {
                        return None;
                    }
                    let mut topics = HashSet::new();
                    for m in g.members.values() {
                        topics.extend(m.subscribed_names.iter().cloned());
                        if let Some((_, names)) =
                            m.subscribed_regex.as_ref().and_then(|r| g.regexes.get(r))
                        {
                            topics.extend(names.iter().cloned());
                        }
                    }
                    Some(("consumer".to_owned(), topics))
                })
                .flatten()
        })
    }

    /// A group's state and members, while leading in metadata term `term`; None when the group
    /// has no membership state here.
    pub(super) fn describe(&self, term: u64, group_id: &str) -> Option<GroupDescription> {
        let _term = self.state(term)?;
        self.with_group(group_id, |_, g| {
            let g = &*g;
            let stable = g.state == GroupState::Stable;
            let protocol = g.protocol.clone().unwrap_or_default();
            let mut ordered: Vec<(&String, &Member)> = g.members.iter().collect();
            ordered.sort_by_key(|(_, m)| m.seq);
            Some(GroupDescription {
                state: g.state,
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                protocol: if stable {
                    protocol.clone()
                } else {
                    String::new()
                },
                members: ordered
                    .into_iter()
                    .map(|(id, m)| MemberDescription {
                        member_id: id.clone(),
                        group_instance_id: m.instance_id.clone(),
                        client_id: m.client_id.clone(),
                        client_host: m.client_host.clone(),
                        metadata: if stable {
                            m.metadata_for(&protocol)
                        } else {
                            Bytes::new()
                        },
                        assignment: if stable {
                            m.assignment.clone()
                        } else {
                            Bytes::new()
                        },
                    })
                    .collect(),
            })
        })
        .flatten()
    }
}

/// The topics of a `consumer` protocol subscription (Kafka's ConsumerProtocolSubscription);
/// none when it does not parse.
fn subscribed_topics(metadata: &[u8]) -> Vec<String> {
    super::consumer::classic_protocol::decode_subscription(metadata)
        .map(|s| s.topics)
        .unwrap_or_default()
}
