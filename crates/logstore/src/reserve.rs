//! Zero-filled space kept ahead of the active segment's write position.
//!
//! Why: an fdatasync after an append that grew the file must also make the new size and
//! the newly allocated blocks durable: on ext4 with a journal that is a journal commit
//! (file-system wide, so it also serialises the syncs of different logs); without a
//! journal, as on the project machine, it is extra inode and bitmap writes. An fdatasync
//! after overwriting blocks that already exist and hold written data flushes only the
//! data. Measured on the project machine (2 cores, virtio disk, ext4 without journal),
//! append + fdatasync p50: 1 KiB 0.23 ms growing the file vs 0.13-0.17 ms into zeroed space;
//! 50 KiB 0.31-0.36 ms vs 0.22 ms. `fallocate` does not help: it creates unwritten extents,
//! and converting them on first write is again a metadata change.
//!
//! How: a small pool of filler threads shared by every store of the process
//! ([`FILLER_THREADS`]; a thread per store cost a node one thread per partition) writes zeros
//! after the end of an active segment file and fdatasyncs them, a fill at a time, whenever
//! the zeroed space left ahead of that file's writer falls below half a fill: the writer queues
//! its reserve (once) and a filler takes it. A fill is as large as the segment so far, at
//! least 1 MiB and at most the configured chunk; it is written and flushed in
//! [`FILL_WRITE_BYTES`] pieces, so the writer's syncs never queue behind much of it, and
//! synced and published in [`FILL_STEP_BYTES`] steps. Filling pauses while the log is
//! appended faster than [`MAX_FILL_RATE_BYTES_PER_S`] (such a log is bound by disk bandwidth,
//! and zeroing would double its writes) or in appends larger than
//! [`MAX_FILL_MEAN_APPEND_BYTES`] (they amortise the metadata a growing sync writes better
//! than zeros would). The writer writes below `zeroed_end` without coordination; a write that
//! reaches past it (the reserve ran out) waits for the running fill's next step and otherwise
//! extends the file itself, under the lock. So the writer and the filler never
//! write the same bytes. Recovery treats an all-zero tail after the last valid frame as
//! reserve, not damage, and sealing a segment first trims it to its data, so sealed segments
//! keep "file length = data length".
//!
//! Only for writers that are writing: a node hosts thousands of partitions and most are idle,
//! so a reserve costs nothing until its store is written to twice within
//! `preallocate_idle_release` (a single append after a long pause does not start a fill: it
//! would buy little and leave a megabyte of zeros behind). The filler's write handle is opened
//! for the first fill. A reserve not written to for `preallocate_idle_release` (including one
//! that found zeros left by a previous run when its store was opened) is released by a sweep
//! that one filler thread runs every [`SWEEP_INTERVAL`]: the zeros past the data are cut off
//! (`ftruncate`; not synced, since zeros at the end of the active segment are valid either
//! way) and the handle is closed. So idle stores hold no reserve descriptor and no zeros.
//!
//! Bounded per process: at most [`MAX_OPEN_RESERVE_HANDLES`] filler handles are open at once
//! (descriptors are a per-process limit). A store that wants a fill while that many are open
//! gets no reserve for now: its writes extend the file, as without zeroing ahead, and it asks
//! again at its next write. So the descriptors reserves hold do not grow with the number of
//! partitions a node hosts, only the first [`MAX_OPEN_RESERVE_HANDLES`] logs written within
//! `preallocate_idle_release` of each other get the faster syncs.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Filler write handles open at once in this process, at most (see the module docs): about a
/// tenth of a common 10,000-20,000 open-file limit, and more logs than a node writes at once
/// in every benchmark of docs/benchmarks.md.
pub const MAX_OPEN_RESERVE_HANDLES: usize = 1_024;

/// Slots for open filler handles: taken before a handle is opened, given back when it closes.
struct HandleSlots {
    open: AtomicUsize,
    max: usize,
}

impl HandleSlots {
    const fn new(max: usize) -> HandleSlots {
        HandleSlots {
            open: AtomicUsize::new(0),
            max,
        }
    }

    /// Takes a slot; false when all `max` are taken.
    fn try_take(&self) -> bool {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }

    fn give_back(&self) {
        let before = self.open.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "a reserve handle slot given back twice");
    }

    fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// The process's filler handle slots.
