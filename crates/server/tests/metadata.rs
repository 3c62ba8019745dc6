//! The replicated cluster metadata: topics created or deleted from any node exist or vanish on
//! every node, producer ids are unique, committed offsets are on every node, and all of it
//! survives the metadata leader's death and full restarts (the metadata log is replayed); a
//! log an earlier release wrote in JSON replays the same after an upgrade.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{batch, cluster_configs};
use vdl_server::metadata::{CommittedOffset, MetaCommand, MetaEntry, RequestId};
use vdl_server::Node;

/// The command that records `group`'s committed `offsets` (now on this machine's clock).
fn commit_offsets(group: &str, offsets: Vec<CommittedOffset>) -> MetaCommand {
    MetaCommand::CommitOffsets {
        group: group.to_owned(),
        offsets,
        commit_time_ms: vdl_server::metadata::wall_clock_ms(),
    }
}

/// The command that deletes topic `name` in the incarnation `node` knows now.
fn delete_topic(node: &Node, name: &str) -> MetaCommand {
    MetaCommand::DeleteTopic {
        name: name.to_owned(),
        incarnation: node.metadata().incarnation(name),
    }
}

const T: Duration = Duration::from_secs(10);

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn metadata_leader(nodes: &[Option<Arc<Node>>]) -> Option<usize> {
    nodes.iter().position(|n| {
        n.as_ref()
            .and_then(|n| n.metadata_group().map(|g| (g, n.config().id)))
            .is_some_and(|(g, id)| g.visible().leader == id)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_producer_ids_and_offsets_are_replicated_and_survive_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[]);
    let mut nodes: Vec<Option<Arc<Node>>> = Vec::new();
    for c in &configs {
        nodes.push(Some(Node::start(c.clone()).await.unwrap()));
    }
    wait_until("a metadata leader", || metadata_leader(&nodes).is_some()).await;
    let leader = metadata_leader(&nodes).unwrap();
    let follower = (leader + 1) % 3;

    // Created through a follower (forwarded to the leader), the topic exists everywhere.
    let f = nodes[follower].clone().unwrap();
    f.create_topic("orders", 1, T).await.unwrap();
    f.create_topic("orders", 1, T).await.unwrap(); // creating twice is a no-op
    for n in nodes.iter().flatten() {
        let n = n.clone();
        // The topic's layout is applied before its partition is opened: wait for both.
        wait_until("the topic and its partition on every node", move || {
            n.is_topic("orders") && n.stream("orders").is_some()
        })
        .await;
    }
    // ... and takes appends.
    let deadline = Instant::now() + T;
    let stream_leader = loop {
        if let Some(n) = nodes.iter().flatten().find(|n| {
            n.stream("orders")
                .is_some_and(|s| s.visible().leader == n.config().id)
        }) {
            break n.clone();
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let a = stream_leader
        .stream("orders")
        .unwrap()
        .append(batch(1, b"o1"), 1, T)
        .await
        .unwrap();
    assert_eq!(a.base_offset, 0);

    // Producer ids are unique across nodes.
    let mut ids = Vec::new();
    for n in nodes.iter().flatten() {
        ids.push(n.allocate_producer_id(T).await.unwrap());
        ids.push(n.allocate_producer_id(T).await.unwrap());
    }
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "producer ids {ids:?}");

    // Offsets committed at one node are on every node.
    let offset = |o: i64| CommittedOffset {
        topic: "orders".into(),
        partition: 0,
        offset: o,
        leader_epoch: -1,
        metadata: Some("m".into()),
    };
    f.metadata_proposer()
        .propose(&commit_offsets("g1", vec![offset(1)]), T)
        .await
        .unwrap();
    for n in nodes.iter().flatten() {
        let n = n.clone();
        wait_until("offsets on every node", move || {
            n.metadata()
                .offsets
                .get("g1")
                .and_then(|g| g.get(&("orders".to_string(), 0)))
                .map(|o| o.offset)
                == Some(1)
        })
        .await;
    }

    // The metadata leader dies: the others elect a new one and go on.
    nodes[leader].take().unwrap().shutdown();
    wait_until("a new metadata leader", || {
        metadata_leader(&nodes).is_some()
    })
    .await;
    let survivor = nodes.iter().flatten().next().unwrap().clone();
    survivor
        .metadata_proposer()
        .propose(&commit_offsets("g1", vec![offset(7)]), T)
        .await
        .unwrap();
    survivor.create_topic("payments", 1, T).await.unwrap();

    // Every node restarts: the metadata log is replayed; topics and offsets are back.
    drop((f, stream_leader, survivor));
    for n in nodes.iter_mut() {
        if let Some(n) = n.take() {
            n.shutdown();
        }
    }
    for (i, c) in configs.iter().enumerate() {
        nodes[i] = Some(Node::start(c.clone()).await.unwrap());
    }
    for n in nodes.iter().flatten() {
        let n = n.clone();
        wait_until("metadata after restart", move || {
            n.is_topic("orders")
                && n.is_topic("payments")
                && n.metadata()
                    .offsets
                    .get("g1")
                    .and_then(|g| g.get(&("orders".to_string(), 0)))
                    .map(|o| o.offset)
                    == Some(7)
        })
        .await;
    }
    // The data written before the restarts is still there.
    let n0 = nodes[0].clone().unwrap();
    wait_until("the orders record", move || {
        n0.stream("orders")
            .is_some_and(|s| s.visible().high_watermark == 1)
    })
    .await;

    // Deleting a topic removes it and its data on every node.
    let any = nodes[1].clone().unwrap();
    let command = delete_topic(&any, "payments");
    any.metadata_proposer().propose(&command, T).await.unwrap();
    for (i, n) in nodes.iter().flatten().enumerate() {
        let n2 = n.clone();
        wait_until("the topic gone", move || !n2.is_topic("payments")).await;
        assert!(
            !n.stream_dir("payments").exists(),
            "node {} still has the deleted topic's data",
            i + 1
        );
    }
    for n in nodes.iter().flatten() {
        n.shutdown();
    }
}

/// A metadata log written by an earlier release (JSON entries, some from before request ids)
/// and then extended by this one (protobuf entries) replays on every node after a restart of
/// all of them to exactly the state it had before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_log_written_in_json_replays_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(3, dir.path(), &[]);
    let mut nodes: Vec<Option<Arc<Node>>> = Vec::new();
    for c in &configs {
        nodes.push(Some(Node::start(c.clone()).await.unwrap()));
    }
    wait_until("a metadata leader", || metadata_leader(&nodes).is_some()).await;
    let n0 = nodes[0].clone().unwrap();

    // What an earlier release wrote: serde's JSON of the entry (with a request id) or of the
    // bare command (before request ids).
    let request = |seq| RequestId {
        node: 1,
        boot: 77,
        seq,
    };
    let json_entries: Vec<Vec<u8>> = vec![
        serde_json::to_vec(&MetaEntry {
            request: request(1),
            command: MetaCommand::CreateTopic {
                name: "old-a".into(),
                partitions: 3,
                // Written before replica placement: every member holds every partition.
                replicas: vec![],
                configs: Default::default(),
            },
        })
        .unwrap(),
        br#"{"CreateTopic":{"name":"old-b"}}"#.to_vec(),
        br#""AllocateProducerId""#.to_vec(),
        serde_json::to_vec(&MetaEntry {
            request: request(2),
            command: MetaCommand::AllocateProducerId,
        })
        .unwrap(),
        serde_json::to_vec(&MetaEntry {
            request: request(3),
            command: MetaCommand::CommitOffsets {
                group: "g".into(),
                offsets: vec![CommittedOffset {
                    topic: "old-a".into(),
                    partition: 2,
                    offset: 41,
                    leader_epoch: 3,
                    metadata: None,
                }],
                commit_time_ms: 0,
            },
        })
        .unwrap(),
        br#"{"CreateTopic":{"name":"old-c"}}"#.to_vec(),
        br#"{"DeleteTopic":{"name":"old-c"}}"#.to_vec(),
        // Retried with the same request id: applied once.
        serde_json::to_vec(&MetaEntry {
            request: request(2),
            command: MetaCommand::AllocateProducerId,
        })
        .unwrap(),
    ];
    let group = n0.metadata_group().unwrap();
    for e in json_entries {
        group.append_meta(e.into(), T).await.unwrap();
    }
    // Then this release's entries, through the node's API (protobuf).
    n0.create_topic("new-d", 2, T).await.unwrap();
    let producer_id = n0.allocate_producer_id(T).await.unwrap();
    let command = commit_offsets(
        "g",
        vec![CommittedOffset {
            topic: "new-d".into(),
            partition: 1,
            offset: 5,
            leader_epoch: -1,
            metadata: Some("m".into()),
        }],
    );
    n0.metadata_proposer().propose(&command, T).await.unwrap();

    type Snapshot = (
        std::collections::BTreeMap<String, vdl_server::metadata::TopicMeta>,
        i64,
        Vec<(String, String, i32, i64)>,
    );
    let snapshot = |n: &Node| -> Snapshot {
        let m = n.metadata();
        let mut offsets: Vec<_> = m
            .offsets
            .iter()
            .flat_map(|(g, o)| {
                o.values()
                    .map(|o| (g.clone(), o.topic.clone(), o.partition, o.offset))
            })
            .collect();
        offsets.sort();
        (m.topics.clone(), m.next_producer_id, offsets)
    };
    for n in nodes.iter().flatten() {
        let n = n.clone();
        wait_until("every entry applied on every node", move || {
            n.metadata().offsets.get("g").map(|g| g.len()) == Some(2)
        })
        .await;
    }
    let before = snapshot(&n0);
    assert_eq!(
        before.0.keys().cloned().collect::<Vec<_>>(),
        ["new-d", "old-a", "old-b"]
    );
    assert_eq!(before.0["old-a"].partitions, 3);
    assert_eq!(before.0["old-b"].partitions, 1);
    // Two JSON allocations (the retry applied once), then ours.
    assert_eq!(before.1, producer_id + 1);
    assert_eq!(
        before.2,
        vec![
            ("g".to_string(), "new-d".to_string(), 1, 5),
            ("g".to_string(), "old-a".to_string(), 2, 41)
        ]
    );
    for n in nodes.iter().flatten() {
        assert_eq!(snapshot(n), before, "node {}", n.config().id);
    }

    // Every node restarts and replays the mixed log to the same state.
    drop((n0, group));
    for n in nodes.iter_mut() {
        if let Some(n) = n.take() {
            n.shutdown();
        }
    }
    for (i, c) in configs.iter().enumerate() {
        nodes[i] = Some(Node::start(c.clone()).await.unwrap());
    }
    for n in nodes.iter().flatten() {
        let n = n.clone();
        let before = before.clone();
        wait_until("the same metadata after restart", move || {
            snapshot(&n) == before
        })
        .await;
    }
    for n in nodes.iter().flatten() {
        assert!(n.is_topic("old-a") && n.is_topic("new-d") && !n.is_topic("old-c"));
        n.shutdown();
    }
}
