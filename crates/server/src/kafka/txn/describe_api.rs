//! The Kafka handlers that read the coordinator's state: DescribeTransactions and
//! ListTransactions (what `kafka-transactions.sh describe` and `list` ask). Both answer on the
//! coordinator only, after a read barrier on the metadata group (so every change committed
//! before, also through a previous coordinator, is applied here).

use std::sync::Arc;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_proto::messages::describe_transactions_response::{
    DescribeTransactionsResponse, TopicData, TransactionState,
};
use kafka_proto::messages::list_transactions_request::ListTransactionsRequest;
use kafka_proto::messages::list_transactions_response::{
    ListTransactionsResponse, TransactionState as ListedTransaction,
};

use super::coordinator::coordinator_term;
use super::limits::BARRIER_TIMEOUT;
use crate::kafka::access::Access;
use crate::kafka::host::TxnHost;
use crate::kafka::reply::{self, Reply};
use crate::metadata::{wall_clock_ms, TxnRecord, TxnStatus};
use crate::security::acl::AclOperation;

/// NOT_COORDINATOR unless this node coordinates and has passed a read barrier.
async fn barrier<H: TxnHost>(node: &Arc<H>) -> Result<(), ErrorCode> {
    coordinator_term(node).ok_or(ErrorCode::NotCoordinator)?;
    let group = node.metadata_group().ok_or(ErrorCode::NotCoordinator)?;
    group
        .read_index(BARRIER_TIMEOUT)
        .await
        .map(|_| ())
        .map_err(|_| ErrorCode::NotCoordinator)
}

/// Handles DescribeTransactions: each asked id's state. DESCRIBE on the id is required
/// (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an unknown id answers
/// TRANSACTIONAL_ID_NOT_FOUND.
pub(crate) fn describe_transactions<H: TxnHost>(
    node: &Arc<H>,
    access: &Access,
    req: DescribeTransactionsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let allowed: Vec<(String, bool)> = req
        .transactional_ids
        .into_iter()
        .map(|id| {
            let ok = access.transactional_id(AclOperation::Describe, &id);
            (id, ok)
        })
        .collect();
    let node = node.clone();
    reply::later(correlation_id, version, async move {
        let ready = barrier(&node).await;
        let meta = node.metadata();
        let transaction_states = allowed
            .into_iter()
            .map(|(id, ok)| {
                let error = |code: ErrorCode| TransactionState {
                    error_code: code.code(),
                    transactional_id: id.clone(),
                    producer_id: -1,
                    producer_epoch: -1,
                    transaction_start_time_ms: -1,
                    ..Default::default()
                };
                if !ok {
                    return error(ErrorCode::TransactionalIdAuthorizationFailed);
                }
                if let Err(code) = ready {
                    return error(code);
                }
                match meta.transactions.get(&id) {
                    None => error(ErrorCode::TransactionalIdNotFound),
                    Some(r) => described(id.clone(), r),
                }
            })
            .collect();
        Response::DescribeTransactions(DescribeTransactionsResponse {
            transaction_states,
            ..Default::default()
        })
    })
}

/// One transaction as DescribeTransactions shows it.
fn described(id: String, r: &TxnRecord) -> TransactionState {
    let mut topics: Vec<TopicData> = Vec::new();
    for (topic, p) in &r.partitions {
        match topics.last_mut() {
            Some(t) if t.name == *topic => t.partition_indexes.push(*p),
            _ => topics.push(TopicData {
                name: topic.clone(),
                partition_indexes: vec![*p],
                ..Default::default()
            }),
        }
    }
    let active = matches!(
        r.status,
        TxnStatus::Ongoing | TxnStatus::PrepareCommit | TxnStatus::PrepareAbort
    );
    TransactionState {
        error_code: 0,
        transactional_id: id,
        transaction_state: r.status.kafka_name().to_string(),
        transaction_timeout_ms: r.timeout_ms,
        transaction_start_time_ms: if active { r.start_ms } else { -1 },
        producer_id: r.producer_id,
        producer_epoch: r.producer_epoch,
        topic_partitions: topics,
        ..Default::default()
    }
}

/// Handles ListTransactions: the transactional ids this principal may DESCRIBE, filtered by
/// state names, producer ids and (v1) how long they have been running. Answered by the
/// coordinator only (every node holds the state, but the admin client asks every broker and
/// lists what each answers); other nodes answer an empty list.
pub(crate) fn list_transactions<H: TxnHost>(
    node: &Arc<H>,
    access: &Access,
    req: ListTransactionsRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let node = node.clone();
    let access = access.clone();
    reply::later(correlation_id, version, async move {
        let mut resp = ListTransactionsResponse::default();
        if coordinator_term(&node).is_none() {
            return Response::ListTransactions(resp);
        }
        if let Err(code) = barrier(&node).await {
            resp.error_code = code.code();
            return Response::ListTransactions(resp);
        }
        let states: Vec<TxnStatus> = req
            .state_filters
            .iter()
            .filter_map(|s| TxnStatus::from_kafka_name(s))
            .collect();
        // A filter naming only states this version does not know matches nothing; the unknown
        // names are sent back, as Kafka does.
        let unknown_states_only = !req.state_filters.is_empty() && states.is_empty();
        resp.unknown_state_filters = req
            .state_filters
            .iter()
            .filter(|s| TxnStatus::from_kafka_name(s).is_none())
            .cloned()
            .collect();
        let now = wall_clock_ms();
        let matching: Vec<ListedTransaction> = node
            .metadata()
            .transactions
            .iter()
            .filter(|_| !unknown_states_only)
            .filter(|(_, r)| states.is_empty() || states.contains(&r.status))
            .filter(|(_, r)| {
                req.producer_id_filters.is_empty()
                    || req.producer_id_filters.contains(&r.producer_id)
            })
            .filter(|(_, r)| {
                req.duration_filter < 0
                    || (r.start_ms >= 0
                        && r.status == TxnStatus::Ongoing
                        && now.saturating_sub(r.start_ms) >= req.duration_filter)
            })
            .map(|(id, r)| ListedTransaction {
                transactional_id: id.clone(),
                producer_id: r.producer_id,
                transaction_state: r.status.kafka_name().to_string(),
                ..Default::default()
            })
            .collect();
        // The ACLs are read from the metadata too: checked after its guard is released.
        resp.transaction_states = matching
            .into_iter()
            .filter(|t| access.transactional_id(AclOperation::Describe, &t.transactional_id))
            .collect();
        Response::ListTransactions(resp)
    })
}
