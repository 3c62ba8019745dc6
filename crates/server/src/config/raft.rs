//! The `[raft]` section: Raft timing and limits.

use std::time::Duration;

use serde::Deserialize;

use super::values::{invalid, positive_ms};
use super::ConfigError;

/// Raft timing: how often leaders heartbeat and how long followers wait before an election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    /// Granularity of the Raft clock.
    pub tick: Duration,
    /// Leader heartbeat interval (a whole number of ticks).
    pub heartbeat: Duration,
    /// Base election timeout (a whole number of ticks); raft-rs randomises it in [t, 2t).
    pub election_timeout: Duration,
    /// Largest append message to a follower, in bytes.
    pub max_append_bytes: u64,
    /// Append messages in flight to one follower before waiting for acknowledgements.
    pub max_inflight_appends: usize,
    /// Whether the leader sends appends to followers before its own fsync finishes (pipelining).
    pub pipeline: bool,
    /// Whether many proposals are merged into one Raft entry and one fsync (group commit).
    pub group_commit: bool,
    /// How often the leader of a topic partition checks whether its preferred replica is back
    /// and caught up, and hands leadership to it (Kafka's `auto.leader.rebalance.enable` and
    /// `leader.imbalance.check.interval.seconds`). `None` turns the rebalance off.
    pub leader_rebalance_interval: Option<Duration>,
    /// Worker threads that drive every Raft group of the node (0: twice the cores, 2 to 16;
    /// see [`crate::runtime::worker_count`]).
    pub worker_threads: usize,
}

impl Default for RaftTiming {
    fn default() -> RaftTiming {
        RaftTiming {
            tick: Duration::from_millis(50),
            heartbeat: Duration::from_millis(100),
            election_timeout: Duration::from_millis(2000),
            max_append_bytes: 1 << 20,
            max_inflight_appends: 256,
            pipeline: true,
            group_commit: true,
            leader_rebalance_interval: Some(Duration::from_secs(10)),
            worker_threads: 0,
        }
    }
}

impl RaftTiming {
    /// Heartbeat interval in ticks (at least 1).
    pub fn heartbeat_ticks(&self) -> usize {
        ticks(self.heartbeat, self.tick)
    }

    /// Election timeout in ticks (at least 2 heartbeats).
    pub fn election_ticks(&self) -> usize {
        ticks(self.election_timeout, self.tick).max(2 * self.heartbeat_ticks())
    }
}

fn ticks(d: Duration, tick: Duration) -> usize {
    let t = tick.as_millis().max(1);
    ((d.as_millis() / t) as usize).max(1)
}

/// `[raft]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRaft {
    tick_ms: Option<u64>,
    heartbeat_ms: Option<u64>,
    election_timeout_ms: Option<u64>,
    max_append_bytes: Option<u64>,
    max_inflight_appends: Option<usize>,
    pipeline: Option<bool>,
    group_commit: Option<bool>,
    leader_rebalance_interval_ms: Option<u64>,
    worker_threads: Option<usize>,
}

/// Validates `[raft]` over the defaults.
pub(super) fn parse_raft(r: FileRaft) -> Result<RaftTiming, ConfigError> {
    let mut raft = RaftTiming::default();
    if let Some(v) = r.tick_ms {
        raft.tick = positive_ms("raft.tick_ms", v)?;
    }
    if let Some(v) = r.heartbeat_ms {
        raft.heartbeat = positive_ms("raft.heartbeat_ms", v)?;
    }
    if let Some(v) = r.election_timeout_ms {
        raft.election_timeout = positive_ms("raft.election_timeout_ms", v)?;
    }
    if raft.heartbeat < raft.tick {
        return invalid("raft.heartbeat_ms", "must be at least raft.tick_ms");
    }
    if raft.election_timeout < 2 * raft.heartbeat {
        return invalid(
            "raft.election_timeout_ms",
            "must be at least twice raft.heartbeat_ms",
        );
    }
    if let Some(v) = r.max_append_bytes {
        if v < 4096 {
            return invalid("raft.max_append_bytes", "must be at least 4096");
        }
        raft.max_append_bytes = v;
    }
    if let Some(v) = r.max_inflight_appends {
        if v == 0 {
            return invalid("raft.max_inflight_appends", "must be at least 1");
        }
        raft.max_inflight_appends = v;
    }
    raft.pipeline = r.pipeline.unwrap_or(raft.pipeline);
    raft.group_commit = r.group_commit.unwrap_or(raft.group_commit);
    if let Some(n) = r.worker_threads {
        if n > 256 {
            return invalid("raft.worker_threads", "must be at most 256 (0: automatic)");
        }
        raft.worker_threads = n;
    }
    if let Some(ms) = r.leader_rebalance_interval_ms {
        raft.leader_rebalance_interval = (ms > 0).then(|| Duration::from_millis(ms));
    }
    Ok(raft)
}
