//! Record-batch helpers for log compaction (`cleanup.policy=compact`): reading each record's
//! key, and rewriting a batch that keeps only some of its records, as Apache Kafka 3.9's log
//! cleaner does (`MemoryRecords.filterTo`, and KIP-534's delete horizon). Codec only, no I/O.
//!
//! - [`visit_records`]: each record's offset, key, tombstone flag and timestamp (building the
//!   cleaner's key map).
//! - [`retain_records`]: the batch with only the records a predicate keeps ([`Retained`]).
//!
//! Both check the whole batch before calling the caller's closure: magic 2 and the CRC-32C
//! ([`RecordBatch::validate`]), every record's framing as [`RecordBatch::records`] checks it,
//! and offset deltas that increase strictly within `0..=lastOffsetDelta`. A batch that fails
//! is reported as an error and the closure is not called at all, so a corrupt batch never
//! half-feeds a key map and a rewrite never puts a fresh CRC over damaged records.

use bytes::Bytes;
use thiserror::Error;

use super::batch::{BatchAttributes, RecordBatch, TimestampType, NO_TIMESTAMP};
use super::builder::{encode_batch, BatchHeader};
use super::compression::{compress, Compression};
use super::record::{
    next_record_len, nullable_len, put_varint, put_varlong, varint_len, varlong_len,
};
use crate::error::{DecodeError, EncodeError};
use crate::primitives::Decoder;

/// What log compaction needs to know of one record. Handed to the closures of
/// [`visit_records`] and [`retain_records`], in the batch's record order; the key borrows the
/// batch's (decompressed) records and lives for the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordKeyView<'a> {
    /// Absolute offset: the batch's base offset + the record's offset delta (wrapping).
    pub offset: i64,
    /// The offset delta as stored in the record.
    pub offset_delta: i32,
    /// The key; `None` for a null key.
    pub key: Option<&'a [u8]>,
    /// Length of the value; `None` for a null value (a tombstone).
    pub value_len: Option<usize>,
    /// The timestamp as Kafka reports it: the base timestamp field + the record's delta for a
    /// create-time batch (with the delete-horizon attribute set the field holds the horizon and
    /// the deltas are relative to it, so this is still the record's own timestamp); the batch's
    /// max timestamp for a log-append-time batch.
    pub timestamp: i64,
    /// True for the records of a control batch (transaction markers), which compaction keeps
    /// whole: [`retain_records`] refuses them.
    pub is_control: bool,
}

impl RecordKeyView<'_> {
    /// True when the value is null: the record deletes its key.
    pub fn is_tombstone(&self) -> bool {
        self.value_len.is_none()
    }
}

/// How [`retain_records`] writes a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetainOptions {
    /// When no record is kept, return an empty batch ([`Retained::Rewritten`] with zero
    /// records) instead of [`Retained::Empty`]. Kafka's cleaner keeps such a batch for the last
    /// batch of a producer id, so the producer's sequence state survives; it is written as Kafka
    /// writes it (`DefaultRecordBatch.writeEmptyHeader`): base offset, lastOffsetDelta, partition
    /// leader epoch, producer id, epoch, base sequence, timestamp type, transactional flag and
    /// max timestamp of the original; no compression, base timestamp -1, no delete horizon.
    pub keep_empty: bool,
    /// The delete horizon to set (KIP-534), in ms: the cleaner's time + `delete.retention.ms`.
    /// Applied, as in Kafka, only when a kept record is a tombstone and the batch has no
    /// horizon yet; a batch that has one keeps it. Setting it rewrites the batch even when
    /// every record is kept. Replicas that must produce identical bytes must pass the same
    /// value.
    pub delete_horizon_ms: Option<i64>,
}

/// The outcome of [`retain_records`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retained {
    /// The original batch stays as it is: every record was kept and no horizon needed setting
    /// (or, for a batch of zero records with `keep_empty`, the empty batch would be
    /// byte-identical). No copy was made.
    Unchanged,
    /// The new batch to store in place of the original; see [`retain_records`].
    Rewritten(RecordBatch),
    /// No record was kept and `keep_empty` was false: drop the batch.
    Empty,
}

