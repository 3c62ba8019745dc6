//! A property test of compaction against a model of "the latest value per key" (issue 35):
//! seeded random sequences of appends (keyed records, tombstones, Noop entries), segment
//! rolls, compaction passes (random clean limit, key map size, tombstone retention and
//! tombstone limit),
//! clean reopens, crashes at a random file-system call of an append, a roll or a pass
//! (followed by a power cut that drops every write not fsynced, torn or not), and repairs (a
//! flipped bit in a sealed segment, found by the scrubber, the log cut before it and the range
//! written again from a mirror replica that compacts on its own schedule, as Raft re-sends
//! it). After every step: every key's latest value is readable at its original offset, every
//! record read is as produced with offsets strictly increasing, no older record of a key is
//! visible without its latest one (no deleted key comes back), a tombstone goes only once
//! a pass's delete horizon passed it, nothing acknowledged is lost, and the Raft log (index,
//! term, kind, offsets, record count, context of every entry) is the mirror's.
//!
//! Deterministic per seed: `LOGSTORE_MODEL_SEED=n` runs one seed, `LOGSTORE_MODEL_SEEDS=n`
//! that many (default 40, at most 60 s); a failure names its seed and step. One test in this
//! binary: the crashing file system is the process's.

mod common;

use std::io;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::compaction_util::*;
use common::kv_codec::{kv_batch, KvCodec};
use logstore::{CompactionPlan, EntryKind, FaultInjectingFs, FileSystem, LogStore, NewEntry};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: u8 = 10;
const STEPS: usize = 80;

/// The panic payload of a simulated crash.
struct Crash;

/// A `FaultInjectingFs` (journaling, for the power cut) that "crashes" at its k-th call once
/// armed: panics (unwinding out of the store, which the test then forgets as a killed
/// process's), and does nothing at all afterwards until revived.
struct CrashingFs {
    inner: FaultInjectingFs,
    countdown: AtomicI64,
    dead: AtomicBool,
}

impl CrashingFs {
    /// Whether the call goes ahead; panics with [`Crash`] at the armed call.
    fn step(&self) -> bool {
        if self.dead.load(Ordering::SeqCst) {
            return false;
        }
        if self.countdown.fetch_sub(1, Ordering::SeqCst) == 0 {
            self.dead.store(true, Ordering::SeqCst);
            std::panic::panic_any(Crash);
        }
        true
    }

    fn arm(&self, at: i64) {
        self.dead.store(false, Ordering::SeqCst);
        self.countdown.store(at, Ordering::SeqCst);
    }

    fn disarm(&self) {
        self.dead.store(false, Ordering::SeqCst);
        self.countdown.store(i64::MAX, Ordering::SeqCst);
    }
}

impl FileSystem for CrashingFs {
    fn write_all_at(
        &self,
        file: &std::fs::File,
        path: &Path,
        buf: &[u8],
        pos: u64,
    ) -> io::Result<()> {
        if !self.step() {
            return Ok(());
        }
        self.inner.write_all_at(file, path, buf, pos)
    }
    fn sync_data(&self, file: &std::fs::File, path: &Path) -> io::Result<()> {
        if !self.step() {
            return Ok(());
        }
        self.inner.sync_data(file, path)
    }
    fn sync_all(&self, file: &std::fs::File, path: &Path) -> io::Result<()> {
        if !self.step() {
            return Ok(());
        }
        self.inner.sync_all(file, path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if !self.step() {
            return Ok(());
        }
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        if !self.step() {
            return Ok(());
        }
        self.inner.remove_file(path)
    }
}

/// One seed's world: the store under test, a mirror replica that never crashes (the healthy
/// copy a repair fetches from; it compacts on its own), and the model.
struct World<'a> {
    fs: &'a CrashingFs,
    control: &'a Path,
    dir: PathBuf,
    store: Option<LogStore>,
    mirror: LogStore,
    m: Model,
    ts: i64,
    /// The highest delete horizon of any pass on either replica: tombstones younger than it
    /// must stay.
    max_horizon: i64,
    /// Per replica (store, mirror): the offset below which records may be gone. A pass
    /// removes only records of sealed segments, all below the active segment's first offset
    /// when it starts; a repair copies the mirror's (compacted) entries, so the store's bound
    /// rises to the mirror's; a cut can make a compacted segment the active one again, so
    /// the active segment's first offset is not that bound. At or above it every keyed
    /// record is still there.
    compacted_below: [u64; 2],
    counts: Counts,
}

