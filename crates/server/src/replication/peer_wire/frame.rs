//! A frame's bytes in both formats (version 3's protobuf `PeerFrame`, the fixed layout of
//! versions 1 and 2): [`FrameWriter`] builds one in a reused buffer, [`decode_frame`] splits
//! one into its (group, message) pairs, every length checked and the message count bounded
//! before anything is allocated.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding::{
    decode_key, decode_varint, encode_key, encode_varint, encoded_len_varint, skip_field,
    DecodeContext, WireType,
};
use prost::Message as _;
use protobuf::Message as _;
use raft::prelude::Message;

use super::{FrameFormat, WireError};

/// Most messages a received frame may carry (senders put at most 512 in one).
pub const MAX_MESSAGES_PER_FRAME_RECEIVED: usize = 8192;

/// `PeerFrame`: the envelope of a version 3 frame. [`FrameWriter`] writes the same bytes
/// without copying each raft message twice; decoding goes message by message
/// ([`decode_frame`]) so a frame's message count is bounded before anything is allocated.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PeerFrameWire {
    /// The frame's messages, in order.
    #[prost(message, repeated, tag = "1")]
    pub messages: Vec<GroupMessageWire>,
}

/// `GroupMessage`: one Raft group's message.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupMessageWire {
    /// The Raft group the message belongs to.
    #[prost(uint64, tag = "1")]
    pub group_id: u64,
    /// raft-rs's `Message`, encoded by raft-rs's codec.
    #[prost(bytes = "bytes", tag = "2")]
    pub raft_message: Bytes,
}

/// Builds one frame (length prefix included) in a reused buffer.
pub struct FrameWriter {
    format: FrameFormat,
    buf: BytesMut,
    messages: usize,
}

impl FrameWriter {
    /// An empty writer for frames in `format`.
    pub fn new(format: FrameFormat) -> FrameWriter {
        let mut w = FrameWriter {
            format,
            buf: BytesMut::with_capacity(64 << 10),
            messages: 0,
        };
        w.clear(format);
        w
    }

    /// Starts a new frame in `format`, keeping the buffer's memory.
    pub fn clear(&mut self, format: FrameFormat) {
        self.format = format;
        self.buf.clear();
        self.buf.put_u32(0);
        self.messages = 0;
    }

    /// Appends `msg` of `group`.
    pub fn push(&mut self, group: u64, msg: &Message) {
        let size = msg.compute_size() as usize;
        match self.format {
            FrameFormat::Legacy => {
                self.buf.reserve(12 + size);
                self.buf.put_u64(group);
                self.buf.put_u32(size as u32);
            }
            FrameFormat::Prost => {
                // PeerFrame field 1 holding GroupMessage { 1: group, 2: raft message }, each
                // omitted when it is the default (0, empty), as prost does.
                let group_len = if group == 0 {
                    0
                } else {
                    1 + encoded_len_varint(group)
                };
                let message_len = if size == 0 {
                    0
                } else {
                    1 + encoded_len_varint(size as u64) + size
                };
                let inner = group_len + message_len;
                self.buf
                    .reserve(1 + encoded_len_varint(inner as u64) + inner);
                encode_key(1, WireType::LengthDelimited, &mut self.buf);
                encode_varint(inner as u64, &mut self.buf);
                if group != 0 {
                    encode_key(1, WireType::Varint, &mut self.buf);
                    encode_varint(group, &mut self.buf);
                }
                if size != 0 {
                    encode_key(2, WireType::LengthDelimited, &mut self.buf);
                    encode_varint(size as u64, &mut self.buf);
                }
            }
        }
        let before = self.buf.len();
        self.buf.resize(before + size, 0);
        let mut out = protobuf::CodedOutputStream::bytes(&mut self.buf[before..]);
        // Writing into memory of the computed size cannot fail; an error here would be a
        // protobuf bug. The sizes were computed just above, as `write_to_with_cached_sizes`
        // requires; `check_eof` asserts the message filled exactly its space.
        msg.write_to_with_cached_sizes(&mut out)
            .expect("encoding a raft message into memory");
        out.check_eof();
        self.messages += 1;
    }

    /// The format of the current frame.
    pub fn format(&self) -> FrameFormat {
        self.format
    }

    /// Re-encodes the current frame in `format` (nothing to do when it is in that format
    /// already): for a frame retried on a connection of another version.
    pub fn convert(&mut self, format: FrameFormat) {
        if format == self.format {
            return;
        }
        let body = Bytes::copy_from_slice(&self.buf[4..]);
        let messages = decode_frame(self.format, body)
            .expect("a frame this writer encoded decodes (at most 512 messages are put in one)");
        self.clear(format);
        for (group, msg) in &messages {
            self.push(group.to_owned(), msg);
        }
    }

    /// Messages in the current frame.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// Bytes of the current frame, length prefix included.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the current frame holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }

    /// The finished frame: its length prefix filled in.
    pub fn finish(&mut self) -> &[u8] {
        let body = (self.buf.len() - 4) as u32;
        self.buf[..4].copy_from_slice(&body.to_be_bytes());
        &self.buf
    }
}

/// Splits one frame body in `format` into (group, message) pairs, checking every length; at
/// most [`MAX_MESSAGES_PER_FRAME_RECEIVED`] messages.
pub fn decode_frame(format: FrameFormat, body: Bytes) -> Result<Vec<(u64, Message)>, WireError> {
    match format {
        FrameFormat::Legacy => decode_legacy_frame(body),
        FrameFormat::Prost => decode_prost_frame(body),
    }
}

fn parse_raft(raw: &Bytes) -> Result<Message, WireError> {
    Message::parse_from_carllerche_bytes(raw).map_err(|e| WireError::Protobuf(e.to_string()))
}

fn decode_legacy_frame(mut body: Bytes) -> Result<Vec<(u64, Message)>, WireError> {
    let mut out = Vec::new();
    while body.has_remaining() {
        if body.remaining() < 12 {
            return Err(WireError::Truncated);
        }
        let group = body.get_u64();
        let len = body.get_u32() as usize;
        if len > body.remaining() {
            return Err(WireError::Truncated);
        }
        if out.len() == MAX_MESSAGES_PER_FRAME_RECEIVED {
            return Err(WireError::TooManyMessages);
        }
        let raw = body.split_to(len);
        out.push((group, parse_raft(&raw)?));
    }
    Ok(out)
}

/// Decodes a `PeerFrame` one `GroupMessage` at a time (prost's own decoding of the repeated
/// field would allocate for every message before the count could be checked), skipping fields
/// this version does not know.
fn decode_prost_frame(mut body: Bytes) -> Result<Vec<(u64, Message)>, WireError> {
    let mut out = Vec::new();
    while body.has_remaining() {
        let (tag, wire_type) = decode_key(&mut body)?;
        if tag != 1 || wire_type != WireType::LengthDelimited {
            skip_field(wire_type, tag, &mut body, DecodeContext::default())?;
            continue;
        }
        let len = decode_varint(&mut body)?;
        if len > body.remaining() as u64 {
            return Err(WireError::Truncated);
        }
        if out.len() == MAX_MESSAGES_PER_FRAME_RECEIVED {
            return Err(WireError::TooManyMessages);
        }
        let inner = body.split_to(len as usize);
        let m = GroupMessageWire::decode(inner)?;
        out.push((m.group_id, parse_raft(&m.raft_message)?));
    }
    Ok(out)
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
