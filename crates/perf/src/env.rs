//! What every workload of a run shares: the cluster, the live counters, the error counts and
//! how progress is shown; and the error type of the workloads.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::client::{ClientError, Cluster};
use crate::progress::ProgressMode;
use crate::stats::{Counters, ErrorCounts};

/// Why a workload could not run to its end.
#[derive(Debug, Error)]
pub enum PerfError {
    /// A client error that retrying could not fix (or that is not retriable).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The parameters do not make sense.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A worker task panicked or was cancelled.
    #[error("worker task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    /// Writing a report failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// The shared context of one measured run.
#[derive(Debug, Clone)]
pub struct Env {
    /// The servers measured.
    pub cluster: Arc<Cluster>,
    /// Live totals (for the progress display).
    pub counters: Arc<Counters>,
    /// Errors by kind.
    pub errors: Arc<ErrorCounts>,
    /// How progress is shown.
    pub progress: ProgressMode,
}

impl Env {
    /// A context for `bootstrap` (comma-separated `host:port`), with a per-request `timeout`.
    pub fn new(bootstrap: &str, timeout: Duration, progress: ProgressMode) -> Env {
        Env {
            cluster: Arc::new(Cluster::new(bootstrap, "vdl-perf", timeout)),
            counters: Arc::default(),
            errors: Arc::default(),
            progress,
        }
    }

    /// The same context reaching the cluster with TLS and/or SASL as `security` says (before
    /// any connection is made).
    pub fn with_security(mut self, security: crate::client::security::ClientSecurity) -> Env {
        let cluster = Arc::try_unwrap(self.cluster)
            .expect("with_security is called on a new Env, whose cluster is not shared yet");
        self.cluster = Arc::new(cluster.with_security(security));
        self
    }

    /// The same cluster with fresh counters, for the next cell of a suite.
    pub fn fresh(&self) -> Env {
        Env {
            cluster: self.cluster.clone(),
            counters: Arc::default(),
            errors: Arc::default(),
            progress: self.progress,
        }
    }

    /// Counts an error by its kind.
    pub fn count_error(&self, e: &ClientError) {
        self.count_error_kind(&e.kind(), 1);
    }

    /// Counts `n` errors of `kind`.
    pub fn count_error_kind(&self, kind: &str, n: u64) {
        self.errors.add(kind, n);
        self.counters.errors.fetch_add(n, Ordering::Relaxed);
    }
}