#[derive(Default, Debug)]
struct Counts {
    crashes: u32,
    passes: u32,
    removed: u64,
    repairs: u32,
}

impl World<'_> {
    fn s(&mut self) -> &mut LogStore {
        self.store.as_mut().expect("open")
    }

    /// Runs `op` on the store with the file system armed to crash at call `at` (`None`:
    /// never). On a crash: the store is forgotten as a killed process's, a power cut drops
    /// what was not fsynced, and the store is opened again. True: it crashed.
    fn crashable<T>(
        &mut self,
        at: Option<i64>,
        rng: &mut StdRng,
        op: impl FnOnce(&mut LogStore) -> T,
    ) -> bool {
        if let Some(at) = at {
            self.fs.arm(at);
        }
        let store = self.store.as_mut().expect("open");
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            op(store);
        }));
        self.fs.disarm();
        match r {
            Ok(()) => false,
            Err(p) if p.is::<Crash>() => {
                std::mem::forget(self.store.take());
                self.power_cut(rng);
                self.counts.crashes += 1;
                true
            }
            Err(p) => std::panic::resume_unwind(p),
        }
    }

    fn power_cut(&mut self, rng: &mut StdRng) {
        logstore::simulate_power_cut(self.control, rng.gen_bool(0.5)).unwrap();
        // A killed process's `flock` goes with it; the forgotten store still holds its
        // descriptor, so the lock file is replaced (a new inode, unlocked).
        std::fs::remove_file(self.dir.join("LOCK")).unwrap();
        self.store = Some(LogStore::open(&self.dir, small_cfg()).expect("open after a crash"));
    }

    /// An entry of `recs` (key number, tombstone) at the next index.
    fn produce(&mut self, recs: &[(u8, bool)], crash_at: Option<i64>, rng: &mut StdRng) {
        let batch: Vec<_> = recs
            .iter()
            .map(|(k, tomb)| {
                self.ts += 1;
                let value = format!("v{}", self.ts);
                rec(&format!("k{k}"), (!tomb).then_some(value.as_str()), self.ts)
            })
            .collect();
        let index = self.mirror.last_index() + 1;
        let entry = NewEntry {
            index,
            term: 1 + index / 30,
            kind: EntryKind::Records,
            payload: Bytes::from(kv_batch(&batch)),
            context: Bytes::from(format!("ctx{index}")),
        };
        let first = self.mirror.next_offset();
        let e = entry.clone();
        let crashed = self.crashable(crash_at, rng, move |s| {
            s.append(std::slice::from_ref(&e)).unwrap();
        });
        // Acknowledged (the append returned) or, after a crash, durable anyway: it stays.
        let kept = self.s().last_index() == index;
        assert!(
            kept || (crashed && self.s().last_index() == index - 1),
            "an acknowledged entry lost: last index {}, appended {index}",
            self.s().last_index()
        );
        if kept {
            self.mirror.append(&[entry]).unwrap();
            for (i, r) in batch.iter().enumerate() {
                let o = first + i as u64;
                self.m.all.insert(o, (r.key.clone(), r.value.clone(), r.ts));
                self.m.latest.insert(r.key.clone().unwrap(), o);
            }
        }
    }

    fn noop(&mut self) {
        let index = self.mirror.last_index() + 1;
        let e = NewEntry {
            index,
            term: 1 + index / 30,
            kind: EntryKind::Noop,
            payload: Bytes::new(),
            context: Bytes::new(),
        };
        self.s().append(std::slice::from_ref(&e)).unwrap();
        self.mirror.append(&[e]).unwrap();
    }

    /// A random pass plan over `s`: clean limit, key map size, tombstone retention.
    fn random_plan(&mut self, s_last: u64, rng: &mut StdRng) -> CompactionPlan {
        let retention = match rng.gen_range(0..3) {
            0 => 0,
            1 => 1 << 40,
            _ => rng.gen_range(0..=(self.ts - 1_000).max(0)),
        };
        let now_ms = self.ts + 1;
        self.max_horizon = self.max_horizon.max(now_ms - retention);
        // No bound, a follower's (every tombstone stays), or one inside the log: keeping
        // more tombstones breaks none of the checks.
        let tombstone_limit = match rng.gen_range(0..3) {
            0 => u64::MAX,
            1 => 0,
            _ => rng.gen_range(0..s_last + 2),
        };
        CompactionPlan {
            clean_limit: 1 + s_last * rng.gen_range(0..=100) / 100,
            now_ms,
            min_compaction_lag_ms: 0,
            delete_retention_ms: retention,
            tombstone_limit,
            key_map_bytes: 24 * rng.gen_range(3..16),
        }
    }

    fn compact(&mut self, crash_at: Option<i64>, rng: &mut StdRng) {
        let last = self.s().last_index();
        let p = self.random_plan(last, rng);
        // Raised before the pass: a crash in it may still have swapped segments in.
        self.compacted_below[0] = self.compacted_below[0].max(active_first(self.s()));
        let mut removed = 0;
        let crashed = self.crashable(crash_at, rng, |s| {
            removed = s
                .compact(&p, &KvCodec, &mut no_throttle())
                .unwrap()
                .records_removed;
        });
        self.counts.passes += u32::from(!crashed);
        self.counts.removed += removed;
    }

    fn compact_mirror(&mut self, rng: &mut StdRng) {
        let last = self.mirror.last_index();
        let p = self.random_plan(last, rng);
        self.compacted_below[1] = self.compacted_below[1].max(active_first(&self.mirror));
        self.mirror
            .compact(&p, &KvCodec, &mut no_throttle())
            .unwrap();
    }

    /// A flipped bit in a random sealed segment: the scrubber finds it, the log is cut
    /// before it and the range comes back from the mirror with its record counts.
    fn repair(&mut self, rng: &mut StdRng) {
        let bases = self.s().sealed_segment_bases();
        if bases.is_empty() {
            return;
        }
        let base = bases[rng.gen_range(0..bases.len())];
        let path = self.dir.join(format!("{base:020}.log"));
        let len = std::fs::metadata(&path).unwrap().len();
        flip(&path, rng.gen_range(64..len));
        let mut found = None;
        for b in self.s().sealed_segment_bases() {
            let t = self.s().scrub_target(b).unwrap().unwrap();
            if let Some((index, _, _)) = t.verify(|_| {}).damage {
                found = Some((b, index));
                break;
            }
        }
        let (b, index) = found.expect("the scrubber finds the flipped bit");
        assert_eq!(b, base, "found in the flipped segment");
        self.s().report_damage(index);
        let suspect = self.s().damaged_from().unwrap();
        let marker = self.s().repair(suspect).unwrap().expect("a cut");
        assert!(marker.first_bad_index >= base && marker.first_bad_index <= index);
        assert_eq!(self.s().last_index(), marker.first_bad_index - 1);
        let from = self.s().last_index() + 1;
        let entries = self
            .mirror
            .entries(from, self.mirror.last_index() + 1, u64::MAX)
            .unwrap();
        append_as_follower(self.s(), &entries, 5);
        self.compacted_below[0] = self.compacted_below[0].max(self.compacted_below[1]);
        self.s().finish_repair().unwrap();
        self.counts.repairs += 1;
    }

    fn check(&mut self) {
        let s = self.store.as_ref().expect("open");
        assert_eq!(entry_shape(s), entry_shape(&self.mirror), "the Raft log");
        let replicas = [("store", s), ("mirror", &self.mirror)];
        for ((who, st), kept_from) in replicas.into_iter().zip(self.compacted_below) {
            let read = read_all(st);
            check_latest(&self.m, &read, kept_from);
            // A tombstone younger than every horizon so far is still there.
            for o in self.m.latest.values() {
                let (_, v, ts) = &self.m.all[o];
                if v.is_none() && *ts >= self.max_horizon {
                    assert!(
                        read.iter().any(|x| x.0 == *o),
                        "{who}: tombstone at {o} (ts {ts}) gone before the horizon {}",
                        self.max_horizon
                    );
                }
            }
        }
    }
}

