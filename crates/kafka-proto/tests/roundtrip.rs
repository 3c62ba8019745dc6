//! Round trips of every request and response body of every API at every supported version, with
//! pseudo-random content generated from the schemas (see `build.rs`), and of whole frames
//! through `decode_request`/`encode_response`.

#[allow(dead_code, missing_docs, clippy::all)]
mod arbitrary {
    include!(concat!(env!("OUT_DIR"), "/arbitrary.rs"));
}

use arbitrary::{random_request, random_response, Rng};
use bytes::Bytes;
use kafka_proto::api::{request_header_version, response_header_version};
use kafka_proto::primitives::RawTaggedField;
use kafka_proto::{
    decode_request, decode_response, encode_request, encode_response, ApiKey, Decoder, Encoder,
    Request, RequestHeader, Response,
};

/// Seeds per (API, version, direction).
const SEEDS: u64 = 40;

fn seed(api: ApiKey, version: i16, s: u64, response: bool) -> u64 {
    (api.as_i16() as u64) << 32 | (version as u64) << 16 | s << 1 | u64::from(response)
}

fn concat(segs: &[Bytes]) -> Bytes {
    let mut v = Vec::new();
    for s in segs {
        v.extend_from_slice(s);
    }
    v.into()
}

fn versions(api: ApiKey) -> impl Iterator<Item = i16> {
    api.lowest_version()..=api.highest_version()
}

#[test]
fn every_request_body_round_trips_at_every_version() {
    let mut cases = 0;
    for &api in ApiKey::ALL {
        for v in versions(api) {
            for s in 0..SEEDS {
                let mut r = Rng::new(seed(api, v, s, false));
                let req = random_request(api, v, &mut r);
                let mut e = Encoder::new();
                req.encode(&mut e, v)
                    .unwrap_or_else(|err| panic!("{api} v{v} seed {s}: {err}"));
                let segs = e.into_segments();
                let bytes = concat(&segs);
                let mut d = Decoder::new(bytes.clone());
                let back = Request::decode(api, &mut d, v)
                    .unwrap_or_else(|err| panic!("{api} v{v} seed {s}: {err}\n{req:?}"));
                d.finish().unwrap();
                assert_eq!(back, req, "{api} v{v} seed {s}");
                let mut e = Encoder::new();
                back.encode(&mut e, v).unwrap();
                assert_eq!(
                    e.into_bytes(),
                    bytes,
                    "{api} v{v} seed {s}: re-encoding differs"
                );
                cases += 1;
            }
        }
    }
    // Every version of every API in the table (201 with the ACL, SCRAM and quota APIs).
    let all_versions = ApiKey::ALL
        .iter()
        .map(|a| versions(*a).count())
        .sum::<usize>() as u64;
    assert!(all_versions >= 201);
    assert_eq!(cases, all_versions * SEEDS);
}

#[test]
fn every_response_body_round_trips_at_every_version() {
    for &api in ApiKey::ALL {
        for v in versions(api) {
            for s in 0..SEEDS {
                let mut r = Rng::new(seed(api, v, s, true));
                let resp = random_response(api, v, &mut r);
                let mut e = Encoder::new();
                resp.encode(&mut e, v)
                    .unwrap_or_else(|err| panic!("{api} v{v} seed {s}: {err}"));
                let bytes = e.into_bytes();
                let mut d = Decoder::new(bytes.clone());
                let back = Response::decode(api, &mut d, v)
                    .unwrap_or_else(|err| panic!("{api} v{v} seed {s}: {err}\n{resp:?}"));
                d.finish().unwrap();
                assert_eq!(back, resp, "{api} v{v} seed {s}");
                let mut e = Encoder::new();
                back.encode(&mut e, v).unwrap();
                assert_eq!(
                    e.into_bytes(),
                    bytes,
                    "{api} v{v} seed {s}: re-encoding differs"
                );
            }
        }
    }
}

fn random_header(api: ApiKey, v: i16, r: &mut Rng) -> RequestHeader {
    let hv = request_header_version(api, v);
    RequestHeader {
        api_key: api.as_i16(),
        api_version: v,
        correlation_id: r.next() as i32,
        client_id: r.maybe(true, |r| r.string()),
        unknown_tagged_fields: if hv >= 2 && r.coin() {
            vec![RawTaggedField {
                tag: 3,
                data: r.bytes(),
            }]
        } else {
            vec![]
        },
    }
}

#[test]
fn request_and_response_frames_round_trip() {
    for &api in ApiKey::ALL {
        for v in versions(api) {
            for s in 0..8 {
                let mut r = Rng::new(seed(api, v, s, false) ^ 0xF00D);
                let header = random_header(api, v, &mut r);
                let req = random_request(api, v, &mut r);
                let segs = encode_request(&header, &req).unwrap();
                let frame = concat(&segs);
                let size = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                assert_eq!(size as usize, frame.len() - 4);
                let (h, back) = decode_request(frame.slice(4..))
                    .unwrap_or_else(|err| panic!("{api} v{v}: {err}"));
                assert_eq!(h, header);
                assert_eq!(back, req);

                let resp = random_response(api, v, &mut r);
                let segs = encode_response(header.correlation_id, v, &resp).unwrap();
                let frame = concat(&segs);
                let size = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                assert_eq!(size as usize, frame.len() - 4);
                // The header is the correlation id, plus an empty tag section in header v1.
                assert_eq!(&frame[4..8], &header.correlation_id.to_be_bytes());
                if response_header_version(api, v) == 1 {
                    assert_eq!(frame[8], 0);
                }
                let (h, back) = decode_response(api, v, frame.slice(4..))
                    .unwrap_or_else(|err| panic!("{api} v{v}: {err}"));
                assert_eq!(h.correlation_id, header.correlation_id);
                assert_eq!(back, resp);
            }
        }
    }
}

#[test]
fn decoded_records_are_slices_of_the_frame() {
    use kafka_proto::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_proto::messages::ProduceRequest;
    let records = Bytes::from(vec![0xabu8; 2000]);
    for v in [3, 8, 9, 11] {
        let req = ProduceRequest {
            transactional_id: None,
            acks: -1,
            timeout_ms: 30_000,
            topic_data: vec![TopicProduceData {
                name: "events".into(),
                partition_data: vec![PartitionProduceData {
                    index: 2,
                    records: Some(records.clone().into()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let header = RequestHeader {
            api_key: 0,
            api_version: v,
            correlation_id: 1,
            client_id: Some("c".into()),
            unknown_tagged_fields: vec![],
        };
        let segs = encode_request(&header, &Request::Produce(req.clone())).unwrap();
        // The record data went out as its own segment, by reference.
        assert!(segs.iter().any(|s| s.as_ptr() == records.as_ptr()));
        let frame = concat(&segs).slice(4..);
        let (_, back) = decode_request(frame.clone()).unwrap();
        let Request::Produce(back) = back else {
            panic!("not a produce request")
        };
        assert_eq!(back, req);
        let got = &back.topic_data[0].partition_data[0]
            .records
            .as_ref()
            .unwrap()
            .chunks()[0];
        let start = got.as_ptr() as usize - frame.as_ptr() as usize;
        assert!(
            start + got.len() <= frame.len(),
            "records must point into the frame"
        );
    }
}
