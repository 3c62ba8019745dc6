//! Building v2 record batches: for the perf client, tests, and the server's conversions.

use bytes::Bytes;

use super::batch::{
    BatchAttributes, TimestampType, ATTRIBUTES_OFFSET, CRC_OFFSET, LOG_OVERHEAD, MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
};
use super::compression::{compress, Compression};
use super::record::{encode_record, Header};
use crate::error::EncodeError;

/// A record to add to a batch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewRecord {
    /// The record's timestamp (milliseconds since the epoch; -1 for none).
    pub timestamp: i64,
    /// The key; `None` for null.
    pub key: Option<Bytes>,
    /// The value; `None` for null.
    pub value: Option<Bytes>,
    /// The headers, in order.
    pub headers: Vec<Header>,
}

impl NewRecord {
    /// A record with a value, no key, no headers, and timestamp `timestamp`.
    pub fn new(timestamp: i64, value: impl Into<Bytes>) -> NewRecord {
        NewRecord {
            timestamp,
            key: None,
            value: Some(value.into()),
            headers: Vec::new(),
        }
    }

    /// This record with a key.
    pub fn with_key(mut self, key: impl Into<Bytes>) -> NewRecord {
        self.key = Some(key.into());
        self
    }

    /// This record with one more header.
    pub fn with_header(mut self, key: impl Into<Bytes>, value: Option<Bytes>) -> NewRecord {
        self.headers.push(Header::new(key, value));
        self
    }
}

/// Builds one v2 record batch. Records get offset deltas 0, 1, 2... in the order they are
/// added (or explicit ones, see [`RecordBatchBuilder::push_with_offset_delta`]); [`RecordBatchBuilder::build`] computes lastOffsetDelta, the timestamps, the
/// compression and the CRC-32C.
///
/// Defaults: base offset 0, no compression, create time, no producer id/epoch/sequence (-1),
/// partition leader epoch -1, not transactional, not control.
#[derive(Debug, Clone)]
pub struct RecordBatchBuilder {
    base_offset: i64,
    partition_leader_epoch: i32,
    attributes: BatchAttributes,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    log_append_time: Option<i64>,
    records: Vec<u8>,
    count: u32,
    last_offset_delta: Option<i32>,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
}

impl Default for RecordBatchBuilder {
    fn default() -> RecordBatchBuilder {
        RecordBatchBuilder::new(Compression::None)
    }
}

impl RecordBatchBuilder {
    /// An empty builder for a batch compressed with `compression`.
    pub fn new(compression: Compression) -> RecordBatchBuilder {
        RecordBatchBuilder {
            base_offset: 0,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            attributes: BatchAttributes {
                compression,
                ..BatchAttributes::default()
            },
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            log_append_time: None,
            records: Vec::new(),
            count: 0,
            last_offset_delta: None,
            base_timestamp: None,
            max_timestamp: NO_TIMESTAMP,
        }
    }

    /// Sets the base offset (default 0).
    pub fn base_offset(mut self, base_offset: i64) -> RecordBatchBuilder {
        self.base_offset = base_offset;
        self
    }

