//! Transactions, the partition side: which producers have a transaction open in this partition,
//! which transactions were aborted, and the last stable offset (KIP-98).
//!
//! Derived from the committed log on every replica, as the producer table it belongs to (see
//! [`super::producers`]):
//! - a producer's first committed transactional batch (attributes bit 4) opens its transaction
//!   at that batch's base offset; later transactional batches of the same producer leave it;
//! - a committed control batch (attributes bit 5, one record: key = version i16 0 | type i16,
//!   0 ABORT or 1 COMMIT; value = version i16 0 | coordinator epoch i32) from that producer
//!   closes it, if its producer epoch passes [`marker_epoch_allowed`]; an ABORT also records
//!   the aborted transaction (producer id, first offset, last offset = the marker's own
//!   offset), which read_committed consumers are sent to drop the producer's records between
//!   the two.
//!
//! The marker's transaction version (KIP-890, KIP-1228) is carried in its control record, as
//! the header [`TXN_VERSION_HEADER`] (one byte; absent: version 0 or 1, as in every marker
//! written before it and by WriteTxnMarkers v0 and v1). Kafka's format has headers on every
//! record and its clients never read a control record's headers, so the batch stays a valid
//! Kafka control batch. It is in the log, so every replica, and a restart replaying the log,
//! applies the same epoch rule to the same marker.
//!
//! The last stable offset is the first offset of the oldest open transaction, or the high
//! watermark when none is open: a read_committed Fetch returns nothing at or above it.
//!
//! Memory: an open transaction costs two map entries (about 60 bytes); an aborted one 24 bytes
//! in the list. The list holds every abort still in the log: it is trimmed as the log start
//! offset rises (retention, DeleteRecords), so it is bounded by the aborts the retained log
//! holds (a million aborts in the retained log cost 24 MB, and as much in the snapshot file).
//! It has no cap of its own: forgetting an abort still in the log would show its records to
//! read_committed consumers. Kafka keeps the same list on disk (its `.txnindex` files).
//!
//! The log cleaner (compacted topics) removes aborted transactions' data, and later their
//! markers (`logstore::compaction`). The list is not trimmed for what it removed: an entry
//! whose data is gone is harmless while its ABORT marker is in the log (the consumer stops
//! dropping the producer's records at the marker), and a Fetch does not send one whose marker
//! lies inside the read but is gone ([`without_removed_markers`]), so a consumer never drops
//! the producer's later committed records. Rebuilding from a cleaned log is sound: a marker
//! without data before it changes nothing ([`Transactions::on_marker`]), a transaction whose
//! data and marker are both gone never opens, and the cleaner removes a marker only in
//! entries the saved state covers (`producer_snapshot::saved_applied_through`), so the saved
//! state a restart loads never holds open a transaction whose marker is gone.

use std::collections::{BTreeSet, HashMap, VecDeque};

use bytes::Bytes;
use kafka_proto::records::{NewRecord, RecordBatch};

/// A transaction marker (the one control record of a control batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarker {
    /// COMMIT (true) or ABORT (false).
    pub commit: bool,
    /// The epoch of the transaction coordinator that wrote it.
    pub coordinator_epoch: i32,
    /// The transaction version the transaction was decided under: 0 or 1 (the marker carries
    /// the epoch of the transaction's batches), 2 (KIP-890: it carries the epoch the decision
    /// bumped to, above every batch of the transaction). Decides the epoch rule
    /// ([`marker_epoch_allowed`]).
    pub transaction_version: i8,
    /// When set, the marker ends only a transaction that opened below this offset (see
    /// [`marker_fence_allows`]); vdl's marker writer sets the partition's high watermark read
    /// before it last read the decision. Carried in the header [`OPENED_BELOW_HEADER`].
    pub opened_below: Option<u64>,
}

/// The header of a marker's control record holding [`TxnMarker::opened_below`] (eight bytes,
/// big-endian), when set.
pub const OPENED_BELOW_HEADER: &[u8] = b"vdl.transaction.opened-below";

