//! Multi-process tests with the real `vdl` binary: three processes on 127.0.0.1, a writer that
//! appends with acknowledgements through the admin API, and the leader killed with SIGKILL (or
//! paused with SIGSTOP) while it writes. Every acknowledged entry must be on every node, once,
//! in acknowledgement order, after the killed node restarts.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{batch, free_ports, split_batches};

const STREAM: &str = "logstream1";
const ELECTION_TIMEOUT_MS: u64 = 1000;

/// A minimal HTTP/1.1 exchange (Connection: close). Returns (status, x-high-watermark, body).
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, Option<u64>, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no header end"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status"))?;
    let hw = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("x-high-watermark")
            .then(|| v.trim().parse().ok())?
    });
    Ok((status, hw, raw[split + 4..].to_vec()))
}

fn json_u64(body: &[u8], key: &str) -> Option<u64> {
    let text = String::from_utf8_lossy(body);
    let at = text.find(&format!("\"{key}\":"))? + key.len() + 3;
    let digits: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

struct Cluster {
    dir: PathBuf,
    admin: Vec<SocketAddr>,
    procs: Vec<Option<Child>>,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        let ports = free_ports(9);
        let members: Vec<String> = (0..3)
            .map(|i| format!("\"vdl{}={}@127.0.0.1:{}\"", i + 1, i + 1, ports[i]))
            .collect();
        let mut admin = Vec::new();
        for i in 0..3 {
            let cfg = format!(
                "initial_cluster = [{members}]\n\
                 [node]\nid = {id}\nname = \"vdl{id}\"\ndata_dir = \"{data}\"\n\
                 [listeners]\npeer = \"127.0.0.1:{peer}\"\nkafka = \"127.0.0.1:{kafka}\"\nadmin = \"127.0.0.1:{adm}\"\n\
                 [raft]\ntick_ms = 50\nheartbeat_ms = 100\nelection_timeout_ms = {ELECTION_TIMEOUT_MS}\n\
                 [streams]\ninitial = [\"{STREAM}\"]\n",
                members = members.join(", "),
                id = i + 1,
                data = dir.join(format!("node{}", i + 1)).display(),
                peer = ports[i],
                kafka = ports[3 + i],
                adm = ports[6 + i],
            );
            std::fs::write(dir.join(format!("vdl{}.toml", i + 1)), cfg).unwrap();
            admin.push(SocketAddr::from(([127, 0, 0, 1], ports[6 + i])));
        }
        let mut c = Cluster {
            dir: dir.to_owned(),
            admin,
            procs: vec![None, None, None],
        };
        for i in 0..3 {
            c.spawn(i);
        }
        c
    }

    fn spawn(&mut self, i: usize) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("vdl{}.log", i + 1)))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_vdl"))
            .arg("start")
            .arg("--config")
            .arg(self.dir.join(format!("vdl{}.toml", i + 1)))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn vdl");
        self.procs[i] = Some(child);
    }

    fn signal(&self, i: usize, sig: &str) {
        let pid = self.procs[i].as_ref().expect("running").id();
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} {pid}");
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.procs[i].take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    /// (leader, high watermark) as node `i` reports them, if it answers.
    fn status(&self, i: usize) -> Option<(u64, u64)> {
        let (code, _, body) = http(self.admin[i], "GET", "/status", b"").ok()?;
        (code == 200).then_some(())?;
        Some((
            json_u64(&body, "leader")?,
            json_u64(&body, "high_watermark")?,
        ))
    }

    /// The node that a running node reports as leader, among running nodes.
    fn leader(&self, timeout: Duration) -> Option<usize> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            for i in 0..3 {
                if self.procs[i].is_none() {
                    continue;
                }
                if let Some((leader, _)) = self.status(i) {
                    if leader == i as u64 + 1 {
                        return Some(i);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn read_all(&self, i: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut offset = 0u64;
        loop {
            let (code, hw, body) = http(
                self.admin[i],
                "GET",
                &format!("/streams/{STREAM}/records?offset={offset}&max_bytes=1048576"),
                b"",
            )
            .expect("read");
            assert_eq!(
                code,
                200,
                "read at {offset}: {}",
                String::from_utf8_lossy(&body)
            );
            let batches = split_batches(&body);
            if batches.is_empty() {
                assert_eq!(hw, Some(offset));
                return out;
            }
            for (base, count, payload) in batches {
                offset = base + u64::from(count);
                out.push(payload);
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..3 {
            if self.procs[i].is_some() {
                // A paused process must be resumed to die cleanly on some systems.
                let _ = Command::new("kill")
                    .arg("-CONT")
                    .arg(self.procs[i].as_ref().unwrap().id().to_string())
                    .status();
            }
            self.kill(i);
        }
    }
}

/// Appends until `until`, one request at a time, always to the node believed to lead;
/// returns the acknowledged payloads in acknowledgement order.
fn write_until(c: &Cluster, tag: &str, until: Instant, seq: &mut u64) -> Vec<Vec<u8>> {
    let mut acked = Vec::new();
    let mut target = c.leader(Duration::from_secs(5)).unwrap_or(0);
    while Instant::now() < until {
        *seq += 1;
        let payload = format!("{tag}-{seq}").into_bytes();
        let body = batch(1, &payload);
        match http(
            c.admin[target],
            "POST",
            &format!("/streams/{STREAM}/append?timeout_ms=2000"),
            &body,
        ) {
            Ok((200, _, _)) => acked.push(payload),
            Ok((_, _, body)) => {
                if let Some(l) = json_u64(&body, "leader").filter(|l| (1..=3).contains(l)) {
                    target = l as usize - 1;
                } else {
                    std::thread::sleep(Duration::from_millis(20));
                    target = c
                        .leader(Duration::from_millis(500))
                        .unwrap_or((target + 1) % 3);
                }
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(20));
                target = c
                    .leader(Duration::from_millis(500))
                    .unwrap_or((target + 1) % 3);
            }
        }
    }
    acked
}

fn check_logs(c: &Cluster, acked: &[Vec<u8>]) {
    // Wait until every node reports the same high watermark.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let hws: Vec<_> = (0..3).map(|i| c.status(i).map(|s| s.1)).collect();
        if hws.iter().all(|h| h.is_some() && *h == hws[0]) {
            break;
        }
        assert!(Instant::now() < deadline, "nodes did not converge: {hws:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let logs: Vec<_> = (0..3).map(|i| c.read_all(i)).collect();
    assert_eq!(logs[0], logs[1], "nodes 1 and 2 differ");
    assert_eq!(logs[1], logs[2], "nodes 2 and 3 differ");
    // Every acknowledged payload is there exactly once, in acknowledgement order.
    let mut positions = Vec::new();
    for p in acked {
        let found: Vec<usize> = logs[0]
            .iter()
            .enumerate()
            .filter(|(_, q)| *q == p)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{} appears {} times",
            String::from_utf8_lossy(p),
            found.len()
        );
        positions.push(found[0]);
    }
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "acknowledged order not kept"
    );
}

/// A fresh directory for a cluster; kept after the test (for its logs) when `VDL_TEST_KEEP` is
/// set, otherwise removed when the returned guard drops.
fn test_dir() -> (PathBuf, Option<tempfile::TempDir>) {
    let tmp = tempfile::tempdir().unwrap();
    if std::env::var_os("VDL_TEST_KEEP").is_some() {
        let p = tmp.keep();
        eprintln!("keeping {}", p.display());
        (p, None)
    } else {
        (tmp.path().to_owned(), Some(tmp))
    }
}

#[test]
fn sigkill_the_leader_while_writing_loses_no_acknowledged_entry() {
    let (dir, _hold) = test_dir();
    let mut c = Cluster::start(&dir);
    let election = Duration::from_millis(ELECTION_TIMEOUT_MS);
    assert!(
        c.leader(Duration::from_secs(15)).is_some(),
        "no initial leader"
    );
    let mut acked = Vec::new();
    let mut seq = 0;
    let test_deadline = Instant::now() + Duration::from_secs(120);
    for round in 0..3 {
        acked.extend(write_until(
            &c,
            "w",
            Instant::now() + Duration::from_millis(800),
            &mut seq,
        ));
        let leader = c
            .leader(Duration::from_secs(5))
            .expect("a leader before the kill");
        c.kill(leader);
        let killed_at = Instant::now();
        let new = c.leader(4 * election).expect("a new leader");
        let took = killed_at.elapsed();
        assert!(
            took <= 2 * election + Duration::from_millis(250),
            "round {round}: new leader after {took:?}, more than 2 election timeouts"
        );
        eprintln!("round {round}: new leader after {took:?}");
        assert_ne!(new, leader);
        acked.extend(write_until(
            &c,
            "w",
            Instant::now() + Duration::from_millis(800),
            &mut seq,
        ));
        c.spawn(leader);
        check_logs(&c, &acked);
        assert!(Instant::now() < test_deadline, "test ran out of time");
    }
    assert!(
        acked.len() > 30,
        "the writer made progress: {} acks",
        acked.len()
    );
}

#[test]
fn sigstop_the_leader_then_resume_keeps_logs_consistent() {
    let (dir, _hold) = test_dir();
    let c = Cluster::start(&dir);
    assert!(
        c.leader(Duration::from_secs(15)).is_some(),
        "no initial leader"
    );
    let mut seq = 0;
    let mut acked = write_until(
        &c,
        "s",
        Instant::now() + Duration::from_millis(500),
        &mut seq,
    );
    let leader = c.leader(Duration::from_secs(5)).unwrap();
    c.signal(leader, "STOP");
    let mut others_led = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while others_led.is_none() && Instant::now() < deadline {
        for i in (0..3).filter(|&i| i != leader) {
            if c.status(i).map(|s| s.0) == Some(i as u64 + 1) {
                others_led = Some(i);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let new = others_led.expect("the majority elects a leader while the old one is paused");
    // Write to the new leader while the old one is frozen.
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        seq += 1;
        let p = format!("s-{seq}").into_bytes();
        if let Ok((200, _, _)) = http(
            c.admin[new],
            "POST",
            &format!("/streams/{STREAM}/append?timeout_ms=2000"),
            &batch(1, &p),
        ) {
            acked.push(p);
        }
    }
    assert!(
        acked.len() > 10,
        "the writer made progress: {} acks",
        acked.len()
    );
    c.signal(leader, "CONT");
    // The resumed node steps down, catches up and agrees.
    acked.extend(write_until(
        &c,
        "s",
        Instant::now() + Duration::from_millis(500),
        &mut seq,
    ));
    check_logs(&c, &acked);
}