/// The first offset of `s`'s active segment.
fn active_first(s: &LogStore) -> u64 {
    s.segment_summaries().pop().unwrap().first_offset
}

/// One flipped bit of `path` at `at`, synced.
fn flip(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 1 << (at % 8);
    f.write_all_at(&b, at).unwrap();
    f.sync_all().unwrap();
}

fn small_cfg() -> logstore::StoreConfig {
    logstore::StoreConfig {
        segment_bytes: 1024,
        ..cfg()
    }
}

/// Names the seed and step of a failing run.
struct Where(u64, usize, &'static str);

impl Drop for Where {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "compaction_model failed: seed {} step {} ({}); run again with LOGSTORE_MODEL_SEED={}",
                self.0, self.1, self.2, self.0
            );
        }
    }
}

fn run_seed(fs: &CrashingFs, control: &Path, seed: u64) -> Counts {
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let mut w = World {
        fs,
        control,
        store: Some(LogStore::open(&dir, small_cfg()).unwrap()),
        dir,
        mirror: LogStore::open(&tmp.path().join("mirror"), small_cfg()).unwrap(),
        m: Model::default(),
        ts: 1_000,
        max_horizon: i64::MIN,
        compacted_below: [0, 0],
        counts: Counts::default(),
    };
    let mut at = Where(seed, 0, "");
    for step in 0..STEPS {
        at.1 = step;
        let crash_at =
            |rng: &mut StdRng, p: f64, k: i64| rng.gen_bool(p).then(|| rng.gen_range(0..k));
        match rng.gen_range(0..100) {
            0..=44 => {
                at.2 = "produce";
                let recs: Vec<(u8, bool)> = (0..rng.gen_range(1..6))
                    .map(|_| (rng.gen_range(0..KEYS), rng.gen_bool(0.2)))
                    .collect();
                let c = crash_at(&mut rng, 0.1, 8);
                w.produce(&recs, c, &mut rng);
            }
            45..=49 => {
                at.2 = "noop";
                w.noop();
            }
            50..=59 => {
                at.2 = "roll";
                let c = crash_at(&mut rng, 0.2, 8);
                let now = u64::try_from(w.ts).unwrap();
                w.crashable(c, &mut rng, |s| {
                    s.roll_if_older_than(Duration::ZERO, now).unwrap();
                });
            }
            60..=79 => {
                at.2 = "compact";
                let c = crash_at(&mut rng, 0.3, 40);
                w.compact(c, &mut rng);
            }
            80..=84 => {
                at.2 = "compact the mirror";
                w.compact_mirror(&mut rng);
            }
            85..=89 => {
                at.2 = "reopen";
                drop(w.store.take());
                w.store = Some(LogStore::open(&w.dir, small_cfg()).unwrap());
            }
            90..=94 => {
                at.2 = "crash";
                std::mem::forget(w.store.take());
                w.power_cut(&mut rng);
            }
            _ => {
                at.2 = "repair";
                w.repair(&mut rng);
            }
        }
        w.check();
    }
    std::mem::forget(at);
    w.counts
}

