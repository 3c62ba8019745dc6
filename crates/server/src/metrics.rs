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

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kafka_proto::api::ApiKey;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// Upper bounds (seconds) of the latency histograms' buckets: 50 µs to 10 s.
pub const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// A histogram of durations with fixed buckets ([`LATENCY_BUCKETS_SECONDS`]) made of atomic
/// counters: observing is a short scan and three relaxed atomic additions, no lock.
#[derive(Debug)]
pub struct Histogram {
    /// Count per bucket (not cumulative); the last one is `+Inf`.
    buckets: [AtomicU64; LATENCY_BUCKETS_SECONDS.len() + 1],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS_SECONDS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BUCKETS_SECONDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// (sum in seconds, count, per-bucket (upper bound, count) with `+Inf` last), as the
    /// encoder wants them (it makes them cumulative).
    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let buckets = LATENCY_BUCKETS_SECONDS
            .iter()
            .copied()
            // The encoder writes `le="+Inf"` for f64::MAX.
            .chain(std::iter::once(f64::MAX))
            .zip(self.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect::<Vec<_>>();
        // The count is the buckets' sum, so the encoded histogram is consistent even while
        // observations race with the scrape.
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        (sum, count, buckets)
    }
}

/// Counters of one partition replica (one Raft group on this node), updated where the events
/// happen. Shared by the group and every `LogStream` handle on it.
#[derive(Debug, Default)]
pub struct PartitionMetrics {
    /// Produce requests (acks any) that reached this replica for this partition.
    pub produce_requests: AtomicU64,
    /// Record batch bytes produced to this partition.
    pub bytes_in: AtomicU64,
    /// Fetch responses that included this partition.
    pub fetch_requests: AtomicU64,
    /// Record bytes sent to consumers from this partition.
    pub bytes_out: AtomicU64,
    /// Times this replica saw the partition's leader change (including to none).
    pub leader_changes: AtomicU64,
    /// Proposals raft-rs refused (no leader, a transfer in progress): answered NOT_LEADER.
    pub proposals_dropped: AtomicU64,
    /// Raft commit index as of this replica's last Ready.
    pub commit_index: AtomicU64,
}

