//! Encoding a [`Scrape`] in the OpenMetrics text format with `prometheus-client`.

use std::sync::atomic::Ordering;

use kafka_proto::api::ApiKey;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::{Histogram, PartitionMetrics, PartitionSample, Scrape, Stage};

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

/// Writes one metric family of gauges with fractional values (ratios).
fn ratio_family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (Labels, f64)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in values {
        metric.encode_family(&labels)?.encode_gauge(&v)?;
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
        let cleaned = |f: fn(&logstore::CleanerStats) -> Option<u64>| {
            ps.iter().filter_map(move |p| {
                let v = f(p.cleaner.as_ref()?)?;
                Some((partition_labels(p), v))
            })
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
            "vdl_partition_cleanable_bytes",
            "Compacted topics: sealed-segment bytes the log cleaner could clean now.",
            Gauge,
            cleaned(|s| Some(s.cleanable_bytes)),
        )?;
        family(
            &mut e,
            "vdl_partition_cleaned_bytes",
            "Compacted topics: sealed-segment bytes below the first dirty offset (cleaned); \
             the dirty ratio is cleanable / (cleaned + cleanable).",
            Gauge,
            cleaned(|s| Some(s.clean_bytes)),
        )?;
        ratio_family(
            &mut e,
            "vdl_partition_dirty_ratio",
            "Compacted topics: cleanable / (cleaned + cleanable) bytes, the ratio the log \
             cleaner compares with min.cleanable.dirty.ratio (0 when both are 0).",
            ps.iter().filter_map(|p| {
                let s = p.cleaner.as_ref()?;
                Some((partition_labels(p), s.dirty_ratio()))
            }),
        )?;
        family(
            &mut e,
            "vdl_partition_last_clean_timestamp_seconds",
            "Compacted topics: when the log cleaner last cleaned the partition (Unix time).",
            Gauge,
            cleaned(|s| s.last_clean_ms.and_then(|ms| u64::try_from(ms / 1000).ok())),
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
        for (name, help, value) in [
            (
                "vdl_cleaner_passes",
                "Log cleaner passes (compacted topics) that installed a result since start.",
                self.storage.cleaner_passes,
            ),
            (
                "vdl_cleaner_read_bytes",
                "Segment bytes the log cleaner read since start.",
                self.storage.cleaner_bytes_read,
            ),
            (
                "vdl_cleaner_written_bytes",
                "Bytes of rewritten segments the log cleaner wrote since start.",
                self.storage.cleaner_bytes_written,
            ),
            (
                "vdl_cleaner_removed_records",
                "Records the log cleaner removed since start.",
                self.storage.cleaner_records_removed,
            ),
            (
                "vdl_cleaner_failures",
                "Log cleaner passes that failed (logged, retried) since start.",
                self.storage.cleaner_failures,
            ),
        ] {
            family(&mut e, name, help, Counter, node(value))?;
        }
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
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::metrics::{NodeMetrics, StorageSample};

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
                cleaner: Some(logstore::CleanerStats {
                    clean_bytes: 300,
                    cleanable_bytes: 100,
                    first_dirty_offset: 9,
                    last_clean_ms: Some(5_000),
                    oldest_dirty_ms: Some(4_000),
                }),
            }],
            group_lag: vec![],
            node,
            storage: StorageSample {
                scrub_bytes_verified: 4096,
                damaged_replicas: 1,
                cleaner_records_removed: 7,
                ..StorageSample::default()
            },
        });
        assert!(
            text.contains("vdl_scrub_verified_bytes_total 4096"),
            "{text}"
        );
        assert!(text.contains("vdl_damaged_replicas 1"), "{text}");
        assert!(
            text.contains("vdl_cleaner_removed_records_total 7"),
            "{text}"
        );
        assert!(
            text.contains("vdl_partition_cleanable_bytes{topic=\"t\",partition=\"0\"} 100"),
            "{text}"
        );
        assert!(
            text.contains(
                "vdl_partition_last_clean_timestamp_seconds{topic=\"t\",partition=\"0\"} 5"
            ),
            "{text}"
        );
        assert!(
            text.contains("vdl_partition_dirty_ratio{topic=\"t\",partition=\"0\"} 0.25"),
            "{text}"
        );
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
