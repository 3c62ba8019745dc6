//! Record batches written by real clients (kcat/librdkafka, confluent-kafka-python, Java
//! kafka-clients 3.9) and returned by a real Kafka 3.9 broker, captured under `tests/golden/`.
//!
//! The Produce requests and Fetch responses are parsed minimally here (header, then the fields
//! down to each partition's records), independently of the crate's message codec, so this test
//! only depends on the records code. Every batch must validate (CRC-32C), decompress, and decode
//! to the records the capture scripts produced; every client must have sent all five codecs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use kafka_proto::primitives::Decoder;
use kafka_proto::records::*;

const MAX: usize = 64 << 20;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

struct Entry {
    client: String,
    api_key: i16,
    api_version: i16,
    req: PathBuf,
    resp: PathBuf,
}

fn manifest() -> Option<Vec<Entry>> {
    let text = std::fs::read_to_string(golden_dir().join("manifest.tsv")).ok()?;
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() < 7 {
            continue;
        }
        out.push(Entry {
            client: cols[0].to_string(),
            api_key: cols[1].parse().unwrap(),
            api_version: cols[3].parse().unwrap(),
            req: golden_dir().join(cols[5]),
            resp: golden_dir().join(cols[6]),
        });
    }
    Some(out)
}

fn skip_tags(d: &mut Decoder) {
    d.tagged_fields(|_, _| Ok(())).unwrap();
}

/// The records fields of a Produce request (v3-v11): header v1/v2, then the body.
fn produce_records(frame: Bytes) -> Vec<Bytes> {
    let mut d = Decoder::new(frame);
    assert_eq!(d.i16().unwrap(), 0);
    let version = d.i16().unwrap();
    assert!((3..=11).contains(&version), "Produce v{version}");
    let flex = version >= 9;
    d.i32().unwrap();
    d.nullable_string(false).unwrap(); // client id: never compact
    if flex {
        skip_tags(&mut d);
    }
    d.nullable_string(flex).unwrap(); // transactional id
    d.i16().unwrap(); // acks
    d.i32().unwrap(); // timeout
    let mut out = Vec::new();
    for _ in 0..d.array_len(flex).unwrap().unwrap() {
        d.string(flex).unwrap();
        for _ in 0..d.array_len(flex).unwrap().unwrap() {
            d.i32().unwrap();
            if let Some(r) = d.nullable_bytes(flex).unwrap() {
                out.push(r);
            }
            if flex {
                skip_tags(&mut d);
            }
        }
        if flex {
            skip_tags(&mut d);
        }
    }
    if flex {
        skip_tags(&mut d);
    }
    d.finish().unwrap();
    out
}

/// The records fields of a Fetch response (v4-v17).
fn fetch_records(frame: Bytes, version: i16) -> Vec<Bytes> {
    assert!((4..=17).contains(&version), "Fetch v{version}");
    let flex = version >= 12;
    let mut d = Decoder::new(frame);
    d.i32().unwrap(); // correlation id
    if flex {
        skip_tags(&mut d);
    }
    d.i32().unwrap(); // throttle
    if version >= 7 {
        d.i16().unwrap();
        d.i32().unwrap();
    }
    let mut out = Vec::new();
    for _ in 0..d.array_len(flex).unwrap().unwrap() {
        if version >= 13 {
            d.uuid().unwrap();
        } else {
            d.string(flex).unwrap();
        }
        for _ in 0..d.array_len(flex).unwrap().unwrap() {
            d.i32().unwrap(); // partition
            d.i16().unwrap(); // error
            d.i64().unwrap(); // high watermark
            d.i64().unwrap(); // last stable offset
            if version >= 5 {
                d.i64().unwrap(); // log start offset
            }
            if let Some(n) = d.array_len(flex).unwrap() {
                for _ in 0..n {
                    d.i64().unwrap();
                    d.i64().unwrap();
                    if flex {
                        skip_tags(&mut d);
                    }
                }
            }
            if version >= 11 {
                d.i32().unwrap(); // preferred read replica
            }
            if let Some(r) = d.nullable_bytes(flex).unwrap() {
                out.push(r);
            }
            if flex {
                skip_tags(&mut d);
            }
        }
        if flex {
            skip_tags(&mut d);
        }
    }
    if flex {
        skip_tags(&mut d);
    }
    d.finish().unwrap();
    out
}

/// Checks a record's value against what the capture scripts write:
/// `<codec>-<n>-xxx...` (Java, Python; header `codec` = the batch's codec, key `k<n>`),
/// `<codec>-<n>xxx...` (kcat, key `k<n>`), `txn-<n>-xxx...`, `sasl-<n>-xxx...`, `plain-<n>`,
/// or `aborted`.
fn check_record(codec: Compression, r: &Record) {
    let value = r.value.as_ref().expect("captured records have values");
    let text = std::str::from_utf8(value).expect("captured values are text");
    for h in &r.headers {
        if h.key_str() == Some("codec") {
            assert_eq!(h.value.as_deref(), Some(codec.name().as_bytes()));
        }
    }
    if text == "aborted" || text.starts_with("plain-") {
        return;
    }
    let (tag, rest) = text
        .split_once('-')
        .unwrap_or_else(|| panic!("value {text:?}"));
    if tag != "txn" && tag != "sasl" {
        assert_eq!(tag, codec.name(), "value {text:?} in a {codec} batch");
    }
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    assert!(!digits.is_empty(), "value {text:?}");
    let tail = rest[digits.len()..].trim_start_matches('-');
    assert!(tail.bytes().all(|b| b == b'x'), "value {text:?}");
    if let Some(key) = &r.key {
        let n: u32 = digits.parse().unwrap();
        assert_eq!(&key[..], format!("k{n}").as_bytes());
    }
}

