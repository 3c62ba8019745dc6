//! Kafka's compression codecs, framed exactly as Kafka frames them, with bounded decompression.
//!
//! - gzip: a gzip stream (RFC 1952), as Java's `GZIPOutputStream` writes; concatenated members
//!   are read like `GZIPInputStream` reads them.
//! - snappy: written in the *xerial* framing of snappy-java's `SnappyOutputStream` (the 16-byte
//!   header `\x82SNAPPY\0` + version 1 + compatible version 1, then blocks of a 4-byte big-endian
//!   length and a raw snappy block of at most 32 KiB input). Read in that framing (concatenated
//!   streams included) or as one plain raw snappy block, like snappy-java and librdkafka.
//! - lz4: the LZ4 frame format as Kafka's `Lz4BlockOutputStream` writes it: 64 KiB blocks,
//!   independent blocks, no block checksums, no content size, no content checksum. For magic 0
//!   message sets Kafka computes the frame descriptor checksum wrongly (over the magic number
//!   too); [`compress_for_magic`] reproduces that and [`decompress_for_magic`] ignores the
//!   descriptor checksum for magic 0, as Kafka does.
//! - zstd: one or more zstd frames (level 3, as Kafka's default).
//!
//! Every decompression takes the largest output it may produce and fails with
//! [`DecodeError::DecompressedTooLarge`] as soon as the output would exceed it, having allocated
//! at most about that much (streams are read through `take(limit + 1)`; snappy blocks are checked
//! against their declared length before anything is allocated). zstd's window is capped too, so a
//! frame cannot make the decoder reserve more than `max(16 MiB, limit)` of history.

use std::io::{Read, Write};

use crate::error::{DecodeError, EncodeError};

/// A record batch or message compression codec: bits 0-2 of the attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// No compression (0).
    #[default]
    None,
    /// gzip (1).
    Gzip,
    /// snappy, xerial-framed (2).
    Snappy,
    /// LZ4 frame format (3).
    Lz4,
    /// zstd (4); only valid in record batches (magic 2).
    Zstd,
}

impl Compression {
    /// Every codec, in id order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec id Kafka puts in attribute bits 0-2.
    pub const fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// The codec for an id (0-4); ids 5-7 (and anything else) fail with
    /// [`DecodeError::Compression`], as Kafka rejects them.
    pub fn from_id(id: u8) -> Result<Compression, DecodeError> {
        match id {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(DecodeError::Compression(format!(
                "unknown compression codec id {other}"
            ))),
        }
    }

    /// The codec named in attribute bits 0-2 (of a record batch or a legacy message).
    pub fn from_attributes(attributes: i16) -> Result<Compression, DecodeError> {
        Compression::from_id((attributes & 0x07) as u8)
    }

