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
//! they were sent. And, as VDL guarantees for pipelined produce, if request N to a partition
//! fails with a retriable error, every later request on that connection to that partition fails
//! too, with the same error ([`ProduceChain`]): the client retries them in order. (A later
//! request may have been committed all the same; with idempotence, the default of Java clients,
//! the retry is answered with its original offset and nothing is written twice.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

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

/// Most partitions a connection's chain remembers; beyond it the chain starts afresh.
const MAX_CHAINED_PARTITIONS: usize = 10_000;

/// Per connection: for each partition produced to, how the newest request to it ended
/// (`Some(error)` when it failed), so the next request can fail behind a failed one.
#[derive(Default)]
pub struct ProduceChain {
    last: HashMap<(String, i32), oneshot::Receiver<Option<i16>>>,
}

impl ProduceChain {
    /// Links a new request to a partition behind the previous one: returns how the previous
    /// one will end and where this one's end is to be reported.
    fn link(&mut self, topic: &str, partition: i32) -> ChainLink {
        if self.last.len() >= MAX_CHAINED_PARTITIONS {
            self.last.clear();
        }
        let (tx, rx) = oneshot::channel();
        // Chain only behind a request still in flight: once it has ended, a request that comes
        // after it starts afresh (this is how the client's retry of a failed request goes
        // through, instead of failing behind it forever).
        let previous = self
            .last
            .insert((topic.to_owned(), partition), rx)
            .filter(|rx| rx.is_empty() && !rx.is_terminated());
        (previous, tx)
    }
}

/// How the previous request to a partition ends, and where this one's end goes.
type ChainLink = (
    Option<oneshot::Receiver<Option<i16>>>,
    oneshot::Sender<Option<i16>>,
);

/// A partition of a produce request: its index, what became of its records, its chain link.
type SubmittedPartition = (i32, PartitionOutcome, ChainLink);

enum PartitionOutcome {
    Failed(ErrorCode),
    Submitted(PendingAppend, crate::node::LogStream),
}

/// Handles a Produce request: submits now, answers (unless acks=0) once every partition's
/// append is committed or failed.
pub fn produce(
    node: &Arc<Node>,
    req: ProduceRequest,
    version: i16,
    correlation_id: i32,
    chain: &mut ProduceChain,
) -> Reply {
    let limits = node.config().kafka;
    let timeout =
        Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0)).min(MAX_PRODUCE_TIMEOUT);
    let mut submitted: Vec<(String, Vec<SubmittedPartition>)> = Vec::new();
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
            let link = chain.link(&topic.name, p.index);
            partitions.push((p.index, outcome, link));
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
            for (index, outcome, (previous, done)) in partitions {
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
                // Fail behind a failed earlier request to the same partition.
                let previous_error = match previous {
                    Some(rx) => rx.await.ok().flatten(),
                    None => None,
                };
                if let Some(code) = previous_error {
                    if r.error_code == 0 {
                        r.error_code = code;
                        r.base_offset = -1;
                    }
                }
                // Only retriable failures chain: the client retries those, and a later request
                // succeeding ahead of the retry would reorder the partition. After a fatal error
                // (a corrupt or oversized batch) the client does not retry, so nothing chains.
                let retriable = ErrorCode::from_code(r.error_code).is_retriable();
                let _ = done.send((r.error_code != 0 && retriable).then_some(r.error_code));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_chain_only_behind_one_still_in_flight() {
        let mut chain = ProduceChain::default();
        let (none, first) = chain.link("t", 0);
        assert!(none.is_none(), "the first request has nothing before it");
        // A second request while the first is in flight is chained behind it...
        let (behind_first, second) = chain.link("t", 0);
        // ... but another partition is not.
        assert!(chain.link("t", 1).0.is_none());
        first
            .send(Some(ErrorCode::NotLeaderOrFollower.code()))
            .unwrap();
        assert_eq!(
            behind_first.expect("chained").await.unwrap(),
            Some(ErrorCode::NotLeaderOrFollower.code())
        );
        // Once the second has ended, a third (the client's retry) starts afresh.
        second
            .send(Some(ErrorCode::NotLeaderOrFollower.code()))
            .unwrap();
        assert!(chain.link("t", 0).0.is_none());
    }
}
