//! The Kafka handlers that add to a transaction: AddPartitionsToTxn (v0-3 from a producer;
//! v4+ the batched form brokers send, with `verify_only`, KIP-890 part 1) and AddOffsetsToTxn.
//! Each adds to the transactional id's replicated state and answers once that is committed;
//! `verify_only` answers from the state.

use std::sync::Arc;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest;
use kafka_proto::messages::add_offsets_to_txn_response::AddOffsetsToTxnResponse;
use kafka_proto::messages::add_partitions_to_txn_request::AddPartitionsToTxnRequest;
use kafka_proto::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResponse, AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult, V3AndBelowPartitionResult, V3AndBelowTopicResult,
};

use super::coordinator::{check_producer, coordinator_term, locked_record, put};
use crate::kafka::access::Access;
use crate::kafka::host::TxnHost;
use crate::kafka::reply::{self, Reply};
use crate::metadata::{wall_clock_ms, TxnStatus};
use crate::security::acl::AclOperation;

/// One transaction's partitions to add, and the answer per partition.
struct Addition {
    id: String,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    /// (topic, partitions) as asked, in request order.
    topics: Vec<(String, Vec<i32>)>,
}

/// Per topic, per partition: the error code.
type Results = Vec<(String, Vec<(i32, ErrorCode)>)>;

