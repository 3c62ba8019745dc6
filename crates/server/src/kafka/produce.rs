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
    BatchIndexAndErrorMessage, PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_proto::records::batch::{RecordBatch, MAGIC_OFFSET};
use kafka_proto::records::{
    check_produce_shape, decode_message_set, message_set_to_batch, validate_produce_records,
    Compression, LegacyDecodeOptions, ProduceLimits, TrailingPartial,
};
use kafka_proto::DecodeError;

use crate::config::{KafkaSettings, MAX_PARTITION_DATA_BYTES};
use crate::flow::throttle::{throttle_ms, ClientIdentity};
use crate::kafka::access::Access;
use crate::kafka::direct_answer::{DirectAnswer, DirectSlot, Settled};
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::host::{ChargeHost, ProduceHost};
use crate::kafka::metadata::{locate_partition, PartitionHome};
use crate::kafka::produce_keys::{has_keyless_record, keyless_record_errors};
use crate::kafka::reply::{self, frame, Reply};
use crate::kafka::txn::produce_check::{unverified_batch, unverified_batch_error};
use crate::metadata::wall_clock_ms;
use crate::replication::group::{AnswerHook, AppendError, Appended};
use crate::replication::stream::{LogStream, PendingAppend};
use crate::security::acl::AclOperation;
use crate::topic_config::{TimestampType, TopicSettings};

/// Longest a produce waits for commit, whatever timeout the client asked for.
const MAX_PRODUCE_TIMEOUT: Duration = Duration::from_secs(300);

/// Checks a partition's records from a Produce request of `version` as Kafka's broker does,
/// before anything is stored, and returns them as the one v2 batch to append with the number
/// of offsets it takes. In order:
/// - Produce v3+ must carry exactly one magic-2 batch per partition (magic-2 data at any
///   version too): INVALID_RECORD otherwise ([`check_produce_shape`]);
/// - at most [`MAX_PARTITION_DATA_BYTES`]: MESSAGE_TOO_LARGE otherwise;
/// - a legacy message set (magic 0/1, Produce v0-2 only) is decoded (CRC-32 checked) and
///   converted to one v2 batch with offsets 0..n (the broker assigns offsets anyway);
/// - the batch is validated in full ([`validate_produce_records`]: base offset, size, CRC,
///   counts, every record, offset deltas, timestamps), each refusal with Kafka's error code.
pub fn validate_records(
    records: Bytes,
    version: i16,
    limits: &ProduceLimits,
) -> Result<(Bytes, u32), ErrorCode> {
    check_produce_shape(&records, version).map_err(|e| e.error_code())?;
    if records.len() > MAX_PARTITION_DATA_BYTES {
        return Err(ErrorCode::MessageTooLarge);
    }
    let magic = *records.get(MAGIC_OFFSET).ok_or(ErrorCode::CorruptMessage)? as i8;
    let records = if magic < 2 {
        convert_legacy(records, limits.max_batch_bytes)?
    } else {
        records
    };
    if records.len() > MAX_PARTITION_DATA_BYTES {
        return Err(ErrorCode::MessageTooLarge);
    }
    let (batch, count) =
        validate_produce_records(records, version, limits).map_err(|e| e.error_code())?;
    Ok((batch.into_bytes(), count))
}

/// A legacy message set as one uncompressed v2 batch whose records have offset deltas 0..n.
fn convert_legacy(records: Bytes, message_max_bytes: usize) -> Result<Bytes, ErrorCode> {
    let options = LegacyDecodeOptions {
        max_decompressed: message_max_bytes.saturating_mul(4),
        trailing: TrailingPartial::Reject,
    };
    let mut decoded = decode_message_set(records, options).map_err(|e| match e {
        DecodeError::CrcMismatch { .. } => ErrorCode::CorruptMessage,
        DecodeError::DecompressedTooLarge(_) => ErrorCode::MessageTooLarge,
        _ => ErrorCode::InvalidRecord,
    })?;
    for (i, r) in decoded.iter_mut().enumerate() {
        r.offset = i as i64;
    }
    message_set_to_batch(&decoded, Compression::None).map_err(|_| ErrorCode::InvalidRecord)
}

/// Most partitions a connection's chain remembers; beyond it the chain starts afresh.
const MAX_CHAINED_PARTITIONS: usize = 10_000;

