//! Whole frames: the 4-byte size prefix, the header and the body.
//!
//! On the wire every request and response is `size: INT32` followed by `size` bytes of header and
//! body. A server reads the prefix, checks it with [`read_frame_size`], reads that many bytes and
//! hands them to [`decode_request`]; it answers with [`encode_response`], whose segments can be
//! written with vectored I/O (record data is not copied). [`encode_request`] and
//! [`decode_response`] are the client side.

use bytes::{Bytes, BytesMut};
use thiserror::Error;

use crate::api::{for_each_api, request_header_version, response_header_version, ApiKey};
use crate::error::{DecodeError, EncodeError};
use crate::header::{RequestHeader, ResponseHeader};
use crate::messages::api_versions_response::ApiVersion;
use crate::messages::*;
use crate::primitives::{Decoder, Encoder};

/// Kafka's default `socket.request.max.bytes` (100 MiB): the largest request frame accepted.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 104_857_600;

/// Kafka's UNSUPPORTED_VERSION error code.
pub const UNSUPPORTED_VERSION: i16 = 35;

/// Checks a frame's 4-byte size prefix before anything is allocated for the frame: negative sizes
/// and sizes above `max_bytes` are errors; a size of exactly `max_bytes` is accepted.
pub fn read_frame_size(prefix: [u8; 4], max_bytes: usize) -> Result<usize, DecodeError> {
    let size = i32::from_be_bytes(prefix);
    let Ok(size) = usize::try_from(size) else {
        return Err(DecodeError::NegativeFrameSize(size));
    };
    if size > max_bytes {
        return Err(DecodeError::FrameTooLarge {
            size: size as u64,
            max: max_bytes as u64,
        });
    }
    Ok(size)
}

macro_rules! define_frames {
    ($($variant:ident = $key:literal, $name:literal, $lo:literal..=$hi:literal, $req:ident, $resp:ident;)*) => {
        /// A request body of any supported API.
        #[derive(Debug, Clone, PartialEq)]
        #[allow(clippy::large_enum_variant)]
        pub enum Request {
            $(
                #[doc = concat!("A `", stringify!($req), "`.")]
                $variant($req),
            )*
        }

        /// A response body of any supported API.
        #[derive(Debug, Clone, PartialEq)]
        #[allow(clippy::large_enum_variant)]
        pub enum Response {
            $(
                #[doc = concat!("A `", stringify!($resp), "`.")]
                $variant($resp),
            )*
        }

        impl Request {
            /// The API this request belongs to.
            pub fn api_key(&self) -> ApiKey {
                match self {
                    $(Request::$variant(_) => ApiKey::$variant,)*
                }
            }

            /// Decodes the body of a request of `api` at `version`.
            pub fn decode(api: ApiKey, d: &mut Decoder, version: i16) -> Result<Request, DecodeError> {
                Ok(match api {
                    $(ApiKey::$variant => Request::$variant($req::decode(d, version)?),)*
                })
            }

            /// Encodes the body at `version`.
            pub fn encode(&self, e: &mut Encoder, version: i16) -> Result<(), EncodeError> {
                match self {
                    $(Request::$variant(m) => m.encode(e, version),)*
                }
            }
        }

        impl Response {
            /// The API this response belongs to.
            pub fn api_key(&self) -> ApiKey {
                match self {
                    $(Response::$variant(_) => ApiKey::$variant,)*
                }
            }

            /// Decodes the body of a response of `api` at `version`.
            pub fn decode(api: ApiKey, d: &mut Decoder, version: i16) -> Result<Response, DecodeError> {
                Ok(match api {
                    $(ApiKey::$variant => Response::$variant($resp::decode(d, version)?),)*
                })
            }

            /// Encodes the body at `version`.
            pub fn encode(&self, e: &mut Encoder, version: i16) -> Result<(), EncodeError> {
                match self {
                    $(Response::$variant(m) => m.encode(e, version),)*
                }
            }
        }

        $(
            impl From<$req> for Request {
                fn from(m: $req) -> Request {
                    Request::$variant(m)
                }
            }
            impl From<$resp> for Response {
                fn from(m: $resp) -> Response {
                    Response::$variant(m)
                }
            }
        )*
    };
}
for_each_api!(define_frames);

