//! The file-system seam: every write, fsync, rename and removal the store makes goes through
//! a [`FileSystem`], so tests can inject disk faults. Reads (memory maps, `pread`) and
//! recovery's own cuts use the real file system directly.
//!
//! The seam is process-wide ([`install_file_system`], before the first store opens): a
//! node's stores share one disk, and a fault-injection test runs each node as its own
//! process. The default is [`RealFs`]. [`FaultInjectingFs`] fails or slows calls as a control
//! file says, and journals writes and syncs so that [`simulate_power_cut`] can drop what was
//! not fsynced after the process is killed.
//!
//! Policy (enforced by the callers, see `fsutil.rs`): an fsync failure is fail-stop (the
//! process stops with a message naming the file; a restart recovers); a failed write leaves
//! nothing visible (the store cuts what it wrote and the append returns the error).

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The file operations the store makes that a disk can fail.
pub trait FileSystem: Send + Sync + 'static {
    /// Writes all of `buf` at byte `pos` of `file` (opened at `path`).
    fn write_all_at(&self, file: &File, path: &Path, buf: &[u8], pos: u64) -> io::Result<()>;
    /// fdatasync of `file`.
    fn sync_data(&self, file: &File, path: &Path) -> io::Result<()>;
    /// fsync of `file` (data and metadata; also directories).
    fn sync_all(&self, file: &File, path: &Path) -> io::Result<()>;
    /// Renames `from` to `to` (replacing it).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
}

/// The operating system's file system.
#[derive(Debug, Default)]
pub struct RealFs;

impl FileSystem for RealFs {
    fn write_all_at(&self, file: &File, _path: &Path, buf: &[u8], pos: u64) -> io::Result<()> {
        file.write_all_at(buf, pos)
    }
    fn sync_data(&self, file: &File, _path: &Path) -> io::Result<()> {
        file.sync_data()
    }
    fn sync_all(&self, file: &File, _path: &Path) -> io::Result<()> {
        file.sync_all()
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
}

static FS: OnceLock<Arc<dyn FileSystem>> = OnceLock::new();

/// Installs the process's file system; only the first call (before any store used the
/// default) takes effect: false otherwise.
pub fn install_file_system(fs: Arc<dyn FileSystem>) -> bool {
    FS.set(fs).is_ok()
}

/// The process's file system.
pub(crate) fn fs() -> &'static dyn FileSystem {
    FS.get_or_init(|| Arc::new(RealFs)).as_ref()
}

/// Faults a [`FaultInjectingFs`] injects, read from its control file: one `key=value` per
/// line, `fsync=eio` (every fsync fails with EIO), `write=enospc` (every write fails with
/// ENOSPC), `write=full` (a full disk as ext4 has it: a write that would make the file longer
/// fails with ENOSPC, an overwrite of bytes the file already has succeeds),
/// `fsync_delay_ms=N` (every fsync takes N ms longer). An empty or missing file: no faults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// fsync fails with EIO.
    pub fsync_eio: bool,
    /// Writes fail with ENOSPC.
    pub write_enospc: bool,
    /// Writes that would lengthen their file fail with ENOSPC (a full disk).
    pub write_full: bool,
    /// Added to every fsync.
    pub fsync_delay: Duration,
}

impl Faults {
    /// Parses a control file's text (unknown lines are ignored).
    pub fn parse(text: &str) -> Faults {
        let mut f = Faults::default();
        for line in text.lines() {
            match line.trim().split_once('=') {
                Some(("fsync", "eio")) => f.fsync_eio = true,
                Some(("write", "enospc")) => f.write_enospc = true,
                Some(("write", "full")) => f.write_full = true,
                Some(("fsync_delay_ms", ms)) => {
                    f.fsync_delay = Duration::from_millis(ms.trim().parse().unwrap_or(0))
                }
                _ => {}
            }
        }
        f
    }
}

/// How often the control file is read again.
const CONTROL_REFRESH: Duration = Duration::from_millis(50);

/// A [`RealFs`] that injects the faults its control file names (for tests) and journals
/// every write and fsync to `<control>.journal` (for [`simulate_power_cut`]).
pub struct FaultInjectingFs {
    control: PathBuf,
    state: Mutex<(Instant, Faults)>,
    journal: Mutex<File>,
}

impl FaultInjectingFs {
    /// Faults as `control` says (read again every 50 ms); the journal is created next to it.
    pub fn new(control: &Path) -> io::Result<FaultInjectingFs> {
        let journal = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(journal_path(control))?;
        Ok(FaultInjectingFs {
            control: control.to_path_buf(),
            state: Mutex::new((Instant::now() - CONTROL_REFRESH * 2, Faults::default())),
            journal: Mutex::new(journal),
        })
    }

    fn faults(&self) -> Faults {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.0.elapsed() >= CONTROL_REFRESH {
            s.1 = Faults::parse(&std::fs::read_to_string(&self.control).unwrap_or_default());
            s.0 = Instant::now();
        }
        s.1
    }

    fn journal(&self, line: String) {
        let mut j = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        let _ = j.write_all(line.as_bytes());
    }

