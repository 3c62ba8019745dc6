//! Operating a cluster (issue 13), in-process on three nodes with their admin listeners:
//! deleting old segments through the admin API (forwarded from a follower to the leader; only
//! sealed segments wholly below the asked offset; never below what a voter still needs, here a
//! follower that is down), the graceful hand-off of every group a node leads, a leader transfer
//! to a chosen replica, and a scrape of a real node's metrics. (vdlctl against real processes:
//! tests/clients/test_operations.py.)

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{batch, cluster_configs, free_ports};
use vdl_server::config::NodeConfig;
use vdl_server::Node;

const T: Duration = Duration::from_secs(30);
const STREAM: &str = "ops";
const TOPIC: &str = "ops-topic";

async fn eventually(what: &str, check: impl FnMut() -> bool) {
    eventually_showing(what, check, String::new).await;
}

/// Like [`eventually`], with `state()` in the panic message.
async fn eventually_showing(
    what: &str,
    mut check: impl FnMut() -> bool,
    state: impl Fn() -> String,
) {
    let deadline = Instant::now() + T;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting: {what} {}",
            state()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Three nodes serving `STREAM`, each with an admin listener it has announced, small segments
/// and operator deletion allowed.
async fn cluster(dir: &std::path::Path) -> (Vec<Arc<Node>>, Vec<String>, Vec<NodeConfig>) {
    let mut configs = cluster_configs(3, dir, &[STREAM]);
    let ports = free_ports(3);
    for (c, port) in configs.iter_mut().zip(&ports) {
        c.storage.segment_bytes = 64 << 10;
        c.storage.operator_delete_allowed = true;
        // No deletion by age here: only the operator's deletes move the log start.
        c.storage.retention_age = None;
        c.raft.leader_rebalance_interval = None;
        c.admin_listen = Some(([127, 0, 0, 1], *port).into());
    }
    let mut nodes = Vec::new();
    let mut admins = Vec::new();
    for c in &configs {
        let node = Node::start(c.clone()).await.expect("node starts");
        let addr = c.admin_listen.expect("admin address");
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind admin");
        tokio::spawn(vdl_server::admin::serve(listener, node.clone()));
        vdl_server::admin::operator::announce_admin_address(
            &node,
            addr.to_string(),
            Duration::from_secs(300),
        );
        admins.push(addr.to_string());
        nodes.push(node);
    }
    let n = nodes.clone();
    eventually_showing(
        "every node knows every admin address",
        || n.iter().all(|x| x.admin_addresses().len() == 3),
        || {
            format!(
                "{:?}",
                n.iter().map(|x| x.admin_addresses()).collect::<Vec<_>>()
            )
        },
    )
    .await;
    (nodes, admins, configs)
}

fn leader_of(nodes: &[Arc<Node>]) -> u64 {
    let leaders: Vec<u64> = nodes
        .iter()
        .map(|n| n.stream(STREAM).expect("stream").visible().leader)
        .collect();
    if leaders.iter().all(|l| *l == leaders[0]) {
        leaders[0]
    } else {
        0
    }
}

async fn post(admin: &str, path: &str) -> (u16, serde_json::Value) {
    let (code, body) = vdl_server::admin::peer_client::call_peer(admin, "POST", path, T)
        .await
        .expect("admin answers");
    (code, serde_json::from_str(&body).expect("JSON answer"))
}

async fn get(admin: &str, path: &str) -> (u16, serde_json::Value) {
    let (code, body) = vdl_server::admin::peer_client::call_peer(admin, "GET", path, T)
        .await
        .expect("admin answers");
    (code, serde_json::from_str(&body).expect("JSON answer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn segment_delete_stays_above_what_a_down_voter_needs_and_is_forwarded_to_the_leader() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, admins, _) = cluster(dir.path()).await;
    // A topic (DeleteRecords, which the deletion uses, applies to topics, not to streams
    // configured at start).
    nodes[0]
        .create_topic_replicated(TOPIC, 1, 3, T)
        .await
        .expect("create the topic");
    let n = nodes.clone();
    eventually("every node opens the topic", || {
        n.iter().all(|x| x.partition(TOPIC, 0).is_some())
    })
    .await;
    let leader_of = |nodes: &[Arc<Node>]| {
        let l: Vec<u64> = nodes
            .iter()
            .map(|n| n.partition(TOPIC, 0).unwrap().visible().leader)
            .collect();
        if l.iter().all(|x| *x == l[0]) {
            l[0]
        } else {
            0
        }
    };
    eventually("a leader", || leader_of(&nodes) != 0).await;
    let leader = leader_of(&nodes);
    let stream = nodes[leader as usize - 1].partition(TOPIC, 0).unwrap();
    // ~20 KiB per append: a few segments of 64 KiB.
    let value = vec![7u8; 1000];
    for _ in 0..20 {
        stream
            .append(batch(20, &value), 20, T)
            .await
            .expect("append");
    }
    // A follower goes down: from now on the leader's matched index for it stays put.
    let down = (1..=3u64).find(|id| *id != leader).unwrap();
    let needed_offset = stream.visible().high_watermark;
    nodes[down as usize - 1].shutdown();
    for _ in 0..40 {
        stream
            .append(batch(20, &value), 20, T)
            .await
            .expect("append");
    }
    let hw = stream.visible().high_watermark;
    let segments_before = stream.segments();
    assert!(segments_before.len() >= 5, "{segments_before:?}");

    // Asked of the follower that is up: forwarded to the leader.
    let asked = (1..=3u64).find(|id| *id != leader && *id != down).unwrap();
    let admin = &admins[asked as usize - 1];
    let (code, answer) = post(
        admin,
        &format!("/partitions/{TOPIC}/0/segments/delete?before={hw}"),
    )
    .await;
    assert_eq!(code, 200, "{answer}");
    let deleted = answer["deleted"].as_array().expect("deleted list");
    assert!(!deleted.is_empty(), "{answer}");
    let floor = answer["log_start_offset"].as_u64().unwrap();
    // Whole sealed segments only, none holding what the down voter lacks.
    assert!(
        floor > 0 && floor <= needed_offset,
        "floor {floor} needed {needed_offset}"
    );
    assert!(
        segments_before.iter().any(|s| s.next_offset == floor),
        "the floor is a segment boundary"
    );
    for d in deleted {
        assert!(d["next_offset"].as_u64().unwrap() <= needed_offset);
        assert_eq!(d["active"], false);
    }
    // Every replica that is up moved its log start offset and dropped the files.
    for id in [leader, asked] {
        let s = nodes[id as usize - 1].partition(TOPIC, 0).unwrap();
        let state = || format!("node {id}: {:?} {:?}", s.visible(), s.segments().first());
        eventually_showing(
            "the replica's log start offset rises",
            || s.visible().log_start_offset == floor,
            state,
        )
        .await;
        eventually_showing(
            "the replica's old segments are gone",
            || {
                s.segments()
                    .first()
                    .is_some_and(|x| x.first_offset == floor)
            },
            state,
        )
        .await;
    }
    // The listing (asked of a follower) shows the leader's segments from the floor on.
    let (code, listing) = get(admin, &format!("/partitions/{TOPIC}/0/segments")).await;
    assert_eq!(code, 200);
    assert_eq!(listing["node"].as_u64(), Some(leader));
    assert_eq!(listing["segments"][0]["first_offset"].as_u64(), Some(floor));
    for n in &nodes {
        n.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn segment_delete_is_refused_without_the_permission() {
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(1, dir.path(), &[STREAM]);
    let port = free_ports(1)[0];
    configs[0].admin_listen = Some(([127, 0, 0, 1], port).into());
    let node = Node::start(configs[0].clone()).await.unwrap();
    let addr = configs[0].admin_listen.unwrap();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(vdl_server::admin::serve(listener, node.clone()));
    let (code, answer) = post(
        &addr.to_string(),
        &format!("/partitions/{STREAM}/0/segments/delete?before=10"),
    )
    .await;
    assert_eq!(code, 403, "{answer}");
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("operator_delete_allowed"));
    node.shutdown();
}

/// Every admin answer, success or error, carries the admin API version header, and each
/// answer `vdlctl` reads parses as its `vdl-admin-api` type.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_answers_carry_the_api_version_and_parse_as_the_shared_types() {
    use vdl_admin_api::{cluster, members, rates, segments, ErrorBody};
    let dir = tempfile::tempdir().unwrap();
    let mut configs = cluster_configs(1, dir.path(), &[STREAM]);
    let port = free_ports(1)[0];
    configs[0].admin_listen = Some(([127, 0, 0, 1], port).into());
    let node = Node::start(configs[0].clone()).await.unwrap();
    let addr = configs[0].admin_listen.unwrap();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(vdl_server::admin::serve(listener, node.clone()));
    vdl_server::admin::operator::announce_admin_address(&node, addr.to_string(), T);
    let n = node.clone();
    eventually("the node knows its admin address", || {
        n.admin_addresses().len() == 1
    })
    .await;
    let answers = tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(T))
            .build()
            .into();
        let paths = [
            "/cluster/status",
            "/members",
            "/rates",
            &format!("/partitions/{STREAM}/0/segments"),
            "/members/99",
        ];
        paths
            .iter()
            .map(|path| {
                let url = format!("http://{addr}{path}");
                let mut r = if path.starts_with("/members/") {
                    agent.delete(&url).call()
                } else {
                    agent.get(&url).call()
                }
                .expect("admin answers");
                let version = r
                    .headers()
                    .get(vdl_admin_api::VERSION_HEADER)
                    .map(|v| v.to_str().unwrap().to_owned());
                let body = r.body_mut().read_to_string().unwrap();
                (path.to_string(), r.status().as_u16(), version, body)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for (path, code, version, body) in &answers {
        assert_eq!(
            version.as_deref(),
            Some(vdl_admin_api::ADMIN_API_VERSION.to_string().as_str()),
            "{path}: {code} {body}"
        );
        let parsed = match path.as_str() {
            "/cluster/status" => serde_json::from_str::<cluster::ClusterStatus>(body).map(|_| ()),
            "/members" => serde_json::from_str::<Vec<members::MemberView>>(body).map(|_| ()),
            "/rates" => serde_json::from_str::<rates::Rates>(body).map(|_| ()),
            "/members/99" => {
                assert_eq!(*code, 404, "{body}");
                serde_json::from_str::<ErrorBody>(body).map(|_| ())
            }
            _ => serde_json::from_str::<segments::SegmentList>(body).map(|_| ()),
        };
        assert!(parsed.is_ok(), "{path}: {parsed:?} in {body}");
    }
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hand_off_moves_every_group_led_here_and_transfer_reaches_a_chosen_replica() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, admins, _) = cluster(dir.path()).await;
    eventually("a leader", || leader_of(&nodes) != 0).await;
    // Transfer to each replica in turn, asked of a node that is not the leader.
    for to in [1u64, 2, 3] {
        let ask = nodes
            .iter()
            .find(|n| n.config().id != leader_of(&nodes))
            .unwrap();
        ask.transfer_leader(STREAM, 0, to, T)
            .await
            .expect("transfer");
        eventually("every node sees the new leader", || leader_of(&nodes) == to).await;
    }
    let err = nodes[0].transfer_leader(STREAM, 0, 9, T).await.unwrap_err();
    assert!(err.to_string().contains("not a replica"), "{err}");
    let err = nodes[0]
        .transfer_leader("missing", 0, 1, T)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("no partition 0 of topic missing"),
        "{err}"
    );
    // The stream's and the metadata group's leaders hand over.
    let leader = leader_of(&nodes);
    let node = &nodes[leader as usize - 1];
    let led_before = node
        .scrape()
        .partitions
        .iter()
        .filter(|p| p.is_leader)
        .count();
    assert!(led_before >= 1);
    let report = node.hand_off_leadership(Duration::from_secs(10)).await;
    assert_eq!(report.still_led, 0, "{report:?}");
    assert!(node.scrape().partitions.iter().all(|p| !p.is_leader));
    eventually("another node leads", || {
        let l = leader_of(&nodes);
        l != 0 && l != leader
    })
    .await;
    // The cluster status, asked of any node, reports the new leader and every node reachable.
    let status = vdl_server::admin::operator::gather_cluster_status(&nodes[0]).await;
    assert!(
        status.nodes.iter().all(|n| n.reachable && n.live),
        "{status:?}"
    );
    let p = status
        .partitions
        .iter()
        .find(|p| p.topic == STREAM)
        .expect("the stream");
    assert_ne!(p.leader, leader);
    let _ = admins;
    for n in &nodes {
        n.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_real_nodes_scrape_counts_appends_and_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(1, dir.path(), &[STREAM]);
    let node = Node::start(configs[0].clone()).await.unwrap();
    let stream = node.stream(STREAM).unwrap();
    eventually("leader", || stream.visible().leader == 1).await;
    for _ in 0..5 {
        stream.append(batch(3, b"x"), 3, T).await.unwrap();
    }
    let text = vdl_server::metrics::encode(node.scrape());
    assert!(
        text.contains(&format!(
            "vdl_partition_high_watermark{{topic=\"{STREAM}\",partition=\"0\"}} 15"
        )),
        "{text}"
    );
    assert!(
        text.contains("vdl_partition_is_leader{topic=\"__cluster_metadata\",partition=\"0\"} 1")
    );
    let fsyncs = node.metrics().fsync.count();
    assert!(fsyncs >= 5, "{fsyncs}");
    // Produce's local and remote stages are stamped per entry by the group (appends made
    // here are not Kafka produces, but they are record entries).
    let local = node
        .metrics()
        .request_histogram(
            kafka_proto::api::ApiKey::Produce,
            vdl_server::metrics::Stage::Local,
        )
        .unwrap()
        .count();
    assert!(local >= 5, "{local}");
    node.shutdown();
}
