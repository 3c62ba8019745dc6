//! The v2 record batch (magic 2): a zero-copy view, validation, in-place rewrites of the fields
//! outside the CRC, and splitting a buffer of concatenated batches.
//!
//! Layout (big-endian): baseOffset i64 @0, batchLength i32 @8 (bytes after this field),
//! partitionLeaderEpoch i32 @12, magic i8 @16, crc u32 @17 (CRC-32C of bytes 21..end),
//! attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27, maxTimestamp i64 @35,
//! producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53, recordCount i32 @57,
//! records @61.

use bytes::{Bytes, BytesMut};

use super::compression::{decompress, Compression};
use super::record::{Record, RecordIter, MIN_RECORD_SIZE};
use crate::error::DecodeError;

/// Bytes before a batch's `batchLength` counts: baseOffset and batchLength (Kafka's LOG_OVERHEAD).
pub const LOG_OVERHEAD: usize = 12;
/// Size of a v2 batch header; the records start here.
pub const RECORD_BATCH_OVERHEAD: usize = 61;
/// Offset of the magic byte (the same in v2 batches and legacy messages).
pub const MAGIC_OFFSET: usize = 16;
/// Offset of the CRC field.
pub const CRC_OFFSET: usize = 17;
/// Offset of the attributes field, where the CRC-covered bytes begin.
pub const ATTRIBUTES_OFFSET: usize = 21;
/// Offset of `maxTimestamp` in a v2 batch.
pub const MAX_TIMESTAMP_OFFSET: usize = 35;
/// The record batch magic this module reads.
pub const MAGIC_V2: i8 = 2;
/// Producer id of a batch without one (not idempotent).
pub const NO_PRODUCER_ID: i64 = -1;
/// Producer epoch of a batch without a producer id.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Base sequence of a batch without a producer id.
pub const NO_SEQUENCE: i32 = -1;
/// Partition leader epoch of a batch a producer sent (the leader fills it in).
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// The timestamp of a record that has none.
pub const NO_TIMESTAMP: i64 = -1;

const TIMESTAMP_TYPE_BIT: i16 = 0x08;
const TRANSACTIONAL_BIT: i16 = 0x10;
const CONTROL_BIT: i16 = 0x20;
const DELETE_HORIZON_BIT: i16 = 0x40;

/// Which timestamp a batch's records carry (attributes bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimestampType {
    /// The producer's timestamp (bit clear).
    #[default]
    CreateTime,
    /// The broker's append time (bit set); records then report the batch's max timestamp.
    LogAppendTime,
}

/// The attributes bits of a v2 batch, as a value to build from or compare with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BatchAttributes {
    /// Bits 0-2.
    pub compression: Compression,
    /// Bit 3.
    pub timestamp_type: TimestampType,
    /// Bit 4.
    pub transactional: bool,
    /// Bit 5.
    pub control: bool,
    /// Bit 6: the base timestamp is the delete horizon (set by log compaction).
    pub has_delete_horizon: bool,
}

impl BatchAttributes {
    /// The attributes field's value.
    pub fn to_i16(self) -> i16 {
        let mut a = i16::from(self.compression.id());
        if self.timestamp_type == TimestampType::LogAppendTime {
            a |= TIMESTAMP_TYPE_BIT;
        }
        if self.transactional {
            a |= TRANSACTIONAL_BIT;
        }
        if self.control {
            a |= CONTROL_BIT;
        }
        if self.has_delete_horizon {
            a |= DELETE_HORIZON_BIT;
        }
        a
    }

    /// Parses an attributes field; fails only on an unknown compression id (5-7).
    pub fn from_i16(a: i16) -> Result<BatchAttributes, DecodeError> {
        Ok(BatchAttributes {
            compression: Compression::from_attributes(a)?,
            timestamp_type: if a & TIMESTAMP_TYPE_BIT != 0 {
                TimestampType::LogAppendTime
            } else {
                TimestampType::CreateTime
            },
            transactional: a & TRANSACTIONAL_BIT != 0,
            control: a & CONTROL_BIT != 0,
            has_delete_horizon: a & DELETE_HORIZON_BIT != 0,
        })
    }
}

/// Reads `N` bytes at `at`; zeros if out of range (never happens for a constructed view, whose
/// buffer always holds the full header).
#[inline]
fn field<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = buf.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