/// Why a request frame could not be decoded. Every variant but [`RequestError::Truncated`]
/// carries what the server needs to answer: the correlation id, API key and version.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    /// The frame is too short to hold the API key, version and correlation id.
    #[error("request frame too short for a header: {0}")]
    Truncated(DecodeError),
    /// The API key is not one this codec supports. Kafka closes the connection (its
    /// `RequestHeader.parse` fails on an unknown key); so should the server.
    #[error(
        "unsupported API key {api_key} (version {api_version}, correlation id {correlation_id})"
    )]
    UnsupportedApiKey {
        /// The API key sent.
        api_key: i16,
        /// The version sent.
        api_version: i16,
        /// The correlation id sent.
        correlation_id: i32,
    },
    /// The API is supported but not at this version. For ApiVersions the answer is the
    /// v0-format response of [`encode_api_versions_fallback`] with UNSUPPORTED_VERSION (KIP-511;
    /// only the API key, version and correlation id are read). For any other API Kafka 3.9 answers nothing
    /// and closes the connection (`SocketServer.parseRequestHeader`: "Received request api key
    /// ... with version ... which is not enabled"); so should the server.
    #[error("unsupported version {api_version} of {api_key} (correlation id {correlation_id})")]
    UnsupportedVersion {
        /// The API.
        api_key: ApiKey,
        /// The version sent.
        api_version: i16,
        /// The correlation id sent.
        correlation_id: i32,
    },
    /// The header or body is malformed (Kafka closes the connection).
    #[error(
        "malformed {api_key} v{api_version} request (correlation id {correlation_id}): {error}"
    )]
    Malformed {
        /// The API.
        api_key: ApiKey,
        /// The version sent.
        api_version: i16,
        /// The correlation id sent.
        correlation_id: i32,
        /// What was wrong.
        error: DecodeError,
    },
}

impl RequestError {
    /// The correlation id, when the frame was long enough to carry one.
    pub fn correlation_id(&self) -> Option<i32> {
        match self {
            RequestError::Truncated(_) => None,
            RequestError::UnsupportedApiKey { correlation_id, .. }
            | RequestError::UnsupportedVersion { correlation_id, .. }
            | RequestError::Malformed { correlation_id, .. } => Some(*correlation_id),
        }
    }

    /// The Kafka error code this request is answered with, if it is answered at all: only an
    /// ApiVersions request of an unsupported version is (UNSUPPORTED_VERSION, 35, in the
    /// [`RequestError::api_versions_fallback`] frame). Every other error closes the connection
    /// without an answer, as Kafka 3.9 does: `None`.
    pub fn error_code(&self) -> Option<i16> {
        match self {
            RequestError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                ..
            } => Some(UNSUPPORTED_VERSION),
            _ => None,
        }
    }

    /// For an ApiVersions request of a version newer than supported: the framed response
    /// Kafka sends (KIP-511), a v0-format ApiVersionsResponse with error 35 listing the
    /// supported ApiVersions range, from which the client picks a version to retry with.
    pub fn api_versions_fallback(&self) -> Option<Result<Vec<Bytes>, EncodeError>> {
        match self {
            RequestError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                correlation_id,
                ..
            } => Some(encode_api_versions_fallback(*correlation_id)),
            _ => None,
        }
    }
}