static RESERVE_HANDLE_SLOTS: HandleSlots = HandleSlots::new(MAX_OPEN_RESERVE_HANDLES);

/// Filler write handles open in this process right now (at most [`MAX_OPEN_RESERVE_HANDLES`]).
pub fn open_reserve_handles() -> usize {
    RESERVE_HANDLE_SLOTS.open()
}

/// A filler's write handle, holding one of [`RESERVE_HANDLE_SLOTS`] until it is closed.
struct ReserveHandle {
    file: File,
    slots: &'static HandleSlots,
}

/// What opening a filler handle gave.
enum HandleOpen {
    Opened(ReserveHandle),
    /// Every slot is taken: no reserve for now.
    AtCapacity,
    /// The file could not be opened.
    Failed,
}

impl ReserveHandle {
    fn open(path: &Path, slots: &'static HandleSlots) -> HandleOpen {
        if !slots.try_take() {
            return HandleOpen::AtCapacity;
        }
        match std::fs::OpenOptions::new().write(true).open(path) {
            Ok(file) => HandleOpen::Opened(ReserveHandle { file, slots }),
            Err(_) => {
                slots.give_back();
                HandleOpen::Failed
            }
        }
    }
}

impl std::ops::Deref for ReserveHandle {
    type Target = File;
    fn deref(&self) -> &File {
        &self.file
    }
}

impl Drop for ReserveHandle {
    fn drop(&mut self) {
        // The descriptor closes right after this (the field's own drop).
        self.slots.give_back();
    }
}

/// Filler threads shared by every reserve of the process. Fills are rare (one per megabytes
/// of appends, paused for fast writers) and short, so two keep up with many logs.
pub const FILLER_THREADS: usize = 2;

/// Bytes of zeros written and flushed to the device (`sync_file_range`) at a time by the
/// filler. The writer's syncs queue behind the piece in flight on the device, so this bounds
/// what a fill adds to them: measured on the project machine (3 writers of 50-100 KiB
/// appends + fdatasync sharing the disk, 2026-11-27), 1 MiB pieces took sync p99 to 1.8-2.2
/// ms against 0.85-1.3 ms growing the file, 128 KiB pieces kept it at 0.85-1.1 ms with the
/// mean sync 0.29-0.38 ms against 0.41-0.50 ms; 64 KiB pieces lost the mean again.
const FILL_WRITE_BYTES: usize = 128 << 10;

/// Zeros synced and published at a time within a fill: a writer that catches up with a running
/// fill waits for the current step, not for the whole fill (up to the configured chunk, 16 MiB
/// by default; the disk here takes new blocks at about 300 MB/s sustained, about 100 MB/s per
/// node with three nodes on it, so 16 MiB is about 170 ms).
const FILL_STEP_BYTES: u64 = 1 << 20;

/// Smallest fill. Fills grow with the segment (up to the configured chunk), so a quiet log
/// (the metadata stream, a test's topic) reserves a megabyte, not the whole chunk.
const MIN_FILL_BYTES: u64 = 1 << 20;

/// Above this append rate (bytes per second, measured over [`RATE_WINDOW`]) the filler
/// pauses: a log written this fast is bound by disk bandwidth, and zeroing would double its
/// writes. History: 16 MiB/s until 2026-11-25, then 48 MiB/s while fills were flushed in 1 MiB
/// pieces (at 80-120 MB/s per node those pieces took produce p99 from 0.8-3.9 ms to 2.3-10.8
/// ms). With 128 KiB pieces and [`MAX_FILL_MEAN_APPEND_BYTES`], measured on the project machine
/// (interleaved A/B, 3 rounds, 3 nodes sharing one disk, 2026-11-27): batch 50 x 1 KiB (about
/// 80 MB/s per node) 64,600-64,900 -> 77,600-80,500 records/s, p99 1.1-1.8 -> 1.5-1.7 ms;
/// batch 10 x 4 KiB 13,900-14,200 -> 16,400-16,500 (p99 1.4-1.8 -> 1.5-1.6 ms); batch 25 x 4
/// KiB (about 120 MB/s per node) 27,700-29,100 -> 29,300-29,800.
const MAX_FILL_RATE_BYTES_PER_S: u64 = 128 << 20;

