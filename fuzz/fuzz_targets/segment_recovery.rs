//! Feeds arbitrary bytes to the log store's recovery as the files of a store directory: the
//! input is split at the first 0xFF 0xFE 0xFD marker into a segment file and its index file
//! (no marker: a segment without an index), both named after the base index the segment's
//! header claims (bytes 8..16, little-endian; 1 when the input is shorter). Opening must not panic and must not allocate
//! beyond the files' sizes; a store that opens must read back every entry it reports, and
//! accept an append after them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use logstore::{EntryKind, LogStore, NewEntry, StoreConfig, SyncPolicy};

/// The base index a segment header claims (1 when there is no header).
fn base_index(segment: &[u8]) -> u64 {
    segment
        .get(8..16)
        .map_or(1, |b| u64::from_le_bytes(b.try_into().unwrap()))
}

fn split(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    match data.windows(3).position(|w| w == [0xFF, 0xFE, 0xFD]) {
        Some(at) => (&data[..at], Some(&data[at + 3..])),
        None => (data, None),
    }
}

fuzz_target!(|data: &[u8]| {
    // In memory (tmpfs) when available: the target does file I/O on every input.
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::Builder::new()
        .prefix("vdl-fuzz-recovery-")
        .tempdir_in(base)
        .expect("a temporary directory");
    let (segment, index) = split(data);
    let base = base_index(segment);
    std::fs::write(dir.path().join(format!("{base:020}.log")), segment).unwrap();
    if let Some(index) = index {
        std::fs::write(dir.path().join(format!("{base:020}.index")), index).unwrap();
    }
    let config = StoreConfig {
        sync_policy: SyncPolicy::Never,
        ..StoreConfig::default()
    };
    let Ok(mut store) = LogStore::open(dir.path(), config) else {
        return;
    };
    let (first, last) = (store.first_index(), store.last_index());
    if last >= first {
        if let Ok(entries) = store.entries(first, last + 1, u64::MAX) {
            assert_eq!(entries.len() as u64, last + 1 - first);
        }
    }
    let next = NewEntry {
        index: last + 1,
        term: store.last_term().max(1),
        kind: EntryKind::Meta,
        payload: bytes::Bytes::from_static(b"after recovery"),
        context: bytes::Bytes::new(),
    };
    let _ = store.append(&[next]);
});
