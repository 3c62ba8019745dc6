//! The vdl server: Raft groups, peer transport, Kafka listener.
//!
//! Layout (folders by concern):
//! - [`runtime`]: the worker pool and timer every Raft group runs on, group inboxes,
//!   quiescence of idle groups, the open-file budget.
//! - [`replication`]: one Raft group per partition and the handle on it (`LogStream`), the
//!   peer transport, what it admits and where its messages go, liveness, replica placement and
//!   leaders, idempotent producer state.
//! - [`kafka`]: the Kafka protocol listener and the handlers of each API.
//! - [`flow`]: flow control: node-wide rate limits and Kafka client quotas, throttling.
//! - [`security`]: listeners' TLS and SASL, principals, SCRAM credentials, ACLs and the
//!   authorizer.
//! - [`storage_faults`]: damaged replicas and their repair counters; [`scrubber`]: the
//!   background verification of sealed segments.
//! - [`admin`]: the admin HTTP API, one room (status, append and read without Kafka,
//!   metrics, rates, members, and the operator endpoints `vdlctl` calls: cluster status,
//!   leaders, segments; its HTTP(S) transport, authentication, and the client that calls
//!   other nodes).
//! - [`served_apis`]: the Kafka APIs served and their versions (what ApiVersions lists and
//!   the per-API metrics track), a leaf both the node and `kafka/` read.
//! - [`metrics`]: Prometheus metrics (counters on the hot paths, encoding of a scrape).
//! - [`shutdown`]: the phases of a graceful shutdown the Kafka listeners follow (the
//!   binary's `main.rs` drives it: leadership hand-off, draining connections, sync).
//! - [`metadata`]: the replicated cluster metadata (topics, producer ids, groups, quotas);
//!   (`metadata/`: commands, state, apply, the group's state machine over a host trait;
//!   [`metadata::codec`]: how its commands are stored in the Raft log; [`metadata::snapshot`]:
//!   its snapshots); [`topic_config`]: topic-level configs.
//! - [`node`]: a node: start-up and shutdown, the topics and Raft groups it hosts, its data
//!   directory, membership, metadata proposals, listeners' binding and TLS reloads (one file
//!   per job under `node/`); it imports nothing of `kafka/`.
//! - [`service`]: the node's Kafka service, the composition root that wires the node and
//!   `kafka/` together: the node as the handlers see it (with the group coordinator), the
//!   Kafka listeners (`Node::serve_kafka`).
//! - [`config`]: the node's TOML configuration and the embedded single-node default (the
//!   settings of every room, parsed, which the rooms read from there).
//!
//! Code names a module by its real path (`crate::replication::group`,
//! `crate::runtime::inbox`); the layout rules are in the crate README and
//! `tests/layout_rules.rs`.

pub mod admin;
pub mod compaction;
pub mod config;
pub mod core;
pub mod flow;
pub mod kafka;
pub mod metadata;
pub mod metrics;
pub mod node;
pub mod replication;
pub mod runtime;
pub mod scrubber;
pub mod security;
pub mod served_apis;
pub mod service;
pub mod shutdown;
pub mod storage_faults;
pub mod topic_config;

pub use node::Node;
pub use replication::group::{AppendError, Appended, Visible};
pub use replication::stream::LogStream;