/// Above this mean append size (bytes per write over [`RATE_WINDOW`]) the filler pauses. A
/// sync that grows the file pays a fixed metadata cost (about 0.15 ms here); zeroing ahead
/// pays for every byte twice. Large appends amortise the first better than the second:
/// measured at batch 50 x 4 KiB (200 KiB appends, about 105 MB/s per node), filling took
/// produce p99 from 2.7-6.2 ms to 12-23 ms for no more records/s, while 100 KiB appends still
/// gained from it (see [`MAX_FILL_RATE_BYTES_PER_S`]).
const MAX_FILL_MEAN_APPEND_BYTES: u64 = 128 << 10;

/// Window of the append rate measurement.
const RATE_WINDOW: Duration = Duration::from_millis(200);

/// How often idle reserves are looked for and released.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// How many zeros to add after `zeroed_end` in one fill.
fn fill_bytes(chunk_bytes: u64, zeroed_end: u64) -> u64 {
    chunk_bytes.min(zeroed_end.max(MIN_FILL_BYTES))
}

/// The file being reserved for and how far it is zeroed.
struct Target {
    path: PathBuf,
    /// The filler's own write handle: opened for the first fill, closed when the reserve is
    /// released for idleness.
    file: Option<Arc<ReserveHandle>>,
    /// File bytes below this are data or durable zeros; the filler extends from here.
    zeroed_end: u64,
    /// The filler never zeroes past this (the segment size limit).
    limit: u64,
}

#[derive(Default)]
struct State {
    target: Option<Target>,
    /// The writer asked for another chunk.
    wanted: bool,
    /// The filler is writing zeros after `zeroed_end` right now (outside the lock).
    filling: bool,
    /// `detach` waits for the running fill: it ends after its current step.
    detaching: bool,
    /// A fill failed (for example the disk is full): stop filling until the next attach.
    failed: bool,
    stop: bool,
    /// This reserve is in the filler pool's queue.
    queued: bool,
    /// This reserve is in the sweeper's list (it holds a handle or zeros past its data).
    holding: bool,
    /// Last write, kept across files (it describes the writer). `None`: none since `new`.
    last_write: Option<Instant>,
    /// Last attach or write: the reserve is idle `idle_release` after it.
    last_activity: Option<Instant>,
    /// End of the writer's last write in the current file.
    last_end: u64,
    /// Bytes written by the writer so far, across files.
    written_bytes: u64,
    /// Writes by the writer so far, across files.
    writes: u64,
    /// Append rate measurement: start of the current window, and `written_bytes` and
    /// `writes` then.
    window_start: Option<(Instant, u64, u64)>,
    /// Append rate over the last complete window, bytes per second. Kept across segment
    /// rolls: it describes the writer, not the file.
    rate_bytes_per_s: u64,
    /// Mean bytes per write over the last complete window.
    mean_append_bytes: u64,
}

impl State {
    /// Notes a write ending at `end`; true when the log is appended too fast, or in appends
    /// too large, for zeroing ahead to pay.
    fn zeros_would_not_pay(&mut self, end: u64) -> bool {
        self.written_bytes += end.saturating_sub(self.last_end);
        self.writes += 1;
        self.last_end = self.last_end.max(end);
        let now = Instant::now();
        let (written, writes) = (self.written_bytes, self.writes);
        match self.window_start {
            Some((t, w, n)) if now.duration_since(t) >= RATE_WINDOW => {
                let secs = now.duration_since(t).as_secs_f64();
                self.rate_bytes_per_s = ((written - w) as f64 / secs) as u64;
                self.mean_append_bytes = (written - w) / (writes - n).max(1);
                self.window_start = Some((now, written, writes));
            }
            Some(_) => {}
            None => self.window_start = Some((now, written, writes)),
        }
        self.rate_bytes_per_s > MAX_FILL_RATE_BYTES_PER_S
            || self.mean_append_bytes > MAX_FILL_MEAN_APPEND_BYTES
    }
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// Fill size limit of this reserve.
    chunk_bytes: u64,
    /// Idle time after which the sweeper releases the reserve.
    idle_release: Duration,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Keeps zeroed space ahead of one file's writer (see the module docs). With a chunk size
/// of 0 it is disabled: writes go straight to the file.
pub(crate) struct ZeroReserve {
    chunk_bytes: u64,
    shared: Arc<Shared>,
}

/// The process-wide queue of reserves that want a fill, and its filler threads.
struct FillerPool {
    queue: Mutex<VecDeque<Arc<Shared>>>,
    ready: Condvar,
    /// Reserves holding a handle or zeros past their data, for the sweeper (filler 0).
    holding: Mutex<Vec<Weak<Shared>>>,
}

/// The filler pool, started on first use.
fn filler_pool() -> &'static FillerPool {
    static POOL: OnceLock<&'static FillerPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let pool: &'static FillerPool = Box::leak(Box::new(FillerPool {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            holding: Mutex::new(Vec::new()),
        }));
        for i in 0..FILLER_THREADS {
            std::thread::Builder::new()
                .name(format!("logstore-zero-fill-{i}"))
                .spawn(move || pool.run(i == 0))
                .expect("spawning a zero-fill thread");
        }
        pool
    })
}

