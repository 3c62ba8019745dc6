//! `vdl-perf floor`: the physical floor of a replicated, fsynced produce on this machine,
//! measured right before (or between) benchmark runs so latency can be judged against it.
//!
//! A synchronous produce with acks=all on a leader with fsync on a majority cannot finish
//! before one client round trip (request in, response out), one leader-to-follower round trip
//! (append out, acknowledgement back) and one fsync on the follower (the leader's fsync runs
//! at the same time). So the floor is `fsync p50 + 2 x round trip p50`, with
//! - the fsync: a `message_size` append to a plain file in `dir` followed by `fdatasync`, as a
//!   log segment append is (the file is preallocated so the sync flushes data, not the
//!   inode, as vdl's zero reserve does);
//! - the round trip: `message_size` bytes written to a TCP connection on 127.0.0.1 (Nagle off)
//!   and an 8-byte answer read back, by two threads blocking in `read`, as a client and a
//!   server thread do.
//!
//! When the replicas share one disk (a local cluster on one machine, as every benchmark of
//! this project), their fsyncs contend: each replica writes and syncs its own file at about
//! the same moment, and a disk whose cache flushes are serialised (the project machine's
//! virtio disk: one flush at a time, later ones merged into the next) finishes the second
//! of three later than a lone one. So the floor is also measured for `replicas` files synced
//! together by as many threads, started at once each round: the *majority fsync* is the time
//! until a majority of them finished, and the shared-disk floor is
//! `majority fsync p50 + 2 x round trip p50`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::stats::{Latencies, LatencySummary};

/// What `vdl-perf floor` measured.
#[derive(Debug, Clone, Serialize)]
pub struct Floor {
    /// Bytes per append and per round-trip request.
    pub message_size: usize,
    /// Append + fdatasync latency.
    pub fsync: LatencySummary,
    /// Loopback TCP round-trip latency.
    pub round_trip: LatencySummary,
    /// `fsync.p50_ms + 2 * round_trip.p50_ms`.
    pub floor_ms_p50: f64,
    /// Replicas whose fsyncs share the disk in the shared-disk measurement (1: not measured).
    pub replicas: usize,
    /// Time until a majority of `replicas` appends + fdatasyncs, started together on one
    /// disk, finished (`None` when `replicas` is 1).
    pub majority_fsync: Option<LatencySummary>,
    /// `majority_fsync.p50_ms + 2 * round_trip.p50_ms`: the floor when the replicas share
    /// this disk (`None` when `replicas` is 1).
    pub shared_disk_floor_ms_p50: Option<f64>,
}

/// Bytes of the preallocated file the appends cycle through.
const FILE_BYTES: u64 = 64 << 20;

/// Most replicas the shared-disk measurement takes.
pub const MAX_REPLICAS: usize = 16;

/// Measures `iterations` appends + fdatasync in a file under `dir` (removed afterwards),
/// `iterations` loopback round trips, and, when `replicas` is above 1, `iterations` rounds
/// of `replicas` appends + fdatasyncs started together in as many files under `dir`.
pub fn measure(
    dir: &Path,
    message_size: usize,
    iterations: usize,
    replicas: usize,
) -> std::io::Result<Floor> {
    assert!(message_size > 0 && iterations > 0);
    assert!((1..=MAX_REPLICAS).contains(&replicas));
    let fsync = fsync_latency(dir, message_size, iterations)?;
    let round_trip = round_trip_latency(message_size, iterations)?;
    let majority_fsync = if replicas > 1 {
        Some(majority_fsync_latency(
            dir,
            message_size,
            iterations,
            replicas,
        )?)
    } else {
        None
    };
    Ok(Floor {
        message_size,
        floor_ms_p50: fsync.p50_ms + 2.0 * round_trip.p50_ms,
        shared_disk_floor_ms_p50: majority_fsync
            .as_ref()
            .map(|m| m.p50_ms + 2.0 * round_trip.p50_ms),
        replicas,
        majority_fsync,
        fsync,
        round_trip,
    })
}

/// A file under `dir` for the appends, removed when dropped.
struct ScratchFile {
    path: PathBuf,
    file: std::fs::File,
}

