//! KIP-848's messages (ConsumerGroupHeartbeat, ConsumerGroupDescribe, DescribeGroups v6) against
//! the bytes Apache Kafka 4.1.1's own message classes write for the same values
//! (`tests/golden/kip848/Kip848Frames.java`, run with kafka-clients 4.1.1 on the class path,
//! printed these bodies): each body decodes to the values the program set, and our encoder
//! writes the identical bytes. The heartbeat response's assignment is the codec's only nullable
//! struct: an int8 of -1 for null, 1 before a present struct.

use kafka_proto::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, DescribeGroupsResponse,
};
use kafka_proto::{ApiKey, Decoder, Encoder, Request, Response, Uuid};

fn unhex(s: &str) -> bytes::Bytes {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect::<Vec<u8>>()
        .into()
}

fn topic() -> Uuid {
    let mut b = [0u8; 16];
    for (i, x) in b.iter_mut().enumerate() {
        *x = i as u8 + 1;
    }
    Uuid(b)
}

/// Decodes `hex` as a request body of `api` at `version`, checks it re-encodes identically.
fn request(api: ApiKey, version: i16, hex: &str) -> Request {
    let bytes = unhex(hex);
    let mut d = Decoder::new(bytes.clone());
    let r = Request::decode(api, &mut d, version).expect("decodes");
    d.finish().expect("consumed exactly");
    let mut e = Encoder::new();
    r.encode(&mut e, version).expect("encodes");
    assert_eq!(
        e.into_bytes(),
        bytes,
        "{api:?} v{version} re-encodes as Kafka wrote it"
    );
    r
}

/// As [`request`], for a response body.
fn response(api: ApiKey, version: i16, hex: &str) -> Response {
    let bytes = unhex(hex);
    let mut d = Decoder::new(bytes.clone());
    let r = Response::decode(api, &mut d, version).expect("decodes");
    d.finish().expect("consumed exactly");
    let mut e = Encoder::new();
    r.encode(&mut e, version).expect("encodes");
    assert_eq!(
        e.into_bytes(),
        bytes,
        "{api:?} v{version} re-encodes as Kafka wrote it"
    );
    r
}

