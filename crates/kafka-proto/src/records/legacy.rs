//! Legacy message sets (magic 0 and 1), used by Produce v0-2 and Fetch v0-3.
//!
//! An entry is: offset i64, messageSize i32, then the message: crc u32 (CRC-32 IEEE of the
//! rest of the message), magic i8, attributes i8 (bits 0-2 compression; magic 1: bit 3
//! timestamp type), timestamp i64 (magic 1 only), key (i32 length, -1 = null), value (same).
//!
//! A compressed message is a wrapper whose value is a compressed message set of inner messages.
//! Following Kafka (`AbstractLegacyRecordBatch`): inner messages must have the wrapper's magic
//! and must not be compressed themselves; there must be at least one; zstd is not allowed. For
//! magic 1 the inner offsets are relative: the absolute offset is
//! `wrapperOffset - lastInnerOffset + innerOffset`, except that a wrapper offset of 0 (some
//! librdkafka versions) means a base of 0. For magic 0 the inner offsets are absolute. A magic-1
//! wrapper with log-append time gives its timestamp to every inner message.

use bytes::Bytes;
use thiserror::Error;

use super::batch::{split_batches, TimestampType, TrailingPartial, LOG_OVERHEAD, NO_TIMESTAMP};
use super::builder::RecordBatchBuilder;
use super::compression::{compress_for_magic, decompress_for_magic, Compression};
use crate::error::{DecodeError, EncodeError};
use crate::primitives::Decoder;

/// Message format magic 0 (Kafka before 0.10).
pub const MAGIC_V0: i8 = 0;
/// Message format magic 1 (Kafka 0.10, with timestamps).
pub const MAGIC_V1: i8 = 1;
/// Size of a magic-0 message without key and value bytes (crc, magic, attributes, two lengths).
pub const MESSAGE_OVERHEAD_V0: usize = 14;
/// Size of a magic-1 message without key and value bytes (magic 0's plus the timestamp).
pub const MESSAGE_OVERHEAD_V1: usize = 22;

const TIMESTAMP_TYPE_BIT: i8 = 0x08;

/// One message as it appears in a message set (for a compressed message: the wrapper).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyMessage {
    /// The entry's offset.
    pub offset: i64,
    /// 0 or 1.
    pub magic: i8,
    /// The attributes byte.
    pub attributes: i8,
    /// The timestamp (magic 1); [`NO_TIMESTAMP`] for magic 0.
    pub timestamp: i64,
    /// The key; `None` for null.
    pub key: Option<Bytes>,
    /// The value; `None` for null. For a compressed message, the compressed inner message set.
    pub value: Option<Bytes>,
}

impl LegacyMessage {
    /// The codec in attribute bits 0-2; fails on an unknown id.
    pub fn compression(&self) -> Result<Compression, DecodeError> {
        Compression::from_id((self.attributes & 0x07) as u8)
    }

    /// The timestamp type (attribute bit 3; always create time for magic 0).
    pub fn timestamp_type(&self) -> TimestampType {
        if self.magic >= MAGIC_V1 && self.attributes & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
}

/// A record from a message set after decompression: what a consumer sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyRecord {
    /// The absolute offset.
    pub offset: i64,
    /// The effective timestamp ([`NO_TIMESTAMP`] for magic 0).
    pub timestamp: i64,
    /// The timestamp type (for an inner message: its wrapper's).
    pub timestamp_type: TimestampType,
    /// The message's magic.
    pub magic: i8,
    /// The codec of the message that carried it (the wrapper's, or none).
    pub compression: Compression,
    /// The key; `None` for null.
    pub key: Option<Bytes>,
    /// The value; `None` for null.
    pub value: Option<Bytes>,
}

impl LegacyRecord {
    /// An uncompressed create-time record for encoding: offset, timestamp, key, value.
    pub fn new(offset: i64, timestamp: i64, key: Option<Bytes>, value: Option<Bytes>) -> Self {
        LegacyRecord {
            offset,
            timestamp,
            timestamp_type: TimestampType::CreateTime,
            magic: MAGIC_V1,
            compression: Compression::None,
            key,
            value,
        }
    }
}

