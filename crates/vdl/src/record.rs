//! What the application appends and reads: records, their committed form, and positions.

use bytes::Bytes;
use kafka_proto::records::{build_batch, split_batches, Compression, NewRecord, RecordBatch};

use crate::error::{Error, Result};

/// A position in a stream: a partition and an offset in it. Offsets of one partition start at
/// 0 and grow by one per record; as a start for reading or a consumer position, it names the
/// next record to read (Kafka's convention).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset {
    /// The partition.
    pub partition: u32,
    /// The offset within the partition.
    pub offset: u64,
}

impl Offset {
    /// Offset `offset` of partition `partition`.
    pub fn new(partition: u32, offset: u64) -> Offset {
        Offset { partition, offset }
    }

    /// The beginning of partition `partition`.
    pub fn start(partition: u32) -> Offset {
        Offset::new(partition, 0)
    }

    /// The position after this one (the next record of the same partition).
    pub fn next(self) -> Offset {
        Offset::new(self.partition, self.offset + 1)
    }
}

/// A record to append: an optional key, an optional value, headers, an optional timestamp and
/// an optional explicit partition. Without a partition, a keyed record goes where Kafka's
/// default partitioner would put it (murmur2 of the key), a record without key to the
/// partitions in turn.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// The key (`None`: null).
    pub key: Option<Bytes>,
    /// The value (`None`: null, a Kafka tombstone).
    pub value: Option<Bytes>,
    /// Headers, in order: a UTF-8 key and an optional value each.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Milliseconds since the Unix epoch (`None`: the time of the append).
    pub timestamp_ms: Option<i64>,
    /// The partition to append to (`None`: chosen from the key).
    pub partition: Option<u32>,
}

impl Record {
    /// A record with this value and nothing else.
    pub fn new(value: impl Into<Bytes>) -> Record {
        Record {
            value: Some(value.into()),
            ..Record::default()
        }
    }

