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

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::Path;
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
}

/// Bytes of the preallocated file the appends cycle through.
const FILE_BYTES: u64 = 64 << 20;

/// Measures `iterations` appends + fdatasync in a file under `dir` (removed afterwards) and
/// `iterations` loopback round trips.
pub fn measure(dir: &Path, message_size: usize, iterations: usize) -> std::io::Result<Floor> {
    assert!(message_size > 0 && iterations > 0);
    let fsync = fsync_latency(dir, message_size, iterations)?;
    let round_trip = round_trip_latency(message_size, iterations)?;
    Ok(Floor {
        message_size,
        floor_ms_p50: fsync.p50_ms + 2.0 * round_trip.p50_ms,
        fsync,
        round_trip,
    })
}

fn fsync_latency(dir: &Path, size: usize, iterations: usize) -> std::io::Result<LatencySummary> {
    let path = dir.join(format!("vdl-perf-floor-{}.bin", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    let result = (|| {
        // Zeros written and synced ahead, so each measured sync flushes data only.
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < FILE_BYTES {
            file.write_all_at(&zeros, at)?;
            at += zeros.len() as u64;
        }
        file.sync_all()?;
        let data = vec![0x5au8; size];
        let mut latencies = Latencies::new();
        let mut offset = 0u64;
        for _ in 0..iterations {
            if offset + size as u64 > FILE_BYTES {
                offset = 0;
            }
            let started = Instant::now();
            file.write_all_at(&data, offset)?;
            file.sync_data()?;
            latencies.record(started.elapsed());
            offset += size as u64;
        }
        Ok(latencies.summary())
    })();
    let _ = std::fs::remove_file(&path);
    result
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
        let f = measure(dir.path(), 1024, 50).unwrap();
        assert_eq!(f.fsync.count, 50);
        assert_eq!(f.round_trip.count, 50);
        assert!(f.fsync.p50_ms > 0.0 && f.round_trip.p50_ms > 0.0);
        let expected = f.fsync.p50_ms + 2.0 * f.round_trip.p50_ms;
        assert!((f.floor_ms_p50 - expected).abs() < 1e-9);
        // The file is removed.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
