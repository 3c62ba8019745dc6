//! The runtime's timer thread and what it keeps to find due work without visiting every slot.
//!
//! Once per tick period the timer marks a tick due for every slot that wants ticks and
//! schedules every slot whose slow deadline passed. A node with 10,000 quiesced groups has
//! almost none of either, so the timer does not walk all slots each period (that walk, with two
//! atomic loads per slot twenty times a second, was a sixth of an idle node's CPU); it keeps:
//!
//! - the **ticking set**: the slots whose last turn asked for ticks (a new slot starts in it);
//! - the **deadline heap**: `(deadline, slot id)` for a slot that does not tick, pushed when its
//!   turn ends with a deadline different from the one it had (or when it stops ticking). An
//!   entry whose slot has another deadline by now, or has ended, is dropped when it comes due.
//!
//! Both are updated by the worker at the end of a turn, after the slot's own `ticking` and
//! `wake_at_ms` are stored, and only when they change: a busy group that keeps ticking, and a
//! quiesced one woken by input whose deadline stays, take no lock here. The heap is bounded:
//! past [`MAX_STALE_FACTOR`] entries per live slot it is rebuilt from the slots' current
//! deadlines.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::{lock, Shared, Slot, NO_DEADLINE};

/// The heap is rebuilt when it holds more than this many entries per live slot (plus
/// [`MIN_HEAP_BOUND`]): every extra one is stale.
const MAX_STALE_FACTOR: usize = 4;
/// Entries the heap may hold before the bound per slot applies.
const MIN_HEAP_BOUND: usize = 1024;

/// The slots that want ticks and the deadlines of those that do not.
#[derive(Default)]
pub(super) struct TimerIndex {
    ticking: HashMap<u64, Arc<Slot>>,
    deadlines: BinaryHeap<Reverse<(u64, u64)>>,
    /// The heap overflowed and was cleared: the timer refills it from the slots.
    rebuild_pending: bool,
}

impl TimerIndex {
    /// A new slot: it ticks until its first turn says otherwise.
    pub(super) fn add(&mut self, slot: &Arc<Slot>) {
        self.ticking.insert(slot.id, slot.clone());
    }

    /// An ended slot (its heap entries are dropped when they come due).
    pub(super) fn remove(&mut self, slot_id: u64) {
        self.ticking.remove(&slot_id);
    }

    /// Records what `slot`'s turn asked for, given what it asked for before.
    fn update(&mut self, slot: &Arc<Slot>, ticking: bool, deadline_ms: u64, live_slots: usize) {
        if ticking {
            self.ticking.insert(slot.id, slot.clone());
            return;
        }
        self.ticking.remove(&slot.id);
        if deadline_ms != NO_DEADLINE {
            self.deadlines.push(Reverse((deadline_ms, slot.id)));
        }
        if self.deadlines.len() > MIN_HEAP_BOUND + MAX_STALE_FACTOR * live_slots {
            self.deadlines.clear();
            self.rebuild_pending = true;
        }
    }
}

impl Shared {
    /// Called by the worker after `slot`'s turn stored its new `ticking` flag and deadline
    /// (`was_ticking`, `old_deadline_ms`: what they were before): updates the timer's index
    /// when either changed, or when the deadline is already due (a turn the timer ran for it
    /// found it not quite passed, by the millisecond rounding: it is due at the next tick).
    pub(super) fn note_turn_end(
        &self,
        slot: &Arc<Slot>,
        was_ticking: bool,
        old_deadline_ms: u64,
        ticking: bool,
        deadline_ms: u64,
    ) {
        let due_now = deadline_ms <= self.millis_since_epoch(Instant::now());
        let changed =
            ticking != was_ticking || (!ticking && (deadline_ms != old_deadline_ms || due_now));
        if !changed {
            return;
        }
        let live_slots = lock(&self.slots).len();
        lock(&self.timers).update(slot, ticking, deadline_ms, live_slots);
    }
}