    /// A record with this key and value.
    pub fn keyed(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Record {
        Record::new(value).with_key(key)
    }

    /// This record with a key.
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Record {
        self.key = Some(key.into());
        self
    }

    /// This record with one more header.
    pub fn with_header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Record {
        self.headers.push((key.into(), Some(value.into())));
        self
    }

    /// This record with a timestamp (milliseconds since the Unix epoch).
    pub fn with_timestamp_ms(mut self, timestamp_ms: i64) -> Record {
        self.timestamp_ms = Some(timestamp_ms);
        self
    }

    /// This record for an explicit partition.
    pub fn to_partition(mut self, partition: u32) -> Record {
        self.partition = Some(partition);
        self
    }

    fn to_new_record(&self, now_ms: i64) -> NewRecord {
        let mut r = NewRecord {
            timestamp: self.timestamp_ms.unwrap_or(now_ms),
            key: self.key.clone(),
            value: self.value.clone(),
            headers: Vec::with_capacity(self.headers.len()),
        };
        for (k, v) in &self.headers {
            r = r.with_header(Bytes::copy_from_slice(k.as_bytes()), v.clone());
        }
        r
    }
}

/// A committed record as read back: where it is, its timestamp (the producer's, or the
/// leader's clock for a `LogAppendTime` stream), key, value and headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedRecord {
    /// Its partition and offset.
    pub offset: Offset,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The key.
    pub key: Option<Bytes>,
    /// The value.
    pub value: Option<Bytes>,
    /// The headers (keys that are not UTF-8, written by some other Kafka client, are converted
    /// lossily).
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Encodes `records` as one Kafka record batch (magic 2, uncompressed, CRC-32C, create-time
/// timestamps: records without one get `now_ms`), as a Kafka producer would send it.
pub(crate) fn encode_batch(records: &[&Record], now_ms: i64) -> Result<Bytes> {
    if records.is_empty() {
        return Err(Error::InvalidRecord("no records to append".into()));
    }
    let new: Vec<NewRecord> = records.iter().map(|r| r.to_new_record(now_ms)).collect();
    build_batch(Compression::None, &new).map_err(|e| Error::InvalidRecord(e.to_string()))
}

/// Most bytes one batch may decompress to when read back (batches written by Kafka clients
/// may be compressed); matches the produce path's bound for the 32 MiB partition cap.
const MAX_DECOMPRESSED_BYTES: usize = kafka_proto::records::validate::MAX_DECOMPRESSED_BYTES;

/// Decodes the committed records of `partition` in `chunks` (whole batches as read from the
/// store), keeping those at or after `from` and before `until`. Control batches (none are
/// written today) are skipped. Every batch's CRC is checked.
pub(crate) fn decode_batches(
    partition: u32,
    chunks: &[Bytes],
    from: u64,
    until: u64,
    out: &mut Vec<CommittedRecord>,
) -> Result<()> {
    for chunk in chunks {
        for batch in split_batches(chunk.clone()) {
            let batch: RecordBatch = batch.map_err(|e| Error::Storage(e.to_string()))?;
            batch
                .validate()
                .map_err(|e| Error::Storage(e.to_string()))?;
            if batch.is_control() {
                continue;
            }
            let records = batch
                .records(MAX_DECOMPRESSED_BYTES)
                .map_err(|e| Error::Storage(e.to_string()))?;
            for r in records {
                let r = r.map_err(|e| Error::Storage(e.to_string()))?;
                let Ok(offset) = u64::try_from(r.offset) else {
                    return Err(Error::Storage(format!("negative offset {}", r.offset)));
                };
                if offset < from || offset >= until {
                    continue;
                }
                out.push(CommittedRecord {
                    offset: Offset::new(partition, offset),
                    timestamp_ms: r.timestamp,
                    key: r.key,
                    value: r.value,
                    headers: r
                        .headers
                        .into_iter()
                        .map(|h| (String::from_utf8_lossy(&h.key).into_owned(), h.value))
                        .collect(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_round_trips_through_kafkas_format() {
        let a = Record::keyed("k1", "v1")
            .with_header("op", "insert")
            .with_timestamp_ms(1_700_000_000_123);
        let b = Record::new("v2");
        let bytes = encode_batch(&[&a, &b], 1_700_000_000_999).unwrap();
        let batch = RecordBatch::new(bytes.clone()).unwrap();
        batch.validate().unwrap();
        assert_eq!(batch.record_count(), 2);
        let mut out = Vec::new();
        decode_batches(3, &[bytes], 0, u64::MAX, &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].offset, Offset::new(3, 0));
        assert_eq!(out[0].key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(out[0].timestamp_ms, 1_700_000_000_123);
        assert_eq!(
            out[0].headers,
            vec![("op".to_owned(), Some(Bytes::from_static(b"insert")))]
        );
        assert_eq!(out[1].offset.offset, 1);
        assert_eq!(out[1].key, None);
        assert_eq!(out[1].timestamp_ms, 1_700_000_000_999);
    }

    #[test]
    fn decoding_keeps_only_the_range_asked_for() {
        let recs: Vec<Record> = (0..5).map(|i| Record::new(vec![i])).collect();
        let refs: Vec<&Record> = recs.iter().collect();
        let bytes = encode_batch(&refs, 0).unwrap();
        let mut out = Vec::new();
        decode_batches(0, &[bytes], 1, 4, &mut out).unwrap();
        let offsets: Vec<u64> = out.iter().map(|r| r.offset.offset).collect();
        assert_eq!(offsets, vec![1, 2, 3]);
    }

    #[test]
    fn a_corrupt_batch_is_an_error_not_a_panic() {
        let bytes = encode_batch(&[&Record::new("x")], 0).unwrap();
        let mut bad = bytes.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let mut out = Vec::new();
        assert!(decode_batches(0, &[Bytes::from(bad)], 0, u64::MAX, &mut out).is_err());
        assert!(decode_batches(0, &[bytes.slice(..10)], 0, u64::MAX, &mut out).is_err());
    }

    #[test]
    fn no_records_is_invalid() {
        assert!(matches!(encode_batch(&[], 0), Err(Error::InvalidRecord(_))));
    }
}
