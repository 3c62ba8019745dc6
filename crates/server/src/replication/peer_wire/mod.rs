//! The bytes of the peer protocol: hellos and frames, in the current version (3, protobuf via
//! prost) and in the versions of earlier nodes (1 and 2, fixed binary layouts), and which one
//! each peer speaks. The socket handling around them is in [`crate::replication::transport`].
//!
//! ```text
//! connection := hello frame*
//! hello      := magic "VDLP" (4) | version u16 (big-endian) | rest
//!   version 3:  rest := hello_len u32 | PeerHello (protobuf, hello_len <= MAX_HELLO_BYTES)
//!   version 2:  rest := from_node u64 | advertised_len u16 | advertised | directory_id u128
//!                       | known_directory_of_receiver u128 | flags u8
//!   version 1:  rest := from_node u64 | advertised_len u16 | advertised
//! frame      := frame_len u32 | body                 -- frame_len counts the body's bytes
//!   version 3:  body := PeerFrame (protobuf)
//!   versions 1, 2: body := (group_id u64 | msg_len u32 | raft Message)*
//! ```
//!
//! The protobuf messages (field numbers are the wire format: never reuse or renumber one; a new
//! field takes a new number and nodes that do not know it ignore it, so additions need no new
//! version):
//!
//! ```text
//! message PeerHello {
//!   uint64 from_node = 1;
//!   string advertised = 2;                    // HOST:PORT of the Kafka listener
//!   bytes directory_id = 3;                   // 16 bytes big-endian, or empty: none
//!   bytes known_directory_of_receiver = 4;    // 16 bytes big-endian, or empty: none
//!   bool receiver_rejoining = 5;
//!   bool sender_settled = 6;
//!   string software_version = 7;              // the sender's vdl version, for logs
//!   bool installs_metadata_snapshots = 8;     // the sender takes metadata snapshots through
//!                                             // Raft, so metadata logs may be compacted
//!   repeated KafkaListener listeners = 9;     // every Kafka listener of the sender, so
//!                                             // Metadata can answer on each listener with
//!                                             // that listener's address of every node
//!   bool appends_compacted_entries = 10;      // the sender appends compacted Records
//!                                             // entries (record counts in the context), so
//!                                             // groups may compact their logs
//! }
//! message KafkaListener { string name = 1; string advertised = 2; }
//! message PeerFrame    { repeated GroupMessage messages = 1; }
//! message GroupMessage { uint64 group_id = 1; bytes raft_message = 2; }
//! ```
//!
//! `raft_message` is raft-rs's `eraftpb.Message` encoded by raft-rs's own codec (the `protobuf`
//! crate: raft-proto's `prost-codec` feature would run `protoc` at build time).
//!
//! **Talking to the previous version.** A node accepts hellos of versions 1, 2 and 3 and reads
//! each connection's frames in its hello's version. It dials with version 3, except a peer
//! whose last hello to this node was version 1 or 2 (a node of an earlier release, which
//! refuses a version 3 hello): that peer is dialed with a hello of its version and frames of
//! versions 1 and 2 ([`PeerVersions`]). Every node keeps a connection open to every peer, so an
//! old node's hello arrives within its reconnect backoff and the two then talk in its format;
//! when it is upgraded, its next hello says 3 and this node switches back. A hello of a version
//! above 3 (a later incompatible release) is refused with a log line naming the version.
//!
//! This file holds the version numbers, [`FrameFormat`] and [`WireError`]; each submodule does
//! one job:
//! - `hello`: a hello's bytes in every version: encoding this node's, reading a peer's piece
//!   by piece ([`check_hello_start`], then the rest of its version), and the checks on what it
//!   claims (advertised addresses, listener names);
//! - `frame`: a frame's bytes in both formats: [`FrameWriter`] builds one, [`decode_frame`]
//!   splits one into its messages, bounded;
//! - `versions`: which version each peer speaks ([`PeerVersions`]).

use thiserror::Error;

mod frame;
mod hello;
mod versions;

pub use frame::{
    decode_frame, FrameWriter, GroupMessageWire, PeerFrameWire, MAX_MESSAGES_PER_FRAME_RECEIVED,
};
pub use hello::{
    check_advertised, check_hello_start, decode_v3_hello, encode_hello,
    encode_hello_with_listeners, parse_legacy_head, parse_legacy_v2_tail, parse_v3_length,
    valid_advertised, valid_listener_name, Hello, KafkaListenerWire, PeerHelloWire,
    LEGACY_HEAD_BYTES, LEGACY_V2_TAIL_BYTES, MAGIC, MAX_ADVERTISED_BYTES, MAX_HELLO_BYTES,
    MAX_HELLO_LISTENERS, MAX_LISTENER_NAME_BYTES,
};
pub use versions::PeerVersions;

/// The first hello version (no directory ids); legacy frames.
pub const VERSION_1: u16 = 1;
/// The hello version with directory ids; legacy frames.
pub const VERSION_2: u16 = 2;
/// Protobuf hello and frames.
pub const VERSION_3: u16 = 3;
/// The version this node dials with unless the peer is known to be older.
pub const CURRENT_VERSION: u16 = VERSION_3;

/// How a connection's frames are laid out, fixed by its hello's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameFormat {
    /// Versions 1 and 2: `(group u64 | len u32 | message)*`.
    Legacy,
    /// Version 3: a protobuf `PeerFrame`.
    Prost,
}

impl FrameFormat {
    /// The frame format of hello version `version` (a version this node accepts).
    pub fn of_version(version: u16) -> FrameFormat {
        if version >= VERSION_3 {
            FrameFormat::Prost
        } else {
            FrameFormat::Legacy
        }
    }
}

/// Why hello or frame bytes were refused.
#[derive(Debug, Error)]
pub enum WireError {
    /// The hello is malformed.
    #[error("bad hello: {0}")]
    BadHello(&'static str),
    /// The hello's version is not one this node speaks.
    #[error(
        "peer protocol version {0} is not supported (this node speaks versions {VERSION_1} to {CURRENT_VERSION}); is the peer a newer release?"
    )]
    UnsupportedVersion(u16),
    /// A message runs past the end of its frame.
    #[error("truncated message in frame")]
    Truncated,
    /// A frame carries more than [`MAX_MESSAGES_PER_FRAME_RECEIVED`] messages.
    #[error("frame carries more than {MAX_MESSAGES_PER_FRAME_RECEIVED} messages")]
    TooManyMessages,
    /// The frame's protobuf envelope did not decode.
    #[error("undecodable frame: {0}")]
    Envelope(#[from] prost::DecodeError),
    /// A raft message did not decode.
    #[error("undecodable raft message: {0}")]
    Protobuf(String),
}
