//! Snapshots of the cluster metadata (issue 20 item 5): every node writes one every
//! `metadata.snapshot_interval_entries` applied entries and compacts its metadata log below it;
//! a restart loads the snapshot and replays only what follows; a node that was down while the
//! leader compacted catches up through the snapshot. Also measures restart time with a long
//! history, with and without snapshots.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster_configs;
use vdl_server::config::NodeConfig;
use vdl_server::metadata::snapshot;
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

const T: Duration = Duration::from_secs(20);

async fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
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

/// (first, last) index of a node's metadata log on disk.
fn metadata_log(n: &Node) -> (u64, u64) {
    n.metadata_group().unwrap().stored_index_range()
}

fn snapshot_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("__cluster_metadata"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("meta-snapshot-") && n.ends_with(".snap"))
        .collect();
    names.sort();
    names
}

/// What must be the same on every node and across restarts.
fn observable(n: &Node) -> String {
    let m = n.metadata();
    let offsets: BTreeMap<_, BTreeMap<_, _>> = m
        .offsets
        .iter()
        .map(|(g, o)| {
            (
                g.clone(),
                o.iter().map(|(k, v)| (k.clone(), v.offset)).collect(),
            )
        })
        .collect();
    let topics: BTreeMap<_, _> = m
        .topics
        .iter()
        .map(|(name, t)| {
            (
                name.clone(),
                (
                    t.created_at_index,
                    t.partitions,
                    t.configs.clone(),
                    t.deleted_before.clone(),
                ),
            )
        })
        .collect();
    format!("{topics:?} {offsets:?} {}", m.next_producer_id)
}

