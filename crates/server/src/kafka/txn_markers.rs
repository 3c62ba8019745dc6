//! WriteTxnMarkers (API 27): the transaction coordinator asks each partition's leader to end a
//! producer's transaction there with a COMMIT or ABORT marker (KIP-98).
//!
//! For each (producer, partition) the leader writes one control batch (attributes bit 5 and
//! bit 4, the producer's id and epoch, sequence -1, one control record; see
//! [`crate::replication::transactions`]) through the partition's Raft group, and answers once
//! it is committed (fsynced on a majority): from then on every replica's producer state has the
//! transaction closed, the last stable offset has moved past it, and an ABORT is in the list
//! read_committed fetches carry. Per-partition errors as Kafka's: NOT_LEADER_OR_FOLLOWER on a
//! replica that does not lead (or lost leadership before the commit),
//! UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH for a marker whose epoch the partition
//! refuses (older than the producer's; under transaction version 2, which v2 of the request
//! names per marker (KIP-1228), not newer than the epoch of the producer's open transaction: a
//! stale marker of an earlier transaction; see
//! [`crate::replication::transactions::marker_epoch_allowed`]), REQUEST_TIMED_OUT when the
//! commit takes longer than [`MARKER_TIMEOUT`].
//!
//! Authorization: CLUSTER_ACTION on the cluster, as Kafka requires (only brokers and super
//! users send it); otherwise every partition answers CLUSTER_AUTHORIZATION_FAILED.
//!
//! vdl's own coordinator does not send it: its marker writer (`kafka::txn::markers`) appends
//! the same control batch ([`control_batch`]) through each partition's Raft group itself. The
//! API serves Kafka tooling and tests that write markers by hand.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::write_txn_markers_request::WriteTxnMarkersRequest;
use kafka_proto::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
};
use kafka_proto::records::{Compression, RecordBatchBuilder};

use crate::kafka::access::Access;
use crate::kafka::error_codes::{append_error_code, Proposal};
use crate::kafka::host::NodeView;
use crate::kafka::metadata::{locate_partition, PartitionHome};
use crate::kafka::reply::{self, Reply};
use crate::replication::stream::{LogStream, PendingAppend};
use crate::replication::transactions::{marker_control_record, TxnMarker};
use crate::security::acl::AclOperation;

/// How long a marker may take to commit before its partition answers REQUEST_TIMED_OUT (the
/// request has no timeout of its own; Kafka waits up to its request timeout, 30 s).
pub const MARKER_TIMEOUT: Duration = Duration::from_secs(30);

/// The control batch of one marker: producer id and epoch, no sequence, transactional and
/// control flags, one control record stamped `now_ms` (naming the marker's transaction
/// version: see [`marker_control_record`]).
pub fn control_batch(
    producer_id: i64,
    producer_epoch: i16,
    marker: TxnMarker,
    now_ms: i64,
) -> Option<Bytes> {
    RecordBatchBuilder::new(Compression::None)
        .producer(producer_id, producer_epoch, -1)
        .transactional(true)
        .control(true)
        .with_records(&[marker_control_record(marker, now_ms)])
        .ok()?
        .build()
        .ok()
}

/// Where one partition's marker stands while the others are written.
enum Outcome {
    Written(PendingAppend),
    Failed(ErrorCode),
}

/// Starts writing one marker to a partition this node leads.
fn submit<H: NodeView>(node: &H, topic: &str, partition: i32, batch: &Bytes) -> Outcome {
    let stream: LogStream = match locate_partition(node, topic, partition) {
        PartitionHome::Here(s) if s.visible().leader == node.config().id => s,
        PartitionHome::Here(_) | PartitionHome::Elsewhere => {
            return Outcome::Failed(ErrorCode::NotLeaderOrFollower)
        }
        PartitionHome::Unknown => return Outcome::Failed(ErrorCode::UnknownTopicOrPartition),
    };
    Outcome::Written(stream.submit_records(batch.clone(), 1))
}

/// Handles WriteTxnMarkers: every marker's partitions are written at once, the answer comes
/// when all are committed or failed.
pub fn write_txn_markers<H: NodeView>(
    node: &Arc<H>,
    access: &Access,
    req: WriteTxnMarkersRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let allowed = access.cluster(AclOperation::ClusterAction);
    let now_ms = crate::metadata::wall_clock_ms();
    // Submitted now, in request order; awaited in the reply.
    let mut started = Vec::with_capacity(req.markers.len());
    for m in &req.markers {
        let marker = TxnMarker {
            commit: m.transaction_result,
            coordinator_epoch: m.coordinator_epoch,
            transaction_version: m.transaction_version,
            opened_below: None,
        };
        let batch = control_batch(m.producer_id, m.producer_epoch, marker, now_ms);
        let mut topics = Vec::with_capacity(m.topics.len());
        for t in &m.topics {
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for &p in &t.partition_indexes {
                let outcome = match &batch {
                    _ if !allowed => Outcome::Failed(ErrorCode::ClusterAuthorizationFailed),
                    None => Outcome::Failed(ErrorCode::UnknownServerError),
                    Some(batch) => submit(node.as_ref(), &t.name, p, batch),
                };
                partitions.push((p, outcome));
            }
            topics.push((t.name.clone(), partitions));
        }
        started.push((m.producer_id, topics));
    }
    reply::later(correlation_id, version, async move {
        let mut markers = Vec::with_capacity(started.len());
        for (producer_id, topics) in started {
            let mut results = Vec::with_capacity(topics.len());
            for (name, partitions) in topics {
                let mut out = Vec::with_capacity(partitions.len());
                for (partition_index, outcome) in partitions {
                    let code = match outcome {
                        Outcome::Failed(code) => code,
                        Outcome::Written(pending) => match pending.wait(MARKER_TIMEOUT).await {
                            Ok(_) => ErrorCode::None,
                            Err(e) => append_error_code(&e, Proposal::Records),
                        },
                    };
                    out.push(WritableTxnMarkerPartitionResult {
                        partition_index,
                        error_code: code.code(),
                        ..Default::default()
                    });
                }
                results.push(WritableTxnMarkerTopicResult {
                    name,
                    partitions: out,
                    ..Default::default()
                });
            }
            markers.push(WritableTxnMarkerResult {
                producer_id,
                topics: results,
                ..Default::default()
            });
        }
        Response::WriteTxnMarkers(WriteTxnMarkersResponse {
            markers,
            ..Default::default()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::producers::batch_infos;

    /// The batch the leader writes is what the producer state reads as this producer's marker.
    #[test]
    fn the_control_batch_is_read_back_as_the_marker() {
        let marker = TxnMarker {
            commit: false,
            coordinator_epoch: 4,
            transaction_version: 0,
            opened_below: None,
        };
        let batch = control_batch(7, 2, marker, 1_700_000_000_000).unwrap();
        let infos = batch_infos(&batch);
        assert_eq!(infos.len(), 1);
        let i = infos[0];
        assert_eq!((i.producer_id, i.epoch, i.first_seq), (7, 2, -1));
        assert!(i.control && i.transactional);
        assert_eq!(i.marker, Some(marker));
        assert_eq!(i.span, 1);
    }
}
