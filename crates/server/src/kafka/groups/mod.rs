//! Consumer groups over the Kafka protocol: the classic group protocol (FindCoordinator,
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
//! DescribeGroups, DeleteGroups, OffsetDelete and TxnOffsetCommit) and the consumer group
//! protocol of KIP-848 ([`consumer`]: ConsumerGroupHeartbeat and ConsumerGroupDescribe, with
//! server-side assignors). A group id is one kind at a time: an empty group of one kind is
//! converted by the other protocol's first join; classic members may join a consumer group
//! (as members of type classic), and a classic group with members is upgraded online by a
//! consumer-protocol member's join and downgraded back when the last one leaves, as
//! `kafka.consumer_group_migration_policy` allows (see [`consumer`]).
//!
//! **Placement.** The coordinator of every group is the node leading the metadata Raft group.
//! FindCoordinator on any node names it; group requests reaching another node get
//! NOT_COORDINATOR, so clients look the coordinator up again.
//!
//! **State.** Membership (members, generations, assignments) is run in memory on the coordinator
//! ([`coordinator`]) and stored in the metadata log where Kafka's coordinator writes its group
//! metadata record: when a rebalance completes (the leader's SyncGroup), when a static member is
//! replaced, and when a group becomes empty
//! ([`MetaCommand::StoreGroup`](crate::metadata::MetaCommand::StoreGroup), written by a
//! persisting task only while this node coordinates in the record's term). A new coordinator (a
//! new metadata leader, once it has applied the metadata through its term's start) loads the
//! stored groups: members heartbeating to it are recognised in the same generation, without a
//! rebalance. Committed offsets go through the metadata group too (fsynced on a majority before
//! the OffsetCommit is answered, only while the validating coordinator still leads in its term).
//! OffsetFetch, ListGroups and DescribeGroups first take a read barrier on the metadata group
//! (Raft's ReadIndex, no log entry), so the coordinator has applied every offset committed before
//! (also through a previous coordinator) before it reads.
//!
//! **Files.** The coordinator (the state, in memory):
//! - [`types`]: what its requests carry and answer; [`limits`]: its limits and timeouts.
//! - [`group`]: one group's state machine (rebalances, generations, static members);
//!   [`group_record`]: a group as the metadata stores it.
//! - [`coordinator`]: every group of one node, sharded, one lock per group, per metadata term;
//!   [`coordinator_membership`]: its JoinGroup, SyncGroup, Heartbeat, LeaveGroup and commit
//!   checks; [`coordinator_admin`]: listing, describing and removing groups; [`deadlines`]:
//!   the heap of each group's next deadline.
//! - [`node_coordinator`]: this node's coordinator and term as the handlers reach them;
//!   [`coordinator_tasks`]: its ticker, persister and offset expiry.
//!
//! The Kafka handlers (requests to responses): [`find_coordinator_api`], [`membership_api`]
//! (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), [`offsets_api`] (OffsetCommit, OffsetFetch,
//! OffsetDelete), [`txn_offsets_api`] (TxnOffsetCommit: offsets pending in a transaction) and
//! [`group_admin_api`] (ListGroups, DescribeGroups, DeleteGroups).
//!
//! Consumer-protocol groups ([`consumer`]) live in the same [`coordinator::Coordinator`] (its
//! `consumer` registry: same term, same outbox, their own deadline heap), are stored with
//! [`MetaCommand::StoreConsumerGroup`](crate::metadata::MetaCommand::StoreConsumerGroup)
//! before a heartbeat that changed them is answered, and are loaded by a new coordinator with
//! every member's epoch and assignment.

pub(crate) mod consumer;
pub(crate) mod coordinator;
mod coordinator_admin;
mod coordinator_membership;
mod coordinator_tasks;
#[cfg(test)]
mod coordinator_tests;
mod deadlines;
pub(super) mod find_coordinator_api;
mod group;
pub(super) mod group_admin_api;
mod group_record;
mod limits;
pub(super) mod membership_api;
pub(crate) mod node_coordinator;
pub(super) mod offsets_api;
pub(super) mod txn_offsets_api;
mod types;
