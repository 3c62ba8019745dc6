//! [`KafkaRecordCompactor`]: the record level of log compaction over Kafka's v2 batches
//! (`kafka_proto::records::{visit_records, retain_records}`), every codec.

use bytes::Bytes;
use kafka_proto::records::batch::ATTRIBUTES_OFFSET;
use kafka_proto::records::{
    retain_records, set_control_delete_horizon, visit_records, RecordBatch, RecordKeyView,
    RetainOptions, Retained, NO_PRODUCER_ID, RECORD_BATCH_OVERHEAD,
};
use logstore::{RecordCompactor, RecordView, RetainOutcome, TxnBatch};

/// The default bound on the decompressed records of one batch (64 MiB, the store's default
/// largest entry; a produced batch that decompresses to more was accepted under a larger
/// `message.max.bytes` and is then refused by the cleaner, which fails the pass instead of
/// allocating without bound).
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

/// Reads and filters Kafka record batches for `logstore`'s compaction.
///
/// Promises: every batch is checked whole (magic 2, CRC-32C, record framing, offset deltas)
/// before any record is shown or removed; a batch that fails, or whose records decompress to
/// more than `max_decompressed` bytes, is an error string (the pass stops, nothing swapped).
/// Control batches (transaction markers) are kept byte for byte by [`RecordCompactor::retain`];
/// a marker is only given a delete horizon ([`RecordCompactor::mark_delete_horizon`]) or
/// removed whole, as the store decides (see `logstore::compaction`). A batch that keeps
/// every record (and needs no delete horizon) is `Unchanged`; one that keeps none is `Empty`;
/// otherwise it is rewritten with the same base offset, lastOffsetDelta, producer fields and
/// codec, its kept records byte for byte, and the delete horizon (KIP-534) set when it keeps
/// a tombstone. A batch that keeps no record is `Empty` (gone whole), except the last batch
/// of an idempotent producer (the store says which: `producer_last`), which becomes an empty
/// batch with its header (Kafka's `writeEmptyHeader`), so producer state survives
/// compaction while a producer's earlier batches do not pile up as 61-byte headers.
#[derive(Debug, Clone, Copy)]
pub struct KafkaRecordCompactor {
    max_decompressed: usize,
}

impl KafkaRecordCompactor {
    /// A compactor that refuses batches decompressing to more than `max_decompressed` bytes.
    pub fn new(max_decompressed: usize) -> KafkaRecordCompactor {
        KafkaRecordCompactor { max_decompressed }
    }
}

impl Default for KafkaRecordCompactor {
    /// Bounded by [`DEFAULT_MAX_DECOMPRESSED_BYTES`].
    fn default() -> KafkaRecordCompactor {
        KafkaRecordCompactor::new(DEFAULT_MAX_DECOMPRESSED_BYTES)
    }
}

/// The batch as `kafka-proto` reads it (a copy: the store lends a slice of its map).
fn parse(batch: &[u8]) -> Result<RecordBatch, String> {
    RecordBatch::new(Bytes::copy_from_slice(batch)).map_err(|e| format!("not a record batch: {e}"))
}

/// Where a v2 batch header holds the producer id (i64, big-endian).
const PRODUCER_ID_OFFSET: usize = 43;
/// The attributes bit of a control batch.
const CONTROL_BIT: u8 = 0x20;
/// The attributes bit of a transactional batch.
const TRANSACTIONAL_BIT: u8 = 0x10;
/// The attributes bit saying the base timestamp is the delete horizon (KIP-534).
const DELETE_HORIZON_BIT: u8 = 0x40;
/// Where a v2 batch header holds the base timestamp (i64, big-endian).
const BASE_TIMESTAMP_OFFSET: usize = 27;
/// Decompressed bytes read from a control batch (a marker is a few dozen bytes).
const MAX_CONTROL_BYTES: usize = 4096;

/// Whether the control batch's first record is a COMMIT or ABORT marker (key: version 0,
/// type 0 or 1), as Kafka's cleaner only removes those.
fn holds_marker(batch: &[u8]) -> bool {
    let Ok(parsed) = parse(batch) else {
        return false;
    };
    let Some(Ok(record)) = parsed
        .records(MAX_CONTROL_BYTES)
        .ok()
        .and_then(|mut r| r.next())
    else {
        return false;
    };
    let Some(key) = record.key.as_deref().and_then(|k| k.get(..4)) else {
        return false;
    };
    key[..2] == [0, 0] && (key[2..4] == [0, 0] || key[2..4] == [0, 1])
}

