//! Stores sharing one node's resources (`StoreResources`): the tail caches never exceed the
//! shared budget and reads after eviction (also eviction by another store's append, racing
//! the read) return the same bytes; sealed segments stay within the bounded set of open
//! segments through reads, recovery and retention, holding no descriptors; idle stores
//! reserve no zeros and hold no reserve handle.

mod common;

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use common::{check_det_entry, det_entry};
use logstore::{EntryKind, LogStore, RetentionPolicy, StoreConfig, StoreResources, SyncPolicy};

fn cfg() -> StoreConfig {
    StoreConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        sync_policy: SyncPolicy::Never,
        preallocate_bytes: 0,
        ..Default::default()
    }
}

/// Every entry by index, and every record by offset, compared with what was appended.
fn check_store(s: &LogStore) {
    let last = s.last_index();
    let mut i = s.first_index();
    while i <= last {
        let es = s.entries(i, last + 1, 2048).unwrap();
        assert!(!es.is_empty());
        for e in &es {
            assert_eq!(e.index, i);
            check_det_entry(e, 1);
            assert_eq!(s.term(i).unwrap(), 1);
            assert_eq!(s.next_offset_after_index(i).unwrap(), e.next_offset());
            i += 1;
        }
    }
    check_offsets(s);
}

/// Reads every offset with `read_records` in small steps; the batches must be contiguous and
/// byte-identical to the stored entries' payloads.
fn check_offsets(s: &LogStore) {
    let mut expected = Vec::new();
    for e in s
        .entries(s.first_index(), s.last_index() + 1, u64::MAX)
        .unwrap()
    {
        if e.kind == EntryKind::Records {
            expected.extend_from_slice(&e.payload);
        }
    }
    let mut got = Vec::new();
    let mut off = s.log_start_offset();
    while off < s.next_offset() {
        let r = s.read_records(off, 300, s.next_offset()).unwrap();
        assert!(r.next_offset > off, "read_records made progress at {off}");
        for c in &r.chunks {
            got.extend_from_slice(c);
        }
        off = r.next_offset;
    }
    assert!(
        got == expected,
        "records read by offset differ from the entries' ({} vs {} bytes)",
        got.len(),
        expected.len()
    );
}

#[test]
fn many_stores_never_exceed_the_shared_budget_and_reads_after_eviction_are_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let budget_bytes = 16 << 10;
    let res = StoreResources::new(budget_bytes, 64);
    let mut stores: Vec<LogStore> = (0..20)
        .map(|i| LogStore::open_shared(&tmp.path().join(format!("s{i}")), cfg(), &res).unwrap())
        .collect();
    assert_eq!(res.cache_budget.stores(), 20);
    for round in 1..=60u64 {
        for (n, s) in stores.iter_mut().enumerate() {
            // Uneven load: store 0 appends ten times as much as the others.
            let count = if n == 0 { 10 } else { 1 };
            for _ in 0..count {
                let i = s.last_index() + 1;
                s.append(&[det_entry(i, 1)]).unwrap();
                let used = res.cache_budget.used_bytes();
                assert!(used <= budget_bytes, "round {round}: {used} cached");
            }
        }
        let sum: u64 = stores.iter().map(|s| s.stats().cache_bytes).sum();
        assert_eq!(
            sum,
            res.cache_budget.used_bytes(),
            "the budget counts every byte"
        );
    }
    assert!(
        res.cache_budget.used_bytes() > budget_bytes / 2,
        "the budget is used"
    );
    let share = res.cache_budget.fair_share_bytes();
    let biggest = stores[0].stats().cache_bytes;
    assert!(
        biggest <= share + 2048,
        "the busy store was brought down to about its share: {biggest} vs {share}"
    );
    for s in &stores {
        check_store(s);
    }
    // Reopening gives every byte back and starts empty; the data is all on disk.
    drop(stores);
    assert_eq!(res.cache_budget.used_bytes(), 0);
    assert_eq!(res.cache_budget.stores(), 0);
    for i in 0..20 {
        let s = LogStore::open_shared(&tmp.path().join(format!("s{i}")), cfg(), &res).unwrap();
        check_store(&s);
    }
}

