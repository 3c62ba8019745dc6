//! The runtime that drives every Raft group of a node: a fixed pool of worker threads and one
//! timer thread, shared by all groups, so a node's thread count does not grow with the number
//! of partitions it hosts (the idea of TiKV's batch system, in small).
//!
//! A group is a [`Task`]: a state machine that runs in *turns*. A task lives in a [`Slot`];
//! whoever gives it work (a message in its inbox, a due tick) *schedules* the slot, which puts
//! it on the run queue unless it is there already. A worker takes a slot from the queue, runs
//! one turn of its task under the slot's lock, and puts the slot back when more work arrived
//! meanwhile. So:
//!
//! - a slot is queued at most once (the run queue is bounded by the number of slots), and a task
//!   never runs on two workers at once;
//! - the timer thread, once per tick period, marks a tick due for every task that wants ticks
//!   (a quiesced group does not, and costs the timer nothing) and schedules the tasks whose
//!   slow deadline ([`Next::Continue::wake_at`]) has passed, from a set of the ticking slots
//!   and a heap of the others' deadlines (see `timer.rs`);
//! - a turn that blocks on the disk (append + fsync) holds one worker; the other workers go on
//!   with other groups, so an unrelated group waits at most for a worker to finish one turn.
//!
//! A task that panics is dropped and its slot ended (the binary's panic hook ends the process
//! first; in tests the other groups go on); [`Slot::panicked`] says so.

use std::collections::{HashMap, VecDeque};

#[path = "timer.rs"]
mod timer;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use timer::{run_timer, TimerIndex};

/// Largest worker pool [`worker_count`] chooses on its own.
const MAX_AUTO_WORKERS: usize = 16;

/// What a task wants after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Run again when work arrives.
    Continue {
        /// Whether the task wants a turn with a tick every tick period.
        ticking: bool,
        /// A turn no later than this, even without ticks or input (slow timers).
        wake_at: Option<Instant>,
    },
    /// The task is finished (it was told to stop); it is dropped and never run again.
    Done,
}

/// A state machine the runtime drives (a Raft group).
pub trait Task: Send + 'static {
    /// Runs one turn: takes queued input, ticks when `tick` is true, does the work that is
    /// ready. Must not wait for another task.
    fn turn(&mut self, tick: bool) -> Next;
    /// Whether input is waiting (asked after a turn, to schedule the task again).
    fn has_input(&self) -> bool;
    /// Called once when the task ends without [`Next::Done`] (its slot is stopped, or the
    /// runtime shuts down), and after a turn that returned [`Next::Done`]; never turned again.
    fn finish(&mut self);
}

/// The number of workers for `configured` (0: twice the cores, between 2 and 16). Turns block on
/// fsync, so more workers than cores keep the disk busy with several groups' syncs at once.
pub fn worker_count(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (2 * cores).clamp(2, MAX_AUTO_WORKERS)
}

/// No deadline, in [`Slot::wake_at_ms`].
const NO_DEADLINE: u64 = u64::MAX;

/// The state the workers and the timer share.
struct Shared {
    /// Slots waiting for a worker; each at most once.
    queue: Mutex<RunQueue>,
    /// Signalled when the queue gets a slot while a worker is parked, or the runtime stops.
    queued: Condvar,
    /// Wake-ups of parked workers so far (each a futex syscall, and on an idle core a
    /// cross-CPU interrupt): what the run queue is careful to spend only where needed.
    wakeups: AtomicU64,
    /// Slots on the run queue (its length, readable without the lock; see
    /// [`others_waiting`]).
    waiting: AtomicUsize,
    /// Every live slot, by slot id.
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    /// What the timer looks at each period: the ticking slots and the others' deadlines.
    timers: Mutex<TimerIndex>,
    next_slot_id: AtomicU64,
    stopping: AtomicBool,
    /// Wakes the timer early (at shutdown).
    timer_wake: Condvar,
    timer_lock: Mutex<()>,
    tick: Duration,
    epoch: Instant,
}

/// The run queue and how many workers wait on it.
#[derive(Default)]
struct RunQueue {
    slots: VecDeque<Arc<Slot>>,
    /// Workers parked on [`Shared::queued`] (counted under the queue's lock).
    parked: usize,
}