    /// Kafka's name for the codec (`none`, `gzip`, `snappy`, `lz4`, `zstd`).
    pub const fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl std::fmt::Display for Compression {
    /// Kafka's name for the codec.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// snappy-java's stream header magic.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Header length: magic, version i32, compatible version i32.
const XERIAL_HEADER_LEN: usize = 16;
/// snappy-java's default block size.
const XERIAL_BLOCK: usize = 32 * 1024;
/// LZ4 frame magic number (little-endian on the wire).
const LZ4_MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];
/// Kafka's default zstd level.
const ZSTD_LEVEL: i32 = 3;
/// Smallest zstd window log we always accept (16 MiB; producers use up to 8 MiB by default).
const ZSTD_MIN_WINDOW_LOG: u32 = 24;
/// Largest zstd window log we ever accept (1 GiB).
const ZSTD_MAX_WINDOW_LOG: u32 = 30;

/// Compresses `data` with `codec`, framed as Kafka frames record batches (magic 2) and magic 1
/// messages. `Compression::None` returns a copy of the input.
pub fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, EncodeError> {
    compress_for_magic(codec, 2, data)
}

/// Compresses `data` with `codec` for a message or batch of the given magic. Only lz4 differs by
/// magic: for magic 0 the frame descriptor checksum is written the (wrong) way Kafka writes it.
pub fn compress_for_magic(
    codec: Compression,
    magic: i8,
    data: &[u8],
) -> Result<Vec<u8>, EncodeError> {
    let err = |e: std::io::Error| EncodeError::Compression(format!("{codec}: {e}"));
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(data.len() / 2 + 64),
                flate2::Compression::default(),
            );
            enc.write_all(data).map_err(err)?;
            enc.finish().map_err(err)
        }
        Compression::Snappy => Ok(snappy_xerial_compress(data)?),
        Compression::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent)
                .block_checksums(false)
                .content_checksum(false)
                .content_size(None);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(
                info,
                Vec::with_capacity(data.len() / 2 + 64),
            );
            enc.write_all(data).map_err(err)?;
            let mut out = enc
                .finish()
                .map_err(|e| EncodeError::Compression(format!("lz4: {e}")))?;
            if magic == 0 {
                // Kafka's magic-0 writer hashes the magic number along with FLG and BD.
                if let Some(desc) = out.get(..6) {
                    let hc = lz4_header_checksum(desc);
                    if let Some(b) = out.get_mut(6) {
                        *b = hc;
                    }
                }
            }
            Ok(out)
        }
        Compression::Zstd => zstd::bulk::compress(data, ZSTD_LEVEL).map_err(err),
    }
}

/// Decompresses a record batch's records section (magic 2) with `codec`, producing at most
/// `max_size` bytes; more fails with [`DecodeError::DecompressedTooLarge`] (checked while
/// streaming, so a bomb never gets to allocate its expanded size). Corrupt input fails with
/// [`DecodeError::Compression`]. `Compression::None` returns a copy if it fits.
pub fn decompress(
    codec: Compression,
    data: &[u8],
    max_size: usize,
) -> Result<Vec<u8>, DecodeError> {
    decompress_for_magic(codec, 2, data, max_size)
}

/// [`decompress`] for a message of the given magic: for magic 0, lz4's frame descriptor checksum
/// is not checked (Kafka wrote it wrongly before magic 1); zstd is accepted regardless of magic
/// (callers enforce Kafka's rule that it needs magic 2).
pub fn decompress_for_magic(
    codec: Compression,
    magic: i8,
    data: &[u8],
    max_size: usize,
) -> Result<Vec<u8>, DecodeError> {
    match codec {
        Compression::None => {
            if data.len() > max_size {
                return Err(DecodeError::DecompressedTooLarge(max_size));
            }
            Ok(data.to_vec())
        }
        Compression::Gzip => read_bounded(
            flate2::read::MultiGzDecoder::new(data),
            data.len(),
            max_size,
            codec,
        ),
        Compression::Snappy => snappy_decompress(data, max_size),
        Compression::Lz4 => {
            if magic == 0 {
                let fixed = lz4_fix_header_checksum(data);
                let (head, rest) = match &fixed {
                    Some((head, len)) => (
                        head.get(..*len).unwrap_or(&[]),
                        data.get(*len..).unwrap_or(&[]),
                    ),
                    None => (&[][..], data),
                };
                read_bounded(
                    lz4_flex::frame::FrameDecoder::new(head.chain(rest)),
                    data.len(),
                    max_size,
                    codec,
                )
            } else {
                read_bounded(
                    lz4_flex::frame::FrameDecoder::new(data),
                    data.len(),
                    max_size,
                    codec,
                )
            }
        }
        Compression::Zstd => {
            let mut dec = zstd::stream::read::Decoder::with_buffer(data)
                .map_err(|e| DecodeError::Compression(format!("zstd: {e}")))?;
            dec.window_log_max(zstd_window_log_max(max_size))
                .map_err(|e| DecodeError::Compression(format!("zstd: {e}")))?;
            read_bounded(dec, data.len(), max_size, codec)
        }
    }
}

