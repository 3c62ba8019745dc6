//! A crash at every step of a compaction pass (writing the rewritten segments, each swap:
//! index removal, directory fsync, rename, directory fsync, and the checkpoint), followed by
//! a power cut that drops every write not fsynced: the store opens, keeps every Raft index
//! and term, every latest value per key at its offset, leaves no temporary file, and a new
//! pass finishes the work.
//!
//! The child is this test binary run again with an environment variable: it installs a file
//! system that ends the process (`_exit`, no cleanup, as a kill) just before its k-th call
//! during the pass; the parent then simulates the power cut and checks.

mod common;

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use common::compaction_util::*;
use common::kv_codec::KvCodec;
use logstore::{FaultInjectingFs, FileSystem, LogStore, StoreConfig, SyncPolicy};

const CHILD_DIR: &str = "LOGSTORE_COMPACTION_CRASH_DIR";
const CHILD_AT: &str = "LOGSTORE_COMPACTION_CRASH_AT";

fn crash_cfg() -> StoreConfig {
    StoreConfig {
        sync_policy: SyncPolicy::Never,
        ..cfg()
    }
}

/// Builds the workload in `dir` (synced). Deterministic: the same store every time.
fn build(dir: &Path) -> (LogStore, Model) {
    let mut s = LogStore::open(dir, crash_cfg()).unwrap();
    let mut m = Model::default();
    workload(&mut s, &mut m, 160, 9, 1_000);
    s.sync().unwrap();
    (s, m)
}

/// A `FaultInjectingFs` (journaling for the power cut) that ends the process before its
/// k-th call once armed.
struct CrashingFs {
    inner: FaultInjectingFs,
    countdown: AtomicI64,
}

impl CrashingFs {
    fn step(&self) {
        if self.countdown.fetch_sub(1, Ordering::SeqCst) == 0 {
            // SAFETY: ends the process at once, as a kill would; nothing runs after it.
            unsafe { libc::_exit(86) };
        }
    }
}

impl FileSystem for CrashingFs {
    fn write_all_at(
        &self,
        file: &std::fs::File,
        path: &Path,
        buf: &[u8],
        pos: u64,
    ) -> io::Result<()> {
        self.step();
        self.inner.write_all_at(file, path, buf, pos)
    }
    fn sync_data(&self, file: &std::fs::File, path: &Path) -> io::Result<()> {
        self.step();
        self.inner.sync_data(file, path)
    }
    fn sync_all(&self, file: &std::fs::File, path: &Path) -> io::Result<()> {
        self.step();
        self.inner.sync_all(file, path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.step();
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.step();
        self.inner.remove_file(path)
    }
}

fn child(dir: &Path, at: i64) {
    let fs = Arc::new(CrashingFs {
        inner: FaultInjectingFs::new(&dir.join("faults")).unwrap(),
        countdown: AtomicI64::new(i64::MAX),
    });
    assert!(logstore::install_file_system(fs.clone()));
    let (mut s, _) = build(&dir.join("log"));
    fs.countdown.store(at, Ordering::SeqCst);
    let p = plan(&s);
    let r = s.compact(&p, &KvCodec, &mut |_| {}).unwrap();
    assert!(r.segments_rewritten > 3, "{r:?}");
    println!("DONE");
}

fn tmp_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect()
}

#[test]
fn a_crash_at_any_step_of_a_pass_loses_no_latest_value() {
    if let (Ok(dir), Ok(at)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_AT)) {
        child(Path::new(&dir), at.parse().unwrap());
        return;
    }
    // The reference: what the workload writes, and what a whole pass leaves.
    let reference = tempfile::tempdir().unwrap();
    let (mut s, m) = build(reference.path());
    let shape = entry_shape(&s);
    let active_first = s.segment_summaries().pop().unwrap().first_offset;
    s.compact(&plan(&s), &KvCodec, &mut |_| {}).unwrap();
    let cleaned = read_all(&s);
    drop(s);

    let exe = std::env::current_exe().unwrap();
    let mut crashes = 0;
    for at in 0..1_000i64 {
        let tmp = tempfile::tempdir().unwrap();
        let out = Command::new(&exe)
            .args([
                "--exact",
                "a_crash_at_any_step_of_a_pass_loses_no_latest_value",
                "--nocapture",
            ])
            .env(CHILD_DIR, tmp.path())
            .env(CHILD_AT, at.to_string())
            .output()
            .unwrap();
        let done = String::from_utf8_lossy(&out.stdout).contains("DONE");
        if !done {
            assert_eq!(
                out.status.code(),
                Some(86),
                "child failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            crashes += 1;
        }
        let dropped =
            logstore::simulate_power_cut(&tmp.path().join("faults"), at % 2 == 1).unwrap();
        let dir = tmp.path().join("log");
        let mut s = LogStore::open(&dir, crash_cfg())
            .unwrap_or_else(|e| panic!("open after a crash at step {at}: {e}"));
        assert!(
            tmp_files(&dir).is_empty(),
            "step {at}: temporary files left"
        );
        assert_eq!(entry_shape(&s), shape, "step {at}: the Raft log changed");
        let read = read_all(&s);
        check_latest(&m, &read, active_first);
        // A new pass finishes the work: the same records as one uninterrupted pass.
        s.compact(&plan(&s), &KvCodec, &mut |_| {}).unwrap();
        assert_eq!(
            read_all(&s),
            cleaned,
            "step {at} (dropped {dropped} writes)"
        );
        drop(s);
        let s = LogStore::open(&dir, crash_cfg()).unwrap();
        assert_eq!(read_all(&s), cleaned, "step {at}, reopened");
        if done {
            break;
        }
    }
    println!("{crashes} crash points checked");
    assert!(crashes > 20, "only {crashes} steps");
}
