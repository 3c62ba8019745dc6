//! The server-side assignors of the consumer group protocol (KIP-848): given a group's members,
//! their subscriptions and their current assignments, and the partition counts of the topics
//! they subscribe to, compute every member's target assignment.
//!
//! Two assignors, as Apache Kafka 4 ships them: [`uniform`] (the default; balanced, sticky) and
//! [`range`] (co-partitioned: for every topic, member i gets the i-th contiguous range of its
//! partitions among the members subscribed to it; recomputed on every assignment as Kafka 4's
//! is, so only static members' instance ids make it stable). A member names one with
//! `group.remote.assignor` (ConsumerGroupHeartbeat's ServerAssignor, [`by_name`]); the group
//! uses the one most of its members name ([`select`]), [`DEFAULT_ASSIGNOR`] when none does.
//!
//! The assignors are pure functions of a [`GroupSpec`]: no I/O, no clock, no randomness, so the
//! same spec gives the same assignment on every node and after every restart. Neither uses
//! racks (`MemberSpec::rack` is carried for a rack-aware assignor later).
//!
//! Files: [`spec_index`] (a spec in dense indices, shared by both), [`uniform`] (its
//! homogeneous and heterogeneous builders), [`range`].

mod range;
mod spec_index;
#[cfg(test)]
mod tests;
mod uniform;

pub(crate) use range::RangeAssignor;
pub(crate) use uniform::UniformAssignor;

use std::collections::{BTreeMap, BTreeSet};

use kafka_proto::Uuid;

/// A member's id (the consumer generates it for ConsumerGroupHeartbeat v1+).
pub(crate) type MemberId = String;

/// Partitions by topic id: one member's assignment.
pub(crate) type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// Every member's target assignment, by member id (every member of the spec has an entry,
/// possibly empty; no topic entry has an empty partition set).
pub(crate) type GroupAssignment = BTreeMap<MemberId, Assignment>;

/// One member as an assignor sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemberSpec {
    /// The topics it subscribes to that exist (names and regexes already resolved to ids).
    pub(crate) subscribed: BTreeSet<Uuid>,
    /// Its instance id (`group.instance.id`) if it is a static member: the range assignor
    /// orders static members by it, so a static member that rejoins under a new member id
    /// gets the same partitions.
    pub(crate) instance_id: Option<String>,
    /// Its rack (`client.rack`), if it gave one.
    pub(crate) rack: Option<String>,
    /// Its current target assignment (what the assignor should keep where balance allows).
    pub(crate) current: Assignment,
}

/// A group as an assignor sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct GroupSpec {
    /// The members, by id.
    pub(crate) members: BTreeMap<MemberId, MemberSpec>,
    /// The partition count of every topic some member subscribes to.
    pub(crate) partitions_by_topic: BTreeMap<Uuid, u32>,
}

/// A server-side assignor.
pub(crate) trait Assignor: Send + Sync {
    /// The name clients use for it (`uniform`, `range`).
    fn name(&self) -> &'static str;

    /// The target assignment of every member of `group`. Promises: every partition of a topic
    /// in `group.partitions_by_topic` that at least one member subscribes to is assigned to
    /// exactly one member subscribed to that topic; no other partition is assigned; the result
    /// depends only on `group`.
    fn assign(&self, group: &GroupSpec) -> GroupAssignment;
}

/// The name of the assignor a group uses when none of its members names one (Kafka's
/// `group.consumer.assignors` default lists `uniform` first).
pub(crate) const DEFAULT_ASSIGNOR: &str = "uniform";

/// Every assignor this server offers, in preference order (the order [`select`] breaks ties in).
static ASSIGNORS: [&dyn Assignor; 2] = [&UniformAssignor, &RangeAssignor];

/// The assignor a client names (`uniform`, `range`; exact, case-sensitive), `None` for a name
/// this server does not offer (Kafka answers UNSUPPORTED_ASSIGNOR then).
pub(crate) fn by_name(name: &str) -> Option<&'static dyn Assignor> {
    ASSIGNORS
        .iter()
        .copied()
        .find(|assignor| assignor.name() == name)
}

/// The name of the assignor a group uses, given the assignor each member names (`None` for a
/// member that names none), as Kafka's coordinator picks it: the one most members name; a tie
/// goes to the one first in this server's preference order (`uniform`, then `range`); names this
/// server does not offer are not counted; [`DEFAULT_ASSIGNOR`] when no member names one.
pub(crate) fn select<'a>(names: impl Iterator<Item = Option<&'a str>>) -> &'static str {
    let mut votes = [0usize; ASSIGNORS.len()];
    for name in names.flatten() {
        if let Some(index) = ASSIGNORS
            .iter()
            .position(|assignor| assignor.name() == name)
        {
            votes[index] += 1;
        }
    }
    let mut chosen: Option<usize> = None;
    for (index, &count) in votes.iter().enumerate() {
        if count > 0 && chosen.is_none_or(|best| count > votes[best]) {
            chosen = Some(index);
        }
    }
    chosen.map_or(DEFAULT_ASSIGNOR, |index| ASSIGNORS[index].name())
}
