//! The vdl server: Raft groups, peer transport, Kafka listener.
//!
//! Layout:
//! - [`config`]: the node's TOML configuration and the embedded single-node default.
//! - [`fd_budget`]: the open-file limit, raised at start and split between clients and storage.
//! - [`transport`]: Raft messages between nodes over TCP.
//! - [`peer_wire`]: the bytes of the peer protocol (hellos, frames; current and earlier versions).
//! - [`peer_guard`]: which connections, hellos and Raft messages the peer port admits.
//! - [`raft_log`]: raft-rs's log records forwarded to `tracing`.
//! - [`replicas`]: data directory ids; a node rejoining after its disk was replaced.
//! - [`raft_storage`]: raft-rs's `Storage` over the log store.
//! - [`group`]: one Raft group's thread: the Ready loop, proposals, commit notification.
//! - [`metadata`]: the replicated cluster metadata (topics, producer ids, group offsets).
//! - [`metadata_codec`]: how metadata commands are stored in the Raft log (protobuf; old JSON).
//! - [`metrics`]: Prometheus metrics (counters on the hot paths, encoding of a scrape).
//! - [`topic_config`]: topic-level configs (overrides, validation, effective settings).
//! - [`placement`]: which nodes hold each partition's replicas, and which should lead.
//! - [`leaders`]: who leads the partitions a node does not host (reports in liveness pings).
//! - [`producers`]: idempotent producers' state, derived from the replicated log.
//! - [`node`]: a node: its streams, the transport, handles to append and read.
//! - [`kafka`]: the Kafka protocol listener and the handlers of each API.
//! - [`security`]: principals (who a connection is).
//! - [`shutdown`]: graceful shutdown (leadership hand-off, draining connections, sync).
//! - [`admin`]: the admin HTTP API (status, append and read without Kafka, metrics).
//! - [`admin_ops`]: the admin API's operator endpoints (cluster status, leaders, segments).

pub mod admin;
pub mod admin_ops;
pub mod config;
pub mod fd_budget;
pub mod group;
pub mod inbox;
pub mod kafka;
pub mod leaders;
pub mod liveness;
pub mod metadata;
pub mod metadata_codec;
pub mod metadata_snapshot;
pub mod metrics;
pub mod node;
pub mod peer_guard;
pub mod peer_wire;
pub mod placement;
pub mod producers;
pub mod quiesce;
pub mod raft_log;
pub mod raft_storage;
pub mod replicas;
pub mod runtime;
pub mod security;
pub mod shutdown;
pub mod topic_config;
pub mod transport;

pub use group::{AppendError, Appended, Visible};
pub use node::{LogStream, Node};