/// Our compressor writes the same stream header the real client wrote: xerial snappy's 16-byte
/// header (when the client used that framing; librdkafka writes raw snappy), and LZ4's frame
/// descriptor (magic, FLG, BD, header checksum).
fn check_framing(codec: Compression, data: &[u8]) {
    let ours = compress(codec, b"x").unwrap();
    match codec {
        Compression::Snappy if data.starts_with(b"\x82SNAPPY\x00") => {
            assert_eq!(&data[..16], &ours[..16]);
        }
        Compression::Lz4 => assert_eq!(&data[..7], &ours[..7]),
        _ => {}
    }
}

#[test]
fn real_client_batches_validate_and_decode() {
    let Some(entries) = manifest() else {
        eprintln!(
            "no golden fixtures under {}; skipping",
            golden_dir().display()
        );
        return;
    };
    // client -> codec -> (batches, records)
    let mut produced: BTreeMap<String, BTreeMap<&'static str, (usize, usize)>> = BTreeMap::new();
    let mut fetched: BTreeMap<String, BTreeSet<&'static str>> = BTreeMap::new();
    for e in &entries {
        let (frame, from_fetch) = match e.api_key {
            0 => (std::fs::read(&e.req).unwrap(), false),
            1 => (std::fs::read(&e.resp).unwrap(), true),
            _ => continue,
        };
        let fields = if from_fetch {
            fetch_records(Bytes::from(frame), e.api_version)
        } else {
            produce_records(Bytes::from(frame))
        };
        for field in fields {
            let batches: Vec<RecordBatch> = if from_fetch {
                split_batches_lenient(field)
                    .collect::<Result<_, _>>()
                    .unwrap()
            } else {
                split_batches(field).collect::<Result<_, _>>().unwrap()
            };
            for b in batches {
                b.validate()
                    .unwrap_or_else(|err| panic!("{}: {err}", e.req.display()));
                if !from_fetch {
                    b.validate_from_producer().unwrap();
                    // The broker's full produce validation accepts every real client's batch
                    // (clock: now, so the captures' timestamps are in the past).
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_millis() as i64;
                    let limits = ProduceLimits::new(1 << 20, now);
                    let count = validate_producer_batch(&b, e.api_version, &limits)
                        .unwrap_or_else(|err| panic!("{}: {err}", e.req.display()));
                    assert_eq!(count as i32, b.record_count());
                }
                let codec = b.compression().unwrap();
                check_framing(codec, &b.records_data());
                let records = b.records_vec(MAX).unwrap();
                assert_eq!(records.len(), b.record_count() as usize);
                for (i, r) in records.iter().enumerate() {
                    assert_eq!(r.offset, b.base_offset() + i as i64);
                    if !b.is_control() {
                        check_record(codec, r);
                    }
                }
                if from_fetch {
                    fetched
                        .entry(e.client.clone())
                        .or_default()
                        .insert(codec.name());
                } else {
                    let c = produced
                        .entry(e.client.clone())
                        .or_default()
                        .entry(codec.name())
                        .or_default();
                    c.0 += 1;
                    c.1 += records.len();
                }
            }
        }
    }
    eprintln!("produced (batches, records) per client and codec: {produced:?}");
    eprintln!("fetched codecs per client: {fetched:?}");
    assert!(!produced.is_empty(), "manifest has no Produce requests");
    for (client, codecs) in &produced {
        for codec in Compression::ALL {
            assert!(
                codecs.contains_key(codec.name()),
                "{client} sent no {codec} batch"
            );
        }
    }
}

/// Down-converting real batches to magic 0/1 and back keeps every record (not zstd).
#[test]
fn real_client_batches_convert_to_legacy_and_back() {
    let Some(entries) = manifest() else {
        return;
    };
    let mut converted = 0;
    for e in entries.iter().filter(|e| e.api_key == 0) {
        for field in produce_records(Bytes::from(std::fs::read(&e.req).unwrap())) {
            for b in split_batches(field) {
                let b = b.unwrap();
                if b.compression().unwrap() == Compression::Zstd {
                    continue;
                }
                let records = b.records_vec(MAX).unwrap();
                for magic in [0i8, 1] {
                    let set = batches_to_message_set(b.as_bytes().clone(), magic, MAX).unwrap();
                    let back = decode_message_set(
                        set,
                        LegacyDecodeOptions {
                            max_decompressed: MAX,
                            trailing: TrailingPartial::Reject,
                        },
                    )
                    .unwrap();
                    assert_eq!(back.len(), records.len());
                    for (l, r) in back.iter().zip(&records) {
                        assert_eq!((l.offset, &l.key, &l.value), (r.offset, &r.key, &r.value));
                        if magic == 1 {
                            assert_eq!(l.timestamp, r.timestamp);
                        }
                    }
                    converted += 1;
                }
            }
        }
    }
    assert!(converted > 0);
}
