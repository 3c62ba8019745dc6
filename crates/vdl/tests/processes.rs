//! `Log::join` across processes: this test process embeds node 1; nodes 2 and 3 are other
//! processes (this same test binary started again as a member: `VDL_EMBED_MEMBER=<config>`),
//! configured with the `vdl` binary's TOML. Appends need a majority of processes: with one
//! other process killed they go on, with both killed they cannot commit, and with both started
//! again from their data directories the cluster goes on with every acknowledged record.
//!
//! And the embedding process itself killed with SIGKILL in the middle of appending to a
//! single-node log: opened again, the log holds every append that was acknowledged.
//!
//! A custom harness (`harness = false`): `main` is either the tests, a member process or a
//! writer process.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use vdl::{Error, Log, NodeConfig, Offset, Record};

mod common;

const MEMBER_ENV: &str = "VDL_EMBED_MEMBER";
const WRITER_ENV: &str = "VDL_EMBED_WRITER";
const STREAM: &str = "orders";

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if let Some(config) = std::env::var_os(MEMBER_ENV) {
        return runtime.block_on(member(PathBuf::from(config)));
    }
    if let Some(dir) = std::env::var_os(WRITER_ENV) {
        return runtime.block_on(writer(PathBuf::from(dir)));
    }
    runtime.block_on(three_processes());
    println!("test a_cluster_of_three_processes ... ok");
    runtime.block_on(killed_writer_loses_no_acknowledged_append());
    println!("test killed_writer_loses_no_acknowledged_append ... ok");
}

/// A writer process: appends `key = i` to a single-node log in `dir`, printing `acked i` once
/// each append returned, for at most 100,000 appends or 60 s.
async fn writer(dir: PathBuf) {
    use std::io::Write;
    let log = Log::open_single(&dir).await.expect("open the log");
    let s = log.stream(STREAM).await.expect("stream");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut out = std::io::stdout().lock();
    for i in 0..100_000u64 {
        if std::time::Instant::now() > deadline {
            break;
        }
        let at = s
            .append(Record::keyed(i.to_string(), format!("value {i}")))
            .await
            .expect("append");
        assert_eq!(at.offset, i);
        writeln!(out, "acked {i}").unwrap();
        out.flush().unwrap();
    }
    log.shutdown().await;
}

/// The embedding process is killed (SIGKILL) while appending; every append it saw
/// acknowledged is in the log when it is opened again, in order, once.
async fn killed_writer_loses_no_acknowledged_append() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(WRITER_ENV, dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the writer");
    let mut last_acked = None;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(Ok(line)) = lines.next() {
        let i: u64 = line.strip_prefix("acked ").unwrap().parse().unwrap();
        last_acked = Some(i);
        if i >= 300 {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let last_acked = last_acked.expect("the writer acknowledged appends");
    assert!(
        last_acked >= 300,
        "the writer stopped early at {last_acked}"
    );
    let log = Log::open_single(dir.path()).await.unwrap();
    let s = log.stream(STREAM).await.unwrap();
    let all = s.read_range(Offset::start(0), u64::MAX).await.unwrap();
    assert!(
        all.len() as u64 > last_acked,
        "{} records, {last_acked} acked",
        all.len()
    );
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r.offset.offset, i as u64);
        assert_eq!(r.key.as_deref(), Some(i.to_string().as_bytes()));
        assert_eq!(r.value.as_deref(), Some(format!("value {i}").as_bytes()));
    }
    // The log goes on after the records that survived.
    let next = s.append(Record::new("after the crash")).await.unwrap();
    assert_eq!(next.offset, all.len() as u64);
    log.shutdown().await;
}

/// A member process: joins with the configuration file and runs until its stdin closes (the
/// test ended or dropped it) or it is killed.
async fn member(config: PathBuf) {
    let config = NodeConfig::from_file(&config).expect("the member's configuration");
    let log = Log::join(config).await.expect("join the cluster");
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await
    .expect("waiting on stdin");
    log.shutdown().await;
}

/// Member processes of the test, killed when dropped.
struct Members {
    dir: PathBuf,
    children: Vec<Option<Child>>,
}

