//! Deleting the front of the log: retention, prefix deletion after a snapshot, how far
//! retention may cut while a replica catches up, and the records floor (DeleteRecords).

use std::path::Path;

use super::LogStore;
use crate::error::{LogStoreError, Result};
use crate::fsutil::{fsync_dir, remove_if_exists};
use crate::retention::{segments_to_delete, RetentionOutcome, SegmentInfo};

impl LogStore {
    /// Deletes the records below `offset` as far as readers are concerned (Kafka's
    /// DeleteRecords): reads below it fail with [`LogStoreError::OffsetOutOfRange`] and
    /// [`LogStore::apply_retention`] removes the segments lying wholly below it. Never lowers
    /// the floor. Not persisted (see the field).
    pub fn raise_records_floor(&mut self, offset: u64) {
        self.records_floor = self.records_floor.max(offset);
    }

    /// Changes the retention policy (a topic's retention configs changed); the next
    /// [`LogStore::apply_retention`] follows it.
    pub fn set_retention(&mut self, policy: crate::RetentionPolicy) {
        self.config.retention = policy;
    }

    /// Applies the configured [`crate::RetentionPolicy`]: deletes whole sealed segments from
    /// the front, never the active one, never one holding an index >= `floor_index`.
    /// Returns [`LogStoreError::DeletionForbidden`] when `deletion_allowed` is false.
    pub fn apply_retention(&mut self, floor_index: u64) -> Result<RetentionOutcome> {
        self.delete_front(floor_index, false)
    }

    /// Deletes every sealed segment that lies entirely below `floor_index` (Raft log
    /// compaction after a snapshot). `first_index()` afterwards is at most `floor_index`.
    /// Returns [`LogStoreError::DeletionForbidden`] when `deletion_allowed` is false.
    pub fn delete_prefix(&mut self, floor_index: u64) -> Result<RetentionOutcome> {
        self.delete_front(floor_index, true)
    }

    /// Where retention may cut while a replica still needs the entries from `needed_index` on,
    /// holding back at most `max_held_bytes` for it: the floor index to pass to
    /// [`LogStore::apply_retention`] instead of `floor_index`. The segments retention would
    /// delete with `floor_index` that hold an index at or above `needed_index` are kept, newest
    /// first, while they add up to at most `max_held_bytes`; older ones go as the policy says
    /// (the replica then catches up from a snapshot). Never above `floor_index`.
    pub fn retention_floor_holding(
        &self,
        floor_index: u64,
        needed_index: u64,
        max_held_bytes: u64,
    ) -> u64 {
        let infos = self.segment_infos();
        let now = crate::clock::retention_now_ms();
        let n = segments_to_delete(&infos, &self.config.retention, floor_index, now, false);
        let keep_from =
            crate::retention::first_held_segment(&infos[..n], needed_index, max_held_bytes);
        match keep_from {
            Some(j) => floor_index.min(self.segments[j].header.base_index),
            None => floor_index,
        }
    }

    /// What retention needs to know about each segment, oldest first.
    fn segment_infos(&self) -> Vec<SegmentInfo> {
        let floor = self.records_floor;
        self.segments
            .iter()
            .enumerate()
            .map(|(i, s)| SegmentInfo {
                below_records_floor: self
                    .segments
                    .get(i + 1)
                    .is_some_and(|next| next.header.base_offset <= floor),
                len: s.len,
                last_index: s.last_index,
                newest_ms: if s.max_timestamp != i64::MIN {
                    s.max_timestamp.max(0) as u64
                } else {
                    file_mtime_ms(&s.path).unwrap_or(s.header.created_ms)
                },
            })
            .collect()
    }

    fn delete_front(&mut self, floor_index: u64, all: bool) -> Result<RetentionOutcome> {
        if !self.config.deletion_allowed {
            return Err(LogStoreError::DeletionForbidden);
        }
        let infos = self.segment_infos();
        // Never ahead of the monotonic clock: a wall clock jumping forward deletes nothing early.
        let now = crate::clock::retention_now_ms();
        let n = segments_to_delete(&infos, &self.config.retention, floor_index, now, all);
        let mut bytes = 0;
        for s in self.segments.drain(..n) {
            assert!(
                s.last_index < floor_index && s.sealed(),
                "retention deletes sealed segments"
            );
            bytes += s.len;
            remove_if_exists(&s.index_path)?;
            remove_if_exists(&s.path)?;
        }
        if n > 0 {
            fsync_dir(&self.dir)?;
            let first = self.first_index();
            self.cache.drop_before(first);
        }
        Ok(RetentionOutcome {
            segments_deleted: n,
            bytes_deleted: bytes,
            first_index: self.first_index(),
            log_start_offset: self.log_start_offset(),
        })
    }
}

fn file_mtime_ms(path: &Path) -> Option<u64> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    m.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as u64)
}
