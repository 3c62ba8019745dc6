//! The ACL and SCRAM-credential APIs against frames written byte by byte from Kafka 3.9's
//! message definitions (CreateAclsRequest.json, DeleteAclsRequest.json, DescribeAclsResponse.json,
//! AlterUserScramCredentialsRequest.json, DescribeUserScramCredentialsRequest.json /
//! Response.json, DescribeClientQuotasResponse.json), not by this crate's encoder: each decodes
//! to the values written and encodes back to the same bytes. The golden capture holds real
//! DescribeAcls and DescribeUserScramCredentials frames only (its broker has no authorizer);
//! these cover the others' classic and flexible encodings, nulls and tagged-field sections.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{decode_request, decode_response, encode_request, encode_response};
use kafka_proto::frame::{Request, Response};

/// A frame body under construction, with Kafka's primitive encodings.
#[derive(Default)]
struct W(BytesMut);

impl W {
    fn i8(mut self, v: i8) -> W {
        self.0.put_i8(v);
        self
    }
    fn i16(mut self, v: i16) -> W {
        self.0.put_i16(v);
        self
    }
    fn i32(mut self, v: i32) -> W {
        self.0.put_i32(v);
        self
    }
    fn uvarint(mut self, mut v: u32) -> W {
        while v >= 0x80 {
            self.0.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.put_u8(v as u8);
        self
    }
    /// Classic STRING / NULLABLE_STRING: i16 length (-1: null), bytes.
    fn string(self, s: Option<&str>) -> W {
        match s {
            None => self.i16(-1),
            Some(s) => {
                let mut w = self.i16(s.len() as i16);
                w.0.put_slice(s.as_bytes());
                w
            }
        }
    }
    /// COMPACT_(NULLABLE_)STRING / BYTES: uvarint length + 1 (0: null), bytes.
    fn compact(self, s: Option<&[u8]>) -> W {
        match s {
            None => self.uvarint(0),
            Some(s) => {
                let mut w = self.uvarint(s.len() as u32 + 1);
                w.0.put_slice(s);
                w
            }
        }
    }
    fn cstr(self, s: &str) -> W {
        self.compact(Some(s.as_bytes()))
    }
    /// An empty tagged-field section.
    fn no_tags(self) -> W {
        self.uvarint(0)
    }
    fn bytes(self) -> Bytes {
        self.0.freeze()
    }
}

/// Request header v1 (classic) or v2 (flexible: a tagged-field section after the client id,
/// which stays a classic nullable string).
fn header(api: ApiKey, version: i16, correlation_id: i32, flexible: bool) -> W {
    let w = W::default()
        .i16(api.as_i16())
        .i16(version)
        .i32(correlation_id)
        .string(Some("adminclient-1"));
    if flexible {
        w.no_tags()
    } else {
        w
    }
}

/// Decodes `frame` as a request, returns it, and checks our encoder writes the same bytes.
fn request_round_trip(frame: Bytes) -> Request {
    let (h, r) = decode_request(frame.clone()).expect("decodes");
    let segments = encode_request(&h, &r).expect("encodes");
    let ours: Vec<u8> = segments.iter().flat_map(|s| s.iter().copied()).collect();
    assert_eq!(&ours[4..], &frame[..], "re-encoding differs");
    r
}

/// Decodes `frame` as a response of `api` v`version`, returns it, and checks our encoder
/// writes the same bytes.
fn response_round_trip(api: ApiKey, version: i16, frame: Bytes) -> Response {
    let (h, r) = decode_response(api, version, frame.clone()).expect("decodes");
    let segments = encode_response(h.correlation_id, version, &r).expect("encodes");
    let ours: Vec<u8> = segments.iter().flat_map(|s| s.iter().copied()).collect();
    assert_eq!(&ours[4..], &frame[..], "re-encoding differs");
    r
}

#[test]
fn create_acls_v1_classic_and_v3_flexible() {
    // v1: pattern type present, classic strings and arrays.
    let v1 = header(ApiKey::CreateAcls, 1, 7, false)
        .i32(1)
        .i8(2)
        .string(Some("orders"))
        .i8(4)
        .string(Some("User:alice"))
        .string(Some("*"))
        .i8(3)
        .i8(3)
        .bytes();
    let Request::CreateAcls(r) = request_round_trip(v1) else {
        panic!("not CreateAcls")
    };
    let c = &r.creations[0];
    assert_eq!(
        (
            c.resource_type,
            c.resource_name.as_str(),
            c.resource_pattern_type
        ),
        (2, "orders", 4)
    );
    assert_eq!(
        (
            c.principal.as_str(),
            c.host.as_str(),
            c.operation,
            c.permission_type
        ),
        ("User:alice", "*", 3, 3)
    );

    // v0: no pattern type on the wire; it reads as LITERAL (3), Kafka's default.
    let v0 = header(ApiKey::CreateAcls, 0, 8, false)
        .i32(1)
        .i8(4)
        .string(Some("kafka-cluster"))
        .string(Some("User:*"))
        .string(Some("10.0.0.1"))
        .i8(7)
        .i8(2)
        .bytes();
    let Request::CreateAcls(r) = request_round_trip(v0) else {
        panic!("not CreateAcls")
    };
    assert_eq!(r.creations[0].resource_pattern_type, 3);

    // v3: compact array (count + 1), compact strings, a tagged-field section per creation and
    // one for the body.
    let v3 = header(ApiKey::CreateAcls, 3, 9, true)
        .uvarint(3)
        .i8(2)
        .cstr("orders")
        .i8(3)
        .cstr("User:alice")
        .cstr("*")
        .i8(4)
        .i8(3)
        .no_tags()
        .i8(3)
        .cstr("g-")
        .i8(4)
        .cstr("User:bob")
        .cstr("*")
        .i8(3)
        .i8(2)
        .no_tags()
        .no_tags()
        .bytes();
    let Request::CreateAcls(r) = request_round_trip(v3) else {
        panic!("not CreateAcls")
    };
    assert_eq!(r.creations.len(), 2);
    assert_eq!(r.creations[1].resource_name, "g-");
    assert_eq!(r.creations[1].permission_type, 2);
}

#[test]
fn create_acls_response_v2() {
    // Response header v1 (correlation id + tags); results with a null and a set message.
    let frame = W::default()
        .i32(9)
        .no_tags()
        .i32(0)
        .uvarint(3)
        .i16(0)
        .compact(None)
        .no_tags()
        .i16(42)
        .cstr("Invalid operation 1")
        .no_tags()
        .no_tags()
        .bytes();
    let Response::CreateAcls(r) = response_round_trip(ApiKey::CreateAcls, 2, frame) else {
        panic!("not CreateAcls")
    };
    assert_eq!(r.results[0].error_message, None);
    assert_eq!(r.results[1].error_code, 42);
}

#[test]
fn delete_acls_v3_with_null_filters() {
    let frame = header(ApiKey::DeleteAcls, 3, 11, true)
        .uvarint(2)
        .i8(2)
        .compact(None)
        .i8(1)
        .compact(None)
        .compact(None)
        .i8(1)
        .i8(2)
        .no_tags()
        .no_tags()
        .bytes();
    let Request::DeleteAcls(r) = request_round_trip(frame) else {
        panic!("not DeleteAcls")
    };
    let f = &r.filters[0];
    assert_eq!(f.resource_name_filter, None);
    assert_eq!(f.principal_filter, None);
    assert_eq!(f.host_filter, None);
    assert_eq!((f.resource_type_filter, f.pattern_type_filter), (2, 1));
    assert_eq!((f.operation, f.permission_type), (1, 2));
}

#[test]
fn describe_acls_response_v1_classic() {
    let frame = W::default()
        .i32(5)
        .i32(0)
        .i16(0)
        .string(None)
        .i32(1)
        .i8(2)
        .string(Some("orders"))
        .i8(3)
        .i32(2)
        .string(Some("User:alice"))
        .string(Some("*"))
        .i8(3)
        .i8(3)
        .string(Some("User:bob"))
        .string(Some("10.0.0.2"))
        .i8(4)
        .i8(2)
        .bytes();
    let Response::DescribeAcls(r) = response_round_trip(ApiKey::DescribeAcls, 1, frame) else {
        panic!("not DescribeAcls")
    };
    assert_eq!(r.error_message, None);
    assert_eq!(r.resources[0].acls.len(), 2);
    assert_eq!(r.resources[0].acls[1].host, "10.0.0.2");
}

#[test]
fn alter_user_scram_credentials_v0() {
    let salted = [0xabu8; 64];
    let frame = header(ApiKey::AlterUserScramCredentials, 0, 3, true)
        .uvarint(2)
        .cstr("bob")
        .i8(1)
        .no_tags()
        .uvarint(2)
        .cstr("alice")
        .i8(2)
        .i32(8192)
        .compact(Some(b"salt-bytes"))
        .compact(Some(&salted))
        .no_tags()
        .no_tags()
        .bytes();
    let Request::AlterUserScramCredentials(r) = request_round_trip(frame) else {
        panic!("not AlterUserScramCredentials")
    };
    assert_eq!(
        (r.deletions[0].name.as_str(), r.deletions[0].mechanism),
        ("bob", 1)
    );
    let u = &r.upsertions[0];
    assert_eq!(
        (u.name.as_str(), u.mechanism, u.iterations),
        ("alice", 2, 8192)
    );
    assert_eq!(&u.salt[..], b"salt-bytes");
    assert_eq!(&u.salted_password[..], &salted[..]);
}

#[test]
fn describe_user_scram_credentials_v0_null_users_and_response() {
    let frame = header(ApiKey::DescribeUserScramCredentials, 0, 4, true)
        .compact(None)
        .no_tags()
        .bytes();
    let Request::DescribeUserScramCredentials(r) = request_round_trip(frame) else {
        panic!("not DescribeUserScramCredentials")
    };
    assert_eq!(r.users, None);

    let frame = W::default()
        .i32(4)
        .no_tags()
        .i32(0)
        .i16(0)
        .compact(None)
        .uvarint(3)
        .cstr("alice")
        .i16(0)
        .compact(None)
        .uvarint(2)
        .i8(2)
        .i32(8192)
        .no_tags()
        .no_tags()
        .cstr("carol")
        .i16(91)
        .cstr("Attempt to describe a user credential that does not exist: carol")
        .uvarint(1)
        .no_tags()
        .no_tags()
        .bytes();
    let Response::DescribeUserScramCredentials(r) =
        response_round_trip(ApiKey::DescribeUserScramCredentials, 0, frame)
    else {
        panic!("not DescribeUserScramCredentials")
    };
    assert_eq!(r.results[0].credential_infos[0].iterations, 8192);
    assert_eq!(r.results[1].error_code, 91);
}

#[test]
fn describe_client_quotas_response_v1_with_no_entries() {
    let frame = W::default()
        .i32(6)
        .no_tags()
        .i32(0)
        .i16(0)
        .compact(None)
        .uvarint(1)
        .no_tags()
        .bytes();
    let Response::DescribeClientQuotas(r) =
        response_round_trip(ApiKey::DescribeClientQuotas, 1, frame)
    else {
        panic!("not DescribeClientQuotas")
    };
    assert_eq!(r.entries, Some(Vec::new()));
}
