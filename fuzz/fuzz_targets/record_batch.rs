//! Feeds arbitrary bytes to the record parsers: v2 batch splitting, validation and record
//! iteration (with bounded decompression), and legacy (magic 0/1) message sets.
#![no_main]

use bytes::Bytes;
use kafka_proto::records::{
    decode_message_set, split_batches, split_batches_lenient, LegacyDecodeOptions, TrailingPartial,
};
use libfuzzer_sys::fuzz_target;

/// Decompression bound per batch / message set: small, so the fuzzer cannot exhaust memory.
const MAX_DECOMPRESSED: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let buf = Bytes::copy_from_slice(data);
    for batch in split_batches(buf.clone()).chain(split_batches_lenient(buf.clone())) {
        let Ok(batch) = batch else { break };
        let _ = batch.validate();
        let _ = batch.validate_from_producer();
        let _ = batch.batch_attributes();
        if let Ok(records) = batch.records(MAX_DECOMPRESSED) {
            for record in records {
                if record.is_err() {
                    break;
                }
            }
        }
    }
    for trailing in [TrailingPartial::Reject, TrailingPartial::Ignore] {
        let _ = decode_message_set(
            buf.clone(),
            LegacyDecodeOptions {
                max_decompressed: MAX_DECOMPRESSED,
                trailing,
            },
        );
    }
});