impl PartitionMetrics {
    /// Counts a produce request carrying `bytes` of record batches.
    pub fn record_produce(&self, bytes: usize) {
        self.produce_requests.fetch_add(1, Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts this partition's part of a fetch response: `bytes` of records.
    pub fn record_fetch(&self, bytes: u64) {
        self.fetch_requests.fetch_add(1, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes, Ordering::Relaxed);
    }

    fn get(v: &AtomicU64) -> u64 {
        v.load(Ordering::Relaxed)
    }
}

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

    fn index(self) -> usize {
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
    apis: Vec<ApiKey>,
    /// Index into `requests` by API key (`u8::MAX`: not tracked).
    api_slot: [u8; MAX_API_KEY + 1],
    /// Per API, one histogram per [`Stage`].
    requests: Vec<[Histogram; 6]>,
    /// Per API, time requests were throttled (fed by flow control).
    throttle: Vec<Histogram>,
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

    fn authentication_failures(&self) -> u64 {
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

    fn connection_limits(&self) -> (u64, u64) {
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

/// One partition replica's state at scrape time.
#[derive(Debug)]
pub struct PartitionSample {
    /// Topic (or stream) name; `__cluster_metadata` for the metadata group.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// Leader node id (0: none known).
    pub leader: u64,
    /// Whether this node leads it.
    pub is_leader: bool,
    /// Raft term.
    pub term: u64,
    /// Raft applied index.
    pub applied_index: u64,
    /// First offset readable.
    pub log_start_offset: u64,
    /// Offset after the last record stored here (committed or not).
    pub log_end_offset: u64,
    /// Next offset after the last committed record.
    pub high_watermark: u64,
    /// Segment files on disk.
    pub segments: usize,
    /// Bytes of those segment files.
    pub segment_bytes: u64,
    /// Replicas (voters) of the partition.
    pub replicas: usize,
    /// In-sync voters (known on the leader only; 0 elsewhere).
    pub in_sync: usize,
    /// The counters.
    pub counters: Arc<PartitionMetrics>,
}

impl PartitionSample {
    /// Led here with fewer in-sync replicas than replicas.
    pub fn under_replicated(&self) -> bool {
        self.is_leader && self.in_sync < self.replicas
    }
}

/// A consumer group's lag on one partition led by this node.
#[derive(Debug)]
pub struct GroupLag {
    /// Consumer group id.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// High watermark minus the committed offset (0 when the commit is ahead).
    pub lag: u64,
}

/// Everything a scrape reports, gathered by the node.
#[derive(Debug)]
pub struct Scrape {
    /// This node's id.
    pub node_id: u64,
    /// Every partition replica hosted here (and the metadata group).
    pub partitions: Vec<PartitionSample>,
    /// Consumer group lag on the partitions led here.
    pub group_lag: Vec<GroupLag>,
    /// Node-wide metrics.
    pub node: Arc<NodeMetrics>,
    /// Storage faults and the scrubber (see [`crate::storage_faults`]).
    pub storage: StorageSample,
}

/// Storage-fault counters of a node, read at a scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct StorageSample {
    /// Sealed-segment bytes the scrubber verified since start.
    pub scrub_bytes_verified: u64,
    /// Damaged entries found since start (at open, by reads or by the scrubber).
    pub faults_found: u64,
    /// Repairs that made a damaged replica whole again.
    pub repairs_completed: u64,
    /// Replicas on this node that are damaged now.
    pub damaged_replicas: u64,
}

/// The scrape's content type (OpenMetrics text, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Encodes `scrape` in the OpenMetrics text format.
pub fn encode(scrape: Scrape) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut out = String::new();
    // Writing to a String cannot fail, and every name and label here is well formed.
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .unwrap_or_else(|e| panic!("encoding metrics into a string failed: {e}"));
    out
}

type Labels = Vec<(&'static str, String)>;

fn partition_labels(p: &PartitionSample) -> Labels {
    vec![
        ("topic", p.topic.clone()),
        ("partition", p.partition.to_string()),
    ]
}

/// Writes one metric family of gauges or counters: `name`, `help`, and one value per label set.
fn family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    values: impl IntoIterator<Item = (Labels, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    let write = |m: &mut MetricEncoder, v: u64| match kind {
        MetricType::Counter => m.encode_counter::<NoLabelSet, _, u64>(&v, None),
        _ => m.encode_gauge(&(i64::try_from(v).unwrap_or(i64::MAX))),
    };
    for (labels, v) in values {
        // A metric without labels is written bare (`name 1`, not `name{} 1`).
        if labels.is_empty() {
            write(&mut metric, v)?;
        } else {
            write(&mut metric.encode_family(&labels)?, v)?;
        }
    }
    Ok(())
}

fn histograms<'h>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (Labels, &'h Histogram)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in values {
        let (sum, count, buckets) = h.snapshot();
        if labels.is_empty() {
            metric.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        } else {
            metric
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use MetricType::{Counter, Gauge};
        let ps = &self.partitions;
        let per =
            |f: fn(&PartitionSample) -> u64| ps.iter().map(move |p| (partition_labels(p), f(p)));
        let c = |f: fn(&PartitionMetrics) -> u64| {
            ps.iter()
                .map(move |p| (partition_labels(p), f(&p.counters)))
        };
        family(
            &mut e,
            "vdl_partition_produce_requests",
            "Produce requests for the partition received by this replica.",
            Counter,
            c(|m| PartitionMetrics::get(&m.produce_requests)),
        )?;
        family(
            &mut e,
            "vdl_partition_in_bytes",
            "Record batch bytes produced to the partition on this replica.",
            Counter,
            c(|m| PartitionMetrics::get(&m.bytes_in)),
        )?;
        family(
            &mut e,
            "vdl_partition_fetch_requests",
            "Fetch responses including the partition, from this replica.",
            Counter,
            c(|m| PartitionMetrics::get(&m.fetch_requests)),
        )?;
        family(
            &mut e,
            "vdl_partition_out_bytes",
            "Record bytes sent to consumers from the partition on this replica.",
            Counter,
            c(|m| PartitionMetrics::get(&m.bytes_out)),
        )?;
        family(
            &mut e,
            "vdl_partition_leader_changes",
            "Leader changes this replica saw.",
            Counter,
            c(|m| PartitionMetrics::get(&m.leader_changes)),
        )?;
        family(
            &mut e,
            "vdl_partition_proposals_dropped",
            "Proposals Raft refused on this replica (no leader, transfer in progress).",
            Counter,
            c(|m| PartitionMetrics::get(&m.proposals_dropped)),
        )?;
        family(
            &mut e,
            "vdl_partition_raft_commit_index",
            "Raft commit index on this replica.",
            Gauge,
            c(|m| PartitionMetrics::get(&m.commit_index)),
        )?;
        family(
            &mut e,
            "vdl_partition_raft_term",
            "Raft term on this replica.",
            Gauge,
            per(|p| p.term),
        )?;
        family(
            &mut e,
            "vdl_partition_raft_applied_index",
            "Raft applied index on this replica.",
            Gauge,
            per(|p| p.applied_index),
        )?;
        family(
            &mut e,
            "vdl_partition_leader",
            "Leader node id as this replica knows it (0: none).",
            Gauge,
            per(|p| p.leader),
        )?;
        family(
            &mut e,
            "vdl_partition_is_leader",
            "1 when this node leads the partition.",
            Gauge,
            per(|p| u64::from(p.is_leader)),
        )?;
        family(
            &mut e,
            "vdl_partition_log_start_offset",
            "First readable offset.",
            Gauge,
            per(|p| p.log_start_offset),
        )?;
        family(
            &mut e,
            "vdl_partition_log_end_offset",
            "Offset after the last record stored on this replica.",
            Gauge,
            per(|p| p.log_end_offset),
        )?;
        family(
            &mut e,
            "vdl_partition_high_watermark",
            "Offset after the last committed record.",
            Gauge,
            per(|p| p.high_watermark),
        )?;
        family(
            &mut e,
            "vdl_partition_segments",
            "Segment files of the partition on this replica.",
            Gauge,
            per(|p| p.segments as u64),
        )?;
        family(
            &mut e,
            "vdl_partition_segment_bytes",
            "Bytes of the partition's segment files on this replica.",
            Gauge,
            per(|p| p.segment_bytes),
        )?;
        family(
            &mut e,
            "vdl_partition_replicas",
            "Voters of the partition's Raft group.",
            Gauge,
            per(|p| p.replicas as u64),
        )?;
        family(
            &mut e,
            "vdl_partition_in_sync_replicas",
            "In-sync voters (reported by the leader only).",
            Gauge,
            per(|p| p.in_sync as u64),
        )?;
        family(
            &mut e,
            "vdl_partition_under_replicated",
            "1 when led here with fewer in-sync replicas than replicas.",
            Gauge,
            per(|p| u64::from(p.under_replicated())),
        )?;
        let node = |v: u64| std::iter::once((Labels::new(), v));
        family(
            &mut e,
            "vdl_leader_partitions",
            "Partitions this node leads.",
            Gauge,
            node(ps.iter().filter(|p| p.is_leader).count() as u64),
        )?;
        family(
            &mut e,
            "vdl_under_replicated_partitions",
            "Partitions led here with fewer in-sync replicas than replicas.",
            Gauge,
            node(ps.iter().filter(|p| p.under_replicated()).count() as u64),
        )?;
        family(
            &mut e,
            "vdl_offline_partitions",
            "Partitions hosted here that have no known leader.",
            Gauge,
            node(ps.iter().filter(|p| p.leader == 0).count() as u64),
        )?;
        family(
            &mut e,
            "vdl_consumer_group_lag",
            "Records between a consumer group's committed offset and the high watermark (reported by the partition's leader).",
            Gauge,
            self.group_lag.iter().map(|l| {
                (
                    vec![
                        ("group", l.group.clone()),
                        ("topic", l.topic.clone()),
                        ("partition", l.partition.to_string()),
                    ],
                    l.lag,
                )
            }),
        )?;
        let n = &self.node;
        family(
            &mut e,
            "vdl_active_connections",
            "Kafka client connections open now.",
            Gauge,
            node(u64::try_from(n.active_connections.load(Ordering::Relaxed)).unwrap_or(0)),
        )?;
        family(
            &mut e,
            "vdl_connections_accepted",
            "Kafka client connections accepted since start.",
            Counter,
            node(n.connections_accepted.load(Ordering::Relaxed)),
        )?;
        family(
            &mut e,
            "vdl_authentication_failures",
            "Failed client authentications since start.",
            Counter,
            node(n.authentication_failures()),
        )?;
        let (refused, auth_timeouts) = n.connection_limits();
        family(
            &mut e,
            "vdl_connections_refused",
            "Kafka connections closed at accept by the per-address limits \
             (max_connections_per_ip, max_connection_creation_rate_per_ip) since start.",
            Counter,
            node(refused),
        )?;
        family(
            &mut e,
            "vdl_authentication_timeouts",
            "Kafka connections closed for not authenticating within \
             kafka.authentication_timeout_ms since start.",
            Counter,
            node(auth_timeouts),
        )?;
        family(
            &mut e,
            "vdl_scrub_verified_bytes",
            "Sealed-segment bytes the background scrubber verified since start.",
            Counter,
            node(self.storage.scrub_bytes_verified),
        )?;
        family(
            &mut e,
            "vdl_storage_faults_found",
            "Damaged log entries found since start (at open, by reads, by the scrubber).",
            Counter,
            node(self.storage.faults_found),
        )?;
        family(
            &mut e,
            "vdl_storage_repairs_completed",
            "Damaged replicas made whole again from a healthy replica since start.",
            Counter,
            node(self.storage.repairs_completed),
        )?;
        family(
            &mut e,
            "vdl_damaged_replicas",
            "Replicas on this node whose storage is damaged and not repaired yet.",
            Gauge,
            node(self.storage.damaged_replicas),
        )?;
        family(
            &mut e,
            "vdl_node_id",
            "This node's id.",
            Gauge,
            node(self.node_id),
        )?;
        histograms(
            &mut e,
            "vdl_fsync_latency_seconds",
            "Time of each fsync of a Raft log append.",
            std::iter::once((Labels::new(), &n.fsync)),
        )?;
        histograms(
            &mut e,
            "vdl_request_latency_seconds",
            "Kafka request latency by API and stage (queue, local, remote, response_queue, response_send, total).",
            n.apis.iter().zip(&n.requests).flat_map(|(api, stages)| {
                Stage::ALL.iter().filter_map(move |s| {
                    let h = &stages[s.index()];
                    // Stages an API never goes through are left out (remote: Produce only).
                    (*s != Stage::Remote || *api == ApiKey::Produce).then(|| {
                        (
                            vec![("api", api.name().to_owned()), ("stage", s.label().to_owned())],
                            h,
                        )
                    })
                })
            }),
        )?;
        histograms(
            &mut e,
            "vdl_throttle_time_seconds",
            "Time requests were throttled by flow control, by API.",
            n.apis
                .iter()
                .zip(&n.throttle)
                .map(|(api, h)| (vec![("api", api.name().to_owned())], h)),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_count_and_sum() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(10));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 3);
        assert!((sum - 60.00301).abs() < 1e-9);
        assert_eq!(buckets[0], (0.00005, 1));
        assert_eq!(
            buckets.iter().find(|(b, _)| *b == 0.005).map(|x| x.1),
            Some(1)
        );
        assert_eq!(buckets.last(), Some(&(f64::MAX, 1)));
    }

    #[test]
    fn scrape_encodes_names_with_units_last() {
        let node = Arc::new(NodeMetrics::new(&[ApiKey::Produce, ApiKey::Fetch]));
        node.observe_request(
            ApiKey::Produce.as_i16(),
            Stage::Total,
            Duration::from_millis(2),
        );
        node.observe_request(999, Stage::Total, Duration::from_millis(2));
        let counters = Arc::new(PartitionMetrics::default());
        counters.record_produce(100);
        let text = encode(Scrape {
            node_id: 1,
            partitions: vec![PartitionSample {
                topic: "t".into(),
                partition: 0,
                leader: 1,
                is_leader: true,
                term: 2,
                applied_index: 5,
                log_start_offset: 0,
                log_end_offset: 10,
                high_watermark: 10,
                segments: 1,
                segment_bytes: 4096,
                replicas: 3,
                in_sync: 2,
                counters,
            }],
            group_lag: vec![],
            node,
            storage: StorageSample {
                scrub_bytes_verified: 4096,
                damaged_replicas: 1,
                ..StorageSample::default()
            },
        });
        assert!(
            text.contains("vdl_scrub_verified_bytes_total 4096"),
            "{text}"
        );
        assert!(text.contains("vdl_damaged_replicas 1"), "{text}");
        assert!(
            text.contains("vdl_partition_in_bytes_total{topic=\"t\",partition=\"0\"} 100"),
            "{text}"
        );
        assert!(text.contains("vdl_under_replicated_partitions 1"), "{text}");
        assert!(
            text.contains("vdl_request_latency_seconds_count{api=\"Produce\",stage=\"total\"} 1"),
            "{text}"
        );
        assert!(!text.contains("api=\"Fetch\",stage=\"remote\""), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
