//! Replacing nodes without downtime, through the admin HTTP API (`GET/POST /members`,
//! `DELETE /members/{id}`): a 3-node cluster under a writer that records every acknowledged
//! append; node 4 joins (learner, caught up, promoted), node 1 is removed (its replicas move to
//! node 4, leadership handed away first); node 4's data equals the other replicas' byte for
//! byte and holds every acknowledged record; node 1 serves nothing (NOT_LEADER_OR_FOLLOWER).
//! Then, once retention deleted the start of a partition's log, node 5 joins and takes node
//! 2's replicas: its copy starts at the leader's log start (the Raft snapshot path) and equals
//! the others from there.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::kafka::{KafkaConn, NOT_LEADER};
use common::{batch, cluster_configs, free_ports, split_batches};
use vdl_server::config::{Member, NodeConfig};
use vdl_server::Node;

/// Topic written during the replacements (3 partitions x 3 replicas).
const TOPIC: &str = "replaced";
/// Topic whose log start retention moves before node 5 joins.
const RETAINED: &str = "retained";
/// Longest the whole test may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(240);
/// Appends the writer makes at most.
const MAX_APPENDS: usize = 20_000;

/// A running node with its Kafka and admin listeners.
struct Running {
    node: Arc<Node>,
    admin: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.node.shutdown();
    }
}

async fn start(config: NodeConfig) -> Running {
    let node = Node::start(config).await.expect("node starts");
    let kafka = node.serve_kafka().await.expect("kafka listener");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("admin listener");
    let admin = listener.local_addr().expect("admin address");
    let served = node.clone();
    let admin_task = tokio::spawn(async move {
        let _ = vdl_server::admin::serve(listener, served).await;
    });
    Running {
        node,
        admin,
        tasks: vec![kafka, admin_task],
    }
}

/// One admin API call (blocking client, off the runtime's threads): status and JSON body.
async fn http(
    admin: SocketAddr,
    method: &'static str,
    path: String,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(200)))
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!("http://{admin}{path}");
        let response = match (method, body) {
            ("GET", _) => agent.get(&url).call(),
            ("DELETE", _) => agent.delete(&url).call(),
            (_, Some(b)) => agent.post(&url).send_json(&b),
            (_, None) => agent.post(&url).send_empty(),
        }
        .expect("admin request");
        let status = response.status().as_u16();
        let text = response.into_body().read_to_string().expect("admin answer");
        (status, serde_json::from_str(&text).expect("JSON answer"))
    })
    .await
    .expect("request task")
}

/// The config of a node joining the cluster of `members` (plus itself) with id `id`.
fn joining_config(template: &NodeConfig, root: &Path, id: u64, members: &[Member]) -> NodeConfig {
    let ports = free_ports(2);
    let mut c = template.clone();
    c.id = id;
    c.name = format!("vdl{id}");
    c.data_dir = root.join(format!("node{id}"));
    c.peer_listen = SocketAddr::from(([127, 0, 0, 1], ports[0]));
    c.kafka_listen = SocketAddr::from(([127, 0, 0, 1], ports[1]));
    c.kafka_advertised = c.kafka_listen.to_string();
    c.members = members.to_vec();
    c.members.push(Member {
        name: c.name.clone(),
        id,
        peer_addr: c.peer_listen,
    });
    c.join = true;
    c
}

/// The node among `nodes` leading `topic`'s partition `p`.
fn leader_of(nodes: &[Arc<Node>], topic: &str, p: u32) -> Option<Arc<Node>> {
    nodes
        .iter()
        .find(|n| {
            n.partition(topic, p)
                .is_some_and(|s| s.visible().leader == n.config().id)
        })
        .cloned()
}

