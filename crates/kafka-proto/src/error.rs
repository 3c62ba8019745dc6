//! Errors of the codec. Every way bytes from the network can be wrong has a variant here, so the
//! server can choose between answering with a Kafka error code and closing the connection.

use thiserror::Error;

/// Why bytes could not be decoded. Returned by every decoder in this crate; decoders never panic.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The input ended before a field was complete.
    #[error("truncated input: {needed} bytes needed, {remaining} remain")]
    Truncated {
        /// Bytes the field needed.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A null (any negative length, as Kafka reads it) where the field is not nullable, or a
    /// negative length where no null exists (records, frames).
    #[error("invalid length {0}")]
    InvalidLength(i64),
    /// A length or count prefix claims more bytes or elements than the input still holds
    /// (the KAFKA-14063 case); rejected before allocating.
    #[error("length {claimed} exceeds the {remaining} bytes that remain")]
    LengthExceedsInput {
        /// What the prefix claimed.
        claimed: u64,
        /// Bytes left in the input.
        remaining: usize,
    },
    /// A varint ran over its maximum width (5 bytes for 32 bits, 10 for 64).
    #[error("varint is longer than {max_bytes} bytes")]
    VarintOverflow {
        /// The widest encoding allowed for the type.
        max_bytes: usize,
    },
    /// A compact string's length is above 32767, the most Kafka's readers accept ("string
    /// field had invalid length").
    #[error("string length {0} exceeds 32767")]
    StringTooLong(u64),
    /// A tagged field with a tag this struct defines, in a version where that field does not
    /// exist (Kafka's readers refuse it: "Tag N is not valid for version V").
    #[error("tag {tag} is not valid for version {version}")]
    TagNotValidForVersion {
        /// The tag.
        tag: u32,
        /// The version being decoded.
        version: i16,
    },
    /// Bytes were left over after a message was fully decoded.
    #[error("{0} unexpected trailing bytes")]
    TrailingBytes(usize),
    /// The API key is not one this codec knows.
    #[error("unsupported API key {0}")]
    UnsupportedApiKey(i16),
    /// The API is known but this version of it is not supported.
    #[error("unsupported version {version} of API key {api_key}")]
    UnsupportedVersion {
        /// The request's API key.
        api_key: i16,
        /// The version asked for.
        version: i16,
    },
    /// A frame's size prefix is above the configured maximum (socket.request.max.bytes).
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// The size the prefix claimed.
        size: u64,
        /// The configured limit.
        max: u64,
    },
    /// A frame's size prefix was negative.
    #[error("negative frame size {0}")]
    NegativeFrameSize(i32),
    /// A record batch or message set is malformed (the text says how).
    #[error("malformed records: {0}")]
    MalformedRecords(&'static str),
    /// A checksum did not match the bytes it covers.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// The checksum carried in the input.
        stored: u32,
        /// The checksum computed over the covered bytes.
        computed: u32,
    },
    /// The record batch's magic byte is one this codec does not read.
    #[error("unsupported record format magic {0}")]
    UnsupportedMagic(i8),
    /// The compression codec id is unknown, or decompression failed.
    #[error("compression: {0}")]
    Compression(String),
    /// Decompressed data would exceed the configured bound.
    #[error("decompressed size exceeds the limit of {0} bytes")]
    DecompressedTooLarge(usize),
}

/// Why a value could not be encoded at a version.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EncodeError {
    /// The API or version is not supported by this codec.
    #[error("unsupported version {version} of API key {api_key}")]
    UnsupportedVersion {
        /// The API key.
        api_key: i16,
        /// The version asked for.
        version: i16,
    },
    /// A string, bytes or array is too long for its length prefix.
    #[error("{what} of length {len} does not fit its length prefix")]
    TooLong {
        /// Which kind of value.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// A null value in a field that is not nullable at this version.
    #[error("null value in non-nullable field {0}")]
    NullNotAllowed(&'static str),
    /// Compression failed.
    #[error("compression: {0}")]
    Compression(String),
}

/// Result of a decode.
pub type DecodeResult<T> = Result<T, DecodeError>;
