//! One record inside a v2 record batch, and the iterator over a batch's records.
//!
//! Wire layout of a record: length varint (bytes after it), attributes i8, timestampDelta
//! varlong, offsetDelta varint, key (varint length, -1 = null, then bytes), value (same), header
//! count varint, then per header: key (varint length >= 0, then bytes) and value (varint length,
//! -1 = null, then bytes).

use bytes::Bytes;

use crate::error::DecodeError;
use crate::primitives::Decoder;

/// The fewest bytes a record can take on the wire (length, attributes, timestampDelta,
/// offsetDelta, key length, value length, header count: one byte each).
pub const MIN_RECORD_SIZE: usize = 7;

/// A record header: a key (Kafka treats it as a UTF-8 string) and a nullable value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Header {
    /// The header key's bytes, as sent (not checked for UTF-8; see [`Header::key_str`]).
    pub key: Bytes,
    /// The header value; `None` for null.
    pub value: Option<Bytes>,
}

impl Header {
    /// A header from a key and a value.
    pub fn new(key: impl Into<Bytes>, value: Option<Bytes>) -> Header {
        Header {
            key: key.into(),
            value,
        }
    }

    /// The key as UTF-8, or `None` if it is not valid UTF-8.
    pub fn key_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.key).ok()
    }
}

/// A record decoded from a batch. Key, value and header fields are zero-copy slices of the
/// batch's buffer (of the decompressed buffer for a compressed batch).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// The record's attributes byte (unused by Kafka today).
    pub attributes: i8,
    /// Timestamp relative to the batch's base timestamp.
    pub timestamp_delta: i64,
    /// Offset relative to the batch's base offset.
    pub offset_delta: i32,
    /// Absolute offset: base offset + offset delta (wrapping on overflow).
    pub offset: i64,
    /// Effective timestamp: base timestamp + delta for create-time batches, the batch's max
    /// timestamp for log-append-time batches (as Kafka reports it).
    pub timestamp: i64,
    /// The key; `None` for null.
    pub key: Option<Bytes>,
    /// The value; `None` for null.
    pub value: Option<Bytes>,
    /// The headers, in order.
    pub headers: Vec<Header>,
}

/// Iterates over the records section of one batch, yielding exactly the batch's record count
/// and then checking that no bytes are left over. After the first error it yields nothing more.
/// Created by [`super::RecordBatch::records`].
#[derive(Debug, Clone)]
pub struct RecordIter {
    dec: Decoder,
    remaining: u32,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
    done: bool,
}

impl RecordIter {
    /// An iterator over `data`, which must hold exactly `count` records.
    pub(crate) fn new(
        data: Bytes,
        count: u32,
        base_offset: i64,
        base_timestamp: i64,
        log_append_time: Option<i64>,
    ) -> RecordIter {
        RecordIter {
            dec: Decoder::new(data),
            remaining: count,
            base_offset,
            base_timestamp,
            log_append_time,
            done: false,
        }
    }

    /// Records not yet yielded, by the batch's count.
    pub fn remaining(&self) -> usize {
        if self.done {
            0
        } else {
            self.remaining as usize
        }
    }

    fn next_record(&mut self) -> Result<Option<Record>, DecodeError> {
        let Some(len) = next_record_len(&mut self.dec, &mut self.remaining)? else {
            return Ok(None);
        };
        let body = self.dec.take(len)?;
        decode_record_body(
            body,
            self.base_offset,
            self.base_timestamp,
            self.log_append_time,
        )
        .map(Some)
    }
}

impl Iterator for RecordIter {
    type Item = Result<Record, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut done = self.done;
        let out = super::fused_step(&mut done, || self.next_record());
        self.done = done;
        out
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // An error may end the iteration early; the lower bound stays 0.
        (0, Some(self.remaining()))
    }
}

/// Reads the length of the next record of a records section that still owes `remaining`
/// records (and counts it): `None` at the declared end, which must also be the end of the
/// bytes; otherwise a length that fits in what is left.
pub(crate) fn next_record_len(
    dec: &mut Decoder,
    remaining: &mut u32,
) -> Result<Option<usize>, DecodeError> {
    if *remaining == 0 {
        if dec.remaining() != 0 {
            return Err(DecodeError::MalformedRecords(
                "bytes left in the records section after the declared record count",
            ));
        }
        return Ok(None);
    }
    *remaining -= 1;
    let len = dec.varint()?;
    let len = usize::try_from(len)
        .map_err(|_| DecodeError::MalformedRecords("negative record length"))?;
    if len > dec.remaining() {
        return Err(DecodeError::MalformedRecords(
            "record length exceeds the records section (too few bytes for the record count)",
        ));
    }
    Ok(Some(len))
}

