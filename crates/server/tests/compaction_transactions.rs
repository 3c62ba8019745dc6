//! The log cleaner and transactions (the partition side): a compacted topic whose log holds an
//! aborted transaction. The aborted record of key `a` comes after its committed value; the
//! cleaner compacts what lies before the abort (the older value of `a` goes) but never lets the
//! aborted record supersede the committed one, which a read_committed consumer must still find.
//! (Kafka's cleaner drops aborted records from its key map; vdl's stops at the first abort still
//! in the log until removing aborted data is served.)

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::compacted::{
    compacting_cluster, create_compacted_with, fetch_topic, now_ms, produce_to, wait_served, T,
};
use common::kafka::{on_any, KafkaConn};
use common::serving::start;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::Response;
use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};

const TOPIC: &str = "txtable";
const PRODUCER: i64 = 77;

/// A transactional batch of one record `key` = `value`.
fn txn_record(key: &str, value: &str) -> Bytes {
    RecordBatchBuilder::new(Compression::None)
        .producer(PRODUCER, 0, 0)
        .transactional(true)
        .with_records(&[
            NewRecord::new(now_ms(), value.as_bytes().to_vec()).with_key(key.as_bytes().to_vec())
        ])
        .unwrap()
        .build()
        .unwrap()
}

/// WriteTxnMarkers ABORT for the producer on the topic's partition 0: the error code.
fn abort(c: &mut KafkaConn) -> std::io::Result<(i16, ())> {
    let req = common::requests::txn_markers(TOPIC, &[(PRODUCER, 0, false)]);
    match c.call(ApiKey::WriteTxnMarkers, 1, &req)? {
        Response::WriteTxnMarkers(r) => Ok((r.markers[0].topics[0].partitions[0].error_code, ())),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_record_never_supersedes_a_committed_value() {
    let dir = tempfile::tempdir().unwrap();
    let configs = compacting_cluster(dir.path());
    let brokers: Vec<SocketAddr> = configs.iter().map(|c| c.kafka_listen).collect();
    let nodes = start(&configs).await;
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b[0]).unwrap();
        assert_eq!(create_compacted_with(&mut c, TOPIC, &[]), (0, None));
        assert_eq!(produce_to(&b, TOPIC, &[(Some("a"), Some("1"))]), 0);
        assert_eq!(produce_to(&b, TOPIC, &[(Some("a"), Some("2"))]), 1);
    })
    .await
    .unwrap();
    // The aborted transaction: its record of `a` at 2 (through the stream: Produce refuses
    // transactional batches until the coordinator exists), the ABORT marker at 3.
    let leader = loop {
        if let Some(s) = nodes.0.iter().find_map(|(n, _)| {
            n.partition(TOPIC, 0)
                .filter(|s| s.visible().leader == n.config().id && s.visible().leader_ready)
        }) {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // In a segment of its own: the first one rolls (segment.ms = 1 s) before it is written.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let at = leader
        .append(txn_record("a", "aborted"), 1, T)
        .await
        .unwrap();
    assert_eq!(at.base_offset, 2);
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || {
        on_any(&b, T, "the abort marker", abort);
        // The segment holding the abort rolls too, behind newer records.
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(produce_to(&b, TOPIC, &[(Some("c"), Some("1"))]), 4);
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(produce_to(&b, TOPIC, &[(Some("d"), Some("1"))]), 5);
        // The first segment is compacted: a=1 goes, superseded by the committed a=2 ...
        let served = wait_served(&b, TOPIC, "the first segment compacted", |served| {
            !served.contains_key(&0)
        });
        // ... which stays, though a later (aborted) record of `a` exists.
        assert_eq!(
            served.get(&1),
            Some(&("a".to_string(), Some("2".to_string())))
        );
        assert_eq!(
            served.get(&2),
            Some(&("a".to_string(), Some("aborted".to_string())))
        );
        // Later passes keep it so.
        std::thread::sleep(Duration::from_millis(1000));
        let served = fetch_topic(&b, TOPIC);
        assert!(served.contains_key(&1), "{served:?}");
    })
    .await
    .unwrap();
    drop(leader);
    drop(nodes);
}
