//! What idle log stores cost a process: opens many stores in a temporary directory (as a
//! node hosting that many partitions does), appends a few records to each, and prints the
//! resident memory, the open file descriptors, the memory-mapped segment files and the disk
//! used, at three points: right after the appends, after the stores sat idle, and after all
//! of them were dropped, reopened (a restart) and read back whole.
//!
//! The stores share one [`StoreResources`] as a node's do (a 128 MiB cache budget, at most
//! 1,024 open sealed segments, no cap per store below the budget, at most `--max-active`
//! active segments' descriptors, default 1,024) and, unless `--root-lock 0`, a [`RootLock`]
//! on the temporary directory instead of a `LOCK` descriptor per store.
//!
//! A measurement, not a test: it prints and asserts nothing about time.
//!
//! ```text
//! cargo run --release -p logstore --example idle_stores -- \
//!     [--stores 1000] [--records 5] [--record-bytes 1024] [--segment-bytes 268435456] \
//!     [--idle-ms 12000] [--dir PATH] [--max-active 1024] [--root-lock 1]
//! ```
//!
//! With a small `--segment-bytes` (e.g. 16384 and `--records 40`) every store has several
//! sealed segments, which shows whether descriptors grow with them.

#[path = "../benches/util.rs"]
mod util;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use logstore::{
    EntryKind, LogStore, NewEntry, RootLock, StoreConfig, StoreResources, SyncPolicy,
    DEFAULT_MAX_OPEN_ACTIVE_FILES, DEFAULT_MAX_OPEN_SEGMENT_FILES,
};

/// The server's default node-wide cache budget (`storage.cache_bytes`).
const CACHE_BUDGET_BYTES: u64 = 128 << 20;

struct Args {
    stores: usize,
    records: u64,
    record_bytes: usize,
    segment_bytes: u64,
    idle: Duration,
    dir: Option<PathBuf>,
    max_active: usize,
    root_lock: bool,
}

fn parse_args() -> Args {
    let mut a = Args {
        stores: 1000,
        records: 5,
        record_bytes: 1024,
        segment_bytes: StoreConfig::default().segment_bytes,
        idle: Duration::from_millis(12_000),
        dir: None,
        max_active: DEFAULT_MAX_OPEN_ACTIVE_FILES,
        root_lock: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let num = || -> u64 {
            value
                .parse()
                .unwrap_or_else(|_| panic!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--stores" => a.stores = num() as usize,
            "--records" => a.records = num(),
            "--record-bytes" => a.record_bytes = num() as usize,
            "--segment-bytes" => a.segment_bytes = num(),
            "--idle-ms" => a.idle = Duration::from_millis(num()),
            "--dir" => a.dir = Some(PathBuf::from(&value)),
            "--max-active" => a.max_active = num() as usize,
            "--root-lock" => a.root_lock = num() != 0,
            _ => panic!("unknown flag {flag}"),
        }
    }
    a
}

/// Raises the soft open-file limit to the hard one (as the server does at start), so the
/// "before" figures can be measured at all.
fn raise_nofile_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Memory maps of files under `dir`.
fn mapped_files(dir: &Path) -> usize {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&needle))
        .count()
}

/// (allocated bytes as `du` counts them, apparent bytes) of every file under `dir`.
fn disk_used(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut out = (0, 0);
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(m) = e.metadata() else { continue };
        if m.is_dir() {
            let (a, b) = disk_used(&e.path());
            out.0 += a;
            out.1 += b;
        } else {
            out.0 += m.blocks() * 512;
            out.1 += m.len();
        }
    }
    out
}

fn report(what: &str, dir: &Path, stores: usize, res: &StoreResources) {
    let rss_kib = util::proc_status_kib("VmRSS");
    let (du, apparent) = disk_used(dir);
    println!(
        "{what:<34} RSS {:>7.1} MiB | fds {:>6} | mapped segment files {:>6} | disk used {:>8.1} MiB ({:>6.1} KiB per store; apparent {:.1} MiB) | cached {:.1} MiB",
        rss_kib as f64 / 1024.0,
        open_fds(),
        mapped_files(dir),
        du as f64 / (1 << 20) as f64,
        du as f64 / 1024.0 / stores as f64,
        apparent as f64 / (1 << 20) as f64,
        res.cache_budget.used_bytes() as f64 / (1 << 20) as f64,
    );
}

fn config(a: &Args) -> StoreConfig {
    StoreConfig {
        segment_bytes: a.segment_bytes,
        // The server appends unsynced and syncs once per Raft Ready.
        sync_policy: SyncPolicy::Never,
        cache_bytes: CACHE_BUDGET_BYTES as usize,
        ..StoreConfig::default()
    }
}

fn open_all(a: &Args, root: &Path, res: &StoreResources) -> Vec<LogStore> {
    (0..a.stores)
        .map(|i| LogStore::open_shared(&root.join(format!("p{i}")), config(a), res).expect("open"))
        .collect()
}

fn main() {
    let a = parse_args();
    raise_nofile_limit();
    let tmp = match &a.dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .expect("temporary directory");
    let root = tmp.path().to_path_buf();
    println!(
        "{} stores, {} records of {} B each, segment_bytes {}, in {}",
        a.stores,
        a.records,
        a.record_bytes,
        a.segment_bytes,
        root.display()
    );
    let mut res = StoreResources::with_limits(
        CACHE_BUDGET_BYTES,
        DEFAULT_MAX_OPEN_SEGMENT_FILES,
        a.max_active,
    );
    if a.root_lock {
        res = res.with_root_lock(RootLock::acquire(&root).expect("root lock"));
    }
    report("process start", &root, a.stores, &res);

    let t0 = Instant::now();
    let mut stores = open_all(&a, &root, &res);
    report("opened (empty)", &root, a.stores, &res);
    let payload = Bytes::from(util::batch(a.record_bytes, 1, 0));
    for s in &mut stores {
        for _ in 0..a.records {
            let e = NewEntry {
                index: s.last_index() + 1,
                term: 1,
                kind: EntryKind::Records,
                payload: payload.clone(),
                context: Bytes::new(),
            };
            s.append(&[e]).expect("append");
            s.sync().expect("sync");
        }
    }
    println!("appends took {:.1} s", t0.elapsed().as_secs_f64());
    // Let the background zero-fill catch up before measuring.
    std::thread::sleep(Duration::from_millis(500));
    report("after the appends", &root, a.stores, &res);

    std::thread::sleep(a.idle);
    report(
        &format!("after {} ms idle", a.idle.as_millis()),
        &root,
        a.stores,
        &res,
    );

    drop(stores);
    let t1 = Instant::now();
    let stores = open_all(&a, &root, &res);
    let open_ms = t1.elapsed().as_secs_f64() * 1e3;
    report("reopened (a restart)", &root, a.stores, &res);
    let mut read_bytes = 0u64;
    for s in &stores {
        let mut lo = s.first_index();
        while lo <= s.last_index() {
            let es = s.entries(lo, s.last_index() + 1, 1 << 20).expect("entries");
            read_bytes += es.iter().map(|e| e.size()).sum::<u64>();
            lo += es.len() as u64;
        }
    }
    report("reopened and read back whole", &root, a.stores, &res);
    println!(
        "reopen of {} stores took {open_ms:.0} ms; read back {:.1} MiB",
        a.stores,
        read_bytes as f64 / (1 << 20) as f64
    );
}
