//! The simulated disks: a [`logstore::FileSystem`] that keeps every write a node's stores made
//! since the last fsync of its file, so that a crash can lose them as a power cut would, and can
//! crash a node in the middle of its turn, at an fsync.
//!
//! The model. Writes reach the real file at once (reads, memory maps and recovery see them, as
//! they see the page cache); [`SimFs`] remembers each one (position, bytes, the bytes it
//! overwrote, the file's length before it) until an fsync of that file (`sync_data` or
//! `sync_all` on its path) makes it durable. A crash ([`power_cut`]) first undoes every write
//! not yet durable, newest first, back to the file as the last fsync left it, and then puts
//! back what the device happened to persist, in units of [`SECTOR_BYTES`] aligned in the file:
//! nothing, everything, a prefix in write order (a device that writes in order), or any subset
//! of the sectors (a device, or the page cache's writeback, that persists sector k+1 and not
//! sector k, of one write or of two). The file's length is then what the persisted sectors
//! make it, or (at random) the length the process had given it, the rest zeros (the size
//! reached the disk, the data did not).
//!
//! A node is crashed *at an fsync* when [`SimFs::arm`] was told to: the n-th fsync of a file
//! under its directory does not happen and panics with [`SimCrash`] instead, which unwinds the
//! group's turn (the simulation catches it and drops the node's groups: the process is gone,
//! nothing after that point was sent or written). Until the crash is taken
//! ([`SimFs::take_crash`]), every further call for that node does nothing.
//!
//! What the model does not express: directory entries are durable at once (a file's creation,
//! rename and removal survive a crash even before the directory's fsync); a rename moves the
//! writes not yet durable to the new name. Files written outside the seam (index files, which
//! are derived data, and the server's own small files) are whole after a crash, except that
//! [`power_cut`] removes or truncates some index files at random (recovery must rebuild them).

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::rng::Rng;

/// What a device persists at once: a crash keeps or loses each such aligned piece of a write
/// not yet fsynced independently. 512 bytes, the smallest sector of common disks (a `hardstate`
/// slot is one sector; a `confstate` slot is two).
pub const SECTOR_BYTES: u64 = 512;

/// The panic payload of a simulated crash (see the module docs).
pub struct SimCrash;

/// One write not yet durable.
#[derive(Debug, Clone)]
pub struct PendingWrite {
    pos: u64,
    data: Vec<u8>,
    /// The bytes it overwrote (those below `len_before`).
    old: Vec<u8>,
    /// The file's length before it.
    len_before: u64,
}

#[derive(Default)]
struct Disk {
    /// Per file, in write order.
    pending: BTreeMap<PathBuf, Vec<PendingWrite>>,
    /// Crash at this many fsyncs from now (1: the next one).
    crash_at_sync: Option<u64>,
    /// Crashed at an fsync; the crash was not taken yet.
    crashed: bool,
}

/// The process's simulated file system (see the module docs); paths outside the registered
/// node directories pass through untracked.
#[derive(Default)]
pub struct SimFs {
    disks: Mutex<BTreeMap<PathBuf, Disk>>,
}

/// Pending writes per file (what a crash may lose).
pub type Unsynced = BTreeMap<PathBuf, Vec<PendingWrite>>;

static SIM_FS: OnceLock<Arc<SimFs>> = OnceLock::new();

/// The simulated file system, installed as the log stores' file system on first use (before
/// any store is opened in this process), with a panic hook that keeps simulated crashes quiet.
pub fn sim_fs() -> &'static SimFs {
    SIM_FS.get_or_init(|| {
        let fs = Arc::new(SimFs::default());
        assert!(
            logstore::install_file_system(fs.clone()),
            "a log store was opened before the simulated disk was installed"
        );
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<SimCrash>().is_none() {
                previous(info);
            }
        }));
        fs
    })
}

