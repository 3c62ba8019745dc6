//! Each producer id's latest batch in the range a pass maps, so a rewrite keeps only the
//! last batch of every idempotent producer (Kafka's rule): earlier batches of a producer that
//! lose every record go whole, the last one stays (as an empty header if need be), and the
//! producer state a replica rebuilds from its log still finds the producer's last sequence.
//!
//! Bounded: at most [`MAX_PRODUCERS_MAPPED`] producer ids (an `i64 -> u64` hash map, about
//! 32 bytes per id with the table's overhead, so about 3 MiB at the bound). A producer first
//! seen after the map is full is not recorded; its batches are treated as their producer's
//! last (their headers stay, the safe side: never a producer's last batch removed).
//!
//! Only batches the pass maps are recorded: all below the clean limit (committed and applied
//! by every replica, never truncated), so the batch a header is dropped for always stays in
//! the log. A producer whose later batches lie past the mapped range (the uncleanable
//! segments, the active one) keeps one header in the cleaned part until a later pass maps
//! them: the leak is at most one empty batch per producer id.

use std::collections::HashMap;

/// Producer ids one pass records at most (the server's producer table holds as many).
pub const MAX_PRODUCERS_MAPPED: usize = 100_000;

/// Producer id -> base offset of its latest batch seen by the pass.
#[derive(Debug, Default)]
pub(crate) struct ProducerLastBatches {
    last: HashMap<i64, u64>,
}

impl ProducerLastBatches {
    /// Records a batch of `producer_id` at `base_offset` (batches come in log order, but the
    /// largest offset wins whatever the order). A new producer past the bound is not recorded.
    pub fn record(&mut self, producer_id: i64, base_offset: u64) {
        if let Some(last) = self.last.get_mut(&producer_id) {
            *last = (*last).max(base_offset);
        } else if self.last.len() < MAX_PRODUCERS_MAPPED {
            self.last.insert(producer_id, base_offset);
        }
    }

    /// Whether the batch of `producer_id` at `base_offset` must keep its header: no later
    /// batch of the producer is recorded (an unrecorded producer keeps every header).
    pub fn is_last(&self, producer_id: i64, base_offset: u64) -> bool {
        self.last
            .get(&producer_id)
            .is_none_or(|&last| base_offset >= last)
    }

    /// Producer ids recorded.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.last.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_latest_batch_of_a_recorded_producer_is_last() {
        let mut p = ProducerLastBatches::default();
        p.record(7, 10);
        p.record(7, 30);
        p.record(7, 20);
        p.record(9, 15);
        assert!(!p.is_last(7, 10));
        assert!(!p.is_last(7, 20));
        assert!(p.is_last(7, 30));
        assert!(p.is_last(9, 15));
        // A producer the pass never saw keeps its headers.
        assert!(p.is_last(11, 0));
    }

    #[test]
    fn past_the_bound_new_producers_are_not_recorded_and_keep_their_headers() {
        let mut p = ProducerLastBatches::default();
        for id in 0..MAX_PRODUCERS_MAPPED as i64 {
            p.record(id, 100);
        }
        p.record(-5, 200);
        p.record(-5, 300);
        assert_eq!(p.len(), MAX_PRODUCERS_MAPPED);
        assert!(p.is_last(-5, 200), "unrecorded: every header stays");
        // Producers already recorded are still followed.
        p.record(3, 500);
        assert!(!p.is_last(3, 100));
    }
}
