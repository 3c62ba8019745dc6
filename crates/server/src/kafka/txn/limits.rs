//! The transaction coordinator's limits and periods.

use std::time::Duration;

/// How long a write of the coordinator's state may take to commit.
pub(super) const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a read barrier on the metadata group may take.
pub(super) const BARRIER_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest transaction timeout a producer may ask for: Kafka's
/// `transaction.max.timeout.ms` default (15 minutes).
pub(super) const MAX_TRANSACTION_TIMEOUT_MS: i32 = 900_000;

/// How often every node looks for decided transactions whose markers it should write besides
/// being woken by each decision (`TxnHost::transaction_work`): what the scan still finds
/// is a partition whose leadership moved here mid-transaction, or a round that failed.
pub(super) const MARKER_SCAN: Duration = Duration::from_millis(200);

/// How long one round of markers (commit and report) may take before it is tried again.
pub(super) const MARKER_ROUND_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the coordinator looks for transactions past their timeout (Kafka's
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms` is 10 s; a shorter period
/// costs one scan of the state).
pub(super) const TIMEOUT_SCAN: Duration = Duration::from_secs(1);

/// At most this many transactional ids are forgotten per scan (each is one metadata write);
/// the rest wait for the next scan.
pub(super) const MAX_EXPIRED_PER_SCAN: usize = 100;

/// How long InitProducerId waits for the abort of the previous epoch's transaction before
/// answering CONCURRENT_TRANSACTIONS (the producer retries).
pub(super) const ABORT_WAIT: Duration = Duration::from_secs(5);

/// How often InitProducerId looks whether that abort completed.
pub(super) const ABORT_POLL: Duration = Duration::from_millis(20);

/// How often the coordinator looks for partition leaders' requests to add partitions to a
/// transaction (transaction version 2's implicit AddPartitions) besides being woken by each
/// request applied (`TxnHost::transaction_work`): what the scan still finds is the requests
/// queued before this node became the coordinator.
pub(super) const IMPLICIT_ADD_SCAN: Duration = Duration::from_millis(200);

/// How long a partition leader waits for the coordinator to add a partition a Produce v12
/// wrote to first, before the batch is refused with a retriable error.
pub(super) const IMPLICIT_ADD_WAIT: Duration = Duration::from_secs(5);

/// How often the partition leader looks whether that addition is applied.
pub(super) const IMPLICIT_ADD_POLL: Duration = Duration::from_millis(2);
