//! Retention and compaction: the leader's retention floor (what lagging replicas still
//! need), deleting segments by the retention rules, compacting the log below the state
//! machine's snapshot, and retrying snapshots a follower never received.
//!
//! A child module of `group.rs`, an `impl Group` of its own.

use super::Group;
use crate::replication::raft_storage::{read, write};
use raft::StateRole;
use std::time::Instant;

impl Group {
    /// On the leader, once per tick: a peer whose progress has waited for a snapshot for an
    /// election timeout is reported as a failed snapshot, so raft-rs probes it and sends
    /// another. raft-rs pauses a peer in snapshot state until the peer answers it or the
    /// snapshot's outcome is reported; a snapshot message lost on the way (the peer's group
    /// not open yet when a replaced disk's node comes back, a dropped connection) would
    /// otherwise leave the peer without entries for good.
    pub(super) fn retry_lost_snapshots(&mut self) {
        let raft = &self.p.node.raft;
        if raft.state != StateRole::Leader {
            self.snapshot_waits.clear();
            return;
        }
        let timeout = self.p.tick * u32::try_from(raft.election_timeout()).unwrap_or(u32::MAX);
        let waiting: Vec<u64> = raft
            .prs()
            .iter()
            .filter(|(_, pr)| pr.state == raft::ProgressState::Snapshot)
            .map(|(id, _)| *id)
            .collect();
        self.snapshot_waits.retain(|id, _| waiting.contains(id));
        let now = Instant::now();
        for id in waiting {
            let since = *self.snapshot_waits.entry(id).or_insert(now);
            if now.saturating_duration_since(since) > timeout {
                tracing::info!(stream = %self.p.name, peer = id, "no answer to a snapshot within an election timeout: sending another");
                self.snapshot_waits.remove(&id);
                self.p
                    .node
                    .report_snapshot(id, raft::SnapshotStatus::Failure);
            }
        }
    }

    /// The floor retention may cut below (segments holding an index at or above it stay):
    /// never an unapplied entry; on the leader, not what a replica still needs (below its
    /// matched index), within [`RetentionHold`](super::RetentionHold)'s bounds: a replica silent for longer than
    /// `down_replica_wait` (counted from when this replica became leader at the earliest)
    /// holds nothing back, a live one at most `lagging_replica_max_bytes`. A replica missing
    /// deleted entries gets a snapshot when it next needs them.
    fn retention_floor(&self) -> u64 {
        let applied_floor = self.visible.applied_index + 1;
        let raft = &self.p.node.raft;
        let Some(leading_since) = self
            .leading_since
            .filter(|_| raft.state == StateRole::Leader)
        else {
            return applied_floor;
        };
        let hold = self.p.retention_hold;
        let s = read(&self.p.store);
        let mut floor = applied_floor;
        for (id, progress) in raft.prs().iter() {
            if *id == raft.id {
                continue;
            }
            let last_heard = self
                .heard_from
                .get(id)
                .map_or(leading_since, |at| (*at).max(leading_since));
            if last_heard.elapsed() > hold.down_replica_wait {
                continue;
            }
            floor = floor.min(s.retention_floor_holding(
                applied_floor,
                progress.matched + 1,
                hold.lagging_replica_max_bytes,
            ));
        }
        floor
    }

    /// Rolls the active segment when it is older than the store's roll age (a topic's
    /// `segment.ms`), so a quiet partition's records leave it and become compactable. Here,
    /// on the group thread, because this thread is the store's only writer: a roll between
    /// its `prepare_sync` and `complete_sync` would break the sync.
    pub(super) fn roll_aged_segment(&mut self) {
        let Some(age) = read(&self.p.store).roll_age() else {
            return;
        };
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        match write(&self.p.store).roll_if_older_than(age, now_ms) {
            Ok(true) => {
                tracing::debug!(stream = %self.p.name, "rolled the active segment by age (segment.ms)")
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(stream = %self.p.name, "rolling by age failed: {e}"),
        }
    }

    /// Deletes old segments as the store's retention policy says, above the floor of
    /// [`Group::retention_floor`].
    pub(super) fn apply_retention(&mut self) {
        if !self
            .p
            .retention_allowed
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return;
        }
        if self.p.state_machine.is_some() {
            // A state machine's log goes only below its snapshots.
            self.compact_below_snapshot();
            return;
        }
        let floor = self.retention_floor();
        let mut s = write(&self.p.store);
        match s.apply_retention(floor) {
            Ok(outcome) if outcome.segments_deleted > 0 => {
                tracing::info!(
                    stream = %self.p.name,
                    segments = outcome.segments_deleted,
                    bytes = outcome.bytes_deleted,
                    log_start_offset = outcome.log_start_offset,
                    "retention deleted old segments"
                );
                self.visible.log_start_offset = s.first_readable_offset();
                drop(s);
                self.publish();
            }
            Ok(_) | Err(logstore::LogStoreError::DeletionForbidden) => {}
            Err(e) => tracing::warn!(stream = %self.p.name, "retention failed: {e}"),
        }
    }

    /// A state machine's log (the metadata group's): deletes the sealed segments below its
    /// newest durable snapshot, but on the leader not below what a voter heard from recently
    /// still needs (its matched index). A voter that was silent gets the snapshot instead, as
    /// does one whose entries a later leader compacted.
    pub(super) fn compact_below_snapshot(&mut self) {
        if self.snapshot_index == 0
            || !self
                .p
                .state_machine
                .as_ref()
                .is_some_and(|sm| sm.compaction_allowed())
        {
            return;
        }
        let mut floor = self.snapshot_index + 1;
        let raft = &self.p.node.raft;
        if raft.state == StateRole::Leader {
            let recent =
                self.p.tick * 2 * u32::try_from(raft.election_timeout()).unwrap_or(u32::MAX);
            for (id, progress) in raft.prs().iter() {
                let live = self
                    .heard_from
                    .get(id)
                    .is_some_and(|at| at.elapsed() <= recent);
                if *id != raft.id && live {
                    floor = floor.min(progress.matched + 1);
                }
            }
        }
        let mut s = write(&self.p.store);
        match s.delete_prefix(floor) {
            Ok(outcome) if outcome.segments_deleted > 0 => tracing::info!(
                stream = %self.p.name,
                segments = outcome.segments_deleted,
                bytes = outcome.bytes_deleted,
                first_index = outcome.first_index,
                snapshot_index = self.snapshot_index,
                "compacted the log below the snapshot"
            ),
            Ok(_) | Err(logstore::LogStoreError::DeletionForbidden) => {}
            Err(e) => tracing::warn!(stream = %self.p.name, "compacting the log failed: {e}"),
        }
    }
}
