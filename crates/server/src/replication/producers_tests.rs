//! The producer table's unit tests: sequences, epochs, duplicates, undo and export (the
//! transaction tests are in producers_txn_tests.rs).

use super::*;

/// A plain batch of `count` records of producer `pid` at `epoch`, sequences from `first`.
pub(crate) fn b(pid: i64, epoch: i16, first: i32, count: i32) -> BatchInfo {
    BatchInfo {
        producer_id: pid,
        epoch,
        first_seq: first,
        last_seq: first.wrapping_add(count - 1),
        span: count as u32,
        transactional: false,
        control: false,
        marker: None,
    }
}

/// A compacted entry read from a store: its batches (idempotent or not) are placed at the
/// base offsets they carry, across the gaps compaction left, not counted from the first.
#[test]
fn stored_batches_are_placed_at_their_own_offsets() {
    use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};
    let mk = |base: i64, pid: Option<(i64, i32)>, n: usize| {
        let recs: Vec<NewRecord> = (0..n).map(|_| NewRecord::new(1, "v")).collect();
        let mut builder = RecordBatchBuilder::new(Compression::None).base_offset(base);
        if let Some((id, seq)) = pid {
            builder = builder.producer(id, 0, seq);
        }
        builder.with_records(&recs).unwrap().build().unwrap()
    };
    let data: Bytes = [
        mk(40, Some((7, 10)), 2),
        mk(45, None, 1),
        mk(50, Some((7, 12)), 3),
    ]
    .concat()
    .into();
    let placed = placed_batch_infos(&data);
    assert_eq!(
        placed
            .iter()
            .map(|(o, i)| (*o, i.first_seq, i.last_seq))
            .collect::<Vec<_>>(),
        vec![(40, 10, 11), (50, 12, 14)]
    );
    let mut t = ProducerTable::default();
    t.on_committed_placed_at(3, &placed);
    assert_eq!(t.applied_through(), 3);
    let (_, producers) = t.export();
    assert_eq!(producers[0].batches, vec![(10, 11, 40), (12, 14, 50)]);
    // The same entry again (a snapshot covered it) changes nothing.
    t.on_committed_placed_at(3, &placed[..1]);
    assert_eq!(t.export().1[0].batches.len(), 2);
}

/// Item 9 of the lifecycle issue: a new leader holds an earlier term's batch that is not
/// applied yet; a client's retry of it must not be taken for the next batch.
#[test]
fn a_new_leaders_unapplied_batches_are_in_flight() {
    let mut t = ProducerTable::default();
    t.on_committed(&[b(7, 0, 0, 5)], 0);
    // Without marking, the retry of seq 5..9 would look like the next batch: appended twice.
    assert_eq!(t.check(&[b(7, 0, 5, 5)]), SequenceCheck::Append);
    t.clear_pending();
    t.mark_pending(&[b(7, 0, 5, 5)]);
    assert_eq!(
        t.check(&[b(7, 0, 5, 5)]),
        SequenceCheck::Reject(SequenceError::DuplicateInFlight)
    );
    // The next batch is still accepted behind it, and once it commits the retry gets its
    // offset.
    assert_eq!(t.check(&[b(7, 0, 10, 5)]), SequenceCheck::Append);
    t.on_committed(&[b(7, 0, 5, 5)], 5);
    assert_eq!(
        t.check(&[b(7, 0, 5, 5)]),
        SequenceCheck::Duplicate { base_offset: 5 }
    );
}

#[test]
fn sequences_duplicates_and_epochs() {
    let mut t = ProducerTable::default();
    assert_eq!(t.check(&[b(7, 0, 0, 5)]), SequenceCheck::Append);
    // Pipelined: the next batch before the first commits.
    assert_eq!(t.check(&[b(7, 0, 5, 5)]), SequenceCheck::Append);
    // A gap is out of order; a retry of an in-flight batch is refused as retriable.
    assert_eq!(
        t.check(&[b(7, 0, 20, 1)]),
        SequenceCheck::Reject(SequenceError::OutOfOrder)
    );
    assert_eq!(
        t.check(&[b(7, 0, 5, 5)]),
        SequenceCheck::Reject(SequenceError::DuplicateInFlight)
    );
    t.on_committed(&[b(7, 0, 0, 5)], 100);
    t.on_committed(&[b(7, 0, 5, 5)], 105);
    // A retry of a committed batch gets its original offset.
    assert_eq!(
        t.check(&[b(7, 0, 0, 5)]),
        SequenceCheck::Duplicate { base_offset: 100 }
    );
    assert_eq!(
        t.check(&[b(7, 0, 5, 5)]),
        SequenceCheck::Duplicate { base_offset: 105 }
    );
    assert_eq!(t.check(&[b(7, 0, 10, 1)]), SequenceCheck::Append);
    // A new epoch restarts at 0; an old epoch is fenced.
    t.clear_pending();
    assert_eq!(
        t.check(&[b(7, 1, 3, 1)]),
        SequenceCheck::Reject(SequenceError::OutOfOrder)
    );
    assert_eq!(t.check(&[b(7, 1, 0, 1)]), SequenceCheck::Append);
    t.on_committed(&[b(7, 1, 0, 1)], 111);
    assert_eq!(
        t.check(&[b(7, 0, 11, 1)]),
        SequenceCheck::Reject(SequenceError::InvalidEpoch)
    );
    // Unknown producers are accepted (new, or expired state).
    assert_eq!(t.check(&[b(9, 0, 42, 1)]), SequenceCheck::Append);
}

