//! The partition side of a transactional Produce: a transactional batch is accepted only
//! when the replicated transaction state says its producer (id and epoch) has an ongoing
//! transaction that this partition was added to (KIP-890 part 1's verification, answered
//! from the state every node applies instead of by asking the coordinator).
//!
//! The coordinator answers AddPartitionsToTxn once the addition is committed, but the
//! partition's leader may not have applied it yet when the producer's first batch arrives. So
//! a request with a batch the local state does not verify first takes a barrier on the
//! metadata group (this node then has applied everything committed before: Raft's ReadIndex on
//! the metadata leader, a no-op entry elsewhere), and is submitted after it; a batch still
//! unverified then is refused with INVALID_TXN_STATE, as Kafka 3.9 answers an unverified
//! transactional batch.
//!
//! **Transaction version 2** (Produce v12+, KIP-890 part 2): the producer sends no
//! AddPartitionsToTxn; its first batch to a partition adds it. The partition leader asks the
//! coordinator ([`MetaCommand::RequestTxnPartitions`] through the metadata group, carried out
//! by the coordinator under the transactional id's lock: [`super::implicit_add`]) and waits,
//! at most [`IMPLICIT_ADD_WAIT`], until the addition is applied here; then the batch is
//! checked as above. A batch still unverified gets INVALID_PRODUCER_EPOCH when the
//! transactional id holds a newer epoch (the producer was fenced, or its transaction ended),
//! and NOT_ENOUGH_REPLICAS otherwise (retriable, as Kafka 4 answers a coordinator that is busy
//! or moving): the producer retries it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::messages::produce_request::ProduceRequest;
use kafka_proto::records::RecordBatch;

use super::limits::{BARRIER_TIMEOUT, IMPLICIT_ADD_POLL, IMPLICIT_ADD_WAIT};
use crate::kafka::access::Access;
use crate::kafka::host::{KafkaHost, ProduceHost};
use crate::kafka::produce::{produce, ProduceChain};
use crate::kafka::reply::Reply;
use crate::metadata::{MetaCommand, TxnStatus};
use crate::security::acl::AclOperation;

/// Whether a batch of `records` (a Produce partition's data) is transactional and not
/// verified by this node's transaction state for `transactional_id` and `(topic, partition)`.
pub(crate) fn unverified_batch<H: ProduceHost + ?Sized>(
    node: &H,
    transactional_id: &str,
    topic: &str,
    partition: i32,
    batch: &RecordBatch,
) -> bool {
    batch.is_transactional()
        && !node.transaction_includes(
            transactional_id,
            batch.producer_id(),
            batch.producer_epoch(),
            topic,
            partition,
        )
}

/// The error of a transactional batch of `batch` that the state does not verify (see the
/// module documentation): INVALID_TXN_STATE before Produce v12; from v12 (transaction
/// version 2) INVALID_PRODUCER_EPOCH when the transactional id holds a newer epoch of the
/// producer, INVALID_TXN_STATE when it holds another producer id, NOT_ENOUGH_REPLICAS
/// (retriable) when its partition is not added yet.
pub(crate) fn unverified_batch_error<H: ProduceHost + ?Sized>(
    node: &H,
    transactional_id: &str,
    batch: &RecordBatch,
    version: i16,
) -> ErrorCode {
    if version < TRANSACTION_V2_PRODUCE_FROM {
        return ErrorCode::InvalidTxnState;
    }
    match node.transaction_producer(transactional_id) {
        Some((id, epoch)) if id == batch.producer_id() && epoch > batch.producer_epoch() => {
            ErrorCode::InvalidProducerEpoch
        }
        Some((id, _)) if id == batch.producer_id() => ErrorCode::NotEnoughReplicas,
        _ => ErrorCode::InvalidTxnState,
    }
}

/// The first Produce version of transaction version 2 (implicit AddPartitions).
pub(crate) const TRANSACTION_V2_PRODUCE_FROM: i16 = 12;

/// Whether transactional Produce `req` carries a batch this node's state does not verify
/// (see the module documentation): it is then produced with [`produce_after_barrier`].
pub(crate) fn needs_barrier<H: ProduceHost>(node: &H, req: &ProduceRequest) -> bool {
    let Some(id) = req.transactional_id.as_deref() else {
        return false;
    };
    req.topic_data.iter().any(|t| {
        t.partition_data.iter().any(|p| {
            p.records
                .as_ref()
                .and_then(|r| RecordBatch::new(r.to_contiguous()).ok())
                .is_some_and(|b| unverified_batch(node, id, &t.name, p.index, &b))
        })
    })
}