impl ScratchFile {
    /// `FILE_BYTES` of zeros written and synced, so each measured sync flushes data only.
    fn zeroed(dir: &Path, name: &str) -> std::io::Result<ScratchFile> {
        let path = dir.join(format!("vdl-perf-floor-{}-{name}.bin", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        let scratch = ScratchFile { path, file };
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < FILE_BYTES {
            scratch.file.write_all_at(&zeros, at)?;
            at += zeros.len() as u64;
        }
        scratch.file.sync_all()?;
        Ok(scratch)
    }

    /// Appends `data` at `*offset` (wrapping inside the file) and fdatasyncs.
    fn append_and_sync(&self, data: &[u8], offset: &mut u64) -> std::io::Result<()> {
        if *offset + data.len() as u64 > FILE_BYTES {
            *offset = 0;
        }
        self.file.write_all_at(data, *offset)?;
        self.file.sync_data()?;
        *offset += data.len() as u64;
        Ok(())
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn fsync_latency(dir: &Path, size: usize, iterations: usize) -> std::io::Result<LatencySummary> {
    let scratch = ScratchFile::zeroed(dir, "single")?;
    let data = vec![0x5au8; size];
    let mut latencies = Latencies::new();
    let mut offset = 0u64;
    for _ in 0..iterations {
        let started = Instant::now();
        scratch.append_and_sync(&data, &mut offset)?;
        latencies.record(started.elapsed());
    }
    Ok(latencies.summary())
}

/// `iterations` rounds in which `replicas` threads each append to and fdatasync their own
/// file, released together; a round's latency is from its earliest start until a majority
/// of the threads finished.
fn majority_fsync_latency(
    dir: &Path,
    size: usize,
    iterations: usize,
    replicas: usize,
) -> std::io::Result<LatencySummary> {
    let files = (0..replicas)
        .map(|i| ScratchFile::zeroed(dir, &format!("replica{i}")))
        .collect::<std::io::Result<Vec<_>>>()?;
    let start = Arc::new(Barrier::new(replicas));
    // A thread that panics leaves the others at the barrier: nothing in a round panics but
    // an out-of-memory abort, which ends the process anyway.
    // Each thread's (started, finished) per round.
    let rounds: Vec<std::io::Result<Vec<(Instant, Instant)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .iter()
            .map(|scratch| {
                let start = Arc::clone(&start);
                scope.spawn(move || -> std::io::Result<Vec<(Instant, Instant)>> {
                    let data = vec![0x5au8; size];
                    let mut offset = 0u64;
                    let mut times = Vec::with_capacity(iterations);
                    let mut failure = None;
                    for _ in 0..iterations {
                        // Every thread goes through every round, even after a failure, so
                        // the others never wait at the barrier for one that left.
                        start.wait();
                        let started = Instant::now();
                        if failure.is_none() {
                            failure = scratch.append_and_sync(&data, &mut offset).err();
                        }
                        times.push((started, Instant::now()));
                    }
                    failure.map_or(Ok(times), Err)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("a sync thread panicked")))
            })
            .collect()
    });
    let rounds = rounds.into_iter().collect::<std::io::Result<Vec<_>>>()?;
    let majority = replicas / 2 + 1;
    let mut latencies = Latencies::new();
    for round in 0..iterations {
        let mut finished: Vec<Instant> = rounds.iter().map(|r| r[round].1).collect();
        finished.sort();
        let earliest_start = rounds
            .iter()
            .map(|r| r[round].0)
            .min()
            .expect("at least two replicas");
        latencies.record(finished[majority - 1].saturating_duration_since(earliest_start));
    }
    Ok(latencies.summary())
}

fn round_trip_latency(size: usize, iterations: usize) -> std::io::Result<LatencySummary> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut buf = vec![0u8; size];
        loop {
            match s.read_exact(&mut buf) {
                Ok(()) => s.write_all(&[1u8; 8])?,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    });
    let mut client = TcpStream::connect(addr)?;
    client.set_nodelay(true)?;
    client.set_read_timeout(Some(Duration::from_secs(5)))?;
    let request = vec![0x5au8; size];
    let mut answer = [0u8; 8];
    let mut latencies = Latencies::new();
    for _ in 0..iterations {
        let started = Instant::now();
        client.write_all(&request)?;
        client.read_exact(&mut answer)?;
        latencies.record(started.elapsed());
    }
    drop(client);
    server
        .join()
        .map_err(|_| std::io::Error::other("the echo thread panicked"))??;
    Ok(latencies.summary())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_the_fsync_plus_two_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let f = measure(dir.path(), 1024, 50, 1).unwrap();
        assert_eq!(f.fsync.count, 50);
        assert_eq!(f.round_trip.count, 50);
        assert!(f.fsync.p50_ms > 0.0 && f.round_trip.p50_ms > 0.0);
        let expected = f.fsync.p50_ms + 2.0 * f.round_trip.p50_ms;
        assert!((f.floor_ms_p50 - expected).abs() < 1e-9);
        assert!(f.majority_fsync.is_none() && f.shared_disk_floor_ms_p50.is_none());
        // The file is removed.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_shared_disk_floor_waits_for_a_majority_of_the_replicas_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let f = measure(dir.path(), 1024, 40, 3).unwrap();
        assert_eq!(f.replicas, 3);
        let majority = f.majority_fsync.expect("measured for 3 replicas");
        assert_eq!(majority.count, 40);
        assert!(majority.p50_ms > 0.0);
        let expected = majority.p50_ms + 2.0 * f.round_trip.p50_ms;
        assert!((f.shared_disk_floor_ms_p50.unwrap() - expected).abs() < 1e-9);
        // Every replica's file is removed.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