/// Who queues a slot, for [`Shared::push`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pusher {
    /// Any thread: a parked worker is woken for the slot.
    Other,
    /// The worker that just ran the slot's turn and is about to take the queue's next slot
    /// itself: nobody needs waking (a wake-up would only move the slot to another thread).
    WorkerAfterTurn,
}

impl Shared {
    /// Queues `slot`. Wakes a parked worker unless the pusher will take from the queue next
    /// itself, or no worker is parked (every worker looks at the queue before it parks, so
    /// the syscall of a wake-up is spent only where it is needed).
    fn push(&self, slot: Arc<Slot>, pusher: Pusher) {
        let wake = {
            let mut queue = lock(&self.queue);
            queue.slots.push_back(slot);
            self.waiting.store(queue.slots.len(), Ordering::Relaxed);
            pusher == Pusher::Other && queue.parked > 0
        };
        if wake {
            self.wakeups.fetch_add(1, Ordering::Relaxed);
            self.queued.notify_one();
        }
    }

    /// The next slot to run; `None` once the runtime stops.
    fn pop(&self) -> Option<Arc<Slot>> {
        let mut queue = lock(&self.queue);
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return None;
            }
            if let Some(slot) = queue.slots.pop_front() {
                self.waiting.store(queue.slots.len(), Ordering::Relaxed);
                return Some(slot);
            }
            queue.parked += 1;
            queue = self.queued.wait(queue).unwrap_or_else(|e| e.into_inner());
            queue.parked -= 1;
        }
    }

    fn millis_since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(NO_DEADLINE)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    /// The slot whose turn this thread is running (0: none), so a task that stops another
    /// slot can never wait for itself.
    static RUNNING_SLOT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The runtime this thread is a worker of (None: not a worker).
    static WORKER_OF: std::cell::RefCell<Option<Arc<Shared>>> =
        const { std::cell::RefCell::new(None) };
}

/// Whether, on a worker thread, other slots are queued waiting for a worker of its runtime
/// (false on any other thread). A turn uses it to leave optional work (a produce response it
/// could write itself) to other threads when its worker is needed elsewhere.
pub fn others_waiting() -> bool {
    WORKER_OF.with(|w| {
        w.borrow()
            .as_ref()
            .is_some_and(|s| s.waiting.load(Ordering::Relaxed) > 0)
    })
}

/// One task's place in the runtime: cheap to share; [`Slot::schedule`] is its waker.
pub struct Slot {
    id: u64,
    task: Mutex<Option<Box<dyn Task>>>,
    /// On the run queue or running a turn that will look for more work before it ends.
    scheduled: AtomicBool,
    tick_due: AtomicBool,
    ticking: AtomicBool,
    /// Milliseconds since the runtime's epoch of the task's slow deadline.
    wake_at_ms: AtomicU64,
    ended: AtomicBool,
    panicked: AtomicBool,
    /// Set when a stop was asked from inside this slot's own turn: the worker ends it after.
    stop_requested: AtomicBool,
    done: Condvar,
    done_lock: Mutex<()>,
    shared: Weak<Shared>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("id", &self.id)
            .field("ended", &self.ended.load(Ordering::Relaxed))
            .finish()
    }
}

impl Slot {
    /// Asks for a turn: queues the slot unless it is queued or running already (then the
    /// running turn's end looks for work again). Does nothing once the slot has ended.
    pub fn schedule(self: &Arc<Self>) {
        self.schedule_by(Pusher::Other);
    }

    fn schedule_by(self: &Arc<Self>, pusher: Pusher) {
        if self.ended.load(Ordering::SeqCst) {
            return;
        }
        if !self.scheduled.swap(true, Ordering::SeqCst) {
            match self.shared.upgrade() {
                Some(shared) => shared.push(self.clone(), pusher),
                None => self.scheduled.store(false, Ordering::SeqCst),
            }
        }
    }

    /// Whether the task has ended (stopped, finished or panicked).
    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Whether the task ended by panicking.
    pub fn panicked(&self) -> bool {
        self.panicked.load(Ordering::SeqCst)
    }

