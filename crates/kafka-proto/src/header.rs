//! Request and response headers.
//!
//! Request header v0: api_key, api_version, correlation_id. v1 adds client_id, a classic
//! nullable string (INT16 length) in every header version, even the flexible v2. v2 adds a
//! tagged-field section. Response header v0 is the correlation id; v1 adds a tagged-field
//! section. Which version goes with which request is decided in [`crate::api`].

use crate::error::{DecodeError, EncodeError};
use crate::primitives::{Decoder, Encoder, RawTaggedField};

/// A request header (versions 0-2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    /// The API key of the request.
    pub api_key: i16,
    /// The version of the request body.
    pub api_version: i16,
    /// Echoed in the response so the client can match it.
    pub correlation_id: i32,
    /// The client's id (header v1+); `Some("")` when absent (v0), as Kafka defaults it.
    pub client_id: Option<String>,
    /// Tagged fields of header v2 (none are defined; kept for the round trip).
    pub unknown_tagged_fields: Vec<RawTaggedField>,
}

impl Default for RequestHeader {
    fn default() -> Self {
        RequestHeader {
            api_key: 0,
            api_version: 0,
            correlation_id: 0,
            client_id: Some(String::new()),
            unknown_tagged_fields: Vec::new(),
        }
    }
}

impl RequestHeader {
    /// Decodes a request header of `header_version` (0, 1 or 2).
    pub fn decode(d: &mut Decoder, header_version: i16) -> Result<Self, DecodeError> {
        let mut h = RequestHeader {
            api_key: d.i16()?,
            api_version: d.i16()?,
            correlation_id: d.i32()?,
            ..RequestHeader::default()
        };
        if header_version >= 1 {
            h.client_id = d.nullable_string(false)?;
        }
        if header_version >= 2 {
            d.tagged_fields(|tag, data| {
                h.unknown_tagged_fields.push(RawTaggedField { tag, data });
                Ok(())
            })?;
        }
        Ok(h)
    }

    /// Encodes this header at `header_version` (0, 1 or 2).
    pub fn encode(&self, e: &mut Encoder, header_version: i16) -> Result<(), EncodeError> {
        e.i16(self.api_key);
        e.i16(self.api_version);
        e.i32(self.correlation_id);
        if header_version >= 1 {
            e.nullable_string(self.client_id.as_deref(), false)?;
        }
        if header_version >= 2 {
            write_raw_tagged(e, &self.unknown_tagged_fields)?;
        }
        Ok(())
    }
}

/// A response header (versions 0-1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResponseHeader {
    /// The correlation id of the request this answers.
    pub correlation_id: i32,
    /// Tagged fields of header v1 (none are defined; kept for the round trip).
    pub unknown_tagged_fields: Vec<RawTaggedField>,
}

impl ResponseHeader {
    /// Decodes a response header of `header_version` (0 or 1).
    pub fn decode(d: &mut Decoder, header_version: i16) -> Result<Self, DecodeError> {
        let mut h = ResponseHeader {
            correlation_id: d.i32()?,
            unknown_tagged_fields: Vec::new(),
        };
        if header_version >= 1 {
            d.tagged_fields(|tag, data| {
                h.unknown_tagged_fields.push(RawTaggedField { tag, data });
                Ok(())
            })?;
        }
        Ok(h)
    }

    /// Encodes this header at `header_version` (0 or 1).
    pub fn encode(&self, e: &mut Encoder, header_version: i16) -> Result<(), EncodeError> {
        e.i32(self.correlation_id);
        if header_version >= 1 {
            write_raw_tagged(e, &self.unknown_tagged_fields)?;
        }
        Ok(())
    }
}

fn write_raw_tagged(e: &mut Encoder, fields: &[RawTaggedField]) -> Result<(), EncodeError> {
    let too_long = |len| EncodeError::TooLong {
        what: "tagged fields",
        len,
    };
    e.unsigned_varint(u32::try_from(fields.len()).map_err(|_| too_long(fields.len()))?);
    for f in fields {
        e.unsigned_varint(f.tag);
        e.unsigned_varint(u32::try_from(f.data.len()).map_err(|_| too_long(f.data.len()))?);
        e.put_chunk(f.data.clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn request_header_versions() {
        let h = RequestHeader {
            api_key: 18,
            api_version: 4,
            correlation_id: 7,
            client_id: Some("cli".into()),
            unknown_tagged_fields: vec![],
        };
        let mut e = Encoder::new();
        h.encode(&mut e, 2).unwrap();
        assert_eq!(
            e.into_bytes().as_ref(),
            &[0, 18, 0, 4, 0, 0, 0, 7, 0, 3, b'c', b'l', b'i', 0]
        );
        let mut e = Encoder::new();
        h.encode(&mut e, 1).unwrap();
        let mut d = Decoder::new(e.into_bytes());
        assert_eq!(RequestHeader::decode(&mut d, 1).unwrap(), h);
        d.finish().unwrap();
        // Null client id.
        let mut d = Decoder::new(Bytes::from_static(&[0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0]));
        let h = RequestHeader::decode(&mut d, 2).unwrap();
        assert_eq!(h.client_id, None);
        d.finish().unwrap();
        // v0 has no client id.
        let mut d = Decoder::new(Bytes::from_static(&[0, 3, 0, 1, 0, 0, 0, 1]));
        let h = RequestHeader::decode(&mut d, 0).unwrap();
        assert_eq!(h.client_id, Some(String::new()));
    }

    #[test]
    fn response_header_versions() {
        let h = ResponseHeader {
            correlation_id: 258,
            unknown_tagged_fields: vec![],
        };
        let mut e = Encoder::new();
        h.encode(&mut e, 0).unwrap();
        assert_eq!(e.into_bytes().as_ref(), &[0, 0, 1, 2]);
        let mut e = Encoder::new();
        h.encode(&mut e, 1).unwrap();
        assert_eq!(e.into_bytes().as_ref(), &[0, 0, 1, 2, 0]);
    }
}
