//! The Kafka handler of EndTxn: decides the producer's ongoing transaction (PrepareCommit or
//! PrepareAbort, committed through the metadata group) and answers; the markers are then
//! written by the partitions' leaders ([`super::markers`]) and the transaction completes when
//! the last is.
//!
//! **Transaction version 2** (EndTxn v5, KIP-890 part 2): the decision bumps the producer
//! epoch, so the markers carry the new epoch (they fence every batch of the ended transaction
//! still in flight) and the answer hands the producer the epoch its next transaction uses. An
//! EndTxn of the older epoch is then only a retry of that decision (answered as the first
//! one was) or, once a later transaction has begun, fenced: a delayed EndTxn can never end
//! the next transaction (KAFKA-17754). An epoch that would pass `i16::MAX - 1` moves the
//! transactional id to a new producer id instead (epoch 0, taken over when the markers are
//! written; see [`TxnRecord::next_producer_id`]).

use std::sync::Arc;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::end_txn_request::EndTxnRequest;
use kafka_proto::messages::end_txn_response::EndTxnResponse;

use super::coordinator::{check_producer, coordinator_epoch, coordinator_term, fenced, put};
use super::limits::COMMIT_TIMEOUT;
use crate::kafka::access::Access;
use crate::kafka::host::TxnHost;
use crate::kafka::reply::{self, Reply};
use crate::metadata::{wall_clock_ms, TxnRecord, TxnStatus};
use crate::security::acl::AclOperation;

/// The first EndTxn version of transaction version 2.
const TRANSACTION_V2_FROM: i16 = 5;

/// Handles EndTxn. WRITE on the transactional id is required, as in Kafka (else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
///
/// Answers as Kafka's coordinator: a retry of a decision being carried out gets
/// CONCURRENT_TRANSACTIONS, of one carried out NONE; the other decision, or ending a
/// transaction that has none of its partitions or groups, INVALID_TXN_STATE; a producer whose
/// epoch was bumped (a timeout, a newer producer, or under transaction version 2 a later
/// transaction) PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2). From v5 the answer
/// carries the producer id and epoch to continue with (-1 on an error).
pub(crate) fn end_txn<H: TxnHost>(
    node: &Arc<H>,
    access: &Access,
    req: EndTxnRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let refused = !access.transactional_id(AclOperation::Write, &req.transactional_id);
    let node = node.clone();
    reply::later(correlation_id, version, async move {
        let answer = if refused {
            Err(ErrorCode::TransactionalIdAuthorizationFailed)
        } else {
            end(&node, &req, version).await
        };
        let (code, (producer_id, producer_epoch)) = match answer {
            Ok(producer) => (ErrorCode::None, producer),
            Err(code) => (code, (-1, -1)),
        };
        Response::EndTxn(EndTxnResponse {
            error_code: code.code(),
            producer_id,
            producer_epoch,
            ..Default::default()
        })
    })
}

/// Decides the request's transaction; the producer id and epoch the producer continues with.
async fn end<H: TxnHost>(
    node: &Arc<H>,
    req: &EndTxnRequest,
    version: i16,
) -> Result<(i64, i16), ErrorCode> {
    let term = coordinator_term(node).ok_or(ErrorCode::NotCoordinator)?;
    let id = &req.transactional_id;
    let _locked = node.txn_coordinator().lock(id).await;
    let current = node.metadata().transactions.get(id).cloned();
    let mut r = check_end_producer(
        current.as_ref(),
        req.producer_id,
        req.producer_epoch,
        version,
    )?;
    let commit = req.committed;
    match (r.status, commit) {
        (TxnStatus::Ongoing, _) => {}
        (TxnStatus::PrepareCommit, true) | (TxnStatus::PrepareAbort, false) => {
            return Err(ErrorCode::ConcurrentTransactions)
        }
        (TxnStatus::CompleteCommit, true) | (TxnStatus::CompleteAbort, false) => {
            return Ok((r.producer_id, r.producer_epoch))
        }
        _ => return Err(ErrorCode::InvalidTxnState),
    }
    r.status = if commit {
        TxnStatus::PrepareCommit
    } else {
        TxnStatus::PrepareAbort
    };
    if version >= TRANSACTION_V2_FROM {
        r.transaction_version = 2;
        if r.producer_epoch >= i16::MAX - 1 {
            r.next_producer_id = Some(node.allocate_producer_id(COMMIT_TIMEOUT).await.map_err(
                |e| {
                    tracing::warn!("allocating a producer id failed: {e}");
                    ErrorCode::CoordinatorNotAvailable
                },
            )?);
        }
        r.producer_epoch = r.producer_epoch.saturating_add(1);
    } else {
        r.transaction_version = 1;
    }
    r.update_ms = wall_clock_ms();
    r.coordinator_epoch = coordinator_epoch(term);
    let answer = match r.next_producer_id {
        Some(next) => (next, 0),
        None => (r.producer_id, r.producer_epoch),
    };
    put(node, term, id, r).await?;
    Ok(answer)
}

