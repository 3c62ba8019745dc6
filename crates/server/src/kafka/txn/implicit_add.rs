//! Transaction version 2's implicit additions, carried out by the coordinator: a partition
//! leader's [`MetaCommand::RequestTxnPartitions`](crate::metadata::MetaCommand) (a Produce
//! v12 to a partition not yet in its transaction, see [`super::produce_check`]) is queued in
//! the replicated state ([`crate::metadata::txn_partition_requests`]); as each is applied
//! (and every [`IMPLICIT_ADD_SCAN`]) the coordinator takes the requests committed since the last it
//! handled and adds their partitions as AddPartitionsToTxn does, under the transactional id's
//! lock, written with `PutTransaction` in its term. A request whose producer id and epoch are
//! not the transaction's current ones is dropped (a fenced or ended producer: its leader
//! refuses the batch), and so is one for a transaction being decided (the leader asks again
//! once it is decided). TxnOffsetCommit v5's implicit AddOffsets needs no request: the group
//! coordinator is this same node, which adds the group directly ([`add_group_implicitly`]).

use std::sync::{Arc, Weak};
use std::time::Instant;

use kafka_proto::error_code::ErrorCode;

use super::add_api::start_or_join;
use super::coordinator::{check_producer, coordinator_term, put};
use super::limits::{ABORT_POLL, ABORT_WAIT, IMPLICIT_ADD_SCAN};
use crate::kafka::host::TxnHost;
use crate::metadata::txn_partition_requests::TxnPartitionRequest;
use crate::metadata::TxnStatus;

/// Starts the request handler: as requests are applied here (and every [`IMPLICIT_ADD_SCAN`]),
/// while this node coordinates,
/// handles the requests committed after the last one it handled (on becoming coordinator,
/// every request still queued: one already carried out changes nothing). Ends with the host
/// or the node's shutdown.
pub(super) fn start_request_handler<H: TxnHost>(node: Weak<H>) {
    tokio::spawn(async move {
        let mut handled_through = 0u64;
        let mut coordinating_in = None;
        let Some(mut work) = node.upgrade().map(|n| n.transaction_work()) else {
            return;
        };
        loop {
            tokio::select! {
                changed = work.changed() => if changed.is_err() { return; },
                () = tokio::time::sleep(IMPLICIT_ADD_SCAN) => {}
            }
            let Some(node) = node.upgrade() else {
                return;
            };
            if node.metadata_group().is_none() {
                return;
            }
            let term = coordinator_term(&node);
            if term != coordinating_in {
                coordinating_in = term;
                handled_through = 0;
            }
            let Some(term) = term else {
                continue;
            };
            let requests = node
                .metadata()
                .txn_partition_requests_after(handled_through);
            for request in requests {
                handled_through = handled_through.max(request.index);
                let node = node.clone();
                tokio::spawn(async move { add_requested(&node, term, request).await });
            }
        }
    });
}

/// Carries out one request (see the module documentation).
async fn add_requested<H: TxnHost>(node: &Arc<H>, term: u64, request: TxnPartitionRequest) {
    let id = &request.transactional_id;
    let _locked = node.txn_coordinator().lock(id).await;
    let current = node.metadata().transactions.get(id).cloned();
    let Some(mut r) = current
        .filter(|r| r.producer_id == request.producer_id)
        .filter(|r| r.producer_epoch == request.producer_epoch)
    else {
        return;
    };
    if start_or_join(&mut r).is_err() {
        return;
    }
    if r.status == TxnStatus::Ongoing && request.partitions.iter().all(|p| r.partitions.contains(p))
    {
        return;
    }
    r.status = TxnStatus::Ongoing;
    r.transaction_version = 2;
    r.partitions.extend(request.partitions);
    if let Err(code) = put(node, term, id, r).await {
        tracing::debug!(transactional_id = %id, ?code, "an implicit AddPartitions failed");
    }
}

/// TxnOffsetCommit v5's implicit AddOffsetsToTxn: adds `group` to the transaction of
/// transactional id `id` (producer `producer_id` at `producer_epoch`), starting one if none
/// is ongoing (after the previous one's markers, waited for at most [`ABORT_WAIT`]), and marks
/// it transaction version 2. The errors are AddOffsetsToTxn's:
/// NOT_COORDINATOR, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for
/// TxnOffsetCommit, whose versions predate it), CONCURRENT_TRANSACTIONS.
pub(crate) async fn add_group_implicitly<H: TxnHost>(
    node: &Arc<H>,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    group: &str,
) -> Result<(), ErrorCode> {
    let term = coordinator_term(node).ok_or(ErrorCode::NotCoordinator)?;
    let started = Instant::now();
    let (_locked, mut r) = loop {
        let locked = node.txn_coordinator().lock(id).await;
        let current = node.metadata().transactions.get(id).cloned();
        let r = check_producer(current.as_ref(), producer_id, producer_epoch, 0, 2)?;
        // The producer's previous transaction may still be writing its markers.
        if r.status.preparing().is_none() || started.elapsed() >= ABORT_WAIT {
            break (locked, r);
        }
        drop(locked);
        tokio::time::sleep(ABORT_POLL).await;
    };
    start_or_join(&mut r)?;
    if r.status == TxnStatus::Ongoing && r.groups.contains(group) {
        return Ok(());
    }
    r.status = TxnStatus::Ongoing;
    r.transaction_version = 2;
    r.groups.insert(group.to_string());
    put(node, term, id, r).await
}
