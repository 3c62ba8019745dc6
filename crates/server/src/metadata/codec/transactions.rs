//! The transaction messages of an entry and a snapshot (`PutTransaction`,
//! `TxnMarkersWritten`, `RequestTxnPartitions`, `TxnRecord`) and their conversions to and from [`TxnRecord`].

use crate::metadata::txn_partition_requests::TxnPartitionRequest;
use crate::metadata::{TxnRecord, TxnStatus};

use super::messages::TopicPartitionWire;

/// `PutTransaction` on the wire; also a snapshot's stored transaction.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PutTransactionWire {
    /// The transactional id.
    #[prost(string, tag = "1")]
    pub transactional_id: String,
    /// Its state.
    #[prost(message, optional, tag = "2")]
    pub record: Option<TxnRecordWire>,
}

/// `TxnMarkersWritten` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnMarkersWrittenWire {
    /// The transactional id.
    #[prost(string, tag = "1")]
    pub transactional_id: String,
    /// The producer id.
    #[prost(int64, tag = "2")]
    pub producer_id: i64,
    /// The producer epoch (an int16).
    #[prost(int32, tag = "3")]
    pub producer_epoch: i32,
    /// The partitions marked.
    #[prost(message, repeated, tag = "4")]
    pub partitions: Vec<TopicPartitionWire>,
    /// The proposer's wall clock, ms since the epoch.
    #[prost(int64, tag = "5")]
    pub time_ms: i64,
}

/// `ExpireTransactionalId` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExpireTransactionalIdWire {
    /// The transactional id.
    #[prost(string, tag = "1")]
    pub transactional_id: String,
    /// The producer id it held.
    #[prost(int64, tag = "2")]
    pub producer_id: i64,
    /// Its epoch (an int16).
    #[prost(int32, tag = "3")]
    pub producer_epoch: i32,
    /// Its last change, ms since the epoch.
    #[prost(int64, tag = "4")]
    pub update_ms: i64,
}

/// `RequestTxnPartitions` on the wire; also a snapshot's queued request (with its index).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestTxnPartitionsWire {
    /// The transactional id.
    #[prost(string, tag = "1")]
    pub transactional_id: String,
    /// The producer id.
    #[prost(int64, tag = "2")]
    pub producer_id: i64,
    /// The producer epoch (an int16).
    #[prost(int32, tag = "3")]
    pub producer_epoch: i32,
    /// The partitions to add.
    #[prost(message, repeated, tag = "4")]
    pub partitions: Vec<TopicPartitionWire>,
    /// In a snapshot: the index the request was committed at (absent in a command).
    #[prost(uint64, tag = "5")]
    pub index: u64,
}

impl From<&TxnPartitionRequest> for RequestTxnPartitionsWire {
    fn from(r: &TxnPartitionRequest) -> Self {
        RequestTxnPartitionsWire {
            transactional_id: r.transactional_id.clone(),
            producer_id: r.producer_id,
            producer_epoch: i32::from(r.producer_epoch),
            partitions: partitions_to_wire(&r.partitions),
            index: r.index,
        }
    }
}

impl From<RequestTxnPartitionsWire> for TxnPartitionRequest {
    fn from(w: RequestTxnPartitionsWire) -> Self {
        TxnPartitionRequest {
            index: w.index,
            transactional_id: w.transactional_id,
            producer_id: w.producer_id,
            producer_epoch: epoch_from_wire(w.producer_epoch),
            partitions: w
                .partitions
                .into_iter()
                .map(|p| (p.topic, p.partition))
                .collect(),
        }
    }
}

/// `TxnRecord` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRecordWire {
    /// The producer id.
    #[prost(int64, tag = "1")]
    pub producer_id: i64,
    /// The producer epoch (an int16).
    #[prost(int32, tag = "2")]
    pub producer_epoch: i32,
    /// The transaction timeout.
    #[prost(int32, tag = "3")]
    pub timeout_ms: i32,
    /// [`TxnStatus::code`].
    #[prost(int32, tag = "4")]
    pub status: i32,
    /// The partitions (added, or still to mark).
    #[prost(message, repeated, tag = "5")]
    pub partitions: Vec<TopicPartitionWire>,
    /// The groups added.
    #[prost(string, repeated, tag = "6")]
    pub groups: Vec<String>,
    /// The transaction's start, ms since the epoch (-1: none).
    #[prost(int64, tag = "7")]
    pub start_ms: i64,
    /// The last change, ms since the epoch.
    #[prost(int64, tag = "8")]
    pub update_ms: i64,
    /// The coordinator epoch of its markers.
    #[prost(int32, tag = "9")]
    pub coordinator_epoch: i32,
    /// [`TxnRecord::transaction_version`] (absent, 0, in records written before it).
    #[prost(int32, tag = "10")]
    pub transaction_version: i32,
    /// [`TxnRecord::next_producer_id`].
    #[prost(int64, optional, tag = "11")]
    pub next_producer_id: Option<i64>,
    /// [`TxnRecord::previous_producer_id`].
    #[prost(int64, optional, tag = "12")]
    pub previous_producer_id: Option<i64>,
}

/// The (topic, partition)s of a list on the wire.
pub fn partitions_to_wire<'a>(
    partitions: impl IntoIterator<Item = &'a (String, i32)>,
) -> Vec<TopicPartitionWire> {
    partitions
        .into_iter()
        .map(|(topic, partition)| TopicPartitionWire {
            topic: topic.clone(),
            partition: *partition,
        })
        .collect()
}

/// An epoch read from the wire: one outside int16 (written by no version) saturates.
pub fn epoch_from_wire(epoch: i32) -> i16 {
    i16::try_from(epoch).unwrap_or(if epoch < 0 { i16::MIN } else { i16::MAX })
}

impl From<&TxnRecord> for TxnRecordWire {
    fn from(r: &TxnRecord) -> Self {
        TxnRecordWire {
            producer_id: r.producer_id,
            producer_epoch: i32::from(r.producer_epoch),
            timeout_ms: r.timeout_ms,
            status: r.status.code(),
            partitions: partitions_to_wire(&r.partitions),
            groups: r.groups.iter().cloned().collect(),
            start_ms: r.start_ms,
            update_ms: r.update_ms,
            coordinator_epoch: r.coordinator_epoch,
            transaction_version: i32::from(r.transaction_version),
            next_producer_id: r.next_producer_id,
            previous_producer_id: r.previous_producer_id,
        }
    }
}

impl From<TxnRecordWire> for TxnRecord {
    /// A status code this version does not know (a newer version's) reads as PrepareAbort
    /// with no partitions, which completes as an abort: the safe end for a transaction this
    /// version cannot follow.
    fn from(w: TxnRecordWire) -> Self {
        let status = TxnStatus::from_code(w.status);
        TxnRecord {
            producer_id: w.producer_id,
            producer_epoch: epoch_from_wire(w.producer_epoch),
            timeout_ms: w.timeout_ms,
            status: status.unwrap_or(TxnStatus::PrepareAbort),
            partitions: if status.is_some() {
                w.partitions
                    .into_iter()
                    .map(|p| (p.topic, p.partition))
                    .collect()
            } else {
                Default::default()
            },
            groups: w.groups.into_iter().collect(),
            start_ms: w.start_ms,
            update_ms: w.update_ms,
            coordinator_epoch: w.coordinator_epoch,
            transaction_version: i16::try_from(w.transaction_version).unwrap_or(0),
            next_producer_id: w.next_producer_id,
            previous_producer_id: w.previous_producer_id,
        }
    }
}
