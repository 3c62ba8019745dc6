//! The node's metrics: its counters and a Prometheus scrape of the node and its partitions.

use std::collections::HashMap;
use std::sync::Arc;

use crate::metadata::{METADATA_GROUP_ID, METADATA_STREAM};
use crate::replication::stream::LogStream;

use super::Node;

impl Node {
    /// Node-wide metrics: request latencies by API and stage, fsync latency, connections,
    /// throttle time, the authentication failure source.
    pub fn metrics(&self) -> &Arc<crate::metrics::NodeMetrics> {
        &self.metrics
    }

    /// Everything `GET /metrics` reports, read now: every partition replica hosted here (and
    /// the metadata group) with its Raft and log state, and consumer group lag on the
    /// partitions this node leads (so each partition's lag is reported once in the cluster).
    pub fn scrape(&self) -> crate::metrics::Scrape {
        let me = self.config.id;
        let mut streams: Vec<LogStream> = self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .handles();
        streams.sort_by(|a, b| (&*a.name, a.partition).cmp(&(&*b.name, b.partition)));
        let mut partitions = Vec::with_capacity(streams.len() + 1);
        let meta = self.metadata_group();
        for s in meta.iter().chain(&streams) {
            let v = s.visible();
            let (segments, segment_bytes) = s.storage_size();
            let replicas = if s.group == METADATA_GROUP_ID {
                self.config.member_ids().len()
            } else {
                self.replicas_of(s).len()
            };
            partitions.push(crate::metrics::PartitionSample {
                topic: s.name.to_string(),
                partition: s.partition,
                leader: v.leader,
                is_leader: v.leader == me,
                term: v.term,
                applied_index: v.applied_index,
                log_start_offset: v.log_start_offset,
                log_end_offset: s.log_end_offset(),
                high_watermark: v.high_watermark,
                segments,
                segment_bytes,
                replicas,
                in_sync: v.in_sync.iter().filter(|id| **id != 0).count(),
                counters: s.metrics.clone(),
                cleaner: self.cleaner_sample(s, v.applied_index),
            });
        }
        let led: HashMap<(&str, i32), u64> = partitions
            .iter()
            .filter(|p| p.is_leader && p.topic != METADATA_STREAM)
            .filter_map(|p| {
                Some((
                    (p.topic.as_str(), i32::try_from(p.partition).ok()?),
                    p.high_watermark,
                ))
            })
            .collect();
        let mut group_lag = Vec::new();
        if !led.is_empty() {
            let metadata = self.metadata();
            for (group, offsets) in &metadata.offsets {
                for ((topic, partition), committed) in offsets {
                    if let Some(hw) = led.get(&(topic.as_str(), *partition)) {
                        group_lag.push(crate::metrics::GroupLag {
                            group: group.clone(),
                            topic: topic.clone(),
                            partition: u32::try_from(*partition).unwrap_or(0),
                            lag: hw.saturating_sub(u64::try_from(committed.offset).unwrap_or(0)),
                        });
                    }
                }
            }
        }
        group_lag.sort_by(|a, b| {
            (&a.group, &a.topic, a.partition).cmp(&(&b.group, &b.topic, b.partition))
        });
        let faults = &self.storage_faults;
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        crate::metrics::Scrape {
            node_id: me,
            partitions,
            group_lag,
            node: self.metrics.clone(),
            storage: crate::metrics::StorageSample {
                scrub_bytes_verified: load(&faults.scrub_bytes_verified),
                faults_found: load(&faults.faults_found),
                repairs_completed: load(&faults.repairs_completed),
                damaged_replicas: faults.damaged().len() as u64,
                cleaner_passes: load(&self.cleaner_counters.passes),
                cleaner_bytes_read: load(&self.cleaner_counters.bytes_read),
                cleaner_bytes_written: load(&self.cleaner_counters.bytes_written),
                cleaner_records_removed: load(&self.cleaner_counters.records_removed),
                cleaner_failures: load(&self.cleaner_counters.failures),
            },
        }
    }
}

impl Node {
    /// The log cleaner's view of `s` as the scrape reports it (below its applied index, now):
    /// `None` unless the topic's `cleanup.policy` compacts. For the admin API's segment list.
    pub(crate) fn cleaner_stats(&self, s: &LogStream) -> Option<logstore::CleanerStats> {
        self.cleaner_sample(s, s.visible().applied_index)
    }

    /// The log cleaner's view of `s` (applied through `applied_index`) for a topic whose
    /// `cleanup.policy` compacts: what its next pass could clean (reads the store's checkpoint).
    fn cleaner_sample(&self, s: &LogStream, applied_index: u64) -> Option<logstore::CleanerStats> {
        if s.incarnation == 0 {
            return None;
        }
        let settings = self.topic_settings(&s.name);
        if !settings.compact {
            return None;
        }
        let plan = logstore::CompactionPlan {
            clean_limit: applied_index + 1,
            now_ms: crate::metadata::wall_clock_ms(),
            min_compaction_lag_ms: settings.compaction.min_lag_ms,
            delete_retention_ms: settings.compaction.delete_retention_ms,
            // The sizes do not depend on it.
            tombstone_limit: 0,
            key_map_bytes: self.config.storage.cleaner_dedupe_buffer_bytes,
        };
        Some(crate::replication::raft_storage::read(s.store()).cleaner_stats(&plan))
    }
}