/// Whether a marker that ends only transactions opened below `opened_below` (None: any) may
/// end the producer's transaction at a partition where it is open from `open_first` (None:
/// no committed batch of it is open) with `data_ahead` (the leader's check: a batch of the
/// producer ahead of the marker in the log, not committed yet, so at or above the high
/// watermark, which would open it there).
///
/// Why: under transaction version 1 a marker names only the producer id and epoch, which the
/// producer's consecutive transactions share. vdl's marker writer reads each partition's high
/// watermark (on a leader that has committed an entry of its term), then the decision. Every
/// batch of the decided transaction that was acknowledged before its EndTxn lies below that
/// watermark. A transaction whose first batch lies at or above it had not committed that
/// batch when the decision was read; it cannot be the decided transaction, and it is the
/// producer's next one (begun after the decided one completed): the marker, a second copy of
/// a decision another leader of the partition already marked, must not end it.
pub fn marker_fence_allows(
    opened_below: Option<u64>,
    open_first: Option<u64>,
    data_ahead: bool,
) -> bool {
    let Some(below) = opened_below else {
        return true;
    };
    match open_first {
        Some(first) => first < below,
        None => !data_ahead,
    }
}

/// The header of a marker's control record naming its transaction version (one byte), when
/// not 0.
pub const TXN_VERSION_HEADER: &[u8] = b"vdl.transaction.version";

/// Whether a marker of producer epoch `marker_epoch`, transaction version
/// `transaction_version`, may end the producer's transaction at a partition whose state for
/// the producer is `current_epoch` (None: the producer is unknown there) and `open` (it has a
/// transaction open there, or data of it still on the way). Kafka 4's rule
/// (`ProducerAppendInfo.checkProducerEpoch`, KIP-1228, KAFKA-19999): under version 2 the
/// marker's epoch must be above the producer's, or equal with nothing open (a retry of a
/// marker already written, which then changes nothing): a stale or delayed marker of an
/// earlier transaction, which carries the epoch the next transaction's batches use, can never
/// end that transaction. Under versions 0 and 1 it must not be below the producer's.
pub fn marker_epoch_allowed(
    marker_epoch: i16,
    transaction_version: i8,
    current_epoch: Option<i16>,
    open: bool,
) -> bool {
    let Some(current) = current_epoch else {
        return true;
    };
    if transaction_version >= 2 {
        marker_epoch > current || (marker_epoch == current && !open)
    } else {
        marker_epoch >= current
    }
}

/// Control record type of an ABORT marker.
const ABORT_TYPE: i16 = 0;
/// Control record type of a COMMIT marker.
const COMMIT_TYPE: i16 = 1;
/// Decompressed bytes read from a control batch (a marker is a few dozen bytes).
const MAX_CONTROL_BYTES: usize = 4096;

/// The marker a control batch carries; None when it is not a control batch, or its record is
/// not a transaction marker this version knows (Kafka ignores unknown control types too).
pub fn marker_of(batch: &RecordBatch) -> Option<TxnMarker> {
    if !batch.is_control() {
        return None;
    }
    let record = batch.records(MAX_CONTROL_BYTES).ok()?.next()?.ok()?;
    let key = record.key?;
    let value = record.value?;
    let (Some(k), Some(v)) = (key.get(..4), value.get(..6)) else {
        return None;
    };
    let key_version = i16::from_be_bytes([k[0], k[1]]);
    let kind = i16::from_be_bytes([k[2], k[3]]);
    if key_version != 0 {
        return None;
    }
    let coordinator_epoch = i32::from_be_bytes([v[2], v[3], v[4], v[5]]);
    let transaction_version = record
        .headers
        .iter()
        .find(|h| h.key.as_ref() == TXN_VERSION_HEADER)
        .and_then(|h| h.value.as_ref()?.first().copied())
        .map_or(0, |v| v as i8);
    let opened_below = record
        .headers
        .iter()
        .find(|h| h.key.as_ref() == OPENED_BELOW_HEADER)
        .and_then(|h| <[u8; 8]>::try_from(h.value.as_ref()?.as_ref()).ok())
        .map(u64::from_be_bytes);
    let commit = match kind {
        ABORT_TYPE => false,
        COMMIT_TYPE => true,
        _ => return None,
    };
    Some(TxnMarker {
        commit,
        coordinator_epoch,
        transaction_version,
        opened_below,
    })
}

