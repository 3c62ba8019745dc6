//! What a read_committed consumer keeps of a Fetch answer, as Kafka's clients decide it: the
//! broker sends everything below the last stable offset, aborted data included, with the list
//! of aborted transactions (producer id, first offset) overlapping it. Walking the batches in
//! offset order, a transaction becomes aborted once a batch at or past its first offset is
//! reached, and stays so until its producer's ABORT marker; a transactional batch of an aborted
//! producer is dropped; control batches (the markers) are never records.

use std::collections::HashSet;

use bytes::Bytes;
use kafka_proto::records::{split_batches_lenient, RecordBatch};

use super::history::Read;
use super::run::{RunError, MAX_DECOMPRESSED};
use crate::client::txn::AbortedTxn;

/// The control record type of an ABORT marker (its key: version int16, type int16).
const ABORT_MARKER: i16 = 0;

/// The records a read_committed consumer returns from one Fetch answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// Records at or after the fetch offset that are not aborted, in offset order.
    pub reads: Vec<Read>,
    /// The offset after the last complete batch (control and aborted batches included): where
    /// the next Fetch starts. None when the answer held no complete batch.
    pub next_offset: Option<i64>,
}

/// Keeps the committed records at or after `from` of `data` (the batches of one Fetch answer
/// for `partition`), given the answer's aborted transactions.
pub fn committed_records(
    data: Bytes,
    aborted: &[AbortedTxn],
    partition: i32,
    from: i64,
) -> Result<Committed, RunError> {
    let corrupt = |source| RunError::Corrupt { partition, source };
    let mut pending: Vec<AbortedTxn> = aborted.to_vec();
    pending.sort_by_key(|a| std::cmp::Reverse(a.first_offset));
    let mut aborting: HashSet<i64> = HashSet::new();
    let mut out = Committed::default();
    for batch in split_batches_lenient(data) {
        let batch = batch.map_err(corrupt)?;
        batch.validate().map_err(corrupt)?;
        out.next_offset = Some(out.next_offset.unwrap_or(i64::MIN).max(batch.next_offset()));
        if batch.has_producer_id() {
            while pending
                .last()
                .is_some_and(|a| a.first_offset <= batch.last_offset())
            {
                let a = pending.pop().expect("checked above");
                aborting.insert(a.producer_id);
            }
            if batch.is_control() {
                if is_abort_marker(&batch).map_err(corrupt)? {
                    aborting.remove(&batch.producer_id());
                }
                continue;
            }
            if batch.is_transactional() && aborting.contains(&batch.producer_id()) {
                continue;
            }
        }
        if batch.is_control() || batch.last_offset() < from {
            continue;
        }
        for r in batch.records_vec(MAX_DECOMPRESSED).map_err(corrupt)? {
            if r.offset < from {
                continue;
            }
            let value = r
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            out.reads.push(Read {
                partition,
                offset: r.offset,
                value,
            });
        }
    }
    Ok(out)
}

fn is_abort_marker(batch: &RecordBatch) -> Result<bool, kafka_proto::DecodeError> {
    let records = batch.records_vec(MAX_DECOMPRESSED)?;
    Ok(records
        .first()
        .and_then(|r| r.key.as_ref())
        .is_some_and(|k| k.len() >= 4 && i16::from_be_bytes([k[2], k[3]]) == ABORT_MARKER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_proto::records::{Compression, RecordBatchBuilder};

    fn data_batch(base: i64, pid: i64, values: &[&str], transactional: bool) -> Vec<u8> {
        let mut b = RecordBatchBuilder::new(Compression::None)
            .base_offset(base)
            .producer(pid, 0, 0)
            .transactional(transactional);
        for v in values {
            b.push(0, None, Some(&Bytes::copy_from_slice(v.as_bytes())), &[])
                .unwrap();
        }
        b.build().unwrap().to_vec()
    }

    fn marker(offset: i64, pid: i64, commit: bool) -> Vec<u8> {
        let mut b = RecordBatchBuilder::new(Compression::None)
            .base_offset(offset)
            .producer(pid, 0, -1)
            .transactional(true)
            .control(true);
        let key = Bytes::from(vec![0, 0, 0, u8::from(commit)]);
        let value = Bytes::from_static(&[0, 0, 0, 0, 0, 0]);
        b.push(0, Some(&key), Some(&value), &[]).unwrap();
        b.build().unwrap().to_vec()
    }

    fn values(c: &Committed) -> Vec<&str> {
        c.reads.iter().map(|r| r.value.as_str()).collect()
    }

    #[test]
    fn aborted_batches_and_markers_are_dropped() {
        // Producer 7 aborts (offsets 0-1, marker 3), producer 8 commits (2, marker 4), then a
        // plain record and producer 7's next transaction (6), committed at 7.
        let data = [
            data_batch(0, 7, &["a0", "a1"], true),
            data_batch(2, 8, &["c0"], true),
            marker(3, 7, false),
            marker(4, 8, true),
            data_batch(5, -1, &["plain"], false),
            data_batch(6, 7, &["a-next"], true),
            marker(7, 7, true),
        ]
        .concat();
        let aborted = [AbortedTxn {
            producer_id: 7,
            first_offset: 0,
        }];
        let c = committed_records(Bytes::from(data.clone()), &aborted, 0, 0).unwrap();
        assert_eq!(values(&c), vec!["c0", "plain", "a-next"]);
        assert_eq!(c.next_offset, Some(8));
        // Without the list everything but the markers is returned (read_uncommitted's view).
        let c = committed_records(Bytes::from(data.clone()), &[], 0, 0).unwrap();
        assert_eq!(values(&c), vec!["a0", "a1", "c0", "plain", "a-next"]);
        // From an offset inside the data: earlier batches still drive the aborted set.
        let c = committed_records(Bytes::from(data), &aborted, 0, 1).unwrap();
        assert_eq!(values(&c), vec!["c0", "plain", "a-next"]);
    }

    #[test]
    fn an_aborted_transaction_starting_later_drops_only_its_batches() {
        let data = [
            data_batch(0, 7, &["ok"], true),
            marker(1, 7, true),
            data_batch(2, 7, &["bad"], true),
            marker(3, 7, false),
        ]
        .concat();
        let aborted = [AbortedTxn {
            producer_id: 7,
            first_offset: 2,
        }];
        let c = committed_records(Bytes::from(data), &aborted, 0, 0).unwrap();
        assert_eq!(values(&c), vec!["ok"]);
        assert_eq!(c.next_offset, Some(4));
    }

    #[test]
    fn only_control_batches_still_move_the_next_offset() {
        let c = committed_records(Bytes::from(marker(9, 7, true)), &[], 0, 9).unwrap();
        assert!(c.reads.is_empty());
        assert_eq!(c.next_offset, Some(10));
        let c = committed_records(Bytes::new(), &[], 0, 9).unwrap();
        assert_eq!(c.next_offset, None);
    }
}
