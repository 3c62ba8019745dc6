//! Choosing which sealed segments retention deletes.

use crate::config::RetentionPolicy;

/// What [`crate::LogStore::apply_retention`] or [`crate::LogStore::delete_prefix`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// Number of segment files deleted.
    pub segments_deleted: usize,
    /// Bytes of segment files deleted.
    pub bytes_deleted: u64,
    /// First Raft index after the deletion.
    pub first_index: u64,
    /// First Kafka offset after the deletion.
    pub log_start_offset: u64,
}

/// What retention needs to know about a segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentInfo {
    /// File length in bytes.
    pub len: u64,
    /// Last Raft index held (base - 1 when empty).
    pub last_index: u64,
    /// Time of the newest data, ms since the Unix epoch.
    pub newest_ms: u64,
    /// Every record of the segment lies below the records floor (DeleteRecords).
    pub below_records_floor: bool,
}

/// How many segments to delete from the front. Only sealed segments (never the last one) that
/// lie entirely below `floor_index` are candidates; deletion stops at the first segment that
/// no rule asks to delete or that is not a candidate, so only a prefix is ever deleted.
/// `all` deletes every candidate regardless of the policy.
pub(crate) fn segments_to_delete(
    segs: &[SegmentInfo],
    policy: &RetentionPolicy,
    floor_index: u64,
    now_ms: u64,
    all: bool,
) -> usize {
    let n = segs.len();
    let total: u64 = segs.iter().map(|s| s.len).sum();
    let mut deleted_bytes = 0u64;
    let mut k = 0;
    while k + 1 < n && segs[k].last_index < floor_index {
        let by_count = policy.max_segments.is_some_and(|m| n - k > m);
        let by_bytes = policy.max_bytes.is_some_and(|m| total - deleted_bytes > m);
        let by_age = policy
            .max_age
            .is_some_and(|a| now_ms.saturating_sub(segs[k].newest_ms) > a.as_millis() as u64);
        let by_floor = segs[k].below_records_floor;
        if !(all || by_count || by_bytes || by_age || by_floor) {
            break;
        }
        deleted_bytes += segs[k].len;
        k += 1;
    }
    k
}

/// Of the segments retention is about to delete (`doomed`, oldest first), the first one to keep
/// for a replica that needs the entries from `needed_index` on: the newest doomed segments that
/// hold an index at or above `needed_index`, as many as fit in `max_held_bytes`. None: nothing
/// is held (the replica needs none of them, or the newest needed one alone is over the limit).
pub(crate) fn first_held_segment(
    doomed: &[SegmentInfo],
    needed_index: u64,
    max_held_bytes: u64,
) -> Option<usize> {
    let mut held_bytes = 0u64;
    let mut first = None;
    for (j, seg) in doomed.iter().enumerate().rev() {
        if seg.last_index < needed_index || held_bytes + seg.len > max_held_bytes {
            break;
        }
        held_bytes += seg.len;
        first = Some(j);
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn segs() -> Vec<SegmentInfo> {
        (0..5)
            .map(|i| SegmentInfo {
                len: 100,
                last_index: (i + 1) * 10,
                newest_ms: i * 1000,
                below_records_floor: false,
            })
            .collect()
    }

    #[test]
    fn rules() {
        let s = segs();
        let none = RetentionPolicy::default();
        assert_eq!(segments_to_delete(&s, &none, u64::MAX, 10_000, false), 0);
        assert_eq!(segments_to_delete(&s, &none, u64::MAX, 10_000, true), 4);
        let count = RetentionPolicy {
            max_segments: Some(2),
            ..none
        };
        assert_eq!(segments_to_delete(&s, &count, u64::MAX, 0, false), 3);
        assert_eq!(segments_to_delete(&s, &count, 25, 0, false), 2);
        let bytes = RetentionPolicy {
            max_bytes: Some(250),
            ..none
        };
        assert_eq!(segments_to_delete(&s, &bytes, u64::MAX, 0, false), 3);
        let age = RetentionPolicy {
            max_age: Some(Duration::from_secs(2)),
            ..none
        };
        assert_eq!(segments_to_delete(&s, &age, u64::MAX, 4500, false), 3);
        let zero = RetentionPolicy {
            max_segments: Some(0),
            ..none
        };
        assert_eq!(segments_to_delete(&s, &zero, u64::MAX, 0, false), 4);
        // Segments wholly below the records floor go whatever the policy says, but only from
        // the front and only below the index floor.
        let mut floored = segs();
        floored[0].below_records_floor = true;
        floored[1].below_records_floor = true;
        assert_eq!(segments_to_delete(&floored, &none, u64::MAX, 0, false), 2);
        assert_eq!(segments_to_delete(&floored, &none, 15, 0, false), 1);
    }

    #[test]
    fn a_lagging_replica_holds_back_at_most_its_byte_limit() {
        // Segments hold indexes 1-10, 11-20, ... 41-50, 100 bytes each; the first four doomed.
        let s = segs();
        let doomed = &s[..4];
        // Needs nothing of them: nothing held.
        assert_eq!(first_held_segment(doomed, 41, 1000), None);
        // Needs from index 15: segments 1..=3 hold it, all fit in 1000 bytes.
        assert_eq!(first_held_segment(doomed, 15, 1000), Some(1));
        // Only 250 bytes may be held: the newest two.
        assert_eq!(first_held_segment(doomed, 15, 250), Some(2));
        // Not even the newest fits: nothing held, the replica gets a snapshot.
        assert_eq!(first_held_segment(doomed, 15, 99), None);
        assert_eq!(first_held_segment(doomed, 1, 0), None);
    }
}
