//! Crash test (b): a child process appends and syncs in a loop, reporting the last synced
//! index on stdout, and is killed with SIGKILL at random moments; after reopening, every
//! reported index is present and intact. The child is this test binary run again with an
//! environment variable set.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::crash_util::*;
use common::det_entry;
use logstore::{LogStore, StoreConfig, SyncPolicy};
use rand::{Rng, SeedableRng};

const CHILD_ENV: &str = "LOGSTORE_CRASH_CHILD_DIR";

fn child_config() -> StoreConfig {
    StoreConfig {
        segment_bytes: 16 * 1024,
        checkpoint_bytes: 4096,
        index_interval_bytes: 512,
        cache_bytes: 8192,
        sync_policy: SyncPolicy::Always,
        ..Default::default()
    }
}

/// Child side: append and sync forever (bounded to 30 s), printing each synced index.
fn child(dir: &str) {
    use std::io::Write;
    let mut store = LogStore::open(Path::new(dir), child_config()).unwrap();
    let mut rng = rand::rngs::StdRng::from_entropy();
    let start = Instant::now();
    let out = std::io::stdout();
    while start.elapsed() < Duration::from_secs(30) {
        let first = store.last_index() + 1;
        let k = rng.gen_range(1..=5);
        let batch: Vec<_> = (first..first + k)
            .map(|i| det_entry(i, term_of(i)))
            .collect();
        let r = store.append(&batch).unwrap();
        assert!(r.durable);
        let mut o = out.lock();
        writeln!(o, "SYNCED {}", r.last_index).unwrap();
        o.flush().unwrap();
    }
}

#[test]
fn sigkill_during_appends() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(&dir);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut reported = 0u64;
    let mut iterations = 0;
    let mut kills_mid_run = 0;
    for _ in 0..300 {
        if Instant::now() > deadline {
            break;
        }
        iterations += 1;
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "sigkill_during_appends",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut max = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("SYNCED ") {
                    max = Some(n.trim().parse::<u64>().unwrap());
                }
            }
            max
        });
        std::thread::sleep(Duration::from_millis(rng.gen_range(5..60)));
        child.kill().unwrap(); // SIGKILL, to the child we started
        let status = child.wait().unwrap();
        if status.code().is_none() {
            kills_mid_run += 1;
        }
        if let Some(n) = reader.join().unwrap() {
            assert!(n >= reported, "indexes only grow");
            reported = n;
        }
        let store = LogStore::open(&dir, child_config()).unwrap();
        // The newest part of the log in full; older parts were checked in earlier rounds.
        verify_from(&store, reported, reported.saturating_sub(2000));
    }
    assert!(iterations >= 30, "only {iterations} iterations ran");
    assert!(reported > 0, "the child never reported a synced index");
    eprintln!(
        "sigkill_during_appends: {iterations} kills ({kills_mid_run} by signal), \
         last reported index {reported}"
    );
}
