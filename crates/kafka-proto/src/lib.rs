//! Kafka wire protocol codec. No I/O.
//!
//! Layout:
//! - [`error`]: decode and encode errors.
//! - [`primitives`]: the bounds-checked [`primitives::Decoder`] and chunked [`primitives::Encoder`].

pub mod error;
pub mod primitives;

pub use error::{DecodeError, EncodeError};
pub use primitives::{Decoder, Encoder, RecordChunks, Uuid};
