//! Request bodies that tests write by hand, built in one place: WriteTxnMarkers (a
//! coordinator's markers on one partition), a one-partition Fetch, and a transactional
//! producer's InitProducerId, AddOffsetsToTxn and EndTxn.
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

/// InitProducerId (v4 body) for transactional id `id` with a transaction timeout, asking for a
/// new producer (no id or epoch of its own).
pub fn init_transactional(id: &str, timeout_ms: i32) -> Request {
    Request::InitProducerId(
        kafka_proto::messages::init_producer_id_request::InitProducerIdRequest {
            transactional_id: Some(id.into()),
            transaction_timeout_ms: timeout_ms,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        },
    )
}

/// AddOffsetsToTxn: consumer group `group` joins the transaction of `id` (producer `pid` at
/// `epoch`).
pub fn add_offsets_to_txn(id: &str, pid: i64, epoch: i16, group: &str) -> Request {
    Request::AddOffsetsToTxn(
        kafka_proto::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest {
            transactional_id: id.into(),
            producer_id: pid,
            producer_epoch: epoch,
            group_id: group.into(),
            ..Default::default()
        },
    )
}

/// EndTxn: the transaction of `id` (producer `pid` at `epoch`) commits (`commit`) or aborts.
pub fn end_txn(id: &str, pid: i64, epoch: i16, commit: bool) -> Request {
    Request::EndTxn(kafka_proto::messages::end_txn_request::EndTxnRequest {
        transactional_id: id.into(),
        producer_id: pid,
        producer_epoch: epoch,
        committed: commit,
        ..Default::default()
    })
}

/// AddPartitionsToTxn in the clients' form (v3 and below): partition `partition` of `topic`
/// joins the transaction of `id` (producer `pid` at `epoch`).
pub fn add_partitions_to_txn(
    id: &str,
    pid: i64,
    epoch: i16,
    topic: &str,
    partition: i32,
) -> Request {
    use kafka_proto::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnRequest, V3AndBelowTopic,
    };
    Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
        v3_and_below_transactional_id: id.into(),
        v3_and_below_producer_id: pid,
        v3_and_below_producer_epoch: epoch,
        v3_and_below_topics: vec![V3AndBelowTopic {
            name: topic.into(),
            partitions: vec![partition],
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// The records a read_committed consumer keeps of fetched `records` (Kafka's consumer rule):
/// control batches are skipped, and so are a producer's transactional batches from an aborted
/// transaction's first offset up to its next marker; `aborted` is the Fetch answer's
/// `(producer id, first offset)` list.
pub fn read_committed_records(
    records: bytes::Bytes,
    aborted: &[(i64, i64)],
) -> Vec<kafka_proto::records::Record> {
    let mut pending = aborted.to_vec();
    pending.sort_by_key(|a| a.1);
    let mut pending = std::collections::VecDeque::from(pending);
    let mut dropping = std::collections::HashSet::new();
    let mut out = Vec::new();
    for b in kafka_proto::records::split_batches(records) {
        let b = b.expect("a whole batch");
        while let Some(&(pid, first)) = pending.front() {
            if first > b.last_offset() {
                break;
            }
            dropping.insert(pid);
            pending.pop_front();
        }
        if b.is_control() {
            dropping.remove(&b.producer_id());
            continue;
        }
        if b.is_transactional() && dropping.contains(&b.producer_id()) {
            continue;
        }
        out.extend(b.records_vec(1 << 20).unwrap());
    }
    out
}

/// DescribeTransactions of one transactional id.
pub fn describe_transaction(id: &str) -> Request {
    Request::DescribeTransactions(
        kafka_proto::messages::describe_transactions_request::DescribeTransactionsRequest {
            transactional_ids: vec![id.into()],
            ..Default::default()
        },
    )
}

/// The first transaction of a DescribeTransactions answer, as the tests check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnState {
    /// Its error code.
    pub error_code: i16,
    /// Its state (`Ongoing`, `CompleteCommit`, ...).
    pub state: String,
    /// The producer id.
    pub producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i16,
    /// How many partitions the transaction holds.
    pub partitions: usize,
}

impl TxnState {
    /// The first state of `r` (panics when the answer has none).
    pub fn of(
        r: &kafka_proto::messages::describe_transactions_response::DescribeTransactionsResponse,
    ) -> TxnState {
        let s = &r.transaction_states[0];
        TxnState {
            error_code: s.error_code,
            state: s.transaction_state.clone(),
            producer_id: s.producer_id,
            producer_epoch: s.producer_epoch,
            partitions: s
                .topic_partitions
                .iter()
                .map(|t| t.partition_indexes.len())
                .sum(),
        }
    }
}

/// A Fetch answer's partition as a read_committed test reads it: its aborted transactions
/// `(producer id, first offset)` sorted by offset (empty when it has none) and its records in
/// one buffer.
pub fn aborted_and_records(
    p: &kafka_proto::messages::fetch_response::PartitionData,
) -> (Vec<(i64, i64)>, bytes::Bytes) {
    let mut aborted: Vec<(i64, i64)> = p
        .aborted_transactions
        .as_ref()
        .map(|a| a.iter().map(|t| (t.producer_id, t.first_offset)).collect())
        .unwrap_or_default();
    aborted.sort_by_key(|a| a.1);
    let records = p
        .records
        .as_ref()
        .map(|r| r.to_contiguous())
        .unwrap_or_default();
    (aborted, records)
}