/// A zero-copy view of exactly one v2 record batch.
///
/// Construction ([`RecordBatch::new`]) checks only that the buffer holds a whole batch header and
/// that `batchLength` matches the buffer; call [`RecordBatch::validate`] for the magic and CRC,
/// [`RecordBatch::validate_from_producer`] for the rules Kafka applies to batches from clients,
/// and [`RecordBatch::records`] to decode the records. Accessors read the header in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    buf: Bytes,
}

impl RecordBatch {
    /// A view of `buf`, which must hold one whole batch: at least 61 bytes, with
    /// `batchLength + 12 == buf.len()`. Fails with [`DecodeError::MalformedRecords`] otherwise.
    pub fn new(buf: Bytes) -> Result<RecordBatch, DecodeError> {
        if buf.len() < RECORD_BATCH_OVERHEAD {
            return Err(DecodeError::MalformedRecords(
                "record batch is smaller than its 61-byte header",
            ));
        }
        let length = i32::from_be_bytes(field(&buf, 8));
        if i64::from(length) + LOG_OVERHEAD as i64 != buf.len() as i64 {
            return Err(DecodeError::MalformedRecords(
                "record batch length field does not match the batch size",
            ));
        }
        Ok(RecordBatch { buf })
    }

    /// The whole batch's bytes.
    pub fn as_bytes(&self) -> &Bytes {
        &self.buf
    }

    /// The whole batch's bytes, by value.
    pub fn into_bytes(self) -> Bytes {
        self.buf
    }

    /// Total size in bytes (batchLength + 12).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// baseOffset: the first record's offset.
    pub fn base_offset(&self) -> i64 {
        i64::from_be_bytes(field(&self.buf, 0))
    }

    /// batchLength: bytes after this field.
    pub fn batch_length(&self) -> i32 {
        i32::from_be_bytes(field(&self.buf, 8))
    }

    /// partitionLeaderEpoch.
    pub fn partition_leader_epoch(&self) -> i32 {
        i32::from_be_bytes(field(&self.buf, 12))
    }

    /// magic (2 for a valid batch).
    pub fn magic(&self) -> i8 {
        i8::from_be_bytes(field(&self.buf, MAGIC_OFFSET))
    }

    /// The stored CRC-32C.
    pub fn crc(&self) -> u32 {
        u32::from_be_bytes(field(&self.buf, CRC_OFFSET))
    }