/// Appends until `stop` (or [`MAX_APPENDS`]), round robin over the partitions, each through
/// the node leading it now; records (partition, offset, tag) of every acknowledged append.
async fn write_until(
    nodes: Arc<Mutex<Vec<Arc<Node>>>>,
    stop: Arc<AtomicBool>,
) -> Vec<(u32, u64, Vec<u8>)> {
    let mut acked = Vec::new();
    for seq in 0..MAX_APPENDS {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let p = (seq % 3) as u32;
        let tag = format!("p{p}-{seq}").into_bytes();
        let live = nodes.lock().unwrap().clone();
        let Some(stream) = leader_of(&live, TOPIC, p).and_then(|n| n.partition(TOPIC, p)) else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        match stream
            .append(batch(2, &tag), 2, Duration::from_secs(5))
            .await
        {
            Ok(a) => acked.push((p, a.base_offset, tag)),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    acked
}

/// Every committed batch of a replica of `topic`-`p`, from its log start to `end`.
fn replica_data(node: &Node, topic: &str, p: u32, end: u64) -> (u64, Vec<u8>) {
    let s = node.partition(topic, p).expect("replica");
    let start = s.visible().log_start_offset;
    let mut out = Vec::new();
    let mut offset = start;
    while offset < end {
        let read = s.read(offset, 1 << 20).expect("read");
        let mut chunk = Vec::new();
        for c in &read.chunks {
            chunk.extend_from_slice(c);
        }
        let batches = split_batches(&chunk);
        let last = batches.last().expect("a batch below the end");
        offset = last.0 + u64::from(last.1);
        out.extend_from_slice(&chunk);
    }
    (start, out)
}

/// Waits until every replica of `topic`-`p` among `nodes` has the same high watermark and
/// log start; returns (log start, high watermark).
async fn wait_replicas_equal(nodes: &[Arc<Node>], topic: &str, p: u32) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let views: Vec<(u64, u64)> = nodes
            .iter()
            .filter_map(|n| n.partition(topic, p))
            .map(|s| {
                let v = s.visible();
                (v.log_start_offset, v.high_watermark)
            })
            .collect();
        if views.len() == 3 && views.iter().all(|v| *v == views[0]) {
            return views[0];
        }
        assert!(
            Instant::now() < deadline,
            "{topic}-{p}: replicas differ: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn state_of(members: &serde_json::Value, id: u64) -> String {
    members
        .as_array()
        .expect("member list")
        .iter()
        .find(|m| m["id"] == id)
        .map(|m| m["state"].as_str().unwrap_or("").to_owned())
        .unwrap_or_default()
}

fn replicas_of(node: &Node, topic: &str) -> Vec<Vec<u64>> {
    node.topic_layout(topic).expect("topic").replicas
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_are_added_and_removed_under_load_without_losing_acknowledged_records() {
    tokio::time::timeout(TEST_TIMEOUT, replace_nodes())
        .await
        .expect("membership test within its time bound");
}

async fn replace_nodes() {
    // RUST_LOG=vdl_server=info shows the membership changes as they happen.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(3, dir.path(), &[]);
    for c in &mut configs {
        c.storage.retention_check_interval = Duration::from_millis(200);
    }
    let template = configs[0].clone();
    let mut running = Vec::new();
    for c in &configs {
        running.push(start(c.clone()).await);
    }
    let n1 = running[0].node.clone();
    common::peer::wait_for_leader(
        &running.iter().map(|r| r.node.clone()).collect::<Vec<_>>(),
        true,
    )
    .await;
    n1.create_topic_replicated(TOPIC, 3, 3, Duration::from_secs(10))
        .await
        .expect("topic created");
    let nodes = Arc::new(Mutex::new(
        running.iter().map(|r| r.node.clone()).collect::<Vec<_>>(),
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    while (0..3).any(|p| leader_of(&nodes.lock().unwrap(), TOPIC, p).is_none()) {
        assert!(Instant::now() < deadline, "no leaders for {TOPIC}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Load: one writer recording what was acknowledged.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_until(nodes.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Node 4 joins: started with the members and `join`, then added through node 2's API.
    let c4 = joining_config(&template, dir.path(), 4, &template.members);
    let r4 = start(c4.clone()).await;
    let admin2 = running[1].admin;
    let (status, added) = http(
        admin2,
        "POST",
        "/members?timeout_ms=60000".into(),
        Some(
            serde_json::json!({"id": 4, "peer": c4.peer_listen.to_string(),
                                "kafka": c4.kafka_advertised}),
        ),
    )
    .await;
    assert_eq!(status, 200, "add node 4: {added}");
    assert_eq!(added["state"], "voter");
    nodes.lock().unwrap().push(r4.node.clone());
    // Adding again the same id at another address is refused.
    let (status, _) = http(
        admin2,
        "POST",
        "/members".into(),
        Some(serde_json::json!({"id": 4, "peer": "127.0.0.1:1", "kafka": "127.0.0.1:2"})),
    )
    .await;
    assert_eq!(status, 409);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Node 1 leaves: its replicas move to node 4 (the only member without them).
    let (status, removed) = http(
        admin2,
        "DELETE",
        "/members/1?timeout_ms=120000".into(),
        None,
    )
    .await;
    assert_eq!(status, 200, "remove node 1: {removed}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let acked = writer.await.expect("writer");
    println!("acknowledged appends during the changes: {}", acked.len());
    assert!(
        acked.len() > 50,
        "the writer made progress: {}",
        acked.len()
    );

    let (status, members) = http(admin2, "GET", "/members".into(), None).await;
    assert_eq!(status, 200);
    assert_eq!(state_of(&members, 1), "removed", "{members}");
    for id in [2, 3, 4] {
        assert_eq!(state_of(&members, id), "voter", "{members}");
    }
    for r in replicas_of(&running[1].node, TOPIC) {
        let mut r = r.clone();
        r.sort_unstable();
        assert_eq!(r, vec![2, 3, 4]);
    }
    // Node 1 hosts nothing and answers NOT_LEADER_OR_FOLLOWER.
    assert!(n1.partitions(TOPIC).is_empty());
    let mut k1 = KafkaConn::connect(configs[0].kafka_listen).expect("kafka at node 1");
    let (err, _) = k1
        .produce_to(TOPIC, 0, batch(1, b"late"))
        .expect("produce at node 1");
    assert_eq!(err, NOT_LEADER);

    // Node 4 holds exactly what nodes 2 and 3 hold, and every acknowledged record.
    let live = nodes.lock().unwrap().clone();
    let survivors: Vec<Arc<Node>> = live[1..].to_vec();
    for p in 0..3u32 {
        let (_, end) = wait_replicas_equal(&survivors, TOPIC, p).await;
        let datas: Vec<(u64, Vec<u8>)> = survivors
            .iter()
            .map(|n| replica_data(n, TOPIC, p, end))
            .collect();
        assert!(datas.iter().all(|d| *d == datas[0]), "{TOPIC}-{p} differs");
        let stored: BTreeMap<u64, Vec<u8>> = split_batches(&datas[2].1)
            .into_iter()
            .map(|(o, _, v)| (o, v))
            .collect();
        for (ap, offset, tag) in acked.iter().filter(|(ap, _, _)| *ap == p) {
            assert_eq!(
                stored.get(offset),
                Some(tag),
                "acknowledged {ap}@{offset} missing on node 4"
            );
        }
    }

    // Retention deletes the start of a partition's log, then node 5 takes node 2's replicas.
    let n2 = running[1].node.clone();
    let configs_retained: BTreeMap<String, String> = [
        ("segment.bytes".to_string(), (1u64 << 20).to_string()),
        ("retention.bytes".to_string(), (1u64 << 20).to_string()),
    ]
    .into();
    n2.create_topic_configured(RETAINED, 1, 3, configs_retained, Duration::from_secs(10))
        .await
        .expect("retained topic");
    let value = vec![7u8; 10_000];
    let mut written = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while written < 40 {
        assert!(Instant::now() < deadline, "writing {RETAINED}");
        let Some(s) = leader_of(&survivors, RETAINED, 0).and_then(|n| n.partition(RETAINED, 0))
        else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        if s.append(batch(10, &value), 10, Duration::from_secs(5))
            .await
            .is_ok()
        {
            written += 1;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let starts: Vec<u64> = survivors
            .iter()
            .map(|n| n.partition(RETAINED, 0).unwrap().visible().log_start_offset)
            .collect();
        if starts.iter().all(|s| *s > 0) {
            println!("log start offsets after retention: {starts:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "retention did not run: {starts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let current: Vec<Member> = template
        .members
        .iter()
        .filter(|m| m.id != 1)
        .cloned()
        .chain([Member {
            name: c4.name.clone(),
            id: 4,
            peer_addr: c4.peer_listen,
        }])
        .collect();
    let c5 = joining_config(&template, dir.path(), 5, &current);
    let r5 = start(c5.clone()).await;
    let admin3 = running[2].admin;
    let (status, added) = http(
        admin3,
        "POST",
        "/members".into(),
        Some(
            serde_json::json!({"id": 5, "peer": c5.peer_listen.to_string(),
                                "kafka": c5.kafka_advertised, "name": "vdl5"}),
        ),
    )
    .await;
    assert_eq!(status, 200, "add node 5: {added}");
    let (status, removed) = http(admin3, "DELETE", "/members/2".into(), None).await;
    assert_eq!(status, 200, "remove node 2: {removed}");
    let last: Vec<Arc<Node>> = vec![running[2].node.clone(), r4.node.clone(), r5.node.clone()];
    let (start_offset, end) = wait_replicas_equal(&last, RETAINED, 0).await;
    assert!(start_offset > 0);
    let datas: Vec<(u64, Vec<u8>)> = last
        .iter()
        .map(|n| replica_data(n, RETAINED, 0, end))
        .collect();
    assert!(datas.iter().all(|d| *d == datas[0]), "{RETAINED} differs");
    println!(
        "node 5 caught up through a snapshot: log {start_offset}..{end}, {} bytes",
        datas[2].1.len()
    );
    for p in 0..3u32 {
        wait_replicas_equal(&last, TOPIC, p).await;
    }
    assert!(n2.partitions(TOPIC).is_empty() && n2.partitions(RETAINED).is_empty());

    // The two joined nodes and an initial one restart: each comes back with its replicas and
    // the cluster still commits on every partition, now replicated by 3, 4 and 5.
    let c3 = configs[2].clone();
    drop(r5);
    drop(r4);
    let r3 = running.remove(2);
    drop(r3);
    let r3 = start(c3).await;
    let r4 = start(c4).await;
    let r5 = start(c5).await;
    let last: Vec<Arc<Node>> = vec![r3.node.clone(), r4.node.clone(), r5.node.clone()];
    for p in 0..3u32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let leader = leader_of(&last, TOPIC, p).and_then(|n| n.partition(TOPIC, p));
            if let Some(s) = leader {
                if s.append(batch(1, b"after restart"), 1, Duration::from_secs(5))
                    .await
                    .is_ok()
                {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{TOPIC}-{p} commits after restarts"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        wait_replicas_equal(&last, TOPIC, p).await;
    }
    let (status, members) = http(r5.admin, "GET", "/members".into(), None).await;
    assert_eq!(status, 200);
    for (id, state) in [
        (1, "removed"),
        (2, "removed"),
        (3, "voter"),
        (4, "voter"),
        (5, "voter"),
    ] {
        assert_eq!(state_of(&members, id), state, "{members}");
    }
}
