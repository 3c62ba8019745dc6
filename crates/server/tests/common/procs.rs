//! A cluster of real `vdl` processes on 127.0.0.1 for lifecycle tests: start, stop with SIGTERM
//! or SIGKILL, restart, and check every process is still running. Each node logs to
//! `DIR/vdlN.log`, which a failing test prints.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::free_ports;

/// Three (or more) `vdl` processes sharing one configuration template.
pub struct ProcCluster {
    /// The test's directory (configs, logs, data).
    pub dir: PathBuf,
    /// Each node's Kafka address.
    pub kafka: Vec<SocketAddr>,
    /// Each node's peer address.
    pub peer: Vec<SocketAddr>,
    /// Each node's admin address.
    pub admin: Vec<SocketAddr>,
    /// When set, nodes start with this soft and hard open-file limit (`ulimit -n`).
    pub nofile: Option<u64>,
    procs: Vec<Option<Child>>,
}

impl ProcCluster {
    /// Writes the configs of `n` nodes (fast Raft timing, `extra` TOML appended to the
    /// `[storage]` table) and starts every node.
    pub fn start(dir: &Path, n: usize, storage_extra: &str) -> ProcCluster {
        let mut c = ProcCluster::configure(dir, n, storage_extra);
        for i in 0..n {
            c.spawn(i);
        }
        c
    }

    /// Writes the configs like [`ProcCluster::start`] without starting any node.
    pub fn configure(dir: &Path, n: usize, storage_extra: &str) -> ProcCluster {
        let ports = free_ports(3 * n);
        let members: Vec<String> = (0..n)
            .map(|i| format!("\"vdl{}={}@127.0.0.1:{}\"", i + 1, i + 1, ports[i]))
            .collect();
        let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        for i in 0..n {
            let cfg = format!(
                "initial_cluster = [{members}]\n\
                 [node]\nid = {id}\nname = \"vdl{id}\"\ndata_dir = \"{data}\"\n\
                 [listeners]\npeer = \"127.0.0.1:{peer}\"\nkafka = \"127.0.0.1:{kafka}\"\nadmin = \"127.0.0.1:{adm}\"\n\
                 [raft]\ntick_ms = 20\nheartbeat_ms = 60\nelection_timeout_ms = 600\n\
                 [storage]\n{storage_extra}\n\
                 [streams]\ninitial = []\n",
                members = members.join(", "),
                id = i + 1,
                data = dir.join(format!("node{}", i + 1)).display(),
                peer = ports[i],
                kafka = ports[n + i],
                adm = ports[2 * n + i],
            );
            std::fs::write(dir.join(format!("vdl{}.toml", i + 1)), cfg).unwrap();
        }
        ProcCluster {
            dir: dir.to_owned(),
            kafka: (0..n).map(|i| addr(ports[n + i])).collect(),
            peer: (0..n).map(|i| addr(ports[i])).collect(),
            admin: (0..n).map(|i| addr(ports[2 * n + i])).collect(),
            nofile: None,
            procs: (0..n).map(|_| None).collect(),
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Node `i`'s data directory.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("node{}", i + 1))
    }

    /// Starts node `i` (which must not be running).
    pub fn spawn(&mut self, i: usize) {
        assert!(self.procs[i].is_none(), "node {} already running", i + 1);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("vdl{}.log", i + 1)))
            .unwrap();
        let config = self.dir.join(format!("vdl{}.toml", i + 1));
        let mut cmd = match self.nofile {
            None => Command::new(env!("CARGO_BIN_EXE_vdl")),
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(env!("CARGO_BIN_EXE_vdl"));
                sh
            }
        };
        let child = cmd
            .arg("start")
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn vdl");
        self.procs[i] = Some(child);
    }

    /// Stops node `i` with SIGTERM (waiting up to 10 s, then SIGKILL).
    pub fn stop(&mut self, i: usize) {
        let Some(mut child) = self.procs[i].take() else {
            return;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        for _ in 0..200 {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Kills node `i` with SIGKILL.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.procs[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Restarts every node: all stopped first (SIGKILL when `hard`, else SIGTERM), then all
    /// started.
    pub fn restart_all(&mut self, hard: bool) {
        for i in 0..self.len() {
            if hard {
                self.kill(i);
            } else {
                self.stop(i);
            }
        }
        for i in 0..self.len() {
            self.spawn(i);
        }
    }

    /// Restarts node `i` (SIGKILL when `hard`, else SIGTERM).
    pub fn restart(&mut self, i: usize, hard: bool) {
        if hard {
            self.kill(i);
        } else {
            self.stop(i);
        }
        self.spawn(i);
    }

    /// Whether node `i` was started and has exited since (its status then).
    pub fn exited(&mut self, i: usize) -> Option<std::process::ExitStatus> {
        self.procs[i]
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Panics, with the node's log, when a node that was started has exited.
    pub fn assert_all_running(&mut self) {
        for i in 0..self.len() {
            if let Some(child) = self.procs[i].as_mut() {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!(
                        "node {} exited ({status}); its log:\n{}",
                        i + 1,
                        self.log_tail(i)
                    );
                }
            }
        }
    }

    /// The last 4 KiB of node `i`'s log.
    pub fn log_tail(&self, i: usize) -> String {
        let log =
            std::fs::read_to_string(self.dir.join(format!("vdl{}.log", i + 1))).unwrap_or_default();
        let start = log.len().saturating_sub(4096);
        let start = (start..log.len())
            .find(|&k| log.is_char_boundary(k))
            .unwrap_or(log.len());
        log[start..].to_string()
    }

    /// Node `i`'s whole log.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("vdl{}.log", i + 1))).unwrap_or_default()
    }
}

impl Drop for ProcCluster {
    fn drop(&mut self) {
        for i in 0..self.len() {
            self.kill(i);
        }
    }
}