/// Decodes one message (the bytes after the offset and size fields), checking the magic, the
/// CRC-32, the minimum size and that the key and value fill the message exactly.
pub fn decode_message(offset: i64, message: Bytes) -> Result<LegacyMessage, DecodeError> {
    let magic = match message.get(4) {
        Some(&m) => m as i8,
        None => {
            return Err(DecodeError::MalformedRecords(
                "message is smaller than the minimum message size",
            ))
        }
    };
    let overhead = match magic {
        MAGIC_V0 => MESSAGE_OVERHEAD_V0,
        MAGIC_V1 => MESSAGE_OVERHEAD_V1,
        m => return Err(DecodeError::UnsupportedMagic(m)),
    };
    if message.len() < overhead {
        return Err(DecodeError::MalformedRecords(
            "message is smaller than the minimum message size",
        ));
    }
    let mut dec = Decoder::new(message);
    let stored = dec.u32()?;
    let computed = crc32fast::hash(dec.peek_rest());
    if stored != computed {
        return Err(DecodeError::CrcMismatch { stored, computed });
    }
    let _magic = dec.i8()?;
    let attributes = dec.i8()?;
    let timestamp = if magic == MAGIC_V1 {
        dec.i64()?
    } else {
        NO_TIMESTAMP
    };
    let key = dec.nullable_bytes(false)?;
    let value = dec.nullable_bytes(false)?;
    if dec.remaining() != 0 {
        return Err(DecodeError::MalformedRecords(
            "message size does not match its key and value",
        ));
    }
    Ok(LegacyMessage {
        offset,
        magic,
        attributes,
        timestamp,
        key,
        value,
    })
}

/// Iterates over the messages of a message set without decompressing (wrappers are returned as
/// they are). Each message is CRC-checked. After the first error it yields nothing more.
#[derive(Debug, Clone)]
pub struct MessageSetIter {
    rest: Bytes,
    trailing: TrailingPartial,
    done: bool,
}

impl MessageSetIter {
    /// Iterates over `buf`, treating a partial trailing message as `trailing` says.
    pub fn new(buf: Bytes, trailing: TrailingPartial) -> MessageSetIter {
        MessageSetIter {
            rest: buf,
            trailing,
            done: false,
        }
    }

    fn next_message(&mut self) -> Result<Option<LegacyMessage>, DecodeError> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let partial = |this: &Self| match this.trailing {
            TrailingPartial::Ignore => Ok(None),
            TrailingPartial::Reject => Err(DecodeError::MalformedRecords(
                "partial message at the end of the message set",
            )),
        };
        if self.rest.len() < LOG_OVERHEAD {
            return partial(self);
        }
        let mut head = Decoder::new(self.rest.slice(..LOG_OVERHEAD));
        let offset = head.i64()?;
        let size = head.i32()?;
        let size = usize::try_from(size)
            .map_err(|_| DecodeError::MalformedRecords("negative message size"))?;
        if size < MESSAGE_OVERHEAD_V0 {
            return Err(DecodeError::MalformedRecords(
                "message is smaller than the minimum message size",
            ));
        }
        if let Some(&m) = self.rest.get(LOG_OVERHEAD + 4) {
            let m = m as i8;
            if m != MAGIC_V0 && m != MAGIC_V1 {
                return Err(DecodeError::UnsupportedMagic(m));
            }
        }
        if size > self.rest.len() - LOG_OVERHEAD {
            return partial(self);
        }
        let mut entry = self.rest.split_to(LOG_OVERHEAD + size);
        let message = entry.split_off(LOG_OVERHEAD);
        decode_message(offset, message).map(Some)
    }
}

impl Iterator for MessageSetIter {
    type Item = Result<LegacyMessage, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut done = self.done;
        let out = super::fused_step(&mut done, || self.next_message());
        self.done = done;
        out
    }
}

/// How to read a message set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyDecodeOptions {
    /// The most bytes all compressed wrappers of the set may decompress to, together.
    pub max_decompressed: usize,
    /// What to do with a partial message at the end of the (outer) set.
    pub trailing: TrailingPartial,
}

