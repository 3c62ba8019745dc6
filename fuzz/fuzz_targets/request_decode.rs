//! Feeds arbitrary frame bodies (what follows the 4-byte size prefix) to `decode_request`, and
//! re-encodes whatever decodes: the re-encoded frame must decode to the same header and to a
//! request that encodes to the same bytes (bytes, not `==`: a float64 field may hold NaN, which
//! is not equal to itself).
#![no_main]

use bytes::Bytes;
use kafka_proto::{decode_request, encode_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok((header, request)) = decode_request(Bytes::copy_from_slice(data)) else {
        return;
    };
    let segments = encode_request(&header, &request).expect("a decoded request re-encodes");
    let frame_bytes: Vec<u8> = segments.iter().flat_map(|s| s.iter().copied()).collect();
    let (header2, request2) = decode_request(Bytes::copy_from_slice(&frame_bytes).slice(4..))
        .expect("a re-encoded request decodes");
    assert_eq!(header, header2);
    let again = encode_request(&header2, &request2).expect("it re-encodes again");
    let again: Vec<u8> = again.iter().flat_map(|s| s.iter().copied()).collect();
    assert_eq!(frame_bytes, again, "{request:?}");
});
