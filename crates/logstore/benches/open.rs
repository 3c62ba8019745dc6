//! Open time and peak memory for stores of 100 MB and 1 GB (5 GB with
//! `LOGSTORE_BENCH_LARGE=1`), after a clean close and after a crash with an unsynced tail.

#[path = "util.rs"]
mod util;

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, BenchmarkId, Criterion};
use logstore::{LogStore, StoreConfig, SyncPolicy};
use util::{batch, build_store, entries, label, large, proc_status_kib, reset_peak_rss, test_mode};

fn sizes() -> Vec<u64> {
    if test_mode() {
        vec![4 << 20, 16 << 20]
    } else if large() {
        vec![100 << 20, 1 << 30, 5 << 30]
    } else {
        vec![100 << 20, 1 << 30]
    }
}

fn config() -> StoreConfig {
    StoreConfig {
        segment_bytes: if test_mode() { 1 << 20 } else { 256 << 20 },
        sync_policy: SyncPolicy::Never,
        ..Default::default()
    }
}

fn open_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("open");
    g.sample_size(10).warm_up_time(Duration::from_millis(300));
    g.measurement_time(Duration::from_secs(2));
    println!(
        "\nopen time and memory (cache_bytes = {} MiB)",
        config().cache_bytes >> 20
    );
    for size in sizes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let t = Instant::now();
        build_store(&dir, size, &config());
        eprintln!("built {} store in {:.1?}", label(size), t.elapsed());

        // One measured open with memory figures.
        reset_peak_rss();
        let rss0 = proc_status_kib("VmRSS");
        let t = Instant::now();
        let s = LogStore::open(&dir, config()).unwrap();
        let took = t.elapsed();
        let peak = proc_status_kib("VmHWM").saturating_sub(rss0);
        println!(
            "{:>6} clean open: {:>8.2} ms, segments {}, tail scanned {} B, peak RSS growth {} KiB, index heap {} KiB",
            label(size),
            took.as_secs_f64() * 1e3,
            s.stats().segments,
            s.recovery_report().tail_bytes_scanned,
            peak,
            s.stats().index_bytes >> 10
        );
        drop(s);
        g.bench_function(BenchmarkId::new("clean", label(size)), |b| {
            b.iter(|| LogStore::open(&dir, config()).unwrap())
        });

        // Crash with an unsynced, un-checkpointed tail of 16 MiB (1 MiB in test mode).
        let tail: u64 = if test_mode() { 1 << 20 } else { 16 << 20 };
        {
            let mut s = LogStore::open(&dir, config()).unwrap();
            let payload = Bytes::from(batch(1024, 10, 0));
            let target = s.stats().total_bytes + tail;
            while s.stats().total_bytes < target {
                let es = entries(s.last_index() + 1, 64, &payload);
                s.append(&es).unwrap();
            }
            // dropped without sync or close: the tail is after the last checkpoint
        }
        // Measure the first open after the crash only (it writes a checkpoint when the
        // scanned tail is longer than checkpoint_bytes; here it is not).
        reset_peak_rss();
        let rss0 = proc_status_kib("VmRSS");
        let t = Instant::now();
        let s = LogStore::open(&dir, config()).unwrap();
        let took = t.elapsed();
        let peak = proc_status_kib("VmHWM").saturating_sub(rss0);
        println!(
            "{:>6} open after crash: {:>8.2} ms, tail scanned {} B, peak RSS growth {} KiB",
            label(size),
            took.as_secs_f64() * 1e3,
            s.recovery_report().tail_bytes_scanned,
            peak
        );
        drop(s);
        g.bench_function(BenchmarkId::new("with_16MiB_tail", label(size)), |b| {
            b.iter(|| LogStore::open(&dir, config()).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, open_bench);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
