//! A [`GroupSpec`] in dense indices, as both assignors walk it: members by index (member id
//! order), the topics some member subscribes to by index (topic id order), and every partition of
//! those topics by one global index (topic by topic, partitions in order), so an assignment is a
//! vector of owners rather than maps of sets.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use kafka_proto::Uuid;

use super::{Assignment, GroupAssignment, GroupSpec, MemberId, MemberSpec};

/// The owner of a partition no member owns (yet).
pub(super) const NO_OWNER: u32 = u32::MAX;

/// A group spec by dense indices (see the module doc).
pub(super) struct SpecIndex<'a> {
    /// Member ids, ascending; a member's index is its position here.
    pub(super) member_ids: Vec<&'a MemberId>,
    /// The members' specs, by member index.
    pub(super) members: Vec<&'a MemberSpec>,
    /// The topics some member subscribes to, ascending; a topic's index is its position here.
    pub(super) topics: Vec<Uuid>,
    /// Every topic's first global partition index; `topic_starts[topics.len()]` is the number
    /// of partitions of all topics.
    topic_starts: Vec<usize>,
    /// Topic index by topic id.
    topic_by_id: HashMap<Uuid, usize>,
    /// Every member's subscribed topics, as ascending topic indices.
    pub(super) subscriptions: Vec<Vec<usize>>,
}

impl<'a> SpecIndex<'a> {
    /// Indexes `group`. A subscribed topic missing from `partitions_by_topic` counts as a topic
    /// with no partitions; a partition count above `i32::MAX` is capped there (partition ids are
    /// `i32`).
    pub(super) fn new(group: &'a GroupSpec) -> SpecIndex<'a> {
        let mut member_ids = Vec::with_capacity(group.members.len());
        let mut members = Vec::with_capacity(group.members.len());
        let mut subscribed = BTreeSet::new();
        for (id, member) in &group.members {
            member_ids.push(id);
            members.push(member);
            subscribed.extend(member.subscribed.iter().copied());
        }
        let topics: Vec<Uuid> = subscribed.into_iter().collect();
        let mut topic_starts = Vec::with_capacity(topics.len() + 1);
        let mut next = 0usize;
        for topic in &topics {
            topic_starts.push(next);
            let count = group.partitions_by_topic.get(topic).copied().unwrap_or(0);
            next += count.min(i32::MAX as u32) as usize;
        }
        topic_starts.push(next);
        let topic_by_id: HashMap<Uuid, usize> = topics
            .iter()
            .enumerate()
            .map(|(index, topic)| (*topic, index))
            .collect();
        let subscriptions = members
            .iter()
            .map(|member| {
                // `subscribed` is ascending, and so are the topic indices.
                member
                    .subscribed
                    .iter()
                    .filter_map(|topic| topic_by_id.get(topic).copied())
                    .collect()
            })
            .collect();
        SpecIndex {
            member_ids,
            members,
            topics,
            topic_starts,
            topic_by_id,
            subscriptions,
        }
    }

    /// The number of partitions of all subscribed topics.
    pub(super) fn partition_count(&self) -> usize {
        self.topic_starts[self.topics.len()]
    }

    /// The global partition indices of topic `topic`.
    pub(super) fn partitions_of(&self, topic: usize) -> Range<usize> {
        self.topic_starts[topic]..self.topic_starts[topic + 1]
    }

    /// True when every member that subscribes to something subscribes to the same topics.
    pub(super) fn is_homogeneous(&self) -> bool {
        let mut nonempty = self
            .subscriptions
            .iter()
            .filter(|topics| !topics.is_empty());
        match nonempty.next() {
            None => true,
            Some(first) => nonempty.all(|topics| topics == first),
        }
    }

    /// The global indices of the partitions in member `member`'s current assignment that it may
    /// keep: of a topic it still subscribes to, and still existing. Ascending by topic id, then
    /// partition.
    pub(super) fn keepable(&self, member: usize) -> impl Iterator<Item = usize> + '_ {
        let subscriptions = &self.subscriptions[member];
        self.members[member]
            .current
            .iter()
            .flat_map(move |(topic, partitions)| {
                let range = self
                    .topic_by_id
                    .get(topic)
                    .filter(|index| subscriptions.binary_search(index).is_ok())
                    .map_or(0..0, |&index| self.partitions_of(index));
                let count = range.len();
                partitions.iter().filter_map(move |&partition| {
                    let partition = usize::try_from(partition).ok()?;
                    (partition < count).then_some(range.start + partition)
                })
            })
    }

    /// The group assignment `owners` describes (`owners[partition]` is the index of the member
    /// owning that global partition, [`NO_OWNER`] for none): every member gets an entry.
    pub(super) fn to_group_assignment(&self, owners: &[u32]) -> GroupAssignment {
        let mut assignments: Vec<Assignment> = vec![Assignment::new(); self.members.len()];
        for (topic_index, topic) in self.topics.iter().enumerate() {
            let range = self.partitions_of(topic_index);
            for (partition, &owner) in owners[range.clone()].iter().enumerate() {
                if let Some(assignment) = assignments.get_mut(owner as usize) {
                    // `partition` is below the capped count, so it fits an i32.
                    assignment
                        .entry(*topic)
                        .or_default()
                        .insert(partition as i32);
                }
            }
        }
        self.member_ids
            .iter()
            .map(|id| (*id).clone())
            .zip(assignments)
            .collect()
    }
}
