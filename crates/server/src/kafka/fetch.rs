//! Fetch: committed record batches, long-polling until `min_bytes` are there or `max_wait_ms`
//! passes, woken by commits.
//!
//! Only committed data is returned (reads stop at the high watermark). With isolation_level 1
//! (READ_COMMITTED, v4+) reads stop at the last stable offset instead (no record of a
//! transaction still open is returned) and the response lists the aborted transactions whose
//! range overlaps the records returned (producer id, first offset), so the client drops their
//! records; every v4+ response carries the last stable offset (for READ_UNCOMMITTED too, as
//! Kafka's). See [`crate::replication::transactions`]. The batch holding the
//! fetch offset is returned whole (consumers skip the records before their offset); the first
//! partition with data always gets at least one whole batch, even past the byte limits
//! (KIP-74), later partitions only what the request's `max_bytes` leaves. Record data goes out
//! as the store's zero-copy chunks. Old versions (v0-3) get the batches converted to message
//! sets of magic 0 (v0-1) or 1 (v2-3).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::fetch_request::FetchRequest;
use kafka_proto::messages::fetch_response::{
    AbortedTransaction, FetchResponse, FetchableTopicResponse, PartitionData,
};
use kafka_proto::records::batches_to_message_set;
use kafka_proto::RecordChunks;

use crate::flow::throttle::{throttle_ms, ClientIdentity, Mute, ReadKind};
use crate::kafka::access::Access;
use crate::kafka::host::FetchHost;
use crate::kafka::metadata::{locate_partition, topic_name_by_id, PartitionHome};
use crate::kafka::reply::{self, Reply};
use crate::replication::stream::LogStream;
use crate::replication::transactions::{aborted_overlapping, without_removed_markers};
use crate::security::acl::AclOperation;

/// Most record bytes one Fetch response carries, whatever the request's `max_bytes` says:
/// Kafka's broker setting `fetch.max.bytes` and its default (55 MiB). A single batch larger than
/// what is left is still returned whole for the first partition with data (KIP-74).
pub const FETCH_MAX_BYTES: u64 = 55 << 20;

/// Longest a fetch long-polls, whatever the client asked for.
const MAX_WAIT: Duration = Duration::from_secs(30);
/// Bound on what converting one partition's batches to a legacy message set may decompress.
const MAX_DOWN_CONVERT_BYTES: usize = 64 << 20;

/// Who a fetch is charged to, and the connection to mute when it is throttled.
pub struct Charged {
    /// The connection's mute.
    pub mute: Arc<Mute>,
    /// The principal's name.
    pub user: String,
    /// The request's client id.
    pub client_id: String,
}

/// Handles a Fetch request (answered later: it may wait for data). Topics the principal may
/// not READ answer TOPIC_AUTHORIZATION_FAILED (Kafka's rule). The response's bytes are charged
/// to the flow limits and quotas that apply; a throttled fetch is answered with its data and
/// `throttle_time_ms`, and its connection muted for that long (see [`crate::flow`]).
pub fn fetch<H: FetchHost>(
    node: Arc<H>,
    access: &Access,
    req: FetchRequest,
    version: i16,
    correlation_id: i32,
    charged: Charged,
) -> Reply {
    let mut denied = HashSet::new();
    if access.enabled() {
        for topic in &req.topics {
            let name = if version >= 13 {
                topic_name_by_id(&*node, topic.topic_id)
            } else {
                Some(topic.topic.clone())
            };
            if let Some(name) = name {
                if !access.topic(AclOperation::Read, &name) {
                    denied.insert(name);
                }
            }
        }
    }
    reply::later(correlation_id, version, async move {
        let (mut response, read_kind) = fetch_response(&*node, &req, version, &denied).await;
        let settings = node.flow_settings();
        if !settings.is_unlimited() {
            let bytes: u64 = response
                .responses
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.records.as_ref().map_or(0, |r| r.len() as u64))
                .sum();
            let who = ClientIdentity {
                user: &charged.user,
                client_id: &charged.client_id,
            };
            let now = Instant::now();
            let throttle = node
                .flow()
                .charge_fetch(&settings, who, bytes, read_kind, now);
            charged.mute.mute_for(throttle, now);
            if !throttle.is_zero() {
                node.metrics()
                    .observe_throttle(kafka_proto::api::ApiKey::Fetch.as_i16(), throttle);
            }
            response.throttle_time_ms = throttle_ms(throttle);
        }
        Response::Fetch(response)
    })
}

