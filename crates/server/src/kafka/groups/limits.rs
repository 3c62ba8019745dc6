//! The group coordinator's limits and timeouts: how often deadlines are checked, the initial
//! rebalance delay, the bounds on session and rebalance timeouts, on groups and on members (with
//! the clamping of a request's timeouts to them), how long a write to the metadata may take and
//! how long a read barrier may.

use std::time::Duration;

/// How often deadlines are checked.
pub(super) const TICK: Duration = Duration::from_millis(50);
/// How long the first rebalance of an empty group waits for more members to join (Kafka's
/// `group.initial.rebalance.delay.ms`, 3 s by default there; short here so a consumer starts
/// quickly). Each further join during the delay extends it, up to the rebalance timeout.
pub(super) const INITIAL_REBALANCE_DELAY: Duration = Duration::from_millis(200);
/// Shortest session timeout accepted (Kafka's `group.min.session.timeout.ms` is 6 s; lower here
/// so tests can expire members quickly).
pub(super) const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(1_000);
/// Longest session timeout accepted (`group.max.session.timeout.ms`).
pub(super) const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(1_800);
/// Bound on a member's rebalance timeout (how long a rebalance waits for members to rejoin, and
/// for SyncGroup after the join completes). Kafka takes the member's `max.poll.interval.ms` as
/// is: Java's default is 5 minutes, stream processors often set hours, and Kafka Streams sets
/// `Integer.MAX_VALUE`. A day keeps every such setting working as configured (a member that
/// stops heartbeating is still removed when its session expires) while every waiting request
/// and deadline stays bounded.
pub(super) const MAX_REBALANCE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Groups with members held in memory at once; joining a further group is refused
/// (GROUP_MAX_SIZE_REACHED).
pub(super) const MAX_GROUPS: usize = 10_000;
/// Members (and member ids handed out but not yet joined) per group (`group.max.size`).
pub(super) const MAX_MEMBERS: usize = 1_000;
/// Longest an OffsetCommit waits for its offsets to commit through the metadata group.
pub(super) const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest an OffsetFetch waits for its read barrier.
pub(super) const FETCH_BARRIER_TIMEOUT: Duration = Duration::from_secs(10);

/// A member's session timeout (`ms` as requested), within [`MIN_SESSION_TIMEOUT`] and
/// [`MAX_SESSION_TIMEOUT`].
pub(super) fn session_timeout(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        .clamp(MIN_SESSION_TIMEOUT, MAX_SESSION_TIMEOUT)
}

/// A member's rebalance timeout (`ms` as requested), at least a millisecond and at most
/// [`MAX_REBALANCE_TIMEOUT`].
pub(super) fn rebalance_timeout(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        .clamp(Duration::from_millis(1), MAX_REBALANCE_TIMEOUT)
}