/// Produces `req` once a read barrier on the metadata group has passed (or failed: the batches
/// are then checked against the state as it is), after the connection's earlier Produce that
/// was held back the same way (`order.0`) submitted its batches; says so through `order.1`
/// once its own are submitted (see `ProduceChain::hold_back`), so a connection's batches keep
/// their order. Not chained behind the connection's earlier failed requests otherwise.
pub(crate) fn produce_after_barrier<H: KafkaHost>(
    node: Arc<H>,
    access: Access,
    req: ProduceRequest,
    version: i16,
    correlation_id: i32,
    throttle: std::time::Duration,
    order: (
        Option<tokio::sync::watch::Receiver<bool>>,
        tokio::sync::watch::Sender<bool>,
    ),
) -> Reply {
    let (previous, submitted) = order;
    Reply::Later(Box::pin(async move {
        if let Some(mut previous) = previous {
            // Bounded: the earlier request's own waits are (a barrier, an implicit add); a
            // dropped sender (its connection task gone) ends the wait too.
            let _ = previous.wait_for(|done| *done).await;
        }
        // A failed barrier leaves the batches checked against the state as it is.
        let _ = super::barrier::metadata_barrier(node.as_ref()).await;
        if version >= TRANSACTION_V2_PRODUCE_FROM {
            add_implicitly(node.as_ref(), &access, &req).await;
        }
        let mut chain = ProduceChain::default();
        let reply = produce(
            node.as_ref(),
            &access,
            req,
            version,
            correlation_id,
            &mut chain,
            throttle,
            None,
        );
        // The batches are submitted to their partitions (produce submits before it returns):
        // the connection's next Produce may go.
        let _ = submitted.send(true);
        match reply {
            Reply::Now(frame) => Some(frame),
            Reply::Later(answer) => answer.await,
            Reply::Direct(answer) => answer.await.0,
            Reply::None | Reply::Close => None,
        }
    }))
}

/// Transaction version 2: asks the coordinator to add the partitions of `req`'s batches this
/// node's state (past a metadata barrier) does not verify, of topics the principal may write
/// with a transactional id it may write (the Produce is refused otherwise), and waits until the additions are
/// applied here (see the module documentation).
async fn add_implicitly<H: KafkaHost>(node: &H, access: &Access, req: &ProduceRequest) {
    let Some(id) = req.transactional_id.as_deref() else {
        return;
    };
    // Only what the Produce itself may do (it is refused otherwise).
    if !access.transactional_id(AclOperation::Write, id) {
        return;
    }
    let mut wanted: BTreeMap<(i64, i16), Vec<(String, i32)>> = BTreeMap::new();
    for t in req
        .topic_data
        .iter()
        .filter(|t| access.topic(AclOperation::Write, &t.name))
    {
        for p in &t.partition_data {
            let batch = p
                .records
                .as_ref()
                .and_then(|r| RecordBatch::new(r.to_contiguous()).ok());
            if let Some(b) = batch.filter(|b| unverified_batch(node, id, &t.name, p.index, b)) {
                wanted
                    .entry((b.producer_id(), b.producer_epoch()))
                    .or_default()
                    .push((t.name.clone(), p.index));
            }
        }
    }
    for ((producer_id, producer_epoch), partitions) in wanted {
        wait_for_addition(node, id, producer_id, producer_epoch, partitions).await;
    }
}

/// Asks for `partitions` to be added to the transaction of `id` (producer `producer_id` at
/// `producer_epoch`) and waits until they are, the transactional id moved past that producer
/// and epoch, or [`IMPLICIT_ADD_WAIT`] passed. Asks again when the transaction changes without
/// them (it was being decided, or another addition came first); not while the state here is
/// behind the producer's epoch (an EndTxn that bumped it is not applied here yet).
async fn wait_for_addition<H: KafkaHost>(
    node: &H,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partitions: Vec<(String, i32)>,
) {
    let started = Instant::now();
    let mut asked_in: Option<(TxnStatus, i64)> = None;
    loop {
        let state = node.metadata().transactions.get(id).map(|r| {
            let added = r.status == TxnStatus::Ongoing
                && partitions.iter().all(|p| r.partitions.contains(p));
            (
                r.producer_id,
                r.producer_epoch,
                r.status,
                r.update_ms,
                added,
            )
        });
        let Some((held_id, held_epoch, status, update_ms, added)) = state else {
            return;
        };
        if added || held_id != producer_id || held_epoch > producer_epoch {
            return;
        }
        let current = held_epoch == producer_epoch && status.preparing().is_none();
        if current && asked_in != Some((status, update_ms)) {
            asked_in = Some((status, update_ms));
            let command = MetaCommand::RequestTxnPartitions {
                transactional_id: id.to_string(),
                producer_id,
                producer_epoch,
                partitions: partitions.clone(),
            };
            let asked = node
                .metadata_proposer()
                .propose(&command, BARRIER_TIMEOUT)
                .await;
            if let Err(e) = asked {
                tracing::debug!(
                    transactional_id = id,
                    "asking for an implicit AddPartitions failed: {e}"
                );
                return;
            }
        }
        if started.elapsed() >= IMPLICIT_ADD_WAIT {
            return;
        }
        tokio::time::sleep(IMPLICIT_ADD_POLL).await;
    }
}