/// What a consumer that only counts, or a broker that only validates, needs of a record: its
/// offset (absolute and as stored), its timestamp delta and its value length. Yielded by
/// [`RecordSummaryIter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSummary {
    /// Absolute offset: base offset + offset delta (wrapping on overflow).
    pub offset: i64,
    /// The offset delta as stored in the record (relative to the batch's base offset).
    pub offset_delta: i32,
    /// The timestamp delta as stored in the record (relative to the batch's base timestamp).
    pub timestamp_delta: i64,
    /// Length of the value; `None` for a null value.
    pub value_len: Option<usize>,
}

/// Iterates over the records section of one batch like [`RecordIter`], with the same checks
/// (lengths, counts, no bytes left over), but yields only each record's offset and value
/// length: nothing is sliced out of the buffer, so it is several times cheaper per record.
/// Created by [`super::RecordBatch::record_summaries`].
#[derive(Debug, Clone)]
pub struct RecordSummaryIter {
    dec: Decoder,
    remaining: u32,
    base_offset: i64,
    done: bool,
}

impl RecordSummaryIter {
    /// An iterator over `data`, which must hold exactly `count` records.
    pub(crate) fn new(data: Bytes, count: u32, base_offset: i64) -> RecordSummaryIter {
        RecordSummaryIter {
            dec: Decoder::new(data),
            remaining: count,
            base_offset,
            done: false,
        }
    }

    fn next_summary(&mut self) -> Result<Option<RecordSummary>, DecodeError> {
        let Some(len) = next_record_len(&mut self.dec, &mut self.remaining)? else {
            return Ok(None);
        };
        // The record must end exactly `len` bytes from here.
        let end_remaining = self.dec.remaining() - len;
        let dec = &mut self.dec;
        dec.i8()?;
        let timestamp_delta = dec.varlong()?;
        let offset_delta = dec.varint()?;
        if let Some(n) = nullable_len(dec, "negative key length other than -1")? {
            dec.skip(n)?;
        }
        let value_len = nullable_len(dec, "negative value length other than -1")?;
        if let Some(n) = value_len {
            dec.skip(n)?;
        }
        let count = dec.varint()?;
        let count = usize::try_from(count)
            .map_err(|_| DecodeError::MalformedRecords("negative header count"))?;
        for _ in 0..count {
            match nullable_len(dec, "negative header key length")? {
                Some(n) => dec.skip(n)?,
                None => return Err(DecodeError::MalformedRecords("null header key")),
            }
            if let Some(n) = nullable_len(dec, "negative header value length other than -1")? {
                dec.skip(n)?;
            }
            if dec.remaining() < end_remaining {
                break;
            }
        }
        if dec.remaining() != end_remaining {
            return Err(DecodeError::MalformedRecords(
                "record length does not match its fields",
            ));
        }
        Ok(Some(RecordSummary {
            offset: self.base_offset.wrapping_add(i64::from(offset_delta)),
            offset_delta,
            timestamp_delta,
            value_len,
        }))
    }
}

impl Iterator for RecordSummaryIter {
    type Item = Result<RecordSummary, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut done = self.done;
        let out = super::fused_step(&mut done, || self.next_summary());
        self.done = done;
        out
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = if self.done {
            0
        } else {
            self.remaining as usize
        };
        (0, Some(left))
    }
}

/// Reads a varint length: -1 gives `None`, other negatives are an error.
pub(crate) fn nullable_len(
    dec: &mut Decoder,
    what: &'static str,
) -> Result<Option<usize>, DecodeError> {
    match dec.varint()? {
        -1 => Ok(None),
        n if n < 0 => Err(DecodeError::MalformedRecords(what)),
        n => Ok(Some(n as usize)),
    }
}

fn nullable_bytes(dec: &mut Decoder, what: &'static str) -> Result<Option<Bytes>, DecodeError> {
    match nullable_len(dec, what)? {
        None => Ok(None),
        Some(n) => Ok(Some(dec.take(n)?)),
    }
}