/// The store's view of one record. A negative offset cannot come from a valid stored batch
/// (the store wrote a non-negative base offset); it is mapped to 0 only to stay total, and
/// the store's own checks of the rewritten batch refuse what it would produce.
fn view<'a>(r: &RecordKeyView<'a>, control: bool) -> RecordView<'a> {
    RecordView {
        offset: u64::try_from(r.offset).unwrap_or(0),
        key: r.key,
        tombstone: r.is_tombstone(),
        timestamp_ms: r.timestamp,
        control,
    }
}

impl RecordCompactor for KafkaRecordCompactor {
    fn visit(&self, batch: &[u8], f: &mut dyn FnMut(RecordView<'_>)) -> Result<(), String> {
        let parsed = parse(batch)?;
        let control = parsed.is_control();
        visit_records(&parsed, self.max_decompressed, |r| f(view(&r, control)))
            .map_err(|e| format!("cannot read the batch: {e}"))
    }

    fn producer_id(&self, batch: &[u8]) -> Option<i64> {
        if batch.len() < RECORD_BATCH_OVERHEAD {
            return None;
        }
        // attributes is a big-endian i16: the control bit is in its low byte.
        if batch[ATTRIBUTES_OFFSET + 1] & CONTROL_BIT != 0 {
            return None;
        }
        let id = batch[PRODUCER_ID_OFFSET..PRODUCER_ID_OFFSET + 8]
            .try_into()
            .map(i64::from_be_bytes)
            .ok()?;
        (id != NO_PRODUCER_ID).then_some(id)
    }

    fn transaction_batch(&self, batch: &[u8]) -> Option<TxnBatch> {
        if batch.len() < RECORD_BATCH_OVERHEAD {
            return None;
        }
        let attributes = batch[ATTRIBUTES_OFFSET + 1];
        if attributes & TRANSACTIONAL_BIT == 0 {
            return None;
        }
        let be8 = |at: usize| batch[at..at + 8].try_into().ok().map(i64::from_be_bytes);
        let producer_id = be8(PRODUCER_ID_OFFSET)?;
        if producer_id == NO_PRODUCER_ID {
            return None;
        }
        if attributes & CONTROL_BIT == 0 {
            return Some(TxnBatch::Data { producer_id });
        }
        if !holds_marker(batch) {
            return None;
        }
        let delete_horizon_ms = if attributes & DELETE_HORIZON_BIT != 0 {
            Some(be8(BASE_TIMESTAMP_OFFSET)?)
        } else {
            None
        };
        Some(TxnBatch::Marker {
            producer_id,
            delete_horizon_ms,
        })
    }

    fn mark_delete_horizon(
        &self,
        batch: &[u8],
        delete_horizon_ms: i64,
    ) -> Result<RetainOutcome, String> {
        let parsed = parse(batch)?;
        let outcome = set_control_delete_horizon(&parsed, self.max_decompressed, delete_horizon_ms)
            .map_err(|e| e.to_string())?;
        Ok(match outcome {
            Retained::Rewritten(b) => RetainOutcome::Rewritten(b.as_bytes().to_vec()),
            Retained::Unchanged | Retained::Empty => RetainOutcome::Unchanged,
        })
    }

    fn retain(
        &self,
        batch: &[u8],
        keep: &mut dyn FnMut(RecordView<'_>) -> bool,
        delete_horizon_ms: Option<i64>,
        producer_last: bool,
    ) -> Result<RetainOutcome, String> {
        let parsed = parse(batch)?;
        if parsed.is_control() {
            // Checked whole like any other batch, then kept as it is.
            visit_records(&parsed, self.max_decompressed, |_| {})
                .map_err(|e| format!("cannot read the batch: {e}"))?;
            return Ok(RetainOutcome::Unchanged);
        }
        let options = RetainOptions {
            // A producer's last batch that keeps no record stays as an empty batch (its
            // header: producer id, epoch, sequences, offsets), so the producer table a replica
            // rebuilds from its log after a crash knows the producer's last sequence; its
            // earlier batches go whole (Kafka's rule).
            keep_empty: producer_last && parsed.has_producer_id(),
            delete_horizon_ms,
        };
        let outcome = retain_records(
            &parsed,
            self.max_decompressed,
            |r| keep(view(r, false)),
            options,
        )
        .map_err(|e| e.to_string())?;
        Ok(match outcome {
            Retained::Unchanged => RetainOutcome::Unchanged,
            Retained::Rewritten(b) => RetainOutcome::Rewritten(b.as_bytes().to_vec()),
            Retained::Empty => RetainOutcome::Empty,
        })
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
