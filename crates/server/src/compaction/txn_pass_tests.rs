//! Compaction passes over a real store holding Kafka transactions (the store's rules with
//! this crate's codec): an aborted transaction's record is never mapped and its batch goes;
//! its ABORT marker stays while its data does, then gets a delete horizon, then goes; a
//! committed transaction's marker stays while its data does.

use std::time::Duration;

use bytes::Bytes;
use kafka_proto::records::{
    split_batches, Compression, NewRecord, RecordBatch, RecordBatchBuilder,
};
use logstore::{AbortedRange, CompactionPlan, EntryKind, LogStore, NewEntry, StoreConfig};

use super::codec::KafkaRecordCompactor;

const TS: i64 = 1_700_000_000_000;
const PRODUCER: i64 = 9;

fn record(key: &str, value: &str) -> NewRecord {
    NewRecord::new(TS, value.as_bytes().to_vec()).with_key(key.as_bytes().to_vec())
}

fn plain(key: &str, value: &str) -> Bytes {
    RecordBatchBuilder::new(Compression::None)
        .with_records(&[record(key, value)])
        .unwrap()
        .build()
        .unwrap()
}

fn txn(key: &str, value: &str, seq: i32) -> Bytes {
    RecordBatchBuilder::new(Compression::None)
        .producer(PRODUCER, 0, seq)
        .transactional(true)
        .with_records(&[record(key, value)])
        .unwrap()
        .build()
        .unwrap()
}

fn marker(commit: bool) -> Bytes {
    let kind = if commit { 1 } else { 0 };
    RecordBatchBuilder::new(Compression::None)
        .producer(PRODUCER, 0, -1)
        .transactional(true)
        .control(true)
        .with_records(&[NewRecord::new(TS, vec![0, 0, 0, 0, 0, 0]).with_key(vec![0, 0, 0, kind])])
        .unwrap()
        .build()
        .unwrap()
}

/// Appends `payload` as the next entry, in a sealed segment of its own.
fn append_sealed(store: &mut LogStore, payload: Bytes) {
    let index = store.last_index() + 1;
    store
        .append(&[NewEntry {
            index,
            term: 1,
            kind: EntryKind::Records,
            payload,
            context: Bytes::new(),
        }])
        .unwrap();
    store.roll_if_older_than(Duration::ZERO, u64::MAX).unwrap();
}

/// Every stored batch: (base offset, control, delete horizon, record count).
fn batches(store: &LogStore) -> Vec<(u64, bool, Option<i64>, i32)> {
    let read = store.read_records(0, u64::MAX, u64::MAX).unwrap();
    let mut data = Vec::new();
    for c in &read.chunks {
        data.extend_from_slice(c);
    }
    split_batches(Bytes::from(data))
        .map(|b| {
            let b: RecordBatch = b.unwrap();
            b.validate().unwrap();
            (
                b.base_offset() as u64,
                b.is_control(),
                b.delete_horizon_ms(),
                b.record_count(),
            )
        })
        .collect()
}

/// One pass at `now_ms` over everything appended, with the aborted transaction 1..=2, markers
/// removed only below offset `marker_offsets`.
fn pass_below(
    store: &mut LogStore,
    now_ms: i64,
    marker_offsets: u64,
) -> logstore::CompactionReport {
    let plan = CompactionPlan {
        clean_limit: store.last_index() + 1,
        now_ms,
        min_compaction_lag_ms: 0,
        delete_retention_ms: 1_000,
        tombstone_limit: u64::MAX,
        key_map_bytes: 1 << 20,
    };
    let aborted = vec![AbortedRange {
        producer_id: PRODUCER,
        first_offset: 1,
        last_offset: 2,
    }];
    let prepared = store
        .compaction_source(&plan)
        .unwrap()
        .with_aborted_transactions(aborted)
        .with_marker_limit(marker_offsets)
        .prepare(&plan, &KafkaRecordCompactor::default(), &mut |_| {})
        .unwrap();
    store.install_compaction(prepared).unwrap()
}

