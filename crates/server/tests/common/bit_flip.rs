//! Damaging a file on purpose: one flipped bit, as a failing disk or memory would leave it.
//! Used by `storage_faults.rs` and the simulation (`simulation/lost_hard_state.rs`).

use std::path::Path;

/// Flips one bit of `path` at `at` (in place and synced: a running node's page cache sees it).
pub fn flip(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x10;
    f.write_all_at(&b, at).unwrap();
    f.sync_all().unwrap();
}
