//! The embedded API on a single node: every public call, restart of the embedding program,
//! bad input, and the same data seen by a Kafka client.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use kafka_proto::records::{split_batches, RecordBatch};
use vdl::partitioner::partition_for_key;
use vdl::{Error, Log, Offset, Record, StreamOptions};

use common::kafka::KafkaConn;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appended_records_read_back_with_keys_headers_and_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open_single(dir.path()).await.unwrap();
    let s = log.stream("orders").await.unwrap();
    assert_eq!(s.name(), "orders");
    assert_eq!(s.partitions(), 1);
    let a = s
        .append(
            Record::keyed("o-1", "created")
                .with_header("table", "orders")
                .with_timestamp_ms(1_700_000_000_000),
        )
        .await
        .unwrap();
    assert_eq!(a, Offset::new(0, 0));
    let batch = s
        .append_batch(vec![
            Record::new("b1"),
            Record::new("b2"),
            Record::new("b3"),
        ])
        .await
        .unwrap();
    assert_eq!(
        batch.iter().map(|o| o.offset).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let atomic = s
        .append_atomic(vec![Record::keyed("x", "1"), Record::keyed("x", "2")])
        .await
        .unwrap();
    assert_eq!(atomic, vec![Offset::new(0, 4), Offset::new(0, 5)]);

    let all = s.read_range(Offset::start(0), u64::MAX).await.unwrap();
    assert_eq!(all.len(), 6);
    assert_eq!(all[0].key.as_deref(), Some(&b"o-1"[..]));
    assert_eq!(all[0].value.as_deref(), Some(&b"created"[..]));
    assert_eq!(all[0].timestamp_ms, 1_700_000_000_000);
    assert_eq!(
        all[0].headers,
        vec![("table".to_owned(), Some(Bytes::from_static(b"orders")))]
    );
    // Records without a timestamp get the append time.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!((now - all[1].timestamp_ms).abs() < 60_000);
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r.offset, Offset::new(0, i as u64));
    }
    // A sub-range, and the end clamped to the high watermark.
    let mid = s.read_range(Offset::new(0, 2), 4).await.unwrap();
    assert_eq!(
        mid.iter().map(|r| r.offset.offset).collect::<Vec<_>>(),
        vec![2, 3]
    );
    assert!(s
        .read_range(Offset::new(0, 6), 100)
        .await
        .unwrap()
        .is_empty());
    assert!(matches!(
        s.read_range(Offset::new(0, 7), 100).await,
        Err(Error::OffsetOutOfRange {
            offset: 7,
            high_watermark: 6,
            ..
        })
    ));
    let st = s.status(0).unwrap();
    assert_eq!(st.leader, Some(log.node_id()));
    assert!(st.leader_ready);
    assert_eq!((st.high_watermark, st.log_start_offset), (6, 0));
    assert_eq!(log.stream_names(), vec!["orders".to_owned()]);
    log.shutdown().await;
}

