//! `GET /status` (this node and every stream's Raft and log state, the Kafka listeners'
//! authentication counters, the peer port's refused connections, the damaged replicas and the
//! scrubber's counters) and `GET /metrics` (Prometheus metrics, OpenMetrics text, see
//! [`crate::metrics`]).
//!
//! The `/status` document's types are the server's own (not in `vdl-admin-api` yet: the
//! document embeds the security counters).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::node::Node;

/// One stream's state in `/status`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StreamStatus {
    /// Stream (topic) name.
    pub name: String,
    /// Leader node id (0: none known).
    pub leader: u64,
    /// Current term.
    pub term: u64,
    /// Highest applied (committed) Raft index.
    pub applied_index: u64,
    /// Next offset after the last committed record.
    pub high_watermark: u64,
    /// First offset still stored.
    pub log_start_offset: u64,
    /// Partition of the topic (0 for a stream configured at start; absent in documents from
    /// versions before partitions). Last, so scripts reading the fields in order (name,
    /// leader, ...) keep working.
    #[serde(default)]
    pub partition: u32,
    /// Whether the partition's Raft group is quiesced on this node (idle: no ticks, no
    /// heartbeats).
    #[serde(default)]
    pub quiesced: bool,
}

/// The `/status` document.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeStatus {
    /// This node's id.
    pub id: u64,
    /// This node's name.
    pub name: String,
    /// Every stream this node serves: each partition of each topic, partitions of a topic in
    /// order.
    pub streams: Vec<StreamStatus>,
    /// Authentication counters of the Kafka listeners (absent in documents from versions
    /// before them).
    #[serde(default)]
    pub security: crate::security::stats::SecurityStatsSnapshot,
    /// Peer connections refused so far (no hello, a bad or forged hello, no valid TLS
    /// certificate with `[peer_tls]`).
    #[serde(default)]
    pub peer_refused_connections: u64,
    /// Raft messages from peers delivered to their group so far.
    #[serde(default)]
    pub peer_delivered_messages: u64,
    /// Replicas on this node whose storage was found damaged and that are not whole again.
    #[serde(default)]
    pub damaged: Vec<DamagedStatus>,
    /// Storage-fault counters (scrubber and repairs).
    #[serde(default)]
    pub storage: StorageCounters,
}

/// A damaged replica in `/status`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DamagedStatus {
    /// The stream (topic-partition label).
    pub stream: String,
    /// The first Raft index lost (0: the hard state was lost, not entries).
    pub first_bad_index: u64,
    /// The last index the log had before the cut.
    pub lost_last_index: u64,
    /// Where the damage was found.
    pub detail: String,
}

/// Storage-fault counters in `/status`.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StorageCounters {
    /// Bytes of sealed segments the scrubber CRC-checked.
    pub scrub_bytes_verified: u64,
    /// Damaged entries the scrubber found.
    pub scrub_faults_found: u64,
    /// Damage found anywhere (open, reads, scrubber, hard state).
    pub faults_found: u64,
    /// Repairs completed.
    pub repairs_completed: u64,
}

/// `GET /metrics`: the node's Prometheus metrics.
pub(super) async fn metrics(State(node): State<Arc<Node>>) -> Response {
    let text = crate::metrics::encode(node.scrape());
    let mut resp = text.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    resp
}

/// `GET /status`: this node's [`NodeStatus`].
pub(super) async fn status(State(node): State<Arc<Node>>) -> Json<NodeStatus> {
    let streams = node
        .stream_names()
        .into_iter()
        .flat_map(|n| node.partitions(&n))
        .map(|s| {
            let v = s.visible();
            StreamStatus {
                name: s.name().to_owned(),
                partition: s.partition(),
                quiesced: v.quiesced,
                leader: v.leader,
                term: v.term,
                applied_index: v.applied_index,
                high_watermark: v.high_watermark,
                log_start_offset: v.log_start_offset,
            }
        })
        .collect();
    let faults = node.storage_faults();
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    Json(NodeStatus {
        id: node.config().id,
        name: node.config().name.clone(),
        streams,
        security: node.security_stats().snapshot(),
        peer_refused_connections: node.peer_stats().refused_connections(),
        peer_delivered_messages: node.peer_stats().delivered_messages(),
        damaged: faults
            .damaged()
            .into_iter()
            .map(|d| DamagedStatus {
                stream: d.stream,
                first_bad_index: d.first_bad_index,
                lost_last_index: d.lost_last_index,
                detail: d.detail,
            })
            .collect(),
        storage: StorageCounters {
            scrub_bytes_verified: load(&faults.scrub_bytes_verified),
            scrub_faults_found: load(&faults.scrub_faults_found),
            faults_found: load(&faults.faults_found),
            repairs_completed: load(&faults.repairs_completed),
        },
    })
}
