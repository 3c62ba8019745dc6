//! Feeds arbitrary bytes, at every Produce version, to the broker's produce validation
//! (`records::validate_produce_records`): it must never panic nor allocate without bound, and
//! whatever it accepts must decode fully with the record decoder to exactly the count it
//! reported, offset deltas 0, 1, ... in order.
#![no_main]

use bytes::Bytes;
use kafka_proto::records::{validate_produce_records, ProduceLimits};
use libfuzzer_sys::fuzz_target;

/// A fixed clock, so runs are reproducible.
const NOW_MS: i64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the Produce version (0-11), the rest is the partition's records.
    let Some((&version, records)) = data.split_first() else {
        return;
    };
    let version = i16::from(version % 12);
    let limits = ProduceLimits::new(1 << 20, NOW_MS);
    let buf = Bytes::copy_from_slice(records);
    if let Ok((batch, count)) = validate_produce_records(buf, version, &limits) {
        let decoded = batch
            .records_vec(limits.max_decompressed_bytes)
            .expect("an accepted batch decodes");
        assert_eq!(decoded.len() as u32, count);
        for (i, r) in decoded.iter().enumerate() {
            assert_eq!(r.offset_delta as usize, i);
        }
    }
});
