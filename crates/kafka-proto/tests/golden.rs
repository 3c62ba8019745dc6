//! Golden vectors: real request frames from real clients (kcat, confluent-kafka-python, the Java
//! client) and the matching responses of a real Apache Kafka 3.9 broker, captured into
//! `tests/golden/` (see its README). For every pair of a supported API: the request decodes
//! fully and re-encodes to the identical bytes, and the broker's response decodes and our
//! encoder reproduces it byte for byte. Requests of APIs we do not support must be reported as
//! such with the right correlation id.
//!
//! Skips with a note when `tests/golden/manifest.tsv` is missing; fails on any bad line when it
//! exists.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use kafka_proto::api::{request_header_version, response_header_version};
use kafka_proto::messages::{ApiVersionsRequest, MetadataResponse, ProduceRequest};
use kafka_proto::{
    decode_request, decode_response, encode_request, encode_response, ApiKey, Request,
    RequestError, RequestHeader, Response,
};

struct Pair {
    client: String,
    api_key: i16,
    api_name: String,
    api_version: i16,
    correlation_id: i32,
    req: Bytes,
    resp: Bytes,
    label: String,
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn load() -> Option<Vec<Pair>> {
    let dir = golden_dir();
    let manifest = dir.join("manifest.tsv");
    let Ok(text) = std::fs::read_to_string(&manifest) else {
        eprintln!(
            "note: {} is missing; golden-vector tests skipped",
            manifest.display()
        );
        return None;
    };
    let mut pairs = Vec::new();
    for (no, line) in text.lines().enumerate() {
        if no == 0 && line.starts_with("client\t") || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 7, "manifest line {}: {line:?}", no + 1);
        let read = |f: &str| -> Bytes {
            std::fs::read(dir.join(f))
                .unwrap_or_else(|e| panic!("manifest line {}: {f}: {e}", no + 1))
                .into()
        };
        pairs.push(Pair {
            client: cols[0].to_string(),
            api_key: cols[1].parse().expect("api_key"),
            api_name: cols[2].to_string(),
            api_version: cols[3].parse().expect("api_version"),
            correlation_id: cols[4].parse().expect("correlation_id"),
            req: read(cols[5]),
            resp: read(cols[6]),
            label: format!("line {} ({})", no + 1, cols[5]),
        });
    }
    assert!(!pairs.is_empty(), "manifest has no pairs");
    Some(pairs)
}

fn concat(segs: &[Bytes]) -> Vec<u8> {
    segs.iter().flat_map(|s| s.iter().copied()).collect()
}

/// Index of the first differing byte, for readable failures.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    let i = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    format!(
        "lengths {} vs {}, first difference at byte {i}: ours {:02x?} vs kafka {:02x?}",
        a.len(),
        b.len(),
        a.get(i..(i + 16).min(a.len())).unwrap_or(&[]),
        b.get(i..(i + 16).min(b.len())).unwrap_or(&[]),
    )
}