/// Decodes a message set into its records, decompressing wrappers (see the module docs for
/// Kafka's rules, all enforced). Keys and values of uncompressed messages are zero-copy slices of
/// `buf`.
pub fn decode_message_set(
    buf: Bytes,
    options: LegacyDecodeOptions,
) -> Result<Vec<LegacyRecord>, DecodeError> {
    let mut out = Vec::new();
    let mut budget = options.max_decompressed;
    for msg in MessageSetIter::new(buf, options.trailing) {
        let msg = msg?;
        let codec = msg.compression()?;
        if codec == Compression::None {
            out.push(LegacyRecord {
                offset: msg.offset,
                timestamp: msg.timestamp,
                timestamp_type: msg.timestamp_type(),
                magic: msg.magic,
                compression: Compression::None,
                key: msg.key,
                value: msg.value,
            });
            continue;
        }
        if codec == Compression::Zstd {
            return Err(DecodeError::MalformedRecords(
                "zstd compression requires record batch magic 2",
            ));
        }
        let value = msg.value.as_ref().ok_or(DecodeError::MalformedRecords(
            "compressed message has a null value",
        ))?;
        let inner = decompress_for_magic(codec, msg.magic, value, budget)?;
        budget -= inner.len().min(budget);
        let start = out.len();
        for inner_msg in MessageSetIter::new(Bytes::from(inner), TrailingPartial::Reject) {
            let inner_msg = inner_msg?;
            if inner_msg.magic != msg.magic {
                return Err(DecodeError::MalformedRecords(
                    "inner message magic does not match the wrapper's",
                ));
            }
            if inner_msg.compression()? != Compression::None {
                return Err(DecodeError::MalformedRecords(
                    "inner messages must not be compressed",
                ));
            }
            let (timestamp, timestamp_type) = match msg.timestamp_type() {
                TimestampType::LogAppendTime => (msg.timestamp, TimestampType::LogAppendTime),
                TimestampType::CreateTime => (inner_msg.timestamp, TimestampType::CreateTime),
            };
            out.push(LegacyRecord {
                offset: inner_msg.offset,
                timestamp,
                timestamp_type,
                magic: inner_msg.magic,
                compression: codec,
                key: inner_msg.key,
                value: inner_msg.value,
            });
        }
        let inner = out.get_mut(start..).unwrap_or_default();
        let Some(last_inner) = inner.last().map(|r| r.offset) else {
            return Err(DecodeError::MalformedRecords(
                "compressed message has no inner messages",
            ));
        };
        if msg.magic == MAGIC_V1 {
            let base = if msg.offset == 0 {
                0
            } else if msg.offset < last_inner {
                return Err(DecodeError::MalformedRecords(
                    "wrapper offset is below the last inner offset",
                ));
            } else {
                msg.offset.wrapping_sub(last_inner)
            };
            for r in inner {
                r.offset = base.wrapping_add(r.offset);
            }
        }
    }
    Ok(out)
}

/// Appends one message entry (offset, size, message) to `out`.
fn put_message(
    out: &mut Vec<u8>,
    offset: i64,
    magic: i8,
    attributes: i8,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<(), EncodeError> {
    let overhead = if magic == MAGIC_V0 {
        MESSAGE_OVERHEAD_V0
    } else {
        MESSAGE_OVERHEAD_V1
    };
    let size = overhead + key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
    let size32 = i32::try_from(size).map_err(|_| EncodeError::TooLong {
        what: "message",
        len: size,
    })?;
    out.reserve(LOG_OVERHEAD + size);
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&size32.to_be_bytes());
    let crc_at = out.len();
    out.extend_from_slice(&[0; 4]);
    out.push(magic as u8);
    out.push(attributes as u8);
    if magic != MAGIC_V0 {
        out.extend_from_slice(&timestamp.to_be_bytes());
    }
    for field in [key, value] {
        match field {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(b) => {
                // Fits: the whole message's size fits an i32.
                out.extend_from_slice(&(b.len() as i32).to_be_bytes());
                out.extend_from_slice(b);
            }
        }
    }
    let crc = crc32fast::hash(out.get(crc_at + 4..).unwrap_or_default());
    if let Some(dst) = out.get_mut(crc_at..crc_at + 4) {
        dst.copy_from_slice(&crc.to_be_bytes());
    }
    Ok(())
}

/// Encodes records as a message set of `magic` (0 or 1) with `compression` (not zstd); only
/// each record's offset, timestamp, key and value are used.
///
/// Uncompressed: one message per record at its offset. Compressed: one wrapper holding all
/// records, as Kafka writes it: for magic 1, inner offsets relative to the first record's
/// offset; for magic 0, absolute inner offsets; either way the wrapper sits at the last record's
/// offset and (magic 1) carries the largest record timestamp. For magic 1 with
/// [`TimestampType::LogAppendTime`] every message gets the timestamp-type bit. Timestamps are
/// not written for magic 0. An empty slice gives an empty set.
pub fn encode_message_set(
    magic: i8,
    compression: Compression,
    timestamp_type: TimestampType,
    records: &[LegacyRecord],
) -> Result<Bytes, EncodeError> {
    if magic != MAGIC_V0 && magic != MAGIC_V1 {
        return Err(EncodeError::Compression(format!(
            "message sets have magic 0 or 1, not {magic}"
        )));
    }
    if compression == Compression::Zstd {
        return Err(EncodeError::Compression(
            "zstd compression requires record batch magic 2".into(),
        ));
    }
    let ts_bit = if magic == MAGIC_V1 && timestamp_type == TimestampType::LogAppendTime {
        TIMESTAMP_TYPE_BIT
    } else {
        0
    };
    let ts = |t: i64| if magic == MAGIC_V0 { NO_TIMESTAMP } else { t };
    let mut inner = Vec::new();
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return Ok(Bytes::new());
    };
    for r in records {
        let offset = match (compression, magic) {
            (Compression::None, _) | (_, MAGIC_V0) => r.offset,
            _ => r.offset.wrapping_sub(first.offset),
        };
        put_message(
            &mut inner,
            offset,
            magic,
            ts_bit,
            ts(r.timestamp),
            r.key.as_deref(),
            r.value.as_deref(),
        )?;
    }
    if compression == Compression::None {
        return Ok(Bytes::from(inner));
    }
    let compressed = compress_for_magic(compression, magic, &inner)?;
    let max_ts = records
        .iter()
        .map(|r| r.timestamp)
        .max()
        .unwrap_or(NO_TIMESTAMP);
    let mut out = Vec::with_capacity(compressed.len() + LOG_OVERHEAD + MESSAGE_OVERHEAD_V1);
    put_message(
        &mut out,
        last.offset,
        magic,
        compression.id() as i8 | ts_bit,
        ts(max_ts),
        None,
        Some(&compressed),
    )?;
    Ok(Bytes::from(out))
}

