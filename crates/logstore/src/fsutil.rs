//! Small file-system helpers: fsync with the panic policy, atomic file replace.
//!
//! **fsync failures panic.** After a failed fsync/fdatasync the kernel may have dropped the
//! dirty pages and cleared the error, so a retry can "succeed" without the data being on disk
//! (the PostgreSQL "fsyncgate" lesson). Continuing would risk acknowledging data that is lost.
//! The only safe reaction is to stop the process and let recovery decide what is on disk.

use std::fs::File;
use std::path::Path;

use crate::error::{io_err, Result};

/// fdatasync; panics on failure (see the module docs).
pub(crate) fn fdatasync(file: &File, path: &Path) {
    if let Err(e) = crate::fs::fs().sync_data(file, path) {
        panic!(
            "logstore: fdatasync of {} failed: {e}; the state of the page cache is unknown, \
             refusing to continue (restart and let recovery check the log)",
            path.display()
        );
    }
}

/// fsync of a directory (makes creations, renames and deletions in it durable); panics on
/// failure like [`fdatasync`]. Opening the directory can fail normally.
pub(crate) fn fsync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(io_err(dir))?;
    if let Err(e) = crate::fs::fs().sync_all(&d, dir) {
        panic!(
            "logstore: fsync of directory {} failed: {e}; refusing to continue",
            dir.display()
        );
    }
    Ok(())
}

/// Replaces `dir/name` atomically and durably: write `name.tmp`, fsync it, rename it over
/// `name`, fsync the directory. A failed fsync panics (the store's policy: no silent loss).
pub fn atomic_write(dir: &Path, name: &str, data: &[u8]) -> Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let dst = dir.join(name);
    {
        let f = File::create(&tmp).map_err(io_err(&tmp))?;
        let fs = crate::fs::fs();
        fs.write_all_at(&f, &tmp, data, 0).map_err(io_err(&tmp))?;
        if let Err(e) = fs.sync_all(&f, &tmp) {
            panic!(
                "logstore: fsync of {} failed: {e}; refusing to continue",
                tmp.display()
            );
        }
    }
    crate::fs::fs().rename(&tmp, &dst).map_err(io_err(&dst))?;
    fsync_dir(dir)
}

/// Removes a file; a missing file is not an error.
pub(crate) fn remove_if_exists(path: &Path) -> Result<()> {
    match crate::fs::fs().remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path)(e)),
    }
}