#[test]
fn golden_frames_decode_and_reencode_byte_for_byte() {
    let Some(pairs) = load() else { return };
    let mut failures = Vec::new();
    let (mut supported, mut unsupported) = (0, 0);
    // Pairs checked both ways, per API.
    let mut checked: BTreeMap<ApiKey, usize> = BTreeMap::new();
    for p in &pairs {
        let Some(api) = ApiKey::from_i16(p.api_key) else {
            // Not one of ours: must be reported with the header fields the server answers with.
            match decode_request(p.req.clone()) {
                Err(RequestError::UnsupportedApiKey {
                    api_key,
                    api_version,
                    correlation_id,
                }) if api_key == p.api_key
                    && api_version == p.api_version
                    && correlation_id == p.correlation_id => {}
                other => failures.push(format!(
                    "{}: {} should be an unsupported API key, got {other:?}",
                    p.label, p.api_name
                )),
            }
            unsupported += 1;
            continue;
        };
        supported += 1;
        *checked.entry(api).or_default() += 1;
        assert_eq!(api.name(), p.api_name, "{}", p.label);

        // Request: decodes fully, re-encodes to the same bytes.
        match decode_request(p.req.clone()) {
            Ok((header, body)) => {
                if (header.api_key, header.api_version, header.correlation_id)
                    != (p.api_key, p.api_version, p.correlation_id)
                {
                    failures.push(format!(
                        "{}: header {header:?} differs from manifest",
                        p.label
                    ));
                }
                match encode_request(&header, &body) {
                    Ok(segs) => {
                        let ours = concat(&segs);
                        if ours[4..] != p.req[..] {
                            failures.push(format!(
                                "{}: request re-encoding differs: {}",
                                p.label,
                                first_difference(&ours[4..], &p.req)
                            ));
                        }
                    }
                    Err(e) => failures.push(format!("{}: request encode: {e}", p.label)),
                }
            }
            Err(e) => failures.push(format!("{}: request decode: {e}", p.label)),
        }

        // Response: decodes, and our encoder reproduces Kafka's bytes.
        match decode_response(api, p.api_version, p.resp.clone()) {
            Ok((header, body)) => {
                if header.correlation_id != p.correlation_id {
                    failures.push(format!("{}: response correlation id differs", p.label));
                }
                match encode_response(header.correlation_id, p.api_version, &body) {
                    Ok(segs) => {
                        let ours = concat(&segs);
                        if ours[4..] != p.resp[..] {
                            failures.push(format!(
                                "{}: response re-encoding differs: {}",
                                p.label,
                                first_difference(&ours[4..], &p.resp)
                            ));
                        }
                    }
                    Err(e) => failures.push(format!("{}: response encode: {e}", p.label)),
                }
            }
            Err(e) => failures.push(format!("{}: response decode: {e}", p.label)),
        }
    }
    eprintln!(
        "golden: {} pairs, {supported} of supported APIs checked both ways, {unsupported} of \
         other APIs checked to be reported as unsupported",
        pairs.len()
    );
    for (api, n) in &checked {
        eprintln!("golden: {api} ({}): {n} pairs round-tripped", api.as_i16());
    }
    // The admin APIs the server is about to serve: real frames of each were captured (Java and
    // confluent-kafka clients) and must really be exercised here, not skipped.
    for api in [
        ApiKey::DeleteRecords,
        ApiKey::AlterConfigs,
        ApiKey::DescribeLogDirs,
        ApiKey::DeleteGroups,
        ApiKey::ElectLeaders,
        ApiKey::IncrementalAlterConfigs,
        ApiKey::ListPartitionReassignments,
        ApiKey::OffsetDelete,
        ApiKey::DescribeProducers,
        ApiKey::DescribeAcls,
        ApiKey::DescribeUserScramCredentials,
        ApiKey::TxnOffsetCommit,
    ] {
        assert!(
            checked.get(&api).copied().unwrap_or(0) >= 1,
            "no captured {api} pair was checked: {checked:?}"
        );
    }
    assert!(
        failures.is_empty(),
        "{} golden failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn requests(pairs: &[Pair], client: &str, api: ApiKey) -> Vec<(RequestHeader, Request, i16)> {
    pairs
        .iter()
        .filter(|p| p.client == client && p.api_key == api.as_i16())
        .map(|p| {
            let (h, r) = decode_request(p.req.clone()).expect("decodes");
            (h, r, p.api_version)
        })
        .collect()
}

#[test]
fn golden_spot_checks() {
    let Some(pairs) = load() else { return };

    // kcat produces to `golden-kcat`: idempotent (acks=all) and one plain acks=1 run.
    let produce = requests(&pairs, "kcat", ApiKey::Produce);
    assert!(!produce.is_empty(), "no kcat Produce requests");
    let mut acks_seen = Vec::new();
    for (h, r, _) in &produce {
        let Request::Produce(ProduceRequest {
            acks, topic_data, ..
        }) = r
        else {
            panic!("not a Produce request");
        };
        assert_eq!(h.client_id.as_deref(), Some("golden-kcat"));
        assert_eq!(topic_data.len(), 1);
        assert_eq!(topic_data[0].name, "golden-kcat");
        let records = topic_data[0].partition_data[0].records.as_ref().unwrap();
        assert!(records.len() > 61, "a record batch has a 61-byte header");
        // Record data is a zero-copy slice: one chunk.
        assert_eq!(records.chunks().len(), 1);
        acks_seen.push(*acks);
    }
    assert!(
        acks_seen.iter().all(|a| *a == -1 || *a == 1),
        "{acks_seen:?}"
    );
    assert!(acks_seen.contains(&-1), "{acks_seen:?}");

    // The Java client opens with ApiVersions v4, header v2, naming its software.
    let java_av: Vec<_> = requests(&pairs, "java", ApiKey::ApiVersions)
        .into_iter()
        .filter(|(_, _, v)| *v == 4)
        .collect();
    assert!(!java_av.is_empty(), "no Java ApiVersions v4 request");
    for (h, r, v) in &java_av {
        assert_eq!(request_header_version(ApiKey::ApiVersions, *v), 2);
        assert_eq!(h.api_version, 4);
        let Request::ApiVersions(ApiVersionsRequest {
            client_software_name,
            client_software_version,
            ..
        }) = r
        else {
            panic!("not an ApiVersions request");
        };
        assert_eq!(client_software_name, "apache-kafka-java");
        assert!(
            client_software_version.starts_with("3.9"),
            "{client_software_version}"
        );
    }

    // librdkafka (kcat, python) sends ApiVersions v3 naming the software.
    for (client, name) in [("kcat", "librdkafka"), ("python", "confluent-kafka-python")] {
        for (_, r, v) in requests(&pairs, client, ApiKey::ApiVersions) {
            assert_eq!(v, 3);
            let Request::ApiVersions(r) = r else { panic!() };
            assert_eq!(r.client_software_name, name);
        }
    }

    // ApiVersions responses: header v0 even at v3/v4; the broker lists Produce 0-11, Fetch 0-17.
    for p in pairs.iter().filter(|p| p.api_key == 18) {
        assert_eq!(
            response_header_version(ApiKey::ApiVersions, p.api_version),
            0
        );
        let (_, r) = decode_response(ApiKey::ApiVersions, p.api_version, p.resp.clone()).unwrap();
        let Response::ApiVersions(r) = r else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        let range = |k: i16| {
            r.api_keys
                .iter()
                .find(|a| a.api_key == k)
                .map(|a| (a.min_version, a.max_version))
        };
        assert_eq!(range(0), Some((0, 11)), "{}", p.label);
        assert_eq!(range(1), Some((0, 17)), "{}", p.label);
    }

    // Metadata responses from v2 carry the fixed cluster id; the broker is node 0 behind the proxy.
    let mut metadata = 0;
    for p in pairs
        .iter()
        .filter(|p| p.api_key == 3 && p.api_version >= 2)
    {
        let (_, r) = decode_response(ApiKey::Metadata, p.api_version, p.resp.clone()).unwrap();
        let Response::Metadata(MetadataResponse {
            cluster_id,
            brokers,
            ..
        }) = r
        else {
            panic!()
        };
        assert_eq!(cluster_id.as_deref(), Some("dmRsLWthZmthLWdvbGRlbg"));
        assert_eq!(brokers[0].node_id, 0);
        assert_eq!(brokers[0].host, "127.0.0.1");
        metadata += 1;
    }
    assert!(metadata > 0);

    admin_spot_checks(&pairs);
}

/// The admin APIs' captured frames carry what the capture clients asked for.
fn admin_spot_checks(pairs: &[Pair]) {
    // The deprecated AlterConfigs: one topic resource, retention.ms set to 2 hours.
    for (client, topic) in [("python", "golden-py-tmp"), ("java", "golden-java-tmp")] {
        let reqs = requests(pairs, client, ApiKey::AlterConfigs);
        assert_eq!(reqs.len(), 1, "{client} AlterConfigs");
        let Request::AlterConfigs(r) = &reqs[0].1 else {
            panic!()
        };
        assert_eq!(r.resources.len(), 1);
        assert_eq!(r.resources[0].resource_type, 2, "TOPIC");
        assert_eq!(r.resources[0].resource_name, topic);
        let configs: Vec<_> = r.resources[0]
            .configs
            .iter()
            .map(|c| (c.name.as_str(), c.value.as_deref()))
            .collect();
        assert_eq!(configs, [("retention.ms", Some("7200000"))]);
        assert!(!r.validate_only);
    }
    let mut seen = 0;
    for p in pairs.iter().filter(|p| p.api_key == 33) {
        let (_, r) = decode_response(ApiKey::AlterConfigs, p.api_version, p.resp.clone()).unwrap();
        let Response::AlterConfigs(r) = r else {
            panic!()
        };
        assert_eq!(r.responses.len(), 1);
        assert_eq!(r.responses[0].error_code, 0, "{}", p.label);
        seen += 1;
    }
    assert_eq!(seen, 2);

    // ListPartitionReassignments for everything (null topics): none in progress.
    let reqs = requests(pairs, "java", ApiKey::ListPartitionReassignments);
    assert!(!reqs.is_empty());
    for (_, r, _) in &reqs {
        let Request::ListPartitionReassignments(r) = r else {
            panic!()
        };
        assert_eq!(r.topics, None);
    }
    for p in pairs.iter().filter(|p| p.api_key == 46) {
        let (_, r) =
            decode_response(ApiKey::ListPartitionReassignments, 0, p.resp.clone()).unwrap();
        let Response::ListPartitionReassignments(r) = r else {
            panic!()
        };
        assert_eq!((r.error_code, r.topics.len()), (0, 0), "{}", p.label);
    }

    // ElectLeaders (preferred) on a single-broker topic: ELECTION_NOT_NEEDED (84).
    for p in pairs.iter().filter(|p| p.api_key == 43) {
        let (_, r) = decode_request(p.req.clone()).unwrap();
        let Request::ElectLeaders(r) = r else {
            panic!()
        };
        assert_eq!(r.election_type, 0, "PREFERRED");
        let (_, r) = decode_response(ApiKey::ElectLeaders, p.api_version, p.resp.clone()).unwrap();
        let Response::ElectLeaders(r) = r else {
            panic!()
        };
        let result = &r.replica_election_results[0];
        assert_eq!(result.topic, "golden-java");
        assert_eq!(result.partition_result[0].error_code, 84, "{}", p.label);
    }

    // DescribeProducers on the idempotent producers' partition lists at least one producer.
    for p in pairs.iter().filter(|p| p.api_key == 61) {
        let (_, r) = decode_response(ApiKey::DescribeProducers, 0, p.resp.clone()).unwrap();
        let Response::DescribeProducers(r) = r else {
            panic!()
        };
        let partition = &r.topics[0].partitions[0];
        assert_eq!(partition.error_code, 0, "{}", p.label);
        assert!(!partition.active_producers.is_empty(), "{}", p.label);
        assert!(partition
            .active_producers
            .iter()
            .all(|a| a.producer_id >= 0));
    }

    // TxnOffsetCommit of the transactional producers (v3 from confluent-kafka, v4 from Java):
    // the producer id and epoch of their InitProducerId, one partition's offset, the member
    // fields of KIP-447, and every partition committed by the broker.
    let txn_commits: Vec<_> = pairs.iter().filter(|p| p.api_key == 28).collect();
    assert!(txn_commits.len() >= 2, "no captured TxnOffsetCommit pairs");
    for p in txn_commits {
        let (_, r) = decode_request(p.req.clone()).unwrap();
        let Request::TxnOffsetCommit(r) = r else {
            panic!()
        };
        assert!(!r.transactional_id.is_empty(), "{}", p.label);
        assert!(!r.group_id.is_empty(), "{}", p.label);
        assert!(r.producer_id >= 0 && r.producer_epoch >= 0, "{}", p.label);
        assert!(!r.topics.is_empty(), "{}", p.label);
        assert!(
            r.topics[0].partitions[0].committed_offset >= 0,
            "{}",
            p.label
        );
        let (_, resp) =
            decode_response(ApiKey::TxnOffsetCommit, p.api_version, p.resp.clone()).unwrap();
        let Response::TxnOffsetCommit(resp) = resp else {
            panic!()
        };
        assert_eq!(resp.topics.len(), r.topics.len(), "{}", p.label);
        assert!(resp
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .all(|x| x.error_code == 0));
    }
}
