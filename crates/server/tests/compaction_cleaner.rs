//! Log compaction end to end through the Kafka protocol (issue 35): a topic created with
//! `cleanup.policy=compact` (CreateTopics) is cleaned by every replica's log cleaner
//! (`compaction/cleaner.rs`) once `segment.ms` rolled its data out of the active segment: Fetch
//! then serves only the latest record of every key, at its original offset, on every replica,
//! tombstones included (kept before `delete.retention.ms`, removed by a later pass after it);
//! offsets go on after it; a record without a key is refused with INVALID_RECORD (87) and its
//! record errors, nothing stored; and `cleanup.policy` switches at runtime.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::compacted::{
    batch, compacting_cluster, create_compacted_with, fetch_topic, latest, now_ms, produce_round,
    produce_to, producer_batches, read_replica, wait_compacted, wait_served, Table, T,
};
use common::kafka::{on_any, KafkaConn};
use common::serving::start;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
};
use kafka_proto::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_proto::records::{Compression, NewRecord};
use kafka_proto::RecordChunks;
use vdl_server::Node;

const TOPIC: &str = "table";
const KEYS: usize = 12;
const INVALID_RECORD: i16 = 87;

/// Everything the leader serves through Kafka Fetch, from offset 0 to the high watermark.
fn fetch_all(brokers: &[SocketAddr]) -> Table {
    fetch_topic(brokers, TOPIC)
}

fn create_compacted(c: &mut KafkaConn) -> (i16, Option<String>) {
    create_compacted_with(c, TOPIC, &[])
}

/// Produce v9 (acks=all) of `records` to the topic: the partition's error code, record
/// errors (batch index, message) and error message.
type ProduceAnswer = (i16, Vec<(i32, Option<String>)>, Option<String>);

