//! Transactions in a compaction pass (Kafka's `CleanedTransactionMetadata`): which data
//! batches belong to an aborted transaction ([`AbortedIndex`], from the caller's list), and
//! which markers no longer have a batch of their transaction before them ([`MarkerTracker`]).
//!
//! Both are asked about batches in log order (ascending base offset), from the first batch of
//! the log a pass reads on, and hold state across the segments of one pass.
//!
//! Bounded: the index holds the caller's list (its size is the caller's bound: vdl's list of
//! aborts still in the log) and one entry per producer among them; the tracker at most
//! [`MAX_PRODUCERS_MAPPED`] producers, past which it counts every marker as still needed (the
//! safe side: a marker kept longer).

use std::collections::{HashMap, HashSet};

use crate::compaction::{AbortedRange, MAX_PRODUCERS_MAPPED};

/// The aborted transactions of a pass, asked in log order.
#[derive(Debug, Default)]
pub(crate) struct AbortedIndex {
    /// Sorted by first offset.
    by_first: Vec<AbortedRange>,
    /// `by_first[..next]` are in `ongoing`.
    next: usize,
    /// Producer id -> the marker offset of its latest aborted transaction started so far.
    ongoing: HashMap<i64, u64>,
}

impl AbortedIndex {
    /// An index over `aborted` (any order).
    pub fn new(aborted: &[AbortedRange]) -> AbortedIndex {
        let mut by_first = aborted.to_vec();
        by_first.sort_by_key(|a| (a.first_offset, a.last_offset));
        AbortedIndex {
            by_first,
            ..AbortedIndex::default()
        }
    }

    /// Whether the transactional data batch of `producer_id` at `base_offset` belongs to an
    /// aborted transaction: one of the producer's lies around it. Calls must come in
    /// ascending `base_offset`. A producer's transactions do not overlap, so the latest one
    /// started at or before the batch is the only candidate.
    pub fn is_aborted(&mut self, producer_id: i64, base_offset: u64) -> bool {
        while let Some(a) = self.by_first.get(self.next) {
            if a.first_offset > base_offset {
                break;
            }
            self.ongoing.insert(a.producer_id, a.last_offset);
            self.next += 1;
        }
        self.ongoing
            .get(&producer_id)
            .is_some_and(|&last| base_offset <= last)
    }
}

/// Which markers still have a batch of their transaction in the log, asked in log order from
/// the log's first batch.
#[derive(Debug, Default)]
pub(crate) struct MarkerTracker {
    /// Producers with a transactional data batch since their last marker.
    ongoing: HashSet<i64>,
    /// A producer was not recorded (the bound): every marker counts as needed.
    overflowed: bool,
}

impl MarkerTracker {
    /// A transactional data batch of `producer_id` (kept, emptied or removed by this pass:
    /// it was in the log when the pass read it).
    pub fn on_data(&mut self, producer_id: i64) {
        if self.ongoing.len() < MAX_PRODUCERS_MAPPED || self.ongoing.contains(&producer_id) {
            self.ongoing.insert(producer_id);
        } else {
            self.overflowed = true;
        }
    }

    /// A marker of `producer_id`: whether no batch of its transaction was seen before it
    /// (every batch was removed by earlier passes, or the log starts after them), so it can
    /// be given a delete horizon and, past it, be removed.
    pub fn on_marker(&mut self, producer_id: i64) -> bool {
        let seen = self.ongoing.remove(&producer_id);
        !seen && !self.overflowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(producer_id: i64, first_offset: u64, last_offset: u64) -> AbortedRange {
        AbortedRange {
            producer_id,
            first_offset,
            last_offset,
        }
    }

    #[test]
    fn a_batch_is_aborted_only_inside_its_producers_aborted_range() {
        let mut idx = AbortedIndex::new(&[a(2, 20, 30), a(1, 5, 9), a(1, 40, 41)]);
        assert!(!idx.is_aborted(1, 0));
        assert!(idx.is_aborted(1, 5));
        assert!(!idx.is_aborted(2, 6), "another producer's range");
        assert!(idx.is_aborted(1, 8));
        assert!(
            !idx.is_aborted(1, 10),
            "after its marker: a committed transaction"
        );
        assert!(idx.is_aborted(2, 25));
        assert!(!idx.is_aborted(1, 26));
        assert!(!idx.is_aborted(2, 35));
        assert!(idx.is_aborted(1, 40));
        assert!(!idx.is_aborted(1, 42));
        // No list: nothing is aborted.
        assert!(!AbortedIndex::new(&[]).is_aborted(1, 0));
    }

    #[test]
    fn a_marker_is_needed_while_a_batch_of_its_transaction_precedes_it() {
        let mut t = MarkerTracker::default();
        t.on_data(1);
        t.on_data(2);
        t.on_data(1);
        assert!(!t.on_marker(1), "producer 1's batches are before it");
        assert!(t.on_marker(1), "a second marker: nothing since the first");
        assert!(t.on_marker(3), "a producer never seen");
        assert!(!t.on_marker(2));
        // Past the bound every marker is kept.
        let mut t = MarkerTracker::default();
        for id in 0..MAX_PRODUCERS_MAPPED as i64 {
            t.on_data(id);
        }
        t.on_data(-1);
        assert!(!t.on_marker(-7));
    }
}