    /// Sets the partition leader epoch (default -1).
    pub fn partition_leader_epoch(mut self, epoch: i32) -> RecordBatchBuilder {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Sets producer id, epoch and base sequence (idempotent / transactional producers).
    pub fn producer(mut self, id: i64, epoch: i16, base_sequence: i32) -> RecordBatchBuilder {
        self.producer_id = id;
        self.producer_epoch = epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Sets the transactional flag (bit 4).
    pub fn transactional(mut self, yes: bool) -> RecordBatchBuilder {
        self.attributes.transactional = yes;
        self
    }

    /// Sets the control flag (bit 5): the records are transaction markers.
    pub fn control(mut self, yes: bool) -> RecordBatchBuilder {
        self.attributes.control = yes;
        self
    }

    /// Marks the batch log-append-time with the given time: the timestamp bit is set and
    /// maxTimestamp is `append_time` (records then report it as their timestamp).
    pub fn log_append_time(mut self, append_time: i64) -> RecordBatchBuilder {
        self.attributes.timestamp_type = TimestampType::LogAppendTime;
        self.log_append_time = Some(append_time);
        self
    }

    /// Records added so far.
    pub fn count(&self) -> usize {
        self.count as usize
    }

    /// Uncompressed size of the records added so far.
    pub fn records_size(&self) -> usize {
        self.records.len()
    }

    /// Adds a record at the next offset delta (one past the last record's). Its timestamp delta
    /// is relative to the first record's timestamp. Fails if a field is too long for its length
    /// prefix or the offset delta would pass i32::MAX.
    pub fn push(
        &mut self,
        timestamp: i64,
        key: Option<&Bytes>,
        value: Option<&Bytes>,
        headers: &[Header],
    ) -> Result<(), EncodeError> {
        let offset_delta = match self.last_offset_delta {
            None => 0,
            Some(d) => d.checked_add(1).ok_or(EncodeError::TooLong {
                what: "record batch offset delta",
                len: self.count as usize,
            })?,
        };
        self.push_with_offset_delta(offset_delta, timestamp, key, value, headers)
    }

    /// Adds a record at an explicit offset delta, which must be greater than the previous
    /// record's (gaps are allowed, as in compacted batches); lastOffsetDelta becomes the
    /// largest delta. Fails with [`EncodeError::TooLong`] on a delta that does not increase or
    /// a field too long for its length prefix.
    pub fn push_with_offset_delta(
        &mut self,
        offset_delta: i32,
        timestamp: i64,
        key: Option<&Bytes>,
        value: Option<&Bytes>,
        headers: &[Header],
    ) -> Result<(), EncodeError> {
        if offset_delta < 0
            || self
                .last_offset_delta
                .is_some_and(|last| offset_delta <= last)
        {
            return Err(EncodeError::TooLong {
                what: "non-increasing record offset delta",
                len: offset_delta.unsigned_abs() as usize,
            });
        }
        let base = *self.base_timestamp.get_or_insert(timestamp);
        encode_record(
            &mut self.records,
            offset_delta,
            timestamp.wrapping_sub(base),
            key,
            value,
            headers,
        )?;
        self.count += 1;
        self.last_offset_delta = Some(offset_delta);
        self.max_timestamp = self.max_timestamp.max(timestamp);
        Ok(())
    }

    /// Adds a [`NewRecord`]; see [`RecordBatchBuilder::push`].
    pub fn append(&mut self, record: &NewRecord) -> Result<(), EncodeError> {
        self.push(
            record.timestamp,
            record.key.as_ref(),
            record.value.as_ref(),
            &record.headers,
        )
    }

    /// This builder with the records added; see [`RecordBatchBuilder::append`].
    pub fn with_records<'a>(
        mut self,
        records: impl IntoIterator<Item = &'a NewRecord>,
    ) -> Result<RecordBatchBuilder, EncodeError> {
        for r in records {
            self.append(r)?;
        }
        Ok(self)
    }

    /// Writes the batch. A batch with no records gets recordCount 0, lastOffsetDelta 0 and
    /// timestamps -1. Fails if compression fails or the batch exceeds i32::MAX bytes.
    pub fn build(&self) -> Result<Bytes, EncodeError> {
        let compressed;
        let records: &[u8] = match self.attributes.compression {
            Compression::None => &self.records,
            codec => {
                compressed = compress(codec, &self.records)?;
                &compressed
            }
        };
        let count = i32::try_from(self.count).map_err(|_| EncodeError::TooLong {
            what: "record batch",
            len: self.count as usize,
        })?;
        let header = BatchHeader {
            base_offset: self.base_offset,
            partition_leader_epoch: self.partition_leader_epoch,
            attributes: self.attributes.to_i16(),
            last_offset_delta: self.last_offset_delta.unwrap_or(0),
            base_timestamp: self.base_timestamp.unwrap_or(NO_TIMESTAMP),
            max_timestamp: self.log_append_time.unwrap_or(self.max_timestamp),
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            record_count: count,
        };
        encode_batch(&header, records)
    }
}

/// Every header field of a v2 batch except the ones [`encode_batch`] computes (batchLength,
/// magic, CRC).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchHeader {
    pub(crate) base_offset: i64,
    pub(crate) partition_leader_epoch: i32,
    pub(crate) attributes: i16,
    pub(crate) last_offset_delta: i32,
    pub(crate) base_timestamp: i64,
    pub(crate) max_timestamp: i64,
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    pub(crate) base_sequence: i32,
    pub(crate) record_count: i32,
}

/// Writes a v2 batch: `header`, then `records` (the records section as it goes on the wire,
/// already compressed if the attributes say so), with batchLength, magic 2 and the CRC-32C
/// filled in. Fails if the batch would exceed i32::MAX bytes.
pub(crate) fn encode_batch(header: &BatchHeader, records: &[u8]) -> Result<Bytes, EncodeError> {
    let total = RECORD_BATCH_OVERHEAD + records.len();
    let batch_length = i32::try_from(total - LOG_OVERHEAD).map_err(|_| EncodeError::TooLong {
        what: "record batch",
        len: total,
    })?;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&header.base_offset.to_be_bytes());
    out.extend_from_slice(&batch_length.to_be_bytes());
    out.extend_from_slice(&header.partition_leader_epoch.to_be_bytes());
    out.push(MAGIC_V2 as u8);
    out.extend_from_slice(&[0; 4]); // CRC, filled in below.
    out.extend_from_slice(&header.attributes.to_be_bytes());
    out.extend_from_slice(&header.last_offset_delta.to_be_bytes());
    out.extend_from_slice(&header.base_timestamp.to_be_bytes());
    out.extend_from_slice(&header.max_timestamp.to_be_bytes());
    out.extend_from_slice(&header.producer_id.to_be_bytes());
    out.extend_from_slice(&header.producer_epoch.to_be_bytes());
    out.extend_from_slice(&header.base_sequence.to_be_bytes());
    out.extend_from_slice(&header.record_count.to_be_bytes());
    out.extend_from_slice(records);
    let crc = crc32c::crc32c(out.get(ATTRIBUTES_OFFSET..).unwrap_or_default());
    if let Some(dst) = out.get_mut(CRC_OFFSET..CRC_OFFSET + 4) {
        dst.copy_from_slice(&crc.to_be_bytes());
    }
    Ok(Bytes::from(out))
}

/// Builds one batch from `records` with `compression` and the default settings of
/// [`RecordBatchBuilder`].
pub fn build_batch(compression: Compression, records: &[NewRecord]) -> Result<Bytes, EncodeError> {
    RecordBatchBuilder::new(compression)
        .with_records(records)?
        .build()
}