impl SimFs {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, Disk>> {
        self.disks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tracks the files under `node_dir` from now on (forgetting what was tracked there).
    pub fn register(&self, node_dir: &Path) {
        self.lock().insert(node_dir.to_path_buf(), Disk::default());
    }

    /// Stops tracking `node_dir`.
    pub fn unregister(&self, node_dir: &Path) {
        self.lock().remove(node_dir);
    }

    /// Crashes the node of `node_dir` at the `syncs`-th fsync from now (at least 1).
    pub fn arm(&self, node_dir: &Path, syncs: u64) {
        if let Some(d) = self.lock().get_mut(node_dir) {
            d.crash_at_sync = Some(syncs.max(1));
        }
    }

    /// Takes back a crash armed for `node_dir` that has not happened.
    pub fn disarm(&self, node_dir: &Path) {
        if let Some(d) = self.lock().get_mut(node_dir) {
            d.crash_at_sync = None;
        }
    }

    /// Whether a crash is armed for `node_dir` and has not happened.
    pub fn armed(&self, node_dir: &Path) -> bool {
        self.lock()
            .get(node_dir)
            .is_some_and(|d| d.crash_at_sync.is_some())
    }

    /// The node of `node_dir` is down (crashed at an fsync, or stopped by the simulation
    /// between turns): returns what was written and not fsynced, and disarms.
    pub fn take_crash(&self, node_dir: &Path) -> Unsynced {
        let mut disks = self.lock();
        let Some(d) = disks.get_mut(node_dir) else {
            return Unsynced::new();
        };
        d.crashed = false;
        d.crash_at_sync = None;
        std::mem::take(&mut d.pending)
    }

    /// The registered directory holding `path`, if any.
    fn disk_of<'a>(disks: &'a mut BTreeMap<PathBuf, Disk>, path: &Path) -> Option<&'a mut Disk> {
        disks
            .iter_mut()
            .find(|(dir, _)| path.starts_with(dir))
            .map(|(_, d)| d)
    }

    fn sync(&self, path: &Path, real: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let mut disks = self.lock();
        let Some(d) = Self::disk_of(&mut disks, path) else {
            drop(disks);
            return real();
        };
        if d.crashed {
            return Ok(());
        }
        if let Some(n) = d.crash_at_sync {
            if n <= 1 {
                d.crash_at_sync = None;
                d.crashed = true;
                drop(disks);
                std::panic::panic_any(SimCrash);
            }
            d.crash_at_sync = Some(n - 1);
        }
        d.pending.remove(path);
        // The model decides what is durable; the real fsync would only cost time.
        Ok(())
    }
}

impl logstore::FileSystem for SimFs {
    fn write_all_at(&self, file: &File, path: &Path, buf: &[u8], pos: u64) -> io::Result<()> {
        let mut disks = self.lock();
        let Some(d) = Self::disk_of(&mut disks, path) else {
            drop(disks);
            return file.write_all_at(buf, pos);
        };
        if d.crashed {
            return Ok(()); // the process is gone
        }
        let len_before = file.metadata()?.len();
        let old_end = (pos + buf.len() as u64).min(len_before);
        let mut old = vec![0u8; old_end.saturating_sub(pos) as usize];
        if !old.is_empty() {
            File::open(path)?.read_exact_at(&mut old, pos)?;
        }
        file.write_all_at(buf, pos)?;
        d.pending
            .entry(path.to_path_buf())
            .or_default()
            .push(PendingWrite {
                pos,
                data: buf.to_vec(),
                old,
                len_before,
            });
        Ok(())
    }

    fn sync_data(&self, file: &File, path: &Path) -> io::Result<()> {
        self.sync(path, || file.sync_data())
    }

