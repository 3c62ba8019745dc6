//! The transaction part of the producer table (see [`super::super::transactions`]): opened by
//! committed transactional batches, closed by markers, fenced by epochs, saved in the snapshot
//! and rebuilt by replaying the log to the same state as applied live.

use bytes::Bytes;
use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};

use super::*;
use crate::replication::producer_snapshot::{decode, encode, rebuild_producers, save};
use crate::replication::transactions::{marker_control_record, AbortedTxn, TxnMarker};

const COMMIT: TxnMarker = TxnMarker {
    commit: true,
    coordinator_epoch: 0,
    transaction_version: 0,
    opened_below: None,
};
const ABORT: TxnMarker = TxnMarker {
    commit: false,
    coordinator_epoch: 0,
    transaction_version: 0,
    opened_below: None,
};

/// A transactional (or plain idempotent) data batch of `n` records.
fn data(pid: i64, epoch: i16, seq: i32, n: usize, transactional: bool) -> Bytes {
    let recs: Vec<NewRecord> = (0..n).map(|_| NewRecord::new(1, "v")).collect();
    RecordBatchBuilder::new(Compression::None)
        .producer(pid, epoch, seq)
        .transactional(transactional)
        .with_records(&recs)
        .unwrap()
        .build()
        .unwrap()
}

/// A non-idempotent batch of `n` records.
fn plain(n: usize) -> Bytes {
    let recs: Vec<NewRecord> = (0..n).map(|_| NewRecord::new(1, "v")).collect();
    RecordBatchBuilder::new(Compression::None)
        .with_records(&recs)
        .unwrap()
        .build()
        .unwrap()
}

/// A marker's control batch, as the leader writes it.
fn marker(pid: i64, epoch: i16, m: TxnMarker) -> Bytes {
    RecordBatchBuilder::new(Compression::None)
        .producer(pid, epoch, -1)
        .transactional(true)
        .control(true)
        .with_records(&[marker_control_record(m, 1)])
        .unwrap()
        .build()
        .unwrap()
}

/// The log used below, one payload per Raft entry (entry i + 1), with the offsets each entry
/// starts at: producers 1 and 2 open transactions, a plain batch and an idempotent producer
/// in between (merged in one entry, as group commit does), 1 commits, 2 aborts, 1 opens again.
fn log() -> Vec<Bytes> {
    vec![
        data(1, 0, 0, 2, true),                             // 0..2
        [plain(3), data(2, 0, 0, 1, true)].concat().into(), // 2..5, 2 opens at 5
        data(3, 0, 0, 2, false),                            // 6..8
        data(1, 0, 2, 1, true),                             // 8
        marker(1, 0, COMMIT),                               // 9
        [data(2, 0, 1, 1, true), marker(2, 0, ABORT)]
            .concat()
            .into(), // 10, 11
        data(1, 0, 3, 1, true),                             // 12
    ]
}

/// The table as the group builds it live, entry by entry.
fn live(payloads: &[Bytes]) -> ProducerTable {
    let mut t = ProducerTable::default();
    let mut base = 0;
    for (i, p) in payloads.iter().enumerate() {
        t.on_committed_placed_at(i as u64 + 1, &positioned_batch_infos(p, base));
        base += total_span(p);
    }
    t
}

#[test]
fn transactions_open_commit_and_abort() {
    let mut t = live(&log()[..4]);
    // Producer 1 open at 0, 2 at 5 (behind the plain batch of the same entry).
    assert_eq!(t.transactions().open(), vec![(1, 0), (2, 5)]);
    assert_eq!(t.last_stable_offset(9), 0);
    let all = live(&log());
    assert_eq!(all.transactions().open(), vec![(1, 12)]);
    assert_eq!(
        all.transactions()
            .aborted()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![AbortedTxn {
            producer_id: 2,
            first_offset: 5,
            last_offset: 11
        }]
    );
    assert_eq!(all.last_stable_offset(13), 12);
    // The idempotent producer is unaffected: no transaction, its sequence goes on.
    t.clear_pending();
    assert_eq!(
        t.check(&batch_infos(&data(3, 0, 2, 1, false))),
        SequenceCheck::Append
    );
    // Markers keep no sequence: producer 1's next batch continues its sequence.
    let mut all = all;
    assert_eq!(
        all.check(&batch_infos(&data(1, 0, 4, 1, true))),
        SequenceCheck::Append
    );
}