/// Per connection: for each partition produced to, how the newest request to it ended
/// (`Some(error)` when it failed), so the next request can fail behind a failed one.
#[derive(Default)]
pub struct ProduceChain {
    last: HashMap<(String, i32), oneshot::Receiver<Option<i16>>>,
    /// Set while a Produce of this connection waits (for a metadata barrier, for a
    /// transaction version 2 implicit AddPartitions) before submitting its batches: true
    /// once it has submitted them. Every later Produce of the connection waits for it, so
    /// the batches reach their partitions in the order the client sent them (as Kafka, which
    /// handles a connection's requests one at a time): a producer's pipelined batch must not
    /// overtake its earlier one (the partition would refuse it OUT_OF_ORDER_SEQUENCE_NUMBER,
    /// which a transactional producer cannot recover from).
    held_back: Option<tokio::sync::watch::Receiver<bool>>,
}

impl ProduceChain {
    /// Whether an earlier Produce of this connection is still waiting to submit its batches.
    pub(crate) fn held_back(&self) -> bool {
        self.held_back.as_ref().is_some_and(|r| !*r.borrow())
    }

    /// Holds every later Produce of this connection back until `submitted` turns true;
    /// returns the hold of the previous waiting Produce (to wait for first), if any.
    pub(crate) fn hold_back(
        &mut self,
        submitted: tokio::sync::watch::Receiver<bool>,
    ) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.held_back.replace(submitted).filter(|r| !*r.borrow())
    }

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
        (previous, ChainEnd::new(tx))
    }
}

/// How the previous request to a partition ends, and where this one's end goes.
type ChainLink = (Option<oneshot::Receiver<Option<i16>>>, ChainEnd);

/// Where a request's end goes for the next request to its partition: sent once, by whoever
/// settles the request first (its task, or the worker answering it directly, which sends it
/// before writing so the client's next request finds it).
#[derive(Clone)]
struct ChainEnd(Arc<std::sync::Mutex<Option<oneshot::Sender<Option<i16>>>>>);

impl ChainEnd {
    fn new(tx: oneshot::Sender<Option<i16>>) -> ChainEnd {
        ChainEnd(Arc::new(std::sync::Mutex::new(Some(tx))))
    }

    /// Reports the request's end (its error code, if it chains); later calls do nothing.
    fn send(&self, end: Option<i16>) {
        let tx = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(tx) = tx {
            let _ = tx.send(end);
        }
    }
}

/// A partition of a produce request: its index, what became of its records, its chain link.
type SubmittedPartition = (i32, PartitionOutcome, ChainLink);

enum PartitionOutcome {
    Failed(ErrorCode),
    /// Refused for some of its records (INVALID_RECORD): Kafka's `record_errors` and
    /// `error_message` (Produce v8+).
    RecordsRefused(Vec<BatchIndexAndErrorMessage>, String),
    /// Submitted; with the append time stamped on the batch for a LogAppendTime topic, and
    /// the copies an acks=all produce waits for beyond the commit's majority
    /// (min.insync.replicas above it; see [`crate::replication::stream::LogStream::wait_for_copies`]).
    Submitted(
        PendingAppend,
        crate::replication::stream::LogStream,
        Option<i64>,
        Option<usize>,
    ),
}

/// What a topic's configs ask of its produce requests (see [`crate::topic_config`]).
struct TopicRules {
    /// Record size and timestamp limits (`max.message.bytes`; no timestamp bounds for a
    /// LogAppendTime topic, whose producers' timestamps are replaced).
    limits: ProduceLimits,
    /// The topic's settings (min.insync.replicas, timestamp type).
    settings: TopicSettings,
    /// The append time to stamp, for a LogAppendTime topic.
    now_ms: i64,
}

impl TopicRules {
    fn of<H: ProduceHost>(node: &H, topic: &str, now_ms: i64) -> TopicRules {
        let settings = node.topic_settings(topic);
        let kafka = KafkaSettings {
            message_max_bytes: settings.max_message_bytes,
            ..node.config().kafka
        };
        let mut limits = kafka.produce_limits(now_ms);
        if settings.timestamp_type == TimestampType::LogAppendTime {
            limits = limits.with_timestamp_after_max_ms(i64::MAX);
        }
        TopicRules {
            limits,
            settings,
            now_ms,
        }
    }
}