    /// A copy of this batch stamped with a broker's append time, as Kafka's broker stamps
    /// batches of a topic with `message.timestamp.type=LogAppendTime`: the timestamp-type
    /// attribute set, `maxTimestamp` = `now_ms`, the CRC recomputed (everything else as it
    /// was). Consumers then report `now_ms` as the timestamp of every record in it.
    pub fn with_log_append_time(&self, now_ms: i64) -> RecordBatch {
        let mut buf = bytes::BytesMut::from(&self.buf[..]);
        let attributes = self.attributes() | TIMESTAMP_TYPE_BIT;
        buf[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
        buf[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&now_ms.to_be_bytes());
        let crc = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..]);
        buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        RecordBatch { buf: buf.freeze() }
    }

    /// The CRC-32C of the bytes the CRC covers (attributes to the end).
    pub fn compute_crc(&self) -> u32 {
        crc32c::crc32c(self.buf.get(ATTRIBUTES_OFFSET..).unwrap_or_default())
    }

    /// The raw attributes field.
    pub fn attributes(&self) -> i16 {
        i16::from_be_bytes(field(&self.buf, ATTRIBUTES_OFFSET))
    }

    /// The attributes, parsed; fails on an unknown compression id.
    pub fn batch_attributes(&self) -> Result<BatchAttributes, DecodeError> {
        BatchAttributes::from_i16(self.attributes())
    }

    /// The compression codec; fails on an unknown id (5-7).
    pub fn compression(&self) -> Result<Compression, DecodeError> {
        Compression::from_attributes(self.attributes())
    }

    /// The timestamp type (bit 3).
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes() & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Bit 4: part of a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes() & TRANSACTIONAL_BIT != 0
    }

    /// Bit 5: holds control records (transaction markers).
    pub fn is_control(&self) -> bool {
        self.attributes() & CONTROL_BIT != 0
    }

    /// Bit 6: the base timestamp is the delete horizon.
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes() & DELETE_HORIZON_BIT != 0
    }

    /// The delete horizon (KIP-534): the base timestamp field when the delete-horizon attribute
    /// is set, `None` otherwise. Log compaction removes this batch's tombstones once the
    /// cleaner's clock has reached it.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        self.has_delete_horizon().then(|| self.base_timestamp())
    }

    /// lastOffsetDelta.
    pub fn last_offset_delta(&self) -> i32 {
        i32::from_be_bytes(field(&self.buf, 23))
    }

    /// The last offset the batch covers: baseOffset + lastOffsetDelta (wrapping).
    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .wrapping_add(i64::from(self.last_offset_delta()))
    }

    /// The offset after the batch: last offset + 1 (wrapping).
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }

    /// baseTimestamp.
    pub fn base_timestamp(&self) -> i64 {
        i64::from_be_bytes(field(&self.buf, 27))
    }

    /// maxTimestamp.
    pub fn max_timestamp(&self) -> i64 {
        i64::from_be_bytes(field(&self.buf, 35))
    }

    /// producerId (-1 for none).
    pub fn producer_id(&self) -> i64 {
        i64::from_be_bytes(field(&self.buf, 43))
    }

    /// True when the batch carries a producer id (idempotent or transactional producer).
    pub fn has_producer_id(&self) -> bool {
        self.producer_id() != NO_PRODUCER_ID
    }

    /// producerEpoch.
    pub fn producer_epoch(&self) -> i16 {
        i16::from_be_bytes(field(&self.buf, 51))
    }

    /// baseSequence.
    pub fn base_sequence(&self) -> i32 {
        i32::from_be_bytes(field(&self.buf, 53))
    }

    /// The sequence of the last record, wrapping past i32::MAX to 0 as Kafka does; -1 when the
    /// batch has no (valid, non-negative) base sequence.
    pub fn last_sequence(&self) -> i32 {
        let base = self.base_sequence();
        if base < 0 {
            return NO_SEQUENCE;
        }
        let delta = self.last_offset_delta();
        if delta > i32::MAX - base {
            // Kafka: sequences wrap to 0 after i32::MAX.
            delta - (i32::MAX - base) - 1
        } else {
            base + delta
        }
    }

    /// recordCount as stored (may be negative in a corrupt batch).
    pub fn record_count(&self) -> i32 {
        i32::from_be_bytes(field(&self.buf, 57))
    }

    /// The records section (possibly compressed), zero-copy.
    pub fn records_data(&self) -> Bytes {
        if self.buf.len() < RECORD_BATCH_OVERHEAD {
            return Bytes::new();
        }
        self.buf.slice(RECORD_BATCH_OVERHEAD..)
    }

    /// Structural checks Kafka makes on every batch (`DefaultRecordBatch.ensureValid`, plus the
    /// count and codec checks it makes on reading): magic is 2 ([`DecodeError::UnsupportedMagic`]),
    /// the CRC-32C matches ([`DecodeError::CrcMismatch`]), recordCount >= 0, the codec id is
    /// known. Does not decode the records; [`RecordBatch::records`] checks those.
    pub fn validate(&self) -> Result<(), DecodeError> {
        if self.magic() != MAGIC_V2 {
            return Err(DecodeError::UnsupportedMagic(self.magic()));
        }
        let stored = self.crc();
        let computed = self.compute_crc();
        if stored != computed {
            return Err(DecodeError::CrcMismatch { stored, computed });
        }
        if self.record_count() < 0 {
            return Err(DecodeError::MalformedRecords("negative record count"));
        }
        let compression = self.compression()?;
        if compression == Compression::None {
            // Every record takes at least MIN_RECORD_SIZE bytes.
            let count = self.record_count() as usize;
            if count > self.records_data().len() / MIN_RECORD_SIZE {
                return Err(DecodeError::MalformedRecords(
                    "record count exceeds what the records section can hold",
                ));
            }
        }
        Ok(())
    }

    /// [`RecordBatch::validate`] plus the rules Kafka's broker applies to batches from clients
    /// (`LogValidator.validateBatch`): at least one record, lastOffsetDelta == recordCount - 1,
    /// not a control batch, and a base sequence >= 0 when there is a producer id.
    pub fn validate_from_producer(&self) -> Result<(), DecodeError> {
        self.validate()?;
        let count = self.record_count();
        if count <= 0 {
            return Err(DecodeError::MalformedRecords(
                "batch from a producer has no records",
            ));
        }
        if i64::from(self.last_offset_delta()) + 1 != i64::from(count) {
            return Err(DecodeError::MalformedRecords(
                "lastOffsetDelta is inconsistent with the record count",
            ));
        }
        if self.is_control() {
            return Err(DecodeError::MalformedRecords(
                "clients may not write control batches",
            ));
        }
        if self.has_producer_id() && self.base_sequence() < 0 {
            return Err(DecodeError::MalformedRecords(
                "batch with a producer id has a negative base sequence",
            ));
        }
        Ok(())
    }

    /// The records section, decompressed if needed, producing at most `max_decompressed`
    /// bytes ([`DecodeError::DecompressedTooLarge`] beyond that). Uncompressed batches return a
    /// zero-copy slice.
    pub fn decompressed_records_data(&self, max_decompressed: usize) -> Result<Bytes, DecodeError> {
        let data = self.records_data();
        match self.compression()? {
            Compression::None => Ok(data),
            codec => Ok(Bytes::from(decompress(codec, &data, max_decompressed)?)),
        }
    }

    /// An iterator over the records, decompressing first if the batch is compressed (at most
    /// `max_decompressed` bytes). Does not check the CRC (call [`RecordBatch::validate`]).
    /// Fails now on a negative count or unknown codec; the iterator then yields an error for a
    /// record that does not fit, a count that does not match the records, or trailing bytes.
    pub fn records(&self, max_decompressed: usize) -> Result<RecordIter, DecodeError> {
        let count = u32::try_from(self.record_count())
            .map_err(|_| DecodeError::MalformedRecords("negative record count"))?;
        let data = self.decompressed_records_data(max_decompressed)?;
        let log_append_time = match self.timestamp_type() {
            TimestampType::LogAppendTime => Some(self.max_timestamp()),
            TimestampType::CreateTime => None,
        };
        Ok(RecordIter::new(
            data,
            count,
            self.base_offset(),
            self.base_timestamp(),
            log_append_time,
        ))
    }

    /// Each record's offset and value length, with the checks of [`RecordBatch::records`]
    /// but without slicing keys, values or headers out of the buffer (what a consumer that
    /// only verifies and counts needs). Decompresses first like `records`.
    pub fn record_summaries(
        &self,
        max_decompressed: usize,
    ) -> Result<super::record::RecordSummaryIter, DecodeError> {
        let count = u32::try_from(self.record_count())
            .map_err(|_| DecodeError::MalformedRecords("negative record count"))?;
        let data = self.decompressed_records_data(max_decompressed)?;
        Ok(super::record::RecordSummaryIter::new(
            data,
            count,
            self.base_offset(),
        ))
    }

    /// All records, collected; see [`RecordBatch::records`].
    pub fn records_vec(&self, max_decompressed: usize) -> Result<Vec<Record>, DecodeError> {
        self.records(max_decompressed)?.collect()
    }

    /// This batch with its base offset replaced. Rewrites in place when the buffer is not
    /// shared, copies the batch otherwise. The CRC stays valid (the field is outside it).
    pub fn with_base_offset(self, base_offset: i64) -> RecordBatch {
        self.rewrite(|b| {
            set_base_offset(b, base_offset).ok();
        })
    }

    /// This batch with its partition leader epoch replaced; see
    /// [`RecordBatch::with_base_offset`].
    pub fn with_partition_leader_epoch(self, epoch: i32) -> RecordBatch {
        self.rewrite(|b| {
            set_partition_leader_epoch(b, epoch).ok();
        })
    }

    fn rewrite(self, f: impl FnOnce(&mut [u8])) -> RecordBatch {
        let mut m = match self.buf.try_into_mut() {
            Ok(m) => m,
            Err(shared) => BytesMut::from(&shared[..]),
        };
        f(&mut m);
        RecordBatch { buf: m.freeze() }
    }
}

