//! The log cleaner and transactions (the partition side), as Kafka's cleaner: a compacted
//! topic whose log holds an aborted transaction of key `a` after the committed `a`, then a
//! committed transaction of the same producer. The cleaner compacts past the abort: the
//! aborted record never supersedes the committed value (a read_committed consumer must still
//! find it) and is removed itself; the ABORT marker stays until its transaction's data is gone,
//! then, once the saved producer state covers it (saved when the nodes stop), gets a delete
//! horizon (`delete.retention.ms` = 0 here) and is removed by a later pass; the COMMIT marker
//! stays while its transaction's data does. A read_committed Fetch never drops the later
//! committed record (the aborted range is not sent without its marker), and after restarts of
//! every node (the aborted data gone, then its marker too) the transaction state rebuilt from
//! the cleaned log has no transaction open (the last stable offset is the high watermark) and
//! serves the same.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::compacted::{
    compacting_cluster, create_compacted_with, fetch_topic, now_ms, produce_to, Table, T,
};
use common::kafka::{on_any, KafkaConn};
use common::serving::{start, Nodes};
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::fetch_request::FetchRequest;
use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};
use vdl_server::LogStream;

const TOPIC: &str = "txtable";
const PRODUCER: i64 = 77;

/// A transactional batch of one record `key` = `value`, at sequence `seq`.
fn txn_record(key: &str, value: &str, seq: i32) -> Bytes {
    RecordBatchBuilder::new(Compression::None)
        .producer(PRODUCER, 0, seq)
        .transactional(true)
        .with_records(&[
            NewRecord::new(now_ms(), value.as_bytes().to_vec()).with_key(key.as_bytes().to_vec())
        ])
        .unwrap()
        .build()
        .unwrap()
}

/// WriteTxnMarkers (COMMIT when `commit`, else ABORT) for the producer on the topic's
/// partition 0: the error code.
fn marker(c: &mut KafkaConn, commit: bool) -> std::io::Result<(i16, ())> {
    let req = common::requests::txn_markers(TOPIC, &[(PRODUCER, 0, commit)]);
    match c.call(ApiKey::WriteTxnMarkers, 1, &req)? {
        Response::WriteTxnMarkers(r) => Ok((r.markers[0].topics[0].partitions[0].error_code, ())),
        other => panic!("{other:?}"),
    }
}

/// What a read_committed consumer gets from offset 0 (one Fetch, v11).
#[derive(Debug, Clone, PartialEq)]
struct Committed {
    high_watermark: i64,
    last_stable_offset: i64,
    /// (producer id, first offset) of the aborted transactions sent.
    aborted: Vec<(i64, i64)>,
    /// The (key, value) records a consumer keeps, in offset order, as Kafka's consumer
    /// filters: control batches skipped, a producer's transactional batches dropped from an
    /// aborted transaction's first offset until that producer's next control batch.
    records: Vec<(u64, String, String)>,
}

fn read_committed(c: &mut KafkaConn) -> std::io::Result<(i16, Committed)> {
    let req = Request::Fetch(FetchRequest {
        isolation_level: 1,
        ..common::requests::fetch_one(TOPIC, 0, 0, 1 << 20)
    });
    let Response::Fetch(r) = c.call(ApiKey::Fetch, 11, &req)? else {
        panic!("not a fetch response")
    };
    let p = &r.responses[0].partitions[0];
    let (aborted, data) = common::requests::aborted_and_records(p);
    let s = |v: Option<Bytes>| String::from_utf8(v.unwrap_or_default().to_vec()).unwrap();
    let records = common::requests::read_committed_records(data, &aborted)
        .into_iter()
        .map(|r| (r.offset as u64, s(r.key), s(r.value)))
        .collect();
    Ok((
        p.error_code,
        Committed {
            high_watermark: p.high_watermark,
            last_stable_offset: p.last_stable_offset,
            aborted,
            records,
        },
    ))
}

