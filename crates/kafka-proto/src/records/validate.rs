//! What a broker checks of the records a producer sends before anything is stored, after Apache
//! Kafka 3.9's broker (`ProduceRequest.validateRecords`, `UnifiedLog.analyzeAndValidateRecords`,
//! `LogValidator`), written from its documented behaviour.
//!
//! Two levels:
//! - [`check_produce_shape`]: the request-level rules, reading only batch headers. Produce v3 and
//!   later must carry exactly one magic-2 batch per partition; magic-2 data must be exactly one
//!   batch at every version (Kafka's validator refuses a second v2 batch whatever the request
//!   version). Legacy (magic 0/1) message sets of Produce v0-2 are left to the caller, which
//!   converts them to one v2 batch and validates that.
//! - [`validate_producer_batch`]: one v2 batch, in Kafka's order: base offset 0, size within
//!   `message.max.bytes`, magic and CRC, record count and offset range, no control batch, a
//!   sequence with a producer id, a known codec (zstd only from Produce v7), timestamps at most
//!   `message.timestamp.after.max.ms` ahead of the broker's clock, and then every record: exactly
//!   the declared count, each one's length-prefixed body consumed exactly, offset deltas 0, 1, ...
//!   in order, headers well formed, nothing after the last record. Compressed batches are
//!   decompressed within [`ProduceLimits::max_decompressed_bytes`] and checked the same way.
//!
//! [`validate_produce_records`] does both. Errors are [`ProduceValidationError`]s, each with the
//! Kafka error code a broker answers ([`ProduceValidationError::error_code`]). Nothing here
//! panics; an uncompressed batch is validated without allocating (the records are walked in
//! place, nothing is sliced out).

use bytes::Bytes;
use thiserror::Error;

use super::batch::{RecordBatch, TimestampType, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2};
use super::compression::Compression;
use super::record::MIN_RECORD_SIZE;
use super::{NO_TIMESTAMP, RECORD_BATCH_OVERHEAD};
use crate::error::DecodeError;
use crate::error_code::ErrorCode;

/// Kafka 4.0's default for `message.timestamp.after.max.ms`: a create-time record may be at most
/// one hour ahead of the broker's clock.
pub const DEFAULT_TIMESTAMP_AFTER_MAX_MS: i64 = 3_600_000;

/// How many times `message.max.bytes` a compressed batch may decompress to (see
/// [`ProduceLimits::new`]). Kafka's clients bound a batch's uncompressed size (librdkafka by
/// `message.max.bytes`, the Java client by its batch size and compression-ratio estimate), so
/// real batches stay well within this; a batch beyond it is refused with MESSAGE_TOO_LARGE.
pub const MAX_COMPRESSION_RATIO: usize = 16;

/// Upper bound of [`ProduceLimits::max_decompressed_bytes`] whatever `message.max.bytes` is.
pub const MAX_DECOMPRESSED_BYTES: usize = 256 << 20;

/// Produce v7 is the first version that may carry zstd-compressed batches (KIP-110).
pub const ZSTD_MIN_PRODUCE_VERSION: i16 = 7;

/// Produce v3 is the first version that must carry exactly one magic-2 batch per partition.
pub const ONE_BATCH_MIN_PRODUCE_VERSION: i16 = 3;

/// The limits and clock a producer's batch is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceLimits {
    /// Largest batch in bytes, whole (Kafka's `message.max.bytes`); larger is MESSAGE_TOO_LARGE.
    pub max_batch_bytes: usize,
    /// Largest records section a compressed batch may decompress to; larger is
    /// MESSAGE_TOO_LARGE, and this is all the memory decompression may take.
    pub max_decompressed_bytes: usize,
    /// The broker's clock, in milliseconds since the Unix epoch.
    pub now_ms: i64,
    /// How far ahead of `now_ms` a record's timestamp may be (Kafka's
    /// `message.timestamp.after.max.ms`); beyond it the batch is INVALID_TIMESTAMP.
    pub timestamp_after_max_ms: i64,
}