    /// Installs the task and schedules its first turn.
    fn start(self: &Arc<Self>, task: Box<dyn Task>) {
        let previous = lock(&self.task).replace(task);
        assert!(previous.is_none(), "a slot runs one task");
        self.schedule();
    }

    /// Runs one turn (on a worker, which takes the queue's next slot right after).
    fn run_turn(self: &Arc<Self>) {
        let mut guard = lock(&self.task);
        let Some(task) = guard.as_mut() else {
            self.scheduled.store(false, Ordering::SeqCst);
            return;
        };
        RUNNING_SLOT.with(|c| c.set(self.id));
        let tick = self.tick_due.swap(false, Ordering::SeqCst);
        let outcome = catch_unwind(AssertUnwindSafe(|| task.turn(tick)));
        RUNNING_SLOT.with(|c| c.set(0));
        match outcome {
            Ok(Next::Continue { ticking, wake_at })
                if !self.stop_requested.load(Ordering::SeqCst) =>
            {
                let was_ticking = self.ticking.swap(ticking, Ordering::SeqCst);
                let shared = self.shared.upgrade();
                let deadline = match (wake_at, &shared) {
                    (Some(at), Some(s)) => s.millis_since_epoch(at),
                    _ => NO_DEADLINE,
                };
                let old_deadline = self.wake_at_ms.swap(deadline, Ordering::SeqCst);
                if let Some(s) = &shared {
                    s.note_turn_end(self, was_ticking, old_deadline, ticking, deadline);
                }
                // Clear first, then look: a sender that queued input after the look finds the
                // flag clear and schedules the slot itself.
                self.scheduled.store(false, Ordering::SeqCst);
                let more = task.has_input() || self.tick_due.load(Ordering::SeqCst);
                drop(guard);
                if more {
                    // Input that came during the turn (a follower's acknowledgement during
                    // the leader's fsync): this worker takes the queue's next slot now, so
                    // it runs the next turn itself (behind slots queued earlier) instead of
                    // waking another worker to take it.
                    self.schedule_by(Pusher::WorkerAfterTurn);
                }
            }
            Ok(_) => {
                let mut task = guard.take().expect("checked above");
                let finished = catch_unwind(AssertUnwindSafe(move || task.finish()));
                drop(guard);
                self.end(finished.is_err());
            }
            Err(_) => {
                let task = guard.take();
                // The task's state cannot be trusted; dropping it closes its inbox and drops
                // its waiting replies (callers see the group stopped).
                let _ = catch_unwind(AssertUnwindSafe(move || drop(task)));
                drop(guard);
                self.end(true);
            }
        }
    }

    /// Ends the task now: waits for a turn that is running, then calls [`Task::finish`]. From
    /// inside this slot's own turn it only asks, and the worker ends the task after the turn.
    pub fn stop(self: &Arc<Self>) {
        if RUNNING_SLOT.with(|c| c.get()) == self.id {
            self.stop_requested.store(true, Ordering::SeqCst);
            return;
        }
        let task = lock(&self.task).take();
        let mut panicked = false;
        if let Some(mut task) = task {
            panicked = catch_unwind(AssertUnwindSafe(move || task.finish())).is_err();
        }
        self.end(panicked);
    }

    /// Waits until the task has ended, at most `timeout`; true if it has.
    pub fn wait_ended(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = lock(&self.done_lock);
        while !self.is_ended() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            guard = self
                .done
                .wait_timeout(guard, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    fn end(&self, panicked: bool) {
        if panicked {
            self.panicked.store(true, Ordering::SeqCst);
        }
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            lock(&shared.slots).remove(&self.id);
            lock(&shared.timers).remove(self.id);
        }
        let _guard = lock(&self.done_lock);
        self.done.notify_all();
    }
}

/// A node's group runtime: [`worker_count`] workers and one timer thread.
pub struct Runtime {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("slots", &lock(&self.shared.slots).len())
            .finish()
    }
}

