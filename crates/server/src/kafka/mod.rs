//! The Kafka protocol listener: connections, request dispatch and the handlers of each API.
//!
//! - [`listener`]: accepts connections (bounded), reads frames, handles requests concurrently
//!   and writes responses in request order.
//! - [`handlers`]: turns one decoded request into its response.
//! - [`produce`], [`fetch`], [`metadata`], [`topics`], [`cluster`]: the APIs' logic over the node's log
//!   streams and the replicated cluster metadata.
//! - [`configs`]: AlterConfigs and IncrementalAlterConfigs (topic config overrides).
//! - [`partition_admin`]: DeleteRecords, DescribeLogDirs, DescribeProducers, ElectLeaders,
//!   ListPartitionReassignments.
//! - [`groups`], [`group_coordinator`], [`group_deadlines`]: consumer groups (classic
//!   protocol): coordinator lookup, membership and rebalances (with each group's next deadline
//!   in a heap), committed offsets.
//!
//! A topic is a log stream with one partition (partition 0).

pub mod cluster;
pub mod configs;
pub mod fetch;
pub mod group_coordinator;
pub mod group_deadlines;
pub mod groups;
pub mod handlers;
pub mod listener;
pub mod metadata;
pub mod partition_admin;
pub mod produce;
pub mod topics;

pub use listener::serve;
