//! The segment endpoints: `GET /partitions/{topic}/{partition}/segments` (answers
//! [`SegmentList`], the leader's segment files) and `POST
//! /partitions/{topic}/{partition}/segments/delete?before=OFFSET&timeout_ms=T` (answers
//! [`SegmentsDeleted`]).

use serde::{Deserialize, Serialize};

/// One segment file of a replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// Raft index of its first entry.
    pub base_index: u64,
    /// Raft index of its last entry.
    pub last_index: u64,
    /// First offset it holds.
    pub first_offset: u64,
    /// Offset after its last record.
    pub next_offset: u64,
    /// File bytes.
    pub bytes: u64,
    /// The active (written) segment; every other one is sealed.
    pub active: bool,
}

/// The log cleaner's figures for one replica of a compacted partition (those of the
/// `vdl_partition_cleanable_bytes`, `vdl_partition_cleaned_bytes`,
/// `vdl_partition_dirty_ratio` and `vdl_partition_last_clean_timestamp_seconds` metrics). Fields
/// in alphabetical order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CleanerFigures {
    /// Sealed-segment bytes a cleaner pass could clean now (from the segment holding the first
    /// dirty offset, committed and past `min.compaction.lag.ms`).
    pub cleanable_bytes: u64,
    /// Sealed-segment bytes wholly below the first dirty offset (compacted already).
    pub cleaned_bytes: u64,
    /// Kafka's dirty ratio, `cleanable / (cleaned + cleanable)`; 0 when both are 0. The
    /// cleaner cleans the partition once it reaches `min.cleanable.dirty.ratio`.
    pub dirty_ratio: f64,
    /// Offsets below it were compacted by an earlier pass.
    pub first_dirty_offset: u64,
    /// When the last pass finished, ms since the Unix epoch; absent before the first.
    pub last_clean_ms: Option<i64>,
}

/// The answer of `GET .../segments`. Fields in alphabetical order (the wire order since the
/// first release).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentList {
    /// The cleaner's figures for this replica when the topic's `cleanup.policy` compacts;
    /// absent otherwise (and from servers before log compaction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleaner: Option<CleanerFigures>,
    /// The node whose replica this is (the partition's leader, unless `local=true` was asked).
    pub node: u64,
    /// Partition index.
    pub partition: u32,
    /// Its segment files, oldest first; the last is the active one.
    pub segments: Vec<SegmentEntry>,
    /// Topic name.
    pub topic: String,
}

/// The answer of `POST .../segments/delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentsDeleted {
    /// The sealed segments removed (wholly below `before` and below every voter's matched
    /// index), oldest first; empty when none qualified.
    pub deleted: Vec<SegmentEntry>,
    /// The partition's log start offset after the deletion.
    pub log_start_offset: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(active: bool) -> SegmentEntry {
        SegmentEntry {
            base_index: 1,
            last_index: 9,
            first_offset: 0,
            next_offset: 40,
            bytes: 4096,
            active,
        }
    }

    #[test]
    fn a_list_round_trips_with_its_wire_bytes() {
        let l = SegmentList {
            cleaner: None,
            node: 2,
            partition: 0,
            segments: vec![entry(true)],
            topic: "t".into(),
        };
        let text = serde_json::to_string(&l).unwrap();
        assert_eq!(
            text,
            r#"{"node":2,"partition":0,"segments":[{"base_index":1,"last_index":9,"first_offset":0,"next_offset":40,"bytes":4096,"active":true}],"topic":"t"}"#
        );
        assert_eq!(serde_json::from_str::<SegmentList>(&text).unwrap(), l);
    }

    #[test]
    fn a_compacted_partition_list_carries_the_cleaner_figures() {
        let l = SegmentList {
            cleaner: Some(CleanerFigures {
                cleanable_bytes: 300,
                cleaned_bytes: 900,
                dirty_ratio: 0.25,
                first_dirty_offset: 120,
                last_clean_ms: Some(1_700_000_000_000),
            }),
            node: 1,
            partition: 3,
            segments: vec![],
            topic: "c".into(),
        };
        let text = serde_json::to_string(&l).unwrap();
        assert_eq!(
            text,
            r#"{"cleaner":{"cleanable_bytes":300,"cleaned_bytes":900,"dirty_ratio":0.25,"first_dirty_offset":120,"last_clean_ms":1700000000000},"node":1,"partition":3,"segments":[],"topic":"c"}"#
        );
        assert_eq!(serde_json::from_str::<SegmentList>(&text).unwrap(), l);
        // A server before compaction sends no `cleaner`.
        let old = r#"{"node":1,"partition":3,"segments":[],"topic":"c"}"#;
        assert_eq!(
            serde_json::from_str::<SegmentList>(old).unwrap().cleaner,
            None
        );
    }

    #[test]
    fn a_deletion_round_trips_with_its_wire_bytes() {
        let d = SegmentsDeleted {
            deleted: vec![entry(false)],
            log_start_offset: 40,
        };
        let text = serde_json::to_string(&d).unwrap();
        assert!(text.starts_with(r#"{"deleted":[{"base_index":1"#), "{text}");
        assert!(
            text.ends_with(r#""active":false}],"log_start_offset":40}"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<SegmentsDeleted>(&text).unwrap(), d);
        let none = SegmentsDeleted {
            deleted: vec![],
            log_start_offset: 0,
        };
        assert_eq!(
            serde_json::to_string(&none).unwrap(),
            r#"{"deleted":[],"log_start_offset":0}"#
        );
    }
}