impl ProduceLimits {
    /// Limits for a broker with this `message.max.bytes` at `now_ms`: compressed batches may
    /// decompress to [`MAX_COMPRESSION_RATIO`] times `message_max_bytes` (at most
    /// [`MAX_DECOMPRESSED_BYTES`]), timestamps may be [`DEFAULT_TIMESTAMP_AFTER_MAX_MS`] ahead.
    pub fn new(message_max_bytes: usize, now_ms: i64) -> ProduceLimits {
        ProduceLimits {
            max_batch_bytes: message_max_bytes,
            max_decompressed_bytes: message_max_bytes
                .saturating_mul(MAX_COMPRESSION_RATIO)
                .min(MAX_DECOMPRESSED_BYTES),
            now_ms,
            timestamp_after_max_ms: DEFAULT_TIMESTAMP_AFTER_MAX_MS,
        }
    }

    /// These limits with another `message.timestamp.after.max.ms`.
    pub fn with_timestamp_after_max_ms(mut self, ms: i64) -> ProduceLimits {
        self.timestamp_after_max_ms = ms;
        self
    }
}

/// Why a producer's records were refused. [`ProduceValidationError::error_code`] gives the Kafka
/// error code a broker answers for the partition.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProduceValidationError {
    /// The framing is broken (a batch shorter than its header or than its length field says,
    /// a length below the minimum, an unknown magic) or the CRC does not match:
    /// CORRUPT_MESSAGE.
    #[error("corrupt records: {0}")]
    Corrupt(DecodeError),
    /// The batch is larger than `message.max.bytes`: MESSAGE_TOO_LARGE.
    #[error("record batch of {size} bytes is larger than the limit of {max} bytes")]
    TooLarge {
        /// The batch's size in bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The compressed records decompress to more than the limit: MESSAGE_TOO_LARGE.
    #[error("compressed records decompress to more than {0} bytes")]
    DecompressedTooLarge(usize),
    /// The batch's structure, counts or records are wrong (more than one batch, base offset not
    /// 0, count not matching the offsets or the records, a malformed or truncated record, offset
    /// deltas out of order, trailing bytes, a control batch, ...): INVALID_RECORD.
    #[error("invalid records: {0}")]
    InvalidRecord(DecodeError),
    /// A create-time timestamp is too far ahead of the broker's clock: INVALID_TIMESTAMP.
    #[error(
        "timestamp {timestamp} is more than {after_max_ms} ms ahead of the broker's clock ({now_ms})"
    )]
    InvalidTimestamp {
        /// The offending timestamp.
        timestamp: i64,
        /// The broker's clock.
        now_ms: i64,
        /// How far ahead a timestamp may be.
        after_max_ms: i64,
    },
    /// A zstd batch in a Produce request older than v7: UNSUPPORTED_COMPRESSION_TYPE.
    #[error("zstd-compressed records need Produce v7 or later, got v{0}")]
    ZstdBeforeV7(i16),
}

impl ProduceValidationError {
    /// The Kafka error code a broker answers for a partition refused with this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ProduceValidationError::Corrupt(_) => ErrorCode::CorruptMessage,
            ProduceValidationError::TooLarge { .. }
            | ProduceValidationError::DecompressedTooLarge(_) => ErrorCode::MessageTooLarge,
            ProduceValidationError::InvalidRecord(_) => ErrorCode::InvalidRecord,
            ProduceValidationError::InvalidTimestamp { .. } => ErrorCode::InvalidTimestamp,
            ProduceValidationError::ZstdBeforeV7(_) => ErrorCode::UnsupportedCompressionType,
        }
    }
}

fn invalid(why: &'static str) -> ProduceValidationError {
    ProduceValidationError::InvalidRecord(DecodeError::MalformedRecords(why))
}

