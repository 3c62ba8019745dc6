//! Keeping two writers out of one store: a `flock` per store, or one for a node's whole data
//! directory.
//!
//! A store opened alone ([`crate::LogStore::open`]) holds an exclusive `flock` on its `LOCK`
//! file for as long as it is open: one descriptor per store. A node opening thousands of
//! stores under one directory can hold one lock for all of them instead: a [`RootLock`] (an
//! exclusive `flock` on `<root>/STORES.LOCK`, held while the node runs), given to its
//! [`crate::StoreResources`]. A store opened with those resources inside `root` then holds no
//! descriptor for its lock: the root lock keeps other processes out, and the `RootLock`'s set
//! of open store directories refuses a second open of the same store in this process.
//!
//! Both kinds exclude each other, also across processes:
//! * A store opened alone takes its `LOCK` (and keeps it), then checks every directory above
//!   it: a `STORES.LOCK` someone holds means a node owns it (refused, `Locked`). The check is
//!   a shared `flock` taken and dropped at once.
//! * A node's store (under a `RootLock`) checks the store's `LOCK` once at open: held means a
//!   process has it open alone (refused). The check is an exclusive `flock` taken and dropped.
//!
//! The node takes its root lock before checking a store's `LOCK`; a lone opener takes the
//! store's `LOCK` before checking the roots. So when both race, whichever checks second sees
//! the other's lock: never both open. A second node on the same root fails to take the root
//! lock. What it does not cover: a process that opens a store under the root with neither
//! kind of lock (not through this crate), as before.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{io_err, LogStoreError, Result};

/// Name of the lock file a [`RootLock`] holds in its root directory.
pub const ROOT_LOCK_FILE: &str = "STORES.LOCK";

/// An exclusive lock on a directory holding many stores (see the module docs of
/// `root_lock.rs`): while it is held, no other process opens a store below it through this
/// crate, and stores opened below it with [`crate::StoreResources`] carrying it hold no lock
/// descriptor of their own. Released when dropped (or when the process dies).
#[derive(Debug)]
pub struct RootLock {
    root: PathBuf,
    _file: File,
    /// The store directories open under this lock (canonical paths).
    open: Mutex<HashSet<PathBuf>>,
}

impl RootLock {
    /// Takes the lock on `root` (created when missing). Fails with `Locked` when another
    /// `RootLock`, in this process or another, holds it.
    pub fn acquire(root: &Path) -> Result<Arc<RootLock>> {
        std::fs::create_dir_all(root).map_err(io_err(root))?;
        let root = root.canonicalize().map_err(io_err(root))?;
        let path = root.join(ROOT_LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        if !flock(&file, &path, libc::LOCK_EX)? {
            return Err(LogStoreError::Locked { path: root });
        }
        Ok(Arc::new(RootLock {
            root,
            _file: file,
            open: Mutex::new(HashSet::new()),
        }))
    }

    /// The locked directory (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Stores open under this lock now.
    pub fn open_stores(&self) -> usize {
        self.set().len()
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<PathBuf>> {
        // Insert and remove are single operations: a poisoned set is still consistent.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What keeps other openers out of one open store (see the module docs).
#[derive(Debug)]
pub(crate) enum StoreLock {
    /// The store's own `LOCK`, held.
    Own(#[allow(dead_code)] File),
    /// The store's place in a [`RootLock`]'s set; leaves it when dropped.
    UnderRoot { lock: Arc<RootLock>, dir: PathBuf },
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        if let StoreLock::UnderRoot { lock, dir } = self {
            lock.set().remove(dir);
        }
    }
}

/// Locks the store in `dir` (which exists): under `root` when given and `dir` lies below it,
/// else with the store's own `LOCK`. `Locked` when another opener has it.
pub(crate) fn lock_store(dir: &Path, root: Option<&Arc<RootLock>>) -> Result<StoreLock> {
    let canonical = dir.canonicalize().map_err(io_err(dir))?;
    let locked = || LogStoreError::Locked {
        path: dir.to_path_buf(),
    };
    if let Some(root) = root.filter(|r| canonical.starts_with(&r.root)) {
        if !root.set().insert(canonical.clone()) {
            return Err(locked());
        }
        let lock = StoreLock::UnderRoot {
            lock: Arc::clone(root),
            dir: canonical,
        };
        // A process holding the store alone? (The root lock is already held: see above.)
        let own = open_lock_file(dir)?;
        if !flock(&own, &dir.join("LOCK"), libc::LOCK_EX)? {
            return Err(locked());
        }
        drop(own);
        return Ok(lock);
    }
    let own = open_lock_file(dir)?;
    if !flock(&own, &dir.join("LOCK"), libc::LOCK_EX)? {
        return Err(locked());
    }
    // A node holding a directory above? (The store's own lock is already held: see above.)
    for above in canonical.ancestors().skip(1) {
        let path = above.join(ROOT_LOCK_FILE);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(&path)(e)),
        };
        if !flock(&file, &path, libc::LOCK_SH)? {
            return Err(locked());
        }
    }
    Ok(StoreLock::Own(own))
}

fn open_lock_file(dir: &Path) -> Result<File> {
    let path = dir.join("LOCK");
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io_err(&path))
}

/// A non-blocking `flock` of `kind`; false when someone else holds a conflicting one.
fn flock(file: &File, path: &Path, kind: libc::c_int) -> Result<bool> {
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), kind | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(false);
    }
    Err(io_err(path)(e))
}