/// A marker's control record, as Kafka lays it out ([`marker_record`]), stamped `timestamp_ms`,
/// with the [`TXN_VERSION_HEADER`] header when its transaction version is not 0 and the
/// [`OPENED_BELOW_HEADER`] header when it has a bound.
pub fn marker_control_record(marker: TxnMarker, timestamp_ms: i64) -> NewRecord {
    let (key, value) = marker_record(marker);
    let mut record = NewRecord::new(timestamp_ms, value.to_vec()).with_key(key.to_vec());
    if marker.transaction_version != 0 {
        record = record.with_header(
            TXN_VERSION_HEADER,
            Some(Bytes::copy_from_slice(&[marker.transaction_version as u8])),
        );
    }
    if let Some(below) = marker.opened_below {
        record = record.with_header(
            OPENED_BELOW_HEADER,
            Some(Bytes::copy_from_slice(&below.to_be_bytes())),
        );
    }
    record
}

/// The key and value of a marker's control record, in Kafka's layout.
pub fn marker_record(marker: TxnMarker) -> ([u8; 4], [u8; 6]) {
    let kind = if marker.commit {
        COMMIT_TYPE
    } else {
        ABORT_TYPE
    };
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&kind.to_be_bytes());
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&marker.coordinator_epoch.to_be_bytes());
    (key, value)
}

/// One aborted transaction: read_committed consumers drop the producer's records from
/// `first_offset` up to the marker at `last_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer.
    pub producer_id: i64,
    /// Offset of its first record in the transaction.
    pub first_offset: u64,
    /// Offset of the ABORT marker.
    pub last_offset: u64,
}

/// A partition's open and aborted transactions (see the module docs). Two are equal when they
/// hold the same open and aborted transactions (however often their lists changed).
#[derive(Debug, Clone, Default)]
pub struct Transactions {
    /// Producer id to the first offset of its open transaction.
    open: HashMap<i64, u64>,
    /// The same, ordered by first offset, for the last stable offset.
    open_by_offset: BTreeSet<(u64, i64)>,
    /// Aborted transactions in marker order (ascending `last_offset`).
    aborted: VecDeque<AbortedTxn>,
    /// Bumped whenever `aborted` changes (so the group republishes it only then).
    aborted_version: u64,
}

impl PartialEq for Transactions {
    fn eq(&self, other: &Transactions) -> bool {
        self.open == other.open && self.aborted == other.aborted
    }
}

impl Eq for Transactions {}

impl Transactions {
    /// A producer's transactional batch committed at `base_offset`: opens its transaction
    /// there unless one is open.
    pub fn on_transactional_batch(&mut self, producer_id: i64, base_offset: u64) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.open.entry(producer_id) {
            e.insert(base_offset);
            self.open_by_offset.insert((base_offset, producer_id));
        }
    }

    /// A producer's marker committed at `offset`: closes its open transaction (an ABORT is
    /// recorded). A marker without an open transaction (the coordinator retrying one that
    /// committed, or a transaction with no data here) changes nothing.
    pub fn on_marker(&mut self, producer_id: i64, marker: TxnMarker, offset: u64) {
        let Some(first_offset) = self.open.remove(&producer_id) else {
            return;
        };
        self.open_by_offset.remove(&(first_offset, producer_id));
        if !marker.commit {
            self.aborted.push_back(AbortedTxn {
                producer_id,
                first_offset,
                last_offset: offset,
            });
            self.aborted_version += 1;
        }
    }

    /// The first offset of the producer's open transaction, if one is open.
    pub fn open_first_offset(&self, producer_id: i64) -> Option<u64> {
        self.open.get(&producer_id).copied()
    }

    /// The last stable offset given the high watermark: the first offset of the oldest open
    /// transaction when that is lower.
    pub fn last_stable_offset(&self, high_watermark: u64) -> u64 {
        self.open_by_offset
            .first()
            .map_or(high_watermark, |(first, _)| (*first).min(high_watermark))
    }

    /// Forgets aborted transactions that end below `log_start_offset` (none of their records
    /// can be read any more).
    pub fn trim_below(&mut self, log_start_offset: u64) {
        let before = self.aborted.len();
        while self
            .aborted
            .front()
            .is_some_and(|a| a.last_offset < log_start_offset)
        {
            self.aborted.pop_front();
        }
        if self.aborted.len() != before {
            self.aborted_version += 1;
        }
    }

    /// Changes whenever the aborted list does.
    pub fn aborted_version(&self) -> u64 {
        self.aborted_version
    }

    /// The aborted transactions, oldest marker first.
    pub fn aborted(&self) -> &VecDeque<AbortedTxn> {
        &self.aborted
    }

    /// The open transactions (producer id, first offset), by producer id.
    pub fn open(&self) -> Vec<(i64, u64)> {
        let mut v: Vec<(i64, u64)> = self.open.iter().map(|(p, o)| (*p, *o)).collect();
        v.sort_unstable();
        v
    }

    /// State loaded from a snapshot: the open transactions and the aborted list (kept in
    /// marker order).
    pub fn import(open: Vec<(i64, u64)>, mut aborted: Vec<AbortedTxn>) -> Transactions {
        let mut t = Transactions::default();
        for (producer_id, first) in open {
            t.on_transactional_batch(producer_id, first);
        }
        aborted.sort_by_key(|a| a.last_offset);
        t.aborted = aborted.into();
        t
    }
}