    fn sync(&self, path: &Path, real: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let f = self.faults();
        if !f.fsync_delay.is_zero() {
            std::thread::sleep(f.fsync_delay);
        }
        if f.fsync_eio {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        real()?;
        self.journal(format!("S {}\n", path.display()));
        Ok(())
    }
}

/// The journal of a [`FaultInjectingFs`] with control file `control`.
pub fn journal_path(control: &Path) -> PathBuf {
    let mut p = control.as_os_str().to_owned();
    p.push(".journal");
    PathBuf::from(p)
}

impl FileSystem for FaultInjectingFs {
    fn write_all_at(&self, file: &File, path: &Path, buf: &[u8], pos: u64) -> io::Result<()> {
        let faults = self.faults();
        let lengthens = || {
            file.metadata()
                .map_or(true, |m| pos + buf.len() as u64 > m.len())
        };
        if faults.write_enospc || (faults.write_full && lengthens()) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        // Journaled before the write: a kill in between leaves a write the power cut drops.
        self.journal(format!("W {pos} {} {}\n", buf.len(), path.display()));
        file.write_all_at(buf, pos)
    }
    fn sync_data(&self, file: &File, path: &Path) -> io::Result<()> {
        self.sync(path, || file.sync_data())
    }
    fn sync_all(&self, file: &File, path: &Path) -> io::Result<()> {
        self.sync(path, || file.sync_all())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)?;
        // What was written to `from` (and synced or not) is now `to`'s.
        self.journal(format!("R {}\n{}\n", from.display(), to.display()));
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
}

/// After the process using a [`FaultInjectingFs`] was killed: drops every write it made
/// after the last fsync of its file, as a power cut would (each such range is zeroed; with
/// `torn`, the first half of the first lost write of each file is kept, a torn write). The
/// journal is emptied. Returns the number of writes dropped.
pub fn simulate_power_cut(control: &Path, torn: bool) -> io::Result<usize> {
    let jpath = journal_path(control);
    let text = std::fs::read_to_string(&jpath).unwrap_or_default();
    // Pending (unsynced) writes per file, in order.
    let mut pending: std::collections::HashMap<PathBuf, Vec<(u64, u64)>> = Default::default();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("W ") {
            let mut it = rest.splitn(3, ' ');
            let (Some(pos), Some(len), Some(path)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            let (Ok(pos), Ok(len)) = (pos.parse(), len.parse()) else {
                continue;
            };
            pending
                .entry(PathBuf::from(path))
                .or_default()
                .push((pos, len));
        } else if let Some(path) = line.strip_prefix("S ") {
            pending.remove(Path::new(path));
        } else if let Some(from) = line.strip_prefix("R ") {
            let Some(to) = lines.next() else { break };
            let moved = pending.remove(Path::new(from)).unwrap_or_default();
            pending.insert(PathBuf::from(to), moved);
        }
    }
    let mut dropped = 0;
    for (path, writes) in pending {
        let Ok(file) = std::fs::OpenOptions::new().write(true).open(&path) else {
            continue;
        };
        let len = file.metadata()?.len();
        for (i, (pos, n)) in writes.into_iter().enumerate() {
            let keep = if torn && i == 0 { n / 2 } else { 0 };
            let from = pos + keep;
            let to = (pos + n).min(len);
            if from < to {
                file.write_all_at(&vec![0u8; (to - from) as usize], from)?;
            }
            dropped += 1;
        }
        file.sync_all()?;
    }
    std::fs::write(&jpath, b"")?;
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_file_and_power_cut() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("faults");
        assert_eq!(
            Faults::parse("fsync=eio\nwrite=enospc\nfsync_delay_ms=5\nx"),
            Faults {
                fsync_eio: true,
                write_enospc: true,
                write_full: false,
                fsync_delay: Duration::from_millis(5),
            }
        );
        assert!(Faults::parse("write=full\n").write_full);
        let fs = FaultInjectingFs::new(&control).unwrap();
        let path = dir.path().join("f");
        let file = File::create(&path).unwrap();
        fs.write_all_at(&file, &path, b"synced", 0).unwrap();
        fs.sync_data(&file, &path).unwrap();
        fs.write_all_at(&file, &path, b"lost", 6).unwrap();
        std::fs::write(&control, "write=enospc\n").unwrap();
        std::thread::sleep(CONTROL_REFRESH * 2);
        let e = fs.write_all_at(&file, &path, b"x", 10).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        // A full disk: overwriting what the file has works, lengthening it does not.
        std::fs::write(&control, "write=full\n").unwrap();
        std::thread::sleep(CONTROL_REFRESH * 2);
        fs.write_all_at(&file, &path, b"lo", 6).unwrap();
        let e = fs.write_all_at(&file, &path, b"lost", 8).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        std::fs::write(&control, "fsync=eio\n").unwrap();
        std::thread::sleep(CONTROL_REFRESH * 2);
        assert_eq!(
            fs.sync_data(&file, &path).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        assert_eq!(simulate_power_cut(&control, false).unwrap(), 2);
        assert_eq!(std::fs::read(&path).unwrap(), b"synced\0\0\0\0");
    }
}