#[test]
fn random_sequences_against_a_model_of_the_latest_value_per_key() {
    let tmp = tempfile::tempdir().unwrap();
    let control = tmp.path().join("faults");
    let fs = Arc::new(CrashingFs {
        inner: FaultInjectingFs::new(&control).unwrap(),
        countdown: AtomicI64::new(i64::MAX),
        dead: AtomicBool::new(false),
    });
    assert!(logstore::install_file_system(fs.clone()));
    // Simulated crashes unwind with a `Crash` payload: not worth a message each.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.payload().is::<Crash>() {
            default_hook(info);
        }
    }));
    let seeds: Vec<u64> = match std::env::var("LOGSTORE_MODEL_SEED") {
        Ok(s) => vec![s.parse().expect("a seed number")],
        Err(_) => {
            let n = std::env::var("LOGSTORE_MODEL_SEEDS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(40u64);
            (1..=n).collect()
        }
    };
    let started = Instant::now();
    let mut total = Counts::default();
    let mut ran = 0;
    for seed in seeds {
        if started.elapsed() > Duration::from_secs(60) {
            break;
        }
        let c = run_seed(&fs, &control, seed);
        total.crashes += c.crashes;
        total.passes += c.passes;
        total.removed += c.removed;
        total.repairs += c.repairs;
        ran += 1;
    }
    println!(
        "{ran} seeds of {STEPS} steps in {:?}: {total:?}",
        started.elapsed()
    );
    assert!(ran >= 1);
    if ran >= 20 {
        assert!(
            total.crashes > 10 && total.passes > 50 && total.removed > 0 && total.repairs > 5,
            "{total:?}"
        );
    }
}
