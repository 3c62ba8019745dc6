//! Request bodies that tests write by hand, built in one place: WriteTxnMarkers (a
//! coordinator's markers on one partition) and a one-partition Fetch.
#![allow(dead_code)]

use kafka_proto::frame::Request;
use kafka_proto::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_proto::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest,
};

/// WriteTxnMarkers with one marker per `(producer id, producer epoch, commit)` (commit true:
/// COMMIT, false: ABORT) on partition 0 of `topic`, coordinator epoch 0.
pub fn txn_markers(topic: &str, markers: &[(i64, i16, bool)]) -> Request {
    Request::WriteTxnMarkers(WriteTxnMarkersRequest {
        markers: markers
            .iter()
            .map(|&(producer_id, producer_epoch, commit)| WritableTxnMarker {
                producer_id,
                producer_epoch,
                transaction_result: commit,
                topics: vec![WritableTxnMarkerTopic {
                    name: topic.into(),
                    partition_indexes: vec![0],
                    ..Default::default()
                }],
                coordinator_epoch: 0,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

/// A Fetch of one partition, `partition` of `topic` from `offset`: no wait, no minimum, at most
/// `max_bytes` in all and of the partition, read_uncommitted, no session, no leader epoch.
/// Other settings by struct update (`FetchRequest { isolation_level: 1, ..fetch_one(..) }`).
pub fn fetch_one(topic: &str, partition: i32, offset: i64, max_bytes: i32) -> FetchRequest {
    FetchRequest {
        replica_id: -1,
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes,
        session_epoch: -1,
        topics: vec![FetchTopic {
            topic: topic.into(),
            partitions: vec![FetchPartition {
                partition,
                current_leader_epoch: -1,
                fetch_offset: offset,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                partition_max_bytes: max_bytes,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}