impl FillerPool {
    fn submit(&self, shared: Arc<Shared>) {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(shared);
        self.ready.notify_one();
    }

    /// Adds a reserve to the sweeper's list.
    fn hold(&self, shared: &Arc<Shared>) {
        self.holding
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(shared));
    }

    /// A filler thread: takes queued reserves one at a time and runs one fill for each. The
    /// sweeper (one of them) also releases idle reserves every [`SWEEP_INTERVAL`].
    fn run(&self, sweeper: bool) {
        let zeros = vec![0u8; FILL_WRITE_BYTES];
        let mut last_sweep = Instant::now();
        loop {
            let shared = {
                let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if let Some(s) = q.pop_front() {
                        break Some(s);
                    }
                    if sweeper && last_sweep.elapsed() >= SWEEP_INTERVAL {
                        break None;
                    }
                    q = if sweeper {
                        self.ready
                            .wait_timeout(q, SWEEP_INTERVAL)
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    } else {
                        self.ready.wait(q).unwrap_or_else(|p| p.into_inner())
                    };
                }
            };
            if let Some(shared) = shared {
                fill_once(&shared, &zeros);
            }
            if sweeper && last_sweep.elapsed() >= SWEEP_INTERVAL {
                self.sweep();
                last_sweep = Instant::now();
            }
        }
    }

    /// Releases every reserve idle for its `idle_release`; keeps the others listed.
    fn sweep(&self) {
        let listed = std::mem::take(&mut *self.holding.lock().unwrap_or_else(|p| p.into_inner()));
        let mut keep = Vec::new();
        for weak in listed {
            if weak
                .upgrade()
                .is_some_and(|shared| !release_if_idle(&shared))
            {
                keep.push(weak);
            }
        }
        self.holding
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(keep);
    }
}

/// Releases the reserve when it is idle: cuts the zeros after the writer's data and closes
/// the filler's handle. True when it holds nothing any more (it leaves the sweeper's list).
fn release_if_idle(shared: &Shared) -> bool {
    let mut st = shared.lock();
    if st.stop || st.target.is_none() {
        st.holding = false;
        return true;
    }
    let idle = st
        .last_activity
        .is_none_or(|t| t.elapsed() >= shared.idle_release);
    if st.filling || st.queued || !idle {
        return false;
    }
    let data_end = st.last_end;
    let Some(t) = st.target.as_mut() else {
        unreachable!("checked above")
    };
    if t.zeroed_end > data_end {
        // Everything past `data_end` is zeros the writer never wrote to (it writes at its end
        // only, and it has not written for `idle_release`; a write would have to take the
        // lock held here to reach past `zeroed_end`).
        // Without a handle of its own, one opened for the cut only (the sweeper's, one at a
        // time, closed at once: not counted in the slots).
        let cut = match &t.file {
            Some(f) => f.set_len(data_end).is_ok(),
            None => std::fs::OpenOptions::new()
                .write(true)
                .open(&t.path)
                .is_ok_and(|f| f.set_len(data_end).is_ok()),
        };
        if cut {
            t.zeroed_end = data_end;
        }
    }
    t.file = None;
    st.holding = false;
    true
}

