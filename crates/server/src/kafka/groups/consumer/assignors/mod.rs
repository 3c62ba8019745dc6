//! The server-side assignors of the consumer group protocol (KIP-848): given a group's members,
//! their subscriptions and their current assignments, and the partition counts of the topics
//! they subscribe to, compute every member's target assignment.
//!
//! Two assignors, as Apache Kafka 4 ships them: [`uniform`] (the default; balanced, sticky) and
//! [`range`] (co-partitioned: for every topic, member i gets the i-th contiguous range of its
//! partitions among the members subscribed to it, sticky where balance allows). A member names
//! one with `group.remote.assignor` (ConsumerGroupHeartbeat's ServerAssignor); the group uses
//! the one most of its members name ([`select`]), the default when none does.
//!
//! The assignors are pure functions of a [`GroupSpec`]: no I/O, no clock, no randomness, so the
//! same spec gives the same assignment on every node and after every restart.

use std::collections::{BTreeMap, BTreeSet};

use kafka_proto::Uuid;

/// A member's id (the consumer generates it for ConsumerGroupHeartbeat v1+).
pub(crate) type MemberId = String;

/// Partitions by topic id: one member's assignment.
pub(crate) type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// Every member's target assignment, by member id (every member of the spec has an entry,
/// possibly empty).
pub(crate) type GroupAssignment = BTreeMap<MemberId, Assignment>;

/// One member as an assignor sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemberSpec {
    /// The topics it subscribes to that exist (names and regexes already resolved to ids).
    pub(crate) subscribed: BTreeSet<Uuid>,
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
