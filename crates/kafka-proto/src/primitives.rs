//! Kafka's primitive types: the bounds-checked [`Decoder`] and the chunked [`Encoder`].
//!
//! The decoder reads from a [`Bytes`] buffer and hands out sub-slices of it for byte fields, so
//! record data is never copied. Every read checks the remaining length first, and every length
//! prefix is compared with what remains before anything sized by it is allocated.
//!
//! The encoder writes small fields into a growing buffer and keeps large byte chunks (record data)
//! as separate [`Bytes`] segments, so a response can be written with vectored I/O without copying
//! the records into one buffer.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, DecodeResult, EncodeError};

/// A Kafka UUID (16 bytes, as sent on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// The all-zero UUID, Kafka's "no topic id".
    pub const ZERO: Uuid = Uuid([0; 16]);

    /// Builds a UUID from two 64-bit halves (most significant first), as Java does.
    pub fn from_u64_pair(msb: u64, lsb: u64) -> Uuid {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&msb.to_be_bytes());
        b[8..].copy_from_slice(&lsb.to_be_bytes());
        Uuid(b)
    }

    /// True for the all-zero UUID.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

/// A tagged field this codec does not know, kept as raw bytes so it survives a round trip.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawTaggedField {
    /// The field's tag.
    pub tag: u32,
    /// The field's encoded value.
    pub data: Bytes,
}

/// The value of a `records` field: record data as one or more byte chunks that together form the
/// field. Decoding yields one chunk (a zero-copy slice of the request); a server building a Fetch
/// response passes the chunks it read from storage, and they are written without being copied.
/// Equality compares content, not how it is chunked.
#[derive(Debug, Clone, Default)]
pub struct RecordChunks {
    chunks: Vec<Bytes>,
}

impl RecordChunks {
    /// Record data from a list of chunks, in order.
    pub fn from_chunks(chunks: Vec<Bytes>) -> RecordChunks {
        RecordChunks { chunks }
    }

    /// The chunks, in order.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// True when there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.chunks.iter().all(Bytes::is_empty)
    }

    /// The data as one buffer: free when there is a single chunk, a copy otherwise.
    pub fn to_contiguous(&self) -> Bytes {
        match self.chunks.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut out = BytesMut::with_capacity(self.len());
                for c in many {
                    out.put_slice(c);
                }
                out.freeze()
            }
        }
    }
}

impl From<Bytes> for RecordChunks {
    fn from(b: Bytes) -> RecordChunks {
        RecordChunks { chunks: vec![b] }
    }
}

impl PartialEq for RecordChunks {
    fn eq(&self, other: &RecordChunks) -> bool {
        self.len() == other.len() && self.to_contiguous() == other.to_contiguous()
    }
}

impl Eq for RecordChunks {}

/// Reads Kafka primitives from a buffer, front to back, checking every length.
#[derive(Debug, Clone)]
pub struct Decoder {
    buf: Bytes,
}

/// Most decoders share this shape: read one value of a type from the front of the buffer.
macro_rules! read_fixed {
    ($(#[$doc:meta] $name:ident -> $t:ty, $get:ident;)*) => {$(
        #[$doc]
        #[inline]
        pub fn $name(&mut self) -> DecodeResult<$t> {
            self.need(std::mem::size_of::<$t>())?;
            Ok(self.buf.$get())
        }
    )*};
}

impl Decoder {
    /// A decoder over `buf`. Byte fields read later are zero-copy slices of it.
    pub fn new(buf: Bytes) -> Decoder {
        Decoder { buf }
    }

    /// Bytes not yet read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Fails with [`DecodeError::TrailingBytes`] unless everything was read.
    pub fn finish(&self) -> DecodeResult<()> {
        match self.buf.len() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }

    /// The unread bytes, without consuming them.
    pub fn peek_rest(&self) -> &Bytes {
        &self.buf
    }

