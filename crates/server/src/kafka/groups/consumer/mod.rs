//! Consumer groups of the consumer group protocol (KIP-848, Kafka 4's `group.protocol=consumer`):
//! the coordinator computes assignments with a server-side assignor ([`assignors`]) and members
//! converge to them by heartbeating (ConsumerGroupHeartbeat).
//!
//! - [`types`]: what a heartbeat carries and answers, the settings, the cluster's topics.
//! - [`member`]: one member and its reconciliation (revoke first, then the new epoch; partitions
//!   still owned elsewhere wait).
//! - [`group`]: one group's state machine (group epoch, target assignment, fencing, static
//!   members, regex subscriptions, timeouts).

pub(crate) mod assignors;
pub(crate) mod coordinator_ops;
pub(crate) mod describe_api;
pub(crate) mod group;
#[cfg(test)]
mod group_tests;
pub(crate) mod heartbeat_api;
pub(crate) mod member;
pub(crate) mod record;
pub(crate) mod registry;
pub(crate) mod types;