impl ZeroReserve {
    /// A reserve filling chunks of up to `chunk_bytes` (0: disabled), released after
    /// `idle_release` without writes.
    pub fn new(chunk_bytes: u64, idle_release: Duration) -> ZeroReserve {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            chunk_bytes,
            idle_release,
        });
        ZeroReserve {
            chunk_bytes,
            shared,
        }
    }

    /// Puts the reserve on the sweeper's list (once).
    fn hold(&self, st: &mut State) {
        if !st.holding {
            st.holding = true;
            filler_pool().hold(&self.shared);
        }
    }

    /// Asks the filler pool for a fill (holding the state lock; queues this reserve once),
    /// opening the filler's handle first when it is closed.
    fn want_fill(&self, st: &mut State) {
        let Some(t) = st.target.as_mut() else {
            return;
        };
        if t.file.is_none() {
            // A handle of its own, opened anew rather than duplicated: an I/O error in the
            // filler's fsync then still reaches the writer's next fsync (error reporting is
            // per open file description), which panics as the crate's fsync policy demands.
            // Without a handle there is simply no reserve: writes extend the file. With every
            // slot taken, none for now: the next write asks again.
            match ReserveHandle::open(&t.path, &RESERVE_HANDLE_SLOTS) {
                HandleOpen::Opened(h) => t.file = Some(Arc::new(h)),
                HandleOpen::AtCapacity => return,
                HandleOpen::Failed => {
                    st.failed = true;
                    return;
                }
            }
        }
        self.hold(st);
        st.wanted = true;
        if !st.queued {
            st.queued = true;
            filler_pool().submit(Arc::clone(&self.shared));
        }
    }

    /// Starts reserving for the file at `path`, whose writer's data ends at `data_end` and
    /// whose current length is `file_len` (everything in between is zeros), never past
    /// `limit`. Replaces any previous file (after [`ZeroReserve::detach`] waited for its
    /// fill). Opens nothing: the filler's handle is opened for the first fill.
    pub fn attach(&self, path: &Path, data_end: u64, file_len: u64, limit: u64) {
        if self.chunk_bytes == 0 {
            return;
        }
        assert!(file_len >= data_end, "the file holds the data");
        self.detach();
        let mut st = self.shared.lock();
        st.target = Some(Target {
            path: path.to_path_buf(),
            file: None,
            zeroed_end: file_len,
            limit,
        });
        st.failed = false;
        st.wanted = false;
        st.last_end = data_end;
        st.last_activity = Some(Instant::now());
        if file_len > data_end {
            // Zeros left by a previous run: released with the rest when idle.
            self.hold(&mut st);
        }
    }

    /// Stops reserving: waits for a running fill to finish, then forgets the file. Call it
    /// before truncating, trimming or replacing the file.
    pub fn detach(&self) {
        let mut st = self.shared.lock();
        st.detaching = true;
        while st.filling {
            st = self
                .shared
                .changed
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        st.detaching = false;
        st.target = None;
        st.wanted = false;
    }

    /// Runs `write`, which writes file bytes below `end`, so that it never races the filler;
    /// asks for the next chunk when the reserve runs low.
    pub fn write_below<T>(&self, end: u64, write: impl FnOnce() -> T) -> T {
        if self.chunk_bytes == 0 {
            return write();
        }
        let mut st = self.shared.lock();
        let now = Instant::now();
        // Only a writer that is writing gets zeros ahead: one that wrote within
        // `idle_release` before this write (see the module docs).
        let warm = st
            .last_write
            .is_some_and(|t| now.duration_since(t) < self.shared.idle_release);
        st.last_write = Some(now);
        st.last_activity = Some(now);
        let no_fill = st.zeros_would_not_pay(end);
        let may_fill = warm && !no_fill;
        loop {
            let Some((zeroed_end, limit)) = st.target.as_ref().map(|t| (t.zeroed_end, t.limit))
            else {
                drop(st);
                return write();
            };
            if end <= zeroed_end {
                let low = zeroed_end - end < fill_bytes(self.chunk_bytes, zeroed_end) / 2
                    && zeroed_end < limit;
                if low && !st.filling && !st.failed && may_fill {
                    self.want_fill(&mut st);
                }
                drop(st);
                return write();
            }
            if st.filling {
                // The reserve ran out while the filler works right after it: its zeros
                // must land before our data does.
                st = self
                    .shared
                    .changed
                    .wait(st)
                    .unwrap_or_else(|p| p.into_inner());
                continue;
            }
            // Extend the file ourselves; holding the lock keeps the filler from starting
            // at the old end. (If the write fails, the filler may leave a hole before its
            // zeros: holes read as zeros, so that is only slower, never wrong.)
            let out = write();
            if let Some(t) = st.target.as_mut() {
                t.zeroed_end = end;
            }
            if end < limit && !st.failed && may_fill {
                self.want_fill(&mut st);
            }
            return out;
        }
    }
}

