//! Strictness against Apache Kafka 3.9's request parser, shown on real client frames: every
//! test takes requests captured from kcat, confluent-kafka-python and the Java client
//! (`tests/golden/`), mutates them the way a client or a bug could, and checks that the codec
//! tolerates what Kafka tolerates and refuses what Kafka refuses. The table in the crate README
//! ("Strictness, request by request") names these tests.
//!
//! Frames are chosen by client, API and version (and content), never by file number: a
//! re-capture renumbers them. Skips with a note when the manifest is missing, like
//! `tests/golden.rs`.

use std::path::Path;

use bytes::Bytes;
use kafka_proto::api::request_header_version;
use kafka_proto::primitives::RawTaggedField;
use kafka_proto::{
    decode_request, encode_request, ApiKey, DecodeError, Encoder, Request, RequestError,
    RequestHeader,
};

/// One captured request frame (without the size prefix).
struct Captured {
    client: String,
    api_key: i16,
    api_version: i16,
    req: Bytes,
    file: String,
}

fn load() -> Option<Vec<Captured>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let Ok(text) = std::fs::read_to_string(dir.join("manifest.tsv")) else {
        eprintln!("note: tests/golden/manifest.tsv is missing; strictness tests skipped");
        return None;
    };
    let mut out = Vec::new();
    for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 7, "manifest line {line:?}");
        out.push(Captured {
            client: cols[0].to_string(),
            api_key: cols[1].parse().expect("api_key"),
            api_version: cols[3].parse().expect("api_version"),
            req: std::fs::read(dir.join(cols[5])).expect("frame").into(),
            file: cols[5].to_string(),
        });
    }
    Some(out)
}

/// Every captured request of an API this codec supports.
fn supported(all: &[Captured]) -> impl Iterator<Item = (&Captured, ApiKey)> {
    all.iter()
        .filter_map(|c| ApiKey::from_i16(c.api_key).map(|api| (c, api)))
}

/// The first captured request of `client` for `api` at `version`.
fn frame(all: &[Captured], client: &str, api: ApiKey, version: i16) -> Vec<u8> {
    all.iter()
        .find(|c| c.client == client && c.api_key == api.as_i16() && c.api_version == version)
        .unwrap_or_else(|| panic!("no captured {client} {api} v{version} request"))
        .req
        .to_vec()
}

/// kcat's Metadata v4 requests (all of them; kcat sends both an empty and a null topic list).
fn kcat_metadata(all: &[Captured]) -> impl Iterator<Item = &Captured> {
    all.iter()
        .filter(|c| c.client == "kcat" && c.api_key == 3 && c.api_version == 4)
}

fn decode(bytes: Vec<u8>) -> Result<(RequestHeader, Request), RequestError> {
    decode_request(Bytes::from(bytes))
}

/// Bytes taken by the header of a frame that decodes.
fn header_len(frame: &[u8]) -> usize {
    let (h, body) = decode(frame.to_vec()).expect("captured frame decodes");
    let mut e = Encoder::new();
    h.encode(
        &mut e,
        request_header_version(body.api_key(), h.api_version),
    )
    .unwrap();
    e.len()
}

/// Bytes taken by header and body (without any trailing bytes) of a frame that decodes.
fn header_and_body_len(frame: &[u8]) -> usize {
    let (h, body) = decode(frame.to_vec()).expect("captured frame decodes");
    let framed: usize = encode_request(&h, &body)
        .unwrap()
        .iter()
        .map(Bytes::len)
        .sum();
    framed - 4
}

fn malformed(result: Result<(RequestHeader, Request), RequestError>) -> DecodeError {
    match result {
        Err(RequestError::Malformed { error, .. }) => error,
        other => panic!("expected a malformed request, got {other:?}"),
    }
}

#[test]
fn trailing_bytes_after_any_captured_request_are_ignored() {
    let Some(all) = load() else { return };
    let mut n = 0;
    for (c, _) in supported(&all) {
        let original = decode(c.req.to_vec()).unwrap();
        let mut longer = c.req.to_vec();
        longer.extend_from_slice(&[0, 0xff, 7]);
        assert_eq!(decode(longer).unwrap(), original, "{}", c.file);
        n += 1;
    }
    eprintln!("strictness: {n} captured requests decode the same with 3 trailing bytes");
    assert!(n > 100);
}