/// Fetch's isolation_level asking for committed transactions only.
const READ_COMMITTED: i8 = 1;

struct Target {
    stream: Option<LogStream>,
    hw_seen: u64,
    /// Where reads stop: the high watermark, or the last stable offset (read_committed).
    upper: u64,
    /// The offset the read stopped at (the high watermark when it read everything).
    read_to: u64,
    /// Record bytes this pass read for the partition.
    bytes: u64,
}

/// The response, and whether it read behind the tail (some partition's read stopped at its
/// byte limit with more committed data behind it) or at it.
async fn fetch_response<H: FetchHost>(
    node: &H,
    req: &FetchRequest,
    version: i16,
    denied: &HashSet<String>,
) -> (FetchResponse, ReadKind) {
    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    let deadline = Instant::now() + wait;
    let min_bytes = u64::try_from(req.min_bytes).unwrap_or(0);
    loop {
        let (response, bytes, targets, any_error) = read_once(node, req, version, denied);
        let now = Instant::now();
        if bytes >= min_bytes || any_error || now >= deadline {
            for t in &targets {
                if let Some(s) = &t.stream {
                    s.metrics().record_fetch(t.bytes);
                }
            }
            let behind = targets.iter().any(|t| t.read_to < t.upper);
            let kind = if behind {
                ReadKind::CatchUp
            } else {
                ReadKind::Tail
            };
            return (response, kind);
        }
        // Wait for a commit on any of the partitions asked for, then read again.
        let waits: Vec<_> = targets
            .iter()
            .filter_map(|t| t.stream.clone().map(|s| (s, t.hw_seen)))
            .map(|(s, hw)| {
                let remaining = deadline.saturating_duration_since(now);
                Box::pin(async move { s.wait_for_high_watermark_above(hw, remaining).await })
            })
            .collect();
        if waits.is_empty() {
            tokio::time::sleep(deadline.saturating_duration_since(now)).await;
        } else {
            futures::future::select_all(waits).await;
        }
    }
}

