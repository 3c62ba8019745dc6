//! When each consumer group next needs the coordinator's attention: a min-heap of (deadline,
//! group id) with one live entry per group, so that a tick looks only at the groups with a
//! deadline due (an expiring session, a join or sync deadline, an initial rebalance delay, a
//! member id handed out but never used) instead of scanning every group.
//!
//! Deadlines that only move later (a heartbeat renewing a session) need no entry change: the
//! group's entry fires early, the tick finds nothing due, and the group is scheduled again at its
//! real next deadline. Deadlines that move earlier replace the group's entry; the replaced entry
//! stays in the heap, stale, until it is popped or the heap is compacted (the heap holds at most
//! twice the live entries plus [`COMPACT_SLACK`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;

/// Stale entries tolerated beyond the live ones before the heap is rebuilt.
const COMPACT_SLACK: usize = 1024;

/// Each group's next deadline, earliest first.
#[derive(Debug, Default)]
pub(super) struct Deadlines {
    heap: BinaryHeap<Reverse<(Instant, String)>>,
    /// The live entry of each scheduled group.
    live: HashMap<String, Instant>,
}

impl Deadlines {
    /// No group scheduled.
    pub(super) fn new() -> Deadlines {
        Deadlines::default()
    }

    /// Makes sure group `id` is due no later than `at`: an earlier entry is kept, a later one is
    /// replaced.
    pub(super) fn schedule(&mut self, id: &str, at: Instant) {
        match self.live.get_mut(id) {
            Some(t) if *t <= at => return,
            Some(t) => *t = at,
            None => {
                self.live.insert(id.to_owned(), at);
            }
        }
        self.heap.push(Reverse((at, id.to_owned())));
        if self.heap.len() > 2 * self.live.len() + COMPACT_SLACK {
            self.compact();
        }
    }

    /// Forgets group `id` (it was removed).
    pub(super) fn cancel(&mut self, id: &str) {
        self.live.remove(id);
    }

    /// The groups due at `now` (each once), unscheduled: the caller schedules them again at
    /// their next deadline, if any.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<String> {
        let mut due = Vec::new();
        while let Some(Reverse((at, _))) = self.heap.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((at, id))) = self.heap.pop() else {
                break;
            };
            // Only the live entry counts; a replaced one is stale.
            if self.live.get(&id) == Some(&at) {
                self.live.remove(&id);
                due.push(id);
            }
        }
        due
    }

    /// Forgets every group.
    pub(super) fn clear(&mut self) {
        self.heap.clear();
        self.live.clear();
    }

    /// Groups scheduled.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether no group is scheduled.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Entries in the heap, stale ones included (bounded by twice [`Deadlines::len`] plus
    /// [`COMPACT_SLACK`]).
    #[cfg(test)]
    fn heap_len(&self) -> usize {
        self.heap.len()
    }

    fn compact(&mut self) {
        self.heap = self
            .live
            .iter()
            .map(|(id, at)| Reverse((*at, id.clone())))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ms(base: Instant, n: u64) -> Instant {
        base + Duration::from_millis(n)
    }

    #[test]
    fn groups_come_due_in_deadline_order_once_each() {
        let t = Instant::now();
        let mut d = Deadlines::new();
        d.schedule("b", ms(t, 20));
        d.schedule("a", ms(t, 10));
        d.schedule("c", ms(t, 30));
        assert_eq!(d.len(), 3);
        assert!(d.take_due(ms(t, 5)).is_empty());
        assert_eq!(
            d.take_due(ms(t, 20)),
            vec!["a".to_string(), "b".to_string()]
        );
        assert_eq!(d.len(), 1);
        assert!(d.take_due(ms(t, 25)).is_empty(), "a and b are unscheduled");
        assert_eq!(d.take_due(ms(t, 1000)), vec!["c".to_string()]);
        assert!(d.is_empty());
        assert_eq!(d.heap_len(), 0);
    }

    #[test]
    fn an_earlier_deadline_replaces_a_later_one_and_a_later_one_is_ignored() {
        let t = Instant::now();
        let mut d = Deadlines::new();
        d.schedule("g", ms(t, 100));
        d.schedule("g", ms(t, 200)); // later: the 100 ms entry stays
        d.schedule("g", ms(t, 50)); // earlier: replaces it
        assert_eq!(d.len(), 1);
        assert_eq!(d.take_due(ms(t, 60)), vec!["g".to_string()]);
        // The replaced 100 ms entry is stale: it does not make the group due again.
        assert!(d.take_due(ms(t, 150)).is_empty());
        assert!(d.take_due(ms(t, 250)).is_empty());
        assert_eq!(d.heap_len(), 0);
        // Scheduled again after it came due: due again.
        d.schedule("g", ms(t, 300));
        assert_eq!(d.take_due(ms(t, 300)), vec!["g".to_string()]);
    }

    #[test]
    fn cancelled_and_cleared_groups_never_come_due() {
        let t = Instant::now();
        let mut d = Deadlines::new();
        d.schedule("x", ms(t, 10));
        d.schedule("y", ms(t, 10));
        d.cancel("x");
        assert_eq!(d.take_due(ms(t, 10)), vec!["y".to_string()]);
        d.schedule("z", ms(t, 10));
        d.clear();
        assert!(d.take_due(ms(t, 10_000)).is_empty());
        assert!(d.is_empty());
    }

    #[test]
    fn stale_entries_are_bounded() {
        let t = Instant::now();
        let mut d = Deadlines::new();
        // Every reschedule is earlier than the last: each leaves a stale entry behind.
        for i in 0..10_000u64 {
            d.schedule("g", ms(t, 1_000_000 - i));
            assert!(d.heap_len() <= 2 * d.len() + COMPACT_SLACK + 1);
        }
        assert_eq!(d.len(), 1);
        assert_eq!(d.take_due(ms(t, 2_000_000)), vec!["g".to_string()]);
        assert_eq!(d.heap_len(), 0);
    }

    #[test]
    fn many_groups_at_the_same_instant_all_come_due() {
        let t = Instant::now();
        let mut d = Deadlines::new();
        for i in 0..1000 {
            d.schedule(&format!("g{i}"), t);
        }
        let mut due = d.take_due(t);
        due.sort();
        due.dedup();
        assert_eq!(due.len(), 1000);
    }
}
