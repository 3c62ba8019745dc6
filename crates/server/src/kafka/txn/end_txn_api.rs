//! The Kafka handler of EndTxn: decides the producer's ongoing transaction (PrepareCommit or
//! PrepareAbort, committed through the metadata group) and answers; the markers are then
//! written by the partitions' leaders ([`super::markers`]) and the transaction completes when
//! the last is.

use std::sync::Arc;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::end_txn_request::EndTxnRequest;
use kafka_proto::messages::end_txn_response::EndTxnResponse;

use super::coordinator::{coordinator_epoch, coordinator_term, locked_record, put};
use crate::kafka::access::Access;
use crate::kafka::host::TxnHost;
use crate::kafka::reply::{self, Reply};
use crate::metadata::{wall_clock_ms, TxnStatus};
use crate::security::acl::AclOperation;

/// Handles EndTxn. WRITE on the transactional id is required, as in Kafka (else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
///
/// Answers as Kafka's coordinator: a retry of a decision being carried out gets
/// CONCURRENT_TRANSACTIONS, of one carried out NONE; the other decision, or ending a
/// transaction that has none of its partitions or groups, INVALID_TXN_STATE; a producer whose
/// epoch was bumped (a timeout, a newer producer) PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
/// before v2).
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
        let code = if refused {
            ErrorCode::TransactionalIdAuthorizationFailed
        } else {
            end(&node, &req, version)
                .await
                .err()
                .unwrap_or(ErrorCode::None)
        };
        Response::EndTxn(EndTxnResponse {
            error_code: code.code(),
            ..Default::default()
        })
    })
}

/// Decides the request's transaction.
async fn end<H: TxnHost>(
    node: &Arc<H>,
    req: &EndTxnRequest,
    version: i16,
) -> Result<(), ErrorCode> {
    let term = coordinator_term(node).ok_or(ErrorCode::NotCoordinator)?;
    let id = &req.transactional_id;
    let (_locked, mut r) =
        locked_record(node, id, req.producer_id, req.producer_epoch, version).await?;
    let commit = req.committed;
    match (r.status, commit) {
        (TxnStatus::Ongoing, _) => {}
        (TxnStatus::PrepareCommit, true) | (TxnStatus::PrepareAbort, false) => {
            return Err(ErrorCode::ConcurrentTransactions)
        }
        (TxnStatus::CompleteCommit, true) | (TxnStatus::CompleteAbort, false) => return Ok(()),
        _ => return Err(ErrorCode::InvalidTxnState),
    }
    r.status = if commit {
        TxnStatus::PrepareCommit
    } else {
        TxnStatus::PrepareAbort
    };
    r.update_ms = wall_clock_ms();
    r.coordinator_epoch = coordinator_epoch(term);
    put(node, term, id, r).await
}