/// Why [`retain_records`] could not filter a batch.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RetainError {
    /// The batch is not a valid v2 batch (magic, CRC, record framing, offset deltas, codec,
    /// or its records decompress to more than the limit).
    #[error("cannot read the batch to compact: {0}")]
    Decode(#[from] DecodeError),
    /// The rewritten batch could not be written (compression failed, or a record or the batch
    /// grew past i32::MAX bytes).
    #[error("cannot write the compacted batch: {0}")]
    Encode(#[from] EncodeError),
    /// The batch is a control batch (transaction markers); compaction keeps those whole and
    /// this function never rewrites them.
    #[error("control batches are kept whole, never rewritten")]
    ControlBatch,
    /// [`set_control_delete_horizon`] was given a data batch.
    #[error("only a control batch gets a marker's delete horizon")]
    DataBatch,
}

/// Calls `f` with a [`RecordKeyView`] of each record of the v2 `batch` (any compression), in
/// order. A compressed batch is decompressed into at most `max_decompressed` bytes
/// ([`DecodeError::DecompressedTooLarge`] beyond). The batch is checked whole first (see the
/// module docs); on any error `f` has not been called.
pub fn visit_records(
    batch: &RecordBatch,
    max_decompressed: usize,
    mut f: impl FnMut(RecordKeyView<'_>),
) -> Result<(), DecodeError> {
    let checked = CheckedRecords::of(batch, max_decompressed)?;
    let ctx = ViewContext::of(batch);
    checked.for_each(|r| {
        f(ctx.view(r));
        Ok::<(), DecodeError>(())
    })
}

/// Filters the v2 `batch` to the records `keep` returns true for (called once per record, in
/// order, after the whole batch was checked; see the module docs), as Kafka's log cleaner
/// rewrites a batch.
///
/// - Every record kept and no delete horizon to set: [`Retained::Unchanged`], no copy.
/// - No record kept: [`Retained::Empty`], or with [`RetainOptions::keep_empty`] an empty batch
///   as described there.
/// - Otherwise [`Retained::Rewritten`]: the same base offset, partition leader epoch, producer
///   id, epoch and base sequence, lastOffsetDelta of the original (so the offsets the batch
///   spans and the producer's last sequence stay), the same attributes (codec, timestamp type,
///   transactional), the records recompressed with the same codec. Kept records keep their
///   offset deltas, attributes, keys, values and headers byte for byte, and their absolute
///   timestamps exactly: the base timestamp is the delete horizon when the batch has one
///   (set now or before, see [`RetainOptions::delete_horizon_ms`]), else the first kept
///   record's timestamp, and each delta is re-based on it. maxTimestamp is, as Kafka sets it,
///   the largest kept timestamp (-1 if all are below) for create time, the original's for
///   log-append time. recordCount, batchLength and the CRC-32C are recomputed.
///
/// Kafka's cleaner rewrites a log-append-time batch's record timestamps to the append time;
/// here the stored create timestamps are kept (what consumers see is the same: the append
/// time). Control batches are refused with [`RetainError::ControlBatch`] (after the checks).
///
/// Memory: the decompressed records, one byte per record for the choices, and the new batch
/// (uncompressed records section, then compressed); records are not collected.
pub fn retain_records(
    batch: &RecordBatch,
    max_decompressed: usize,
    mut keep: impl FnMut(&RecordKeyView<'_>) -> bool,
    options: RetainOptions,
) -> Result<Retained, RetainError> {
    let checked = CheckedRecords::of(batch, max_decompressed)?;
    if batch.is_control() {
        return Err(RetainError::ControlBatch);
    }
    let ctx = ViewContext::of(batch);
    let mut choices = Vec::with_capacity(checked.count as usize);
    let mut kept = Kept::default();
    checked.for_each(|r| {
        let view = ctx.view(r);
        let chosen = keep(&view);
        if chosen {
            kept.add(view.is_tombstone(), ctx.absolute_timestamp(r));
        }
        choices.push(chosen);
        Ok::<(), DecodeError>(())
    })?;
    if kept.count == 0 {
        if !options.keep_empty {
            return Ok(Retained::Empty);
        }
        let empty = empty_batch(batch)?;
        if empty.as_bytes() == batch.as_bytes() {
            return Ok(Retained::Unchanged);
        }
        return Ok(Retained::Rewritten(empty));
    }
    let new_horizon = options
        .delete_horizon_ms
        .filter(|_| kept.tombstone && !batch.has_delete_horizon());
    if kept.count == choices.len() && new_horizon.is_none() {
        return Ok(Retained::Unchanged);
    }
    let horizon = new_horizon.or(batch.delete_horizon_ms());
    Ok(Retained::Rewritten(rewrite(
        batch, &checked, &choices, &kept, horizon,
    )?))
}

/// The control batch `batch` (a transaction marker) with its delete horizon set to
/// `horizon_ms` (KIP-534): Kafka's cleaner sets it on a marker whose transaction has no data
/// left, and removes the marker in a later pass once its clock has reached it. Checked whole
/// first (as [`retain_records`]); every record is kept byte for byte with its absolute
/// timestamp, the offsets, producer fields, codec and other attributes stay;
/// [`Retained::Unchanged`] when it has a horizon already. A data batch is refused
/// ([`RetainError::DataBatch`]): its horizon is set by [`retain_records`], for its tombstones.
pub fn set_control_delete_horizon(
    batch: &RecordBatch,
    max_decompressed: usize,
    horizon_ms: i64,
) -> Result<Retained, RetainError> {
    let checked = CheckedRecords::of(batch, max_decompressed)?;
    if !batch.is_control() {
        return Err(RetainError::DataBatch);
    }
    if batch.has_delete_horizon() || checked.count == 0 {
        return Ok(Retained::Unchanged);
    }
    let ctx = ViewContext::of(batch);
    let mut kept = Kept::default();
    checked.for_each(|r| {
        kept.add(false, ctx.absolute_timestamp(r));
        Ok::<(), DecodeError>(())
    })?;
    let choices = vec![true; kept.count];
    Ok(Retained::Rewritten(rewrite(
        batch,
        &checked,
        &choices,
        &kept,
        Some(horizon_ms),
    )?))
}

/// What [`retain_records`] learns of the kept records while asking about them.
#[derive(Debug, Default)]
struct Kept {
    count: usize,
    tombstone: bool,
    /// The first kept record's absolute (stored) timestamp.
    first_timestamp: Option<i64>,
    /// The largest kept absolute timestamp, starting from -1 as Kafka's builder does.
    max_timestamp: Option<i64>,
}

impl Kept {
    fn add(&mut self, tombstone: bool, timestamp: i64) {
        self.count += 1;
        self.tombstone |= tombstone;
        self.first_timestamp.get_or_insert(timestamp);
        self.max_timestamp = Some(self.max_timestamp.unwrap_or(NO_TIMESTAMP).max(timestamp));
    }
}

/// One record as stored, sliced (not copied) out of the decompressed records section.
struct StoredRecord {
    attributes: i8,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<Bytes>,
    value_len: Option<usize>,
    /// Everything after the offset delta (key, value, headers), as stored.
    tail: Bytes,
}

/// The batch-wide facts a [`RecordKeyView`] is computed from.
struct ViewContext {
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
    is_control: bool,
}

impl ViewContext {
    fn of(batch: &RecordBatch) -> ViewContext {
        ViewContext {
            base_offset: batch.base_offset(),
            base_timestamp: batch.base_timestamp(),
            log_append_time: (batch.timestamp_type() == TimestampType::LogAppendTime)
                .then(|| batch.max_timestamp()),
            is_control: batch.is_control(),
        }
    }

    /// The record's timestamp as stored: base timestamp field + delta (wrapping).
    fn absolute_timestamp(&self, r: &StoredRecord) -> i64 {
        self.base_timestamp.wrapping_add(r.timestamp_delta)
    }

    fn view<'a>(&self, r: &'a StoredRecord) -> RecordKeyView<'a> {
        RecordKeyView {
            offset: self.base_offset.wrapping_add(i64::from(r.offset_delta)),
            offset_delta: r.offset_delta,
            key: r.key.as_deref(),
            value_len: r.value_len,
            timestamp: self
                .log_append_time
                .unwrap_or(self.base_timestamp.wrapping_add(r.timestamp_delta)),
            is_control: self.is_control,
        }
    }
}

/// A batch's records section (decompressed), checked whole: magic, CRC, codec, count, every
/// record's framing, and offset deltas that increase strictly within `0..=lastOffsetDelta`.
struct CheckedRecords {
    data: Bytes,
    count: u32,
    last_delta: i32,
}

impl CheckedRecords {
    fn of(batch: &RecordBatch, max_decompressed: usize) -> Result<CheckedRecords, DecodeError> {
        batch.validate()?;
        let count = u32::try_from(batch.record_count())
            .map_err(|_| DecodeError::MalformedRecords("negative record count"))?;
        let last_delta = batch.last_offset_delta();
        if count > 0 && i64::from(count) > i64::from(last_delta) + 1 {
            return Err(DecodeError::MalformedRecords(
                "record count exceeds the offsets the batch spans",
            ));
        }
        let checked = CheckedRecords {
            data: batch.decompressed_records_data(max_decompressed)?,
            count,
            last_delta,
        };
        checked.for_each(|_| Ok::<(), DecodeError>(()))?;
        Ok(checked)
    }

    /// Decodes the records in order, calling `f` with each; stops at the first error.
    fn for_each<E: From<DecodeError>>(
        &self,
        mut f: impl FnMut(&StoredRecord) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut dec = Decoder::new(self.data.clone());
        let mut remaining = self.count;
        let mut previous: Option<i32> = None;
        while let Some(len) = next_record_len(&mut dec, &mut remaining)? {
            let record = decode_stored_record(dec.take(len)?)?;
            let delta = record.offset_delta;
            if delta < 0 || delta > self.last_delta || previous.is_some_and(|p| delta <= p) {
                return Err(DecodeError::MalformedRecords(
                    "record offset deltas do not increase within the batch's lastOffsetDelta",
                )
                .into());
            }
            previous = Some(delta);
            f(&record)?;
        }
        Ok(())
    }
}

/// Decodes one record's body (after its length varint) with the checks of
/// [`RecordBatch::records`]: every field in bounds, no null header key, consumed exactly.
fn decode_stored_record(body: Bytes) -> Result<StoredRecord, DecodeError> {
    let mut dec = Decoder::new(body);
    let attributes = dec.i8()?;
    let timestamp_delta = dec.varlong()?;
    let offset_delta = dec.varint()?;
    let tail = dec.peek_rest().clone();
    let key = match nullable_len(&mut dec, "negative key length other than -1")? {
        Some(n) => Some(dec.take(n)?),
        None => None,
    };
    let value_len = nullable_len(&mut dec, "negative value length other than -1")?;
    if let Some(n) = value_len {
        dec.skip(n)?;
    }
    let headers = usize::try_from(dec.varint()?)
        .map_err(|_| DecodeError::MalformedRecords("negative header count"))?;
    // Each header takes at least two bytes (key length and value length).
    if headers > dec.remaining() / 2 {
        return Err(DecodeError::MalformedRecords(
            "header count exceeds the bytes left in the record",
        ));
    }
    for _ in 0..headers {
        match nullable_len(&mut dec, "negative header key length")? {
            Some(n) => dec.skip(n)?,
            None => return Err(DecodeError::MalformedRecords("null header key")),
        }
        if let Some(n) = nullable_len(&mut dec, "negative header value length other than -1")? {
            dec.skip(n)?;
        }
    }
    if dec.remaining() != 0 {
        return Err(DecodeError::MalformedRecords(
            "record length does not match its fields",
        ));
    }
    Ok(StoredRecord {
        attributes,
        timestamp_delta,
        offset_delta,
        key,
        value_len,
        tail,
    })
}

/// Writes the batch holding the records of `checked` whose entry in `choices` is true (at
/// least one), with the delete-horizon attribute and base timestamp set to `horizon` when given.
fn rewrite(
    batch: &RecordBatch,
    checked: &CheckedRecords,
    choices: &[bool],
    kept: &Kept,
    horizon: Option<i64>,
) -> Result<RecordBatch, RetainError> {
    let attributes = batch.batch_attributes()?;
    let old_base = batch.base_timestamp();
    let new_base = horizon.or(kept.first_timestamp).unwrap_or(NO_TIMESTAMP);
    let max_timestamp = match attributes.timestamp_type {
        TimestampType::LogAppendTime => batch.max_timestamp(),
        TimestampType::CreateTime => kept.max_timestamp.unwrap_or(NO_TIMESTAMP),
    };
    let mut section = Vec::with_capacity(checked.data.len());
    let mut index = 0;
    checked.for_each(|r| {
        if choices.get(index).copied().unwrap_or(false) {
            let absolute = old_base.wrapping_add(r.timestamp_delta);
            encode_stored(&mut section, r, absolute.wrapping_sub(new_base))?;
        }
        index += 1;
        Ok::<(), RetainError>(())
    })?;
    let records = match attributes.compression {
        Compression::None => section,
        codec => compress(codec, &section)?,
    };
    let record_count = i32::try_from(kept.count).map_err(|_| EncodeError::TooLong {
        what: "record batch",
        len: kept.count,
    })?;
    let header = BatchHeader {
        base_offset: batch.base_offset(),
        partition_leader_epoch: batch.partition_leader_epoch(),
        attributes: BatchAttributes {
            has_delete_horizon: horizon.is_some(),
            ..attributes
        }
        .to_i16(),
        last_offset_delta: batch.last_offset_delta(),
        base_timestamp: new_base,
        max_timestamp,
        producer_id: batch.producer_id(),
        producer_epoch: batch.producer_epoch(),
        base_sequence: batch.base_sequence(),
        record_count,
    };
    Ok(RecordBatch::new(encode_batch(&header, &records)?)?)
}

/// Appends `r` with a new timestamp delta; everything else as stored.
fn encode_stored(
    out: &mut Vec<u8>,
    r: &StoredRecord,
    timestamp_delta: i64,
) -> Result<(), EncodeError> {
    let body = 1 + varlong_len(timestamp_delta) + varint_len(r.offset_delta) + r.tail.len();
    let body_len = i32::try_from(body).map_err(|_| EncodeError::TooLong {
        what: "record",
        len: body,
    })?;
    put_varint(out, body_len);
    out.push(r.attributes as u8);
    put_varlong(out, timestamp_delta);
    put_varint(out, r.offset_delta);
    out.extend_from_slice(&r.tail);
    Ok(())
}

/// The zero-record batch Kafka's cleaner writes in place of `batch` (see
/// [`RetainOptions::keep_empty`]).
fn empty_batch(batch: &RecordBatch) -> Result<RecordBatch, RetainError> {
    let attributes = batch.batch_attributes()?;
    let header = BatchHeader {
        base_offset: batch.base_offset(),
        partition_leader_epoch: batch.partition_leader_epoch(),
        attributes: BatchAttributes {
            compression: Compression::None,
            has_delete_horizon: false,
            ..attributes
        }
        .to_i16(),
        last_offset_delta: batch.last_offset_delta(),
        base_timestamp: NO_TIMESTAMP,
        max_timestamp: batch.max_timestamp(),
        producer_id: batch.producer_id(),
        producer_epoch: batch.producer_epoch(),
        base_sequence: batch.base_sequence(),
        record_count: 0,
    };
    Ok(RecordBatch::new(encode_batch(&header, &[])?)?)
}