/// Charges a Produce request's record bytes to the flow limits and quotas that apply (see
/// [`crate::flow`]); returns its throttle (zero when nothing is limited).
pub fn charge<H: ChargeHost>(node: &H, req: &ProduceRequest, who: ClientIdentity<'_>) -> Duration {
    let settings = node.flow_settings();
    if settings.is_unlimited() {
        return Duration::ZERO;
    }
    let bytes: u64 = req
        .topic_data
        .iter()
        .flat_map(|t| &t.partition_data)
        .map(|p| p.records.as_ref().map_or(0, |r| r.len() as u64))
        .sum();
    node.flow()
        .charge_produce(&settings, who, bytes, std::time::Instant::now())
}

/// Handles a Produce request: submits now, answers (unless acks=0) once every partition's
/// append is committed or failed, with `throttle` as its `throttle_time_ms`.
///
/// Authorization as Kafka's: a transactional producer needs WRITE on its transactional id
/// (else every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and each topic WRITE
/// (else its partitions answer TOPIC_AUTHORIZATION_FAILED); nothing of a refused topic is
/// stored.
///
/// With `direct`, a request for one partition, with no request before it in flight to that
/// partition on this connection, is answered by the worker that learns its outcome, straight
/// to the socket (see [`crate::kafka::direct_answer`]); its task writes only what that left.
#[allow(clippy::too_many_arguments)]
pub fn produce<H: ProduceHost>(
    node: &H,
    access: &Access,
    req: ProduceRequest,
    version: i16,
    correlation_id: i32,
    chain: &mut ProduceChain,
    throttle: Duration,
    direct: Option<DirectAnswer>,
) -> Reply {
    let now = wall_clock_ms();
    let timeout =
        Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0)).min(MAX_PRODUCE_TIMEOUT);
    let mut submitted: Vec<(String, Vec<SubmittedPartition>)> = Vec::new();
    // A partition named twice in one request (no client does that; Kafka keeps only the last
    // occurrence) is refused the second time: one request carries at most one batch, and so at
    // most one producer id, per partition.
    let mut seen: std::collections::HashSet<(String, i32)> = std::collections::HashSet::new();
    let transaction_refused = req
        .transactional_id
        .as_deref()
        .is_some_and(|id| !access.transactional_id(AclOperation::Write, id));
    let one_partition =
        req.acks != 0 && req.topic_data.len() == 1 && req.topic_data[0].partition_data.len() == 1;
    let mut direct = direct.filter(|_| one_partition);
    let mut slot = None;
    for topic in req.topic_data {
        let mut partitions = Vec::new();
        let refused = if transaction_refused {
            Some(ErrorCode::TransactionalIdAuthorizationFailed)
        } else if !access.topic(AclOperation::Write, &topic.name) {
            Some(ErrorCode::TopicAuthorizationFailed)
        } else {
            None
        };
        let rules = TopicRules::of(node, &topic.name, now);
        for p in topic.partition_data {
            let link = chain.link(&topic.name, p.index);
            // Behind a request still in flight to the partition, the answer may have to carry
            // that one's error: only the task can wait for it.
            // A produce that waits for more copies than the commit's majority is answered by
            // its task, after that wait.
            let more_copies = req.acks == -1 && rules.settings.min_insync_replicas.is_some();
            let answer = direct
                .take()
                .filter(|_| link.0.is_none() && !more_copies)
                .map(|to| DirectProduce {
                    to,
                    chain_end: link.1.clone(),
                    slot: DirectSlot::new(),
                    correlation_id,
                    version,
                    topic: topic.name.clone(),
                    partition: p.index,
                    throttle,
                });
            slot = answer.as_ref().map(|a| Arc::clone(&a.slot));
            let outcome = if let Some(code) = refused {
                PartitionOutcome::Failed(code)
            } else if seen.insert((topic.name.clone(), p.index)) {
                submit_partition(
                    node,
                    &topic.name,
                    p.index,
                    p.records,
                    version,
                    &rules,
                    req.acks,
                    req.transactional_id.as_deref(),
                    answer,
                )
            } else {
                PartitionOutcome::Failed(ErrorCode::InvalidRecord)
            };
            partitions.push((p.index, outcome, link));
        }
        submitted.push((topic.name, partitions));
    }
    if req.acks == 0 {
        return Reply::None;
    }
    if let Some(slot) = slot {
        let direct = DirectReply {
            slot,
            timeout,
            correlation_id,
            version,
            throttle,
        };
        // Not submitted (refused, not the leader, invalid): no hook was given, so the
        // request is answered as any other.
        if let Some(reply) = direct.into_reply(&mut submitted) {
            return reply;
        }
    }
    let me = node.config().id;
    reply::later(correlation_id, version, async move {
        let mut responses = Vec::with_capacity(submitted.len());
        for (name, partitions) in submitted {
            let mut out = Vec::with_capacity(partitions.len());
            for (index, outcome, (previous, done)) in partitions {
                let mut r = match outcome {
                    PartitionOutcome::Failed(code) => PartitionProduceResponse {
                        error_code: code.code(),
                        ..unanswered(index)
                    },
                    PartitionOutcome::RecordsRefused(record_errors, message) => {
                        PartitionProduceResponse {
                            error_code: ErrorCode::InvalidRecord.code(),
                            record_errors,
                            error_message: Some(message),
                            ..unanswered(index)
                        }
                    }
                    PartitionOutcome::Submitted(pending, stream, stamped_at, copies) => {
                        let started = std::time::Instant::now();
                        let mut outcome = pending.wait(timeout).await;
                        if let (Ok(appended), Some(copies)) = (&outcome, copies) {
                            let left = timeout.saturating_sub(started.elapsed());
                            if let Err(e) = stream
                                .wait_for_copies(me, appended.raft_index, copies, left)
                                .await
                            {
                                outcome = Err(e);
                            }
                        }
                        partition_response(index, &outcome, &stream, stamped_at)
                    }
                };
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
                done.send(chained_error(r.error_code));
                out.push(r);
            }
            responses.push(TopicProduceResponse {
                name,
                partition_responses: out,
                ..Default::default()
            });
        }
        Response::Produce(ProduceResponse {
            responses,
            throttle_time_ms: throttle_ms(throttle),
            ..Default::default()
        })
    })
}