    #[inline]
    fn need(&self, n: usize) -> DecodeResult<()> {
        if self.buf.len() < n {
            Err(DecodeError::Truncated {
                needed: n,
                remaining: self.buf.len(),
            })
        } else {
            Ok(())
        }
    }

    /// Takes the next `n` bytes as a zero-copy slice.
    #[inline]
    pub fn take(&mut self, n: usize) -> DecodeResult<Bytes> {
        self.need(n)?;
        Ok(self.buf.split_to(n))
    }

    /// Skips `n` bytes.
    pub fn skip(&mut self, n: usize) -> DecodeResult<()> {
        self.need(n)?;
        self.buf.advance(n);
        Ok(())
    }

    read_fixed! {
        /// INT8.
        i8 -> i8, get_i8;
        /// INT16, big-endian.
        i16 -> i16, get_i16;
        /// INT32, big-endian.
        i32 -> i32, get_i32;
        /// INT64, big-endian.
        i64 -> i64, get_i64;
        /// UINT16, big-endian.
        u16 -> u16, get_u16;
        /// UINT32, big-endian.
        u32 -> u32, get_u32;
        /// FLOAT64, big-endian IEEE 754.
        f64 -> f64, get_f64;
    }

    /// BOOLEAN: one byte; 0 is false and any other byte true, as Kafka reads it
    /// (`readByte() != 0`).
    pub fn bool(&mut self) -> DecodeResult<bool> {
        self.need(1)?;
        Ok(self.buf.get_u8() != 0)
    }

    /// UUID: 16 raw bytes.
    pub fn uuid(&mut self) -> DecodeResult<Uuid> {
        self.need(16)?;
        let mut b = [0u8; 16];
        self.buf.copy_to_slice(&mut b);
        Ok(Uuid(b))
    }

    /// UNSIGNED_VARINT (at most 5 bytes, fits in 32 bits).
    pub fn unsigned_varint(&mut self) -> DecodeResult<u32> {
        let mut value: u32 = 0;
        for i in 0..5 {
            self.need(1)?;
            let byte = self.buf.get_u8();
            if i == 4 && byte > 0x0f {
                return Err(DecodeError::VarintOverflow { max_bytes: 5 });
            }
            value |= u32::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::VarintOverflow { max_bytes: 5 })
    }