/// A conversion between message sets and record batches failed on input or on output.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConvertError {
    /// The input could not be decoded.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The output could not be encoded (e.g. zstd data asked for in magic 0 or 1: Kafka answers
    /// such a Fetch with UNSUPPORTED_COMPRESSION_TYPE).
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// Builds one v2 record batch from decoded legacy records, so the server can store them.
///
/// Base offset is the first record's offset; offsets are kept when they strictly increase (and
/// stay within i32 of the first), otherwise records get consecutive offsets (the broker assigns
/// offsets anyway). Each record keeps its effective timestamp (-1 for magic 0) and the batch is
/// create-time, so log-append times survive as record timestamps. No producer id, not
/// transactional, no headers.
pub fn message_set_to_batch(
    records: &[LegacyRecord],
    compression: Compression,
) -> Result<Bytes, EncodeError> {
    let base = records.first().map_or(0, |r| r.offset);
    let keep_offsets = records.windows(2).all(|w| match w {
        [a, b] => a.offset < b.offset,
        _ => true,
    }) && records.last().is_none_or(|r| {
        r.offset
            .checked_sub(base)
            .is_some_and(|d| i32::try_from(d).is_ok())
    });
    let mut builder = RecordBatchBuilder::new(compression).base_offset(base);
    for r in records {
        if keep_offsets {
            // Fits: checked above that the last (largest) delta fits an i32.
            let delta = r.offset.wrapping_sub(base) as i32;
            builder.push_with_offset_delta(
                delta,
                r.timestamp,
                r.key.as_ref(),
                r.value.as_ref(),
                &[],
            )?;
        } else {
            builder.push(r.timestamp, r.key.as_ref(), r.value.as_ref(), &[])?;
        }
    }
    builder.build()
}

/// Decodes a message set and converts it to one v2 batch (see [`decode_message_set`] and
/// [`message_set_to_batch`]).
pub fn convert_message_set(
    buf: Bytes,
    options: LegacyDecodeOptions,
    compression: Compression,
) -> Result<Bytes, ConvertError> {
    let records = decode_message_set(buf, options)?;
    Ok(message_set_to_batch(&records, compression)?)
}

/// Converts concatenated v2 batches to a message set of `magic` (0 or 1) for an old Fetch
/// version, as Kafka's down-conversion does: each batch is validated (CRC) and decoded (its
/// decompressed size bounded by `max_decompressed`); control batches are dropped; an
/// uncompressed batch becomes one message per record, a compressed batch one wrapper message
/// with the same codec (zstd fails with [`ConvertError::Encode`]). Headers are dropped; for magic
/// 0 so are timestamps. A partial trailing batch is an error.
pub fn batches_to_message_set(
    batches: Bytes,
    magic: i8,
    max_decompressed: usize,
) -> Result<Bytes, ConvertError> {
    let mut out = Vec::with_capacity(batches.len());
    for batch in split_batches(batches) {
        let batch = batch?;
        batch.validate()?;
        if batch.is_control() {
            continue;
        }
        let codec = batch.compression()?;
        let timestamp_type = batch.timestamp_type();
        let mut records = Vec::new();
        for r in batch.records(max_decompressed)? {
            let r = r?;
            records.push(LegacyRecord {
                offset: r.offset,
                timestamp: r.timestamp,
                timestamp_type,
                magic,
                compression: codec,
                key: r.key,
                value: r.value,
            });
        }
        let set = encode_message_set(magic, codec, timestamp_type, &records)?;
        out.extend_from_slice(&set);
    }
    Ok(Bytes::from(out))
}
