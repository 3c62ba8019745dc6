//! A consumer-protocol group as the metadata stores it ([`ConsumerGroupRecord`]): written
//! before a heartbeat that changed the group is answered, loaded by a later coordinator with
//! every member's epoch and assignments (no reassignment, no rejoin; sessions restart).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_proto::Uuid;

use super::assignors::Assignment;
use super::group::ConsumerGroup;
use super::member::{ClassicMember, Member, MemberState};
use crate::metadata::codec::{
    ClassicMemberRecord, ClassicProtocolRecord, ConsumerGroupRecord, ConsumerMemberRecord,
    TopicPartitionCount, TopicPartitionsRecord,
};

fn uuid(bytes: &[u8]) -> Option<Uuid> {
    <[u8; 16]>::try_from(bytes).ok().map(Uuid)
}

fn to_wire(a: &Assignment) -> Vec<TopicPartitionsRecord> {
    a.iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(t, ps)| TopicPartitionsRecord {
            topic_id: t.0.to_vec(),
            partitions: ps.iter().copied().collect(),
        })
        .collect()
}

/// Partitions by topic id; entries with a malformed topic id are dropped.
fn from_wire(list: &[TopicPartitionsRecord]) -> Assignment {
    let mut out = Assignment::new();
    for tp in list {
        if let Some(t) = uuid(&tp.topic_id) {
            out.entry(t)
                .or_default()
                .extend(tp.partitions.iter().copied());
        }
    }
    out
}

impl ConsumerGroup {
    /// The group as the metadata stores it.
    pub(crate) fn record(&self) -> ConsumerGroupRecord {
        ConsumerGroupRecord {
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: self.assignor.clone(),
            members: self
                .members
                .iter()
                .map(|(id, m)| ConsumerMemberRecord {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack: m.rack.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_names: m.subscribed_names.iter().cloned().collect(),
                    subscribed_regex: m.subscribed_regex.clone(),
                    server_assignor: m.server_assignor.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    epoch: m.epoch,
                    previous_epoch: m.previous_epoch,
                    state: m.state.code(),
                    assigned: to_wire(&m.assigned),
                    pending_revocation: to_wire(&m.pending_revocation),
                    target: self.target.get(id).map(to_wire).unwrap_or_default(),
                    classic: m.classic.as_ref().map(|c| ClassicMemberRecord {
                        session_timeout_ms: c.session_timeout_ms,
                        protocols: c
                            .protocols
                            .iter()
                            .map(|(name, metadata)| ClassicProtocolRecord {
                                name: name.clone(),
                                metadata: metadata.clone(),
                            })
                            .collect(),
                    }),
                })
                .collect(),
            partition_counts: self
                .partition_counts
                .iter()
                .map(|(t, n)| TopicPartitionCount {
                    topic_id: t.0.to_vec(),
                    partitions: *n,
                })
                .collect(),
        }
    }

    /// The group stored in `r`, every session starting at `now` with `session_timeout`
    /// (a member still revoking gets its whole rebalance timeout again).
    pub(crate) fn from_record(
        r: &ConsumerGroupRecord,
        now: Instant,
        session_timeout: Duration,
    ) -> ConsumerGroup {
        let mut g = ConsumerGroup {
            group_epoch: r.group_epoch,
            assignment_epoch: r.assignment_epoch,
            assignor: r.assignor.clone(),
            partition_counts: r
                .partition_counts
                .iter()
                .filter_map(|c| uuid(&c.topic_id).map(|t| (t, c.partitions)))
                .collect::<BTreeMap<_, _>>(),
            ..ConsumerGroup::default()
        };
        for m in &r.members {
            let state = MemberState::from_code(m.state);
            let classic = m.classic.as_ref().map(|c| ClassicMember {
                session_timeout_ms: c.session_timeout_ms,
                protocols: c
                    .protocols
                    .iter()
                    .map(|p| (p.name.clone(), p.metadata.clone()))
                    .collect(),
            });
            let session = match &classic {
                Some(c) => Duration::from_millis(u64::try_from(c.session_timeout_ms).unwrap_or(0)),
                None => session_timeout,
            };
            let member = Member {
                instance_id: m.instance_id.clone(),
                rack: m.rack.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_names: m.subscribed_names.iter().cloned().collect(),
                subscribed_regex: m.subscribed_regex.clone(),
                server_assignor: m.server_assignor.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                epoch: m.epoch,
                previous_epoch: m.previous_epoch,
                state,
                assigned: from_wire(&m.assigned),
                pending_revocation: from_wire(&m.pending_revocation),
                session_deadline: now + session,
                revoke_deadline: (state == MemberState::UnrevokedPartitions).then(|| {
                    now + Duration::from_millis(u64::try_from(m.rebalance_timeout_ms).unwrap_or(0))
                }),
                classic,
            };
            g.target.insert(m.member_id.clone(), from_wire(&m.target));
            g.members.insert(m.member_id.clone(), member);
        }
        g
    }
}