#[test]
fn unknown_tagged_fields_in_a_v2_header_are_skipped_in_any_order() {
    let Some(all) = load() else { return };
    let mut n = 0;
    for (c, api) in supported(&all) {
        if request_header_version(api, c.api_version) != 2 {
            continue;
        }
        let (h, body) = decode(c.req.to_vec()).unwrap();
        let at = header_len(&c.req) - 1;
        assert_eq!(c.req[at], 0, "{}: no header tags captured", c.file);
        // Two fields, tag 7 before tag 3: Kafka reads them in wire order without checking it.
        let mut m = c.req[..at].to_vec();
        m.extend_from_slice(&[2, 7, 1, 0xab, 3, 0]);
        m.extend_from_slice(&c.req[at + 1..]);
        let (h2, body2) = decode(m).unwrap_or_else(|e| panic!("{}: {e}", c.file));
        assert_eq!(body2, body, "{}", c.file);
        assert_eq!(h2.client_id, h.client_id);
        assert_eq!(
            h2.unknown_tagged_fields,
            [
                RawTaggedField {
                    tag: 7,
                    data: Bytes::from_static(&[0xab])
                },
                RawTaggedField {
                    tag: 3,
                    data: Bytes::new()
                }
            ]
        );
        n += 1;
    }
    eprintln!("strictness: {n} captured v2 headers accept unknown tagged fields");
    assert!(n > 50);
}

#[test]
fn unknown_tagged_fields_in_a_body_are_kept() {
    let Some(all) = load() else { return };
    let mut n = 0;
    for (c, api) in supported(&all) {
        if !api.is_flexible(c.api_version) {
            continue;
        }
        let end = header_and_body_len(&c.req);
        if c.req[end - 1] != 0 {
            continue; // the top-level struct already carries tagged fields
        }
        // Tag 1000 (a two-byte varint) is defined by no Kafka message.
        let mut m = c.req[..end - 1].to_vec();
        m.extend_from_slice(&[1, 0xe8, 0x07, 2, 0xbe, 0xef]);
        let (h, body) = decode(m.clone()).unwrap_or_else(|e| panic!("{}: {e}", c.file));
        assert_ne!(body, decode(c.req.to_vec()).unwrap().1);
        // Everything else decoded as before, and the unknown field is written back as it came.
        let again: Vec<u8> = encode_request(&h, &body)
            .unwrap()
            .iter()
            .flat_map(|s| s.iter().copied())
            .collect();
        assert_eq!(again[4..], m[..], "{}", c.file);
        n += 1;
    }
    eprintln!("strictness: {n} captured flexible bodies keep an unknown top-level tagged field");
    assert!(n > 50);

    // In a nested struct, out of order: the Java client's DescribeProducers v0 for one topic
    // ends with the topic's tag count and the request's.
    let f = frame(&all, "java", ApiKey::DescribeProducers, 0);
    let Request::DescribeProducers(before) = decode(f.clone()).unwrap().1 else {
        panic!()
    };
    let end = header_and_body_len(&f);
    assert_eq!(f[end - 2..end], [0, 0]);
    let mut m = f[..end - 2].to_vec();
    m.extend_from_slice(&[2, 5, 0, 1, 1, 0x11, 0]);
    let Request::DescribeProducers(after) = decode(m).unwrap().1 else {
        panic!()
    };
    assert_eq!(after.topics[0].name, before.topics[0].name);
    assert_eq!(
        after.topics[0].partition_indexes,
        before.topics[0].partition_indexes
    );
    assert_eq!(
        after.topics[0].unknown_tagged_fields,
        [
            RawTaggedField {
                tag: 5,
                data: Bytes::new()
            },
            RawTaggedField {
                tag: 1,
                data: Bytes::from_static(&[0x11])
            }
        ]
    );
}

