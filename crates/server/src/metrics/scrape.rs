//! What a scrape reports: the node's state read at scrape time ([`Scrape`]).

use std::sync::Arc;

use super::{NodeMetrics, PartitionMetrics};

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
    /// The log cleaner's view of the replica, for a topic whose `cleanup.policy` compacts.
    pub cleaner: Option<logstore::CleanerStats>,
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
    /// Log cleaner passes that installed a result since start.
    pub cleaner_passes: u64,
    /// Segment bytes the log cleaner read since start.
    pub cleaner_bytes_read: u64,
    /// Bytes of rewritten segments the log cleaner wrote since start.
    pub cleaner_bytes_written: u64,
    /// Records the log cleaner removed since start.
    pub cleaner_records_removed: u64,
    /// Log cleaner passes that failed since start.
    pub cleaner_failures: u64,
}