fn heartbeat_request(version: i16, hex: &str) -> ConsumerGroupHeartbeatRequest {
    match request(ApiKey::ConsumerGroupHeartbeat, version, hex) {
        Request::ConsumerGroupHeartbeat(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn heartbeat_requests_match_kafka_4() {
    let r = heartbeat_request(1, "0267036d310000000000027200007530030261026204782e2a08756e69666f726d020102030405060708090a0b0c0d0e0f100300000000000000020000");
    assert_eq!((r.group_id.as_str(), r.member_id.as_str()), ("g", "m1"));
    assert_eq!((r.member_epoch, r.rebalance_timeout_ms), (0, 30000));
    assert_eq!((r.instance_id, r.rack_id.as_deref()), (None, Some("r")));
    assert_eq!(r.subscribed_topic_names, Some(vec!["a".into(), "b".into()]));
    assert_eq!(r.subscribed_topic_regex.as_deref(), Some("x.*"));
    assert_eq!(r.server_assignor.as_deref(), Some("uniform"));
    let owned = r.topic_partitions.expect("owned partitions");
    assert_eq!(
        (owned[0].topic_id, owned[0].partitions.clone()),
        (topic(), vec![0, 2])
    );

    // Version 0 has no regex field.
    let r = heartbeat_request(0, "0267036d310000000000027200007530030261026208756e69666f726d020102030405060708090a0b0c0d0e0f100300000000000000020000");
    assert_eq!(r.subscribed_topic_regex, None);
}

#[test]
fn heartbeat_responses_match_kafka_4_with_and_without_an_assignment() {
    let with: ConsumerGroupHeartbeatResponse = match response(
        ApiKey::ConsumerGroupHeartbeat,
        1,
        "00000000000000036d31000000050000138801020102030405060708090a0b0c0d0e0f10030000000100000003000000",
    ) {
        Response::ConsumerGroupHeartbeat(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!((with.member_epoch, with.heartbeat_interval_ms), (5, 5000));
    let a = with.assignment.expect("an assignment");
    assert_eq!(a.topic_partitions[0].partitions, vec![1, 3]);

    let without: ConsumerGroupHeartbeatResponse = match response(
        ApiKey::ConsumerGroupHeartbeat,
        0,
        "00000000006e0766656e63656400ffffffff00000000ff00",
    ) {
        Response::ConsumerGroupHeartbeat(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(without.error_code, 110);
    assert_eq!(without.error_message.as_deref(), Some("fenced"));
    assert_eq!((without.member_id, without.member_epoch), (None, -1));
    assert!(without.assignment.is_none());
}

#[test]
fn a_negative_marker_byte_is_a_null_assignment_as_kafka_reads_it() {
    // Kafka reads any negative marker as null; -2 instead of -1 must not shift the fields.
    let bytes = unhex("00000000006e0766656e63656400ffffffff00000000fe00");
    let mut d = Decoder::new(bytes);
    let r = Response::decode(ApiKey::ConsumerGroupHeartbeat, &mut d, 0).expect("decodes");
    d.finish().expect("consumed exactly");
    match r {
        Response::ConsumerGroupHeartbeat(r) => assert!(r.assignment.is_none()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn consumer_group_describe_matches_kafka_4() {
    let req: ConsumerGroupDescribeRequest =
        match request(ApiKey::ConsumerGroupDescribe, 1, "03026702680100") {
            Request::ConsumerGroupDescribe(r) => r,
            other => panic!("{other:?}"),
        };
    assert_eq!(req.group_ids, vec!["g".to_string(), "h".to_string()]);
    assert!(req.include_authorized_operations);

    let v0 = "0000000002000000026707537461626c65000000030000000308756e69666f726d02036d310269000000000302630b2f3132372e302e302e3102026100020102030405060708090a0b0c0d0e0f10026102000000000000020102030405060708090a0b0c0d0e0f1002610200000000000000800000000000";
    let v1 = "0000000002000000026707537461626c65000000030000000308756e69666f726d02036d310269000000000302630b2f3132372e302e302e3102026100020102030405060708090a0b0c0d0e0f10026102000000000000020102030405060708090a0b0c0d0e0f100261020000000000000100800000000000";
    for (version, hex, member_type) in [(0, v0, -1), (1, v1, 1)] {
        let r: ConsumerGroupDescribeResponse =
            match response(ApiKey::ConsumerGroupDescribe, version, hex) {
                Response::ConsumerGroupDescribe(r) => r,
                other => panic!("{other:?}"),
            };
        let g = &r.groups[0];
        assert_eq!(
            (g.group_id.as_str(), g.group_state.as_str()),
            ("g", "Stable")
        );
        assert_eq!((g.group_epoch, g.assignment_epoch), (3, 3));
        assert_eq!(g.assignor_name, "uniform");
        let m = &g.members[0];
        assert_eq!((m.member_id.as_str(), m.member_epoch), ("m1", 3));
        assert_eq!(m.assignment.topic_partitions[0].topic_name, "a");
        assert_eq!(m.target_assignment.topic_partitions[0].topic_id, topic());
        assert_eq!(
            m.member_type, member_type,
            "v0 has no member type (default -1)"
        );
    }
}

#[test]
fn describe_groups_v6_carries_an_error_message_as_kafka_4() {
    let r: DescribeGroupsResponse = match response(
        ApiKey::DescribeGroups,
        6,
        "000000000200452047726f75702067206973206e6f74206120636c61737369632067726f75702e02670544656164010101800000000000",
    ) {
        Response::DescribeGroups(r) => r,
        other => panic!("{other:?}"),
    };
    let g = &r.groups[0];
    assert_eq!(g.error_code, 69);
    assert_eq!(
        g.error_message.as_deref(),
        Some("Group g is not a classic group.")
    );
}
