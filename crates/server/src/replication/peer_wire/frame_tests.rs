//! Tests of the frame encodings: round trips in both formats, truncation, conversion, the
//! exact protobuf bytes, the message count bound.

use bytes::Bytes;
use raft::prelude::{Entry, MessageType};

use super::*;

fn append(to: u64, data_len: usize) -> Message {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgAppend);
    m.to = to;
    m.from = 1;
    m.term = 7;
    m.entries = vec![Entry {
        index: 4,
        term: 7,
        data: Bytes::from(vec![9u8; data_len]),
        ..Default::default()
    }]
    .into();
    m
}

#[test]
fn frames_round_trip_in_both_formats_and_reject_truncation() {
    for format in [FrameFormat::Legacy, FrameFormat::Prost] {
        let mut w = FrameWriter::new(format);
        w.push(42, &append(2, 3000));
        w.push(0, &Message::default());
        w.push(u64::MAX, &append(3, 0));
        assert_eq!(w.messages(), 3);
        let frame = Bytes::copy_from_slice(w.finish());
        let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - 4);
        let body = frame.slice(4..);
        let msgs = decode_frame(format, body.clone()).unwrap();
        assert_eq!(
            msgs,
            vec![
                (42, append(2, 3000)),
                (0, Message::default()),
                (u64::MAX, append(3, 0))
            ]
        );
        for cut in [1, 11, 100, body.len() - 1] {
            assert!(
                decode_frame(format, body.slice(..cut)).is_err(),
                "{format:?} cut at {cut}"
            );
        }
    }
}

#[test]
fn a_frame_converts_between_formats() {
    let msgs = vec![(5u64, append(2, 100)), (0, Message::default())];
    let mut w = FrameWriter::new(FrameFormat::Prost);
    for (g, m) in &msgs {
        w.push(*g, m);
    }
    w.convert(FrameFormat::Legacy);
    assert_eq!(w.format(), FrameFormat::Legacy);
    let body = Bytes::copy_from_slice(&w.finish()[4..]);
    assert_eq!(decode_frame(FrameFormat::Legacy, body).unwrap(), msgs);
    w.convert(FrameFormat::Prost);
    let body = Bytes::copy_from_slice(&w.finish()[4..]);
    assert_eq!(decode_frame(FrameFormat::Prost, body).unwrap(), msgs);
}

/// The hand-written frame encoding is exactly prost's encoding of `PeerFrame`.
#[test]
fn prost_frames_are_peer_frame_messages() {
    let msgs = [(5u64, append(2, 10)), (0, Message::default())];
    let mut w = FrameWriter::new(FrameFormat::Prost);
    for (g, m) in &msgs {
        w.push(*g, m);
    }
    let frame = w.finish()[4..].to_vec();
    let wire = PeerFrameWire {
        messages: msgs
            .iter()
            .map(|(g, m)| GroupMessageWire {
                group_id: *g,
                raft_message: Bytes::from(m.write_to_bytes().unwrap()),
            })
            .collect(),
    };
    assert_eq!(frame, wire.encode_to_vec());
    // Fields of a later version are skipped: field 2 of PeerFrame, field 3 of GroupMessage.
    let mut later = wire.clone();
    later.messages[0].raft_message = Bytes::new();
    let mut bytes = vec![0x10, 0x2a]; // PeerFrame field 2 = 42
    let inner = [0x08, 0x09, 0x18, 0x01]; // group 9, field 3 = 1
    bytes.extend_from_slice(&[0x0a, inner.len() as u8]);
    bytes.extend_from_slice(&inner);
    let decoded = decode_frame(FrameFormat::Prost, Bytes::from(bytes)).unwrap();
    assert_eq!(decoded, vec![(9, Message::default())]);
}

#[test]
fn frames_with_too_many_messages_are_refused() {
    for format in [FrameFormat::Legacy, FrameFormat::Prost] {
        let mut w = FrameWriter::new(format);
        for _ in 0..MAX_MESSAGES_PER_FRAME_RECEIVED {
            w.push(1, &Message::default());
        }
        let body = Bytes::copy_from_slice(&w.finish()[4..]);
        assert_eq!(
            decode_frame(format, body).unwrap().len(),
            MAX_MESSAGES_PER_FRAME_RECEIVED
        );
        w.push(1, &Message::default());
        let body = Bytes::copy_from_slice(&w.finish()[4..]);
        assert!(matches!(
            decode_frame(format, body),
            Err(WireError::TooManyMessages)
        ));
    }
}
