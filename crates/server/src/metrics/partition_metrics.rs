//! [`PartitionMetrics`]: the counters of one partition replica.

use std::sync::atomic::{AtomicU64, Ordering};

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

    pub(super) fn get(v: &AtomicU64) -> u64 {
        v.load(Ordering::Relaxed)
    }
}