    /// Unsigned 64-bit varint (at most 10 bytes).
    pub fn unsigned_varlong(&mut self) -> DecodeResult<u64> {
        let mut value: u64 = 0;
        for i in 0..10 {
            self.need(1)?;
            let byte = self.buf.get_u8();
            if i == 9 && byte > 0x01 {
                return Err(DecodeError::VarintOverflow { max_bytes: 10 });
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::VarintOverflow { max_bytes: 10 })
    }

    /// VARINT: zig-zag encoded signed 32-bit.
    pub fn varint(&mut self) -> DecodeResult<i32> {
        let raw = self.unsigned_varint()?;
        Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
    }

    /// VARLONG: zig-zag encoded signed 64-bit.
    pub fn varlong(&mut self) -> DecodeResult<i64> {
        let raw = self.unsigned_varlong()?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    /// Checks a non-negative length against what remains, before anything is allocated.
    #[inline]
    fn checked_len(&self, len: u64) -> DecodeResult<usize> {
        if len > self.buf.len() as u64 {
            return Err(DecodeError::LengthExceedsInput {
                claimed: len,
                remaining: self.buf.len(),
            });
        }
        Ok(len as usize)
    }

    /// A length prefix as Kafka's readers see it: classic (INT16/INT32), or compact
    /// (UNSIGNED_VARINT of length+1, taken as a Java `int`, so a value of 2^31 or more is
    /// negative). `None` for null, which is **any** negative length (Kafka's generated readers
    /// test `length < 0`); the value is not yet checked against the input.
    fn raw_length(&mut self, kind: LenKind) -> DecodeResult<Option<u64>> {
        let len: i32 = match kind {
            LenKind::I16 => i32::from(self.i16()?),
            LenKind::I32 => self.i32()?,
            LenKind::Compact => (self.unsigned_varint()? as i32).wrapping_sub(1),
        };
        Ok(u64::try_from(len).ok())
    }

    /// A length prefix (see [`Decoder::raw_length`]) checked against the remaining input.
    fn length(&mut self, kind: LenKind) -> DecodeResult<Option<usize>> {
        match self.raw_length(kind)? {
            None => Ok(None),
            Some(len) => Ok(Some(self.checked_len(len)?)),
        }
    }

    /// A string as Kafka reads it: lengths above 32767 are refused (only possible in compact
    /// form); bytes that are not valid UTF-8 become U+FFFD, as Java's `new String(bytes, UTF_8)`
    /// makes them (at most 3 bytes out per byte in).
    fn string_of(&mut self, kind: LenKind) -> DecodeResult<Option<String>> {
        let Some(len) = self.raw_length(kind)? else {
            return Ok(None);
        };
        if len > 0x7fff {
            return Err(DecodeError::StringTooLong(len));
        }
        let n = self.checked_len(len)?;
        let raw = self.buf.split_to(n);
        Ok(Some(String::from_utf8_lossy(&raw).into_owned()))
    }

    fn bytes_of(&mut self, kind: LenKind) -> DecodeResult<Option<Bytes>> {
        match self.length(kind)? {
            None => Ok(None),
            Some(n) => Ok(Some(self.buf.split_to(n))),
        }
    }

    /// STRING (INT16 length) or COMPACT_STRING, never null.
    pub fn string(&mut self, compact: bool) -> DecodeResult<String> {
        self.string_of(LenKind::string(compact))?
            .ok_or(DecodeError::InvalidLength(-1))
    }

    /// NULLABLE_STRING or COMPACT_NULLABLE_STRING.
    pub fn nullable_string(&mut self, compact: bool) -> DecodeResult<Option<String>> {
        self.string_of(LenKind::string(compact))
    }

    /// BYTES (INT32 length) or COMPACT_BYTES, never null; a zero-copy slice.
    pub fn bytes(&mut self, compact: bool) -> DecodeResult<Bytes> {
        self.bytes_of(LenKind::bytes(compact))?
            .ok_or(DecodeError::InvalidLength(-1))
    }

    /// NULLABLE_BYTES or COMPACT_NULLABLE_BYTES; a zero-copy slice.
    pub fn nullable_bytes(&mut self, compact: bool) -> DecodeResult<Option<Bytes>> {
        self.bytes_of(LenKind::bytes(compact))
    }

    /// An array's element count (INT32, or compact UNSIGNED_VARINT of count+1); `None` for null.
    ///
    /// Each element takes at least one byte on the wire, so a count above the remaining bytes is
    /// rejected here; callers may then size a `Vec` by the count.
    pub fn array_len(&mut self, compact: bool) -> DecodeResult<Option<usize>> {
        self.length(if compact {
            LenKind::Compact
        } else {
            LenKind::I32
        })
    }

    /// Reads the tagged-field section of a flexible struct, handing each field to `on_field`
    /// as (tag, value bytes) in wire order. Like Kafka's readers: tags may come in any order and
    /// repeat (writers send them ascending, readers never check), and a count that is negative
    /// as a Java `int` (a varint of 2^31 or more) means no fields.
    pub fn tagged_fields(
        &mut self,
        mut on_field: impl FnMut(u32, Bytes) -> DecodeResult<()>,
    ) -> DecodeResult<()> {
        let count = u32::try_from(self.unsigned_varint()? as i32).unwrap_or(0);
        // Each tagged field takes at least two bytes (tag and size).
        self.checked_len(u64::from(count) * 2)?;
        for _ in 0..count {
            let tag = self.unsigned_varint()?;
            let size = self.unsigned_varint()?;
            let n = self.checked_len(u64::from(size))?;
            let data = self.buf.split_to(n);
            on_field(tag, data)?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum LenKind {
    I16,
    I32,
    Compact,
}

impl LenKind {
    fn string(compact: bool) -> LenKind {
        if compact {
            LenKind::Compact
        } else {
            LenKind::I16
        }
    }
    fn bytes(compact: bool) -> LenKind {
        if compact {
            LenKind::Compact
        } else {
            LenKind::I32
        }
    }
}

/// Writes Kafka primitives. Small fields go into one growing buffer; large byte chunks added with
/// [`Encoder::put_chunk`] are kept as separate segments (no copy), so the result is a list of
/// [`Bytes`] ready for vectored writes.
#[derive(Debug, Default)]
pub struct Encoder {
    current: BytesMut,
    segments: Vec<Bytes>,
    total_len: usize,
}

/// Most encoders share this shape: append one fixed-size big-endian value.
macro_rules! write_fixed {
    ($(#[$doc:meta] $name:ident: $t:ty;)*) => {$(
        #[$doc]
        #[inline]
        pub fn $name(&mut self, v: $t) {
            self.put_slice(&v.to_be_bytes());
        }
    )*};
}

/// Chunks shorter than this are copied into the running buffer: a separate iovec costs more than
/// copying a few hundred bytes.
const CHUNK_COPY_THRESHOLD: usize = 512;

impl Encoder {
    /// An empty encoder.
    pub fn new() -> Encoder {
        Encoder::with_capacity(256)
    }

    /// An empty encoder whose first buffer has room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Encoder {
        Encoder {
            current: BytesMut::with_capacity(capacity),
            segments: Vec::new(),
            total_len: 0,
        }
    }

    /// Total bytes written so far, chunks included.
    #[inline]
    pub fn len(&self) -> usize {
        self.total_len
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.total_len == 0
    }

    /// Appends raw bytes by copying them.
    #[inline]
    pub fn put_slice(&mut self, b: &[u8]) {
        self.current.put_slice(b);
        self.total_len += b.len();
    }

    /// Appends a chunk of bytes; large chunks are kept by reference, not copied.
    pub fn put_chunk(&mut self, chunk: Bytes) {
        if chunk.len() < CHUNK_COPY_THRESHOLD {
            self.put_slice(&chunk);
            return;
        }
        if !self.current.is_empty() {
            self.segments.push(self.current.split().freeze());
        }
        self.total_len += chunk.len();
        self.segments.push(chunk);
    }

    write_fixed! {
        /// INT8.
        i8: i8;
        /// INT16, big-endian.
        i16: i16;
        /// INT32, big-endian.
        i32: i32;
        /// INT64, big-endian.
        i64: i64;
        /// UINT16, big-endian.
        u16: u16;
        /// UINT32, big-endian.
        u32: u32;
        /// FLOAT64, big-endian IEEE 754.
        f64: f64;
    }

    /// BOOLEAN.
    #[inline]
    pub fn bool(&mut self, v: bool) {
        self.put_slice(&[u8::from(v)]);
    }
    /// UUID.
    #[inline]
    pub fn uuid(&mut self, v: &Uuid) {
        self.put_slice(&v.0);
    }

    /// UNSIGNED_VARINT.
    pub fn unsigned_varint(&mut self, mut v: u32) {
        let mut tmp = [0u8; 5];
        let mut n = 0;
        while v >= 0x80 {
            tmp[n] = (v as u8) | 0x80;
            v >>= 7;
            n += 1;
        }
        tmp[n] = v as u8;
        self.put_slice(&tmp[..=n]);
    }

    /// Unsigned 64-bit varint.
    pub fn unsigned_varlong(&mut self, mut v: u64) {
        let mut tmp = [0u8; 10];
        let mut n = 0;
        while v >= 0x80 {
            tmp[n] = (v as u8) | 0x80;
            v >>= 7;
            n += 1;
        }
        tmp[n] = v as u8;
        self.put_slice(&tmp[..=n]);
    }

    /// VARINT (zig-zag).
    pub fn varint(&mut self, v: i32) {
        self.unsigned_varint(((v << 1) ^ (v >> 31)) as u32);
    }

    /// VARLONG (zig-zag).
    pub fn varlong(&mut self, v: i64) {
        self.unsigned_varlong(((v << 1) ^ (v >> 63)) as u64);
    }

    fn length(
        &mut self,
        len: Option<usize>,
        kind: LenKind,
        what: &'static str,
    ) -> Result<(), EncodeError> {
        match kind {
            LenKind::I16 => {
                let v = match len {
                    None => -1,
                    Some(n) => {
                        i16::try_from(n).map_err(|_| EncodeError::TooLong { what, len: n })?
                    }
                };
                self.i16(v);
            }
            LenKind::I32 => {
                let v = match len {
                    None => -1,
                    Some(n) => {
                        i32::try_from(n).map_err(|_| EncodeError::TooLong { what, len: n })?
                    }
                };
                self.i32(v);
            }
            LenKind::Compact => {
                let v = match len {
                    None => 0,
                    Some(n) => u32::try_from(n)
                        .ok()
                        .and_then(|n| n.checked_add(1))
                        .ok_or(EncodeError::TooLong { what, len: n })?,
                };
                self.unsigned_varint(v);
            }
        }
        Ok(())
    }

    /// STRING or COMPACT_STRING.
    pub fn string(&mut self, s: &str, compact: bool) -> Result<(), EncodeError> {
        self.length(Some(s.len()), LenKind::string(compact), "string")?;
        self.put_slice(s.as_bytes());
        Ok(())
    }

    /// NULLABLE_STRING or COMPACT_NULLABLE_STRING.
    pub fn nullable_string(&mut self, s: Option<&str>, compact: bool) -> Result<(), EncodeError> {
        match s {
            Some(s) => self.string(s, compact),
            None => self.length(None, LenKind::string(compact), "string"),
        }
    }

    /// BYTES or COMPACT_BYTES; large values are kept by reference.
    pub fn bytes(&mut self, b: &Bytes, compact: bool) -> Result<(), EncodeError> {
        self.length(Some(b.len()), LenKind::bytes(compact), "bytes")?;
        self.put_chunk(b.clone());
        Ok(())
    }

    /// NULLABLE_BYTES or COMPACT_NULLABLE_BYTES.
    pub fn nullable_bytes(&mut self, b: Option<&Bytes>, compact: bool) -> Result<(), EncodeError> {
        match b {
            Some(b) => self.bytes(b, compact),
            None => self.length(None, LenKind::bytes(compact), "bytes"),
        }
    }

    /// Records given as several chunks that form one byte field (NULLABLE_BYTES / COMPACT form);
    /// the chunks are not copied. `None` writes null.
    pub fn chunked_bytes(
        &mut self,
        chunks: Option<&[Bytes]>,
        compact: bool,
    ) -> Result<(), EncodeError> {
        match chunks {
            None => self.length(None, LenKind::bytes(compact), "bytes"),
            Some(chunks) => {
                let total: usize = chunks.iter().map(Bytes::len).sum();
                self.length(Some(total), LenKind::bytes(compact), "bytes")?;
                for c in chunks {
                    self.put_chunk(c.clone());
                }
                Ok(())
            }
        }
    }

    /// An array's element count (INT32 or compact); `None` writes null.
    pub fn array_len(&mut self, len: Option<usize>, compact: bool) -> Result<(), EncodeError> {
        let kind = if compact {
            LenKind::Compact
        } else {
            LenKind::I32
        };
        self.length(len, kind, "array")
    }

    /// Finishes into the list of segments, in order. Their concatenation is what was written.
    pub fn into_segments(mut self) -> Vec<Bytes> {
        if !self.current.is_empty() {
            self.segments.push(self.current.split().freeze());
        }
        self.segments
    }

    /// Finishes into one contiguous buffer (copies chunks; for tests and small messages).
    pub fn into_bytes(self) -> Bytes {
        if self.segments.is_empty() {
            return self.current.freeze();
        }
        let total = self.total_len;
        let mut out = BytesMut::with_capacity(total);
        for s in self.into_segments() {
            out.put_slice(&s);
        }
        out.freeze()
    }
}

/// Length in bytes of `v` as an UNSIGNED_VARINT.
pub fn unsigned_varint_len(v: u32) -> usize {
    match v {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0x0fff_ffff => 4,
        _ => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_the_edges() {
        for v in [0i32, 1, -1, 63, -64, 64, i32::MAX, i32::MIN, 300, -300] {
            let mut e = Encoder::new();
            e.varint(v);
            let mut d = Decoder::new(e.into_bytes());
            assert_eq!(d.varint().unwrap(), v);
            d.finish().unwrap();
        }
        for v in [0i64, 1, -1, i64::MAX, i64::MIN, 1 << 40] {
            let mut e = Encoder::new();
            e.varlong(v);
            let mut d = Decoder::new(e.into_bytes());
            assert_eq!(d.varlong().unwrap(), v);
            d.finish().unwrap();
        }
        for v in [0u32, 0x7f, 0x80, 0x3fff, 0x4000, u32::MAX] {
            let mut e = Encoder::new();
            e.unsigned_varint(v);
            assert_eq!(e.len(), unsigned_varint_len(v));
            let mut d = Decoder::new(e.into_bytes());
            assert_eq!(d.unsigned_varint().unwrap(), v);
        }
    }

    #[test]
    fn overlong_varints_are_errors() {
        let mut d = Decoder::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]));
        assert!(matches!(
            d.unsigned_varint(),
            Err(DecodeError::VarintOverflow { .. })
        ));
        let mut d = Decoder::new(Bytes::from_static(&[0xff; 11]));
        assert!(matches!(
            d.unsigned_varlong(),
            Err(DecodeError::VarintOverflow { .. })
        ));
        let mut d = Decoder::new(Bytes::from_static(&[0x80]));
        assert!(matches!(
            d.unsigned_varint(),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn lengths_beyond_the_input_are_rejected_before_allocation() {
        // A string claiming 30000 bytes with 2 present.
        let mut d = Decoder::new(Bytes::from_static(&[0x75, 0x30, b'a', b'b']));
        assert!(matches!(
            d.string(false),
            Err(DecodeError::LengthExceedsInput { .. })
        ));
        // An array claiming i32::MAX elements.
        let mut d = Decoder::new(Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff]));
        assert!(matches!(
            d.array_len(false),
            Err(DecodeError::LengthExceedsInput { .. })
        ));
        // A compact string longer than 32767 bytes is refused before the input is consulted,
        // as Kafka refuses it; 32767 itself is fine.
        let mut e = Encoder::new();
        e.unsigned_varint(0x8000 + 1);
        let mut d = Decoder::new(e.into_bytes());
        assert_eq!(d.string(true), Err(DecodeError::StringTooLong(0x8000)));
        let mut e = Encoder::new();
        e.string(&"x".repeat(0x7fff), true).unwrap();
        let mut d = Decoder::new(e.into_bytes());
        assert_eq!(d.string(true).unwrap().len(), 0x7fff);
    }

    #[test]
    fn any_negative_length_is_null_as_kafka_reads_it() {
        // Classic INT16 -2 and INT32 -5: null where nullable, an error where not.
        let mut d = Decoder::new(Bytes::from_static(&[0xff, 0xfe]));
        assert_eq!(d.nullable_string(false), Ok(None));
        let mut d = Decoder::new(Bytes::from_static(&[0xff, 0xfe]));
        assert_eq!(d.string(false), Err(DecodeError::InvalidLength(-1)));
        let mut d = Decoder::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xfb]));
        assert_eq!(d.array_len(false), Ok(None));
        let mut d = Decoder::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xfb]));
        assert_eq!(d.nullable_bytes(false), Ok(None));
        // Compact: a varint of 2^32-1 is -1 as a Java int, so a length of -2: null.
        let mut d = Decoder::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f]));
        assert_eq!(d.nullable_string(true), Ok(None));
        // 2^31 is i32::MIN, minus one wraps to i32::MAX (as in Java): far beyond the input.
        let mut d = Decoder::new(Bytes::from_static(&[0x80, 0x80, 0x80, 0x80, 0x08]));
        assert!(matches!(
            d.array_len(true),
            Err(DecodeError::LengthExceedsInput { .. })
        ));
    }

    #[test]
    fn strings_that_are_not_utf8_decode_with_replacement_characters() {
        let mut d = Decoder::new(Bytes::from_static(&[0, 4, b'a', 0xff, 0xc3, b'b']));
        assert_eq!(d.string(false).unwrap(), "a\u{fffd}\u{fffd}b");
        d.finish().unwrap();
    }

    #[test]
    fn booleans_are_true_for_any_nonzero_byte() {
        let mut d = Decoder::new(Bytes::from_static(&[0, 1, 2, 0xff]));
        let got: Vec<bool> = (0..4).map(|_| d.bool().unwrap()).collect();
        assert_eq!(got, [false, true, true, true]);
    }

    #[test]
    fn tagged_fields_in_any_order_and_repeated_as_kafka_reads_them() {
        // Three fields: tag 5, tag 2, tag 2 again.
        let mut d = Decoder::new(Bytes::from_static(&[3, 5, 1, 0xaa, 2, 0, 2, 1, 0xbb]));
        let mut seen = Vec::new();
        d.tagged_fields(|tag, data| {
            seen.push((tag, data.to_vec()));
            Ok(())
        })
        .unwrap();
        d.finish().unwrap();
        assert_eq!(seen, [(5, vec![0xaa]), (2, vec![]), (2, vec![0xbb])]);
        // A count of 2^31 or more is negative as a Java int: Kafka reads no fields.
        let mut d = Decoder::new(Bytes::from_static(&[0x80, 0x80, 0x80, 0x80, 0x08]));
        d.tagged_fields(|_, _| panic!("no fields")).unwrap();
        d.finish().unwrap();
    }

    #[test]
    fn compact_and_nullable_forms() {
        let mut e = Encoder::new();
        e.string("topic", true).unwrap();
        e.nullable_string(None, true).unwrap();
        e.nullable_string(None, false).unwrap();
        e.nullable_bytes(None, true).unwrap();
        e.array_len(Some(3), true).unwrap();
        let mut d = Decoder::new(e.into_bytes());
        assert_eq!(d.string(true).unwrap(), "topic");
        assert_eq!(d.nullable_string(true).unwrap(), None);
        assert_eq!(d.nullable_string(false).unwrap(), None);
        assert_eq!(d.nullable_bytes(true).unwrap(), None);
        assert_eq!(
            d.array_len(true).unwrap_err(),
            DecodeError::LengthExceedsInput {
                claimed: 3,
                remaining: 0
            }
        );
    }

    #[test]
    fn large_chunks_are_kept_by_reference() {
        let chunk = Bytes::from(vec![7u8; 4096]);
        let mut e = Encoder::new();
        e.i32(1);
        e.chunked_bytes(Some(&[chunk.clone(), chunk.clone()]), false)
            .unwrap();
        e.i16(2);
        assert_eq!(e.len(), 4 + 4 + 8192 + 2);
        let segs = e.into_segments();
        assert_eq!(segs.len(), 4);
        assert_eq!(segs[1].as_ptr(), chunk.as_ptr());
    }
}