#[test]
fn null_where_the_schema_says_non_null_closes_the_connection() {
    let Some(all) = load() else { return };
    // confluent-kafka's DeleteGroups v2: header, then groups_names as a compact array.
    let f = frame(&all, "python", ApiKey::DeleteGroups, 2);
    let at = header_len(&f);
    assert_eq!(f[at], 2, "one group");
    let mut m = f.clone();
    m[at] = 0; // the array null
    assert_eq!(malformed(decode(m)), DecodeError::InvalidLength(-1));
    let mut m = f.clone();
    m[at + 1] = 0; // the group name null
    assert_eq!(malformed(decode(m)), DecodeError::InvalidLength(-1));
    // Any negative length is a null to Kafka: here -2 (varint 2^32-1 as a Java int, minus 1).
    let mut m = f[..at].to_vec();
    m.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    m.extend_from_slice(&f[at + 1..]);
    assert_eq!(malformed(decode(m)), DecodeError::InvalidLength(-1));
    // The Java client's OffsetDelete v0 (not flexible): group_id as an INT16 -1.
    let f = frame(&all, "java", ApiKey::OffsetDelete, 0);
    let at = header_len(&f);
    let mut m = f.clone();
    m[at..at + 2].copy_from_slice(&[0xff, 0xff]);
    assert_eq!(malformed(decode(m)), DecodeError::InvalidLength(-1));
}

#[test]
fn any_negative_length_is_a_null_where_the_schema_allows_null() {
    let Some(all) = load() else { return };
    // kcat's all-topics Metadata v4: topics is INT32 -1 (null), then allow_auto_topic_creation.
    let f = kcat_metadata(&all)
        .find(|c| c.req[header_len(&c.req)..][..4] == [0xff; 4])
        .expect("kcat all-topics Metadata v4 request")
        .req
        .to_vec();
    let at = header_len(&f);
    let (_, original) = decode(f.clone()).unwrap();
    let Request::Metadata(ref md) = original else {
        panic!()
    };
    assert_eq!(md.topics, None);
    for negative in [-2i32, -100, i32::MIN] {
        let mut m = f.clone();
        m[at..at + 4].copy_from_slice(&negative.to_be_bytes());
        assert_eq!(decode(m).unwrap().1, original, "{negative}");
    }
    // The Java client's DescribeLogDirs v4 for all topics: compact null (0), then no tags.
    let f = frame(&all, "java", ApiKey::DescribeLogDirs, 4);
    let at = header_len(&f);
    assert_eq!(f[at..], [0, 0]);
    let (_, original) = decode(f.clone()).unwrap();
    let mut m = f[..at].to_vec();
    m.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0]); // -2 as Kafka reads it
    assert_eq!(decode(m).unwrap().1, original);
}

#[test]
fn a_null_client_id_is_accepted() {
    let Some(all) = load() else { return };
    // kcat's Metadata v4 names itself "golden-kcat" (INT16 length 11 at offset 8).
    let f = frame(&all, "kcat", ApiKey::Metadata, 4);
    assert_eq!(f[8..10], [0, 11]);
    let (_, original) = decode(f.clone()).unwrap();
    let mut m = f[..8].to_vec();
    m.extend_from_slice(&[0xff, 0xff]);
    m.extend_from_slice(&f[10 + 11..]);
    let (h, body) = decode(m).unwrap();
    // Kafka makes it ""; the codec keeps None for the round trip and the server reads it as "".
    assert_eq!(h.client_id, None);
    assert_eq!(body, original);
}

#[test]
fn a_client_id_that_is_not_utf8_is_accepted_with_replacement_characters() {
    let Some(all) = load() else { return };
    for (client, version, name) in [("kcat", 4, "golden-kcat"), ("java", 12, "golden-java")] {
        let f = frame(&all, client, ApiKey::Metadata, version);
        let (_, original) = decode(f.clone()).unwrap();
        let mut m = f.clone();
        assert_eq!(&m[10..10 + name.len()], name.as_bytes());
        m[10] = 0xff; // never valid in UTF-8
        m[11] = 0xc3; // starts a two-byte sequence that does not continue
        let (h, body) = decode(m).unwrap();
        let expected = format!("\u{fffd}\u{fffd}{}", &name[2..]);
        assert_eq!(h.client_id.as_deref(), Some(expected.as_str()));
        assert_eq!(body, original, "{client}");
    }
}

