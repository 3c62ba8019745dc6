//! This node's transaction coordinator as the handlers reach it: the metadata term it
//! coordinates in, one lock per transactional id (a request reads the state, decides, and
//! writes the new state under it, so two requests for one id never decide on the same old
//! state), and the one way the state is written ([`put`]: only in the term the decision was
//! made in).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use kafka_proto::error_code::ErrorCode;

use super::limits::COMMIT_TIMEOUT;
use crate::kafka::host::TxnHost;
use crate::metadata::{MetaCommand, TxnRecord};
use crate::replication::group::AppendError;

/// The in-memory part of this node's transaction coordinator: the per-id locks and whether
/// its tasks run. Its state is the replicated metadata's (`ClusterMeta::transactions`).
#[derive(Default)]
pub(crate) struct TxnCoordinator {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    tasks_started: AtomicBool,
}

impl TxnCoordinator {
    /// A coordinator with no lock taken and no task started.
    pub(crate) fn new() -> TxnCoordinator {
        TxnCoordinator::default()
    }

    /// Waits for and takes transactional id `id`'s lock.
    pub(super) async fn lock(&self, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(locks.entry(id.to_string()).or_default())
        };
        lock.lock_owned().await
    }

    /// Forgets the locks nobody holds or waits for (their ids are locked again on demand).
    pub(super) fn prune_locks(&self) {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.retain(|_, l| Arc::strong_count(l) > 1);
    }

    /// True exactly once: the caller starts the coordinator's tasks.
    pub(super) fn claim_tasks(&self) -> bool {
        !self.tasks_started.swap(true, Ordering::SeqCst)
    }
}

/// The metadata term in which this node leads the metadata group (and so coordinates every
/// transaction); None when it does not lead, or has not applied the metadata through its
/// term's start yet (the previous coordinator's last writes may not be known then). The first
/// call starts the coordinator's tasks.
pub(super) fn coordinator_term<H: TxnHost>(node: &Arc<H>) -> Option<u64> {
    super::tasks::start(node);
    let v = node.metadata_group()?.visible();
    (v.leader != 0 && v.leader == node.config().id && v.leader_ready).then_some(v.term)
}

/// The coordinator epoch markers carry: the metadata term, saturated to Kafka's int32.
pub(super) fn coordinator_epoch(term: u64) -> i32 {
    i32::try_from(term).unwrap_or(i32::MAX)
}

/// Writes transactional id `id`'s new state through the metadata group, only while this node
/// leads in `term` (never through a later leader); returns once applied here. A failure is
/// the error the client gets: NOT_COORDINATOR when leadership moved (the client finds the new
/// coordinator), COORDINATOR_NOT_AVAILABLE otherwise (the client retries).
pub(super) async fn put<H: TxnHost>(
    node: &Arc<H>,
    term: u64,
    id: &str,
    record: TxnRecord,
) -> Result<(), ErrorCode> {
    let command = MetaCommand::PutTransaction {
        transactional_id: id.to_string(),
        record,
    };
    match node
        .metadata_proposer()
        .propose_in_term(&command, term, COMMIT_TIMEOUT)
        .await
    {
        Ok(_) => Ok(()),
        Err(AppendError::NotLeader { .. } | AppendError::Lost | AppendError::Stopped) => {
            Err(ErrorCode::NotCoordinator)
        }
        Err(e) => {
            tracing::warn!(transactional_id = id, "storing a transaction failed: {e}");
            Err(ErrorCode::CoordinatorNotAvailable)
        }
    }
}

/// The state of transactional id `id` for a request of producer `producer_id` at
/// `producer_epoch` that changes it: takes the id's lock (held until the returned guard is
/// dropped, so no other change of the id interleaves), reads the state, and checks the
/// producer as [`check_producer`] does (PRODUCER_FENCED from version 2).
pub(super) async fn locked_record<H: TxnHost>(
    node: &Arc<H>,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    version: i16,
) -> Result<(tokio::sync::OwnedMutexGuard<()>, TxnRecord), ErrorCode> {
    let locked = node.txn_coordinator().lock(id).await;
    let current = node.metadata().transactions.get(id).cloned();
    let record = check_producer(current.as_ref(), producer_id, producer_epoch, version, 2)?;
    Ok((locked, record))
}

/// Checks a request's producer id and epoch against transactional id state `record`:
/// INVALID_PRODUCER_ID_MAPPING when the id is unknown or holds another producer id,
/// PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before `fenced_from`, the first version of the API
/// that knows PRODUCER_FENCED) when the epoch is not the current one.
pub(super) fn check_producer(
    record: Option<&TxnRecord>,
    producer_id: i64,
    producer_epoch: i16,
    version: i16,
    fenced_from: i16,
) -> Result<TxnRecord, ErrorCode> {
    let record = record
        .filter(|r| r.producer_id == producer_id)
        .ok_or(ErrorCode::InvalidProducerIdMapping)?;
    if record.producer_epoch != producer_epoch {
        return Err(fenced(version, fenced_from));
    }
    Ok(record.clone())
}

/// PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for versions before `fenced_from`.
pub(super) fn fenced(version: i16, fenced_from: i16) -> ErrorCode {
    if version >= fenced_from {
        ErrorCode::ProducerFenced
    } else {
        ErrorCode::InvalidProducerEpoch
    }
}
