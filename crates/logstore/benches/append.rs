//! Append throughput (100 B / 1 KiB / 4 KiB entries in batches of 1 / 10 / 50) under the
//! `never` and `always` policies, and the synced-append latency distribution next to the raw
//! fdatasync latency of a plain file on the same disk, measured in the same run.

#[path = "util.rs"]
mod util;

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use logstore::{LogStore, StoreConfig, SyncPolicy};
use util::{batch, entries, pct, test_mode};

const SIZES: [usize; 3] = [100, 1024, 4096];
const BATCHES: [usize; 3] = [1, 10, 50];

fn bench_config(policy: SyncPolicy) -> StoreConfig {
    StoreConfig {
        sync_policy: policy,
        segment_bytes: 64 << 20,
        ..Default::default()
    }
}

fn append_bench(c: &mut Criterion, name: &str, policy: SyncPolicy) {
    let mut g = c.benchmark_group(name);
    g.sample_size(10).warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(if policy == SyncPolicy::Never {
        2
    } else {
        3
    }));
    for size in SIZES {
        for n in BATCHES {
            g.throughput(Throughput::Elements(n as u64));
            let id = BenchmarkId::new(format!("{size}B"), format!("batch{n}"));
            g.bench_function(id, |b| {
                let tmp = tempfile::tempdir().unwrap();
                let mut s = LogStore::open(tmp.path(), bench_config(policy)).unwrap();
                let payload = Bytes::from(batch(size, 1, 0));
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let es = entries(s.last_index() + 1, n, &payload);
                        let t = Instant::now();
                        s.append(&es).unwrap();
                        total += t.elapsed();
                        if s.stats().total_bytes > 256 << 20 {
                            // Keep the disk footprint bounded (not timed).
                            let last = s.last_index();
                            s.delete_prefix(last).unwrap();
                        }
                    }
                    total
                });
            });
        }
    }
    g.finish();
}

fn append_never(c: &mut Criterion) {
    append_bench(c, "append_never", SyncPolicy::Never);
}

fn append_always(c: &mut Criterion) {
    append_bench(c, "append_always", SyncPolicy::Always);
}

/// Raw baseline: append `size` bytes to a plain file and fdatasync it.
fn raw_fdatasync(c: &mut Criterion) {
    let mut g = c.benchmark_group("raw_fdatasync");
    g.sample_size(10).warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    for size in SIZES {
        g.bench_function(format!("{size}B"), |b| {
            let tmp = tempfile::tempdir().unwrap();
            let mut f = std::fs::File::create(tmp.path().join("plain")).unwrap();
            let data = vec![7u8; size];
            b.iter(|| {
                f.write_all(&data).unwrap();
                f.sync_data().unwrap();
            });
        });
    }
    g.finish();
}

/// Latency distribution of synced appends vs raw fdatasync, interleaved in one run so both
/// see the same disk conditions. Printed as a table (p50/p99 in microseconds).
fn latency_report() {
    let n = if test_mode() { 20 } else { 2000 };
    println!("\nsynced append latency vs raw fdatasync ({n} samples each, interleaved)");
    println!(
        "{:>6} {:>6} | {:>10} {:>10} | {:>10} {:>10} | {:>9}",
        "size", "batch", "raw p50", "raw p99", "store p50", "store p99", "p50 ratio"
    );
    for size in SIZES {
        for nb in BATCHES {
            let tmp = tempfile::tempdir().unwrap();
            let mut s =
                LogStore::open(&tmp.path().join("log"), bench_config(SyncPolicy::Always)).unwrap();
            let mut f = std::fs::File::create(tmp.path().join("plain")).unwrap();
            let payload = Bytes::from(batch(size, 1, 0));
            let raw_data = vec![7u8; (size + logstore::ENTRY_OVERHEAD_BYTES) * nb];
            let (mut raw, mut store) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for _ in 0..n {
                let t = Instant::now();
                f.write_all(&raw_data).unwrap();
                f.sync_data().unwrap();
                raw.push(t.elapsed());
                let es = entries(s.last_index() + 1, nb, &payload);
                let t = Instant::now();
                s.append(&es).unwrap();
                store.push(t.elapsed());
            }
            raw.sort();
            store.sort();
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            println!(
                "{:>6} {:>6} | {:>10.1} {:>10.1} | {:>10.1} {:>10.1} | {:>9.2}",
                size,
                nb,
                us(pct(&raw, 0.5)),
                us(pct(&raw, 0.99)),
                us(pct(&store, 0.5)),
                us(pct(&store, 0.99)),
                us(pct(&store, 0.5)) / us(pct(&raw, 0.5)),
            );
        }
    }
    println!();
}

criterion_group!(benches, raw_fdatasync, append_never, append_always);

fn main() {
    latency_report();
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