/// Decodes one record's body (the bytes after its length varint); it must be consumed exactly.
fn decode_record_body(
    body: Bytes,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
) -> Result<Record, DecodeError> {
    let mut dec = Decoder::new(body);
    let attributes = dec.i8()?;
    let timestamp_delta = dec.varlong()?;
    let offset_delta = dec.varint()?;
    let key = nullable_bytes(&mut dec, "negative key length other than -1")?;
    let value = nullable_bytes(&mut dec, "negative value length other than -1")?;
    let count = dec.varint()?;
    let count = usize::try_from(count)
        .map_err(|_| DecodeError::MalformedRecords("negative header count"))?;
    // Each header takes at least two bytes (key length and value length).
    if count > dec.remaining() / 2 {
        return Err(DecodeError::MalformedRecords(
            "header count exceeds the bytes left in the record",
        ));
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let key = match nullable_len(&mut dec, "negative header key length")? {
            Some(n) => dec.take(n)?,
            None => return Err(DecodeError::MalformedRecords("null header key")),
        };
        let value = nullable_bytes(&mut dec, "negative header value length other than -1")?;
        headers.push(Header { key, value });
    }
    if dec.remaining() != 0 {
        return Err(DecodeError::MalformedRecords(
            "record length does not match its fields",
        ));
    }
    Ok(Record {
        attributes,
        timestamp_delta,
        offset_delta,
        offset: base_offset.wrapping_add(i64::from(offset_delta)),
        timestamp: log_append_time.unwrap_or(base_timestamp.wrapping_add(timestamp_delta)),
        key,
        value,
        headers,
    })
}

/// Appends an unsigned LEB128 varint.
fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a zig-zag varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, v: i32) {
    put_uvarint(out, u64::from(((v << 1) ^ (v >> 31)) as u32));
}

/// Appends a zig-zag varlong.
pub(crate) fn put_varlong(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Length of a zig-zag varint.
pub(crate) fn varint_len(v: i32) -> usize {
    let mut z = ((v << 1) ^ (v >> 31)) as u32;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

/// Length of a zig-zag varlong.
pub(crate) fn varlong_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

/// A byte field's length as the varint Kafka writes (-1 for null).
fn field_len(len: Option<usize>) -> Result<i32, crate::error::EncodeError> {
    match len {
        None => Ok(-1),
        Some(n) => i32::try_from(n).map_err(|_| crate::error::EncodeError::TooLong {
            what: "record field",
            len: n,
        }),
    }
}

fn nullable_size(b: Option<&Bytes>) -> Result<usize, crate::error::EncodeError> {
    let l = field_len(b.map(Bytes::len))?;
    Ok(varint_len(l) + b.map_or(0, Bytes::len))
}

/// Appends one record in the v2 layout. Fails only if a field or the whole record is longer
/// than a varint length allows.
pub(crate) fn encode_record(
    out: &mut Vec<u8>,
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&Bytes>,
    value: Option<&Bytes>,
    headers: &[Header],
) -> Result<(), crate::error::EncodeError> {
    let header_count = field_len(Some(headers.len()))?;
    let mut body = 1
        + varlong_len(timestamp_delta)
        + varint_len(offset_delta)
        + nullable_size(key)?
        + nullable_size(value)?
        + varint_len(header_count);
    for h in headers {
        body += nullable_size(Some(&h.key))? + nullable_size(h.value.as_ref())?;
    }
    let body_len = field_len(Some(body))?;
    out.reserve(body + 5);
    put_varint(out, body_len);
    out.push(0);
    put_varlong(out, timestamp_delta);
    put_varint(out, offset_delta);
    for field in [key, value] {
        put_varint(out, field_len(field.map(Bytes::len))?);
        if let Some(b) = field {
            out.extend_from_slice(b);
        }
    }
    put_varint(out, header_count);
    for h in headers {
        put_varint(out, field_len(Some(h.key.len()))?);
        out.extend_from_slice(&h.key);
        put_varint(out, field_len(h.value.as_ref().map(Bytes::len))?);
        if let Some(v) = &h.value {
            out.extend_from_slice(v);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_lengths_match_encoding() {
        for v in [0, 1, -1, 63, -64, 64, 8191, -8193, i32::MAX, i32::MIN] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
        }
        for v in [0i64, -1, 1 << 40, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            assert_eq!(out.len(), varlong_len(v));
        }
    }
}