/// The largest zstd window log allowed for an output limit.
fn zstd_window_log_max(max_size: usize) -> u32 {
    let needed = usize::BITS - max_size.leading_zeros();
    needed.clamp(ZSTD_MIN_WINDOW_LOG, ZSTD_MAX_WINDOW_LOG)
}

/// Reads a decompressing stream to the end, failing once it yields more than `max` bytes.
fn read_bounded<R: Read>(
    reader: R,
    input_len: usize,
    max: usize,
    codec: Compression,
) -> Result<Vec<u8>, DecodeError> {
    let hint = input_len.saturating_mul(4).clamp(64, 1 << 20).min(max);
    let mut out = Vec::with_capacity(hint);
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::Compression(format!("{codec}: {e}")))?;
    if out.len() > max {
        return Err(DecodeError::DecompressedTooLarge(max));
    }
    Ok(out)
}

fn snappy_xerial_compress(data: &[u8]) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(XERIAL_HEADER_LEN + data.len() / 2 + 64);
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut enc = snap::raw::Encoder::new();
    for chunk in data.chunks(XERIAL_BLOCK) {
        let len_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let start = out.len();
        out.resize(start + snap::raw::max_compress_len(chunk.len()), 0);
        let dst = out.get_mut(start..).unwrap_or_default();
        let n = enc
            .compress(chunk, dst)
            .map_err(|e| EncodeError::Compression(format!("snappy: {e}")))?;
        out.truncate(start + n);
        let n32 = u32::try_from(n)
            .map_err(|_| EncodeError::Compression("snappy: block too large".into()))?;
        if let Some(len_field) = out.get_mut(len_at..len_at + 4) {
            len_field.copy_from_slice(&n32.to_be_bytes());
        }
    }
    Ok(out)
}

/// Decompresses xerial-framed snappy, or one raw snappy block when the xerial magic is absent.
fn snappy_decompress(data: &[u8], max: usize) -> Result<Vec<u8>, DecodeError> {
    if !data.starts_with(&XERIAL_MAGIC) {
        let mut out = Vec::new();
        snappy_raw_block(data, &mut out, max)?;
        return Ok(out);
    }
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        if rest.starts_with(&XERIAL_MAGIC) {
            // A stream header: at the start, or where two streams were concatenated.
            rest = rest.get(XERIAL_HEADER_LEN..).ok_or_else(|| {
                DecodeError::Compression("snappy: truncated xerial header".into())
            })?;
            continue;
        }
        let (len, after) = match rest.split_first_chunk::<4>() {
            Some((len, after)) => (u32::from_be_bytes(*len), after),
            None => {
                return Err(DecodeError::Compression(
                    "snappy: truncated xerial block length".into(),
                ))
            }
        };
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > after.len() || len > i32::MAX as usize {
            return Err(DecodeError::Compression(format!(
                "snappy: xerial block of {len} bytes exceeds the {} that remain",
                after.len()
            )));
        }
        let (block, next) = after.split_at(len);
        snappy_raw_block(block, &mut out, max)?;
        rest = next;
    }
    Ok(out)
}

/// Appends one raw snappy block to `out`, checking its declared length against `max` first.
fn snappy_raw_block(block: &[u8], out: &mut Vec<u8>, max: usize) -> Result<(), DecodeError> {
    let n = snap::raw::decompress_len(block)
        .map_err(|e| DecodeError::Compression(format!("snappy: {e}")))?;
    if n > max.saturating_sub(out.len()) {
        return Err(DecodeError::DecompressedTooLarge(max));
    }
    let start = out.len();
    out.resize(start + n, 0);
    let dst = out.get_mut(start..).unwrap_or_default();
    let written = snap::raw::Decoder::new()
        .decompress(block, dst)
        .map_err(|e| DecodeError::Compression(format!("snappy: {e}")))?;
    if written != n {
        return Err(DecodeError::Compression(
            "snappy: block shorter than its declared length".into(),
        ));
    }
    Ok(())
}