/// Decodes a request frame (header and body, without the size prefix). The API key, version and
/// correlation id are read first, so an unsupported API or version is reported with them (see
/// [`RequestError`]). Bytes left after the body are ignored, as Kafka ignores them. Byte fields
/// of the result (record data included) are zero-copy slices of `frame`. What is tolerated and
/// what is refused follows Apache Kafka 3.9's parser request by request (crate README,
/// "Strictness, request by request").
pub fn decode_request(frame: Bytes) -> Result<(RequestHeader, Request), RequestError> {
    let mut d = Decoder::new(frame);
    let (api_key, api_version, correlation_id) = {
        let mut peek = d.clone();
        let fixed = (|| Ok::<_, DecodeError>((peek.i16()?, peek.i16()?, peek.i32()?)))();
        fixed.map_err(RequestError::Truncated)?
    };
    let Some(api) = ApiKey::from_i16(api_key) else {
        return Err(RequestError::UnsupportedApiKey {
            api_key,
            api_version,
            correlation_id,
        });
    };
    let malformed = |error| RequestError::Malformed {
        api_key: api,
        api_version,
        correlation_id,
        error,
    };
    if !api.supports(api_version) {
        // Kafka parses the header of an ApiVersions request of any version before falling back
        // (and closes the connection when it cannot); we answer without reading it, which the
        // server's bad-input test relies on (crate README, "Strictness, request by request").
        return Err(RequestError::UnsupportedVersion {
            api_key: api,
            api_version,
            correlation_id,
        });
    }
    let header = RequestHeader::decode(&mut d, request_header_version(api, api_version))
        .map_err(malformed)?;
    let body = Request::decode(api, &mut d, api_version).map_err(malformed)?;
    // Bytes after a complete body are ignored, as Apache Kafka's request parser does (it never
    // checks that the frame was consumed). Real clients send them: librdkafka 2.16's
    // all-topics Metadata v12 request carries 3 bytes past its tagged fields. A truncated body
    // is still an error.
    Ok((header, body))
}

/// Encodes a response frame: size prefix, response header (version chosen per API and version),
/// body. The segments, concatenated, are the frame; record chunks are not copied.
pub fn encode_response(
    correlation_id: i32,
    api_version: i16,
    response: &Response,
) -> Result<Vec<Bytes>, EncodeError> {
    let api = response.api_key();
    let header = ResponseHeader {
        correlation_id,
        unknown_tagged_fields: Vec::new(),
    };
    framed(|e| {
        header.encode(e, response_header_version(api, api_version))?;
        response.encode(e, api_version)
    })
}

/// Encodes a request frame: size prefix, request header (version chosen per API and version),
/// body at `header.api_version`. The header's API key must be the request's.
pub fn encode_request(
    header: &RequestHeader,
    request: &Request,
) -> Result<Vec<Bytes>, EncodeError> {
    let api = request.api_key();
    if header.api_key != api.as_i16() {
        return Err(EncodeError::UnsupportedVersion {
            api_key: header.api_key,
            version: header.api_version,
        });
    }
    framed(|e| {
        header.encode(e, request_header_version(api, header.api_version))?;
        request.encode(e, header.api_version)
    })
}

/// Decodes a response frame (header and body, without the size prefix) to a request of `api` at
/// `api_version`. Like Kafka's client, an ApiVersions response that does not parse at the
/// requested version is parsed again as v0 (the KIP-511 fallback a broker sends when the request
/// version was too new).
pub fn decode_response(
    api: ApiKey,
    api_version: i16,
    frame: Bytes,
) -> Result<(ResponseHeader, Response), DecodeError> {
    if !api.supports(api_version) {
        return Err(DecodeError::UnsupportedVersion {
            api_key: api.as_i16(),
            version: api_version,
        });
    }
    let mut d = Decoder::new(frame);
    let header = ResponseHeader::decode(&mut d, response_header_version(api, api_version))?;
    let body_start = d.clone();
    let parse = |mut d: Decoder, version: i16| -> Result<Response, DecodeError> {
        let body = Response::decode(api, &mut d, version)?;
        d.finish()?;
        Ok(body)
    };
    match parse(d, api_version) {
        Ok(body) => Ok((header, body)),
        Err(err) if api == ApiKey::ApiVersions && api_version != 0 => match parse(body_start, 0) {
            Ok(body) => Ok((header, body)),
            Err(_) => Err(err),
        },
        Err(err) => Err(err),
    }
}