/// What a request to one partition leaves a later one to it on the same connection: its
/// error code when that is retriable. Only retriable failures chain: the client retries
/// those, and a later request succeeding ahead of the retry would reorder the partition. After
/// a fatal error (a corrupt or oversized batch) the client does not retry, so nothing chains.
fn chained_error(code: i16) -> Option<i16> {
    (code != 0 && ErrorCode::from_code(code).is_retriable()).then_some(code)
}

/// A partition's response before its outcome is known.
fn unanswered(index: i32) -> PartitionProduceResponse {
    PartitionProduceResponse {
        index,
        base_offset: -1,
        log_append_time_ms: -1,
        log_start_offset: -1,
        ..Default::default()
    }
}

/// A submitted partition's response from its append's outcome.
fn partition_response(
    index: i32,
    outcome: &Result<Appended, AppendError>,
    stream: &LogStream,
    stamped_at: Option<i64>,
) -> PartitionProduceResponse {
    let mut r = unanswered(index);
    match outcome {
        Ok(a) => {
            r.base_offset = i64::try_from(a.base_offset).unwrap_or(i64::MAX);
            if let Some(t) = stamped_at {
                r.log_append_time_ms = t;
            }
            r.log_start_offset = i64::try_from(stream.visible().log_start_offset).unwrap_or(0);
        }
        Err(e) => r.error_code = append_error_code(e, Proposal::Records).code(),
    }
    r
}

/// The response to a request for one partition.
fn produce_response(topic: String, r: PartitionProduceResponse, throttle: Duration) -> Response {
    Response::Produce(ProduceResponse {
        responses: vec![TopicProduceResponse {
            name: topic,
            partition_responses: vec![r],
            ..Default::default()
        }],
        throttle_time_ms: throttle_ms(throttle),
        ..Default::default()
    })
}

/// The task's side of a one-partition request that a worker may answer directly.
struct DirectReply {
    slot: Arc<DirectSlot>,
    timeout: Duration,
    correlation_id: i32,
    version: i16,
    throttle: Duration,
}

impl DirectReply {
    /// The reply for the request's one submitted partition, taken from `submitted`; None
    /// (and `submitted` as it was) when the partition was not submitted.
    fn into_reply(self, submitted: &mut Vec<(String, Vec<SubmittedPartition>)>) -> Option<Reply> {
        let (name, mut partitions) = submitted.pop()?;
        assert!(
            submitted.is_empty() && partitions.len() == 1,
            "a direct answer is for one partition"
        );
        let (index, outcome, (_, done)) = match partitions.pop() {
            Some((index, PartitionOutcome::Submitted(pending, stream, stamped_at, _), link)) => {
                // The outcome goes to the hook, not to `pending`'s channel.
                drop(pending);
                (index, (stream, stamped_at), link)
            }
            other => {
                partitions.extend(other);
                submitted.push((name, partitions));
                return None;
            }
        };
        let (stream, stamped_at) = outcome;
        let DirectReply {
            slot,
            timeout,
            correlation_id,
            version,
            throttle,
        } = self;
        Some(Reply::Direct(Box::pin(async move {
            let mut written_at = None;
            let (response, code) = match slot.settled(timeout).await {
                Settled::Written(code, at) => {
                    written_at = Some(at);
                    (None, code)
                }
                Settled::Rest(rest, code) => (Some(rest), code),
                Settled::Answer(outcome) => {
                    let r = partition_response(index, &outcome, &stream, stamped_at);
                    let code = r.error_code;
                    let response = produce_response(name, r, throttle);
                    (frame(correlation_id, version, &response), code)
                }
            };
            done.send(chained_error(code));
            (response, written_at)
        })))
    }
}