/// Handles AddPartitionsToTxn.
///
/// Authorization as Kafka's: v0-3 need WRITE on the transactional id (else every partition
/// answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic (else its partitions
/// answer TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED); v4+ need
/// CLUSTER_ACTION (else the top-level CLUSTER_AUTHORIZATION_FAILED).
pub(crate) fn add_partitions_to_txn<H: TxnHost>(
    node: &Arc<H>,
    access: &Access,
    req: AddPartitionsToTxnRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let additions: Vec<Addition> = if version >= 4 {
        req.transactions
            .into_iter()
            .map(|t| Addition {
                id: t.transactional_id,
                producer_id: t.producer_id,
                producer_epoch: t.producer_epoch,
                verify_only: t.verify_only,
                topics: t
                    .topics
                    .into_iter()
                    .map(|t| (t.name, t.partitions))
                    .collect(),
            })
            .collect()
    } else {
        vec![Addition {
            id: req.v3_and_below_transactional_id,
            producer_id: req.v3_and_below_producer_id,
            producer_epoch: req.v3_and_below_producer_epoch,
            verify_only: false,
            topics: req
                .v3_and_below_topics
                .into_iter()
                .map(|t| (t.name, t.partitions))
                .collect(),
        }]
    };
    let cluster_refused = version >= 4 && !access.cluster(AclOperation::ClusterAction);
    // Authorization and existence, per transaction, before anything is written.
    let checked: Vec<(Addition, Option<Results>)> = additions
        .into_iter()
        .map(|a| {
            let refused = refusals(node, access, &a, version >= 4);
            (a, refused)
        })
        .collect();
    let node = node.clone();
    reply::later(correlation_id, version, async move {
        let mut results = Vec::with_capacity(checked.len());
        for (a, refused) in checked {
            let r = match refused {
                _ if cluster_refused => Vec::new(),
                Some(r) => r,
                None => {
                    let code = add(&node, &a, version)
                        .await
                        .err()
                        .unwrap_or(ErrorCode::None);
                    every(&a.topics, code)
                }
            };
            results.push((a.id, r));
        }
        let mut resp = AddPartitionsToTxnResponse::default();
        if cluster_refused {
            resp.error_code = ErrorCode::ClusterAuthorizationFailed.code();
        } else if version >= 4 {
            resp.results_by_transaction = results
                .into_iter()
                .map(|(id, r)| AddPartitionsToTxnResult {
                    transactional_id: id,
                    topic_results: r
                        .into_iter()
                        .map(|(name, ps)| AddPartitionsToTxnTopicResult {
                            name,
                            results_by_partition: ps
                                .into_iter()
                                .map(|(p, code)| AddPartitionsToTxnPartitionResult {
                                    partition_index: p,
                                    partition_error_code: code.code(),
                                    ..Default::default()
                                })
                                .collect(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect();
        } else if let Some((_, r)) = results.into_iter().next() {
            resp.results_by_topic_v3_and_below = r
                .into_iter()
                .map(|(name, ps)| V3AndBelowTopicResult {
                    name,
                    results_by_partition: ps
                        .into_iter()
                        .map(|(p, code)| V3AndBelowPartitionResult {
                            partition_index: p,
                            partition_error_code: code.code(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect();
        }
        Response::AddPartitionsToTxn(resp)
    })
}

/// Every partition of `topics` answering `code`.
fn every(topics: &[(String, Vec<i32>)], code: ErrorCode) -> Results {
    topics
        .iter()
        .map(|(t, ps)| (t.clone(), ps.iter().map(|p| (*p, code)).collect()))
        .collect()
}

/// The answer when addition `a` must not go ahead: an unauthorized transactional id or
/// topic, or a partition that does not exist (the others then answer
/// OPERATION_NOT_ATTEMPTED, as in Kafka). None when it may.
fn refusals<H: TxnHost>(
    node: &Arc<H>,
    access: &Access,
    a: &Addition,
    from_broker: bool,
) -> Option<Results> {
    if !from_broker && !access.transactional_id(AclOperation::Write, &a.id) {
        return Some(every(
            &a.topics,
            ErrorCode::TransactionalIdAuthorizationFailed,
        ));
    }
    let mut any = false;
    let results: Results = a
        .topics
        .iter()
        .map(|(topic, ps)| {
            let allowed = from_broker || access.topic(AclOperation::Write, topic);
            let count = node.topic_layout(topic).map_or(0, |l| l.replicas.len());
            let codes = ps
                .iter()
                .map(|p| {
                    let code = if !allowed {
                        ErrorCode::TopicAuthorizationFailed
                    } else if *p < 0 || usize::try_from(*p).map_or(true, |p| p >= count) {
                        ErrorCode::UnknownTopicOrPartition
                    } else {
                        ErrorCode::None
                    };
                    any |= code != ErrorCode::None;
                    (*p, code)
                })
                .collect();
            (topic.clone(), codes)
        })
        .collect();
    any.then(|| {
        results
            .into_iter()
            .map(|(t, ps)| {
                let ps = ps
                    .into_iter()
                    .map(|(p, c)| {
                        let c = if c == ErrorCode::None {
                            ErrorCode::OperationNotAttempted
                        } else {
                            c
                        };
                        (p, c)
                    })
                    .collect();
                (t, ps)
            })
            .collect()
    })
}

/// Adds (or with `verify_only` checks) addition `a`'s partitions to its transaction.
async fn add<H: TxnHost>(node: &Arc<H>, a: &Addition, version: i16) -> Result<(), ErrorCode> {
    let term = coordinator_term(node).ok_or(ErrorCode::NotCoordinator)?;
    let mut wanted: Vec<(String, i32)> = Vec::new();
    for (t, ps) in &a.topics {
        wanted.extend(ps.iter().map(|p| (t.clone(), *p)));
    }
    if a.verify_only {
        let meta = node.metadata();
        let r = check_producer(
            meta.transactions.get(&a.id),
            a.producer_id,
            a.producer_epoch,
            version,
            2,
        )?;
        let all = r.status == TxnStatus::Ongoing && wanted.iter().all(|p| r.partitions.contains(p));
        return if all {
            Ok(())
        } else {
            Err(ErrorCode::InvalidTxnState)
        };
    }
    let (_locked, mut r) =
        locked_record(node, &a.id, a.producer_id, a.producer_epoch, version).await?;
    let added = wanted;
    start_or_join(&mut r)?;
    if r.status == TxnStatus::Ongoing && added.iter().all(|p| r.partitions.contains(p)) {
        return Ok(());
    }
    r.status = TxnStatus::Ongoing;
    r.partitions.extend(added);
    put(node, term, &a.id, r).await
}

/// Makes `r` an ongoing transaction (starting one when none is), or the error when one is
/// being ended (CONCURRENT_TRANSACTIONS: the producer retries once it completes).
pub(super) fn start_or_join(r: &mut crate::metadata::TxnRecord) -> Result<(), ErrorCode> {
    let now = wall_clock_ms();
    match r.status {
        TxnStatus::PrepareCommit | TxnStatus::PrepareAbort => {
            Err(ErrorCode::ConcurrentTransactions)
        }
        TxnStatus::Ongoing => {
            r.update_ms = now;
            Ok(())
        }
        TxnStatus::Empty | TxnStatus::CompleteCommit | TxnStatus::CompleteAbort => {
            r.partitions.clear();
            r.groups.clear();
            r.start_ms = now;
            r.update_ms = now;
            Ok(())
        }
    }
}

/// Handles AddOffsetsToTxn: adds consumer group `group_id` to the transaction (its
/// TxnOffsetCommits are then part of it) and answers once committed.
///
/// Authorization as Kafka's: WRITE on the transactional id (else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (else
/// GROUP_AUTHORIZATION_FAILED).
pub(crate) fn add_offsets_to_txn<H: TxnHost>(
    node: &Arc<H>,
    access: &Access,
    req: AddOffsetsToTxnRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let refused = if !access.transactional_id(AclOperation::Write, &req.transactional_id) {
        Some(ErrorCode::TransactionalIdAuthorizationFailed)
    } else if !access.group(AclOperation::Read, &req.group_id) {
        Some(ErrorCode::GroupAuthorizationFailed)
    } else {
        None
    };
    let node = node.clone();
    reply::later(correlation_id, version, async move {
        let code = match refused {
            Some(code) => code,
            None => add_group(&node, &req, version)
                .await
                .err()
                .unwrap_or(ErrorCode::None),
        };
        Response::AddOffsetsToTxn(AddOffsetsToTxnResponse {
            error_code: code.code(),
            ..Default::default()
        })
    })
}

/// Adds the request's group to its transaction.
async fn add_group<H: TxnHost>(
    node: &Arc<H>,
    req: &AddOffsetsToTxnRequest,
    version: i16,
) -> Result<(), ErrorCode> {
    let term = coordinator_term(node).ok_or(ErrorCode::NotCoordinator)?;
    let id = &req.transactional_id;
    let (_locked, mut r) =
        locked_record(node, id, req.producer_id, req.producer_epoch, version).await?;
    start_or_join(&mut r)?;
    if r.status == TxnStatus::Ongoing && r.groups.contains(&req.group_id) {
        return Ok(());
    }
    r.status = TxnStatus::Ongoing;
    r.groups.insert(req.group_id.clone());
    put(node, term, id, r).await
}