fn offset(partition: i32, offset: i64) -> CommittedOffset {
    CommittedOffset {
        topic: "orders".into(),
        partition,
        offset,
        leader_epoch: -1,
        // About 1 KB per entry, so the 1 MiB metadata segments fill and get compacted.
        metadata: Some("m".repeat(1000)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_compact_the_metadata_log_survive_restarts_and_catch_up_a_lagging_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[]);
    for c in &mut configs {
        c.metadata.snapshot_interval_entries = 200;
        c.storage.segment_bytes = 1 << 20;
    }
    let mut nodes: Vec<Option<Arc<Node>>> = Vec::new();
    for c in &configs {
        nodes.push(Some(Node::start(c.clone()).await.unwrap()));
    }
    wait_until("a metadata leader", T, || metadata_leader(&nodes).is_some()).await;
    let leader = metadata_leader(&nodes).unwrap();
    let lagging = (leader + 1) % 3;
    let l = nodes[leader].clone().unwrap();

    let configs_of = |ms: &str| -> BTreeMap<String, String> {
        [("retention.ms".to_string(), ms.to_string())].into()
    };
    l.create_topic_configured("orders", 2, 3, configs_of("3600000"), T)
        .await
        .unwrap();
    l.create_topic_configured("doomed", 1, 3, configs_of("1000"), T)
        .await
        .unwrap();
    let command = delete_topic(&l, "doomed");
    l.metadata_proposer().propose(&command, T).await.unwrap();
    let producer_id = l.allocate_producer_id(T).await.unwrap();

    // One node goes down; the others commit many offsets (far more entries than the interval
    // and than fit one metadata segment), snapshot and compact past what it has.
    let (before_first, before_last) = metadata_log(nodes[lagging].as_ref().unwrap());
    nodes[lagging].take().unwrap().shutdown();
    const COMMITS: i64 = 2400;
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let n = l.clone();
        tasks.push(tokio::spawn(async move {
            for i in (worker..COMMITS).step_by(8) {
                let group = format!("g{}", i % 5);
                n.metadata_proposer()
                    .propose(&commit_offsets(&group, vec![offset((i % 2) as i32, i)]), T)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (first, last) = metadata_log(&l);
    assert!(last >= COMMITS as u64, "{last}");
    wait_until("the leader compacting past the down node's log", T, || {
        metadata_log(&l).0 > before_last + 1
    })
    .await;
    let (first_after, _) = metadata_log(&l);
    println!(
        "leader metadata log: [{first}, {last}] after {COMMITS} commits, [{first_after}, ..] once compacted; down node had [{before_first}, {before_last}]"
    );
    assert!(!snapshot_files(&configs[leader].data_dir).is_empty());

    // The node that was down comes back: its log ends below the leader's first entry, so it
    // catches up through the snapshot, then the entries after it.
    let back = Node::start(configs[lagging].clone()).await.unwrap();
    nodes[lagging] = Some(back.clone());
    let want = observable(&l);
    wait_until("the lagging node catching up", T, || {
        observable(&back) == want
    })
    .await;
    let (back_first, back_last) = metadata_log(&back);
    assert!(
        back_first > before_last + 1,
        "installed a snapshot: log starts at {back_first}"
    );
    assert!(!snapshot_files(&configs[lagging].data_dir).is_empty());
    assert!(back.is_topic("orders") && !back.is_topic("doomed"));
    println!("caught-up node's metadata log: [{back_first}, {back_last}]");
    // It takes part in commits again.
    l.metadata_proposer()
        .propose(&commit_offsets("after", vec![offset(0, 1)]), T)
        .await
        .unwrap();
    let want = observable(&l);
    wait_until("the next commit on the caught-up node", T, || {
        observable(&back) == want
    })
    .await;

    // Every node restarts: the state is the same, loaded from the snapshot plus a short replay,
    // and the logs on disk hold fewer entries than commands were applied.
    drop((l, back));
    for n in nodes.iter_mut() {
        n.take().unwrap().shutdown();
    }
    for (i, c) in configs.iter().enumerate() {
        nodes[i] = Some(Node::start(c.clone()).await.unwrap());
    }
    for n in nodes.iter().flatten() {
        let n = n.clone();
        let want = want.clone();
        wait_until("the state back after a restart", T, move || {
            observable(&n) == want
        })
        .await;
    }
    for n in nodes.iter().flatten() {
        let (first, last) = metadata_log(n);
        let kept = last + 1 - first;
        assert!(
            kept < COMMITS as u64,
            "node {}: {kept} entries kept of {last}",
            n.config().id
        );
        assert!(n.is_topic("orders") && !n.is_topic("doomed"));
        assert_eq!(
            n.metadata().topics["orders"].configs.get("retention.ms"),
            Some(&"3600000".to_string())
        );
    }
    // Producer ids are still unique after the snapshot: the counter came back.
    let next = nodes[0]
        .as_ref()
        .unwrap()
        .allocate_producer_id(T)
        .await
        .unwrap();
    assert!(next > producer_id);
    for n in nodes.iter_mut() {
        n.take().unwrap().shutdown();
    }
}

/// A node that wrote a snapshot received from the leader and crashed before its metadata log
/// was reset (here: the leader's snapshot copied into a stopped node's directory) starts from
/// the snapshot: its log restarts after it, and the data of a topic whose delete the snapshot
/// covers (deleted while the node was down) is removed, as replaying the delete would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_ahead_of_the_log_is_loaded_and_removes_deleted_topics_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[]);
    for c in &mut configs {
        c.metadata.snapshot_interval_entries = 100;
    }
    let mut nodes: Vec<Option<Arc<Node>>> = Vec::new();
    for c in &configs {
        nodes.push(Some(Node::start(c.clone()).await.unwrap()));
    }
    wait_until("a metadata leader", T, || metadata_leader(&nodes).is_some()).await;
    let leader = metadata_leader(&nodes).unwrap();
    let down = (leader + 1) % 3;
    let l = nodes[leader].clone().unwrap();
    l.create_topic_configured("orders", 1, 3, BTreeMap::new(), T)
        .await
        .unwrap();
    l.create_topic_configured("gone", 1, 3, BTreeMap::new(), T)
        .await
        .unwrap();
    let gone = l.metadata().incarnation("gone").unwrap();
    let d = nodes[down].clone().unwrap();
    wait_until("the topic on the node going down", T, || d.is_topic("gone")).await;
    drop(d);
    nodes[down].take().unwrap().shutdown();
    let gone_dir = configs[down]
        .data_dir
        .join("topics")
        .join(format!("gone~{gone}-0"));
    assert!(gone_dir.exists());

    let command = delete_topic(&l, "gone");
    l.metadata_proposer().propose(&command, T).await.unwrap();
    for i in 0..150 {
        l.metadata_proposer()
            .propose(&commit_offsets("g", vec![offset(0, i)]), T)
            .await
            .unwrap();
    }
    let names = snapshot_files(&configs[leader].data_dir);
    let newest = names.last().expect("the leader wrote a snapshot");
    std::fs::copy(
        configs[leader]
            .data_dir
            .join("__cluster_metadata")
            .join(newest),
        configs[down]
            .data_dir
            .join("__cluster_metadata")
            .join(newest),
    )
    .unwrap();

    let back = Node::start(configs[down].clone()).await.unwrap();
    nodes[down] = Some(back.clone());
    assert!(!gone_dir.exists(), "the deleted topic's data is removed");
    assert!(back.is_topic("orders") && !back.is_topic("gone"));
    let (first, _) = metadata_log(&back);
    assert!(first > gone, "the log restarts after the snapshot: {first}");
    let want = observable(&l);
    wait_until("the node caught up", T, || observable(&back) == want).await;
    drop((l, back));
    for n in nodes.iter_mut() {
        n.take().unwrap().shutdown();
    }
}

/// A damaged newest snapshot stops the node with an error naming the file (it never falls
/// back to an older state).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_snapshot_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = cluster_configs(1, dir.path(), &[]).remove(0);
    config.metadata.snapshot_interval_entries = 100;
    let node = Node::start(config.clone()).await.unwrap();
    wait_until("a metadata leader", T, || {
        node.metadata_group().unwrap().visible().leader == 1
    })
    .await;
    for i in 0..150 {
        node.metadata_proposer()
            .propose(&commit_offsets("g", vec![offset(0, i)]), T)
            .await
            .unwrap();
    }
    node.shutdown();
    drop(node);
    let names = snapshot_files(&config.data_dir);
    let newest = config
        .data_dir
        .join("__cluster_metadata")
        .join(names.last().expect("a snapshot was written"));
    let mut bytes = std::fs::read(&newest).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&newest, &bytes).unwrap();
    let err = match Node::start(config).await {
        Ok(_) => panic!("a node started on a damaged snapshot"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(names.last().unwrap()), "{err}");
}

/// Writes a single-node metadata log of `n` offset commits directly (as a long history would
/// leave it), so restart time can be measured without proposing them one by one.
fn write_history(config: &NodeConfig, n: u64) {
    let dir = config.data_dir.join("__cluster_metadata");
    std::fs::create_dir_all(&dir).unwrap();
    let store_config = logstore::StoreConfig {
        segment_bytes: 1 << 20,
        ..logstore::StoreConfig::default()
    };
    let mut store = logstore::LogStore::open(&dir, store_config).unwrap();
    store
        .save_conf_state(&logstore::ConfState {
            voters: vec![config.id],
            ..Default::default()
        })
        .unwrap();
    let mut index = 1;
    while index <= n {
        let batch: Vec<logstore::NewEntry> = (index..=n.min(index + 999))
            .map(|i| {
                let entry = MetaEntry {
                    request: RequestId {
                        node: 1,
                        boot: 7,
                        seq: i,
                    },
                    command: MetaCommand::CommitOffsets {
                        group: format!("group-{}", i % 100),
                        offsets: vec![CommittedOffset {
                            topic: format!("topic-{}", i % 10),
                            partition: (i % 6) as i32,
                            offset: i as i64,
                            leader_epoch: 0,
                            metadata: None,
                        }],
                        commit_time_ms: 1_700_000_000_000 + i as i64,
                    },
                };
                logstore::NewEntry {
                    index: i,
                    term: 1,
                    kind: logstore::EntryKind::Meta,
                    payload: entry.encode().into(),
                    context: vec![2u8].into(),
                }
            })
            .collect();
        index += batch.len() as u64;
        store.append(&batch).unwrap();
    }
    store.sync().unwrap();
    store
        .save_hard_state(&logstore::HardState {
            term: 1,
            vote: config.id,
            commit: n,
        })
        .unwrap();
    store.close().unwrap();
}

/// Starts a node and returns how long it took until its metadata had applied `index`.
async fn time_to_apply(config: &NodeConfig, index: u64) -> (Duration, Arc<Node>) {
    let started = Instant::now();
    let node = Node::start(config.clone()).await.unwrap();
    wait_until("the metadata applied", Duration::from_secs(300), || {
        node.metadata_group().unwrap().visible().applied_index >= index
    })
    .await;
    (started.elapsed(), node)
}

/// The measurement for issue 20 item 5: a node with N = 100,000 offset commits in its history
/// restarts in time that grows with N without snapshots, and in the time of one snapshot load
/// plus a short replay with them. Prints the figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_time_with_a_long_history_with_and_without_snapshots() {
    const N: u64 = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let mut config = cluster_configs(1, dir.path(), &[]).remove(0);
    write_history(&config, N);

    // Without snapshots: the whole log is replayed, every restart.
    config.metadata.snapshot_interval_entries = 0;
    let (full, node) = time_to_apply(&config, N).await;
    let state = observable(&node);
    node.shutdown();
    drop(node);
    assert!(snapshot_files(&config.data_dir).is_empty());

    // With snapshots: the first start replays and writes them; the next ones load the newest.
    config.metadata.snapshot_interval_entries = 10_000;
    let (first, node) = time_to_apply(&config, N).await;
    assert_eq!(observable(&node), state);
    node.shutdown();
    drop(node);
    assert!(!snapshot_files(&config.data_dir).is_empty());
    let (with_snapshot, node) = time_to_apply(&config, N).await;
    assert_eq!(
        observable(&node),
        state,
        "the same state after a snapshot load"
    );
    let (log_first, log_last) = metadata_log(&node);
    node.shutdown();
    println!(
        "restart with {N} offset commits in history: full replay {full:?}; first start with \
         snapshots on (replays, writes them) {first:?}; restart from the snapshot {with_snapshot:?} \
         (metadata log kept on disk: [{log_first}, {log_last}])"
    );
    assert!(
        with_snapshot < full,
        "a restart from a snapshot ({with_snapshot:?}) is faster than a full replay ({full:?})"
    );
    assert!(log_first > 1, "the log was compacted below the snapshot");
}

#[test]
fn snapshot_file_names_sort_by_index() {
    assert!(snapshot::file_name(99) < snapshot::file_name(100));
}