fn produce_raw(c: &mut KafkaConn, records: Bytes) -> std::io::Result<ProduceAnswer> {
    let req = Request::Produce(ProduceRequest {
        acks: -1,
        timeout_ms: 10_000,
        topic_data: vec![TopicProduceData {
            name: TOPIC.into(),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(RecordChunks::from(records)),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    match c.call(ApiKey::Produce, 9, &req)? {
        Response::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            let errors = p
                .record_errors
                .iter()
                .map(|e| (e.batch_index, e.batch_index_error_message.clone()))
                .collect();
            Ok((p.error_code, errors, p.error_message.clone()))
        }
        other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
    }
}

/// IncrementalAlterConfigs v1 SET of `cleanup.policy` on the topic: the error code.
fn set_policy(c: &mut KafkaConn, policy: &str) -> std::io::Result<i16> {
    let req = Request::IncrementalAlterConfigs(IncrementalAlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: 2,
            resource_name: TOPIC.into(),
            configs: vec![AlterableConfig {
                name: "cleanup.policy".into(),
                config_operation: 0,
                value: Some(policy.into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    match c.call(ApiKey::IncrementalAlterConfigs, 1, &req)? {
        Response::IncrementalAlterConfigs(r) => Ok(r.responses[0].error_code),
        other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
    }
}

/// Produces `records` (acks=all) through whichever broker leads: the base offset.
fn produce(brokers: &[SocketAddr], records: &[(Option<&str>, Option<&str>)]) -> i64 {
    produce_to(brokers, TOPIC, records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleaner_keeps_the_latest_value_of_every_key_at_its_offset_on_every_replica() {
    let dir = tempfile::tempdir().unwrap();
    // Rolls by segment.ms are checked with retention; rounds of the cleaner often.
    let configs = compacting_cluster(dir.path());
    let brokers: Vec<SocketAddr> = configs.iter().map(|c| c.kafka_listen).collect();
    let nodes = start(&configs).await;

    let b = brokers.clone();
    let (produced, keyless) = tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b[0]).unwrap();
        assert_eq!(create_compacted(&mut c), (0, None));
        // Every key written five times, in batches of several keys, in two bursts a roll
        // apart (two segments), then tombstones of two keys.
        let mut produced = Table::new();
        for round in 0..5 {
            if round == 3 {
                std::thread::sleep(Duration::from_millis(1_500));
            }
            produce_round(&b, TOPIC, KEYS, 4, round, &mut produced);
        }
        let base = produce(&b, &[(Some("k1"), None), (Some("k2"), None)]) as u64;
        produced.insert(base, ("k1".into(), None));
        produced.insert(base + 1, ("k2".into(), None));

        // A keyless record (alone or among keyed ones) is refused, nothing stored.
        let before = fetch_all(&b);
        let refused = batch(&[(Some("k3"), Some("x")), (None, Some("no key"))]);
        let keyless = on_any(&b, T, "a keyless produce reaching the leader", |c| {
            let (code, errors, message) = produce_raw(c, refused.clone())?;
            // Not the leader: try the next broker.
            Ok((
                if code == INVALID_RECORD { 0 } else { code },
                (code, errors, message),
            ))
        });
        // The cleaner may remove older values meanwhile: nothing new may appear.
        let after = fetch_all(&b);
        assert!(
            after.iter().all(|(o, r)| before.get(o) == Some(r))
                && after.keys().last() == before.keys().last(),
            "nothing of a refused batch is stored: before {before:?}, after {after:?}"
        );
        (produced, keyless)
    })
    .await
    .unwrap();

    let (code, errors, message) = keyless;
    assert_eq!(code, INVALID_RECORD);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, 1, "the second record of the batch");
    assert_eq!(
        errors[0].1.as_deref(),
        Some("Compacted topic cannot accept message without key in topic partition table-0.")
    );
    assert!(message.unwrap().contains("1 record errors"));

    let expected = latest(&produced);
    assert_eq!(expected.len(), KEYS);
    assert!(produced.len() > 4 * KEYS);

    // segment.ms rolls the quiet partition's segment; every replica's cleaner then compacts.
    let b = brokers.clone();
    let replicas: Vec<Arc<Node>> = nodes.0.iter().map(|(n, _)| n.clone()).collect();
    let all = produced.clone();
    tokio::task::spawn_blocking(move || {
        let tables = || {
            replicas
                .iter()
                .map(|n| read_replica(&n.partition(TOPIC, 0).expect("a replica here")))
                .collect::<Vec<_>>()
        };
        wait_compacted(&b, TOPIC, &tables, &all);
    })
    .await
    .unwrap();
    for (n, _) in &nodes.0 {
        assert!(
            n.cleaner_counters().passes.load(Ordering::Relaxed) > 0,
            "node {} ran a pass",
            n.config().id
        );
        assert!(n.cleaner_counters().records_removed.load(Ordering::Relaxed) > 0);
        // The scrape reports the cleaner's view of the compacted partition.
        let scrape = n.scrape();
        let sample = scrape
            .partitions
            .iter()
            .find(|p| p.topic == TOPIC)
            .expect("the partition is scraped");
        let stats = sample
            .cleaner
            .expect("a compacted partition has cleaner stats");
        assert!(
            stats.clean_bytes > 0 && stats.last_clean_ms.is_some(),
            "{stats:?}"
        );
    }

    // Offsets go on after compaction.
    let end = *produced.keys().last().unwrap() + 1;
    let b = brokers.clone();
    let next = tokio::task::spawn_blocking(move || produce(&b, &[(Some("k0"), Some("after"))]))
        .await
        .unwrap();
    assert_eq!(next as u64, end);

    // Switched to delete at runtime, the topic takes keyless records; back to compact, it
    // refuses them again.
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || {
        on_any(&b, T, "policy delete", |c| {
            set_policy(c, "delete").map(|e| (e, ()))
        });
        let keyless = batch(&[(None, Some("free"))]);
        let at = on_any(&b, T, "a keyless produce once delete", |c| {
            c.produce(TOPIC, keyless.clone())
        });
        assert_eq!(at as u64, end + 1);
        on_any(&b, T, "policy compact", |c| {
            set_policy(c, "compact").map(|e| (e, ()))
        });
        let deadline = Instant::now() + T;
        loop {
            let code = on_any(&b, T, "an answer from the leader", |c| {
                let (code, ..) = produce_raw(c, keyless.clone())?;
                Ok((if code == 6 { 6 } else { 0 }, code))
            });
            if code == INVALID_RECORD {
                break;
            }
            assert!(Instant::now() < deadline, "keyless still accepted: {code}");
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
}

/// `delete.retention.ms`: a tombstone kept by one pass is removed by a later pass of the
/// leader once it is older than the retention (0 here) and every replica holds it, and its
/// key is gone from what Fetch serves; the other keys keep their latest values at their
/// offsets. Followers keep the tombstone (only a leader removes tombstones, so that a replica
/// that was away never gets a tombstone's entry without it while holding an older value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tombstones_go_after_delete_retention_ms_once_a_pass_kept_them() {
    const GONE: &str = "gone";
    let dir = tempfile::tempdir().unwrap();
    let configs = compacting_cluster(dir.path());
    let brokers: Vec<SocketAddr> = configs.iter().map(|c| c.kafka_listen).collect();
    let nodes = start(&configs).await;
    let replicas: Vec<Arc<Node>> = nodes.0.iter().map(|(n, _)| n.clone()).collect();
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b[0]).unwrap();
        assert_eq!(
            create_compacted_with(&mut c, GONE, &[("delete.retention.ms", "0")]),
            (0, None)
        );
        let a0 = produce_to(
            &b,
            GONE,
            &[(Some("a"), Some("a0")), (Some("b"), Some("b0"))],
        );
        let del = produce_to(&b, GONE, &[(Some("a"), None)]);
        // The first pass keeps the tombstone (it is the latest of its key, in the dirty part)
        // and removes a's older value.
        let expected: Table = [
            (a0 as u64 + 1, ("b".to_string(), Some("b0".to_string()))),
            (del as u64, ("a".to_string(), None)),
        ]
        .into();
        wait_served(&b, GONE, "first pass not seen", |served| {
            let removed = !served.contains_key(&(del as u64));
            assert!(
                !removed,
                "the tombstone went before a pass kept it: {served:?}"
            );
            *served == expected
        });
        // New data makes the partition dirty again; the next pass removes the tombstone.
        let c0 = produce_to(&b, GONE, &[(Some("c"), Some("c0"))]);
        let expected: Table = [
            (a0 as u64 + 1, ("b".to_string(), Some("b0".to_string()))),
            (c0 as u64, ("c".to_string(), Some("c0".to_string()))),
        ]
        .into();
        wait_served(&b, GONE, "tombstone not removed", |served| {
            *served == expected
        });
        // Every follower still holds it, when the group only ever had one leader (each
        // replica counts the leader changes it saw: the first election is one).
        let streams: Vec<_> = replicas
            .iter()
            .map(|n| (n.config().id, n.partition(GONE, 0).expect("a replica here")))
            .collect();
        let one_leader = streams
            .iter()
            .all(|(_, s)| s.metrics().leader_changes.load(Ordering::Relaxed) == 1);
        let followers: Vec<_> = streams
            .iter()
            .filter(|(id, s)| s.visible().leader != *id)
            .collect();
        assert_eq!(followers.len(), 2);
        if one_leader {
            for (id, s) in followers {
                assert_eq!(
                    read_replica(s).get(&(del as u64)),
                    Some(&("a".to_string(), None)),
                    "follower {id} removed the tombstone"
                );
            }
        } else {
            eprintln!("leadership moved during the test: the followers' tombstones not checked");
        }
    })
    .await
    .unwrap();
}

/// A batch of an idempotent producer: `records` as (key, value), sequences from `seq`.
fn idempotent_batch(producer: i64, seq: i32, records: &[(&str, &str)]) -> Bytes {
    let records: Vec<NewRecord> = records
        .iter()
        .map(|(k, v)| {
            NewRecord::new(now_ms(), v.as_bytes().to_vec()).with_key(k.as_bytes().to_vec())
        })
        .collect();
    kafka_proto::records::RecordBatchBuilder::new(Compression::None)
        .producer(producer, 0, seq)
        .with_records(&records)
        .unwrap()
        .build()
        .unwrap()
}

/// Every file named `producers` (a saved producer table) under `dir`.
fn producer_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            producer_files(&p, out);
        } else if p.file_name().is_some_and(|n| n == "producers") {
            out.push(p);
        }
    }
}