impl Runtime {
    /// Starts `workers` worker threads (named `NAME-worker-i`) and a timer ticking every `tick`.
    pub fn start(name: &str, workers: usize, tick: Duration) -> std::io::Result<Runtime> {
        assert!(workers > 0, "a runtime has at least one worker");
        assert!(!tick.is_zero(), "the tick period is positive");
        let shared = Arc::new(Shared {
            queue: Mutex::new(RunQueue::default()),
            queued: Condvar::new(),
            wakeups: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            slots: Mutex::new(HashMap::new()),
            timers: Mutex::new(TimerIndex::default()),
            next_slot_id: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            timer_wake: Condvar::new(),
            timer_lock: Mutex::new(()),
            tick,
            epoch: Instant::now(),
        });
        let runtime = Runtime {
            shared: shared.clone(),
            threads: Mutex::new(Vec::new()),
        };
        for i in 0..workers {
            let s = shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("{name}-worker-{i}"))
                .spawn(move || {
                    WORKER_OF.with(|w| *w.borrow_mut() = Some(s.clone()));
                    while let Some(slot) = s.pop() {
                        slot.run_turn();
                    }
                    WORKER_OF.with(|w| *w.borrow_mut() = None);
                })?;
            lock(&runtime.threads).push(handle);
        }
        let s = shared.clone();
        let timer = std::thread::Builder::new()
            .name(format!("{name}-timer"))
            .spawn(move || run_timer(&s))?;
        lock(&runtime.threads).push(timer);
        Ok(runtime)
    }

    /// A new slot for a task that is not built yet (its inbox needs the slot as waker); start
    /// it with [`Runtime::run`].
    pub fn slot(&self) -> Arc<Slot> {
        let id = self.shared.next_slot_id.fetch_add(1, Ordering::SeqCst);
        let slot = Arc::new(Slot {
            id,
            task: Mutex::new(None),
            scheduled: AtomicBool::new(false),
            tick_due: AtomicBool::new(false),
            ticking: AtomicBool::new(true),
            wake_at_ms: AtomicU64::new(NO_DEADLINE),
            ended: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            stop_requested: AtomicBool::new(false),
            done: Condvar::new(),
            done_lock: Mutex::new(()),
            shared: Arc::downgrade(&self.shared),
        });
        lock(&self.shared.slots).insert(id, slot.clone());
        lock(&self.shared.timers).add(&slot);
        slot
    }

    /// Runs `task` in `slot` (from [`Runtime::slot`]) until it finishes or is stopped.
    pub fn run(&self, slot: &Arc<Slot>, task: Box<dyn Task>) {
        slot.start(task);
    }

    /// How many times a parked worker was woken for queued work so far.
    pub fn wakeups(&self) -> u64 {
        self.shared.wakeups.load(Ordering::Relaxed)
    }

    /// Tasks running now.
    pub fn task_count(&self) -> usize {
        lock(&self.shared.slots).len()
    }

    /// Stops every task ([`Task::finish`]), then the workers and the timer. Idempotent.
    pub fn shutdown(&self) {
        let slots: Vec<Arc<Slot>> = lock(&self.shared.slots).values().cloned().collect();
        for slot in slots {
            slot.stop();
        }
        self.shared.stopping.store(true, Ordering::SeqCst);
        {
            let _q = lock(&self.shared.queue);
            self.shared.queued.notify_all();
        }
        {
            let _t = lock(&self.shared.timer_lock);
            self.shared.timer_wake.notify_all();
        }
        let me = std::thread::current().id();
        for handle in std::mem::take(&mut *lock(&self.threads)) {
            // Shutdown may run on a worker (a task dropping the last handle on its node): that
            // worker ends when its turn returns.
            if handle.thread().id() != me {
                let _ = handle.join();
            }
        }
        lock(&self.shared.queue).slots.clear();
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{mpsc, Barrier};

    /// Counts its turns and ticks; stops after `stop_after` inputs.
    struct Counter {
        input: mpsc::Receiver<u32>,
        pending: Arc<AtomicUsize>,
        turns: Arc<AtomicUsize>,
        ticks: Arc<AtomicUsize>,
        seen: Arc<AtomicUsize>,
        ticking: bool,
        finished: Arc<AtomicBool>,
    }

    impl Task for Counter {
        fn turn(&mut self, tick: bool) -> Next {
            self.turns.fetch_add(1, Ordering::SeqCst);
            if tick {
                self.ticks.fetch_add(1, Ordering::SeqCst);
            }
            while let Ok(v) = self.input.try_recv() {
                self.pending.fetch_sub(1, Ordering::SeqCst);
                if v == u32::MAX {
                    return Next::Done;
                }
                if v == u32::MAX - 1 {
                    panic!("asked to panic");
                }
                self.seen.fetch_add(1, Ordering::SeqCst);
            }
            Next::Continue {
                ticking: self.ticking,
                wake_at: None,
            }
        }
        fn has_input(&self) -> bool {
            self.pending.load(Ordering::SeqCst) > 0
        }
        fn finish(&mut self) {
            self.finished.store(true, Ordering::SeqCst);
        }
    }

    struct Probe {
        tx: mpsc::Sender<u32>,
        pending: Arc<AtomicUsize>,
        slot: Arc<Slot>,
        ticks: Arc<AtomicUsize>,
        seen: Arc<AtomicUsize>,
        finished: Arc<AtomicBool>,
    }

    impl Probe {
        fn send(&self, v: u32) {
            self.pending.fetch_add(1, Ordering::SeqCst);
            self.tx.send(v).unwrap();
            self.slot.schedule();
        }
    }

    fn spawn(rt: &Runtime, ticking: bool) -> Probe {
        let (tx, rx) = mpsc::channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let ticks = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicBool::new(false));
        let slot = rt.slot();
        rt.run(
            &slot,
            Box::new(Counter {
                input: rx,
                pending: pending.clone(),
                turns: Arc::new(AtomicUsize::new(0)),
                ticks: ticks.clone(),
                seen: seen.clone(),
                ticking,
                finished: finished.clone(),
            }),
        );
        Probe {
            tx,
            pending,
            slot,
            ticks,
            seen,
            finished,
        }
    }

    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Queues input for itself during each of its first `turns` turns (as a follower's
    /// acknowledgement arrives during a leader's fsync) and records which thread ran each.
    struct SelfFeeding {
        slot: Arc<Slot>,
        input: Arc<AtomicUsize>,
        turns: usize,
        threads: Arc<Mutex<Vec<std::thread::ThreadId>>>,
    }

    impl Task for SelfFeeding {
        fn turn(&mut self, _tick: bool) -> Next {
            self.input.store(0, Ordering::SeqCst);
            let mut threads = lock(&self.threads);
            threads.push(std::thread::current().id());
            if threads.len() < self.turns {
                // Input arrives while the turn runs: the slot is scheduled already, so this
                // only marks it; the worker queues it again when the turn ends.
                self.input.store(1, Ordering::SeqCst);
                self.slot.schedule();
            }
            Next::Continue {
                ticking: false,
                wake_at: None,
            }
        }
        fn has_input(&self) -> bool {
            self.input.load(Ordering::SeqCst) > 0
        }
        fn finish(&mut self) {}
    }

    #[test]
    fn input_that_arrives_during_a_turn_is_taken_by_the_same_worker() {
        // Four workers, one task: the others are parked, and the task's next turn must not
        // wake one of them (a hand-off to another thread per turn) but run where it ran.
        let rt = Runtime::start("t", 4, Duration::from_secs(60)).unwrap();
        let threads = Arc::new(Mutex::new(Vec::new()));
        let slot = rt.slot();
        // Let the other workers park first.
        std::thread::sleep(Duration::from_millis(50));
        rt.run(
            &slot,
            Box::new(SelfFeeding {
                slot: slot.clone(),
                input: Arc::new(AtomicUsize::new(0)),
                turns: 50,
                threads: threads.clone(),
            }),
        );
        wait_until("50 turns", || lock(&threads).len() >= 50);
        let threads = lock(&threads).clone();
        assert_eq!(
            threads.len(),
            50,
            "no turn after the task stopped feeding itself"
        );
        assert!(
            threads.iter().all(|t| *t == threads[0]),
            "every turn on the worker that ran the first: {threads:?}"
        );
        // One wake-up for the first turn (queued from outside), none for the 49 after it.
        assert_eq!(rt.wakeups(), 1);
        rt.shutdown();
    }

    #[test]
    fn parked_workers_are_woken_for_work_queued_from_outside() {
        // Two tasks whose turns block until both run: only possible if work queued from
        // outside wakes a second, parked worker.
        struct Rendezvous(Arc<Barrier>);
        impl Task for Rendezvous {
            fn turn(&mut self, _tick: bool) -> Next {
                self.0.wait();
                Next::Continue {
                    ticking: false,
                    wake_at: None,
                }
            }
            fn has_input(&self) -> bool {
                false
            }
            fn finish(&mut self) {}
        }
        let rt = Runtime::start("t", 2, Duration::from_secs(60)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let barrier = Arc::new(Barrier::new(3));
        for _ in 0..2 {
            let slot = rt.slot();
            rt.run(&slot, Box::new(Rendezvous(barrier.clone())));
        }
        let (done_tx, done_rx) = mpsc::channel();
        let b = barrier.clone();
        std::thread::spawn(move || {
            b.wait();
            let _ = done_tx.send(());
        });
        done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("both tasks ran at once on the two workers");
        rt.shutdown();
    }

    #[test]
    fn every_input_is_taken_with_few_workers_and_many_tasks() {
        let rt = Runtime::start("t", 2, Duration::from_millis(10)).unwrap();
        let probes: Vec<Probe> = (0..200).map(|i| spawn(&rt, i % 2 == 0)).collect();
        let senders: Vec<_> = (0..4)
            .map(|t| {
                let probes: Vec<_> = probes
                    .iter()
                    .map(|p| (p.tx.clone(), p.pending.clone(), p.slot.clone()))
                    .collect();
                std::thread::spawn(move || {
                    for round in 0..100u32 {
                        for (i, (tx, pending, slot)) in probes.iter().enumerate() {
                            if (i + t + round as usize) % 3 == 0 {
                                continue;
                            }
                            pending.fetch_add(1, Ordering::SeqCst);
                            tx.send(round).unwrap();
                            slot.schedule();
                        }
                    }
                })
            })
            .collect();
        for s in senders {
            s.join().unwrap();
        }
        let expected: usize = (0..200usize)
            .map(|i| {
                (0..4usize)
                    .map(|t| (0..100usize).filter(|r| (i + t + r) % 3 != 0).count())
                    .sum::<usize>()
            })
            .sum();
        wait_until("every input taken", || {
            probes
                .iter()
                .map(|p| p.seen.load(Ordering::SeqCst))
                .sum::<usize>()
                == expected
        });
        // Ticking tasks get ticks; the others none.
        wait_until("ticks", || probes[0].ticks.load(Ordering::SeqCst) >= 3);
        assert_eq!(probes[1].ticks.load(Ordering::SeqCst), 0);
        assert_eq!(rt.task_count(), 200);
        rt.shutdown();
        assert!(probes.iter().all(|p| p.finished.load(Ordering::SeqCst)));
        assert_eq!(rt.task_count(), 0);
    }

    #[test]
    fn a_task_ends_on_done_on_stop_and_on_panic_and_the_others_go_on() {
        let rt = Runtime::start("t", 1, Duration::from_millis(10)).unwrap();
        let done = spawn(&rt, false);
        let stopped = spawn(&rt, false);
        let panics = spawn(&rt, false);
        let healthy = spawn(&rt, false);
        done.send(u32::MAX);
        assert!(done.slot.wait_ended(Duration::from_secs(10)));
        assert!(done.finished.load(Ordering::SeqCst) && !done.slot.panicked());
        stopped.slot.stop();
        assert!(stopped.slot.is_ended() && stopped.finished.load(Ordering::SeqCst));
        // (The default hook prints the panic's message.)
        panics.send(u32::MAX - 1);
        assert!(panics.slot.wait_ended(Duration::from_secs(10)));
        assert!(panics.slot.panicked());
        // The one worker survived the panic.
        healthy.send(7);
        wait_until("the healthy task's input", || {
            healthy.seen.load(Ordering::SeqCst) == 1
        });
        // Scheduling an ended slot does nothing.
        stopped.slot.schedule();
        assert_eq!(rt.task_count(), 1);
    }

    #[test]
    fn the_worker_count_follows_the_cores_unless_configured() {
        assert_eq!(worker_count(3), 3);
        let auto = worker_count(0);
        assert!((2..=MAX_AUTO_WORKERS).contains(&auto));
    }
}