impl Members {
    fn spawn(&mut self, node: usize) {
        let log = std::fs::File::create(self.dir.join(format!("vdl{node}.log"))).unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .env(MEMBER_ENV, self.dir.join(format!("vdl{node}.toml")))
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start a member process");
        self.children[node - 1] = Some(child);
    }

    fn kill(&mut self, node: usize) {
        if let Some(mut child) = self.children[node - 1].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for node in 1..=self.children.len() {
            self.kill(node);
        }
    }
}

/// The `vdl` binary's TOML for three nodes on free ports, written to `dir/vdlN.toml`.
fn write_configs(dir: &Path) {
    let ports: Vec<u16> = (0..6).map(|_| common::free_port()).collect();
    let members: Vec<String> = (0..3)
        .map(|i| format!("\"vdl{}={}@127.0.0.1:{}\"", i + 1, i + 1, ports[i]))
        .collect();
    for i in 0..3 {
        let cfg = format!(
            "initial_cluster = [{members}]\n\
             [node]\nid = {id}\nname = \"vdl{id}\"\ndata_dir = \"{data}\"\n\
             [listeners]\npeer = \"127.0.0.1:{peer}\"\nkafka = \"127.0.0.1:{kafka}\"\n\
             [raft]\ntick_ms = 20\nheartbeat_ms = 60\nelection_timeout_ms = 600\n",
            members = members.join(", "),
            id = i + 1,
            data = dir.join(format!("node{}", i + 1)).display(),
            peer = ports[i],
            kafka = ports[3 + i],
        );
        std::fs::write(dir.join(format!("vdl{}.toml", i + 1)), cfg).unwrap();
    }
}

/// Makes node 1 (this process) the leader of the stream's partition 0 and returns its handle
/// once it has committed in its term.
async fn lead_here(log: &Log) -> vdl::Stream {
    let s = log.stream(STREAM).await.unwrap();
    common::eventually(Duration::from_secs(30), "node 1 leads", || {
        let st = s.status(0).unwrap();
        if st.leader.is_some_and(|l| l != 1) {
            log.node().partition(STREAM, 0).unwrap().transfer_leader(1);
        }
        st.leader_ready
    })
    .await;
    s
}

async fn three_processes() {
    let dir = tempfile::tempdir().unwrap();
    write_configs(dir.path());
    let mut members = Members {
        dir: dir.path().to_owned(),
        children: vec![None, None, None],
    };
    members.spawn(2);
    members.spawn(3);
    let config = NodeConfig::from_file(&dir.path().join("vdl1.toml")).unwrap();
    let options = vdl::LogOptions {
        append_timeout: Duration::from_secs(2),
        ..vdl::LogOptions::default()
    };
    let log = Log::join_with(config, options).await.unwrap();
    let s = lead_here(&log).await;
    for i in 0..50u32 {
        s.append(Record::keyed(i.to_string(), "a")).await.unwrap();
    }
    // One other process gone: node 1 and the other still make a majority.
    members.kill(2);
    for i in 50..100u32 {
        s.append(Record::keyed(i.to_string(), "b")).await.unwrap();
    }
    // Both gone: nothing can commit.
    members.kill(3);
    let err = s.append(Record::keyed("lonely", "c")).await.unwrap_err();
    assert!(
        err.may_have_committed() || matches!(err, Error::NotLeader { .. }),
        "{err:?}"
    );
    // Both back from their data directories: the cluster goes on.
    members.spawn(2);
    members.spawn(3);
    let s = lead_here(&log).await;
    let at = s.append(Record::keyed("100", "d")).await.unwrap();
    let all = s.read_range(Offset::start(0), u64::MAX).await.unwrap();
    assert_eq!(all.last().unwrap().offset, at);
    let keys: Vec<String> = all
        .iter()
        .map(|r| String::from_utf8(r.key.clone().unwrap().to_vec()).unwrap())
        .filter(|k| k != "lonely")
        .collect();
    let expected: Vec<String> = (0..=100).map(|i: u32| i.to_string()).collect();
    assert_eq!(keys, expected, "every acknowledged record, once, in order");
    log.shutdown().await;
}
