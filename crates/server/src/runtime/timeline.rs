//! The produce-path timeline: a timestamp at every hand-off a request crosses, for
//! benchmarks only (`docs/benchmarks.md`, "Where a batch-1 produce spends its time").
//!
//! Off unless the process starts with `VDL_TIMELINE=<prefix>`; then every [`stamp`] records
//! (CLOCK_MONOTONIC nanoseconds, stage, tag) into a buffer allocated once
//! ([`CAPACITY`] events; later stamps are dropped and counted) and a background thread
//! appends the recorded events to `<prefix>.<pid>` every 200 ms as text lines `ns stage tag`.
//! CLOCK_MONOTONIC is one clock for every process of a host, so the files of a local
//! cluster's nodes merge into one timeline (`scripts/bench/timeline.py`).
//!
//! Off, a stamp costs one load of an initialised `OnceLock` and a branch. On, it costs one
//! `clock_gettime` (vDSO, about 20 ns) and three relaxed/release atomic stores; no lock, no
//! allocation, so it does not add a hand-off of its own.

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Most events one process records.
pub const CAPACITY: usize = 4 << 20;

/// A point on the produce path. The numbers are the file format (`stage` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    /// The Kafka listener's reader task has a whole request frame (tag: API key).
    FrameRead = 1,
    /// The connection task took the frame from the reader (tag: API key).
    Dispatched = 2,
    /// A proposal was queued on a group's inbox (tag: group id).
    ProposalQueued = 3,
    /// A group's turn began on a worker (tag: group id).
    TurnStart = 4,
    /// A leader is handing appends to the transport, before its fsync (tag: group id).
    AppendsQueued = 5,
    /// A group's append + fsync finished (tag: group id).
    FsyncDone = 6,
    /// A group is handing its post-fsync messages (follower acknowledgements) to the
    /// transport (tag: group id).
    AcksQueued = 7,
    /// A frame was written to a peer's socket, by its sender task or directly by a group's
    /// worker (tag: peer node id).
    PeerFrameWritten = 8,
    /// A peer receiver decoded a frame and delivered its messages (tag: sending node id).
    PeerFrameDelivered = 9,
    /// A committed entry's proposals are being answered (tag: group id); stamped before the
    /// answers, since a produce's answer may write the client's response itself.
    Answered = 10,
    /// A response's future completed on the connection task (tag: API key).
    ResponseReady = 11,
    /// A response was written to the client's socket, by its connection task or directly by
    /// the group worker that answered it (tag: API key).
    ResponseWritten = 12,
}

struct Recorder {
    /// Per event: the timestamp (0: not written yet) and `stage << 56 | tag`.
    events: Box<[(AtomicU64, AtomicU64)]>,
    next: AtomicUsize,
}

static RECORDER: OnceLock<Option<&'static Recorder>> = OnceLock::new();

fn recorder() -> Option<&'static Recorder> {
    *RECORDER.get_or_init(|| {
        let mut path = std::env::var_os("VDL_TIMELINE")?;
        path.push(format!(".{}", std::process::id()));
        let events = (0..CAPACITY)
            .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
            .collect();
        let r: &'static Recorder = Box::leak(Box::new(Recorder {
            events,
            next: AtomicUsize::new(0),
        }));
        let spawned = std::thread::Builder::new()
            .name("vdl-timeline".into())
            .spawn(move || flush_forever(r, std::path::PathBuf::from(path)));
        spawned.ok().map(|_| r)
    })
}

/// Whether this process records a timeline.
pub fn enabled() -> bool {
    recorder().is_some()
}

/// Records that `stage` happened now, with its `tag`; nothing when the timeline is off.
#[inline]
pub fn stamp(stage: Stage, tag: u64) {
    if let Some(r) = recorder() {
        record(r, stage, tag);
    }
}

fn record(r: &Recorder, stage: Stage, tag: u64) {
    let i = r.next.fetch_add(1, Ordering::Relaxed);
    let Some((at, what)) = r.events.get(i) else {
        return;
    };
    what.store(
        (stage as u64) << 56 | (tag & ((1 << 56) - 1)),
        Ordering::Relaxed,
    );
    at.store(monotonic_ns().max(1), Ordering::Release);
}

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of this host.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Appends every written event to `path` in index order, every 200 ms, for the process's
/// life. An event whose timestamp is not stored yet ends a pass (it is taken by the next).
fn flush_forever(r: &Recorder, path: std::path::PathBuf) {
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    else {
        tracing::warn!(path = %path.display(), "VDL_TIMELINE: cannot open the file; no timeline");
        return;
    };
    let mut out = std::io::BufWriter::new(file);
    let mut flushed = 0usize;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let end = r.next.load(Ordering::Relaxed).min(CAPACITY);
        while flushed < end {
            let (at, what) = &r.events[flushed];
            let ns = at.load(Ordering::Acquire);
            if ns == 0 {
                break;
            }
            let what = what.load(Ordering::Relaxed);
            let _ = writeln!(out, "{ns} {} {}", what >> 56, what & ((1 << 56) - 1));
            flushed += 1;
        }
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_keep_stage_tag_and_order() {
        let r = Recorder {
            events: (0..4)
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
            next: AtomicUsize::new(0),
        };
        for (stage, tag) in [(Stage::FrameRead, 0), (Stage::TurnStart, u64::MAX)] {
            record(&r, stage, tag);
        }
        let first = r.events[0].0.load(Ordering::Relaxed);
        let second = r.events[1].0.load(Ordering::Relaxed);
        assert!(first > 0 && second >= first);
        assert_eq!(r.events[0].1.load(Ordering::Relaxed) >> 56, 1);
        assert_eq!(r.events[1].1.load(Ordering::Relaxed) >> 56, 4);
        assert_eq!(
            r.events[1].1.load(Ordering::Relaxed) & ((1 << 56) - 1),
            (1 << 56) - 1
        );
        // A full buffer drops events instead of writing past its end.
        for _ in 0..10 {
            record(&r, Stage::Answered, 1);
        }
        assert_eq!(r.events.len(), 4);
    }
}
