//! The partition side of a transactional Produce: a transactional batch is accepted only
//! when the replicated transaction state says its producer (id and epoch) has an ongoing
//! transaction that this partition was added to (KIP-890 part 1's verification, answered
//! from the state every node applies instead of by asking the coordinator).
//!
//! The coordinator answers AddPartitionsToTxn once the addition is committed, but the
//! partition's leader may not have applied it yet when the producer's first batch arrives. So
//! a request with a batch the local state does not verify first takes a barrier on the
//! metadata group (this node then has applied everything committed before: Raft's ReadIndex on
//! the metadata leader, a no-op entry elsewhere), and is submitted after it; a batch still unverified then is refused with INVALID_TXN_STATE,
//! as Kafka 3.9 answers an unverified transactional batch.

use std::sync::Arc;

use kafka_proto::messages::produce_request::ProduceRequest;
use kafka_proto::records::RecordBatch;

use super::limits::BARRIER_TIMEOUT;
use crate::kafka::access::Access;
use crate::kafka::host::{KafkaHost, ProduceHost};
use crate::kafka::produce::{produce, ProduceChain};
use crate::kafka::reply::Reply;
use crate::metadata::MetaCommand;

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

/// Waits until this node has applied everything the metadata group committed before the call
/// (or the attempt failed): on the metadata leader a ReadIndex (no log entry); elsewhere
/// (ReadIndex answers only on the leader) a no-op entry committed through the leader, applied
/// here after everything committed before it.
async fn metadata_barrier<H: KafkaHost>(node: &H) {
    let Some(group) = node.metadata_group() else {
        return;
    };
    if group.visible().leader == node.config().id {
        let _ = group.read_index(BARRIER_TIMEOUT).await;
    } else {
        let _ = node
            .metadata_proposer()
            .propose(&MetaCommand::barrier(), BARRIER_TIMEOUT)
            .await;
    }
}

/// Produces `req` once a read barrier on the metadata group has passed (or failed: the batches
/// are then checked against the state as it is). Not chained behind the connection's earlier
/// requests: a batch overtaking one of them is refused by the partition's sequence check and
/// retried by the producer.
pub(crate) fn produce_after_barrier<H: KafkaHost>(
    node: Arc<H>,
    access: Access,
    req: ProduceRequest,
    version: i16,
    correlation_id: i32,
    throttle: std::time::Duration,
) -> Reply {
    Reply::Later(Box::pin(async move {
        metadata_barrier(node.as_ref()).await;
        let mut chain = ProduceChain::default();
        match produce(
            node.as_ref(),
            &access,
            req,
            version,
            correlation_id,
            &mut chain,
            throttle,
            None,
        ) {
            Reply::Now(frame) => Some(frame),
            Reply::Later(answer) => answer.await,
            Reply::Direct(answer) => answer.await.0,
            Reply::None | Reply::Close => None,
        }
    }))
}
