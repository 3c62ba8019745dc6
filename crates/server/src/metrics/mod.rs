//! Prometheus metrics: what is counted on the hot paths, and how a scrape is encoded.
//!
//! Two kinds of numbers:
//! - *Counted as things happen*, with atomics only (no lock, no allocation, no map lookup by
//!   label on the hot path): per partition [`PartitionMetrics`] (held by the partition's group
//!   and by every `LogStream` handle on it), per node [`NodeMetrics`] (request latency
//!   histograms by API and stage, fsync latency, connections, throttle time). A histogram
//!   here is [`Histogram`]: fixed buckets of atomic counters.
//! - *Read at scrape time* from the node's state (Raft term, commit and applied index, log
//!   offsets, segments, in-sync replicas, consumer group lag): gathered by the node into a
//!   [`Scrape`], which this module encodes.
//!
//! Encoding uses the `prometheus-client` crate: each scrape registers a collector over the
//! gathered [`Scrape`] in a fresh registry and encodes it in the OpenMetrics text format
//! (which Prometheus reads). Names follow Prometheus conventions: `vdl_` prefix, base units
//! (seconds, bytes) last, counters end in `_total`.
//!
//! Files: `histogram.rs` (the atomic [`Histogram`]), `partition_metrics.rs` (per-partition
//! counters), `node_metrics.rs` (node-wide counters and histograms, request stages,
//! connections), `scrape.rs` (what a scrape reports, gathered by the node) and `encode.rs`
//! (the OpenMetrics encoding).

mod encode;
mod histogram;
mod node_metrics;
mod partition_metrics;
mod scrape;

pub use encode::{encode, CONTENT_TYPE};
pub use histogram::{Histogram, LATENCY_BUCKETS_SECONDS};
pub use node_metrics::{ConnectionGauge, NodeMetrics, Stage};
pub use partition_metrics::PartitionMetrics;
pub use scrape::{GroupLag, PartitionSample, Scrape, StorageSample};
