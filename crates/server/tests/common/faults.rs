//! Helpers for the storage and disk-fault tests on real `vdl` processes (`storage_faults.rs`,
//! `disk_nemesis.rs`): a cluster whose nodes run the fault-injecting file system, acks=all
//! produces recorded by offset, and CRC-checked reads of a whole partition.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::kafka::on_any;
use super::procs::ProcCluster;
use super::{batch, split_batches};

/// How long a test waits for one cluster operation (a produce, a read, an election).
pub const WAIT: Duration = Duration::from_secs(30);

/// What a test acknowledged (or read): base offset -> (record count, value tag).
pub type Acked = BTreeMap<u64, (u32, Vec<u8>)>;

/// A value unique to (`topic`, `seq`), padded with `x` to `size` bytes.
pub fn tag(topic: &str, seq: usize, size: usize) -> Vec<u8> {
    let mut v = format!("{topic}-{seq:08}-").into_bytes();
    v.resize(size.max(v.len()), b'x');
    v
}

/// Produces `batches` acknowledged batches (acks=all) of `per_batch` records of `size` bytes,
/// numbered after those already in `acked`.
pub fn produce_acked(
    brokers: &[SocketAddr],
    topic: &str,
    batches: usize,
    per_batch: u32,
    size: usize,
    acked: &mut Acked,
) {
    let start = acked.len();
    for seq in start..start + batches {
        let value = tag(topic, seq, size);
        let data = batch(per_batch, &value);
        let base = on_any(brokers, WAIT, &format!("produce to {topic}"), |c| {
            c.produce(topic, data.clone())
        });
        let base = u64::try_from(base).expect("acknowledged base offset");
        assert!(
            acked.insert(base, (per_batch, value)).is_none(),
            "offset {base} acknowledged twice"
        );
    }
}

/// Reads partition 0 from 0 to the high watermark from any broker (each batch's CRC checked).
pub fn read_all(brokers: &[SocketAddr], topic: &str) -> Acked {
    let mut out = Acked::new();
    let mut offset = 0i64;
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "reading {topic} took too long");
        let (hw, records) = on_any(brokers, WAIT, &format!("fetch {topic} at {offset}"), |c| {
            c.fetch(topic, offset).map(|(e, hw, _, r)| (e, (hw, r)))
        });
        if offset >= hw {
            return out;
        }
        let batches = split_batches(&records);
        assert!(
            !batches.is_empty(),
            "fetch at {offset} below {hw} was empty"
        );
        for (base, count, value) in batches {
            out.insert(base, (count, value));
            offset = (base + u64::from(count)) as i64;
        }
    }
}

/// The offset after the last acknowledged batch of `acked` (0 when empty).
pub fn acked_end(acked: &Acked) -> u64 {
    acked
        .iter()
        .next_back()
        .map_or(0, |(b, (n, _))| b + u64::from(*n))
}

/// Reads as [`read_all`] does, again (every 100 ms, at most `WAIT`) until what is read
/// reaches offset `end`: a leader just elected publishes its high watermark only once an
/// entry of its term commits, and answers a high watermark of 0 until then. Returns the last
/// read; the caller compares it with what was acknowledged (a log that never reaches `end`
/// shows as batches missing).
pub fn read_through(brokers: &[SocketAddr], topic: &str, end: u64) -> Acked {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = read_all(brokers, topic);
        if acked_end(&got) >= end || Instant::now() >= deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Creates `topic` (one partition, three replicas) and waits for its leader.
pub fn create(brokers: &[SocketAddr], topic: &str) {
    on_any(brokers, WAIT, &format!("create {topic}"), |c| {
        c.create_topic_replicated(topic, 1, 3)
            .map(|(e, _, _)| (if e == 36 { 0 } else { e }, ()))
    });
    leader_of(brokers, topic);
}

/// The node index (0-based) leading partition 0 of `topic`.
pub fn leader_of(brokers: &[SocketAddr], topic: &str) -> usize {
    let leader = on_any(brokers, WAIT, &format!("a leader for {topic}"), |c| {
        c.metadata(topic)
            .map(|(e, leader, _)| (if leader < 0 { 5 } else { e }, leader))
    });
    leader as usize - 1
}

/// A cluster whose nodes run the fault-injecting file system (1 MiB segments, `extra` TOML
/// appended to `[storage]`), node `i` controlled by `DIR/faultsN` (N = i + 1).
pub fn faulty_cluster(dir: &Path, extra: &str) -> ProcCluster {
    let mut c =
        ProcCluster::configure(dir, 3, &format!("segment_bytes = 1048576\nFAULTS\n{extra}"));
    for i in 0..3 {
        let cfg = dir.join(format!("vdl{}.toml", i + 1));
        let text = std::fs::read_to_string(&cfg).unwrap().replace(
            "FAULTS",
            &format!("fault_injection_file = \"{}\"", control(dir, i).display()),
        );
        std::fs::write(&cfg, text).unwrap();
    }
    for i in 0..3 {
        c.spawn(i);
    }
    c
}

/// Node `i`'s fault control file (see `logstore::FaultInjectingFs`).
pub fn control(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("faults{}", i + 1))
}

/// Sets node `i`'s faults (see `logstore::Faults`) and waits for it to read them (it reads
/// the file every 50 ms).
pub fn set_faults(dir: &Path, i: usize, faults: &str) {
    std::fs::write(control(dir, i), faults).unwrap();
    std::thread::sleep(Duration::from_millis(200));
}