#[test]
fn a_boolean_byte_other_than_0_or_1_is_true() {
    let Some(all) = load() else { return };
    // kcat's Metadata v4 ends with allow_auto_topic_creation.
    let mut checked = 0;
    for c in kcat_metadata(&all) {
        let f = c.req.to_vec();
        let Request::Metadata(md) = decode(f.clone()).unwrap().1 else {
            panic!()
        };
        let mut m = f.clone();
        *m.last_mut().unwrap() = 0x80;
        let Request::Metadata(md2) = decode(m).unwrap().1 else {
            panic!()
        };
        assert!(md2.allow_auto_topic_creation);
        assert_eq!(md2.topics, md.topics);
        checked += 1;
    }
    assert!(checked > 0);
}

#[test]
fn header_v0_is_not_accepted_for_other_apis() {
    let Some(all) = load() else { return };
    // Kafka reads header v0 only for ControlledShutdown v0, which a KRaft broker does not serve
    // (connection closed); we do not support the API at all.
    let shutdown = vec![0, 7, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1];
    let err = decode(shutdown).unwrap_err();
    assert!(matches!(
        err,
        RequestError::UnsupportedApiKey {
            api_key: 7,
            api_version: 0,
            correlation_id: 9
        }
    ));
    assert_eq!(err.error_code(), None);
    // A captured Metadata v4 written with a v0 header (no client id) is read, as by Kafka, with
    // header v1: the body's first bytes become the client id and the rest does not parse.
    let mut n = 0;
    for c in kcat_metadata(&all) {
        let mut m = c.req[..8].to_vec();
        m.extend_from_slice(&c.req[header_len(&c.req)..]);
        malformed(decode(m));
        n += 1;
    }
    assert!(n > 0);
}

#[test]
fn unsupported_versions_close_the_connection_except_api_versions() {
    let Some(all) = load() else { return };
    let mut f = frame(&all, "java", ApiKey::Produce, 11);
    f[2..4].copy_from_slice(&13i16.to_be_bytes());
    let err = decode(f).unwrap_err();
    assert!(matches!(
        err,
        RequestError::UnsupportedVersion {
            api_key: ApiKey::Produce,
            api_version: 13,
            ..
        }
    ));
    assert_eq!(err.error_code(), None, "Kafka closes the connection");
    assert!(err.api_versions_fallback().is_none());
    // ApiVersions v5 from the Java client's v4 bytes: answered in v0 format (KIP-511).
    let mut f = frame(&all, "java", ApiKey::ApiVersions, 4);
    f[2..4].copy_from_slice(&5i16.to_be_bytes());
    let err = decode(f.clone()).unwrap_err();
    assert_eq!(err.error_code(), Some(35));
    assert!(err.api_versions_fallback().unwrap().is_ok());
    // Kafka parses its header first and closes the connection when it cannot; we answer
    // without reading past the correlation id (a deliberate difference, see the README).
    let err = decode(f[..11].to_vec()).unwrap_err();
    assert_eq!(err.error_code(), Some(35));
}

#[test]
fn huge_lengths_are_refused() {
    let Some(all) = load() else { return };
    // kcat's Metadata v4 naming no topics: INT32 count 0 -> i32::MAX.
    let f = kcat_metadata(&all)
        .find(|c| c.req[header_len(&c.req)..][..4] == [0; 4])
        .expect("kcat Metadata v4 with an empty topic list")
        .req
        .to_vec();
    let at = header_len(&f);
    let mut m = f.clone();
    m[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
    assert!(matches!(
        malformed(decode(m)),
        DecodeError::LengthExceedsInput { .. }
    ));
    // A compact string longer than 32767: Kafka refuses it whatever follows.
    let f = frame(&all, "python", ApiKey::DeleteGroups, 2);
    let at = header_len(&f) + 1;
    let mut m = f[..at].to_vec();
    m.extend_from_slice(&[0x81, 0x80, 0x02]); // 0x8001: a length of 32768
    m.extend_from_slice(&f[at + 1..]);
    assert_eq!(malformed(decode(m)), DecodeError::StringTooLong(0x8000));
    // A header tag count far beyond the frame.
    let f = frame(&all, "java", ApiKey::Metadata, 12);
    let at = header_len(&f) - 1;
    let mut m = f[..at].to_vec();
    m.extend_from_slice(&[0xff, 0xff, 0xff, 0x07]);
    m.extend_from_slice(&f[at + 1..]);
    assert!(matches!(
        malformed(decode(m)),
        DecodeError::LengthExceedsInput { .. }
    ));
}