/// Overwrites baseOffset (bytes 0..8) of the batch at the start of `batch`. The CRC does not
/// cover these bytes, so the batch stays valid. Also works on a legacy message's offset.
/// Fails with [`DecodeError::Truncated`] if `batch` is shorter than 8 bytes.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) -> Result<(), DecodeError> {
    put_field(batch, 0, &base_offset.to_be_bytes())
}

/// Overwrites partitionLeaderEpoch (bytes 12..16) of the v2 batch at the start of `batch`,
/// outside the CRC. Fails with [`DecodeError::Truncated`] if `batch` is shorter than 16 bytes.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) -> Result<(), DecodeError> {
    put_field(batch, 12, &epoch.to_be_bytes())
}

fn put_field(buf: &mut [u8], at: usize, bytes: &[u8]) -> Result<(), DecodeError> {
    let remaining = buf.len();
    match buf.get_mut(at..at + bytes.len()) {
        Some(dst) => {
            dst.copy_from_slice(bytes);
            Ok(())
        }
        None => Err(DecodeError::Truncated {
            needed: at + bytes.len(),
            remaining,
        }),
    }
}

/// What to do with an incomplete batch at the end of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrailingPartial {
    /// It is an error ([`DecodeError::MalformedRecords`]): the server reading a Produce request.
    #[default]
    Reject,
    /// Iteration stops before it without an error: a client reading a Fetch response, where
    /// Kafka may cut the last batch short.
    Ignore,
}

