//! Times the active segment's hot paths: an unsynced append (100 B, one entry) and a read of
//! one entry from the active segment with no cache (a `pread`), best of five rounds, in ns per
//! call. `cargo run --release -p logstore --example hot_path`.

use std::time::Instant;

use bytes::Bytes;
use logstore::{EntryKind, LogStore, NewEntry, StoreConfig, SyncPolicy};

fn batch(len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    b[8..12].copy_from_slice(&((len - 12) as i32).to_be_bytes());
    b[16] = 2;
    b[57..61].copy_from_slice(&1i32.to_be_bytes());
    b
}

fn main() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let config = StoreConfig {
        sync_policy: SyncPolicy::Never,
        cache_bytes: 0,
        segment_bytes: 1 << 30,
        ..Default::default()
    };
    let mut s = LogStore::open(tmp.path(), config).expect("open");
    let payload = Bytes::from(batch(100));
    const N: u64 = 200_000;
    let (mut best_append, mut best_read) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..N {
            let e = NewEntry {
                index: s.last_index() + 1,
                term: 1,
                kind: EntryKind::Records,
                context: Bytes::new(),
                payload: payload.clone(),
            };
            s.append(&[e]).expect("append");
        }
        best_append = best_append.min(t.elapsed().as_nanos() as f64 / N as f64);
        let (lo, hi) = (s.first_index(), s.last_index());
        let t = Instant::now();
        for i in 0..N {
            let e = s.entry(lo + (i * 7919) % (hi - lo)).expect("read");
            std::hint::black_box(e);
        }
        best_read = best_read.min(t.elapsed().as_nanos() as f64 / N as f64);
    }
    println!("append 100 B unsynced: {best_append:.0} ns/call; read one entry from the active segment (pread): {best_read:.0} ns/call");
}