/// The ready leader's stream of the topic's partition 0.
async fn leader_of(nodes: &Nodes) -> LogStream {
    let deadline = Instant::now() + T;
    loop {
        if let Some(s) = nodes.0.iter().find_map(|(n, _)| {
            n.partition(TOPIC, 0)
                .filter(|s| s.visible().leader == n.config().id && s.visible().leader_ready)
        }) {
            return s;
        }
        assert!(Instant::now() < deadline, "no ready leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Produces filler records (key `f`), 1.1 s apart so that segments roll (`segment.ms` = 1 s)
/// and passes find cleanable data, until `done` holds of what Fetch serves (at most 40 s):
/// what was served then.
fn fill_until(brokers: &[SocketAddr], what: &str, mut done: impl FnMut(&Table) -> bool) -> Table {
    let deadline = Instant::now() + Duration::from_secs(40);
    for i in 0.. {
        let served = fetch_topic(brokers, TOPIC);
        if done(&served) {
            return served;
        }
        assert!(Instant::now() < deadline, "{what}: {served:?}");
        let v = i.to_string();
        produce_to(brokers, TOPIC, &[(Some("f"), Some(&v))]);
        std::thread::sleep(Duration::from_millis(1100));
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_data_and_then_its_marker_are_cleaned_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let configs = compacting_cluster(dir.path());
    let brokers: Vec<SocketAddr> = configs.iter().map(|c| c.kafka_listen).collect();
    let nodes = start(&configs).await;
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b[0]).unwrap();
        let extra = [("delete.retention.ms", "0")];
        assert_eq!(create_compacted_with(&mut c, TOPIC, &extra), (0, None));
        assert_eq!(produce_to(&b, TOPIC, &[(Some("a"), Some("1"))]), 0);
        assert_eq!(produce_to(&b, TOPIC, &[(Some("a"), Some("2"))]), 1);
    })
    .await
    .unwrap();
    // The aborted transaction: its record of `a` at 2 (through the stream: Produce refuses
    // transactional batches until the coordinator exists), the ABORT marker at 3; then a
    // committed transaction of the same producer: `b` at 4, the COMMIT marker at 5.
    let leader = leader_of(&nodes).await;
    // In a segment of its own: the first one rolls (segment.ms = 1 s) before it is written.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let at = leader
        .append(txn_record("a", "aborted", 0), 1, T)
        .await
        .unwrap();
    assert_eq!(at.base_offset, 2);
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || on_any(&b, T, "the abort marker", |c| marker(c, false)))
        .await
        .unwrap();
    let at = leader
        .append(txn_record("b", "committed", 1), 1, T)
        .await
        .unwrap();
    assert_eq!(at.base_offset, 4);
    drop(leader);
    let b = brokers.clone();
    let (served, committed) = tokio::task::spawn_blocking(move || {
        on_any(&b, T, "the commit marker", |c| marker(c, true));
        // read_committed drops the aborted record (a = 1 may be cleaned already).
        let committed = on_any(&b, T, "read_committed", read_committed);
        let values: Vec<&str> = committed.records.iter().map(|r| r.2.as_str()).collect();
        assert!(values.ends_with(&["2", "committed"]), "{committed:?}");
        assert_eq!(committed.aborted, [(PRODUCER, 2)]);
        // The aborted record goes (it is not the producer's last batch), the older `a` too,
        // while the committed `a` = 2 stays: the aborted record never superseded it.
        let served = fill_until(&b, "the aborted record removed", |served| {
            assert_eq!(
                served.get(&1),
                Some(&("a".to_string(), Some("2".to_string()))),
                "the committed value stays"
            );
            !served.contains_key(&0) && !served.contains_key(&2)
        });
        assert!(served.contains_key(&4), "the committed transaction stays");
        // Both markers stay: no producer state was saved yet (the group saves it when it
        // stops), so no marker may go.
        assert!(
            served.contains_key(&3) && served.contains_key(&5),
            "{served:?}"
        );
        let committed = check_committed(&b);
        (served, committed)
    })
    .await
    .unwrap();

    // Every node restarts: the transaction state is rebuilt from the saved producer table and
    // the cleaned log after it (the ABORT marker with no data before it).
    drop(nodes);
    let nodes = start(&configs).await;
    drop(leader_of(&nodes).await);
    let b = brokers.clone();
    let (served, committed) = tokio::task::spawn_blocking(move || {
        check_same_after_restart(&b, &served, &committed);
        // Now that the saved state covers it, the ABORT marker at 3 goes by later passes (its
        // transaction has no data left: a pass gives it a horizon, a later one removes it);
        // the COMMIT marker at 5 stays (its transaction's record does). Meanwhile
        // read_committed keeps the committed record of the producer and never gets the
        // aborted range without its marker.
        let served = fill_until(&b, "the abort marker removed", |served| {
            let committed = check_committed(&b);
            if !served.contains_key(&3) {
                assert!(committed.aborted.is_empty(), "{committed:?}");
            }
            !served.contains_key(&3)
        });
        assert!(
            served.contains_key(&5),
            "the commit marker stays: {served:?}"
        );
        (served, check_committed(&b))
    })
    .await
    .unwrap();

    // Again, the marker gone too: no transaction is left open.
    drop(nodes);
    let nodes = start(&configs).await;
    drop(leader_of(&nodes).await);
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || check_same_after_restart(&b, &served, &committed))
        .await
        .unwrap();
    drop(nodes);
}

/// What read_committed serves now: the committed records of the test (a = 2, the producer's
/// committed `b`), never the aborted one, with no transaction open.
fn check_committed(b: &[SocketAddr]) -> Committed {
    let committed = on_any(b, T, "read_committed", read_committed);
    assert!(
        committed.records.iter().any(|r| r.1 == "a" && r.2 == "2"),
        "{committed:?}"
    );
    assert!(
        committed
            .records
            .iter()
            .any(|r| r.1 == "b" && r.2 == "committed"),
        "{committed:?}"
    );
    assert!(committed.records.iter().all(|r| r.2 != "aborted"));
    assert_eq!(
        committed.last_stable_offset, committed.high_watermark,
        "{committed:?}"
    );
    committed
}

/// After a restart, once the partition is back to its high watermark: no transaction open,
/// and read_committed and read_uncommitted serve what they did before (the filler records
/// aside: passes may clean them meanwhile).
fn check_same_after_restart(b: &[SocketAddr], served: &Table, committed: &Committed) {
    let deadline = Instant::now() + T;
    let after = loop {
        let after = on_any(b, T, "read_committed", read_committed);
        if after.high_watermark >= committed.high_watermark {
            break after;
        }
        assert!(Instant::now() < deadline, "{after:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(after.last_stable_offset, after.high_watermark, "{after:?}");
    let not_filler = |r: &&(u64, String, String)| r.1 != "f";
    assert_eq!(
        after.records.iter().filter(not_filler).collect::<Vec<_>>(),
        committed
            .records
            .iter()
            .filter(not_filler)
            .collect::<Vec<_>>()
    );
    let without_filler = |t: &Table| -> Table {
        t.iter()
            .filter(|(_, r)| r.0 != "f")
            .map(|(o, r)| (*o, r.clone()))
            .collect()
    };
    assert_eq!(
        without_filler(&fetch_topic(b, TOPIC)),
        without_filler(served)
    );
}