fn corrupt(why: &'static str) -> ProduceValidationError {
    ProduceValidationError::Corrupt(DecodeError::MalformedRecords(why))
}

/// The request-level rules for one partition's records in a Produce request of
/// `produce_version`, reading batch headers only (so it is cheap whatever the size):
/// - from v3, the records must start with a magic-2 batch (INVALID_RECORD otherwise, also when
///   there are no records at all);
/// - magic-2 data, at any version, must be exactly one batch: anything after the first batch is
///   INVALID_RECORD ("exactly one record batch per partition"); a first batch whose length
///   field is below the minimum or runs past the data is CORRUPT_MESSAGE.
///
/// Legacy data (magic 0/1, allowed before v3) passes unchecked: convert it first.
pub fn check_produce_shape(
    records: &Bytes,
    produce_version: i16,
) -> Result<(), ProduceValidationError> {
    let magic = records.get(MAGIC_OFFSET).map(|&m| m as i8);
    if produce_version >= ONE_BATCH_MIN_PRODUCE_VERSION {
        match magic {
            None => {
                return Err(invalid(
                    "Produce v3 and later must carry one record batch per partition",
                ))
            }
            Some(m) if m != MAGIC_V2 => {
                return Err(invalid(
                    "Produce v3 and later may only carry record batches of magic 2",
                ))
            }
            Some(_) => {}
        }
    }
    if magic != Some(MAGIC_V2) {
        return Ok(());
    }
    let Some(length) = records.get(8..LOG_OVERHEAD) else {
        return Err(corrupt("record batch is shorter than its length field"));
    };
    let length = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
    if length < (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) as i32 {
        return Err(corrupt(
            "record batch length is below the minimum batch size",
        ));
    }
    let size = length as usize + LOG_OVERHEAD;
    if size > records.len() {
        return Err(corrupt(
            "record batch is longer than the records it came in",
        ));
    }
    if size < records.len() {
        return Err(invalid(
            "a produce must contain exactly one record batch per partition",
        ));
    }
    Ok(())
}

/// Validates one partition's records from a Produce request of `produce_version`: the shape
/// ([`check_produce_shape`]) and then the one batch ([`validate_producer_batch`]). Returns the
/// batch and its record count (the offsets it takes). Legacy (magic 0/1) data is refused as
/// CORRUPT_MESSAGE here: convert it to a v2 batch first.
pub fn validate_produce_records(
    records: Bytes,
    produce_version: i16,
    limits: &ProduceLimits,
) -> Result<(RecordBatch, u32), ProduceValidationError> {
    check_produce_shape(&records, produce_version)?;
    match records.get(MAGIC_OFFSET).map(|&m| m as i8) {
        Some(MAGIC_V2) => {}
        Some(m) => {
            return Err(ProduceValidationError::Corrupt(
                DecodeError::UnsupportedMagic(m),
            ))
        }
        None => return Err(corrupt("records are shorter than a batch header")),
    }
    let batch = RecordBatch::new(records).map_err(ProduceValidationError::Corrupt)?;
    let count = validate_producer_batch(&batch, produce_version, limits)?;
    Ok((batch, count))
}

