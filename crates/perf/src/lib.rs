//! `vdl-perf`: a benchmark client for Kafka-compatible servers (vdl, Apache Kafka), with its
//! own small Kafka client so that every server is measured by the same code.
//!
//! Layout:
//! - [`client`]: connections, requests, leader discovery (on kafka-proto and tokio).
//! - [`units`]: command-line value types (sizes, thread ranges, durations, ratios).
//! - [`stats`]: HDR latency histograms, summaries, latency buckets, run results.
//! - [`payload`]: the record batches producers send.
//! - [`verify`]: the consumer's dense-offset check.
//! - [`safety`]: `vdl-perf verify`, the Jepsen-style safety checker (history, checker, run).
//! - [`env`]: what the workloads of a run share, and their error type.
//! - [`progress`]: the live progress display.
//! - [`produce`], [`consume`], [`mixed`], [`sweep`], [`suite`]: the workloads.
//! - [`groups`]: the group coordinator workload (joins, then heartbeats); [`groups_consumer`]:
//!   its consumer group protocol (KIP-848) variant.
//! - [`fake_server`]: a trivial in-memory Kafka server (the client's ceiling; tests).
//! - [`floor`]: the physical floor of a replicated fsynced produce (fsync, loopback round trip).
//! - [`report`]: text, Markdown, CSV, JSON and SVG output.

pub mod ceiling;
pub mod client;
pub mod consume;
pub mod env;
pub mod fake_server;
pub mod floor;
pub mod groups;
pub mod groups_consumer;
pub mod mixed;
pub mod payload;
pub mod produce;
pub mod progress;
pub mod report;
pub mod safety;
pub mod stats;
pub mod suite;
pub mod sweep;
pub mod units;
pub mod verify;
