//! Kafka record data: v2 record batches, their records, compression, and legacy message sets.
//!
//! Everything here decodes defensively: lengths and counts are checked against the bytes that
//! remain before anything is sized by them, decompression is bounded by a caller-given limit,
//! and nothing panics on any input. Record data is not copied on the server's paths: batches,
//! keys, values and header values are zero-copy [`bytes::Bytes`] slices of the input (of the
//! decompressed buffer for compressed batches).
//!
//! - [`batch`]: [`RecordBatch`], a view of one v2 batch; [`split_batches`] /
//!   [`split_batches_lenient`]; [`set_base_offset`] and [`set_partition_leader_epoch`].
//! - [`record`]: [`Record`], [`Header`] and [`RecordIter`].
//! - [`builder`]: [`RecordBatchBuilder`] and [`NewRecord`].
//! - [`compact`]: log compaction at the batch level: [`visit_records`] (each record's offset,
//!   key, tombstone flag, timestamp) and [`retain_records`] (a batch rewritten with a subset of
//!   its records, as Kafka's cleaner writes it).
//! - [`compression`]: [`Compression`], [`compress`] and [`decompress`].
//! - [`legacy`]: magic 0 and 1 message sets and conversion to and from v2 batches.
//! - [`validate`]: what a broker checks of a producer's records before storing them
//!   ([`validate_produce_records`], [`ProduceValidationError`]).

pub mod batch;
pub mod builder;
pub mod compact;
pub mod compression;
pub mod legacy;
pub mod record;
pub mod validate;

pub use batch::{
    set_base_offset, set_partition_leader_epoch, split_batches, split_batches_lenient,
    BatchAttributes, BatchSplitter, RecordBatch, TimestampType, TrailingPartial, NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD,
};
pub use builder::{build_batch, NewRecord, RecordBatchBuilder};
pub use compact::{
    retain_records, set_control_delete_horizon, visit_records, RecordKeyView, RetainError,
    RetainOptions, Retained,
};
pub use compression::{compress, decompress, Compression};
pub use legacy::{
    batches_to_message_set, convert_message_set, decode_message_set, encode_message_set,
    message_set_to_batch, ConvertError, LegacyDecodeOptions, LegacyMessage, LegacyRecord,
    MessageSetIter,
};
pub use record::{Header, Record, RecordIter, RecordSummary, RecordSummaryIter};
pub use validate::{
    check_produce_shape, validate_produce_records, validate_producer_batch, ProduceLimits,
    ProduceValidationError,
};

/// One step of an iterator over fallible items that stops for good after the end or the first
/// error: `Ok(None)` and `Err` both set `done`.
pub(crate) fn fused_step<T>(
    done: &mut bool,
    step: impl FnOnce() -> Result<Option<T>, crate::DecodeError>,
) -> Option<Result<T, crate::DecodeError>> {
    if *done {
        return None;
    }
    let out = step().transpose();
    if !matches!(out, Some(Ok(_))) {
        *done = true;
    }
    out
}