/// Runs `write` on an encoder that starts with a 4-byte placeholder, then fills in the size.
fn framed(
    write: impl FnOnce(&mut Encoder) -> Result<(), EncodeError>,
) -> Result<Vec<Bytes>, EncodeError> {
    let mut e = Encoder::new();
    e.i32(0);
    write(&mut e)?;
    let len = e.len() - 4;
    let size = i32::try_from(len).map_err(|_| EncodeError::TooLong { what: "frame", len })?;
    let mut segments = e.into_segments();
    if let Some(first) = segments.first_mut() {
        // The first segment starts with the placeholder. It is usually the only reference to its
        // buffer (patched in place); otherwise only this small segment is copied.
        let mut head = std::mem::take(first)
            .try_into_mut()
            .unwrap_or_else(|b| BytesMut::from(&b[..]));
        if let Some(prefix) = head.get_mut(..4) {
            prefix.copy_from_slice(&size.to_be_bytes());
        }
        *first = head.freeze();
    }
    Ok(segments)
}

/// The supported version range of every API, as listed in an ApiVersions response.
pub fn supported_api_versions() -> Vec<ApiVersion> {
    ApiKey::ALL
        .iter()
        .map(|api| ApiVersion {
            api_key: api.as_i16(),
            min_version: api.lowest_version(),
            max_version: api.highest_version(),
            ..ApiVersion::default()
        })
        .collect()
}

/// Our own ApiVersionsResponse: no error, every supported API with its range, no throttling, no
/// features.
pub fn api_versions_response() -> ApiVersionsResponse {
    ApiVersionsResponse {
        error_code: 0,
        api_keys: supported_api_versions(),
        ..ApiVersionsResponse::default()
    }
}

/// The body an ApiVersions request of an unsupported (too new) version is answered with
/// (KIP-511): error UNSUPPORTED_VERSION and every range we support. Apache Kafka's broker lists
/// only the ApiVersions range here; clients read just that entry to pick their retry version
/// (Java looks it up by key, librdkafka retries lower), so listing everything is compatible and
/// also tells the client our other ranges in the first round trip.
pub fn unsupported_api_versions_response() -> ApiVersionsResponse {
    ApiVersionsResponse {
        error_code: UNSUPPORTED_VERSION,
        api_keys: supported_api_versions(),
        ..ApiVersionsResponse::default()
    }
}

