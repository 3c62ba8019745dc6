//! The Kafka handler of TxnOffsetCommit (API 28): a transactional producer commits a consumer
//! group's offsets as part of its transaction (`sendOffsetsToTransaction`). The offsets are
//! stored pending ([`MetaCommand::CommitTxnOffsets`]) and become the group's committed offsets
//! only when the transaction commits (see [`crate::metadata::txn_offsets`]); OffsetFetch does
//! not show them before, and with `require_stable` answers UNSTABLE_OFFSET_COMMIT for their
//! partitions meanwhile.
//!
//! Checked as Kafka's group coordinator checks it: NOT_COORDINATOR off the coordinator,
//! INVALID_GROUP_ID for an empty group id, and (v3+, KIP-447) the member, its static instance
//! and its generation when the producer names them; a rebalance in progress does not refuse it.
//!
//! **Verification.** The offsets are stored only when the transaction coordinator's replicated
//! state (see [`crate::metadata::transactions`]) shows the transactional id holding this
//! producer id and epoch, with an ongoing transaction the group was added to (AddOffsetsToTxn):
//! otherwise nothing would ever end them, and a read_committed consumer of the group would see
//! UNSTABLE_OFFSET_COMMIT for good. A request the local state does not verify first takes a
//! read barrier on the metadata group (the coordinator then has applied every addition it
//! answered), then is checked again. Refusals, for every partition: INVALID_PRODUCER_ID_MAPPING
//! (the transactional id is unknown or holds another producer id), INVALID_PRODUCER_EPOCH (an
//! older epoch: a fenced producer; Kafka's group coordinator answers the same), and
//! INVALID_TXN_STATE (no ongoing transaction with the group added; KIP-890's verification
//! error). The transaction coordinator ends the pending offsets when the transaction is
//! decided ([`crate::metadata::ClusterMeta::end_txn_offsets`]).
//!
//! **Transaction version 2** (v5, KIP-890 part 2): the producer sends no AddOffsetsToTxn, so
//! a group not yet in the transaction is added here (this node is also the transaction
//! coordinator: [`add_group_implicitly`], under the transactional id's lock) before the check;
//! its errors (a fenced producer, a transaction still being decided) are the answer.

use std::sync::Arc;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::txn_offset_commit_request::TxnOffsetCommitRequest;
use kafka_proto::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponse, TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};

use super::consumer::coordinator_ops::OffsetsCheck;
use super::node_coordinator::{coordinator, coordinator_term, read_barrier};
use super::offsets_api::{
    answer_topics, check_offsets, commit_and_respond, commit_then_answer, requested_offsets,
};
use crate::kafka::access::Access;
use crate::kafka::host::{GroupsHost, TxnHost};
use crate::kafka::reply::{self, Reply};
use crate::kafka::txn::implicit_add::add_group_implicitly;
use crate::metadata::{wall_clock_ms, MetaCommand};
use crate::metadata::{ClusterMeta, TxnStatus};
use crate::security::acl::AclOperation;

/// Handles TxnOffsetCommit: checks the group (and the member, when named), then stores the
/// offsets pending in the producer's transaction through the metadata group and answers once
/// they are stored.
///
/// As in Kafka: WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for
/// every partition), READ on the group (else GROUP_AUTHORIZATION_FAILED for every partition),
/// and READ on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions).
pub(crate) fn txn_offset_commit<H: GroupsHost + TxnHost>(
    node: &Arc<H>,
    access: &Access,
    req: TxnOffsetCommitRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let term = coordinator_term(node);
    let group_error = match term {
        _ if !access.transactional_id(AclOperation::Write, &req.transactional_id) => {
            ErrorCode::TransactionalIdAuthorizationFailed
        }
        _ if !access.group(AclOperation::Read, &req.group_id) => {
            ErrorCode::GroupAuthorizationFailed
        }
        None => ErrorCode::NotCoordinator,
        Some(_) if req.group_id.is_empty() => ErrorCode::InvalidGroupId,
        Some(term) => coordinator(node)
            .consumer_validate_offsets(
                term,
                &req.group_id,
                Some(&req.member_id),
                req.generation_id,
                OffsetsCheck::TxnCommit,
            )
            .unwrap_or_else(|| {
                coordinator(node).validate_txn_commit(
                    term,
                    &req.group_id,
                    req.generation_id,
                    &req.member_id,
                    req.group_instance_id.as_deref(),
                )
            }),
    };
    let requested = requested_offsets!(req);
    let (topics, offsets) = check_offsets(&**node, access, group_error, requested);
    let respond = move |commit: Option<ErrorCode>| {
        let topics = answer_topics(
            topics,
            commit,
            |name, partitions| TxnOffsetCommitResponseTopic {
                name,
                partitions,
                ..Default::default()
            },
            |partition_index, error_code| TxnOffsetCommitResponsePartition {
                partition_index,
                error_code,
                ..Default::default()
            },
        );
        Response::TxnOffsetCommit(TxnOffsetCommitResponse {
            topics,
            ..Default::default()
        })
    };
    if offsets.is_empty() {
        return reply::now(correlation_id, version, respond(None));
    }
    let command = MetaCommand::CommitTxnOffsets {
        group: req.group_id.clone(),
        producer_id: req.producer_id,
        producer_epoch: req.producer_epoch,
        offsets,
        commit_time_ms: wall_clock_ms(),
    };
    let implicit = (version >= TRANSACTION_V2_FROM).then(|| {
        (
            req.transactional_id.clone(),
            req.producer_id,
            req.producer_epoch,
            req.group_id.clone(),
        )
    });
    let (transactional_id, group) = (req.transactional_id, req.group_id);
    let (producer_id, producer_epoch) = (req.producer_id, req.producer_epoch);
    let unverified = move |meta: &ClusterMeta| {
        transaction_offsets_refusal(meta, &transactional_id, producer_id, producer_epoch, &group)
    };
    if unverified(&node.metadata()).is_none() {
        return commit_then_answer(node, term, command, correlation_id, version, respond);
    }
    let node = node.clone();
    reply::later(correlation_id, version, async move {
        let mut refusal = match read_barrier(&*node).await {
            Some(code) => Some(code),
            None => unverified(&node.metadata()),
        };
        if let (Some(ErrorCode::InvalidTxnState), Some((id, pid, epoch, group))) =
            (refusal, &implicit)
        {
            refusal = match add_group_implicitly(&node, id, *pid, *epoch, group).await {
                Ok(()) => unverified(&node.metadata()),
                Err(code) => Some(code),
            };
        }
        match refusal {
            Some(code) => respond(Some(code)),
            None => commit_and_respond(node, term, command, respond).await,
        }
    })
}

/// The first TxnOffsetCommit version of transaction version 2, which adds the group to the
/// transaction itself (the producer sends no AddOffsetsToTxn).
const TRANSACTION_V2_FROM: i16 = 5;

/// Why the transaction state in `meta` does not let producer `producer_id` at
/// `producer_epoch` commit offsets of `group` in the transaction of `transactional_id` (see
/// the module documentation); None when it does.
fn transaction_offsets_refusal(
    meta: &ClusterMeta,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    group: &str,
) -> Option<ErrorCode> {
    let Some(record) = meta
        .transactions
        .get(transactional_id)
        .filter(|r| r.producer_id == producer_id)
    else {
        return Some(ErrorCode::InvalidProducerIdMapping);
    };
    if record.producer_epoch != producer_epoch {
        return Some(ErrorCode::InvalidProducerEpoch);
    }
    (record.status != TxnStatus::Ongoing || !record.groups.contains(group))
        .then_some(ErrorCode::InvalidTxnState)
}
