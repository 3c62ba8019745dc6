//! Read throughput by offset: cold (pages evicted with posix_fadvise DONTNEED before every
//! read), warm page cache, and from the tail cache; and the cost of an offset lookup as the
//! store grows (100 MB and 1 GB by default, plus 5 GB with `LOGSTORE_BENCH_LARGE=1`).

#[path = "util.rs"]
mod util;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use logstore::{LogStore, StoreConfig};
use rand::{Rng, SeedableRng};
use util::{build_store, evict_dir, label, large, test_mode};

const MAX_BYTES: u64 = 1 << 20;

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
        cache_bytes: 8 << 20,
        ..Default::default()
    }
}

struct Data {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    size: u64,
}

fn data_sets() -> Vec<Data> {
    sizes()
        .into_iter()
        .map(|size| {
            let tmp = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
            let dir = tmp.path().join("log");
            let t = Instant::now();
            build_store(&dir, size, &config());
            eprintln!("built {} store in {:.1?}", label(size), t.elapsed());
            Data {
                _tmp: tmp,
                dir,
                size,
            }
        })
        .collect()
}

fn reads(c: &mut Criterion) {
    let sets = data_sets();
    let mut g = c.benchmark_group("read_records");
    g.sample_size(20).warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    for d in &sets {
        let s = LogStore::open(&d.dir, config()).unwrap();
        let end = s.next_offset();
        let start = s.log_start_offset();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        g.throughput(Throughput::Bytes(MAX_BYTES));
        // Cold: evict the store's pages before every read, then read 1 MiB at a random offset.
        g.bench_function(BenchmarkId::new("cold_1MiB", label(d.size)), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    evict_dir(&d.dir);
                    let o = rng.gen_range(start..end.saturating_sub(20_000).max(start + 1));
                    let t = Instant::now();
                    let r = s.read_records(o, MAX_BYTES, end).unwrap();
                    // Touch the data so mmap pages are actually read.
                    let sum: u64 = r
                        .chunks
                        .iter()
                        .map(|c| c.iter().step_by(4096).map(|&x| u64::from(x)).sum::<u64>())
                        .sum();
                    std::hint::black_box(sum);
                    total += t.elapsed();
                }
                total
            })
        });
        g.bench_function(BenchmarkId::new("warm_1MiB", label(d.size)), |b| {
            b.iter(|| {
                let o = rng.gen_range(start..end.saturating_sub(20_000).max(start + 1));
                let r = s.read_records(o, MAX_BYTES, end).unwrap();
                std::hint::black_box(r.bytes)
            })
        });
        // Tail cache: the newest few MiB (the cache holds 8 MiB).
        let tail_start = end - 2000;
        g.bench_function(BenchmarkId::new("tail_cache_1MiB", label(d.size)), |b| {
            b.iter(|| {
                let o = rng.gen_range(tail_start..end - 1000);
                let r = s.read_records(o, MAX_BYTES, end).unwrap();
                std::hint::black_box(r.bytes)
            })
        });
    }
    g.finish();

    // Lookup cost: one small read (one batch) at a random offset, warm pages.
    let mut g = c.benchmark_group("offset_lookup");
    g.sample_size(20).warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    for d in &sets {
        let s = LogStore::open(&d.dir, config()).unwrap();
        let end = s.next_offset();
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        // Warm the indexes and pages of the whole store once.
        let mut o = s.log_start_offset();
        while o < end {
            o = s.read_records(o, 64 << 20, end).unwrap().next_offset;
        }
        g.bench_function(BenchmarkId::new("read_one_batch", label(d.size)), |b| {
            b.iter(|| {
                let o = rng.gen_range(0..end.saturating_sub(20_000).max(1));
                std::hint::black_box(s.read_records(o, 1, end).unwrap().bytes)
            })
        });
        g.bench_function(BenchmarkId::new("term", label(d.size)), |b| {
            let last = s.last_index();
            b.iter(|| {
                std::hint::black_box(
                    s.term(rng.gen_range(1..last.saturating_sub(10_000).max(2)))
                        .unwrap(),
                )
            })
        });
    }
    g.finish();
}

criterion_group!(benches, reads);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
