//! Helpers of the compacted-topic tests (`compaction_cleaner.rs`, `compaction_repair.rs`):
//! a cluster whose cleaners run often, keyed record batches, creating a compacted topic,
//! producing rounds of every key, reading back every record through Kafka Fetch or one
//! replica's read path as a table offset -> (key, value), and waiting for the cleaners.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_proto::records::{build_batch, Compression, NewRecord, RecordBatch};
use vdl_server::config::NodeConfig;
use vdl_server::LogStream;

use super::kafka::{on_any, KafkaConn};

/// How long a test waits for a broker's answer or for the cleaner.
pub const T: Duration = Duration::from_secs(30);

/// offset -> (key, value; None for a tombstone).
pub type Table = BTreeMap<u64, (String, Option<String>)>;

/// Configs of a three-node cluster with data under `root` whose partitions check their
/// `segment.ms` rolls (with retention) and whose cleaners run a round every 100 ms.
pub fn compacting_cluster(root: &Path) -> Vec<NodeConfig> {
    let mut configs = super::cluster_configs(3, root, &[]);
    for c in &mut configs {
        c.storage.retention_check_interval = Duration::from_millis(100);
        c.storage.cleaner_backoff = Duration::from_millis(100);
    }
    configs
}

/// Wall clock, ms since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// One batch of records: (key, value), a `None` value being a tombstone, a `None` key none.
pub fn batch(records: &[(Option<&str>, Option<&str>)]) -> Bytes {
    batch_at(now_ms(), records)
}

/// [`batch`] with every record stamped `timestamp_ms` (the simulation's clock).
pub fn batch_at(timestamp_ms: i64, records: &[(Option<&str>, Option<&str>)]) -> Bytes {
    let records: Vec<NewRecord> = records
        .iter()
        .map(|(k, v)| {
            let mut r = NewRecord::new(timestamp_ms, Bytes::new());
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
        add_records(&b, out);
        next = Some(b.next_offset() as u64);
    }
    next
}

/// The records of one batch (its CRC checked), into `out`.
pub fn add_records(b: &RecordBatch, out: &mut Table) {
    b.validate().expect("batch CRC");
    for r in b.records_vec(1 << 20).expect("records") {
        let key = String::from_utf8(r.key.expect("every stored record has a key").to_vec());
        let value = r.value.map(|v| String::from_utf8(v.to_vec()).unwrap());
        out.insert(r.offset as u64, (key.unwrap(), value));
    }
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

/// Every batch one replica stores below its high watermark, in offset order, each checked
/// whole (read through the replica's Kafka read path, `read_bytes` at a time).
pub fn replica_batches(s: &LogStream, read_bytes: u64) -> Vec<RecordBatch> {
    let hw = s.visible().high_watermark;
    let mut out: Vec<RecordBatch> = Vec::new();
    let mut offset = 0;
    while offset < hw {
        let read = s.read(offset, read_bytes).expect("read");
        let mut data = Vec::new();
        for c in &read.chunks {
            data.extend_from_slice(c);
        }
        let before = out.len();
        for b in kafka_proto::records::split_batches(Bytes::from(data)) {
            let b: RecordBatch = b.expect("a whole batch");
            offset = offset.max(b.next_offset() as u64);
            out.push(b);
        }
        if out.len() == before {
            break;
        }
    }
    out
}

/// Every committed record one replica serves, read from offset 0 to its high watermark.
pub fn read_replica(s: &LogStream) -> Table {
    let mut out = Table::new();
    for b in replica_batches(s, 1 << 20) {
        add_records(&b, &mut out);
    }
    out
}

/// The batches of `producer` one replica stores below its high watermark: (base offset,
/// record count; 0 for a header kept for the producer's state).
pub fn producer_batches(s: &LogStream, producer: i64) -> Vec<(u64, i32)> {
    let mut out: Vec<(u64, i32)> = replica_batches(s, 1 << 20)
        .iter()
        .filter(|b| b.producer_id() == producer && !b.is_control())
        .map(|b| (b.base_offset() as u64, b.record_count()))
        .collect();
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
    c.create_topic_configured(topic, &configs).unwrap()
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

/// Produces round `round` of keys `k0`..: key `k{i}` with value `v{i}.{round}`, `per_batch`
/// keys a batch, to `topic`; records each at its offset in `produced`.
pub fn produce_round(
    brokers: &[SocketAddr],
    topic: &str,
    keys: usize,
    per_batch: usize,
    round: usize,
    produced: &mut Table,
) {
    for chunk in (0..keys).collect::<Vec<_>>().chunks(per_batch) {
        let keys: Vec<String> = chunk.iter().map(|k| format!("k{k}")).collect();
        let values: Vec<String> = chunk.iter().map(|k| format!("v{k}.{round}")).collect();
        let records: Vec<(Option<&str>, Option<&str>)> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| (Some(k.as_str()), Some(v.as_str())))
            .collect();
        let base = produce_to(brokers, topic, &records) as u64;
        for (i, (k, v)) in keys.iter().zip(&values).enumerate() {
            produced.insert(base + i as u64, (k.clone(), Some(v.clone())));
        }
    }
}

/// Fetches `topic` every 100 ms until `done` holds of what is served, for at most [`T`]:
/// what was served then. Panics with `what` and the last table served otherwise; `done` may
/// assert what must hold on the way.
pub fn wait_served(
    brokers: &[SocketAddr],
    topic: &str,
    what: &str,
    mut done: impl FnMut(&Table) -> bool,
) -> Table {
    let deadline = Instant::now() + T;
    loop {
        let served = fetch_topic(brokers, topic);
        if done(&served) {
            return served;
        }
        assert!(Instant::now() < deadline, "{what}: {served:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (at most [`T`]) until Fetch of `topic` and every replica (`replicas()` reads each
/// one's table) serve exactly the latest record of every key `produced` (so every sealed
/// segment that held an older record was rewritten), checking on the way that what is
/// served is always as produced and holds the latest record of every key.
pub fn wait_compacted(
    brokers: &[SocketAddr],
    topic: &str,
    replicas: &dyn Fn() -> Vec<Table>,
    produced: &Table,
) {
    let expected = latest(produced);
    let deadline = Instant::now() + T;
    loop {
        let served = fetch_topic(brokers, topic);
        for (o, r) in &served {
            assert_eq!(produced.get(o), Some(r), "offset {o} served as produced");
        }
        for o in expected.keys() {
            assert!(served.contains_key(o), "latest record at {o} served");
        }
        let replicas = replicas();
        if served == expected && replicas.iter().all(|r| *r == expected) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not compacted in time: served {served:?}, replicas {replicas:?}, expected \
             {expected:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
