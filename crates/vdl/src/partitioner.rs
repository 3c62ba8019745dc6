//! Which partition a record goes to: Kafka's default partitioner for keyed records, so a Kafka
//! producer and the embedded API put a key in the same partition.

/// Kafka's murmur2 hash (the Java client's `Utils.murmur2`: seed `0x9747b28c`, little-endian
/// 4-byte blocks, the tail mixed in, then the final avalanche), as a signed 32-bit value.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate().rev() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of a keyed record among `partitions` (at least 1), as Kafka's default
/// partitioner computes it: `toPositive(murmur2(key)) % partitions`.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a stream has at least one partition");
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of Apache Kafka's `UtilsTest.testMurmur2`.
    #[test]
    fn murmur2_matches_the_java_clients_vectors() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (data, expected) in cases {
            assert_eq!(murmur2(data), expected, "{:?}", std::str::from_utf8(data));
        }
    }

    #[test]
    fn partitions_are_within_range_and_stable() {
        for key in [&b""[..], b"k", b"order-17", b"\xff\xff\xff\xff\xff"] {
            let p = partition_for_key(key, 6);
            assert!(p < 6);
            assert_eq!(p, partition_for_key(key, 6));
            assert_eq!(partition_for_key(key, 1), 0);
        }
    }
}
