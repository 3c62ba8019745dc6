//! WriteTxnMarkers (API 27) bodies written byte by byte as Kafka's schema lays them out: the
//! fields decode where Kafka puts them, encode back to the same bytes, and a body cut short is
//! an error, never a panic. (Random round trips of every version are in `roundtrip.rs`.)

use bytes::Bytes;
use kafka_proto::messages::write_txn_markers_request::WriteTxnMarkersRequest;
use kafka_proto::messages::write_txn_markers_response::WriteTxnMarkersResponse;
use kafka_proto::messages::Message;

/// v0 (not flexible): one COMMIT marker of producer 5, epoch 2, for partitions 0 and 3 of "t",
/// coordinator epoch 7.
fn request_v0() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&1i32.to_be_bytes()); // markers
    b.extend_from_slice(&5i64.to_be_bytes()); // producer_id
    b.extend_from_slice(&2i16.to_be_bytes()); // producer_epoch
    b.push(1); // transaction_result: COMMIT
    b.extend_from_slice(&1i32.to_be_bytes()); // topics
    b.extend_from_slice(&1i16.to_be_bytes());
    b.push(b't');
    b.extend_from_slice(&2i32.to_be_bytes()); // partition_indexes
    b.extend_from_slice(&0i32.to_be_bytes());
    b.extend_from_slice(&3i32.to_be_bytes());
    b.extend_from_slice(&7i32.to_be_bytes()); // coordinator_epoch
    b
}

#[test]
fn a_v0_request_decodes_field_by_field_and_encodes_back() {
    let bytes = Bytes::from(request_v0());
    let r = WriteTxnMarkersRequest::decode_from(bytes.clone(), 0).unwrap();
    assert_eq!(r.markers.len(), 1);
    let m = &r.markers[0];
    assert_eq!((m.producer_id, m.producer_epoch), (5, 2));
    assert!(m.transaction_result);
    assert_eq!(m.coordinator_epoch, 7);
    assert_eq!(m.topics[0].name, "t");
    assert_eq!(m.topics[0].partition_indexes, vec![0, 3]);
    assert_eq!(r.encode_to_bytes(0).unwrap(), bytes);
}

#[test]
fn a_v1_request_uses_compact_forms_and_tagged_fields() {
    let r = WriteTxnMarkersRequest::decode_from(Bytes::from(request_v0()), 0).unwrap();
    let v1 = r.encode_to_bytes(1).unwrap();
    let mut want = vec![2u8]; // compact array: 1 marker
    want.extend_from_slice(&5i64.to_be_bytes());
    want.extend_from_slice(&2i16.to_be_bytes());
    want.push(1);
    want.extend_from_slice(&[2, 2, b't', 3]); // 1 topic, "t", 2 partitions
    want.extend_from_slice(&0i32.to_be_bytes());
    want.extend_from_slice(&3i32.to_be_bytes());
    want.push(0); // topic's tagged fields
    want.extend_from_slice(&7i32.to_be_bytes());
    want.push(0); // marker's tagged fields
    want.push(0); // body's tagged fields
    assert_eq!(v1.as_ref(), want.as_slice());
    assert_eq!(WriteTxnMarkersRequest::decode_from(v1, 1).unwrap(), r);
}

#[test]
fn a_request_cut_short_is_an_error() {
    let full = request_v0();
    for cut in 0..full.len() {
        assert!(
            WriteTxnMarkersRequest::decode_from(Bytes::copy_from_slice(&full[..cut]), 0).is_err(),
            "cut at {cut}"
        );
    }
    // A marker count far beyond the bytes present: an error, nothing large reserved.
    let mut huge = (i32::MAX).to_be_bytes().to_vec();
    huge.extend_from_slice(&full[4..]);
    assert!(WriteTxnMarkersRequest::decode_from(Bytes::from(huge), 0).is_err());
}

#[test]
fn a_response_carries_per_partition_errors() {
    let mut b = Vec::new();
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&5i64.to_be_bytes());
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&1i16.to_be_bytes());
    b.push(b't');
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&3i32.to_be_bytes());
    b.extend_from_slice(&47i16.to_be_bytes()); // INVALID_PRODUCER_EPOCH
    let bytes = Bytes::from(b);
    let r = WriteTxnMarkersResponse::decode_from(bytes.clone(), 0).unwrap();
    let p = &r.markers[0].topics[0].partitions[0];
    assert_eq!((p.partition_index, p.error_code), (3, 47));
    assert_eq!(r.encode_to_bytes(0).unwrap(), bytes);
}
