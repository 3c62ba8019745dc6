//! A transactional producer's calls and a read_committed consumer's: InitProducerId with a
//! transactional id, AddPartitionsToTxn (the client's form, v3), EndTxn, Produce carrying the
//! transactional id, and Fetch / ListOffsets at an isolation level, whose Fetch answer keeps
//! the aborted-transactions list and the last stable offset. Each call sends one request and
//! turns a top-level or partition error code into [`ClientError::Broker`].

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, V3AndBelowTopic,
};
use kafka_proto::messages::end_txn_request::EndTxnRequest;
use kafka_proto::messages::init_producer_id_request::InitProducerIdRequest;

use super::coordinator::{broker, unexpected, INIT_PRODUCER_ID_VERSION};
use super::protocol::{self, FetchSpec};
use super::{ClientError, Connection};

/// AddPartitionsToTxn version (v3: the last of the client's one-transaction form).
pub const ADD_PARTITIONS_TO_TXN_VERSION: i16 = 3;
/// EndTxn version (v3: flexible; v5 is KIP-890's transaction version 2).
pub const END_TXN_VERSION: i16 = 3;
/// Fetch's `isolation_level` for read_uncommitted.
pub const READ_UNCOMMITTED: i8 = 0;
/// Fetch's and ListOffsets' `isolation_level` for read_committed.
pub const READ_COMMITTED: i8 = 1;

/// The producer id and epoch of `transactional_id` from its coordinator on `conn` (a new epoch
/// each time: an older producer with the same id is fenced and its open transaction aborted).
pub async fn init_transactional_producer(
    conn: &mut Connection,
    transactional_id: &str,
    transaction_timeout_ms: i32,
) -> Result<(i64, i16), ClientError> {
    let req = InitProducerIdRequest {
        transactional_id: Some(transactional_id.into()),
        transaction_timeout_ms,
        ..Default::default()
    };
    let Response::InitProducerId(r) = conn.request(INIT_PRODUCER_ID_VERSION, &req.into()).await?
    else {
        return Err(unexpected("InitProducerId"));
    };
    broker(r.error_code, "InitProducerId")?;
    Ok((r.producer_id, r.producer_epoch))
}

/// The transaction a request belongs to.
#[derive(Debug, Clone, Copy)]
pub struct TxnIdentity<'a> {
    /// `transactional.id`.
    pub transactional_id: &'a str,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
}

/// Adds `partitions` of `topic` to the open transaction; the first partition error, if any,
/// is the error.
pub async fn add_partitions_to_txn(
    conn: &mut Connection,
    txn: TxnIdentity<'_>,
    topic: &str,
    partitions: &[i32],
) -> Result<(), ClientError> {
    let req = AddPartitionsToTxnRequest {
        v3_and_below_transactional_id: txn.transactional_id.into(),
        v3_and_below_producer_id: txn.producer_id,
        v3_and_below_producer_epoch: txn.producer_epoch,
        v3_and_below_topics: vec![V3AndBelowTopic {
            name: topic.into(),
            partitions: partitions.to_vec(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::AddPartitionsToTxn(r) = conn
        .request(ADD_PARTITIONS_TO_TXN_VERSION, &req.into())
        .await?
    else {
        return Err(unexpected("AddPartitionsToTxn"));
    };
    let results: Vec<_> = r
        .results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| t.results_by_partition.iter())
        .collect();
    if results.len() != partitions.len() {
        return Err(ClientError::Unexpected(format!(
            "AddPartitionsToTxn answered {} partitions of {}",
            results.len(),
            partitions.len()
        )));
    }
    // OPERATION_NOT_ATTEMPTED marks the partitions left out because another failed: report
    // the one that failed.
    let mut first = Ok(());
    for p in results {
        match ErrorCode::from_code(p.partition_error_code) {
            ErrorCode::None => {}
            ErrorCode::OperationNotAttempted => {
                if first.is_ok() {
                    first = broker(p.partition_error_code, "AddPartitionsToTxn");
                }
            }
            _ => return broker(p.partition_error_code, "AddPartitionsToTxn"),
        }
    }
    first
}

/// Ends the open transaction: commits it when `commit`, aborts it otherwise.
pub async fn end_txn(
    conn: &mut Connection,
    txn: TxnIdentity<'_>,
    commit: bool,
) -> Result<(), ClientError> {
    let req = EndTxnRequest {
        transactional_id: txn.transactional_id.into(),
        producer_id: txn.producer_id,
        producer_epoch: txn.producer_epoch,
        committed: commit,
        ..Default::default()
    };
    let Response::EndTxn(r) = conn.request(END_TXN_VERSION, &req.into()).await? else {
        return Err(unexpected("EndTxn"));
    };
    broker(r.error_code, "EndTxn")
}

/// A Produce request (acks=all) with one transactional batch for one partition.
pub fn produce(
    transactional_id: &str,
    topic: &str,
    partition: i32,
    timeout_ms: i32,
    batch: Bytes,
) -> Request {
    let mut req = protocol::produce(topic, partition, -1, timeout_ms, batch);
    if let Request::Produce(p) = &mut req {
        p.transactional_id = Some(transactional_id.into());
    }
    req
}

/// A Fetch request for one partition at `isolation_level`.
pub fn fetch(topic: &str, partition: i32, spec: FetchSpec, isolation_level: i8) -> Request {
    let mut req = protocol::fetch(topic, partition, spec);
    if let Request::Fetch(f) = &mut req {
        f.isolation_level = isolation_level;
    }
    req
}

/// A ListOffsets request for one partition at `timestamp` and `isolation_level` (latest at
/// read_committed: the last stable offset).
pub fn list_offsets(topic: &str, partition: i32, timestamp: i64, isolation_level: i8) -> Request {
    let mut req = protocol::list_offsets(topic, partition, timestamp);
    if let Request::ListOffsets(l) = &mut req {
        l.isolation_level = isolation_level;
    }
    req
}

/// A transaction the Fetch answer says was aborted: its producer and the offset of its first
/// record in the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// Producer id.
    pub producer_id: i64,
    /// First offset of the aborted transaction.
    pub first_offset: i64,
}

/// The partition's part of a read_committed Fetch answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CommittedData {
    /// The high watermark.
    pub high_watermark: i64,
    /// The last stable offset.
    pub last_stable_offset: i64,
    /// The aborted transactions overlapping the data (empty when the broker sent none).
    pub aborted: Vec<AbortedTxn>,
    /// The record batches (possibly ending in a partial batch).
    pub records: Bytes,
}

/// Reads the data for `partition` from a Fetch response, with its aborted transactions.
pub fn fetched_committed(response: Response, partition: i32) -> Result<CommittedData, ClientError> {
    let Response::Fetch(r) = response else {
        return Err(unexpected("Fetch"));
    };
    broker(r.error_code, "Fetch")?;
    let p = r
        .responses
        .into_iter()
        .flat_map(|t| t.partitions.into_iter())
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| ClientError::Unexpected("Fetch response without our partition".into()))?;
    broker(p.error_code, "Fetch")?;
    Ok(CommittedData {
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
        aborted: p
            .aborted_transactions
            .unwrap_or_default()
            .into_iter()
            .map(|a| AbortedTxn {
                producer_id: a.producer_id,
                first_offset: a.first_offset,
            })
            .collect(),
        records: p.records.map(|r| r.to_contiguous()).unwrap_or_default(),
    })
}