/// Drops from `overlapping` (aborted transactions a read sends) those whose ABORT marker
/// offset lies in `[from, to)`, the offsets of the read's batches `chunks`, but which hold no
/// control batch of the producer at that offset: the cleaner removed the marker (after every
/// batch of the transaction). Sent without its marker, such a range would make a
/// read_committed consumer (which stops dropping a producer's records at its ABORT marker)
/// drop the producer's later committed records. The others are kept: a marker past the read
/// is checked by the read that reaches it (consumers apply a Fetch's list to that response
/// only). Bounds-checked: a chunk's bytes that do not hold whole batch headers end its walk.
pub fn without_removed_markers(
    overlapping: Vec<AbortedTxn>,
    chunks: &[bytes::Bytes],
    from: u64,
    to: u64,
) -> Vec<AbortedTxn> {
    let inside = |a: &AbortedTxn| a.last_offset >= from && a.last_offset < to;
    if !overlapping.iter().any(inside) {
        return overlapping;
    }
    // (base offset, producer id) of every control batch read.
    let mut controls: Vec<(u64, i64)> = Vec::new();
    for chunk in chunks {
        let mut pos = 0usize;
        while let Some(header) = chunk.get(pos..pos + 61) {
            let base = i64::from_be_bytes(header[0..8].try_into().unwrap_or_default());
            let len = i32::from_be_bytes(header[8..12].try_into().unwrap_or_default());
            let Ok(len) = usize::try_from(len) else {
                break;
            };
            if header[22] & 0x20 != 0 {
                let producer = i64::from_be_bytes(header[43..51].try_into().unwrap_or_default());
                if let Ok(base) = u64::try_from(base) {
                    controls.push((base, producer));
                }
            }
            pos = pos.saturating_add(12).saturating_add(len);
        }
    }
    overlapping
        .into_iter()
        .filter(|a| !inside(a) || controls.contains(&(a.last_offset, a.producer_id)))
        .collect()
}

