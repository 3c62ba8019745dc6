//! Kafka wire protocol codec. No I/O.
//!
//! Layout:
//! - [`error`]: decode and encode errors.
//! - [`primitives`]: the bounds-checked [`primitives::Decoder`] and chunked [`primitives::Encoder`].
//! - [`records`]: v2 record batches, compression, legacy message sets.
//! - [`error_code`]: Kafka's error codes.
//! - [`api`]: the supported APIs, their version ranges and header versions.
//! - [`header`]: request and response headers.
//! - [`messages`]: request and response bodies, generated from `schema/` by `build.rs`.
//! - [`frame`]: whole frames (size prefix, header, body) and the unsupported-version paths.

pub mod api;
pub mod error;
pub mod error_code;
pub mod frame;
pub mod header;
pub mod messages;
pub mod primitives;
pub mod records;

pub use api::ApiKey;
pub use error::{DecodeError, EncodeError};
pub use frame::{
    decode_request, decode_response, encode_request, encode_response, Request, RequestError,
    Response,
};
pub use header::{RequestHeader, ResponseHeader};
pub use primitives::{Decoder, Encoder, RecordChunks, Uuid};
