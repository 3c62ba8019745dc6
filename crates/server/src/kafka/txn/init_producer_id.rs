//! InitProducerId with a transactional id: the producer id the transactional id holds, with
//! its epoch bumped (a new id on first use, or when the epoch would overflow), fencing every
//! older producer of the id. A transaction the older epoch left ongoing is aborted first, with
//! the bumped epoch (its markers fence the old producer's batches on every partition), and
//! the answer waits for that abort to complete.

use std::sync::Arc;
use std::time::Instant;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::messages::init_producer_id_request::InitProducerIdRequest;

use super::coordinator::{coordinator_term, fenced, put};
use super::limits::{ABORT_POLL, ABORT_WAIT, COMMIT_TIMEOUT, MAX_TRANSACTION_TIMEOUT_MS};
use crate::kafka::host::TxnHost;
use crate::metadata::{wall_clock_ms, TxnRecord, TxnStatus};

/// InitProducerId's answer for transactional id `id`: (producer id, epoch) or the error.
/// The caller checked WRITE on the id.
pub(crate) async fn init_transactional<H: TxnHost>(
    node: &Arc<H>,
    id: &str,
    req: &InitProducerIdRequest,
    version: i16,
) -> Result<(i64, i16), ErrorCode> {
    if req.transaction_timeout_ms <= 0 || req.transaction_timeout_ms > MAX_TRANSACTION_TIMEOUT_MS {
        return Err(ErrorCode::InvalidTransactionTimeout);
    }
    let term = coordinator_term(node).ok_or(ErrorCode::NotCoordinator)?;
    let _locked = node.txn_coordinator().lock(id).await;
    let mut current = node.metadata().transactions.get(id).cloned();
    if let Some(r) = &current {
        // KIP-360: a producer that names its id and epoch must hold the current ones.
        if req.producer_id >= 0
            && (req.producer_id != r.producer_id || req.producer_epoch != r.producer_epoch)
        {
            return Err(fenced(version, 4));
        }
        if r.status.preparing().is_some() {
            return Err(ErrorCode::ConcurrentTransactions);
        }
        if r.status == TxnStatus::Ongoing {
            abort_with_bumped_epoch(node, term, id, r).await?;
            current = wait_for_abort(node, id).await?;
        }
    }
    let (producer_id, producer_epoch) = match &current {
        Some(r) if r.producer_epoch < i16::MAX - 1 => (r.producer_id, r.producer_epoch + 1),
        // First use, or the epoch is exhausted: a new producer id.
        _ => match node.allocate_producer_id(COMMIT_TIMEOUT).await {
            Ok(pid) => (pid, 0),
            Err(e) => {
                tracing::warn!("allocating a producer id failed: {e}");
                return Err(ErrorCode::CoordinatorNotAvailable);
            }
        },
    };
    let now = wall_clock_ms();
    let record = TxnRecord {
        producer_id,
        producer_epoch,
        timeout_ms: req.transaction_timeout_ms,
        status: TxnStatus::Empty,
        partitions: Default::default(),
        groups: Default::default(),
        start_ms: -1,
        update_ms: now,
        coordinator_epoch: current.as_ref().map_or(0, |r| r.coordinator_epoch),
        transaction_version: 1,
        next_producer_id: None,
        previous_producer_id: None,
    };
    put(node, term, id, record).await?;
    Ok((producer_id, producer_epoch))
}

/// Decides the ongoing transaction of `record` as aborted, with the epoch bumped (an
/// exhausted epoch keeps its value: the new producer id of the re-init fences it anyway).
pub(super) async fn abort_with_bumped_epoch<H: TxnHost>(
    node: &Arc<H>,
    term: u64,
    id: &str,
    record: &TxnRecord,
) -> Result<(), ErrorCode> {
    let mut aborted = record.clone();
    aborted.producer_epoch = aborted.producer_epoch.saturating_add(1);
    aborted.status = TxnStatus::PrepareAbort;
    aborted.update_ms = wall_clock_ms();
    aborted.coordinator_epoch = super::coordinator::coordinator_epoch(term);
    put(node, term, id, aborted).await
}

/// Waits (at most [`ABORT_WAIT`]) until transactional id `id`'s abort completed; its state
/// then, or CONCURRENT_TRANSACTIONS (the producer retries, the abort goes on).
async fn wait_for_abort<H: TxnHost>(
    node: &Arc<H>,
    id: &str,
) -> Result<Option<TxnRecord>, ErrorCode> {
    let started = Instant::now();
    loop {
        let now = node.metadata().transactions.get(id).cloned();
        if now.as_ref().is_some_and(|r| r.status.preparing().is_none()) {
            return Ok(now);
        }
        if started.elapsed() >= ABORT_WAIT {
            return Err(ErrorCode::ConcurrentTransactions);
        }
        tokio::time::sleep(ABORT_POLL).await;
    }
}