/// A key-value "database" rebuilt from the log after the program restarts equals the one
/// before; offsets go on where they stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_rebuilt_from_the_log_after_a_restart_equals_the_state_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut before: BTreeMap<String, String> = BTreeMap::new();
    {
        let log = Log::open_single(dir.path()).await.unwrap();
        let s = log.stream("kv").await.unwrap();
        for i in 0..200u32 {
            let key = format!("k{}", i % 37);
            if i % 11 == 10 {
                s.append(Record {
                    key: Some(key.clone().into()),
                    value: None,
                    ..Record::default()
                })
                .await
                .unwrap();
                before.remove(&key);
            } else {
                let value = format!("v{i}");
                s.append(Record::keyed(key.clone(), value.clone()))
                    .await
                    .unwrap();
                before.insert(key, value);
            }
        }
        log.shutdown().await;
        // Calls after shutdown are refused.
        assert!(matches!(
            s.append(Record::new("late")).await,
            Err(Error::Closed)
        ));
        assert!(matches!(log.stream("kv").await, Err(Error::Closed)));
    }
    let log = Log::open_single(dir.path()).await.unwrap();
    let s = log.stream("kv").await.unwrap();
    let mut after: BTreeMap<String, String> = BTreeMap::new();
    let mut next = Offset::start(0);
    loop {
        let records = s.read_range(next, u64::MAX).await.unwrap();
        let Some(last) = records.last() else { break };
        next = last.offset.next();
        for r in records {
            let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
            match r.value {
                Some(v) => after.insert(key, String::from_utf8(v.to_vec()).unwrap()),
                None => after.remove(&key),
            };
        }
    }
    assert_eq!(next.offset, 200);
    assert_eq!(after, before);
    assert_eq!(
        s.append(Record::new("more")).await.unwrap(),
        Offset::new(0, 200)
    );
    log.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_records_are_a_typed_error_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open_single(dir.path()).await.unwrap();
    let small = log
        .create_stream(
            "small",
            StreamOptions {
                configs: [("max.message.bytes".to_owned(), "4096".to_owned())].into(),
                ..StreamOptions::default()
            },
        )
        .await
        .unwrap();
    small.append(Record::new(vec![b'a'; 1000])).await.unwrap();
    let err = small
        .append(Record::new(vec![b'a'; 5000]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { max: 4096, size } if size > 5000),
        "{err:?}"
    );
    // A batch whose one record is too large writes none of the others.
    let err = small
        .append_batch(vec![Record::new("ok"), Record::new(vec![b'b'; 5000])])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err:?}");
    assert_eq!(small.status(0).unwrap().high_watermark, 1);
    // The node's default limit (1 MiB) holds for a stream without the config.
    let s = log.stream("default").await.unwrap();
    let err = s
        .append(Record::new(vec![b'c'; 2 << 20]))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err:?}");
    assert_eq!(s.status(0).unwrap().high_watermark, 0);
    // Empty appends, timestamps far in the future, bad partitions: refused, nothing written.
    assert!(matches!(
        s.append_batch(Vec::new()).await,
        Err(Error::InvalidRecord(_))
    ));
    assert!(matches!(
        s.append(Record::new("x").with_timestamp_ms(i64::MAX / 2))
            .await,
        Err(Error::InvalidRecord(_))
    ));
    assert!(matches!(
        s.append(Record::new("x").to_partition(1)).await,
        Err(Error::InvalidRecord(_))
    ));
    assert_eq!(s.status(0).unwrap().high_watermark, 0);
    assert_eq!(
        s.append(Record::new("fits")).await.unwrap(),
        Offset::new(0, 0)
    );
    // Bad stream names and configs.
    assert!(matches!(
        log.stream("no/slashes").await,
        Err(Error::InvalidStream(_))
    ));
    assert!(matches!(
        log.create_stream(
            "badconfig",
            StreamOptions {
                configs: [("cleanup.policy".to_owned(), "shred".to_owned())].into(),
                ..StreamOptions::default()
            }
        )
        .await,
        Err(Error::InvalidStream(_))
    ));
    log.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_go_where_kafkas_default_partitioner_puts_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open_single(dir.path()).await.unwrap();
    let s = log
        .create_stream(
            "routed",
            StreamOptions {
                retention: Some(Duration::from_secs(3600)),
                retention_bytes: Some(1 << 30),
                ..StreamOptions::partitions(4)
            },
        )
        .await
        .unwrap();
    assert_eq!(s.partitions(), 4);
    let configs = log.node().metadata().topics["routed"].configs.clone();
    assert_eq!(
        configs.get("retention.ms").map(String::as_str),
        Some("3600000")
    );
    assert_eq!(
        configs.get("retention.bytes").map(String::as_str),
        Some("1073741824")
    );
    // Opening it again keeps its options.
    assert_eq!(log.stream("routed").await.unwrap().partitions(), 4);

    let keys: Vec<String> = (0..40).map(|i| format!("customer-{i}")).collect();
    let records = keys.iter().map(|k| Record::keyed(k.clone(), "v")).collect();
    let at = s.append_batch(records).await.unwrap();
    for (k, o) in keys.iter().zip(&at) {
        assert_eq!(o.partition, partition_for_key(k.as_bytes(), 4), "{k}");
    }
    let explicit = s
        .append(Record::keyed("customer-0", "v").to_partition(3))
        .await;
    assert_eq!(explicit.unwrap().partition, 3);
    // Records without key go to the partitions in turn.
    let unkeyed = s
        .append_batch((0..8).map(|_| Record::new("u")).collect())
        .await
        .unwrap();
    let mut per: BTreeMap<u32, usize> = BTreeMap::new();
    for o in unkeyed {
        *per.entry(o.partition).or_default() += 1;
    }
    assert_eq!(per.values().copied().collect::<Vec<_>>(), vec![2, 2, 2, 2]);
    // An atomic append whose keys land in two partitions is refused whole.
    let (a, b) = {
        let p0 = partition_for_key(keys[0].as_bytes(), 4);
        let other = keys
            .iter()
            .find(|k| partition_for_key(k.as_bytes(), 4) != p0)
            .unwrap();
        (keys[0].clone(), other.clone())
    };
    let hw_before: Vec<u64> = (0..4)
        .map(|p| s.status(p).unwrap().high_watermark)
        .collect();
    let err = s
        .append_atomic(vec![Record::keyed(a.clone(), "1"), Record::keyed(b, "2")])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidRecord(_)), "{err:?}");
    let hw_after: Vec<u64> = (0..4)
        .map(|p| s.status(p).unwrap().high_watermark)
        .collect();
    assert_eq!(hw_before, hw_after);
    // Keyless records follow the keyed one's partition in an atomic append.
    let together = s
        .append_atomic(vec![Record::keyed(a.clone(), "1"), Record::new("2")])
        .await
        .unwrap();
    assert_eq!(together[0].partition, partition_for_key(a.as_bytes(), 4));
    assert_eq!(together[1].partition, together[0].partition);
    log.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_waits_for_commits_yields_each_once_and_ends_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open_single(dir.path()).await.unwrap();
    let s = log.stream("t").await.unwrap();
    s.append(Record::new("0")).await.unwrap();
    let mut tail = s.tail(Offset::new(0, 0));
    let first = tail.next().await.unwrap().unwrap();
    assert_eq!(first.offset.offset, 0);
    assert_eq!(tail.next_offset(), Offset::new(0, 1));
    // Nothing more yet: the tail waits.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), tail.next())
            .await
            .is_err()
    );
    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            for i in 1..=300u32 {
                s.append(Record::new(i.to_string())).await.unwrap();
            }
        })
    };
    for expected in 1..=300u64 {
        let r = tokio::time::timeout(Duration::from_secs(10), tail.next())
            .await
            .expect("a record within 10 s")
            .unwrap()
            .unwrap();
        assert_eq!(r.offset.offset, expected);
        assert_eq!(r.value.as_deref(), Some(expected.to_string().as_bytes()));
    }
    writer.await.unwrap();
    // A tail from the middle; a tail past the end is an error.
    let mut mid = s.tail(Offset::new(0, 250));
    assert_eq!(mid.next().await.unwrap().unwrap().offset.offset, 250);
    let mut beyond = s.tail(Offset::new(0, 1000));
    assert!(matches!(
        beyond.next().await,
        Some(Err(Error::OffsetOutOfRange { .. }))
    ));
    assert!(beyond.next().await.is_none());
    // Shutdown ends a waiting tail.
    let waiting = tokio::spawn(async move { tail.next().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    log.shutdown().await;
    let ended = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the tail ends at shutdown")
        .unwrap();
    assert!(matches!(ended, Some(Err(Error::Closed))), "{ended:?}");
}

/// Positions are Kafka group offsets: committed here, a Kafka OffsetFetch of the group sees
/// them; committed by a Kafka client, `position` sees them; both survive a restart. The
/// appended records are ordinary Kafka batches to a Kafka Fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_and_records_are_what_kafka_clients_see() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::single_with_kafka(dir.path());
    let log = Log::join(config.clone()).await.unwrap();
    let addr = log.serve_kafka().await.unwrap();
    assert_eq!(addr, config.kafka_listen);
    // Serving again is a no-op.
    assert_eq!(log.serve_kafka().await.unwrap(), addr);
    let s = log.stream("cdc").await.unwrap();
    assert_eq!(s.position("indexer", 0), None);
    s.append_batch(vec![
        Record::keyed("k0", "v0").with_header("op", "insert"),
        Record::keyed("k1", "v1"),
        Record::keyed("k2", "v2"),
    ])
    .await
    .unwrap();
    s.commit("indexer", Offset::new(0, 2)).await.unwrap();
    assert_eq!(s.position("indexer", 0), Some(Offset::new(0, 2)));
    let (fetched, records) = tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(addr).unwrap();
        let fetched = c.fetch_offset("indexer", "cdc").unwrap();
        assert_eq!(c.commit_offset("reporting", "cdc", 1).unwrap(), 0);
        let (err, hw, _, records) = c.fetch("cdc", 0).unwrap();
        assert_eq!((err, hw), (0, 3));
        (fetched, records)
    })
    .await
    .unwrap();
    assert_eq!(fetched, (0, 2));
    assert_eq!(s.position("reporting", 0), Some(Offset::new(0, 1)));
    let mut values = Vec::new();
    for b in split_batches(records) {
        let b: RecordBatch = b.unwrap();
        b.validate().expect("CRC-32C and shape of a Kafka batch");
        assert!(b.max_timestamp() > 0);
        for r in b.records(1 << 20).unwrap() {
            let r = r.unwrap();
            values.push((r.offset, r.key.unwrap(), r.value.unwrap(), r.headers.len()));
        }
    }
    assert_eq!(values.len(), 3);
    assert_eq!(values[0].0, 0);
    assert_eq!(&values[0].1[..], b"k0");
    assert_eq!(values[0].3, 1);
    assert_eq!(&values[2].2[..], b"v2");
    // A Kafka consumer (kcat) prints the records; a Kafka producer's record shows in the
    // embedded reads and tails.
    let printed = tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("kcat")
            .args([
                "-C",
                "-b",
                &addr.to_string(),
                "-t",
                "cdc",
                "-o",
                "beginning",
                "-e",
            ])
            .args(["-f", "%o %k %s\n", "-m", "10"])
            .output()
            .expect("kcat is installed (scripts/test-deps.sh)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let produced = kafka_proto::records::build_batch(
            kafka_proto::records::Compression::None,
            &[
                kafka_proto::records::NewRecord::new(1_700_000_000_000, "from kafka")
                    .with_key("k3"),
            ],
        )
        .unwrap();
        let mut c = KafkaConn::connect(addr).unwrap();
        assert_eq!(c.produce("cdc", produced).unwrap(), (0, 3));
        String::from_utf8(out.stdout).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(printed, "0 k0 v0\n1 k1 v1\n2 k2 v2\n");
    let mut tail = s.tail(Offset::new(0, 3));
    let from_kafka = tail.next().await.unwrap().unwrap();
    assert_eq!(from_kafka.key.as_deref(), Some(&b"k3"[..]));
    assert_eq!(from_kafka.value.as_deref(), Some(&b"from kafka"[..]));
    log.shutdown().await;
    // Both positions survive the restart.
    let log = Log::join(config).await.unwrap();
    let s = log.stream("cdc").await.unwrap();
    assert_eq!(s.position("indexer", 0), Some(Offset::new(0, 2)));
    assert_eq!(s.position("reporting", 0), Some(Offset::new(0, 1)));
    assert!(matches!(
        s.commit("", Offset::new(0, 1)).await,
        Err(Error::InvalidStream(_))
    ));
    log.shutdown().await;
    log.shutdown().await;
}

/// A `LogAppendTime` stream stamps the leader's clock on every record, as Kafka does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_append_time_stream_stamps_the_append_time() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open_single(dir.path()).await.unwrap();
    let s = log
        .create_stream(
            "stamped",
            StreamOptions {
                configs: [(
                    "message.timestamp.type".to_owned(),
                    "LogAppendTime".to_owned(),
                )]
                .into(),
                ..StreamOptions::default()
            },
        )
        .await
        .unwrap();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // Even a timestamp far in the future is accepted and replaced.
    s.append_batch(vec![
        Record::new("a").with_timestamp_ms(1),
        Record::new("b").with_timestamp_ms(i64::MAX / 4),
    ])
    .await
    .unwrap();
    let records = s.read_range(Offset::start(0), u64::MAX).await.unwrap();
    assert_eq!(records.len(), 2);
    for r in &records {
        assert!(
            (r.timestamp_ms - before).abs() < 60_000,
            "{} vs {before}",
            r.timestamp_ms
        );
    }
    log.shutdown().await;
}