/// One pass over the requested partitions: the response, the record bytes in it, what each
/// partition's high watermark was, and whether any partition had an error.
fn read_once<H: FetchHost>(
    node: &H,
    req: &FetchRequest,
    version: i16,
    denied: &HashSet<String>,
) -> (FetchResponse, u64, Vec<Target>, bool) {
    // The broker's own cap (Kafka's `fetch.max.bytes`), whatever the client asks for.
    let mut budget = u64::try_from(req.max_bytes)
        .unwrap_or(0)
        .min(FETCH_MAX_BYTES);
    let mut total: u64 = 0;
    let mut any_error = false;
    let mut targets = Vec::new();
    let mut responses = Vec::with_capacity(req.topics.len());
    let read_committed = version >= 4 && req.isolation_level == READ_COMMITTED;
    for topic in &req.topics {
        let name = if version >= 13 {
            topic_name_by_id(node, topic.topic_id)
        } else {
            Some(topic.topic.clone())
        };
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let mut out = PartitionData {
                partition_index: p.partition,
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                // Empty, not null: clients (librdkafka) reject a null record set.
                records: Some(RecordChunks::default()),
                ..Default::default()
            };
            if name.as_ref().is_some_and(|n| denied.contains(n)) {
                out.error_code = ErrorCode::TopicAuthorizationFailed.code();
                any_error = true;
                partitions.push(out);
                continue;
            }
            let home = name.as_deref().map_or(PartitionHome::Unknown, |n| {
                locate_partition(node, n, p.partition)
            });
            let stream = match home {
                PartitionHome::Here(stream) => stream,
                // No replica here, so not the leader: the client looks the leader up again.
                PartitionHome::Elsewhere => {
                    out.error_code = ErrorCode::NotLeaderOrFollower.code();
                    any_error = true;
                    partitions.push(out);
                    continue;
                }
                PartitionHome::Unknown => {
                    out.error_code = if version >= 13 {
                        ErrorCode::UnknownTopicId.code()
                    } else {
                        ErrorCode::UnknownTopicOrPartition.code()
                    };
                    any_error = true;
                    partitions.push(out);
                    continue;
                }
            };
            let v = stream.visible();
            // Read after `v`: every abort below its last stable offset is in it.
            let aborted = read_committed.then(|| stream.aborted_transactions());
            let upper = if read_committed {
                v.last_stable_offset
            } else {
                v.high_watermark
            };
            out.high_watermark = v.high_watermark as i64;
            out.last_stable_offset = v.last_stable_offset as i64;
            out.log_start_offset = v.log_start_offset as i64;
            targets.push(Target {
                stream: Some(stream.clone()),
                hw_seen: v.high_watermark,
                upper,
                read_to: upper,
                bytes: 0,
            });
            if v.leader != node.config().id {
                out.error_code = ErrorCode::NotLeaderOrFollower.code();
                any_error = true;
                partitions.push(out);
                continue;
            }
            // As Kafka: an offset between the high watermark and the log end is valid (an
            // empty answer until it commits; a new leader's high watermark lags its log end for
            // a moment after a failover); only one outside [log start, log end] is out of range.
            let log_end = stream.log_end_offset().max(v.high_watermark);
            let offset = u64::try_from(p.fetch_offset).ok();
            let Some(offset) = offset.filter(|o| *o >= v.log_start_offset && *o <= log_end) else {
                out.error_code = ErrorCode::OffsetOutOfRange.code();
                any_error = true;
                partitions.push(out);
                continue;
            };
            let partition_max = u64::try_from(p.partition_max_bytes).unwrap_or(0);
            // KIP-74: the first partition with data gets a whole batch even when the request's
            // budget is smaller; after that, partitions get only what the budget leaves.
            // (The read returns at least one whole batch whenever its limit is positive.)
            let limit = if total == 0 {
                partition_max.min(budget).max(1)
            } else {
                partition_max.min(budget)
            };
            if let Some(t) = targets.last_mut() {
                t.read_to = offset.min(upper);
            }
            // Null for READ_UNCOMMITTED (nothing to drop), as Kafka sends it.
            out.aborted_transactions = read_committed.then(Vec::new);
            if offset < upper && limit > 0 {
                match stream.read_below(offset, limit, upper) {
                    Ok(read) if read.bytes > 0 => {
                        if let Some(aborted) = &aborted {
                            // Not those whose marker the cleaner removed (see
                            // `without_removed_markers`).
                            let overlapping = without_removed_markers(
                                aborted_overlapping(aborted, offset, read.next_offset),
                                &read.chunks,
                                read.first_batch_offset.unwrap_or(offset),
                                read.next_offset,
                            );
                            out.aborted_transactions = Some(
                                overlapping
                                    .into_iter()
                                    .map(|a| AbortedTransaction {
                                        producer_id: a.producer_id,
                                        first_offset: a.first_offset as i64,
                                        ..Default::default()
                                    })
                                    .collect(),
                            );
                        }
                        if let Some(t) = targets.last_mut() {
                            t.read_to = read.next_offset;
                            t.bytes = read.bytes;
                        }
                        total += read.bytes;
                        budget = budget.saturating_sub(read.bytes);
                        out.records = Some(records_for_version(read.chunks, version));
                    }
                    Ok(_) => {}
                    Err(logstore::LogStoreError::OffsetOutOfRange { .. }) => {
                        out.error_code = ErrorCode::OffsetOutOfRange.code();
                        any_error = true;
                    }
                    Err(e) => {
                        tracing::error!(topic = %stream.name(), "fetch read failed: {e}");
                        out.error_code = ErrorCode::KafkaStorageError.code();
                        any_error = true;
                    }
                }
            }
            partitions.push(out);
        }
        responses.push(FetchableTopicResponse {
            topic: topic.topic.clone(),
            topic_id: topic.topic_id,
            partitions,
            ..Default::default()
        });
    }
    let response = FetchResponse {
        responses,
        ..Default::default()
    };
    (response, total, targets, any_error)
}

/// Record data as the version expects: v2 batches for v4+, message sets before.
fn records_for_version(chunks: Vec<bytes::Bytes>, version: i16) -> RecordChunks {
    if version >= 4 {
        return RecordChunks::from_chunks(chunks);
    }
    let magic = if version >= 2 { 1 } else { 0 };
    let joined = RecordChunks::from_chunks(chunks).to_contiguous();
    match batches_to_message_set(joined, magic, MAX_DOWN_CONVERT_BYTES) {
        Ok(set) => RecordChunks::from(set),
        Err(e) => {
            tracing::warn!("down-converting records for fetch v{version} failed: {e}");
            RecordChunks::default()
        }
    }
}