/// The framed answer to an ApiVersions request of an unsupported version: header v0 and the
/// [`unsupported_api_versions_response`] body in v0 format, whatever version was asked for.
pub fn encode_api_versions_fallback(correlation_id: i32) -> Result<Vec<Bytes>, EncodeError> {
    encode_response(
        correlation_id,
        0,
        &Response::ApiVersions(unsupported_api_versions_response()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn concat(segs: &[Bytes]) -> Vec<u8> {
        segs.iter().flat_map(|s| s.iter().copied()).collect()
    }

    #[test]
    fn frame_size_checks() {
        assert_eq!(
            read_frame_size((-1i32).to_be_bytes(), DEFAULT_MAX_FRAME_BYTES),
            Err(DecodeError::NegativeFrameSize(-1))
        );
        assert_eq!(
            read_frame_size(i32::MIN.to_be_bytes(), DEFAULT_MAX_FRAME_BYTES),
            Err(DecodeError::NegativeFrameSize(i32::MIN))
        );
        assert_eq!(
            read_frame_size(104_857_600i32.to_be_bytes(), DEFAULT_MAX_FRAME_BYTES),
            Ok(104_857_600)
        );
        assert_eq!(
            read_frame_size(104_857_601i32.to_be_bytes(), DEFAULT_MAX_FRAME_BYTES),
            Err(DecodeError::FrameTooLarge {
                size: 104_857_601,
                max: 104_857_600
            })
        );
        assert_eq!(
            read_frame_size(i32::MAX.to_be_bytes(), DEFAULT_MAX_FRAME_BYTES),
            Err(DecodeError::FrameTooLarge {
                size: i32::MAX as u64,
                max: 104_857_600
            })
        );
        assert_eq!(read_frame_size([0; 4], 0), Ok(0));
        assert_eq!(read_frame_size([0, 0, 0, 10], 10), Ok(10));
        assert!(read_frame_size([0, 0, 0, 11], 10).is_err());
    }

    #[test]
    fn api_versions_fallback_bytes() {
        // ApiVersions v5 from a future client: header v2 (flexible), a body we cannot parse.
        let frame = Bytes::from_static(&[
            0, 18, 0, 5, 0, 0, 0, 42, 0, 3, b'c', b'l', b'i', 0, 0xde, 0xad,
        ]);
        let err = decode_request(frame).unwrap_err();
        assert_eq!(
            err,
            RequestError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                api_version: 5,
                correlation_id: 42
            }
        );
        assert_eq!(err.correlation_id(), Some(42));
        assert_eq!(err.error_code(), Some(35));

        let segs = err.api_versions_fallback().unwrap().unwrap();
        let apis = ApiKey::ALL.len();
        let size = u32::try_from(10 + 6 * apis).unwrap().to_be_bytes();
        let count = u32::try_from(apis).unwrap().to_be_bytes();
        #[rustfmt::skip]
        let head: &[u8] = &[
            size[0], size[1], size[2], size[3],    // size
            0, 0, 0, 42,                           // correlation id (header v0)
            0, 35,                                 // error_code UNSUPPORTED_VERSION
            count[0], count[1], count[2], count[3], // api_keys: INT32 count, v0 format
        ];
        let bytes = concat(&segs);
        assert_eq!(&bytes[..head.len()], head);
        assert_eq!(
            bytes.len(),
            head.len() + 6 * apis,
            "v0 body: no throttle, no tags"
        );
        // Each entry is (key, min, max) as INT16s; ApiVersions 0..=4 among them.
        let entries: Vec<[i16; 3]> = bytes[head.len()..]
            .chunks(6)
            .map(|c| {
                [
                    i16::from_be_bytes([c[0], c[1]]),
                    i16::from_be_bytes([c[2], c[3]]),
                    i16::from_be_bytes([c[4], c[5]]),
                ]
            })
            .collect();
        assert!(entries.contains(&[18, 0, 4]));
        assert!(entries.contains(&[0, 0, 12]), "Produce 0..=12 listed");
        let expected = bytes;
        // A client reading it as v3 falls back to v0, like Kafka's.
        let (h, r) = decode_response(
            ApiKey::ApiVersions,
            3,
            Bytes::copy_from_slice(&expected[4..]),
        )
        .unwrap();
        assert_eq!(h.correlation_id, 42);
        assert_eq!(
            r,
            Response::ApiVersions(unsupported_api_versions_response())
        );
    }

    #[test]
    fn unsupported_version_and_key_keep_the_header() {
        // Produce v13 (too new).
        let frame = Bytes::from_static(&[0, 0, 0, 13, 0, 0, 1, 0, 0, 0, 0]);
        let err = decode_request(frame).unwrap_err();
        assert_eq!(
            err,
            RequestError::UnsupportedVersion {
                api_key: ApiKey::Produce,
                api_version: 13,
                correlation_id: 256
            }
        );
        // Kafka answers nothing and closes the connection.
        assert_eq!(err.error_code(), None);
        // Negative version.
        let frame = Bytes::from_static(&[0, 3, 0xff, 0xff, 0, 0, 0, 9]);
        assert!(matches!(
            decode_request(frame).unwrap_err(),
            RequestError::UnsupportedVersion {
                api_version: -1,
                correlation_id: 9,
                ..
            }
        ));
        // Unknown API key 4 (LeaderAndIsr).
        let frame = Bytes::from_static(&[0, 4, 0, 1, 0, 0, 0, 7, 0xff, 0xff]);
        let err = decode_request(frame).unwrap_err();
        assert_eq!(
            err,
            RequestError::UnsupportedApiKey {
                api_key: 4,
                api_version: 1,
                correlation_id: 7
            }
        );
        assert_eq!(err.error_code(), None, "Kafka closes the connection");
        assert!(err.api_versions_fallback().is_none());
        // Too short for a header.
        assert!(matches!(
            decode_request(Bytes::from_static(&[0, 18, 0])).unwrap_err(),
            RequestError::Truncated(_)
        ));
    }

    #[test]
    fn trailing_bytes_after_a_request_body_are_ignored_as_kafka_does() {
        // ApiVersions v0, header v1 with null client id, empty body, one extra byte.
        let frame = Bytes::from_static(&[0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 7]);
        let (h, r) = decode_request(frame).unwrap();
        assert_eq!(h.client_id, None);
        assert_eq!(r, Request::ApiVersions(ApiVersionsRequest::default()));
        let frame = Bytes::from_static(&[0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff]);
        let (_, r2) = decode_request(frame).unwrap();
        assert_eq!(r2, r);
        // Captured from confluent-kafka 2.16.1 (librdkafka 2.16): AdminClient.list_topics()
        // without a topic. Metadata v12, header v2 (client id "rdkafka", no tagged fields), then
        // a 4-byte body (null topics, no auto-creation, no authorized operations, no tagged
        // fields) and 3 more bytes.
        let mut frame = vec![0, 3, 0, 12, 0, 0, 0, 3, 0, 7];
        frame.extend_from_slice(b"rdkafka");
        frame.push(0);
        frame.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0]);
        let (h, r) = decode_request(Bytes::from(frame)).unwrap();
        assert_eq!((h.api_key, h.api_version, h.correlation_id), (3, 12, 3));
        let Request::Metadata(m) = r else {
            panic!("not a Metadata request")
        };
        assert_eq!(m.topics, None, "all topics");
        assert!(!m.allow_auto_topic_creation);
        // A body cut short is still malformed.
        let frame = Bytes::from_static(&[0, 3, 0, 12, 0, 0, 0, 3, 0xff, 0xff, 0, 0]);
        assert!(matches!(
            decode_request(frame).unwrap_err(),
            RequestError::Malformed { .. }
        ));
    }

    #[test]
    fn our_api_versions_response() {
        let r = api_versions_response();
        assert_eq!(r.api_keys.len(), crate::api::tests::schema_pairs());
        let fetch = r.api_keys.iter().find(|k| k.api_key == 1).unwrap();
        assert_eq!((fetch.min_version, fetch.max_version), (0, 17));
        // v3 response: header v0, flexible body.
        let segs = encode_response(5, 3, &Response::ApiVersions(r.clone())).unwrap();
        let bytes = concat(&segs);
        let size = read_frame_size([bytes[0], bytes[1], bytes[2], bytes[3]], 1 << 20).unwrap();
        assert_eq!(size, bytes.len() - 4);
        let (h, back) =
            decode_response(ApiKey::ApiVersions, 3, Bytes::copy_from_slice(&bytes[4..])).unwrap();
        assert_eq!(h.correlation_id, 5);
        assert_eq!(back, Response::ApiVersions(r));
        // Header v0: the body starts right after the correlation id with error_code 0.
        assert_eq!(&bytes[4..10], &[0, 0, 0, 5, 0, 0]);
    }

    #[test]
    fn record_chunks_are_not_copied() {
        use crate::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        let chunk = Bytes::from(vec![9u8; 4096]);
        let resp = FetchResponse {
            responses: vec![FetchableTopicResponse {
                topic: "t".into(),
                partitions: vec![PartitionData {
                    records: Some(crate::RecordChunks::from_chunks(vec![
                        chunk.clone(),
                        chunk.clone(),
                    ])),
                    ..PartitionData::default()
                }],
                ..FetchableTopicResponse::default()
            }],
            ..FetchResponse::default()
        };
        for v in [4, 12, 17] {
            let segs = encode_response(1, v, &Response::Fetch(resp.clone())).unwrap();
            assert!(segs.iter().filter(|s| s.as_ptr() == chunk.as_ptr()).count() == 2);
            let bytes = Bytes::from(concat(&segs));
            assert_eq!(
                i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize,
                bytes.len() - 4
            );
            let (_, back) = decode_response(ApiKey::Fetch, v, bytes.slice(4..)).unwrap();
            let Response::Fetch(back) = back else {
                panic!("not a fetch response")
            };
            let got = back.responses[0].partitions[0].records.as_ref().unwrap();
            assert!(got.len() == 8192 && got.to_contiguous().iter().all(|b| *b == 9));
        }
    }
}
