//! Real store files as seeds for the `segment_recovery` fuzz target: a store of a few segments
//! (records, metadata and configuration entries), reopened to check it is whole. With
//! `VDL_FUZZ_SEEDS_DIR` set (fuzz/seed-corpus.sh), each segment file, followed by the marker
//! `FF FE FD` and its index file when it has one, is written there as one seed.

mod common;

use bytes::Bytes;
use logstore::{EntryKind, LogStore, NewEntry, StoreConfig};

#[test]
fn a_few_segments_reopen_whole_and_make_fuzz_seeds() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        segment_bytes: 4096,
        ..StoreConfig::default()
    };
    let mut store = LogStore::open(dir.path(), config.clone()).unwrap();
    for i in 1..=40u64 {
        let (kind, payload) = match i % 5 {
            0 => (EntryKind::Meta, Bytes::from(vec![i as u8; 40])),
            3 => (EntryKind::ConfChangeV2, Bytes::from_static(b"\x08\x01")),
            _ => (
                EntryKind::Records,
                Bytes::from(common::batch(2, 1_700_000_000_000 + i as i64, 300, i)),
            ),
        };
        store
            .append(&[NewEntry {
                index: i,
                term: 1 + i / 20,
                kind,
                payload,
                context: Bytes::new(),
            }])
            .unwrap();
    }
    drop(store);
    let store = LogStore::open(dir.path(), config).unwrap();
    assert_eq!((store.first_index(), store.last_index()), (1, 40));
    assert_eq!(store.entries(1, 41, u64::MAX).unwrap().len(), 40);
    drop(store);

    let Some(out) = std::env::var_os("VDL_FUZZ_SEEDS_DIR") else {
        return;
    };
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    for (k, name) in names.iter().enumerate() {
        let mut seed = std::fs::read(dir.path().join(name)).unwrap();
        let index = dir.path().join(name.replace(".log", ".index"));
        if let Ok(idx) = std::fs::read(&index) {
            seed.extend_from_slice(&[0xFF, 0xFE, 0xFD]);
            seed.extend_from_slice(&idx);
        }
        std::fs::write(std::path::Path::new(&out).join(format!("store-{k}")), seed).unwrap();
    }
}
