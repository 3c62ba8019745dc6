//! [`NodeMetrics`]: node-wide counters and histograms (request latency by API and [`Stage`],
//! throttle time, fsync latency, connections), and the [`ConnectionGauge`].

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kafka_proto::api::ApiKey;

use super::Histogram;

/// Where a request's time goes, as Kafka's request metrics break it down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Read from the socket until dispatched (waiting behind the connection's in-flight bound).
    Queue,
    /// Handled on this node: for Produce, one Raft entry's wait from proposal to its local
    /// append and fsync (group commit: per entry, not per request); for other APIs, the
    /// handler until the response is ready.
    Local,
    /// Produce only: from the local fsync until a majority has it (replication wait), per entry.
    Remote,
    /// Ready until written: waiting behind earlier responses of the connection (in order).
    ResponseQueue,
    /// Writing the response to the socket.
    ResponseSend,
    /// Read from the socket until the response is written.
    Total,
}

impl Stage {
    /// Every stage, in the order of [`Stage::index`].
    pub const ALL: [Stage; 6] = [
        Stage::Queue,
        Stage::Local,
        Stage::Remote,
        Stage::ResponseQueue,
        Stage::ResponseSend,
        Stage::Total,
    ];

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// The `stage` label's value.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Queue => "queue",
            Stage::Local => "local",
            Stage::Remote => "remote",
            Stage::ResponseQueue => "response_queue",
            Stage::ResponseSend => "response_send",
            Stage::Total => "total",
        }
    }
}

/// Highest Kafka API key tracked (keys above share nothing; they are not served).
const MAX_API_KEY: usize = 127;

/// Node-wide counters and histograms.
pub struct NodeMetrics {
    /// The APIs tracked, in the order of `requests`.
    pub(super) apis: Vec<ApiKey>,
    /// Index into `requests` by API key (`u8::MAX`: not tracked).
    api_slot: [u8; MAX_API_KEY + 1],
    /// Per API, one histogram per [`Stage`].
    pub(super) requests: Vec<[Histogram; 6]>,
    /// Per API, time requests were throttled (fed by flow control).
    pub(super) throttle: Vec<Histogram>,
    /// Every fsync of a Raft log append on this node.
    pub fsync: Histogram,
    /// Kafka client connections open now.
    pub active_connections: AtomicI64,
    /// Kafka client connections accepted since start.
    pub connections_accepted: AtomicU64,
    /// Where the authentication failure count comes from (set by the security layer).
    auth_failures: OnceLock<Box<dyn Fn() -> u64 + Send + Sync>>,
    /// Reads the connections refused by the per-address limits and the authentication
    /// timeouts (see [`NodeMetrics::set_connection_limit_source`]).
    connection_limits: OnceLock<Box<dyn Fn() -> (u64, u64) + Send + Sync>>,
}

impl std::fmt::Debug for NodeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMetrics")
            .field("apis", &self.apis)
            .finish_non_exhaustive()
    }
}

impl NodeMetrics {
    /// Metrics for a node serving `apis`.
    pub fn new(apis: &[ApiKey]) -> NodeMetrics {
        let mut api_slot = [u8::MAX; MAX_API_KEY + 1];
        let mut tracked = Vec::new();
        for api in apis {
            let key = usize::try_from(api.as_i16()).unwrap_or(usize::MAX);
            if key <= MAX_API_KEY && tracked.len() < usize::from(u8::MAX) {
                api_slot[key] = tracked.len() as u8;
                tracked.push(*api);
            }
        }
        NodeMetrics {
            requests: tracked.iter().map(|_| Default::default()).collect(),
            throttle: tracked.iter().map(|_| Histogram::default()).collect(),
            apis: tracked,
            api_slot,
            fsync: Histogram::default(),
            active_connections: AtomicI64::new(0),
            connections_accepted: AtomicU64::new(0),
            auth_failures: OnceLock::new(),
            connection_limits: OnceLock::new(),
        }
    }

    fn slot(&self, api: i16) -> Option<usize> {
        let key = usize::try_from(api).ok()?;
        let slot = *self.api_slot.get(key)?;
        (slot != u8::MAX).then_some(usize::from(slot))
    }

    /// Records `d` for `stage` of a request to API `api` (untracked APIs are ignored).
    pub fn observe_request(&self, api: i16, stage: Stage, d: Duration) {
        if let Some(i) = self.slot(api) {
            self.requests[i][stage.index()].observe(d);
        }
    }

    /// The histogram of `stage` for API `api`, if tracked (for tests and callers that observe
    /// often).
    pub fn request_histogram(&self, api: ApiKey, stage: Stage) -> Option<&Histogram> {
        self.slot(api.as_i16())
            .map(|i| &self.requests[i][stage.index()])
    }

    /// Records that a request to `api` was throttled for `d` (flow control calls this with
    /// the `throttle_time_ms` it answers).
    pub fn observe_throttle(&self, api: i16, d: Duration) {
        if let Some(i) = self.slot(api) {
            self.throttle[i].observe(d);
        }
    }

    /// Sets where `vdl_authentication_failures_total` is read from (once; later calls are
    /// ignored and return false). Until set, the metric reads 0.
    pub fn set_authentication_failures_source(
        &self,
        source: Box<dyn Fn() -> u64 + Send + Sync>,
    ) -> bool {
        self.auth_failures.set(source).is_ok()
    }

    pub(super) fn authentication_failures(&self) -> u64 {
        self.auth_failures.get().map_or(0, |f| f())
    }

    /// Sets where `vdl_connections_refused_total` (the first value: connections closed by the
    /// per-address limits) and `vdl_authentication_timeouts_total` (the second) are read from
    /// (once; later calls are ignored and return false). Until set, both read 0.
    pub fn set_connection_limit_source(
        &self,
        source: Box<dyn Fn() -> (u64, u64) + Send + Sync>,
    ) -> bool {
        self.connection_limits.set(source).is_ok()
    }

    pub(super) fn connection_limits(&self) -> (u64, u64) {
        self.connection_limits.get().map_or((0, 0), |f| f())
    }
}

/// A connection counted in [`NodeMetrics::active_connections`] while this lives.
pub struct ConnectionGauge(Arc<NodeMetrics>);

impl ConnectionGauge {
    /// Counts a new connection.
    pub fn open(metrics: Arc<NodeMetrics>) -> ConnectionGauge {
        metrics.active_connections.fetch_add(1, Ordering::Relaxed);
        metrics.connections_accepted.fetch_add(1, Ordering::Relaxed);
        ConnectionGauge(metrics)
    }
}

impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        self.0.active_connections.fetch_sub(1, Ordering::Relaxed);
    }
}
