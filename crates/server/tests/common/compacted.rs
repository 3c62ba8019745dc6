//! Helpers of the compacted-topic tests (`compaction_cleaner.rs`, `compaction_repair.rs`):
//! keyed record batches, creating a compacted topic, and reading back every record through
//! Kafka Fetch or one replica's read path as a table offset -> (key, value).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_proto::records::{build_batch, Compression, NewRecord, RecordBatch};
use vdl_server::LogStream;

use super::kafka::{on_any, KafkaConn};

/// How long a test waits for a broker's answer or for the cleaner.
pub const T: Duration = Duration::from_secs(30);

/// offset -> (key, value; None for a tombstone).
pub type Table = BTreeMap<u64, (String, Option<String>)>;

/// Wall clock, ms since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// One batch of records: (key, value), a `None` value being a tombstone, a `None` key none.
pub fn batch(records: &[(Option<&str>, Option<&str>)]) -> Bytes {
    let records: Vec<NewRecord> = records
        .iter()
        .map(|(k, v)| {
            let mut r = NewRecord::new(now_ms(), Bytes::new());
            r.value = v.map(|v| Bytes::from(v.to_owned()));
            if let Some(k) = k {
                r = r.with_key(k.as_bytes().to_vec());
            }
            r
        })
        .collect();
    build_batch(Compression::None, &records).expect("a batch")
}

/// The records of fetched or read batches, into `out`; returns the offset after the last.
pub fn parse(data: Bytes, out: &mut Table) -> Option<u64> {
    let mut next = None;
    for b in kafka_proto::records::split_batches(data) {
        let b: RecordBatch = b.expect("a whole batch");
        b.validate().expect("batch CRC");
        for r in b.records_vec(1 << 20).expect("records") {
            let key = String::from_utf8(r.key.expect("every stored record has a key").to_vec());
            let value = r.value.map(|v| String::from_utf8(v.to_vec()).unwrap());
            out.insert(r.offset as u64, (key.unwrap(), value));
        }
        next = Some(b.next_offset() as u64);
    }
    next
}

/// Everything the leader of `topic` serves through Kafka Fetch.
pub fn fetch_topic(brokers: &[SocketAddr], topic: &str) -> Table {
    let mut out = Table::new();
    let mut offset = 0i64;
    loop {
        let (hw, data) = on_any(brokers, T, "fetch", |c| {
            c.fetch(topic, offset).map(|(e, hw, _, d)| (e, (hw, d)))
        });
        if offset >= hw {
            return out;
        }
        match parse(data, &mut out) {
            Some(next) => offset = next as i64,
            None => return out,
        }
    }
}

/// Everything one replica stores, read through its Kafka read path up to its high watermark.
pub fn read_replica(s: &LogStream) -> Table {
    let hw = s.visible().high_watermark;
    let mut out = Table::new();
    let mut offset = 0;
    while offset < hw {
        let read = s.read(offset, 1 << 20).expect("read");
        let mut data = Vec::new();
        for c in &read.chunks {
            data.extend_from_slice(c);
        }
        match parse(Bytes::from(data), &mut out) {
            Some(next) => offset = next,
            None => break,
        }
    }
    out
}

/// The batches of `producer` one replica stores below its high watermark: (base offset,
/// record count; 0 for a header kept for the producer's state).
pub fn producer_batches(s: &LogStream, producer: i64) -> Vec<(u64, i32)> {
    let hw = s.visible().high_watermark;
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < hw {
        let read = s.read(offset, 1 << 20).expect("read");
        let mut data = Vec::new();
        for c in &read.chunks {
            data.extend_from_slice(c);
        }
        let mut next = None;
        for b in kafka_proto::records::split_batches(Bytes::from(data)) {
            let b: RecordBatch = b.expect("a whole batch");
            if b.producer_id() == producer && !b.is_control() {
                out.push((b.base_offset() as u64, b.record_count()));
            }
            next = Some(b.next_offset() as u64);
        }
        match next {
            Some(n) => offset = n,
            None => break,
        }
    }
    out.dedup();
    out
}

/// The latest record of every key in `all`, at its offset.
pub fn latest(all: &Table) -> Table {
    let mut by_key: BTreeMap<String, (u64, Option<String>)> = BTreeMap::new();
    for (o, (k, v)) in all {
        by_key.insert(k.clone(), (*o, v.clone()));
    }
    by_key.into_iter().map(|(k, (o, v))| (o, (k, v))).collect()
}

/// CreateTopics of a compacted `topic` (small, quickly rolled segments, any dirt cleaned) with
/// `extra` configs: (error code, message).
pub fn create_compacted_with(
    c: &mut KafkaConn,
    topic: &str,
    extra: &[(&str, &str)],
) -> (i16, Option<String>) {
    let mut configs = vec![
        ("cleanup.policy", "compact"),
        ("segment.bytes", "1048576"),
        ("segment.ms", "1000"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ];
    configs.extend_from_slice(extra);
    let req = Request::CreateTopics(CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: topic.into(),
            num_partitions: 1,
            replication_factor: 3,
            configs: configs
                .iter()
                .map(|(k, v)| CreatableTopicConfig {
                    name: k.to_string(),
                    value: Some(v.to_string()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        timeout_ms: 15_000,
        ..Default::default()
    });
    match c.call(ApiKey::CreateTopics, 7, &req).unwrap() {
        Response::CreateTopics(r) => (r.topics[0].error_code, r.topics[0].error_message.clone()),
        other => panic!("unexpected {other:?}"),
    }
}

/// Produces `records` (acks=all) to `topic` through whichever broker leads: the base offset.
pub fn produce_to(
    brokers: &[SocketAddr],
    topic: &str,
    records: &[(Option<&str>, Option<&str>)],
) -> i64 {
    let data = batch(records);
    on_any(brokers, T, "produce", |c| c.produce(topic, data.clone()))
}