/// For a magic-0 lz4 frame: a copy of its frame descriptor with the header checksum recomputed
/// correctly, and the descriptor's length, so a standard decoder accepts Kafka's broken checksum.
/// `None` when the input does not start like an LZ4 frame (the decoder then reports the error).
fn lz4_fix_header_checksum(data: &[u8]) -> Option<([u8; 15], usize)> {
    if !data.starts_with(&LZ4_MAGIC) {
        return None;
    }
    let flg = *data.get(4)?;
    let desc_len = if flg & 0x08 != 0 { 10 } else { 2 };
    let hc_at = 4 + desc_len;
    let total = hc_at + 1;
    let mut head = [0u8; 15];
    head.get_mut(..total)?.copy_from_slice(data.get(..total)?);
    let hc = lz4_header_checksum(head.get(4..hc_at)?);
    *head.get_mut(hc_at)? = hc;
    Some((head, total))
}

/// The LZ4 frame header checksum byte: the second byte of XXH32(seed 0) of `bytes`.
fn lz4_header_checksum(bytes: &[u8]) -> u8 {
    (xxh32_short(bytes) >> 8) as u8
}

const P1: u32 = 0x9E37_79B1;
const P2: u32 = 0x85EB_CA77;
const P3: u32 = 0xC2B2_AE3D;
const P4: u32 = 0x27D4_EB2F;
const P5: u32 = 0x1656_67B1;

/// XXH32 with seed 0 for inputs shorter than 16 bytes (all an LZ4 frame descriptor needs).
fn xxh32_short(bytes: &[u8]) -> u32 {
    debug_assert!(bytes.len() < 16);
    let mut h = P5.wrapping_add(bytes.len() as u32);
    let mut words = bytes.chunks_exact(4);
    for w in words.by_ref() {
        let mut v = [0u8; 4];
        v.copy_from_slice(w);
        h = h.wrapping_add(u32::from_le_bytes(v).wrapping_mul(P3));
        h = h.rotate_left(17).wrapping_mul(P4);
    }
    for &b in words.remainder() {
        h = h.wrapping_add(u32::from(b).wrapping_mul(P5));
        h = h.rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 15;
    h = h.wrapping_mul(P2);
    h ^= h >> 13;
    h = h.wrapping_mul(P3);
    h ^= h >> 16;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh32_known_answers() {
        // Reference values of XXH32 with seed 0.
        assert_eq!(xxh32_short(b""), 0x02CC_5D05);
        assert_eq!(xxh32_short(b"a"), 0x550D_7456);
        assert_eq!(xxh32_short(b"abc"), 0x32D1_53FF);
    }

    #[test]
    fn lz4_frame_header_is_what_kafka_writes() {
        let out = compress(Compression::Lz4, b"hello hello hello").unwrap();
        assert_eq!(&out[..4], &LZ4_MAGIC);
        // FLG: version 01, block independence, nothing else. BD: 64 KiB blocks.
        assert_eq!(out[4], 0b0110_0000);
        assert_eq!(out[5], 0b0100_0000);
        assert_eq!(out[6], lz4_header_checksum(&out[4..6]));
        let v0 = compress_for_magic(Compression::Lz4, 0, b"hello hello hello").unwrap();
        assert_eq!(v0[6], lz4_header_checksum(&v0[..6]));
        assert_ne!(v0[6], out[6]);
        // Magic 0 decoding ignores the descriptor checksum; magic 1+ checks it.
        assert_eq!(
            decompress_for_magic(Compression::Lz4, 0, &v0, 100).unwrap(),
            b"hello hello hello"
        );
        assert!(decompress_for_magic(Compression::Lz4, 1, &v0, 100).is_err());
    }

    #[test]
    fn zstd_window_cap() {
        assert_eq!(zstd_window_log_max(0), ZSTD_MIN_WINDOW_LOG);
        assert_eq!(zstd_window_log_max(1 << 26), 27);
        assert_eq!(zstd_window_log_max(usize::MAX), ZSTD_MAX_WINDOW_LOG);
    }
}
