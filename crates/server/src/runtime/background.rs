//! A named background thread that runs a step every interval and stops promptly when its
//! handle is dropped: the node's log cleaner (`node/cleaner.rs`) and scrubber
//! (`scrubber.rs`) run on one each.
//!
//! The step gets the thread's [`StopSignal`]: a long step checks it between pieces of work
//! and sleeps on it ([`StopSignal::nap`]), so a stop cuts the sleep short at once (a condvar,
//! not a polled flag) and the thread ends at the next check.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest single wait on the condvar (a longer nap waits again), so that no timeout
/// overflows the platform's.
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// The stop request of one background thread, shared by its handle and its step.
#[derive(Debug, Default)]
pub struct StopSignal {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl StopSignal {
    fn flag(&self) -> MutexGuard<'_, bool> {
        // The flag is a plain bool: a panic elsewhere cannot leave it half written.
        self.stopped.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the thread was asked to stop (its handle was dropped).
    pub fn is_stopped(&self) -> bool {
        *self.flag()
    }

    /// Sleeps `d`, ended at once by a stop: true when all of `d` passed, false when the
    /// thread is asked to stop (before or during the sleep). `nap(Duration::ZERO)` only asks.
    pub fn nap(&self, d: Duration) -> bool {
        let deadline = Instant::now().checked_add(d);
        let mut stopped = self.flag();
        loop {
            if *stopped {
                return false;
            }
            let left = match deadline {
                Some(at) => {
                    let now = Instant::now();
                    if now >= at {
                        return true;
                    }
                    at - now
                }
                None => MAX_WAIT,
            };
            stopped = self
                .wake
                .wait_timeout(stopped, left.min(MAX_WAIT))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Asks the thread to stop and wakes it from a nap.
    fn stop(&self) {
        *self.flag() = true;
        self.wake.notify_all();
    }
}

/// A running background thread; dropping it asks the thread to stop and waits for it to end
/// (the step in progress returns at its next check of the [`StopSignal`]).
#[derive(Debug)]
pub struct BackgroundThread {
    signal: Arc<StopSignal>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundThread {
    /// Starts a thread named `name` that runs `step` at once and then again `interval` after
    /// each run ends, until the returned handle is dropped. `step` gets the thread's
    /// [`StopSignal`] to check and nap on. Fails only when the thread cannot be spawned.
    pub fn start<F>(name: String, interval: Duration, mut step: F) -> std::io::Result<Self>
    where
        F: FnMut(&StopSignal) + Send + 'static,
    {
        let signal = Arc::new(StopSignal::default());
        let seen = signal.clone();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            while !seen.is_stopped() {
                step(&seen);
                if !seen.nap(interval) {
                    return;
                }
            }
        })?;
        Ok(BackgroundThread {
            signal,
            thread: Some(thread),
        })
    }
}

impl Drop for BackgroundThread {
    fn drop(&mut self) {
        self.signal.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::mpsc;

    /// Longest a stop may take in these tests (generous for a loaded machine; the sleeps
    /// they cut short are a minute or more).
    const PROMPT: Duration = Duration::from_secs(10);

    #[test]
    fn runs_the_step_every_interval_on_a_thread_of_that_name() {
        let runs = Arc::new(AtomicU32::new(0));
        let (names, named) = mpsc::channel();
        let counted = runs.clone();
        let t = BackgroundThread::start("bg-test".into(), Duration::from_millis(10), move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = names.send(std::thread::current().name().map(str::to_owned));
        })
        .unwrap();
        let deadline = Instant::now() + PROMPT;
        while runs.load(Ordering::SeqCst) < 3 {
            assert!(
                Instant::now() < deadline,
                "the step did not run three times"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(t);
        assert_eq!(named.recv().unwrap().as_deref(), Some("bg-test"));
        // Nothing runs after the handle is gone.
        let after = runs.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(runs.load(Ordering::SeqCst), after);
    }

    #[test]
    fn a_drop_ends_the_interval_sleep_at_once() {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let t = BackgroundThread::start("bg-idle".into(), Duration::from_secs(3600), move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        let deadline = Instant::now() + PROMPT;
        while runs.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the first step did not run");
            std::thread::sleep(Duration::from_millis(5));
        }
        let asked = Instant::now();
        drop(t);
        assert!(asked.elapsed() < PROMPT, "stopped in {:?}", asked.elapsed());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_drop_cuts_a_nap_inside_the_step_short_and_the_step_sees_it() {
        let (started, step_started) = mpsc::channel();
        let (outcome, nap_outcome) = mpsc::channel();
        let t = BackgroundThread::start("bg-nap".into(), Duration::ZERO, move |signal| {
            let _ = started.send(());
            let slept = signal.nap(Duration::from_secs(3600));
            let _ = outcome.send((slept, signal.is_stopped(), signal.nap(Duration::ZERO)));
        })
        .unwrap();
        step_started.recv_timeout(PROMPT).unwrap();
        let asked = Instant::now();
        drop(t);
        assert!(asked.elapsed() < PROMPT, "stopped in {:?}", asked.elapsed());
        assert_eq!(
            nap_outcome.recv_timeout(PROMPT).unwrap(),
            (false, true, false)
        );
    }

    #[test]
    fn a_nap_without_a_stop_sleeps_its_whole_length() {
        let signal = StopSignal::default();
        assert!(signal.nap(Duration::ZERO));
        let started = Instant::now();
        assert!(signal.nap(Duration::from_millis(30)));
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert!(!signal.is_stopped());
        signal.stop();
        assert!(signal.is_stopped());
        assert!(!signal.nap(Duration::from_secs(3600)));
    }
}
