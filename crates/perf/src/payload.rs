//! The record batches producers send: `batch` records of `message_size` bytes of random
//! uppercase letters (compressible about as much as Kafka's ProducerPerformance payload), no
//! key. A batch is built once and reused for up to [`REBUILD_AFTER`], so building and
//! compressing costs the client little while timestamps stay within a second of real time.

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
        }
    }

    /// Bytes of one record's value.
    pub fn message_size(&self) -> usize {
        self.value.len()
    }

    /// A batch of `records` records (the cached one if it has that many records and is recent).
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
            builder.push(ts, None, Some(&self.value), &[])?;
        }
        let b = builder.build()?;
        self.cached = Some((records, now, b.clone()));
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
        }
    }
}
