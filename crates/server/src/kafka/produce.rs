//! Produce: validate the batches, submit them to the topic's Raft group, answer after commit.
//!
//! Durability of the acks settings here:
//! - `acks=-1` (all): answered after the records are committed by Raft, that is fsynced on a
//!   majority of nodes.
//! - `acks=1`: treated exactly as `acks=-1`. Kafka's acks=1 answers once the leader has the
//!   records in its page cache, which loses them if the leader dies; here the answer waits for the
//!   Raft commit, so acks=1 is never less safe than Kafka's and costs the same as acks=-1.
//! - `acks=0`: the records are submitted and no response is sent.
//!
//! Requests are submitted to their streams before the next request on the connection is read,
//! so one connection's produces to a topic enter the Raft log, and are committed, in the order
//! they were sent.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::produce_request::ProduceRequest;
use kafka_proto::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_proto::records::{
    convert_message_set, split_batches, Compression, LegacyDecodeOptions, TrailingPartial,
};
use kafka_proto::DecodeError;

use crate::group::AppendError;
use crate::kafka::handlers::{frame, Reply};
use crate::node::{Node, PendingAppend};
use crate::producers::SequenceError;

/// Longest a produce waits for commit, whatever timeout the client asked for.
const MAX_PRODUCE_TIMEOUT: Duration = Duration::from_secs(300);
/// Byte offset of the magic byte, the same in v2 batches and legacy message sets.
const MAGIC_OFFSET: usize = 16;

/// Checks a partition's records as Kafka's broker does and returns them as v2 batches ready to
/// append, with the number of offsets they take. Legacy message sets (magic 0/1, from clients
/// of Produce v0-2) are converted to one v2 batch.
pub fn validate_records(
    records: Bytes,
    message_max_bytes: usize,
) -> Result<(Bytes, u32), ErrorCode> {
    let magic = *records.get(MAGIC_OFFSET).ok_or(ErrorCode::CorruptMessage)?;
    let batches = if magic < 2 {
        let options = LegacyDecodeOptions {
            max_decompressed: message_max_bytes.saturating_mul(4),
            trailing: TrailingPartial::Reject,
        };
        convert_message_set(records, options, Compression::None).map_err(|e| match e {
            kafka_proto::records::ConvertError::Decode(DecodeError::CrcMismatch { .. }) => {
                ErrorCode::CorruptMessage
            }
            _ => ErrorCode::InvalidRecord,
        })?
    } else {
        records
    };
    let mut span: u64 = 0;
    for batch in split_batches(batches.clone()) {
        let batch = batch.map_err(|_| ErrorCode::CorruptMessage)?;
        if batch.len() > message_max_bytes {
            return Err(ErrorCode::MessageTooLarge);
        }
        batch.validate_from_producer().map_err(|e| match e {
            DecodeError::CrcMismatch { .. } => ErrorCode::CorruptMessage,
            DecodeError::UnsupportedMagic(_) => ErrorCode::UnsupportedForMessageFormat,
            _ => ErrorCode::InvalidRecord,
        })?;
        span += u64::from(batch.last_offset_delta() as u32) + 1;
    }
    if span == 0 {
        return Err(ErrorCode::InvalidRecord);
    }
    let span = u32::try_from(span).map_err(|_| ErrorCode::MessageTooLarge)?;
    Ok((batches, span))
}

/// The Kafka error for an append that was not acknowledged.
pub fn append_error_code(e: &AppendError) -> ErrorCode {
    match e {
        AppendError::NotLeader { .. } | AppendError::Lost | AppendError::Stopped => {
            ErrorCode::NotLeaderOrFollower
        }
        AppendError::Timeout | AppendError::Busy => ErrorCode::RequestTimedOut,
        AppendError::Invalid(_) => ErrorCode::InvalidRecord,
        AppendError::Sequence(SequenceError::OutOfOrder) => ErrorCode::OutOfOrderSequenceNumber,
        AppendError::Sequence(SequenceError::InvalidEpoch) => ErrorCode::InvalidProducerEpoch,
        // The first attempt is still being replicated: a retriable error; the retry after it
        // commits is answered with its offset.
        AppendError::Sequence(SequenceError::DuplicateInFlight) => ErrorCode::NotEnoughReplicas,
    }
}