#[test]
fn a_marker_older_than_the_producer_is_fenced_a_newer_one_bumps_the_epoch() {
    let mut t = live(&log()[..1]); // producer 1, epoch 0, open at 0
    assert_eq!(
        t.check(&batch_infos(&marker(1, 0, COMMIT))),
        SequenceCheck::Append
    );
    // KIP-890: the coordinator ends the transaction with the epoch bumped.
    assert_eq!(
        t.check(&batch_infos(&marker(1, 1, ABORT))),
        SequenceCheck::Append
    );
    t.on_committed_placed_at(2, &positioned_batch_infos(&marker(1, 1, ABORT), 2));
    assert_eq!(t.describe()[0].epoch, 1);
    assert_eq!(t.last_stable_offset(3), 3);
    // A zombie coordinator's marker, or the old epoch's data: INVALID_PRODUCER_EPOCH.
    assert_eq!(
        t.check(&batch_infos(&marker(1, 0, COMMIT))),
        SequenceCheck::Reject(SequenceError::InvalidEpoch)
    );
    assert_eq!(
        t.check(&batch_infos(&data(1, 0, 2, 1, true))),
        SequenceCheck::Reject(SequenceError::InvalidEpoch)
    );
    // The new epoch's sequences start at 0.
    assert_eq!(
        t.check(&batch_infos(&data(1, 1, 5, 1, true))),
        SequenceCheck::Reject(SequenceError::OutOfOrder)
    );
    assert_eq!(
        t.check(&batch_infos(&data(1, 1, 0, 1, true))),
        SequenceCheck::Append
    );
    // A pending newer epoch fences an older marker too.
    assert_eq!(
        t.check(&batch_infos(&marker(1, 0, ABORT))),
        SequenceCheck::Reject(SequenceError::InvalidEpoch)
    );
}

/// A new leader holding a marker it has not applied yet: the marker is not taken for a batch
/// in flight (it has no sequence), so the producer's next batch still continues its sequence.
#[test]
fn an_unapplied_marker_is_not_a_pending_batch() {
    let mut t = live(&log()[..4]); // producer 1 at sequence 0..2
    t.clear_pending();
    t.mark_pending(&batch_infos(&marker(1, 0, COMMIT)));
    assert_eq!(
        t.check(&batch_infos(&data(1, 0, 3, 1, true))),
        SequenceCheck::Append
    );
}

