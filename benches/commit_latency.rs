//! Propose-to-commit latency and committed entries/s on a real 3-node cluster on this machine
//! (three nodes in this process, talking over loopback TCP, each with its own data directory and
//! fsync on every commit), for 1 KiB records in appends of 1 and 50 records, with the pipeline
//! and group commit each on and off; next to the raw append+fdatasync latency of a plain file
//! on the same disk, measured in the same run.
//!
//! Run: `cargo bench -p vdl-benches --bench commit_latency` (about a minute on 2 cores).
//! `VDL_BENCH_SECONDS` sets the seconds per cell (default 3). With `--test`, or
//! without `--bench` (as `cargo test --benches` in CI runs it), every cell runs for a moment, to
//! prove the benchmark works.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use kafka_proto::records::{build_batch, Compression, NewRecord};
use vdl_server::config::{Member, NodeConfig, RaftTiming};
use vdl_server::Node;

const STREAM: &str = "bench";

struct Cell {
    records_per_append: u32,
    writers: usize,
    pipeline: bool,
    group_commit: bool,
}

fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

fn configs(root: &Path, pipeline: bool, group_commit: bool) -> Vec<NodeConfig> {
    let ports = free_ports(6);
    let members: Vec<Member> = (0..3)
        .map(|i| Member {
            name: format!("vdl{}", i + 1),
            id: i as u64 + 1,
            peer_addr: ([127, 0, 0, 1], ports[i]).into(),
        })
        .collect();
    (0..3)
        .map(|i| {
            let mut c = NodeConfig::single_node_default();
            c.id = i as u64 + 1;
            c.name = members[i].name.clone();
            c.data_dir = root.join(format!("node{}", i + 1));
            c.peer_listen = members[i].peer_addr;
            c.kafka_listen = ([127, 0, 0, 1], ports[3 + i]).into();
            c.members = members.clone();
            c.raft = RaftTiming {
                tick: Duration::from_millis(10),
                heartbeat: Duration::from_millis(50),
                election_timeout: Duration::from_millis(500),
                pipeline,
                group_commit,
                ..RaftTiming::default()
            };
            c.initial_streams = vec![STREAM.into()];
            c
        })
        .collect()
}

fn batch_of(records: u32) -> Bytes {
    let value = Bytes::from(vec![b'x'; 1024]);
    let recs: Vec<NewRecord> = (0..records)
        .map(|_| NewRecord::new(1_700_000_000_000, value.clone()))
        .collect();
    build_batch(Compression::None, &recs).unwrap()
}

struct CellResult {
    hist: Histogram<u64>,
    appends: u64,
    seconds: f64,
}

async fn run_cell(cell: &Cell, run_for: Duration) -> CellResult {
    let dir = tempfile::tempdir_in(std::env::var("VDL_BENCH_DIR").unwrap_or_else(|_| ".".into()))
        .unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let mut nodes = Vec::new();
    for c in configs(dir.path(), cell.pipeline, cell.group_commit) {
        nodes.push(Node::start(c).await.unwrap());
    }
    let leader = loop {
        if let Some(n) = nodes
            .iter()
            .find(|n| n.stream(STREAM).unwrap().visible().leader == n.config().id)
        {
            break n.stream(STREAM).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let batch = batch_of(cell.records_per_append);
    let span = cell.records_per_append;
    // Warm up: one round trip per writer.
    leader
        .append(batch.clone(), span, Duration::from_secs(5))
        .await
        .unwrap();
    let start = Instant::now();
    let deadline = start + run_for;
    let mut tasks = Vec::new();
    for _ in 0..cell.writers {
        let s = leader.clone();
        let b = batch.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
            let mut n = 0u64;
            while Instant::now() < deadline {
                let t = Instant::now();
                s.append(b.clone(), span, Duration::from_secs(10))
                    .await
                    .unwrap();
                h.record(t.elapsed().as_micros() as u64).unwrap();
                n += 1;
            }
            (h, n)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut appends = 0;
    for t in tasks {
        let (h, n) = t.await.unwrap();
        hist.add(h).unwrap();
        appends += n;
    }
    let seconds = start.elapsed().as_secs_f64();
    for n in &nodes {
        n.shutdown();
    }
    drop(nodes);
    CellResult {
        hist,
        appends,
        seconds,
    }
}

/// p50/p99 of a 1 KiB append + fdatasync on a plain file in `dir`.
fn raw_fdatasync(dir: &Path, iterations: usize) -> Histogram<u64> {
    let path = dir.join("raw-fdatasync.bin");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let buf = vec![7u8; 1024 + 100];
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut pos = 0u64;
    for _ in 0..iterations {
        let t = Instant::now();
        f.write_all_at(&buf, pos).unwrap();
        f.sync_data().unwrap();
        h.record(t.elapsed().as_micros() as u64).unwrap();
        pos += buf.len() as u64;
    }
    let _ = std::fs::remove_file(&path);
    h
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn main() {
    // `cargo bench` passes `--bench`; started any other way (`cargo test --benches`, as the
    // test script runs it) or with `--test`, every cell runs only for a moment.
    let test_mode =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let seconds: f64 = std::env::var("VDL_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let run_for = if test_mode {
        Duration::from_millis(200)
    } else {
        Duration::from_secs_f64(seconds)
    };
    let bench_dir = std::env::var("VDL_BENCH_DIR").unwrap_or_else(|_| ".".into());
    let raw = raw_fdatasync(Path::new(&bench_dir), if test_mode { 50 } else { 2000 });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "raw 1 KiB append + fdatasync on {bench_dir}: p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms",
        ms(raw.value_at_quantile(0.5)),
        ms(raw.value_at_quantile(0.99)),
        ms(raw.value_at_quantile(0.999))
    )
    .unwrap();
    writeln!(
        out,
        "| records/append | writers | pipeline | group commit | appends/s | records/s | p50 ms | p99 ms | p99.9 ms |"
    )
    .unwrap();
    writeln!(out, "|---|---|---|---|---|---|---|---|---|").unwrap();
    for records in [1u32, 50] {
        for writers in [1usize, 16] {
            for (pipeline, group_commit) in [(true, true), (false, true), (true, false)] {
                let cell = Cell {
                    records_per_append: records,
                    writers,
                    pipeline,
                    group_commit,
                };
                let r = rt.block_on(run_cell(&cell, run_for));
                let aps = r.appends as f64 / r.seconds;
                writeln!(
                    out,
                    "| {records} | {writers} | {} | {} | {:.0} | {:.0} | {:.3} | {:.3} | {:.3} |",
                    if pipeline { "on" } else { "off" },
                    if group_commit { "on" } else { "off" },
                    aps,
                    aps * f64::from(records),
                    ms(r.hist.value_at_quantile(0.5)),
                    ms(r.hist.value_at_quantile(0.99)),
                    ms(r.hist.value_at_quantile(0.999)),
                )
                .unwrap();
            }
        }
    }
}
