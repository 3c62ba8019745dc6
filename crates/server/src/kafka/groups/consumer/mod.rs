//! Consumer groups of the consumer group protocol (KIP-848, Kafka 4's `group.protocol=consumer`):
//! the coordinator computes assignments with a server-side assignor ([`assignors`]) and members
//! converge to them by heartbeating (ConsumerGroupHeartbeat).
//!
//! - [`types`]: what a heartbeat carries and answers, the settings, the cluster's topics.
//! - [`member`]: one member and its reconciliation (revoke first, then the new epoch; partitions
//!   still owned elsewhere wait).
//! - [`group`]: one group's state machine (group epoch, target assignment, fencing, static
//!   members, regex subscriptions, timeouts); [`record`]: its stored form.
//! - [`registry`]: every group of the coordinator's term; [`coordinator_ops`]: what the
//!   coordinator does with them (heartbeats and their records, deadlines, the classic
//!   interplay, offset checks, listing, describing, deleting).
//! - Classic-protocol members in a consumer group: [`classic_protocol`] (the embedded
//!   `consumer` protocol's subscription and assignment), [`classic_member`] (their JoinGroup,
//!   SyncGroup, Heartbeat and LeaveGroup in the state machine), [`migration`] (the online
//!   upgrade and downgrade), [`classic_ops`] and [`classic_api`] (the coordinator's and the
//!   handlers' share).
//! - [`heartbeat_api`] (ConsumerGroupHeartbeat) and [`describe_api`] (ConsumerGroupDescribe):
//!   the Kafka handlers.
//!
//! See the crate README ("Consumer-protocol groups") for the behaviour and the choices made.

pub(crate) mod assignors;
pub(crate) mod classic_api;
pub(crate) mod classic_member;
pub(crate) mod classic_ops;
pub(crate) mod classic_protocol;
pub(crate) mod coordinator_ops;
pub(crate) mod describe_api;
pub(crate) mod group;
#[cfg(test)]
mod group_tests;
pub(crate) mod heartbeat_api;
pub(crate) mod member;
pub(crate) mod migration;
pub(crate) mod record;
pub(crate) mod registry;
pub(crate) mod types;