/// The timer: every tick period, a tick for every ticking task and a turn for every task whose
/// slow deadline passed.
pub(super) fn run_timer(shared: &Shared) {
    let mut next = Instant::now() + shared.tick;
    let mut due: Vec<Arc<Slot>> = Vec::new();
    let mut came_due: Vec<(u64, u64)> = Vec::new();
    loop {
        {
            let mut guard = lock(&shared.timer_lock);
            loop {
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let left = next.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                guard = shared
                    .timer_wake
                    .wait_timeout(guard, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        let now = Instant::now();
        // The next period starts from the schedule, not from now, unless the timer fell a
        // whole period behind (a stalled machine): then ticks are skipped, not bunched.
        next += shared.tick;
        if next <= now {
            next = now + shared.tick;
        }
        let now_ms = shared.millis_since_epoch(now);
        due.clear();
        came_due.clear();
        let rebuild = {
            let mut index = lock(&shared.timers);
            for slot in index.ticking.values() {
                slot.tick_due.store(true, Ordering::SeqCst);
                due.push(slot.clone());
            }
            while let Some(Reverse((at, id))) = index.deadlines.peek().copied() {
                if at > now_ms {
                    break;
                }
                index.deadlines.pop();
                came_due.push((at, id));
            }
            std::mem::take(&mut index.rebuild_pending)
        };
        {
            let slots = lock(&shared.slots);
            for (at, id) in &came_due {
                // Only an entry that is still the slot's deadline (a later turn pushed its
                // own entry for a new one).
                if let Some(slot) = slots.get(id).filter(|s| {
                    !s.ticking.load(Ordering::SeqCst) && s.wake_at_ms.load(Ordering::SeqCst) == *at
                }) {
                    due.push(slot.clone());
                }
            }
            if rebuild {
                // The heap overflowed with stale entries: every slot that does not tick
                // gets its current deadline back (at worst one spurious turn each).
                let entries: Vec<_> = slots
                    .values()
                    .filter(|s| !s.ticking.load(Ordering::SeqCst))
                    .map(|s| Reverse((s.wake_at_ms.load(Ordering::SeqCst), s.id)))
                    .filter(|Reverse((at, _))| *at != NO_DEADLINE)
                    .collect();
                lock(&shared.timers).deadlines.extend(entries);
            }
        }
        // Scheduled outside the locks (schedule takes the queue lock).
        for slot in &due {
            slot.schedule();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Next, Runtime, Task};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Never ticks after its first turn; asks for a turn `every` after each one (or never).
    struct Sleeper {
        every: Option<Duration>,
        turns: Arc<AtomicUsize>,
        ticks: Arc<AtomicUsize>,
    }

    impl Task for Sleeper {
        fn turn(&mut self, tick: bool) -> Next {
            self.turns.fetch_add(1, Ordering::SeqCst);
            if tick {
                self.ticks.fetch_add(1, Ordering::SeqCst);
            }
            Next::Continue {
                ticking: false,
                wake_at: self.every.map(|e| Instant::now() + e),
            }
        }
        fn has_input(&self) -> bool {
            false
        }
        fn finish(&mut self) {}
    }

    /// Quiesced tasks cost the timer nothing: no ticks, and the ticking set empties; a task
    /// with a slow deadline gets its turns at that pace from the deadline heap, again and
    /// again (each turn pushes its next deadline).
    #[test]
    fn quiet_tasks_get_no_ticks_and_deadlines_come_due_from_the_heap() {
        let rt = Runtime::start("timer-test", 2, Duration::from_millis(5)).expect("runtime");
        let counters = |every| {
            let turns = Arc::new(AtomicUsize::new(0));
            let ticks = Arc::new(AtomicUsize::new(0));
            let slot = rt.slot();
            rt.run(
                &slot,
                Box::new(Sleeper {
                    every,
                    turns: turns.clone(),
                    ticks: ticks.clone(),
                }),
            );
            (slot, turns, ticks)
        };
        let silent: Vec<_> = (0..200).map(|_| counters(None)).collect();
        let (_slot, turns, _) = counters(Some(Duration::from_millis(20)));
        std::thread::sleep(Duration::from_millis(400));
        for (_, t, k) in &silent {
            assert_eq!(t.load(Ordering::SeqCst), 1, "only the first turn");
            assert!(
                k.load(Ordering::SeqCst) <= 1,
                "at most the tick of its first turn"
            );
        }
        let woken = turns.load(Ordering::SeqCst);
        assert!(woken >= 5, "a 20 ms deadline over 400 ms: {woken} turns");
        assert!(
            super::lock(&rt.shared.timers).ticking.is_empty(),
            "no slot ticks"
        );
        assert!(super::lock(&rt.shared.timers).deadlines.len() <= 2);
        rt.shutdown();
    }
}