#[test]
fn reads_race_eviction_by_other_stores_appends() {
    let tmp = tempfile::tempdir().unwrap();
    let budget_bytes = 8 << 10;
    let res = StoreResources::new(budget_bytes, 16);
    let stores: Vec<Arc<RwLock<LogStore>>> = (0..4)
        .map(|i| {
            let s = LogStore::open_shared(&tmp.path().join(format!("s{i}")), cfg(), &res).unwrap();
            Arc::new(RwLock::new(s))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    std::thread::scope(|scope| {
        for (n, store) in stores.iter().enumerate() {
            let budget = Arc::clone(&res.cache_budget);
            scope.spawn(move || {
                for k in 0..300u64 {
                    if Instant::now() > deadline {
                        break;
                    }
                    {
                        let mut s = store.write().unwrap();
                        let i = s.last_index() + 1;
                        s.append(&[det_entry(i, 1)]).unwrap();
                    }
                    assert!(budget.used_bytes() <= budget_bytes);
                    // Read this store back while the other threads' appends evict its cache.
                    if k % 10 == n as u64 {
                        check_store(&store.read().unwrap());
                    }
                }
            });
        }
    });
    for s in &stores {
        check_store(&s.read().unwrap());
    }
}

#[test]
fn a_zero_budget_caches_nothing_and_every_read_goes_to_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let res = StoreResources::new(0, 4);
    let mut s = LogStore::open_shared(tmp.path(), cfg(), &res).unwrap();
    for i in 1..=50 {
        s.append(&[det_entry(i, 1)]).unwrap();
        assert_eq!(s.stats().cache_bytes, 0);
    }
    check_store(&s);
}

/// Descriptors of this process open on `*.log` files under `dir`.
fn open_segment_fds(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(dir) && p.extension().is_some_and(|x| x == "log"))
        .count()
}

/// Memory maps of this process of `*.log` files under `dir`.
fn mapped_segments(dir: &Path) -> usize {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&dir) && l.trim_end().ends_with(".log"))
        .count()
}

fn segment_count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count()
}

#[test]
fn twenty_sealed_segments_are_read_through_four_open_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let res = StoreResources::new(0, 4);
    let mut s = LogStore::open_shared(&dir, cfg(), &res).unwrap();
    let mut i = 0;
    while segment_count(&dir) < 21 {
        i += 1;
        s.append(&[det_entry(i, 1)]).unwrap();
    }
    assert_eq!(open_segment_fds(&dir), 1, "only the active segment is open");
    for round in 0..3 {
        check_store(&s);
        assert!(res.open_segments.open_now() <= 4);
        assert_eq!(open_segment_fds(&dir), 1, "round {round}");
        assert!(mapped_segments(&dir) <= 4, "round {round}");
    }
    assert!(
        res.open_segments.opened_total() >= 20,
        "every sealed segment was opened"
    );
    // Sealed segments' indexes are loaded only while they are open.
    let index_bytes_bounded = s.stats().index_bytes;
    let all_open = StoreResources::new(0, 64);
    drop(s);
    let s = LogStore::open_shared(&dir, cfg(), &all_open).unwrap();
    check_store(&s);
    assert_eq!(all_open.open_segments.open_now(), 20);
    let index_bytes_all = s.stats().index_bytes;
    assert!(
        index_bytes_bounded * 2 < index_bytes_all,
        "indexes of closed segments are dropped: {index_bytes_bounded} vs {index_bytes_all}"
    );

    // Recovery with the index files gone scans every sealed segment; still only the active
    // segment stays open.
    drop(s);
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "index") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let mut s = LogStore::open_shared(&dir, cfg(), &res).unwrap();
    assert_eq!(s.recovery_report().rebuilt_indexes, 20);
    assert_eq!(open_segment_fds(&dir), 1);
    assert_eq!(mapped_segments(&dir), 0);
    check_store(&s);
    assert!(res.open_segments.open_now() <= 4);
    assert!(mapped_segments(&dir) <= 4);

    // Deleting open segments takes them out of the set.
    let out = s.delete_prefix(s.last_index()).unwrap();
    assert_eq!(out.segments_deleted, 20);
    assert_eq!(res.open_segments.open_now(), 0);
    assert_eq!(mapped_segments(&dir), 0);
    check_store(&s);
}

#[test]
fn retention_and_truncation_work_with_closed_sealed_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let res = StoreResources::new(1 << 20, 2);
    let config = StoreConfig {
        retention: RetentionPolicy {
            max_segments: Some(5),
            ..Default::default()
        },
        ..cfg()
    };
    let mut s = LogStore::open_shared(&dir, config, &res).unwrap();
    let mut i = 0;
    while segment_count(&dir) < 12 {
        i += 1;
        s.append(&[det_entry(i, 1)]).unwrap();
    }
    check_store(&s);
    let out = s.apply_retention(s.last_index()).unwrap();
    assert_eq!(out.segments_deleted, 7);
    check_store(&s);
    // Truncating into a sealed segment that is not open rewrites it from a fresh map.
    let cut = s.first_index() + 2;
    s.truncate_suffix(cut).unwrap();
    assert_eq!(s.last_index(), cut - 1);
    assert_eq!(open_segment_fds(&dir), 1);
    check_store(&s);
    for k in cut..cut + 30 {
        s.append(&[det_entry(k, 1)]).unwrap();
    }
    check_store(&s);
    assert!(res.open_segments.open_now() <= 2);
}