/// Checks EndTxn's producer against transactional id state `record`, as Kafka's coordinator
/// does. Transaction version 1: the id and epoch must be the current ones (see
/// [`check_producer`]). Transaction version 2 (the state's last change was made under it):
/// an ongoing or empty transaction needs the current epoch; one being decided or decided
/// accepts only the epoch before the current one (a retry of the EndTxn that bumped it), or
/// after a move to a new producer id the old id at its last epoch. Otherwise
/// INVALID_PRODUCER_ID_MAPPING (another producer id) or PRODUCER_FENCED.
pub(super) fn check_end_producer(
    record: Option<&TxnRecord>,
    producer_id: i64,
    producer_epoch: i16,
    version: i16,
) -> Result<TxnRecord, ErrorCode> {
    let Some(r) = record.filter(|r| r.bumps_epoch_per_transaction()) else {
        return check_producer(record, producer_id, producer_epoch, version, 2);
    };
    let retry_of_bump = r.producer_id == producer_id
        && i32::from(r.producer_epoch) == i32::from(producer_epoch) + 1;
    let retry_of_move = r.previous_producer_id == Some(producer_id)
        && producer_epoch == i16::MAX - 1
        && r.producer_epoch == 0;
    if r.producer_id != producer_id && !retry_of_move {
        return Err(ErrorCode::InvalidProducerIdMapping);
    }
    let valid = match r.status {
        TxnStatus::Ongoing | TxnStatus::Empty => producer_epoch == r.producer_epoch,
        TxnStatus::PrepareCommit | TxnStatus::PrepareAbort => retry_of_bump,
        TxnStatus::CompleteCommit | TxnStatus::CompleteAbort => retry_of_bump || retry_of_move,
    };
    if valid {
        Ok(r.clone())
    } else {
        Err(fenced(version, 2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: TxnStatus, epoch: i16, version: i16) -> TxnRecord {
        TxnRecord {
            producer_id: 1000,
            producer_epoch: epoch,
            timeout_ms: 60_000,
            status,
            partitions: Default::default(),
            groups: Default::default(),
            start_ms: 1,
            update_ms: 1,
            coordinator_epoch: 1,
            transaction_version: version,
            next_producer_id: None,
            previous_producer_id: Some(900),
        }
    }

    /// Transaction version 2: the epoch before the current one is a retry only while the
    /// transaction it ended is the last one; a later transaction fences it (KAFKA-17754).
    #[test]
    fn version_2_takes_the_previous_epoch_only_as_a_retry() {
        let check = |r: &TxnRecord, pid: i64, epoch: i16| {
            check_end_producer(Some(r), pid, epoch, 5).map(|_| ()).err()
        };
        let decided = record(TxnStatus::PrepareCommit, 4, 2);
        assert_eq!(check(&decided, 1000, 3), None, "retry while being decided");
        assert_eq!(check(&decided, 1000, 4), Some(ErrorCode::ProducerFenced));
        let done = record(TxnStatus::CompleteCommit, 4, 2);
        assert_eq!(check(&done, 1000, 3), None, "retry once decided");
        assert_eq!(check(&done, 1000, 2), Some(ErrorCode::ProducerFenced));
        let next = record(TxnStatus::Ongoing, 4, 2);
        assert_eq!(check(&next, 1000, 4), None);
        assert_eq!(
            check(&next, 1000, 3),
            Some(ErrorCode::ProducerFenced),
            "a delayed EndTxn of the last transaction must not end the next"
        );
        assert_eq!(
            check(&next, 1001, 4),
            Some(ErrorCode::InvalidProducerIdMapping)
        );
        // After a move to a new producer id: the old id at its last epoch is a retry.
        let moved = record(TxnStatus::CompleteAbort, 0, 2);
        assert_eq!(check(&moved, 900, i16::MAX - 1), None);
        assert_eq!(
            check(&moved, 900, 3),
            Some(ErrorCode::InvalidProducerIdMapping)
        );
        // Version 1: the current epoch only, whatever the state.
        let v1 = record(TxnStatus::CompleteCommit, 4, 1);
        assert_eq!(check(&v1, 1000, 4), None);
        assert_eq!(check(&v1, 1000, 3), Some(ErrorCode::ProducerFenced));
    }

    /// Completing a transaction whose EndTxn moved it to a new producer id hands the id over
    /// at epoch 0 and remembers the old one.
    #[test]
    fn an_exhausted_epoch_moves_to_the_next_producer_id_on_completion() {
        use crate::metadata::{ClusterMeta, MetaCommand};
        let mut m = ClusterMeta::new(vec![1]);
        let mut r = record(TxnStatus::PrepareCommit, i16::MAX, 2);
        r.partitions = [("a".to_string(), 0)].into();
        r.next_producer_id = Some(2000);
        m.apply_for_test(
            1,
            MetaCommand::PutTransaction {
                transactional_id: "tx".into(),
                record: r,
            },
        );
        assert_eq!(m.transactions["tx"].producer_id, 1000);
        m.apply_for_test(
            2,
            MetaCommand::TxnMarkersWritten {
                transactional_id: "tx".into(),
                producer_id: 1000,
                producer_epoch: i16::MAX,
                partitions: vec![("a".into(), 0)],
                time_ms: 5,
            },
        );
        let done = &m.transactions["tx"];
        assert_eq!(done.status, TxnStatus::CompleteCommit);
        assert_eq!((done.producer_id, done.producer_epoch), (2000, 0));
        assert_eq!(
            (done.next_producer_id, done.previous_producer_id),
            (None, Some(1000))
        );
    }
}