impl Drop for ZeroReserve {
    /// Stops filling: waits for a running fill, after which no filler touches the file.
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.stop = true;
        while st.filling {
            st = self
                .shared
                .changed
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        st.target = None;
    }
}

/// One fill of a queued reserve: zeroes one chunk past `zeroed_end` in steps of
/// [`FILL_STEP_BYTES`], syncing and publishing the new end after each step. Nothing when the
/// reserve stopped, lost its file or no longer wants a fill; stops after a step when the
/// reserve is stopped or detached meanwhile.
fn fill_once(shared: &Shared, zeros: &[u8]) {
    let mut st = shared.lock();
    st.queued = false;
    if st.stop {
        return;
    }
    let job = match (&st.target, st.wanted && !st.failed) {
        (Some(t), true) if t.zeroed_end < t.limit => t.file.as_ref().map(|f| {
            (
                Arc::clone(f),
                t.zeroed_end,
                t.limit
                    .min(t.zeroed_end + fill_bytes(shared.chunk_bytes, t.zeroed_end)),
            )
        }),
        _ => None,
    };
    st.wanted = false;
    let Some((file, from, to)) = job else {
        return;
    };
    st.filling = true;
    let mut step_from = from;
    loop {
        let step_to = to.min(step_from + FILL_STEP_BYTES);
        drop(st);
        // Syncing here, off the writer's path, is the point: the writer's own syncs then find
        // no new metadata to commit. A failed sync stops the reserve; the writer's own
        // fdatasync sees the same error and panics (see `attach`).
        let ok = write_zeros(&file, zeros, step_from, step_to)
            && crate::fs::fs()
                .sync_data(&file, Path::new("(zero reserve)"))
                .is_ok();
        st = shared.lock();
        let same_file = st
            .target
            .as_ref()
            .is_some_and(|t| t.file.as_ref().is_some_and(|f| Arc::ptr_eq(f, &file)));
        match st.target.as_mut() {
            Some(t) if same_file && ok => {
                assert_eq!(
                    t.zeroed_end, step_from,
                    "the writer extended the file during a fill"
                );
                t.zeroed_end = step_to;
            }
            _ => st.failed |= !ok,
        }
        // A writer waiting for zeros may go on now.
        shared.changed.notify_all();
        if !same_file || !ok || st.stop || st.detaching || step_to == to {
            break;
        }
        step_from = step_to;
    }
    st.filling = false;
    shared.changed.notify_all();
}

/// Writes zeros to `file` bytes `from..to`, flushing each piece to the device before the
/// next, so a concurrent fdatasync of the writer finds at most one piece of zeros to write
/// with its data. False when a write fails (the reserve then stops growing; partly written
/// zeros are harmless).
fn write_zeros(file: &File, zeros: &[u8], from: u64, to: u64) -> bool {
    let mut pos = from;
    while pos < to {
        let n = (to - pos).min(zeros.len() as u64) as usize;
        if crate::fs::fs()
            .write_all_at(file, Path::new("(zero reserve)"), &zeros[..n], pos)
            .is_err()
        {
            return false;
        }
        flush_range(file, pos, n as u64);
        pos += n as u64;
    }
    true
}