/// Allocated bytes (as `du` counts them) of the segment files under `dir`.
fn segment_disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| std::fs::metadata(p).unwrap().blocks() * 512)
        .sum()
}

fn segment_file_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn idle_stores_reserve_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let res = StoreResources::new(1 << 20, 16);
    let idle = Duration::from_millis(1000);
    let config = StoreConfig {
        segment_bytes: 4 << 20,
        sync_policy: SyncPolicy::Always,
        preallocate_bytes: 1 << 20,
        preallocate_idle_release: idle,
        ..Default::default()
    };
    let dirs: Vec<_> = (0..30).map(|i| root.join(format!("p{i}"))).collect();
    let mut stores: Vec<LogStore> = dirs
        .iter()
        .map(|d| LogStore::open_shared(d, config.clone(), &res).unwrap())
        .collect();
    // One append each (a partition that got one message): no zeros, no reserve handle.
    for s in &mut stores {
        s.append(&[det_entry(1, 1)]).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    for (d, s) in dirs.iter().zip(&stores) {
        assert_eq!(
            segment_file_bytes(d),
            s.stats().total_bytes,
            "no zeros ahead"
        );
        assert_eq!(open_segment_fds(d), 1, "only the active segment is open");
    }
    // A store being written (appends in quick succession) gets its reserve...
    for i in 2..=5 {
        stores[0].append(&[det_entry(i, 1)]).unwrap();
    }
    wait_until(
        "the busy store got no zeros",
        Duration::from_secs(10),
        || segment_file_bytes(&dirs[0]) > stores[0].stats().total_bytes,
    );
    assert_eq!(
        open_segment_fds(&dirs[0]),
        2,
        "the active segment and the filler"
    );
    // ...and gives it back once idle.
    wait_until(
        "the idle store kept its zeros",
        idle + Duration::from_secs(5),
        || {
            segment_file_bytes(&dirs[0]) == stores[0].stats().total_bytes
                && open_segment_fds(&dirs[0]) == 1
        },
    );
    assert!(segment_disk_bytes(&dirs[0]) < 64 << 10);

    // Zeros left behind by a previous run (the store is dropped without `close`, as at a
    // crash or a server shutdown) are found at open and cut when the store stays idle.
    for i in 2..=5 {
        stores[1].append(&[det_entry(i, 1)]).unwrap();
    }
    wait_until("no zeros were written", Duration::from_secs(10), || {
        segment_file_bytes(&dirs[1]) > stores[1].stats().total_bytes
    });
    let data_bytes = stores[1].stats().total_bytes;
    let last = stores[1].last_index();
    drop(stores.remove(1));
    assert!(
        segment_file_bytes(&dirs[1]) > data_bytes,
        "dropping trims nothing"
    );
    let s = LogStore::open_shared(&dirs[1], config.clone(), &res).unwrap();
    assert_eq!(s.last_index(), last);
    assert!(s.recovery_report().preallocated_bytes > 0);
    wait_until(
        "zeros of the previous run were not cut",
        idle + Duration::from_secs(5),
        || segment_file_bytes(&dirs[1]) == data_bytes,
    );
    check_store(&s);
}

/// DeleteRecords' records floor: reads below it are out of range, time lookups never answer
/// below it, it never goes down, and retention removes the segments wholly below it (only
/// those) without any retention rule asking.
#[test]
fn the_records_floor_hides_and_then_removes_what_lies_below_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let res = StoreResources::new(1 << 20, 4);
    let mut s = LogStore::open_shared(&dir, cfg(), &res).unwrap();
    let mut i = 0;
    while segment_count(&dir) < 8 {
        i += 1;
        s.append(&[det_entry(i, 1)]).unwrap();
    }
    let end = s.next_offset();
    let floor = end / 2;
    assert!(floor > s.log_start_offset());
    s.raise_records_floor(floor);
    s.raise_records_floor(floor / 2);
    assert_eq!(s.first_readable_offset(), floor, "never lowered");
    assert!(matches!(
        s.read_records(floor - 1, 1 << 20, end),
        Err(logstore::LogStoreError::OffsetOutOfRange { .. })
    ));
    let read = s.read_records(floor, 1 << 20, end).unwrap();
    assert!(read.first_batch_offset.unwrap() <= floor && read.next_offset > floor);
    assert!(s.offset_for_timestamp(0).unwrap().unwrap() >= floor);
    let out = s.apply_retention(s.last_index() + 1).unwrap();
    assert!(out.segments_deleted > 0);
    assert!(
        s.log_start_offset() <= floor,
        "the segment holding the floor stays"
    );
    assert_eq!(s.first_readable_offset(), floor);
    // Nothing more goes without a reason.
    assert_eq!(
        s.apply_retention(s.last_index() + 1)
            .unwrap()
            .segments_deleted,
        0
    );
}
