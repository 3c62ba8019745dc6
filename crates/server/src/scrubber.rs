//! The background scrubber: reads every sealed segment of every stream on the node and
//! CRC-checks each frame, at a configured rate, so that damage in data nobody reads is found
//! (and repaired from a healthy replica) before the other copies are needed.
//!
//! One thread per node (a [`BackgroundThread`]: a pass, then `storage.scrub_pause_ms`, until
//! the node stops). It holds a store's read lock only to take a segment's map
//! (`LogStore::scrub_target`) and verifies without it, sleeping between steps of
//! [`logstore::SCRUB_STEP_BYTES`] to keep `storage.scrub_rate_mb_per_s`. A bad frame is
//! reported to the store (`LogStore::report_damage`) and the stream's group is woken to
//! repair it. Counters are in [`StorageFaults`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::replication::raft_storage::read;
use crate::replication::stream::LogStream;
use crate::runtime::background::{BackgroundThread, StopSignal};
use crate::storage_faults::StorageFaults;

/// A running scrubber; stopped (and joined) on drop.
pub struct Scrubber {
    _thread: BackgroundThread,
}

/// The streams to scrub, listed again at every pass.
pub type StreamLister = Box<dyn Fn() -> Vec<LogStream> + Send>;

impl Scrubber {
    /// Starts the scrubber thread: passes over `list()`'s streams at `bytes_per_second`,
    /// `pause` apart.
    pub fn start(
        name: &str,
        bytes_per_second: u64,
        pause: Duration,
        list: StreamLister,
        faults: Arc<StorageFaults>,
    ) -> std::io::Result<Scrubber> {
        assert!(bytes_per_second > 0, "a scrubber needs a positive rate");
        let thread = BackgroundThread::start(format!("{name}-scrub"), pause, move |stop| {
            pass(bytes_per_second, &list, &faults, stop)
        })?;
        Ok(Scrubber { _thread: thread })
    }
}

/// One pass over every sealed segment of `list()`'s streams; ends early when asked to stop.
fn pass(bytes_per_second: u64, list: &StreamLister, faults: &StorageFaults, stop: &StopSignal) {
    for stream in list() {
        let bases = read(stream.store()).sealed_segment_bases();
        for base in bases {
            if !scrub_segment(&stream, base, bytes_per_second, faults, stop) {
                return;
            }
        }
    }
}

/// Verifies one sealed segment; false when asked to stop.
fn scrub_segment(
    stream: &LogStream,
    base: u64,
    bytes_per_second: u64,
    faults: &StorageFaults,
    stop: &StopSignal,
) -> bool {
    let target = match read(stream.store()).scrub_target(base) {
        Ok(Some(t)) => t,
        Ok(None) => return true,
        Err(e) => {
            tracing::warn!(stream = %stream.name(), "scrubber could not map a segment: {e}");
            return true;
        }
    };
    let started = Instant::now();
    let mut done = 0u64;
    let mut stopped = false;
    let outcome = target.verify(|n| {
        done += n;
        faults
            .scrub_bytes_verified
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        let due = Duration::from_secs_f64(done as f64 / bytes_per_second as f64);
        let elapsed = started.elapsed();
        if due > elapsed && !stopped {
            stopped = !stop.nap(due - elapsed);
        }
    });
    if let Some((index, pos, reason)) = outcome.damage {
        faults
            .scrub_faults_found
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::error!(
            stream = %stream.name(),
            file = %target.path().display(),
            offset = pos,
            index,
            "scrubber found a damaged entry: {reason}"
        );
        read(stream.store()).report_damage(index);
        stream.check_damage();
    }
    !stopped && !stop.is_stopped()
}