/// Starts and waits for writeback of a byte range (no cache flush, no metadata: the final
/// fdatasync does that). Only an optimisation, so failures are ignored here; the fdatasync
/// that follows reports (and panics on) real I/O errors.
fn flush_range(file: &File, pos: u64, len: u64) {
    use std::os::unix::io::AsRawFd;
    let (Ok(pos), Ok(len)) = (i64::try_from(pos), i64::try_from(len)) else {
        return;
    };
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: plain syscall on a file descriptor we own for the duration of the call; no
    // memory is passed.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), pos, len, flags);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;
    use std::time::{Duration, Instant};

    const IDLE: Duration = Duration::from_secs(600);

    #[test]
    fn filler_handles_are_bounded_and_a_closed_one_frees_its_slot() {
        static SLOTS: HandleSlots = HandleSlots::new(2);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment");
        File::create_new(&path).unwrap();
        let opened = |r: HandleOpen| match r {
            HandleOpen::Opened(h) => Some(h),
            _ => None,
        };
        let a = opened(ReserveHandle::open(&path, &SLOTS)).expect("first slot");
        let b = opened(ReserveHandle::open(&path, &SLOTS)).expect("second slot");
        assert_eq!(SLOTS.open(), 2);
        assert!(matches!(
            ReserveHandle::open(&path, &SLOTS),
            HandleOpen::AtCapacity
        ));
        drop(a);
        assert_eq!(SLOTS.open(), 1);
        let c = opened(ReserveHandle::open(&path, &SLOTS)).expect("a slot was freed");
        // A file that cannot be opened gives its slot back.
        assert!(matches!(
            ReserveHandle::open(&dir.path().join("missing"), &SLOTS),
            HandleOpen::AtCapacity
        ));
        drop((b, c));
        assert!(matches!(
            ReserveHandle::open(&dir.path().join("missing"), &SLOTS),
            HandleOpen::Failed
        ));
        assert_eq!(SLOTS.open(), 0);
    }

    fn zeroed_end(r: &ZeroReserve) -> Option<u64> {
        r.shared.lock().target.as_ref().map(|t| t.zeroed_end)
    }

    fn wait_for(r: &ZeroReserve, want: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while zeroed_end(r) != Some(want) {
            assert!(Instant::now() < deadline, "the filler never reached {want}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn writer_and_filler_never_overwrite_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create_new(&path).unwrap();
        let r = ZeroReserve::new(8192, IDLE);
        r.attach(&path, 0, 0, 1 << 20);
        let mut pos = 0u64;
        let mut expected = Vec::new();
        for i in 0..2000u32 {
            let data = vec![(i % 251) as u8 + 1; 100 + (i as usize % 700)];
            let end = pos + data.len() as u64;
            r.write_below(end, || file.write_all_at(&data, pos).unwrap());
            expected.extend_from_slice(&data);
            pos = end;
        }
        r.detach();
        let on_disk = std::fs::read(&path).unwrap();
        assert!(on_disk.len() as u64 >= pos);
        assert_eq!(&on_disk[..pos as usize], &expected[..]);
        assert!(on_disk[pos as usize..].iter().all(|&b| b == 0));
        assert!(on_disk.len() as u64 <= 1 << 20, "the limit holds");
    }

    #[test]
    fn a_writer_catching_up_with_fills_of_many_steps_keeps_its_bytes() {
        // Fills of up to 8 MiB run in 1 MiB steps; a writer of 64 KiB appends catches up with
        // them (and waits for a step) or extends the file itself between fills.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create_new(&path).unwrap();
        let r = ZeroReserve::new(8 << 20, IDLE);
        let limit = 24 << 20;
        r.attach(&path, 0, 0, limit);
        let mut pos = 0u64;
        let mut i = 0u32;
        while pos + (64 << 10) <= 20 << 20 {
            let data = vec![(i % 251) as u8 + 1; 64 << 10];
            let end = pos + data.len() as u64;
            r.write_below(end, || file.write_all_at(&data, pos).unwrap());
            pos = end;
            i += 1;
        }
        r.detach();
        let on_disk = std::fs::read(&path).unwrap();
        assert!(on_disk.len() as u64 >= pos && on_disk.len() as u64 <= limit);
        for (k, piece) in on_disk[..pos as usize].chunks(64 << 10).enumerate() {
            let want = (k as u32 % 251) as u8 + 1;
            assert!(
                piece.iter().all(|&b| b == want),
                "append {k} was overwritten"
            );
        }
        assert!(on_disk[pos as usize..].iter().all(|&b| b == 0));
    }

    #[test]
    fn fills_ahead_of_the_writer_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create_new(&path).unwrap();
        let r = ZeroReserve::new(4096, IDLE);
        r.attach(&path, 0, 0, 10_000);
        r.write_below(5, || file.write_all_at(&[7; 5], 0).unwrap());
        assert_eq!(zeroed_end(&r), Some(5), "the first write asks for no zeros");
        r.write_below(10, || file.write_all_at(&[7; 5], 5).unwrap());
        wait_for(&r, 4106);
        r.write_below(4000, || file.write_all_at(&[7; 3990], 10).unwrap());
        wait_for(&r, 8202);
        r.write_below(8000, || file.write_all_at(&[7; 4000], 4000).unwrap());
        wait_for(&r, 10_000);
        assert_eq!(file.metadata().unwrap().len(), 10_000);
    }

    #[test]
    fn a_fast_writer_pauses_the_filler() {
        let mut st = State::default();
        assert!(!st.zeros_would_not_pay(0), "no rate known yet");
        std::thread::sleep(RATE_WINDOW + Duration::from_millis(10));
        assert!(st.zeros_would_not_pay(100 << 20), "100 MiB in about 0.2 s");
        std::thread::sleep(RATE_WINDOW + Duration::from_millis(10));
        assert!(
            !st.zeros_would_not_pay((100 << 20) + 4096),
            "4 KiB in about 0.2 s"
        );
    }

    #[test]
    fn large_appends_pause_the_filler() {
        let mut st = State::default();
        assert!(!st.zeros_would_not_pay(256 << 10), "no size known yet");
        std::thread::sleep(RATE_WINDOW + Duration::from_millis(10));
        assert!(
            st.zeros_would_not_pay(512 << 10),
            "two appends of 256 KiB in about 0.2 s"
        );
        let mut end = 512 << 10;
        for _ in 0..9 {
            end += 16 << 10;
            assert!(st.zeros_would_not_pay(end), "the window is not over");
        }
        std::thread::sleep(RATE_WINDOW + Duration::from_millis(10));
        end += 16 << 10;
        assert!(
            !st.zeros_would_not_pay(end),
            "ten appends of 16 KiB in about 0.2 s"
        );
    }

    fn holds_a_handle(r: &ZeroReserve) -> bool {
        r.shared
            .lock()
            .target
            .as_ref()
            .is_some_and(|t| t.file.is_some())
    }

    #[test]
    fn an_idle_reserve_gives_its_zeros_and_its_handle_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create_new(&path).unwrap();
        let idle = Duration::from_millis(200);
        let r = ZeroReserve::new(4096, idle);
        r.attach(&path, 0, 0, 1 << 20);
        assert!(!holds_a_handle(&r), "attaching opens nothing");
        r.write_below(100, || file.write_all_at(&[1; 100], 0).unwrap());
        r.write_below(200, || file.write_all_at(&[2; 100], 100).unwrap());
        wait_for(&r, 200 + MIN_FILL_BYTES.min(4096));
        assert!(holds_a_handle(&r));
        let deadline = Instant::now() + idle + SWEEP_INTERVAL * 3;
        while file.metadata().unwrap().len() != 200 || holds_a_handle(&r) {
            assert!(
                Instant::now() < deadline,
                "the idle reserve was not released"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Writing again works, and a second write soon after brings the zeros back.
        r.write_below(300, || file.write_all_at(&[3; 100], 200).unwrap());
        r.write_below(400, || file.write_all_at(&[4; 100], 300).unwrap());
        wait_for(&r, 400 + 4096);
        let data = std::fs::read(&path).unwrap();
        for (i, chunk) in data[..400].chunks(100).enumerate() {
            assert!(chunk.iter().all(|&b| b == i as u8 + 1));
        }
        assert!(data[400..].iter().all(|&b| b == 0));
    }

    #[test]
    fn zeros_left_by_a_previous_run_are_cut_when_idle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create_new(&path).unwrap();
        file.write_all_at(&[5; 100], 0).unwrap();
        file.set_len(100 + 8192).unwrap();
        let r = ZeroReserve::new(4096, Duration::from_millis(100));
        r.attach(&path, 100, 100 + 8192, 1 << 20);
        let deadline = Instant::now() + Duration::from_millis(100) + SWEEP_INTERVAL * 3;
        while file.metadata().unwrap().len() != 100 {
            assert!(Instant::now() < deadline, "the zeros were not cut");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(zeroed_end(&r), Some(100));
        assert!(!holds_a_handle(&r));
    }

    #[test]
    fn disabled_reserve_writes_straight_through() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create_new(&path).unwrap();
        let r = ZeroReserve::new(0, IDLE);
        r.attach(&path, 0, 0, 1 << 20);
        r.write_below(5, || file.write_all_at(b"hello", 0).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"hello");
        let st = r.shared.lock();
        assert!(
            st.target.is_none() && !st.queued,
            "nothing attached, nothing queued"
        );
    }
}
