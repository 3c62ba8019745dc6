//! Shared helpers of the benchmarks (included with `#[path]`).
#![allow(dead_code, missing_docs)]

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use logstore::{EntryKind, LogStore, NewEntry, StoreConfig, SyncPolicy};

/// True when run to prove the benchmark works rather than to measure (each benchmark once,
/// tiny data): `cargo bench -- --test`, or started without `--bench`, as `cargo test
/// --benches` (the test script) runs it; criterion decides its own test mode the same way.
pub fn test_mode() -> bool {
    let mut args = std::env::args();
    args.any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench")
}

/// True when the 5 GB data sets are wanted (`LOGSTORE_BENCH_LARGE=1`).
pub fn large() -> bool {
    std::env::var("LOGSTORE_BENCH_LARGE").is_ok_and(|v| v == "1")
}

/// A magic-2 record batch of `len` bytes in total (at least 61) with `records` records.
pub fn batch(len: usize, records: u32, ts: i64) -> Vec<u8> {
    let len = len.max(61);
    let mut b = vec![0u8; len];
    b[8..12].copy_from_slice(&((len - 12) as i32).to_be_bytes());
    b[16] = 2;
    b[23..27].copy_from_slice(&((records - 1) as i32).to_be_bytes());
    b[27..35].copy_from_slice(&ts.to_be_bytes());
    b[35..43].copy_from_slice(&ts.to_be_bytes());
    b[57..61].copy_from_slice(&(records as i32).to_be_bytes());
    for (i, x) in b[61..].iter_mut().enumerate() {
        *x = (i * 31 % 251) as u8;
    }
    b
}

/// `n` Records entries starting at `first`, each one batch of `size` bytes.
pub fn entries(first: u64, n: usize, payload: &Bytes) -> Vec<NewEntry> {
    (0..n as u64)
        .map(|i| NewEntry {
            index: first + i,
            term: 1,
            kind: EntryKind::Records,
            payload: payload.clone(),
            context: Bytes::new(),
        })
        .collect()
}

/// Fills a store at `dir` with `bytes` of 1 KiB entries (10 records each), closes it.
pub fn build_store(dir: &Path, bytes: u64, cfg: &StoreConfig) {
    let mut cfg = cfg.clone();
    cfg.sync_policy = SyncPolicy::Never;
    let mut s = LogStore::open(dir, cfg).unwrap();
    let payload = Bytes::from(batch(1024, 10, 0));
    let mut ts = 0i64;
    while s.stats().total_bytes < bytes {
        let first = s.last_index() + 1;
        let mut es = entries(first, 256, &payload);
        for e in &mut es {
            ts += 1;
            e.payload = Bytes::from(batch(1024, 10, ts));
        }
        s.append(&es).unwrap();
    }
    s.close().unwrap();
}

/// Evicts a file's pages from the page cache (works without root for clean pages).
pub fn evict(path: &Path) {
    use std::os::unix::io::AsRawFd;
    if let Ok(f) = std::fs::File::open(path) {
        // SAFETY: advisory call on a descriptor we own.
        unsafe {
            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        }
    }
}

/// Evicts every file of a directory from the page cache.
pub fn evict_dir(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        evict(&e.unwrap().path());
    }
}

/// Percentile of sorted durations.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// A value of /proc/self/status in KiB (VmRSS, VmHWM).
pub fn proc_status_kib(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Resets VmHWM to the current RSS (Linux >= 4.0).
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Human size label.
pub fn label(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{}GB", bytes >> 30)
    } else {
        format!("{}MB", bytes >> 20)
    }
}