/// Validates one v2 batch from a producer as Kafka's broker does before appending it (see the
/// module documentation for the list and order of checks) and returns its record count.
///
/// Timestamps: for a create-time batch, `maxTimestamp` and every record's timestamp (base
/// timestamp + delta) other than -1 must be at most `limits.timestamp_after_max_ms` after
/// `limits.now_ms`; for a log-append-time batch (whose records all report `maxTimestamp`), its
/// `maxTimestamp`.
///
/// Cost: one CRC pass and one walk over the record headers; nothing is allocated for an
/// uncompressed batch. A compressed batch is decompressed once, into at most
/// `limits.max_decompressed_bytes`.
pub fn validate_producer_batch(
    batch: &RecordBatch,
    produce_version: i16,
    limits: &ProduceLimits,
) -> Result<u32, ProduceValidationError> {
    if batch.base_offset() != 0 {
        return Err(invalid(
            "the base offset of a producer's record batch must be 0",
        ));
    }
    if batch.len() > limits.max_batch_bytes {
        return Err(ProduceValidationError::TooLarge {
            size: batch.len(),
            max: limits.max_batch_bytes,
        });
    }
    if batch.magic() != MAGIC_V2 {
        return Err(ProduceValidationError::Corrupt(
            DecodeError::UnsupportedMagic(batch.magic()),
        ));
    }
    let (stored, computed) = (batch.crc(), batch.compute_crc());
    if stored != computed {
        return Err(ProduceValidationError::Corrupt(DecodeError::CrcMismatch {
            stored,
            computed,
        }));
    }
    let count = batch.record_count();
    if count <= 0 {
        return Err(invalid("a producer's record batch must hold records"));
    }
    if i64::from(batch.last_offset_delta()) + 1 != i64::from(count) {
        return Err(invalid("inner record count must match lastOffsetDelta + 1"));
    }
    if batch.is_control() {
        return Err(invalid("clients may not write control batches"));
    }
    if batch.has_producer_id() && batch.base_sequence() < 0 {
        return Err(invalid(
            "a batch with a producer id needs a base sequence >= 0",
        ));
    }
    let compression = batch
        .compression()
        .map_err(ProduceValidationError::InvalidRecord)?;
    if compression == Compression::Zstd && produce_version < ZSTD_MIN_PRODUCE_VERSION {
        return Err(ProduceValidationError::ZstdBeforeV7(produce_version));
    }
    check_timestamp(batch.max_timestamp(), limits)?;
    // Every record takes at least MIN_RECORD_SIZE bytes of the (decompressed) records section:
    // refuse a count that cannot fit before decompressing anything.
    let room = match compression {
        Compression::None => batch.len().saturating_sub(RECORD_BATCH_OVERHEAD),
        _ => limits.max_decompressed_bytes,
    };
    let count = count as u32;
    if count as usize > room / MIN_RECORD_SIZE {
        return Err(invalid(
            "record count exceeds what the records section can hold",
        ));
    }
    let records = batch
        .record_summaries(limits.max_decompressed_bytes)
        .map_err(|e| match e {
            DecodeError::DecompressedTooLarge(n) => ProduceValidationError::DecompressedTooLarge(n),
            e => ProduceValidationError::InvalidRecord(e),
        })?;
    let create_time = batch.timestamp_type() == TimestampType::CreateTime;
    let base_timestamp = batch.base_timestamp();
    let mut expected_delta: i64 = 0;
    for record in records {
        let record = record.map_err(ProduceValidationError::InvalidRecord)?;
        if i64::from(record.offset_delta) != expected_delta {
            return Err(invalid(
                "record offset deltas must be 0, 1, ... in order (inner offsets)",
            ));
        }
        expected_delta += 1;
        if create_time {
            check_timestamp(base_timestamp.wrapping_add(record.timestamp_delta), limits)?;
        }
    }
    // The iterator ends with an error unless it yielded exactly `count` records and no bytes
    // were left; this is belt and braces.
    if expected_delta != i64::from(count) {
        return Err(invalid("record count does not match the records"));
    }
    Ok(count)
}

/// A timestamp other than -1 more than `timestamp_after_max_ms` ahead of the clock is refused.
fn check_timestamp(timestamp: i64, limits: &ProduceLimits) -> Result<(), ProduceValidationError> {
    if timestamp == NO_TIMESTAMP {
        return Ok(());
    }
    let ahead = i128::from(timestamp) - i128::from(limits.now_ms);
    if ahead > i128::from(limits.timestamp_after_max_ms) {
        return Err(ProduceValidationError::InvalidTimestamp {
            timestamp,
            now_ms: limits.now_ms,
            after_max_ms: limits.timestamp_after_max_ms,
        });
    }
    Ok(())
}