/// Batches checked but then not appended (raft-rs dropped the proposal) are forgotten: the
/// retry of the first continues the sequence, and what was pending before is pending again.
#[test]
fn rolled_back_batches_are_not_pending() {
    let mut t = ProducerTable::default();
    t.on_committed(&[b(7, 0, 0, 5)], 0);
    t.start_undo();
    assert_eq!(t.check(&[b(7, 0, 5, 5)]), SequenceCheck::Append);
    let mark = t.undo_mark();
    assert_eq!(t.check(&[b(7, 0, 10, 5)]), SequenceCheck::Append);
    assert_eq!(t.check(&[b(8, 0, 0, 1)]), SequenceCheck::Append);
    assert_eq!(t.check(&[b(7, 0, 15, 5)]), SequenceCheck::Append);
    t.roll_back_to(mark);
    // 5..9 is still in flight; 10..14 (dropped) is the next batch again, not out of order.
    assert_eq!(
        t.check(&[b(7, 0, 5, 5)]),
        SequenceCheck::Reject(SequenceError::DuplicateInFlight)
    );
    t.start_undo();
    assert_eq!(t.check(&[b(7, 0, 10, 5)]), SequenceCheck::Append);
    t.roll_back_to(0);
    t.roll_back_to(0);
    // Producer 8 was unknown before: its dropped batch left nothing behind.
    assert!(!t.pending.contains_key(&8));
    assert_eq!(
        t.pending
            .get(&7)
            .map(|q| q.iter().copied().collect::<Vec<_>>()),
        Some(vec![(0, 5, 9)])
    );
}

/// A client retries from its oldest unanswered batch: a retry of any batch in flight (on
/// the leader that proposed it, or held unapplied by a new leader) is refused as in flight,
/// not as out of order (fatal for librdkafka), and once it commits it gets its offset.
#[test]
fn a_retry_of_an_older_in_flight_batch_is_in_flight() {
    let mut t = ProducerTable::default();
    t.on_committed(&[b(7, 0, 0, 5)], 0);
    assert_eq!(t.check(&[b(7, 0, 5, 5)]), SequenceCheck::Append);
    assert_eq!(t.check(&[b(7, 0, 10, 5)]), SequenceCheck::Append);
    assert_eq!(
        t.check(&[b(7, 0, 5, 5)]),
        SequenceCheck::Reject(SequenceError::DuplicateInFlight)
    );
    // A new leader holding both unapplied.
    t.clear_pending();
    t.mark_pending(&[b(7, 0, 5, 5), b(7, 0, 10, 5)]);
    assert_eq!(
        t.check(&[b(7, 0, 5, 5)]),
        SequenceCheck::Reject(SequenceError::DuplicateInFlight)
    );
    assert_eq!(t.check(&[b(7, 0, 15, 1)]), SequenceCheck::Append);
    t.on_committed(&[b(7, 0, 5, 5)], 5);
    assert_eq!(
        t.check(&[b(7, 0, 5, 5)]),
        SequenceCheck::Duplicate { base_offset: 5 }
    );
    assert_eq!(
        t.check(&[b(7, 0, 10, 5)]),
        SequenceCheck::Reject(SequenceError::DuplicateInFlight)
    );
    t.on_committed(&[b(7, 0, 10, 5), b(7, 0, 15, 1)], 10);
    assert!(t.pending.is_empty());
}

#[test]
fn sequence_numbers_wrap() {
    let mut t = ProducerTable::default();
    t.on_committed(&[b(1, 0, i32::MAX - 1, 2)], 0);
    assert_eq!(t.check(&[b(1, 0, 0, 1)]), SequenceCheck::Append);
}