/// Idempotent producer state survives compaction, at Kafka's cost: of an idempotent
/// producer's batches whose every record a later write superseded, only its last stays (as
/// its header), the earlier ones go whole (no 61-byte header per batch piles up); after a
/// crash (no saved producer table: every replica rebuilds it from its compacted log) a retry
/// of the producer's last batch is answered as a duplicate with its offset (not
/// OUT_OF_ORDER_SEQUENCE, not written twice), and the producer's next sequence is accepted
/// at the next offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_state_survives_compaction_and_a_crash() {
    const IDEM: &str = "idem";
    let dir = tempfile::tempdir().unwrap();
    let configs = compacting_cluster(dir.path());
    let brokers: Vec<SocketAddr> = configs.iter().map(|c| c.kafka_listen).collect();
    let nodes = start(&configs).await;
    let b = brokers.clone();
    let (producer, last_batch, end) = tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(b[0]).unwrap();
        assert_eq!(create_compacted_with(&mut c, IDEM, &[]), (0, None));
        let producer = on_any(&b, T, "a producer id", |c| c.init_producer_id());
        // Three batches of the producer (sequences 0, 2, 4), each overwriting "a" and "b".
        let mut last_batch = 0;
        for seq in [0, 2, 4] {
            let v = seq.to_string();
            let batch = idempotent_batch(producer, seq, &[("a", &v), ("b", &v)]);
            last_batch = on_any(&b, T, "idempotent produce", |c| {
                c.produce(IDEM, batch.clone())
            });
        }
        // Another (plain) producer supersedes all of their records.
        let last = produce_to(&b, IDEM, &[(Some("a"), Some("x")), (Some("b"), Some("x"))]);
        let end = last as u64 + 2;
        wait_served(&b, IDEM, "not compacted", |served| {
            served.len() == 2 && served.keys().all(|o| *o >= last as u64)
        });
        (producer, last_batch as u64, end)
    })
    .await
    .unwrap();
    // Every replica compacted the batches away before the crash, keeping the header of the
    // producer's last batch only.
    let deadline = Instant::now() + T;
    loop {
        let stored: Vec<(Table, Vec<(u64, i32)>)> = nodes
            .0
            .iter()
            .map(|(n, _)| {
                let s = n.partition(IDEM, 0).expect("a replica");
                (read_replica(&s), producer_batches(&s, producer))
            })
            .collect();
        if stored
            .iter()
            .all(|(t, p)| t.len() == 2 && p == &[(last_batch, 0)])
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a replica did not compact: {:?}",
            stored.iter().map(|s| &s.1).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(nodes);
    // A crash: no saved producer table, each replica rebuilds it from its compacted log.
    let mut files = Vec::new();
    producer_files(dir.path(), &mut files);
    for f in &files {
        std::fs::remove_file(f).unwrap();
    }
    let _nodes = start(&configs).await;
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || {
        let retry = idempotent_batch(producer, 4, &[("a", "4"), ("b", "4")]);
        let at = on_any(&b, T, "the retried batch", |c| {
            c.produce(IDEM, retry.clone())
        });
        assert_eq!(
            at as u64, last_batch,
            "a duplicate, answered with its offset"
        );
        let next = idempotent_batch(producer, 6, &[("c", "1")]);
        let at = on_any(&b, T, "the next batch", |c| c.produce(IDEM, next.clone()));
        assert_eq!(
            at as u64, end,
            "the next sequence is accepted at the next offset: the retry wrote nothing"
        );
    })
    .await
    .unwrap();
}