/// [`pass_below`] with no marker limit.
fn pass(store: &mut LogStore, now_ms: i64) -> logstore::CompactionReport {
    pass_below(store, now_ms, u64::MAX)
}

#[test]
fn aborted_data_goes_then_its_marker_after_its_horizon_while_committed_markers_stay() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        segment_bytes: 4096,
        preallocate_bytes: 0,
        ..Default::default()
    };
    let mut store = LogStore::open(dir.path(), config).unwrap();
    append_sealed(&mut store, plain("a", "1")); // 0
    append_sealed(&mut store, txn("a", "aborted", 0)); // 1
    append_sealed(&mut store, marker(false)); // 2: ABORT
    append_sealed(&mut store, txn("b", "1", 1)); // 3
    append_sealed(&mut store, marker(true)); // 4: COMMIT
    append_sealed(&mut store, plain("c", "1")); // 5

    // Pass 1: the aborted record goes (not its producer's last batch: 3 is), and does not
    // supersede `a` = 1; both markers stay (a batch of each transaction was in the log).
    let r = pass(&mut store, TS);
    assert_eq!(r.records_removed, 1);
    assert_eq!(
        batches(&store),
        [
            (0, false, None, 1),
            (2, true, None, 1),
            (3, false, None, 1),
            (4, true, None, 1),
            (5, false, None, 1)
        ]
    );

    // Pass 2 (new dirty data): the ABORT marker has no batch of its transaction left: it gets
    // the horizon now + delete.retention.ms. The COMMIT marker's record is still there.
    append_sealed(&mut store, plain("d", "1")); // 6
    let r = pass(&mut store, TS + 10);
    assert_eq!(r.records_removed, 0);
    let now = batches(&store);
    assert_eq!(now[1], (2, true, Some(TS + 10 + 1_000), 1));
    assert_eq!(now[3], (4, true, None, 1));

    // Pass 3 before the horizon: kept.
    append_sealed(&mut store, plain("d", "2")); // 7
    pass(&mut store, TS + 500);
    assert!(batches(&store).iter().any(|b| b.0 == 2));

    // Past it, but at or above the caller's marker limit: kept.
    append_sealed(&mut store, plain("e", "1")); // 8
    pass_below(&mut store, TS + 2_000, 2);
    assert!(batches(&store).iter().any(|b| b.0 == 2));

    // Past it and below the limit: removed whole (an offset gap); everything else as it was.
    append_sealed(&mut store, plain("d", "3")); // 9
    let r = pass_below(&mut store, TS + 2_000, 3);
    let now = batches(&store);
    assert!(now.iter().all(|b| b.0 != 2), "{now:?}");
    assert!(now.contains(&(4, true, None, 1)), "{now:?}");
    assert!(now.contains(&(3, false, None, 1)), "{now:?}");
    assert!(now.contains(&(0, false, None, 1)), "{now:?}");
    assert!(r.records_removed >= 1);
    assert_eq!(store.next_offset(), 10, "offsets are kept");
}

#[test]
fn without_the_aborted_list_the_aborted_record_is_kept_and_its_marker_too() {
    // A codec pass that is not told of the abort takes the batch as committed: the store
    // relies on the caller's list (vdl: the partition's, complete below the clean limit).
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        segment_bytes: 4096,
        preallocate_bytes: 0,
        ..Default::default()
    };
    let mut store = LogStore::open(dir.path(), config).unwrap();
    append_sealed(&mut store, txn("a", "x", 0)); // 0
    append_sealed(&mut store, marker(false)); // 1
    append_sealed(&mut store, plain("c", "1")); // 2
    let plan = CompactionPlan {
        clean_limit: store.last_index() + 1,
        now_ms: TS,
        min_compaction_lag_ms: 0,
        delete_retention_ms: 0,
        tombstone_limit: u64::MAX,
        key_map_bytes: 1 << 20,
    };
    store
        .compact(&plan, &KafkaRecordCompactor::default(), &mut |_| {})
        .unwrap();
    let now = batches(&store);
    assert_eq!(now[0], (0, false, None, 1));
    assert_eq!(now[1], (1, true, None, 1));
}
