//! kcat (librdkafka) against an in-process 3-node cluster serving Kafka: metadata, produce and
//! consume from the beginning, each bootstrapped at a follower; and against five nodes, where
//! each node lacks replicas of some partitions. kcat comes from Debian's
//! `kcat` package (installed by scripts/test-deps.sh).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{cluster_configs, kcat, run_with_deadline as run};
use vdl_server::Node;

const TOPIC: &str = "kcat-topic";

/// Runs `kcat -C` on `topic` from `offset` to the end, printing "offset value" lines, with
/// `extra` arguments; returns (exited ok, stdout, stderr).
fn kcat_consume(
    bootstrap: &str,
    topic: &str,
    offset: &str,
    extra: &[&str],
) -> (bool, String, String) {
    let mut cmd = kcat();
    cmd.args([
        "-b", bootstrap, "-t", topic, "-C", "-o", offset, "-e", "-f", "%o %s\n",
    ]);
    cmd.args(extra);
    run(cmd, b"", Duration::from_secs(20))
}

async fn cluster(dir: &std::path::Path) -> (Vec<Arc<Node>>, usize) {
    let configs = cluster_configs(3, dir, &[TOPIC]);
    let mut nodes = Vec::new();
    for c in configs {
        let n = Node::start(c).await.unwrap();
        n.serve_kafka().await.unwrap();
        nodes.push(n);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(i) = nodes
            .iter()
            .position(|n| n.stream(TOPIC).unwrap().visible().leader == n.config().id)
        {
            // Wait until every node knows the leader and its peers' addresses.
            let known = nodes.iter().all(|n| {
                n.stream(TOPIC).unwrap().visible().leader != 0 && n.live_brokers().len() == 3
            });
            if known {
                return (nodes, i);
            }
        }
        assert!(Instant::now() < deadline, "cluster not ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_produces_and_consumes_through_a_follower() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, leader) = cluster(dir.path()).await;
    let follower = &nodes[(leader + 1) % 3];
    let bootstrap = follower.config().kafka_advertised.clone();

    let result = tokio::task::spawn_blocking(move || {
        // -L at a follower lists all three brokers and the leader.
        let mut cmd = kcat();
        cmd.args(["-b", &bootstrap, "-L", "-t", TOPIC]);
        let (ok, out, err) = run(cmd, b"", Duration::from_secs(20));
        assert!(ok, "kcat -L failed: {err}");
        assert!(out.contains(" 3 brokers:"), "{out}");
        assert!(
            out.contains(&format!("topic \"{TOPIC}\" with 1 partitions")),
            "{out}"
        );

        // Produce with acks=all, in several batches and with each codec.
        let mut expected = Vec::new();
        for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
            let lines: Vec<String> = (0..20).map(|i| format!("{codec}-{i}")).collect();
            let mut cmd = kcat();
            cmd.args([
                "-b", &bootstrap, "-t", TOPIC, "-P", "-z", codec, "-X", "acks=all",
            ]);
            let (ok, _, err) = run(
                cmd,
                (lines.join("\n") + "\n").as_bytes(),
                Duration::from_secs(20),
            );
            assert!(ok, "kcat produce ({codec}) failed: {err}");
            expected.extend(lines);
        }

        // Consume everything from the beginning: same records, same order, dense offsets.
        let (ok, out, err) = kcat_consume(&bootstrap, TOPIC, "beginning", &[]);
        assert!(ok, "kcat consume failed: {err}");
        let got: Vec<(u64, String)> = out
            .lines()
            .map(|l| {
                let (o, v) = l.split_once(' ').unwrap();
                (o.parse().unwrap(), v.to_owned())
            })
            .collect();
        assert_eq!(got.len(), expected.len(), "{out}");
        for (i, (offset, value)) in got.iter().enumerate() {
            assert_eq!(*offset, i as u64, "dense offsets");
            assert_eq!(value, &expected[i]);
        }

        // Clients pinned to old brokers (no ApiVersions; Kafka 0.10 = Produce/Fetch v2 with magic 1
        // message sets, 0.9 = v1 with magic 0) work through conversion.
        let mut cmd = kcat();
        cmd.args([
            "-b",
            &bootstrap,
            "-t",
            TOPIC,
            "-P",
            "-X",
            "api.version.request=false",
            "-X",
            "broker.version.fallback=0.10.0",
        ]);
        let (ok, _, err) = run(cmd, b"old-0.10\n", Duration::from_secs(20));
        assert!(ok, "kcat produce as a 0.10 client failed: {err}");
        for fallback in ["0.10.0", "0.9.0"] {
            let offset = expected.len().to_string();
            let fallback_arg = format!("broker.version.fallback={fallback}");
            let extra = ["-X", "api.version.request=false", "-X", &fallback_arg];
            let (ok, out, err) = kcat_consume(&bootstrap, TOPIC, &offset, &extra);
            assert!(ok, "kcat consume as a {fallback} client failed: {err}");
            assert_eq!(
                out,
                format!("{} old-0.10\n", expected.len()),
                "as a {fallback} client"
            );
        }

        // A topic nobody created is created on first use (auto.create.topics.enable), through
        // the follower, replicated on every node.
        let mut cmd = kcat();
        cmd.args([
            "-b",
            &bootstrap,
            "-t",
            "auto-created",
            "-P",
            "-X",
            "acks=all",
        ]);
        let (ok, _, err) = run(cmd, b"first\nsecond\n", Duration::from_secs(30));
        assert!(ok, "kcat produce to a new topic failed: {err}");
        let (ok, out, err) = kcat_consume(&bootstrap, "auto-created", "beginning", &[]);
        assert!(ok, "kcat consume of the new topic failed: {err}");
        assert_eq!(out, "0 first\n1 second\n");
    })
    .await;
    for n in &nodes {
        assert!(
            n.is_topic("auto-created") || result.is_err(),
            "topic on node {}",
            n.config().id
        );
        n.shutdown();
    }
    result.unwrap();
}

/// kcat on a 3-partition topic: `-L` lists three partitions with leaders, `-P -p N` writes to
/// partition N, `-C -p N` reads exactly that partition back, and a keyed produce with `-K`
/// (librdkafka's default partitioner) keeps each key on one partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_produces_and_consumes_per_partition() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = cluster(dir.path()).await;
    nodes[0]
        .create_topic("kcat-parts", 3, Duration::from_secs(10))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !nodes.iter().all(|n| {
        let p = n.partitions("kcat-parts");
        p.len() == 3 && p.iter().all(|s| s.visible().leader != 0)
    }) {
        assert!(Instant::now() < deadline, "no leaders for kcat-parts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bootstrap = nodes[1].config().kafka_advertised.clone();
    tokio::task::spawn_blocking(move || {
        let mut cmd = kcat();
        cmd.args(["-b", &bootstrap, "-L", "-t", "kcat-parts"]);
        let (ok, out, err) = run(cmd, b"", Duration::from_secs(20));
        assert!(ok, "kcat -L failed: {err}");
        assert!(
            out.contains("topic \"kcat-parts\" with 3 partitions"),
            "{out}"
        );
        for p in 0..3 {
            assert!(out.contains(&format!("partition {p}, leader ")), "{out}");
        }
        for p in 0..3 {
            let lines: String = (0..10).map(|i| format!("p{p}-{i}\n")).collect();
            let mut cmd = kcat();
            let part = p.to_string();
            cmd.args([
                "-b",
                &bootstrap,
                "-t",
                "kcat-parts",
                "-P",
                "-p",
                &part,
                "-X",
                "acks=all",
            ]);
            let (ok, _, err) = run(cmd, lines.as_bytes(), Duration::from_secs(20));
            assert!(ok, "kcat produce to partition {p} failed: {err}");
        }
        for p in 0..3 {
            let part = p.to_string();
            let (ok, out, err) =
                kcat_consume(&bootstrap, "kcat-parts", "beginning", &["-p", &part]);
            assert!(ok, "kcat consume of partition {p} failed: {err}");
            let want: Vec<String> = (0..10).map(|i| format!("{i} p{p}-{i}")).collect();
            assert_eq!(out.lines().collect::<Vec<_>>(), want, "partition {p}");
        }
        // Keyed: each key's records land on one partition.
        let keyed: String = (0..60).map(|i| format!("key{}:v{i}\n", i % 12)).collect();
        let mut cmd = kcat();
        cmd.args([
            "-b",
            &bootstrap,
            "-t",
            "kcat-parts",
            "-P",
            "-K",
            ":",
            "-X",
            "acks=all",
        ]);
        let (ok, _, err) = run(cmd, keyed.as_bytes(), Duration::from_secs(20));
        assert!(ok, "keyed kcat produce failed: {err}");
        let mut partition_of = std::collections::HashMap::new();
        for p in 0..3 {
            let part = p.to_string();
            let mut cmd = kcat();
            cmd.args([
                "-b",
                &bootstrap,
                "-t",
                "kcat-parts",
                "-C",
                "-p",
                &part,
                "-o",
                "10",
                "-e",
                "-f",
                "%k\n",
            ]);
            let (ok, out, err) = run(cmd, b"", Duration::from_secs(20));
            assert!(ok, "kcat consume failed: {err}");
            for key in out.lines() {
                let first = *partition_of.entry(key.to_owned()).or_insert(p);
                assert_eq!(first, p, "key {key} on two partitions");
            }
        }
        assert_eq!(partition_of.len(), 12, "{partition_of:?}");
    })
    .await
    .unwrap();
    for n in &nodes {
        n.shutdown();
    }
}

/// kcat against five nodes with a topic of 10 partitions x 3 replicas, so every node lacks
/// replicas of some partitions: `-L` at any node lists all 10 with a leader and 3 replicas, and
/// kcat bootstrapped at one node writes every partition and kcat bootstrapped at another reads
/// each back (librdkafka goes to the leaders Metadata names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_finds_every_leader_from_any_of_five_nodes() {
    const TOPIC5: &str = "kcat-five";
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for c in cluster_configs(5, dir.path(), &[]) {
        let n = Node::start(c).await.unwrap();
        n.serve_kafka().await.unwrap();
        nodes.push(n);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match nodes[0]
            .create_topic(TOPIC5, 10, Duration::from_secs(5))
            .await
        {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "create {TOPIC5}: {e}"),
        }
    }
    // Every node knows every partition's leader: its own groups', or the reported one.
    let incarnation = nodes[0].topic_incarnation(TOPIC5).unwrap();
    while !nodes.iter().all(|n| {
        n.live_brokers().len() == 5
            && (0..10).all(|p| match n.partition(TOPIC5, p) {
                Some(s) => s.visible().leader != 0,
                None => n.reported_leader(TOPIC5, incarnation, p).is_some(),
            })
    }) {
        assert!(
            Instant::now() < deadline,
            "leaders of {TOPIC5} not known everywhere"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let hosted: usize = nodes.iter().map(|n| n.partitions(TOPIC5).len()).sum();
    assert_eq!(hosted, 30, "10 partitions x 3 replicas");
    let brokers: Vec<String> = nodes
        .iter()
        .map(|n| n.config().kafka_advertised.clone())
        .collect();
    tokio::task::spawn_blocking(move || {
        for b in &brokers {
            let mut cmd = kcat();
            cmd.args(["-b", b, "-L", "-t", TOPIC5]);
            let (ok, out, err) = run(cmd, b"", Duration::from_secs(20));
            assert!(ok, "kcat -L at {b} failed: {err}");
            assert!(out.contains(" 5 brokers:"), "{out}");
            assert!(
                out.contains(&format!("topic \"{TOPIC5}\" with 10 partitions")),
                "{out}"
            );
            for p in 0..10 {
                let line = out
                    .lines()
                    .find(|l| {
                        l.trim_start()
                            .starts_with(&format!("partition {p}, leader "))
                    })
                    .unwrap_or_else(|| panic!("no partition {p} at {b}: {out}"));
                // "partition P, leader L, replicas: A,B,C, isrs: ..."
                let replicas = line
                    .split("replicas: ")
                    .nth(1)
                    .and_then(|r| r.split(", isrs").next())
                    .map_or(0, |r| r.split(',').count());
                assert!(!line.contains("leader -1"), "{line}");
                assert_eq!(replicas, 3, "{line}");
            }
        }
        for p in 0..10 {
            let lines: String = (0..5).map(|i| format!("p{p}-{i}\n")).collect();
            let part = p.to_string();
            let mut cmd = kcat();
            cmd.args([
                "-b",
                &brokers[4],
                "-t",
                TOPIC5,
                "-P",
                "-p",
                &part,
                "-X",
                "acks=all",
            ]);
            let (ok, _, err) = run(cmd, lines.as_bytes(), Duration::from_secs(20));
            assert!(ok, "kcat produce to partition {p} failed: {err}");
        }
        for p in 0..10 {
            let part = p.to_string();
            let (ok, out, err) = kcat_consume(&brokers[0], TOPIC5, "beginning", &["-p", &part]);
            assert!(ok, "kcat consume of partition {p} failed: {err}");
            let want: Vec<String> = (0..5).map(|i| format!("{i} p{p}-{i}")).collect();
            assert_eq!(out.lines().collect::<Vec<_>>(), want, "partition {p}");
        }
    })
    .await
    .unwrap();
    for n in &nodes {
        n.shutdown();
    }
}
