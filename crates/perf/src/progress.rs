//! The live display of a run: a bar with records/s redrawn in place on a terminal, plain lines
//! every few seconds otherwise, nothing when quiet.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::stats::Counters;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar redrawn in place (stdout is a terminal).
    Bar,
    /// One line every few seconds (stdout is a file or pipe).
    Lines,
    /// Nothing (`--json`, tests).
    Quiet,
}

impl ProgressMode {
    /// [`ProgressMode::Bar`] on a terminal, [`ProgressMode::Lines`] otherwise, or
    /// [`ProgressMode::Quiet`] if `quiet`.
    pub fn detect(quiet: bool) -> ProgressMode {
        if quiet {
            ProgressMode::Quiet
        } else if std::io::stdout().is_terminal() {
            ProgressMode::Bar
        } else {
            ProgressMode::Lines
        }
    }
}

/// A running progress display; stops when [`Progress::finish`] is called or it is dropped.
#[derive(Debug)]
pub struct Progress {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts showing `counters` for a run called `label` that ends after `total` records or
    /// `duration`, whichever comes first.
    pub fn start(
        mode: ProgressMode,
        label: String,
        counters: Arc<Counters>,
        total: Option<u64>,
        duration: Duration,
    ) -> Progress {
        let (stop, mut stopped) = watch::channel(false);
        if mode == ProgressMode::Quiet {
            return Progress { stop, task: None };
        }
        let task = tokio::spawn(async move {
            let start = Instant::now();
            let tick = match mode {
                ProgressMode::Bar => Duration::from_millis(250),
                _ => Duration::from_secs(2),
            };
            let (mut last_t, mut last_n) = (start, 0u64);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(tick) => {}
                    _ = stopped.changed() => break,
                }
                let now = Instant::now();
                let n = counters.records();
                let rate = (n - last_n.min(n)) as f64 / now.duration_since(last_t).as_secs_f64();
                (last_t, last_n) = (now, n);
                let elapsed = now.duration_since(start);
                let mut frac = elapsed.as_secs_f64() / duration.as_secs_f64().max(1e-9);
                if let Some(t) = total.filter(|t| *t > 0) {
                    frac = frac.max(n as f64 / t as f64);
                }
                let line = format!(
                    "{label} {:>11} records {:>11.0} rec/s  errors {}  {:.1}s",
                    n,
                    rate,
                    counters.errors(),
                    elapsed.as_secs_f64()
                );
                let mut out = std::io::stdout().lock();
                if mode == ProgressMode::Bar {
                    let filled = (frac.clamp(0.0, 1.0) * 30.0) as usize;
                    let bar: String = (0..30)
                        .map(|i| if i < filled { '#' } else { '-' })
                        .collect();
                    let _ = write!(out, "\r[{bar}] {line}\x1b[K");
                } else {
                    let _ = writeln!(out, "{line}");
                }
                let _ = out.flush();
            }
            if mode == ProgressMode::Bar {
                let mut out = std::io::stdout().lock();
                let _ = write!(out, "\r\x1b[K");
                let _ = out.flush();
            }
        });
        Progress {
            stop,
            task: Some(task),
        }
    }

    /// Stops the display and clears the bar.
    pub async fn finish(mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
