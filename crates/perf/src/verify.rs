//! Checks that a consumer sees every offset once, in order: Fetch data is split into batches
//! and records, records below the next expected offset are skipped (Kafka may return the batch
//! that contains the requested offset from its start), and a jump forward is a gap.

use bytes::Bytes;
use kafka_proto::records::split_batches_lenient;
use thiserror::Error;

/// The most a compressed batch may decompress to (Kafka's default max message size is 1 MiB;
/// leave room).
const MAX_DECOMPRESSED: usize = 256 << 20;

/// Fetched data that could not be read.
#[derive(Debug, Error)]
pub enum VerifyError {
    /// A batch or record did not parse, or a CRC did not match.
    #[error("corrupt fetch data: {0}")]
    Corrupt(#[from] kafka_proto::DecodeError),
}

/// What one Fetch response contained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accepted {
    /// New records (at or after the expected offset).
    pub records: u64,
    /// Their value bytes.
    pub payload_bytes: u64,
    /// Gaps found (each jump forward counts once).
    pub gaps: u64,
    /// Offsets missing in those gaps.
    pub missing: u64,
    /// Records below the expected offset outside the first batch (duplicates or disorder).
    pub out_of_order: u64,
}

/// Follows the offsets of one partition.
#[derive(Debug, Clone)]
pub struct OffsetChecker {
    next: i64,
    verify_crc: bool,
}

impl OffsetChecker {
    /// Expects `start` next; checks each batch's CRC too if `verify_crc`.
    pub fn new(start: i64, verify_crc: bool) -> OffsetChecker {
        OffsetChecker {
            next: start,
            verify_crc,
        }
    }

    /// The next offset expected (where the next Fetch starts).
    pub fn next_offset(&self) -> i64 {
        self.next
    }

    /// Reads the record batches of one Fetch response. A partial batch at the end (Kafka cuts
    /// responses at the size limit) is ignored; it is fetched again next time.
    pub fn accept(&mut self, data: Bytes) -> Result<Accepted, VerifyError> {
        let mut acc = Accepted::default();
        for (i, batch) in split_batches_lenient(data).enumerate() {
            let batch = batch?;
            if self.verify_crc {
                batch.validate()?;
            }
            if batch.last_offset() < self.next {
                if i > 0 {
                    acc.out_of_order += u64::try_from(batch.record_count()).unwrap_or(0);
                }
                continue;
            }
            if batch.is_control() {
                // Transaction markers take an offset but are not records.
                self.next = batch.next_offset();
                continue;
            }
            for r in batch.record_summaries(MAX_DECOMPRESSED)? {
                let r = r?;
                if r.offset < self.next {
                    if i > 0 {
                        acc.out_of_order += 1;
                    }
                    continue;
                }
                if r.offset > self.next {
                    acc.gaps += 1;
                    acc.missing += (r.offset - self.next) as u64;
                }
                self.next = r.offset + 1;
                acc.records += 1;
                acc.payload_bytes += r.value_len.unwrap_or(0) as u64;
            }
        }
        Ok(acc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_proto::records::{Compression, NewRecord, RecordBatch, RecordBatchBuilder};

    fn batch(base: i64, n: usize) -> Bytes {
        let recs: Vec<NewRecord> = (0..n).map(|i| NewRecord::new(i as i64, "xyz")).collect();
        RecordBatchBuilder::new(Compression::None)
            .base_offset(base)
            .with_records(&recs)
            .unwrap()
            .build()
            .unwrap()
    }

    fn cat(parts: &[Bytes]) -> Bytes {
        Bytes::from(parts.concat())
    }

    #[test]
    fn dense_offsets_pass() {
        let mut c = OffsetChecker::new(0, true);
        let a = c.accept(cat(&[batch(0, 5), batch(5, 5)])).unwrap();
        assert_eq!((a.records, a.gaps, a.payload_bytes), (10, 0, 30));
        assert_eq!(c.next_offset(), 10);
    }

    #[test]
    fn earlier_records_of_the_first_batch_are_skipped() {
        let mut c = OffsetChecker::new(3, false);
        let a = c.accept(cat(&[batch(0, 5), batch(5, 2)])).unwrap();
        assert_eq!((a.records, a.gaps, a.out_of_order), (4, 0, 0));
        assert_eq!(c.next_offset(), 7);
    }

    #[test]
    fn gaps_and_disorder_are_counted() {
        let mut c = OffsetChecker::new(0, false);
        let a = c.accept(cat(&[batch(0, 3), batch(5, 2)])).unwrap();
        assert_eq!((a.records, a.gaps, a.missing), (5, 1, 2));
        let a = c.accept(cat(&[batch(7, 1), batch(2, 2)])).unwrap();
        assert_eq!((a.records, a.out_of_order), (1, 2));
    }

    #[test]
    fn partial_trailing_batch_is_ignored_and_crc_checked() {
        let full = batch(0, 3);
        let next = batch(3, 3);
        let mut data = full.to_vec();
        data.extend_from_slice(&next[..next.len() / 2]);
        let mut c = OffsetChecker::new(0, true);
        assert_eq!(c.accept(Bytes::from(data)).unwrap().records, 3);
        let mut bad = batch(3, 3).to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(RecordBatch::new(Bytes::from(bad.clone()))
            .unwrap()
            .validate()
            .is_err());
        assert!(c.accept(Bytes::from(bad)).is_err());
    }
}