/// Splits a buffer of concatenated v2 batches into [`RecordBatch`] views, zero-copy.
///
/// Each entry's size comes from its length field and is checked against what remains; a
/// length below the v2 minimum (49) or a magic other than 2 is an error. After the first error
/// the iterator yields nothing more. Batches are not CRC-checked here.
#[derive(Debug, Clone)]
pub struct BatchSplitter {
    rest: Bytes,
    trailing: TrailingPartial,
    failed: bool,
}

impl BatchSplitter {
    /// Splits `buf`, treating a partial trailing batch as `trailing` says.
    pub fn new(buf: Bytes, trailing: TrailingPartial) -> BatchSplitter {
        BatchSplitter {
            rest: buf,
            trailing,
            failed: false,
        }
    }

    /// Bytes not yet split off (the partial tail once iteration stopped in Ignore mode).
    pub fn remaining(&self) -> &Bytes {
        &self.rest
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>, DecodeError> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let have = self.rest.len();
        let partial = |this: &Self| match this.trailing {
            TrailingPartial::Ignore => Ok(None),
            TrailingPartial::Reject => Err(DecodeError::MalformedRecords(
                "partial record batch at the end of the records",
            )),
        };
        if have < LOG_OVERHEAD {
            return partial(self);
        }
        let length = i32::from_be_bytes(field(&self.rest, 8));
        if length < (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) as i32 {
            return Err(DecodeError::MalformedRecords(
                "record batch length is below the minimum batch size",
            ));
        }
        // Check the magic as soon as it is there, so legacy data is reported as such.
        if let Some(&m) = self.rest.get(MAGIC_OFFSET) {
            let magic = m as i8;
            if magic != MAGIC_V2 {
                return Err(DecodeError::UnsupportedMagic(magic));
            }
        }
        let size = length as usize + LOG_OVERHEAD;
        if size > have {
            return partial(self);
        }
        let batch = self.rest.split_to(size);
        RecordBatch::new(batch).map(Some)
    }
}

impl Iterator for BatchSplitter {
    type Item = Result<RecordBatch, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut done = self.failed;
        let out = super::fused_step(&mut done, || self.next_batch());
        self.failed = done;
        out
    }
}

/// Splits concatenated batches, rejecting a partial trailing batch (a Produce request's records).
pub fn split_batches(buf: Bytes) -> BatchSplitter {
    BatchSplitter::new(buf, TrailingPartial::Reject)
}

/// Splits concatenated batches, stopping silently at a partial trailing batch (a Fetch
/// response's records, which Kafka may truncate).
pub fn split_batches_lenient(buf: Bytes) -> BatchSplitter {
    BatchSplitter::new(buf, TrailingPartial::Ignore)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{build_batch, Compression, NewRecord};

    /// A batch stamped with the append time keeps a valid CRC, says LogAppendTime and carries
    /// the stamp as its max timestamp; nothing else changes.
    #[test]
    fn log_append_time_stamp_keeps_the_batch_valid() {
        let records = [
            NewRecord::new(1_000, b"a".to_vec()),
            NewRecord::new(2_000, b"b".to_vec()),
        ];
        let raw = build_batch(Compression::None, &records).unwrap();
        let batch = RecordBatch::new(raw).unwrap();
        assert_eq!(batch.timestamp_type(), TimestampType::CreateTime);
        let stamped = batch.with_log_append_time(9_999);
        stamped.validate().unwrap();
        assert_eq!(stamped.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(stamped.max_timestamp(), 9_999);
        assert_eq!(stamped.base_timestamp(), batch.base_timestamp());
        assert_eq!(stamped.record_count(), 2);
        assert_eq!(stamped.len(), batch.len());
    }
}
