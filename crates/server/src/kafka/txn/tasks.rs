//! The transaction coordinator's background tasks, started once per host (on every node: the
//! marker writer runs wherever partitions lead) and ending with it: the marker writer
//! ([`super::markers`]) and, while this node coordinates, the handler of implicit additions
//! ([`super::implicit_add`]), the timeout check and the expiration of unused transactional
//! ids.

use std::sync::{Arc, Weak};

use super::coordinator::coordinator_term;
use super::init_producer_id::abort_with_bumped_epoch;
use super::limits::{COMMIT_TIMEOUT, MAX_EXPIRED_PER_SCAN, TIMEOUT_SCAN};
use super::markers::{report, start_marker_writer};
use crate::kafka::host::TxnHost;
use crate::metadata::{wall_clock_ms, MetaCommand, TxnStatus};

/// Starts the tasks, once per host.
pub(crate) fn start<H: TxnHost>(node: &Arc<H>) {
    if node.txn_coordinator().claim_tasks() {
        start_marker_writer(Arc::downgrade(node));
        super::implicit_add::start_request_handler(Arc::downgrade(node));
        start_checks(Arc::downgrade(node));
    }
}

/// Every [`TIMEOUT_SCAN`], while this node coordinates: aborts the transactions past their
/// timeout, marks as done the partitions of decided transactions that no longer exist, and
/// forgets idle locks. Ends with the host or the node's shutdown.
fn start_checks<H: TxnHost>(node: Weak<H>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(TIMEOUT_SCAN).await;
            let Some(node) = node.upgrade() else {
                return;
            };
            if node.metadata_group().is_none() {
                return;
            }
            let Some(term) = coordinator_term(&node) else {
                continue;
            };
            abort_timed_out(&node, term).await;
            expire_unused_ids(&node, term).await;
            drop_vanished_partitions(&node).await;
            node.txn_coordinator().prune_locks();
        }
    });
}

/// Aborts every ongoing transaction older than its timeout, bumping the producer's epoch as
/// Kafka does (the producer is fenced: its EndTxn gets PRODUCER_FENCED, and its batches of
/// the old epoch are refused by the partitions once the markers are written).
async fn abort_timed_out<H: TxnHost>(node: &Arc<H>, term: u64) {
    let now = wall_clock_ms();
    let expired = |r: &crate::metadata::TxnRecord| {
        r.status == TxnStatus::Ongoing
            && r.start_ms >= 0
            && now.saturating_sub(r.start_ms) > i64::from(r.timeout_ms)
    };
    let due: Vec<String> = node
        .metadata()
        .transactions
        .iter()
        .filter(|(_, r)| expired(r))
        .map(|(id, _)| id.clone())
        .collect();
    for id in due {
        let _locked = node.txn_coordinator().lock(&id).await;
        let Some(r) = node.metadata().transactions.get(&id).cloned() else {
            continue;
        };
        if !expired(&r) {
            continue;
        }
        match abort_with_bumped_epoch(node, term, &id, &r).await {
            Ok(()) => tracing::info!(transactional_id = %id, "transaction timed out: aborted"),
            Err(code) => {
                tracing::warn!(transactional_id = %id, ?code, "aborting a timed-out transaction failed");
                return;
            }
        }
    }
}

/// Forgets the transactional ids with no transaction ongoing that have not changed for
/// `kafka.transactional_id_expiration_ms` (Kafka's `transactional.id.expiration.ms`), so the
/// ids clients ever used do not grow the metadata for good. Each is one
/// [`MetaCommand::ExpireTransactionalId`], taken under the id's lock and applied only if the
/// id is still as found.
async fn expire_unused_ids<H: TxnHost>(node: &Arc<H>, term: u64) {
    let expiration_ms = i64::try_from(node.config().kafka.transactional_id_expiration.as_millis())
        .unwrap_or(i64::MAX);
    let now = wall_clock_ms();
    let expired = |r: &crate::metadata::TxnRecord| {
        r.may_expire() && now.saturating_sub(r.update_ms) > expiration_ms
    };
    let due: Vec<String> = node
        .metadata()
        .transactions
        .iter()
        .filter(|(_, r)| expired(r))
        .map(|(id, _)| id.clone())
        .take(MAX_EXPIRED_PER_SCAN)
        .collect();
    for id in due {
        let _locked = node.txn_coordinator().lock(&id).await;
        let Some(r) = node.metadata().transactions.get(&id).cloned() else {
            continue;
        };
        if !expired(&r) {
            continue;
        }
        let command = MetaCommand::ExpireTransactionalId {
            transactional_id: id.clone(),
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            update_ms: r.update_ms,
        };
        match node
            .metadata_proposer()
            .propose_in_term(&command, term, COMMIT_TIMEOUT)
            .await
        {
            Ok(_) => {
                tracing::info!(transactional_id = %id, "transactional id unused past its expiration: forgotten")
            }
            Err(e) => {
                tracing::debug!(transactional_id = %id, "expiring a transactional id failed (retried): {e}");
                return;
            }
        }
    }
}

/// A decided transaction: id, producer id and epoch, the partitions still to mark.
type Decided = (String, i64, i16, Vec<(String, i32)>);

/// Decided transactions' partitions whose topic (or partition) no longer exists get no
/// marker: they are reported as done so the transaction can complete.
async fn drop_vanished_partitions<H: TxnHost>(node: &Arc<H>) {
    // The metadata guard is released before anything is awaited.
    let decided: Vec<Decided> = {
        let meta = node.metadata();
        meta.deciding_transactions
            .iter()
            .filter_map(|id| {
                let r = meta.transactions.get(id)?;
                let ps = r.partitions.iter().cloned().collect();
                Some((id.clone(), r.producer_id, r.producer_epoch, ps))
            })
            .collect()
    };
    for (id, producer_id, producer_epoch, partitions) in decided {
        let gone: Vec<(String, i32)> = partitions
            .into_iter()
            .filter(|(topic, p)| {
                node.topic_layout(topic)
                    .is_none_or(|l| usize::try_from(*p).map_or(true, |p| p >= l.replicas.len()))
            })
            .collect();
        if !gone.is_empty() {
            report(node, &id, producer_id, producer_epoch, gone).await;
        }
    }
}
