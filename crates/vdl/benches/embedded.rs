//! The embedded API in-process: append latency (one append at a time, so the time per
//! iteration is the commit latency and elements/s the throughput of one writer) of 1 KiB
//! records in appends of 1 and 50, on a single-node log (one fsync) and on three in-process
//! nodes (fsync on a majority over loopback TCP); and tail throughput (reading 10,000 committed
//! 1 KiB records from a single-node log through [`vdl::Stream::tail`]).
//!
//! Run: `cargo bench -p vdl --bench embedded` (about a minute). With `--test` (as the test
//! command runs benches) each benchmark runs once.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use futures::StreamExt;
use vdl::{Log, Offset, Record, Stream};

const RECORD_BYTES: usize = 1024;
const TAIL_RECORDS: u64 = 10_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn records(n: usize) -> Vec<Record> {
    let value = bytes::Bytes::from(vec![b'x'; RECORD_BYTES]);
    (0..n).map(|_| Record::new(value.clone())).collect()
}

/// Appends `batch` records `iters` times, one append at a time; the elapsed time. When
/// leadership moves (in a cluster the leader rebalance may move it to the preferred replica),
/// the append goes on at the new leader (`logs`), a retry counted in the time.
async fn append_loop(logs: &[Log], stream: &mut Stream, batch: usize, iters: u64) -> Duration {
    let start = Instant::now();
    let mut done = 0;
    while done < iters {
        let outcome = if batch == 1 {
            stream.append(records(1).remove(0)).await.map(|_| ())
        } else {
            stream.append_batch(records(batch)).await.map(|_| ())
        };
        match outcome {
            Ok(()) => done += 1,
            Err(vdl::Error::NotLeader { .. } | vdl::Error::LeaderChanged { .. }) => {
                *stream = leader_of(logs, stream.name()).await;
            }
            Err(e) => panic!("append: {e}"),
        }
    }
    start.elapsed()
}

/// The log that leads partition 0 of `name` and has committed in its term.
async fn leader_of(logs: &[Log], name: &str) -> Stream {
    loop {
        for log in logs {
            let s = log.stream(name).await.expect("stream");
            if s.status(0).expect("status").leader_ready {
                return s;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn bench_append(c: &mut Criterion) {
    let rt = runtime();
    let root = tempfile::tempdir().expect("a temporary directory");
    let single = rt
        .block_on(Log::open_single(root.path().join("single")))
        .expect("open a single-node log");
    let dirs: Vec<PathBuf> = (1..=3)
        .map(|i| root.path().join(format!("node{i}")))
        .collect();
    let cluster = rt
        .block_on(Log::in_process_cluster(&dirs))
        .expect("start three nodes");
    let single_stream = rt.block_on(single.stream("bench")).expect("stream");
    let cluster_stream = rt.block_on(leader_of(&cluster, "bench"));
    let singles = [single.clone()];

    let mut group = c.benchmark_group("append_1KiB");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    let setups = [
        ("single", &singles[..], single_stream),
        ("3_nodes", &cluster[..], cluster_stream),
    ];
    for (setup, logs, mut stream) in setups {
        for batch in [1usize, 50] {
            group.throughput(Throughput::Elements(batch as u64));
            group.bench_function(BenchmarkId::new(setup, format!("batch_{batch}")), |b| {
                b.iter_custom(|iters| rt.block_on(append_loop(logs, &mut stream, batch, iters)));
            });
        }
    }
    group.finish();
    rt.block_on(async {
        single.shutdown().await;
        for log in &cluster {
            log.shutdown().await;
        }
    });
}

fn bench_tail(c: &mut Criterion) {
    let rt = runtime();
    let root = tempfile::tempdir().expect("a temporary directory");
    let log = rt
        .block_on(Log::open_single(root.path()))
        .expect("open a single-node log");
    let mut stream = rt.block_on(log.stream("tail")).expect("stream");
    let logs = [log.clone()];
    rt.block_on(append_loop(&logs, &mut stream, 50, TAIL_RECORDS / 50));

    let mut group = c.benchmark_group("tail_1KiB");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    group.throughput(Throughput::Bytes(TAIL_RECORDS * RECORD_BYTES as u64));
    group.bench_function(BenchmarkId::new("single", "10000_records"), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let mut tail = stream.tail(Offset::start(0));
                    for expected in 0..TAIL_RECORDS {
                        let r = tail.next().await.expect("a record").expect("no error");
                        assert_eq!(r.offset.offset, expected);
                    }
                }
                start.elapsed()
            })
        });
    });
    group.finish();
    rt.block_on(log.shutdown());
}

criterion_group!(benches, bench_append, bench_tail);
criterion_main!(benches);
