//! The record batches producers send: `batch` records of `message_size` bytes of random
//! uppercase letters (compressible about as much as Kafka's ProducerPerformance payload), no
//! key. A batch is built once and reused for up to [`REBUILD_AFTER`], so building and
//! compressing costs the client little while timestamps stay within a second of real time.
//!
//! With a key space of `n` ([`BatchSource::with_keys`], `--keys N`), the source's record `i`
//! (counted from 0 over all its batches) gets the key `k` followed by `i mod n` in decimal,
//! zero-padded to the width of `n - 1` (`k0000` ... `k9999` for 10,000 keys), so every key has
//! the same size and a compacted topic keeps `n` live records. Keyed batches are built for
//! every request (each carries the next keys), not reused.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_proto::records::{Compression, RecordBatchBuilder};
use kafka_proto::EncodeError;
use rand::{Rng, SeedableRng};

/// How long a built batch is reused before it is built again with the current time.
pub const REBUILD_AFTER: Duration = Duration::from_secs(1);

/// Builds (and caches) the batches of one producer.
#[derive(Debug)]
pub struct BatchSource {
    value: Bytes,
    compression: Compression,
    cached: Option<(usize, Instant, Bytes)>,
    keys: Option<KeySequence>,
}

/// The keys of a keyed source: `k<i mod space>`, zero-padded to `width` digits.
#[derive(Debug)]
struct KeySequence {
    space: u64,
    width: usize,
    next: u64,
}

impl KeySequence {
    fn new(space: u64) -> KeySequence {
        let width = space.saturating_sub(1).max(1).to_string().len();
        KeySequence {
            space: space.max(1),
            width,
            next: 0,
        }
    }

    /// The next record's key.
    fn next_key(&mut self) -> Bytes {
        let key = format!("k{:0width$}", self.next % self.space, width = self.width);
        self.next = self.next.wrapping_add(1);
        Bytes::from(key.into_bytes())
    }
}

impl BatchSource {
    /// A source of records of `message_size` bytes, compressed with `compression`; `seed`
    /// picks the random payload.
    pub fn new(message_size: usize, compression: Compression, seed: u64) -> BatchSource {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let value: Vec<u8> = (0..message_size)
            .map(|_| rng.gen_range(b'A'..=b'Z'))
            .collect();
        BatchSource {
            value: Bytes::from(value),
            compression,
            cached: None,
            keys: None,
        }
    }

    /// The same source with keyed records over a key space of `space` keys (see the module
    /// documentation; 0 counts as 1).
    pub fn with_keys(mut self, space: u64) -> BatchSource {
        self.keys = Some(KeySequence::new(space));
        self.cached = None;
        self
    }

    /// Bytes of one record's value.
    pub fn message_size(&self) -> usize {
        self.value.len()
    }

    /// A batch of `records` records (unkeyed: the cached one if it has that many records and
    /// is recent; keyed: a new batch with the next `records` keys).
    pub fn batch(&mut self, records: usize) -> Result<Bytes, EncodeError> {
        let now = Instant::now();
        if let Some((n, built, b)) = &self.cached {
            if *n == records && now.duration_since(*built) < REBUILD_AFTER {
                return Ok(b.clone());
            }
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut builder = RecordBatchBuilder::new(self.compression);
        for _ in 0..records {
            let key = self.keys.as_mut().map(KeySequence::next_key);
            builder.push(ts, key.as_ref(), Some(&self.value), &[])?;
        }
        let b = builder.build()?;
        if self.keys.is_none() {
            self.cached = Some((records, now, b.clone()));
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_proto::records::RecordBatch;

    #[test]
    fn batches_have_the_requested_shape() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut s = BatchSource::new(100, codec, 7);
            let b = RecordBatch::new(s.batch(10).unwrap()).unwrap();
            b.validate().unwrap();
            assert_eq!(b.record_count(), 10);
            let recs = b.records_vec(1 << 20).unwrap();
            assert_eq!(recs.len(), 10);
            assert!(recs
                .iter()
                .all(|r| r.value.as_ref().map(|v| v.len()) == Some(100)));
            assert!(recs.iter().all(|r| r.key.is_none()));
        }
    }

    #[test]
    fn keyed_records_cycle_over_the_key_space_in_fixed_width() {
        let mut s = BatchSource::new(10, Compression::Lz4, 7).with_keys(10_000);
        let mut keys = Vec::new();
        // 10,000 keys over 201 batches of 50: record i has key i mod 10,000, across batches.
        for _ in 0..201 {
            let b = RecordBatch::new(s.batch(50).unwrap()).unwrap();
            b.validate().unwrap();
            for r in b.records_vec(1 << 20).unwrap() {
                keys.push(String::from_utf8(r.key.unwrap().to_vec()).unwrap());
            }
        }
        assert_eq!(keys.len(), 10_050);
        assert_eq!(&keys[..3], ["k0000", "k0001", "k0002"]);
        assert_eq!(keys[9_999], "k9999");
        assert_eq!(keys[10_000], "k0000");
        assert_eq!(keys[10_049], "k0049");
        assert!(keys.iter().all(|k| k.len() == 5));
        let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), 10_000);

        let mut one = BatchSource::new(10, Compression::None, 7).with_keys(1);
        let b = RecordBatch::new(one.batch(3).unwrap()).unwrap();
        let recs = b.records_vec(1 << 20).unwrap();
        assert!(recs.iter().all(|r| r.key.as_deref() == Some(&b"k0"[..])));
        let mut eleven = BatchSource::new(10, Compression::None, 7).with_keys(11);
        let b = RecordBatch::new(eleven.batch(12).unwrap()).unwrap();
        let recs = b.records_vec(1 << 20).unwrap();
        assert_eq!(recs[0].key.as_deref(), Some(&b"k00"[..]));
        assert_eq!(recs[10].key.as_deref(), Some(&b"k10"[..]));
        assert_eq!(recs[11].key.as_deref(), Some(&b"k00"[..]));
    }
}