enum PartitionOutcome {
    Failed(ErrorCode),
    Submitted(PendingAppend, crate::node::LogStream),
}

/// Handles a Produce request: submits now, answers (unless acks=0) once every partition's
/// append is committed or failed.
pub fn produce(node: &Arc<Node>, req: ProduceRequest, version: i16, correlation_id: i32) -> Reply {
    let limits = node.config().kafka;
    let timeout =
        Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0)).min(MAX_PRODUCE_TIMEOUT);
    let mut submitted: Vec<(String, Vec<(i32, PartitionOutcome)>)> = Vec::new();
    for topic in req.topic_data {
        let mut partitions = Vec::new();
        for p in topic.partition_data {
            let outcome = submit_partition(
                node,
                &topic.name,
                p.index,
                p.records,
                limits.message_max_bytes,
                req.transactional_id.is_some(),
            );
            partitions.push((p.index, outcome));
        }
        submitted.push((topic.name, partitions));
    }
    if req.acks == 0 {
        return Reply::None;
    }
    Reply::Later(Box::pin(async move {
        let mut responses = Vec::with_capacity(submitted.len());
        for (name, partitions) in submitted {
            let mut out = Vec::with_capacity(partitions.len());
            for (index, outcome) in partitions {
                let mut r = PartitionProduceResponse {
                    index,
                    base_offset: -1,
                    log_append_time_ms: -1,
                    log_start_offset: -1,
                    ..Default::default()
                };
                match outcome {
                    PartitionOutcome::Failed(code) => r.error_code = code.code(),
                    PartitionOutcome::Submitted(pending, stream) => {
                        match pending.wait(timeout).await {
                            Ok(a) => {
                                r.base_offset = i64::try_from(a.base_offset).unwrap_or(i64::MAX);
                                r.log_start_offset =
                                    i64::try_from(stream.visible().log_start_offset).unwrap_or(0);
                            }
                            Err(e) => r.error_code = append_error_code(&e).code(),
                        }
                    }
                }
                out.push(r);
            }
            responses.push(TopicProduceResponse {
                name,
                partition_responses: out,
                ..Default::default()
            });
        }
        frame(
            correlation_id,
            version,
            &Response::Produce(ProduceResponse {
                responses,
                ..Default::default()
            }),
        )
    }))
}

fn submit_partition(
    node: &Arc<Node>,
    topic: &str,
    partition: i32,
    records: Option<kafka_proto::RecordChunks>,
    message_max_bytes: usize,
    transactional: bool,
) -> PartitionOutcome {
    let Some(stream) = node.stream(topic).filter(|_| partition == 0) else {
        return PartitionOutcome::Failed(ErrorCode::UnknownTopicOrPartition);
    };
    if transactional {
        // Transactions are not served yet; say so clearly instead of storing half a protocol.
        return PartitionOutcome::Failed(ErrorCode::TransactionalIdAuthorizationFailed);
    }
    let v = stream.visible();
    if v.leader != node.config().id {
        return PartitionOutcome::Failed(ErrorCode::NotLeaderOrFollower);
    }
    let Some(records) = records.filter(|r| !r.is_empty()) else {
        return PartitionOutcome::Failed(ErrorCode::InvalidRecord);
    };
    match validate_records(records.to_contiguous(), message_max_bytes) {
        Ok((batches, span)) => {
            PartitionOutcome::Submitted(stream.submit_records(batches, span), stream)
        }
        Err(code) => PartitionOutcome::Failed(code),
    }
}
