//! The range assignor (Kafka 4's server-side `range`): for every topic, its subscribers in a
//! fixed order get contiguous ranges of its partitions, the first `partitions % subscribers` of
//! them one partition more than the others. The order is static members first, by instance id,
//! then the others by member id; so members subscribed to the same topics get the same
//! partition numbers of topics with equal partition counts (co-partitioning, what joins need).
//!
//! Like Kafka 4's (since KAFKA-16944) it is not sticky on purpose: the assignment is recomputed
//! from the order alone, because keeping current partitions would break the ranges and the
//! co-partitioning. A member joining or leaving shifts the ranges of the members after it; a
//! static member rejoining under a new member id keeps its place through its instance id.

use std::cmp::Ordering;

use super::spec_index::{SpecIndex, NO_OWNER};
use super::{Assignor, GroupAssignment, GroupSpec, MemberSpec};

/// Kafka's server-side `range` assignor (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RangeAssignor;

impl Assignor for RangeAssignor {
    fn name(&self) -> &'static str {
        "range"
    }

    fn assign(&self, group: &GroupSpec) -> GroupAssignment {
        let index = SpecIndex::new(group);
        let mut order: Vec<usize> = (0..index.members.len()).collect();
        // Member indices follow member ids, so a stable sort keeps member id order among
        // members without instance ids (and among duplicate instance ids).
        order.sort_by(|&a, &b| static_first(index.members[a], index.members[b]));

        let mut subscribers_by_topic: Vec<Vec<usize>> = vec![Vec::new(); index.topics.len()];
        for &member in &order {
            for &topic in &index.subscriptions[member] {
                subscribers_by_topic[topic].push(member);
            }
        }

        let mut owners = vec![NO_OWNER; index.partition_count()];
        for (topic, subscribers) in subscribers_by_topic.iter().enumerate() {
            if subscribers.is_empty() {
                continue;
            }
            let range = index.partitions_of(topic);
            let min_quota = range.len() / subscribers.len();
            let extras = range.len() % subscribers.len();
            let mut start = range.start;
            for (position, &member) in subscribers.iter().enumerate() {
                let quota = min_quota + usize::from(position < extras);
                owners[start..start + quota].fill(member as u32);
                start += quota;
            }
        }
        index.to_group_assignment(&owners)
    }
}

/// Static members (with an instance id) before dynamic ones, static ones by instance id.
fn static_first(a: &MemberSpec, b: &MemberSpec) -> Ordering {
    match (&a.instance_id, &b.instance_id) {
        (Some(a), Some(b)) => a.cmp(b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}