/// The aborted transactions a read of `[from, to)` must carry (Kafka's rule): those whose
/// marker is at or after `from` and whose first offset is before `to`.
pub fn aborted_overlapping(aborted: &[AbortedTxn], from: u64, to: u64) -> Vec<AbortedTxn> {
    let start = aborted.partition_point(|a| a.last_offset < from);
    aborted[start..]
        .iter()
        .filter(|a| a.first_offset < to)
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};

    const COMMIT: TxnMarker = TxnMarker {
        commit: true,
        coordinator_epoch: 3,
        transaction_version: 0,
        opened_below: None,
    };
    const ABORT: TxnMarker = TxnMarker {
        commit: false,
        coordinator_epoch: 3,
        transaction_version: 0,
        opened_below: None,
    };

    #[test]
    fn a_control_batch_holds_the_marker_kafka_writes() {
        for m in [COMMIT, ABORT] {
            let (key, value) = marker_record(m);
            let batch = RecordBatchBuilder::new(Compression::None)
                .producer(9, 1, -1)
                .transactional(true)
                .control(true)
                .with_records(&[NewRecord::new(0, value.to_vec()).with_key(key.to_vec())])
                .unwrap()
                .build()
                .unwrap();
            let batch = RecordBatch::new(batch).unwrap();
            assert_eq!(marker_of(&batch), Some(m));
        }
        // Kafka's COMMIT key and value bytes.
        assert_eq!(marker_record(COMMIT).0, [0, 0, 0, 1]);
        assert_eq!(marker_record(COMMIT).1, [0, 0, 0, 0, 0, 3]);
        // A data batch, or a control record of an unknown type, is no marker.
        let data = RecordBatchBuilder::new(Compression::None)
            .with_records(&[NewRecord::new(0, &b"v"[..]).with_key(&b"\0\0\0\x01"[..])])
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(marker_of(&RecordBatch::new(data).unwrap()), None);
        let unknown = RecordBatchBuilder::new(Compression::None)
            .control(true)
            .with_records(&[NewRecord::new(0, &b"\0\0\0\0\0\0"[..]).with_key(&b"\0\0\0\x05"[..])])
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(marker_of(&RecordBatch::new(unknown).unwrap()), None);
    }

    /// A marker's transaction version travels in its control record: a version-2 marker reads
    /// back as one, a marker without the header (every marker written before it) as version 0.
    #[test]
    fn a_marker_carries_its_transaction_version() {
        let built = |m: TxnMarker| {
            let batch = RecordBatchBuilder::new(Compression::None)
                .producer(9, 1, -1)
                .transactional(true)
                .control(true)
                .with_records(&[marker_control_record(m, 0)])
                .unwrap()
                .build()
                .unwrap();
            marker_of(&RecordBatch::new(batch).unwrap())
        };
        let v2 = TxnMarker {
            transaction_version: 2,
            ..COMMIT
        };
        assert_eq!(built(v2), Some(v2));
        let bounded = TxnMarker {
            opened_below: Some(1 << 40),
            ..v2
        };
        assert_eq!(built(bounded), Some(bounded));
        assert_eq!(built(ABORT), Some(ABORT));
        assert!(marker_control_record(ABORT, 0).headers.is_empty());
    }

    /// Kafka 4's epoch rule for markers: version 2 needs an epoch above the producer's (equal
    /// only as a retry with nothing open); versions 0 and 1 one not below it; an unknown
    /// producer takes any.
    #[test]
    fn the_epoch_rule_for_markers() {
        for version in [0, 1] {
            assert!(marker_epoch_allowed(3, version, Some(3), true));
            assert!(marker_epoch_allowed(4, version, Some(3), true));
            assert!(!marker_epoch_allowed(2, version, Some(3), false));
        }
        assert!(marker_epoch_allowed(4, 2, Some(3), true));
        assert!(!marker_epoch_allowed(3, 2, Some(3), true), "a stale marker");
        assert!(marker_epoch_allowed(3, 2, Some(3), false), "a retry");
        assert!(!marker_epoch_allowed(2, 2, Some(3), false));
        assert!(marker_epoch_allowed(0, 2, None, true));
    }

    /// A bounded marker ends a transaction opened below its bound only; at the leader, data of
    /// the producer on its way (it would open one at or above the high watermark) counts.
    #[test]
    fn the_bound_of_a_marker() {
        assert!(marker_fence_allows(None, Some(50), true));
        assert!(marker_fence_allows(Some(10), Some(9), true));
        assert!(!marker_fence_allows(Some(10), Some(10), false));
        assert!(
            marker_fence_allows(Some(10), None, false),
            "nothing open: a no-op"
        );
        assert!(!marker_fence_allows(Some(10), None, true));
    }

    #[test]
    fn open_commit_abort_and_the_last_stable_offset() {
        let mut t = Transactions::default();
        assert_eq!(t.last_stable_offset(10), 10);
        t.on_transactional_batch(1, 10);
        t.on_transactional_batch(2, 12);
        t.on_transactional_batch(1, 14); // still the transaction opened at 10
        assert_eq!(t.last_stable_offset(20), 10);
        assert_eq!(t.last_stable_offset(5), 5);
        t.on_marker(1, COMMIT, 20);
        assert_eq!(t.last_stable_offset(21), 12);
        assert!(t.aborted().is_empty());
        t.on_marker(2, ABORT, 21);
        assert_eq!(t.last_stable_offset(22), 22);
        assert_eq!(
            t.aborted().iter().copied().collect::<Vec<_>>(),
            vec![AbortedTxn {
                producer_id: 2,
                first_offset: 12,
                last_offset: 21
            }]
        );
        // A marker retried after the transaction closed changes nothing.
        let version = t.aborted_version();
        t.on_marker(2, ABORT, 22);
        assert_eq!(t.aborted().len(), 1);
        assert_eq!(t.aborted_version(), version);
        // A new transaction of producer 1.
        t.on_transactional_batch(1, 23);
        assert_eq!(t.open(), vec![(1, 23)]);
        // Trimmed once the log start passes the marker, not before.
        t.trim_below(21);
        assert_eq!(t.aborted().len(), 1);
        t.trim_below(22);
        assert!(t.aborted().is_empty());
        assert_ne!(t.aborted_version(), version);
    }

    #[test]
    fn a_read_carries_the_aborts_it_overlaps() {
        let a = |p, f, l| AbortedTxn {
            producer_id: p,
            first_offset: f,
            last_offset: l,
        };
        let list = [a(1, 0, 5), a(2, 3, 9), a(3, 12, 15)];
        assert_eq!(aborted_overlapping(&list, 0, 100), list.to_vec());
        assert_eq!(aborted_overlapping(&list, 6, 12), vec![a(2, 3, 9)]);
        assert_eq!(
            aborted_overlapping(&list, 6, 13),
            vec![a(2, 3, 9), a(3, 12, 15)]
        );
        assert!(aborted_overlapping(&list, 16, 30).is_empty());
    }

    #[test]
    fn an_abort_whose_marker_is_not_in_the_read_is_not_sent() {
        use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};
        let a = |p, f, l| AbortedTxn {
            producer_id: p,
            first_offset: f,
            last_offset: l,
        };
        let control = |p: i64, at: i64| {
            let (key, value) = marker_record(ABORT);
            RecordBatchBuilder::new(Compression::None)
                .base_offset(at)
                .producer(p, 0, -1)
                .transactional(true)
                .control(true)
                .with_records(&[NewRecord::new(0, value.to_vec()).with_key(key.to_vec())])
                .unwrap()
                .build()
                .unwrap()
        };
        let data = |at: i64| {
            RecordBatchBuilder::new(Compression::None)
                .base_offset(at)
                .with_records(&[NewRecord::new(0, &b"v"[..]).with_key(&b"k"[..])])
                .unwrap()
                .build()
                .unwrap()
        };
        // Read 10..20: producer 1's marker at 12 is there, producer 2's at 15 was removed
        // (a gap), producer 3's at 25 lies past the read.
        let mut chunk = data(10).to_vec();
        chunk.extend_from_slice(&control(1, 12));
        let chunks = vec![bytes::Bytes::from(chunk), data(16), control(2, 19)];
        let overlapping = vec![a(1, 5, 12), a(2, 8, 15), a(3, 11, 25)];
        assert_eq!(
            without_removed_markers(overlapping.clone(), &chunks, 10, 20),
            vec![a(1, 5, 12), a(3, 11, 25)]
        );
        // Another producer's control batch at the offset does not count.
        let overlapping = vec![a(4, 8, 19)];
        assert!(without_removed_markers(overlapping, &chunks, 10, 20).is_empty());
        // Nothing inside the read: the list as it was; damaged bytes end the walk.
        let overlapping = vec![a(3, 11, 25)];
        assert_eq!(
            without_removed_markers(
                overlapping.clone(),
                &[bytes::Bytes::from_static(&[1, 2])],
                10,
                20
            ),
            overlapping
        );
    }
}
