//! Crash test (a): cut segment and index files at random byte positions and flip random
//! bytes in the unsynced tail (a simulated power cut), reopen, and check that every synced
//! entry is there, nothing after a torn entry is returned, and no repair marker is written
//! (nothing synced was damaged).

mod common;

use std::time::{Duration, Instant};

use common::crash_util::*;
use logstore::{LogStore, StoreConfig, SyncPolicy};
use rand::{Rng, SeedableRng};

#[test]
fn torn_tail_and_damaged_indexes() {
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut iterations = 0;
    let (mut truncations, mut rebuilds) = (0, 0);
    for iter in 0..400u64 {
        if Instant::now() > deadline {
            break;
        }
        iterations += 1;
        let mut rng = rand::rngs::StdRng::seed_from_u64(iter);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let cfg = StoreConfig {
            segment_bytes: rng.gen_range(1024..16 * 1024),
            checkpoint_bytes: rng.gen_range(200..4000),
            index_interval_bytes: rng.gen_range(64..1024),
            cache_bytes: rng.gen_range(0..20_000),
            sync_policy: SyncPolicy::Never,
            ..Default::default()
        };
        let mut store = LogStore::open(&dir, cfg.clone()).unwrap();
        // Phase 1: appends with syncs here and there, ending with a sync.
        let n1 = rng.gen_range(0..150);
        let mut done = 0;
        while done < n1 {
            let k = rng.gen_range(1..=20.min(n1 - done));
            append_range(&mut store, k, &mut rng);
            done += k;
            if rng.gen_bool(0.3) {
                store.sync().unwrap();
            }
        }
        store.sync().unwrap();
        let synced_last = store.last_index();
        let segs = segment_files(&dir);
        let synced_file = segs.last().unwrap().clone();
        let synced_len = std::fs::metadata(&synced_file).unwrap().len();
        // Phase 2: unsynced appends (a roll in here syncs the sealed segment).
        let n2 = rng.gen_range(0..80);
        append_range(&mut store, n2, &mut rng);
        drop(store); // no sync: a crash

        let segs = segment_files(&dir);
        let last = segs.last().unwrap().clone();
        let (durable_last, durable_len) = if last == synced_file {
            (synced_last, synced_len)
        } else {
            (synced_last.max(base_of(&last) - 1), 64)
        };
        // Cut the active segment somewhere in its unsynced part and flip bytes there.
        let len = std::fs::metadata(&last).unwrap().len();
        let cut = rng.gen_range(durable_len..=len);
        let mut data = std::fs::read(&last).unwrap();
        data.truncate(cut as usize);
        if cut > durable_len && rng.gen_bool(0.5) {
            for _ in 0..rng.gen_range(1..4) {
                let at = rng.gen_range(durable_len..cut) as usize;
                data[at] ^= 1 << rng.gen_range(0..8);
            }
        }
        std::fs::write(&last, &data).unwrap();
        // Damage index files anywhere: they are derived data.
        for ent in std::fs::read_dir(&dir).unwrap() {
            let p = ent.unwrap().path();
            if p.extension().is_some_and(|x| x == "index") {
                let mut d = std::fs::read(&p).unwrap();
                if rng.gen_bool(0.3) {
                    let at = rng.gen_range(0..=d.len());
                    d.truncate(at);
                }
                if !d.is_empty() && rng.gen_bool(0.2) {
                    let at = rng.gen_range(0..d.len());
                    d[at] ^= 0x10;
                }
                std::fs::write(&p, &d).unwrap();
            }
        }

        let mut store = LogStore::open(&dir, cfg.clone())
            .unwrap_or_else(|e| panic!("iteration {iter}: reopen failed: {e}"));
        verify(&store, durable_last);
        // Every byte changed lies past the last completed sync: a torn tail, never damage
        // (a repair marker would make the replica vote only for logs holding entries it never
        // acknowledged).
        assert_eq!(
            store.recovery_report().damage,
            None,
            "iteration {iter}: unsynced bytes classed as damage"
        );
        assert_eq!(store.repair_marker(), None, "iteration {iter}");
        truncations += usize::from(store.recovery_report().truncated_bytes > 0);
        rebuilds += store.recovery_report().rebuilt_indexes;
        // The log goes on after recovery.
        append_range(&mut store, 3, &mut rng);
        store.sync().unwrap();
        let want = store.last_index();
        drop(store);
        let store = LogStore::open(&dir, cfg).unwrap();
        verify(&store, want);
        assert_eq!(store.last_index(), want);
    }
    assert!(iterations >= 50, "only {iterations} iterations ran");
    assert!(
        truncations > iterations / 5,
        "only {truncations} torn tails were cut"
    );
    assert!(
        rebuilds > iterations / 5,
        "only {rebuilds} indexes were rebuilt"
    );
    eprintln!(
        "torn_tail_and_damaged_indexes: {iterations} iterations, {truncations} torn tails cut, \
         {rebuilds} indexes rebuilt"
    );
}
