//! What a node knows about damage to its storage: the replicas being repaired, and the
//! scrubber's and repairs' counters (for the admin API and metrics).
//!
//! A replica is *damaged* from the moment its store found a bad entry (at open, on a read,
//! or by the scrubber) until its group has fetched the lost range again from a healthy
//! replica and the repair marker is removed (see `replication/group/repair.rs`, "Storage
//! faults" in the README). Every other stream on the node keeps working meanwhile.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One damaged replica on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedReplica {
    /// The stream (topic-partition label).
    pub stream: String,
    /// The first Raft index lost (the log was cut before it).
    pub first_bad_index: u64,
    /// The last index the log had before the cut: the repair ends once the log is at least
    /// this up to date again.
    pub lost_last_index: u64,
    /// Where the damage was found (a file and byte, or "hardstate").
    pub detail: String,
}

/// A node's storage-fault state, shared by its groups, its scrubber and its admin API.
#[derive(Debug, Default)]
pub struct StorageFaults {
    /// Bytes of sealed segments the scrubber verified (CRC of every frame).
    pub scrub_bytes_verified: AtomicU64,
    /// Damaged entries found by the scrubber.
    pub scrub_faults_found: AtomicU64,
    /// Damage found anywhere (open, reads, scrubber, hard state).
    pub faults_found: AtomicU64,
    /// Repairs completed (the log whole again).
    pub repairs_completed: AtomicU64,
    damaged: Mutex<BTreeMap<String, DamagedReplica>>,
}

impl StorageFaults {
    /// Marks a replica damaged (replacing an earlier entry for the same stream).
    pub fn mark_damaged(&self, replica: DamagedReplica) {
        self.faults_found.fetch_add(1, Ordering::Relaxed);
        self.damaged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(replica.stream.clone(), replica);
    }

    /// Marks a replica whole again.
    pub fn mark_repaired(&self, stream: &str) {
        let removed = self
            .damaged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(stream);
        if removed.is_some() {
            self.repairs_completed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The replicas damaged now, by stream name.
    pub fn damaged(&self) -> Vec<DamagedReplica> {
        self.damaged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }
}