/// What the worker needs to answer a one-partition request directly.
struct DirectProduce {
    to: DirectAnswer,
    chain_end: ChainEnd,
    slot: Arc<DirectSlot>,
    correlation_id: i32,
    version: i16,
    topic: String,
    partition: i32,
    throttle: Duration,
}

impl DirectProduce {
    /// The hook that writes the response from the append's outcome (see
    /// [`DirectSlot::answer`]).
    fn hook(self, stream: LogStream, stamped_at: Option<i64>) -> AnswerHook {
        Box::new(move |outcome| {
            let DirectProduce {
                to,
                chain_end,
                slot,
                correlation_id,
                version,
                topic,
                partition,
                throttle,
            } = self;
            slot.answer(&to.socket, to.seq, outcome, |outcome| {
                let r = partition_response(partition, outcome, &stream, stamped_at);
                let code = r.error_code;
                // Before the write: the client's next request to the partition, sent once it
                // has this response, must find this one ended.
                chain_end.send(chained_error(code));
                let response = produce_response(topic, r, throttle);
                frame(correlation_id, version, &response).map(|f| (f, code))
            });
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn submit_partition<H: ProduceHost>(
    node: &H,
    topic: &str,
    partition: i32,
    records: Option<kafka_proto::RecordChunks>,
    version: i16,
    rules: &TopicRules,
    acks: i16,
    transactional_id: Option<&str>,
    answer: Option<DirectProduce>,
) -> PartitionOutcome {
    let stream = match locate_partition(node, topic, partition) {
        PartitionHome::Here(stream) => stream,
        // No replica here, so not the leader: the client looks the leader up again.
        PartitionHome::Elsewhere => {
            return PartitionOutcome::Failed(ErrorCode::NotLeaderOrFollower)
        }
        PartitionHome::Unknown => {
            return PartitionOutcome::Failed(ErrorCode::UnknownTopicOrPartition)
        }
    };
    let v = stream.visible();
    if v.leader != node.config().id {
        return PartitionOutcome::Failed(ErrorCode::NotLeaderOrFollower);
    }
    let Some(records) = records.filter(|r| !r.is_empty()) else {
        return PartitionOutcome::Failed(ErrorCode::InvalidRecord);
    };
    let mut copies = None;
    if acks == -1 && rules.settings.min_insync_replicas.is_some() {
        // Kafka's min.insync.replicas: an acks=all produce is refused while fewer replicas
        // are in sync, and acknowledged only once that many hold it. Only a setting above the
        // majority needs either: the Raft commit waits for a majority anyway. (Topics without
        // the setting skip the replica lookup.)
        let replicas = node.replicas_of(&stream).len();
        if let Some(required) = rules.settings.in_sync_required_beyond_majority(replicas) {
            let in_sync = v.in_sync.iter().filter(|id| **id != 0).count();
            if in_sync < required {
                return PartitionOutcome::Failed(ErrorCode::NotEnoughReplicas);
            }
            copies = Some(required);
        }
    }
    let validated = validate_records(records.to_contiguous(), version, &rules.limits);
    // A transactional batch is accepted only when the transaction state verifies it
    // (`kafka::txn::produce_check`); without a transactional id it is refused as Kafka
    // answers a transactional batch it cannot authorize.
    if let Ok((batch, _)) = &validated {
        let refusal = RecordBatch::new(batch.clone())
            .ok()
            .and_then(|b| match transactional_id {
                Some(id) => unverified_batch(node, id, topic, partition, &b)
                    .then(|| unverified_batch_error(node, id, &b, version)),
                None => b
                    .is_transactional()
                    .then_some(ErrorCode::TransactionalIdAuthorizationFailed),
            });
        if let Some(code) = refusal {
            return PartitionOutcome::Failed(code);
        }
    }
    match validated {
        Ok((batch, _)) if rules.settings.compact && has_keyless_record(&batch) => {
            let (errors, message) = keyless_record_errors(&batch, topic, partition);
            PartitionOutcome::RecordsRefused(errors, message)
        }
        Ok((batch, span)) => {
            let (batch, stamped_at) = match rules.settings.timestamp_type {
                TimestampType::CreateTime => (batch, None),
                TimestampType::LogAppendTime => match RecordBatch::new(batch) {
                    Ok(b) => (
                        b.with_log_append_time(rules.now_ms).into_bytes(),
                        Some(rules.now_ms),
                    ),
                    // validate_records returns exactly one whole batch.
                    Err(_) => return PartitionOutcome::Failed(ErrorCode::CorruptMessage),
                },
            };
            stream.metrics().record_produce(batch.len());
            let hook = answer.map(|a| a.hook(stream.clone(), stamped_at));
            let pending = stream.submit_records_answering(batch, span, hook);
            PartitionOutcome::Submitted(pending, stream, stamped_at, copies)
        }
        Err(code) => PartitionOutcome::Failed(code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(value_len: usize) -> Bytes {
        let record = kafka_proto::records::NewRecord::new(wall_clock_ms(), vec![b'x'; value_len]);
        kafka_proto::records::build_batch(Compression::None, &[record]).unwrap()
    }

    #[test]
    fn partition_data_over_the_cap_is_message_too_large_whatever_the_settings() {
        let settings = KafkaSettings {
            message_max_bytes: 1 << 30,
            ..KafkaSettings::default()
        };
        let limits = settings.produce_limits(wall_clock_ms());
        // One batch just over the cap (v9), and legacy-looking data over it (v2).
        let big = batch(MAX_PARTITION_DATA_BYTES);
        assert_eq!(
            validate_records(big, 9, &limits),
            Err(ErrorCode::MessageTooLarge)
        );
        let mut legacy = vec![0u8; MAX_PARTITION_DATA_BYTES + 1];
        legacy[MAGIC_OFFSET] = 1;
        assert_eq!(
            validate_records(Bytes::from(legacy), 2, &limits),
            Err(ErrorCode::MessageTooLarge)
        );
        // Under the cap, fine.
        assert!(validate_records(batch(1 << 20), 9, &limits).is_ok());
    }

    #[test]
    fn v3_and_later_carry_exactly_one_v2_batch() {
        let limits = KafkaSettings::default().produce_limits(wall_clock_ms());
        let one = batch(10);
        assert_eq!(
            validate_records(one.clone(), 9, &limits),
            Ok((one.clone(), 1))
        );
        let two = Bytes::from([one.to_vec(), one.to_vec()].concat());
        for version in [2, 3, 9] {
            assert_eq!(
                validate_records(two.clone(), version, &limits),
                Err(ErrorCode::InvalidRecord)
            );
        }
        // A legacy message set is for v0-2 only.
        let legacy = kafka_proto::records::encode_message_set(
            1,
            Compression::None,
            kafka_proto::records::TimestampType::CreateTime,
            &[kafka_proto::records::LegacyRecord::new(
                5,
                wall_clock_ms(),
                None,
                Some(Bytes::from("v")),
            )],
        )
        .unwrap();
        assert_eq!(
            validate_records(legacy.clone(), 3, &limits),
            Err(ErrorCode::InvalidRecord)
        );
        let (converted, span) = validate_records(legacy, 2, &limits).unwrap();
        assert_eq!(span, 1);
        assert_eq!(
            kafka_proto::records::RecordBatch::new(converted)
                .unwrap()
                .base_offset(),
            0
        );
    }

    #[tokio::test]
    async fn requests_chain_only_behind_one_still_in_flight() {
        let mut chain = ProduceChain::default();
        let (none, first) = chain.link("t", 0);
        assert!(none.is_none(), "the first request has nothing before it");
        // A second request while the first is in flight is chained behind it...
        let (behind_first, second) = chain.link("t", 0);
        // ... but another partition is not.
        assert!(chain.link("t", 1).0.is_none());
        first.send(Some(ErrorCode::NotLeaderOrFollower.code()));
        assert_eq!(
            behind_first.expect("chained").await.unwrap(),
            Some(ErrorCode::NotLeaderOrFollower.code())
        );
        // Once the second has ended, a third (the client's retry) starts afresh.
        second.send(Some(ErrorCode::NotLeaderOrFollower.code()));
        assert!(chain.link("t", 0).0.is_none());
    }
}