#[test]
fn the_snapshot_keeps_transactions_and_reads_the_old_format() {
    let t = live(&log());
    let loaded = decode("t", &encode(&t)).unwrap();
    assert_eq!(loaded.export(), t.export());
    assert_eq!(loaded.transactions(), t.transactions());
    assert_eq!(loaded.last_stable_offset(13), 12);
    // Version 1 (before transactions): the same bytes without the two sections.
    let v1 = live(&[data(3, 0, 0, 2, false)]);
    let mut bytes = encode(&v1);
    bytes.truncate(bytes.len() - 4 - 8); // CRC and the two empty sections
    bytes[4..6].copy_from_slice(&1u16.to_le_bytes());
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    let old = decode("t", &bytes).unwrap();
    assert_eq!(old.export(), v1.export());
    assert!(old.transactions().open().is_empty());
    // Damaged transaction sections are refused, never a panic.
    let good = encode(&t);
    for cut in 0..good.len() {
        assert!(decode("t", &good[..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn replaying_the_log_gives_the_live_state_and_trims_below_the_log_start() {
    use crate::replication::raft_storage::{records_entry, scratch_store};
    let dir = tempfile::tempdir().unwrap();
    let store = scratch_store(dir.path());
    let payloads = log();
    for (i, p) in payloads.iter().enumerate() {
        store
            .write()
            .unwrap()
            .append(&[records_entry(i as u64 + 1, p.clone())])
            .unwrap();
    }
    let n = payloads.len() as u64;
    let want = live(&payloads);
    let replayed = rebuild_producers(&store, n);
    assert_eq!(replayed.export(), want.export());
    assert_eq!(replayed.transactions(), want.transactions());
    // Saved half way, then replayed: the same again.
    save(dir.path(), &rebuild_producers(&store, 4)).unwrap();
    let resumed = rebuild_producers(&store, n);
    assert_eq!(resumed.transactions(), want.transactions());
    assert_eq!(resumed.export(), want.export());
    // DeleteRecords past the abort's marker: the abort is forgotten on the next rebuild.
    store.write().unwrap().raise_records_floor(12);
    let trimmed = rebuild_producers(&store, n);
    assert!(trimmed.transactions().aborted().is_empty());
    assert_eq!(trimmed.transactions().open(), vec![(1, 12)]);
}

/// Transaction version 2's markers.
const COMMIT_V2: TxnMarker = TxnMarker {
    transaction_version: 2,
    ..COMMIT
};
const ABORT_V2: TxnMarker = TxnMarker {
    transaction_version: 2,
    ..ABORT
};

/// Under transaction version 2 (KIP-890), producer 1's transaction 1 (epoch 0) ended by its
/// marker at the bumped epoch 1, transaction 2's first batch (epoch 1), then a stale marker of
/// transaction 1 (epoch 1 again: delayed, or written twice): it ends nothing, on every replica
/// alike (the log decides), and transaction 2's own marker (epoch 2) ends it.
fn stale_marker_log() -> Vec<Bytes> {
    vec![
        data(1, 0, 0, 2, true),  // 0..2: transaction 1
        marker(1, 1, COMMIT_V2), // 2
        data(1, 1, 0, 1, true),  // 3: transaction 2 opens
        marker(1, 1, COMMIT_V2), // 4: stale
        marker(1, 1, ABORT_V2),  // 5: stale
        data(1, 1, 1, 1, true),  // 6
        marker(1, 2, ABORT_V2),  // 7: transaction 2's
    ]
}

#[test]
fn a_stale_version_2_marker_ends_no_later_transaction() {
    let log = stale_marker_log();
    let t = live(&log[..4]);
    assert_eq!(
        t.transactions().open(),
        vec![(1, 3)],
        "still open after the stale COMMIT"
    );
    assert_eq!(t.last_stable_offset(5), 3);
    assert_eq!(t.refused_markers(), 1);
    let t = live(&log[..5]);
    assert!(
        t.transactions().aborted().is_empty(),
        "the stale ABORT aborted nothing"
    );
    assert_eq!(t.describe()[0].epoch, 1, "a refused marker moves no epoch");
    let all = live(&log);
    assert!(all.transactions().open().is_empty());
    assert_eq!(
        all.transactions()
            .aborted()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![AbortedTxn {
            producer_id: 1,
            first_offset: 3,
            last_offset: 7
        }]
    );
    assert_eq!(all.refused_markers(), 2);
}

/// The leader refuses the stale marker before it takes an offset (INVALID_PRODUCER_EPOCH),
/// also while transaction 2's first batch is still on its way; a retry of transaction 1's
/// marker with nothing open passes (and changes nothing); version 1 keeps its rule.
#[test]
fn the_leader_refuses_a_stale_version_2_marker() {
    let log = stale_marker_log();
    let stale = |m| batch_infos(&marker(1, 1, m));
    let mut t = live(&log[..2]);
    assert_eq!(t.check(&stale(COMMIT_V2)), SequenceCheck::Append, "a retry");
    assert_eq!(
        t.check(&batch_infos(&log[2])),
        SequenceCheck::Append,
        "transaction 2's first batch, proposed"
    );
    for m in [COMMIT_V2, ABORT_V2] {
        assert_eq!(
            t.check(&stale(m)),
            SequenceCheck::Reject(SequenceError::InvalidEpoch)
        );
    }
    // In the same entry, behind the batch.
    let mut t = live(&log[..2]);
    let entry: Bytes = [log[2].clone(), marker(1, 1, COMMIT_V2)].concat().into();
    assert_eq!(
        t.check(&batch_infos(&entry)),
        SequenceCheck::Reject(SequenceError::InvalidEpoch)
    );
    let mut t = live(&log[..3]);
    assert_eq!(
        t.check(&stale(ABORT_V2)),
        SequenceCheck::Reject(SequenceError::InvalidEpoch)
    );
    assert_eq!(t.check(&batch_infos(&log[6])), SequenceCheck::Append);
    assert_eq!(
        t.check(&batch_infos(&marker(1, 2, COMMIT_V2))),
        SequenceCheck::Append
    );
    // Version 1: a marker at the producer's epoch is its transaction's own.
    let mut t = live(&[data(1, 0, 0, 1, true)]);
    assert_eq!(
        t.check(&batch_infos(&marker(1, 0, COMMIT))),
        SequenceCheck::Append
    );
}

/// A restart rebuilding the table from the log refuses the same markers as the live replica.
#[test]
fn replaying_the_log_refuses_the_same_stale_markers() {
    use crate::replication::raft_storage::{records_entry, scratch_store};
    let dir = tempfile::tempdir().unwrap();
    let store = scratch_store(dir.path());
    let payloads = stale_marker_log();
    for (i, p) in payloads.iter().enumerate() {
        store
            .write()
            .unwrap()
            .append(&[records_entry(i as u64 + 1, p.clone())])
            .unwrap();
    }
    for upto in [4, payloads.len()] {
        let replayed = rebuild_producers(&store, upto as u64);
        let want = live(&payloads[..upto]);
        assert_eq!(
            replayed.transactions(),
            want.transactions(),
            "through {upto}"
        );
        assert_eq!(replayed.export(), want.export());
    }
}

/// Version 1: producer 1's transaction 1 was marked by one leader (offset 2); a second copy of
/// that decision's marker, bounded by the high watermark its writer read (2), lands after
/// transaction 2's first batch (offset 3) and ends nothing, on apply and at the leader.
#[test]
fn a_bounded_marker_ends_no_transaction_opened_at_or_above_its_bound() {
    let bounded = |m: TxnMarker| TxnMarker {
        opened_below: Some(2),
        ..m
    };
    let log = vec![
        data(1, 0, 0, 2, true),        // 0..2: transaction 1
        marker(1, 0, bounded(COMMIT)), // 2: its marker, within the bound
        data(1, 0, 2, 1, true),        // 3: transaction 2 opens
        marker(1, 0, bounded(ABORT)),  // 4: the second copy
        marker(1, 0, COMMIT),          // 5: transaction 2's own marker
    ];
    let t = live(&log[..2]);
    assert!(
        t.transactions().open().is_empty(),
        "the bound let it end transaction 1"
    );
    let t = live(&log[..4]);
    assert_eq!(t.transactions().open(), vec![(1, 3)]);
    assert!(t.transactions().aborted().is_empty());
    assert_eq!(t.refused_markers(), 1);
    assert!(live(&log).transactions().open().is_empty());
    // The leader: refused when transaction 2 is committed, or only on its way.
    let mut t = live(&log[..3]);
    assert_eq!(
        t.check(&batch_infos(&log[3])),
        SequenceCheck::Reject(SequenceError::InvalidEpoch)
    );
    let mut t = live(&log[..2]);
    assert_eq!(
        t.check(&batch_infos(&log[3])),
        SequenceCheck::Append,
        "nothing open: a retry"
    );
    assert_eq!(t.check(&batch_infos(&log[2])), SequenceCheck::Append);
    assert_eq!(
        t.check(&batch_infos(&log[3])),
        SequenceCheck::Reject(SequenceError::InvalidEpoch)
    );
}
