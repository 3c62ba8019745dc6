//! The group coordinator's background tasks, started with it and ending with its host (the
//! Kafka service's broker, dropped once its listeners have ended) or the node's shutdown: the
//! ticker (deadlines), the persister (membership records written to the metadata) and offset
//! expiry.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::limits::{COMMIT_TIMEOUT, TICK};
use super::node_coordinator::{coordinator, coordinator_term};
use super::types::GroupStore;
use crate::kafka::host::GroupsHost;
use crate::metadata::{wall_clock_ms, MetaCommand};
use crate::replication::group::AppendError;

/// Every `kafka.offsets_retention_check_ms`: [`expire_offsets`]. Ends with the host or the
/// node's shutdown.
pub(super) fn start_offset_expiry<H: GroupsHost>(node: Weak<H>) {
    tokio::spawn(async move {
        loop {
            let Some(interval) = node
                .upgrade()
                .map(|n| n.config().kafka.offsets_retention_check_interval)
            else {
                return;
            };
            tokio::time::sleep(interval).await;
            let Some(node) = node.upgrade() else {
                return;
            };
            if node.metadata_group().is_none() {
                return;
            }
            let expired = expire_offsets(&node).await;
            if expired > 0 {
                tracing::info!(groups = expired, "committed offsets of idle groups expired");
            }
        }
    });
}

/// Groups whose offsets expire per check at most (the rest wait for the next check).
const MAX_EXPIRIES_PER_CHECK: usize = 1000;

/// Offset expiry (Kafka's `offsets.retention.minutes`), on the coordinator only: proposes
/// [`MetaCommand::ExpireGroupOffsets`] for every group without members (neither stored nor
/// here) whose last activity (a commit, or becoming empty) is at least
/// `kafka.offsets_retention_ms` old; applied only if the group stayed idle. Returns how many
/// groups' expiry committed.
async fn expire_offsets<H: GroupsHost>(node: &Arc<H>) -> usize {
    let Some(term) = coordinator_term(node) else {
        return 0;
    };
    let retention_ms =
        i64::try_from(node.config().kafka.offsets_retention.as_millis()).unwrap_or(i64::MAX);
    let due = node.metadata().expired_groups(
        // Not ahead of the monotonic clock: a forward jump of this node's wall clock
        // expires nothing early (logstore::clock).
        logstore::clock::retention_now_ms() as i64,
        retention_ms,
        MAX_EXPIRIES_PER_CHECK,
    );
    let mut expired = 0;
    // Empty consumer-protocol groups without committed offsets go (Kafka's cleanup deletes
    // an empty group once it has no offsets).
    for group in coordinator(node).consumer_empty_groups(term) {
        let has_offsets = node
            .metadata()
            .offsets
            .get(&group)
            .is_some_and(|o| !o.is_empty());
        if !has_offsets {
            let _ = coordinator(node).consumer_remove_empty(term, &group);
        }
    }
    for (group, activity_ms) in due {
        // Members here whose membership is not stored yet keep the group's offsets.
        if coordinator(node)
            .describe(term, &group)
            .is_some_and(|d| !d.members.is_empty())
        {
            continue;
        }
        let command = MetaCommand::ExpireGroupOffsets {
            group: group.clone(),
            activity_ms,
        };
        match node
            .metadata_proposer()
            .propose_in_term(&command, term, COMMIT_TIMEOUT)
            .await
        {
            Ok(_) => {
                // An empty consumer-protocol group went with its offsets.
                let _ = coordinator(node).consumer_remove_empty(term, &group);
                expired += 1
            }
            Err(e) => {
                tracing::warn!(%group, "expiring a group's offsets failed: {e}");
                break;
            }
        }
    }
    expired
}

/// Writes the coordinator's membership records ([`MetaCommand::StoreGroup`]) through the
/// metadata group, one at a time in the order they were taken, each only while this node still
/// coordinates in the records' term (never through another leader). A record that fails is
/// dropped with a log line: the group keeps running here, and a later coordinator loads the
/// group's previous record (its members then rejoin, as without the record). Ends with the host.
pub(super) fn start_persister<H: GroupsHost>(node: Weak<H>, waiting: Arc<tokio::sync::Notify>) {
    tokio::spawn(async move {
        loop {
            // Woken by new records; the timeout notices the node's end.
            let _ = tokio::time::timeout(Duration::from_secs(1), waiting.notified()).await;
            let Some(node) = node.upgrade() else {
                return;
            };
            if node.metadata_group().is_none() {
                return;
            }
            let Some((term, last_seq, records)) = node.group_coordinator().take_records() else {
                continue;
            };
            let total = records.len();
            for (done, (group, store)) in records.into_iter().enumerate() {
                let command = match store {
                    GroupStore::Classic(record) => MetaCommand::StoreGroup {
                        group: group.clone(),
                        record,
                        time_ms: wall_clock_ms(),
                    },
                    GroupStore::Consumer(record) => MetaCommand::StoreConsumerGroup {
                        group: group.clone(),
                        record,
                        time_ms: wall_clock_ms(),
                    },
                };
                match node
                    .metadata_proposer()
                    .propose_in_term(&command, term, COMMIT_TIMEOUT)
                    .await
                {
                    Ok(_) => {}
                    Err(
                        AppendError::NotLeader { .. } | AppendError::Lost | AppendError::Stopped,
                    ) => {
                        // No longer the coordinator of this term: the rest cannot be written
                        // either; the next coordinator loads what was stored.
                        tracing::info!(
                            term,
                            left = total - done,
                            "group records of a past term dropped"
                        );
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(%group, term, "storing a group's membership failed: {e}")
                    }
                }
            }
            // Written, or given up on: SyncGroup answers waiting for these records go out.
            node.group_coordinator().records_stored(last_seq);
        }
    });
}

/// Every [`TICK`]: expire sessions, complete due rebalances, and drop the
/// groups when this node no longer leads. Ends with the host (dropped) or the node's shutdown.
pub(super) fn start_ticker<H: GroupsHost>(node: Weak<H>) {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(TICK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let Some(node) = node.upgrade() else {
                return;
            };
            let running = node.metadata_group().is_some();
            node.group_coordinator()
                .tick(coordinator_term(&node), Instant::now());
            super::consumer::classic_api::downgrade_after_tick(&node);
            if !running {
                return;
            }
        }
    });
}