    fn sync_all(&self, file: &File, path: &Path) -> io::Result<()> {
        self.sync(path, || file.sync_all())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disks = self.lock();
        let Some(d) = Self::disk_of(&mut disks, from) else {
            drop(disks);
            return std::fs::rename(from, to);
        };
        if d.crashed {
            return Ok(());
        }
        std::fs::rename(from, to)?;
        let moved = d.pending.remove(from);
        d.pending.remove(to);
        if let Some(moved) = moved {
            d.pending.insert(to.to_path_buf(), moved);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut disks = self.lock();
        let Some(d) = Self::disk_of(&mut disks, path) else {
            drop(disks);
            return std::fs::remove_file(path);
        };
        if d.crashed {
            return Ok(());
        }
        std::fs::remove_file(path)?;
        d.pending.remove(path);
        Ok(())
    }
}

/// What a power cut did to a node's files.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CutReport {
    /// Sectors written since their file's last fsync.
    pub unsynced_sectors: u64,
    /// Of those, sectors lost (the bytes from before the write are back).
    pub lost_sectors: u64,
    /// Files with a sector persisted after one that was lost (out-of-order persistence).
    pub out_of_order_files: u64,
    /// Index files removed or cut short.
    pub index_files_hit: u64,
}

/// Applies a power cut to the files `unsynced` names (see the module docs), drawing what
/// persisted from `rng`; then removes or truncates some `*.index` files under `node_dir`.
pub fn power_cut(node_dir: &Path, unsynced: Unsynced, rng: &mut Rng) -> io::Result<CutReport> {
    let mut report = CutReport::default();
    for (path, writes) in unsynced {
        let Some(first) = writes.first() else {
            continue;
        };
        let file = match std::fs::OpenOptions::new().write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let len_now = file.metadata()?.len();
        let synced_len = first.len_before;
        // Back to the file as its last fsync left it.
        for w in writes.iter().rev() {
            file.write_all_at(&w.old, w.pos)?;
        }
        file.set_len(synced_len)?;
        // The sectors of every write, in write order.
        let mut sectors: Vec<(usize, u64, u64)> = Vec::new();
        for (i, w) in writes.iter().enumerate() {
            let end = w.pos + w.data.len() as u64;
            let mut at = w.pos;
            while at < end {
                let next = ((at / SECTOR_BYTES) + 1) * SECTOR_BYTES;
                let to = next.min(end);
                sectors.push((i, at, to));
                at = to;
            }
        }
        let mode = rng.below(4);
        let prefix = rng.below(sectors.len() as u64 + 1) as usize;
        let mut kept = Vec::with_capacity(sectors.len());
        for k in 0..sectors.len() {
            kept.push(match mode {
                0 => false,
                1 => true,
                2 => k < prefix,
                _ => rng.chance(500),
            });
        }
        report.unsynced_sectors += sectors.len() as u64;
        let mut lost_before = false;
        let mut out_of_order = false;
        for (&(i, from, to), &keep) in sectors.iter().zip(&kept) {
            if !keep {
                report.lost_sectors += 1;
                lost_before = true;
                continue;
            }
            out_of_order |= lost_before;
            let w = &writes[i];
            let data = &w.data[(from - w.pos) as usize..(to - w.pos) as usize];
            file.write_all_at(data, from)?;
        }
        report.out_of_order_files += u64::from(out_of_order);
        if len_now > file.metadata()?.len() && rng.chance(500) {
            file.set_len(len_now)?;
        }
    }
    // Index files are written without an fsync (derived data): some are gone or short.
    for path in index_files(node_dir)? {
        if !rng.chance(60) {
            continue;
        }
        report.index_files_hit += 1;
        if rng.chance(500) {
            std::fs::remove_file(&path)?;
        } else {
            let len = std::fs::metadata(&path)?.len();
            let cut = rng.below(len.max(1));
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)?
                .set_len(cut)?;
        }
    }
    Ok(report)
}

/// Every `*.index` file under `dir`, sorted (the order is part of the run).
fn index_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "index") {
                found.push(p);
            }
        }
    }
    found.sort();
    Ok(found)
}
