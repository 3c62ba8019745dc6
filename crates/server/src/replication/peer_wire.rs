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

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding::{
    decode_key, decode_varint, encode_key, encode_varint, encoded_len_varint, skip_field,
    DecodeContext, WireType,
};
use prost::Message as _;
use protobuf::Message as _;
use raft::prelude::Message;
use thiserror::Error;

use crate::replication::replicas::HelloDirs;

/// First bytes of every hello.
pub const MAGIC: &[u8; 4] = b"VDLP";
/// The first hello version (no directory ids); legacy frames.
pub const VERSION_1: u16 = 1;
/// The hello version with directory ids; legacy frames.
pub const VERSION_2: u16 = 2;
/// Protobuf hello and frames.
pub const VERSION_3: u16 = 3;
/// The version this node dials with unless the peer is known to be older.
pub const CURRENT_VERSION: u16 = VERSION_3;
/// Longest advertised Kafka address a hello may carry.
pub const MAX_ADVERTISED_BYTES: usize = 1024;
/// Largest protobuf body of a version 3 hello.
pub const MAX_HELLO_BYTES: usize = 4096;
/// Most Kafka listeners a hello may announce.
pub const MAX_HELLO_LISTENERS: usize = 16;
/// Longest listener name a hello may carry (Kafka's listener names are short identifiers).
pub const MAX_LISTENER_NAME_BYTES: usize = 64;
/// Most messages a received frame may carry (senders put at most 512 in one).
pub const MAX_MESSAGES_PER_FRAME_RECEIVED: usize = 8192;
const FLAG_RECEIVER_REJOINING: u8 = 1;
const FLAG_SENDER_SETTLED: u8 = 2;
/// Bytes of a version 1 or 2 hello after magic and version, up to the advertised address.
pub const LEGACY_HEAD_BYTES: usize = 10;
/// Bytes of a version 2 hello after the advertised address.
pub const LEGACY_V2_TAIL_BYTES: usize = 33;

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

/// What a hello says, whatever its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The hello's version (1, 2 or 3); fixes the connection's [`FrameFormat`].
    pub version: u16,
    /// The node the sender claims to be.
    pub from: u64,
    /// Its advertised Kafka address, `HOST:PORT`.
    pub advertised: String,
    /// What it says about data directories (all zero/false in version 1).
    pub dirs: HelloDirs,
    /// The sender's software version (version 3; empty before).
    pub software_version: String,
    /// The sender installs metadata snapshots sent through Raft (false from releases before
    /// them): only when every member does may the metadata log be compacted.
    pub installs_metadata_snapshots: bool,
    /// The sender's Kafka listeners: `(name, HOST:PORT)`, at most [`MAX_HELLO_LISTENERS`]
    /// (empty from releases before listeners: then `advertised` is its only address).
    pub listeners: Vec<(String, String)>,
}

/// `PeerHello` (see the module documentation for the schema).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PeerHelloWire {
    /// The sender's node id.
    #[prost(uint64, tag = "1")]
    pub from_node: u64,
    /// The sender's advertised Kafka address.
    #[prost(string, tag = "2")]
    pub advertised: String,
    /// The sender's data directory id: 16 bytes big-endian, or empty.
    #[prost(bytes = "vec", tag = "3")]
    pub directory_id: Vec<u8>,
    /// The directory id the sender knows for the receiver: 16 bytes big-endian, or empty.
    #[prost(bytes = "vec", tag = "4")]
    pub known_directory_of_receiver: Vec<u8>,
    /// The sender considers the receiver to be rejoining.
    #[prost(bool, tag = "5")]
    pub receiver_rejoining: bool,
    /// The sender is not in rejoin mode itself.
    #[prost(bool, tag = "6")]
    pub sender_settled: bool,
    /// The sender's vdl version, for logs.
    #[prost(string, tag = "7")]
    pub software_version: String,
    /// The sender installs metadata snapshots sent through Raft.
    #[prost(bool, tag = "8")]
    pub installs_metadata_snapshots: bool,
    /// The sender's Kafka listeners, by name.
    #[prost(message, repeated, tag = "9")]
    pub listeners: Vec<KafkaListenerWire>,
}

/// `KafkaListener`: one Kafka listener of a hello's sender.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KafkaListenerWire {
    /// The listener's name (`PLAINTEXT`, `SASL_SSL`, ...).
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its advertised `HOST:PORT`.
    #[prost(string, tag = "2")]
    pub advertised: String,
}

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

fn dir_bytes(dir: u128) -> Vec<u8> {
    if dir == 0 {
        Vec::new()
    } else {
        dir.to_be_bytes().to_vec()
    }
}

fn dir_from_bytes(b: &[u8]) -> Result<u128, WireError> {
    match b.len() {
        0 => Ok(0),
        16 => Ok(u128::from_be_bytes(b.try_into().expect("16 bytes"))),
        _ => Err(WireError::BadHello("directory id is not 16 bytes")),
    }
}

/// Encodes this node's hello in `version` (3, or the 2 or 1 of a peer of an earlier release;
/// version 1 carries no directory ids). An advertised address longer than
/// [`MAX_ADVERTISED_BYTES`] is cut.
pub fn encode_hello(version: u16, from: u64, advertised: &str, dirs: HelloDirs) -> Vec<u8> {
    encode_hello_with_listeners(version, from, advertised, &[], dirs)
}

/// [`encode_hello`] announcing this node's Kafka listeners `(name, HOST:PORT)` too (version 3
/// only; earlier versions cannot carry them). At most [`MAX_HELLO_LISTENERS`] are sent.
pub fn encode_hello_with_listeners(
    version: u16,
    from: u64,
    advertised: &str,
    listeners: &[(String, String)],
    dirs: HelloDirs,
) -> Vec<u8> {
    let mut cut = advertised.len().min(MAX_ADVERTISED_BYTES);
    while !advertised.is_char_boundary(cut) {
        cut -= 1;
    }
    let advertised = &advertised[..cut];
    let mut out = BytesMut::with_capacity(64 + advertised.len());
    out.put_slice(MAGIC);
    if version >= VERSION_3 {
        out.put_u16(VERSION_3);
        let wire = PeerHelloWire {
            from_node: from,
            advertised: advertised.to_string(),
            directory_id: dir_bytes(dirs.dir),
            known_directory_of_receiver: dir_bytes(dirs.known_dir_of_receiver),
            receiver_rejoining: dirs.receiver_rejoining,
            sender_settled: dirs.sender_settled,
            software_version: env!("CARGO_PKG_VERSION").to_string(),
            installs_metadata_snapshots: true,
            listeners: listeners
                .iter()
                .take(MAX_HELLO_LISTENERS)
                .map(|(name, advertised)| KafkaListenerWire {
                    name: name.clone(),
                    advertised: advertised.clone(),
                })
                .collect(),
        };
        let body = wire.encode_to_vec();
        out.put_u32(body.len() as u32);
        out.put_slice(&body);
    } else {
        let version = version.max(VERSION_1);
        out.put_u16(version);
        out.put_u64(from);
        out.put_u16(advertised.len() as u16);
        out.put_slice(advertised.as_bytes());
        if version == VERSION_1 {
            return out.to_vec();
        }
        out.put_u128(dirs.dir);
        out.put_u128(dirs.known_dir_of_receiver);
        let mut flags = 0u8;
        if dirs.receiver_rejoining {
            flags |= FLAG_RECEIVER_REJOINING;
        }
        if dirs.sender_settled {
            flags |= FLAG_SENDER_SETTLED;
        }
        out.put_u8(flags);
    }
    out.to_vec()
}

/// Checks the first six bytes of a hello and returns its version.
pub fn check_hello_start(start: &[u8; 6]) -> Result<u16, WireError> {
    if &start[..4] != MAGIC {
        return Err(WireError::BadHello("magic"));
    }
    let version = u16::from_be_bytes([start[4], start[5]]);
    match version {
        VERSION_1..=VERSION_3 => Ok(version),
        _ => Err(WireError::UnsupportedVersion(version)),
    }
}

/// Parses the [`LEGACY_HEAD_BYTES`] after magic and version of a version 1 or 2 hello: the
/// claimed node id and the advertised address's length (at most [`MAX_ADVERTISED_BYTES`]).
pub fn parse_legacy_head(head: &[u8; LEGACY_HEAD_BYTES]) -> Result<(u64, usize), WireError> {
    let mut h = &head[..];
    let from = h.get_u64();
    let len = usize::from(h.get_u16());
    if len > MAX_ADVERTISED_BYTES {
        return Err(WireError::BadHello("advertised address too long"));
    }
    Ok((from, len))
}

/// Parses the [`LEGACY_V2_TAIL_BYTES`] that end a version 2 hello.
pub fn parse_legacy_v2_tail(tail: &[u8; LEGACY_V2_TAIL_BYTES]) -> HelloDirs {
    let mut t = &tail[..];
    let dir = t.get_u128();
    let known_dir_of_receiver = t.get_u128();
    let flags = t.get_u8();
    HelloDirs {
        dir,
        known_dir_of_receiver,
        receiver_rejoining: flags & FLAG_RECEIVER_REJOINING != 0,
        sender_settled: flags & FLAG_SENDER_SETTLED != 0,
    }
}

/// The body length a version 3 hello announces (at most [`MAX_HELLO_BYTES`]).
pub fn parse_v3_length(len: [u8; 4]) -> Result<usize, WireError> {
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_HELLO_BYTES {
        return Err(WireError::BadHello("hello too long"));
    }
    Ok(len)
}

/// Decodes a version 3 hello's protobuf body and checks its fields.
pub fn decode_v3_hello(body: &[u8]) -> Result<Hello, WireError> {
    let wire = PeerHelloWire::decode(body).map_err(|_| WireError::BadHello("undecodable"))?;
    if wire.advertised.len() > MAX_ADVERTISED_BYTES {
        return Err(WireError::BadHello("advertised address too long"));
    }
    if wire.listeners.len() > MAX_HELLO_LISTENERS {
        return Err(WireError::BadHello("too many listeners"));
    }
    let mut listeners = Vec::with_capacity(wire.listeners.len());
    for l in wire.listeners {
        if !valid_listener_name(&l.name) {
            return Err(WireError::BadHello("bad listener name"));
        }
        if l.advertised.len() > MAX_ADVERTISED_BYTES {
            return Err(WireError::BadHello("advertised address too long"));
        }
        check_advertised(&l.advertised)?;
        listeners.push((l.name, l.advertised));
    }
    let hello = Hello {
        listeners,
        version: VERSION_3,
        from: wire.from_node,
        dirs: HelloDirs {
            dir: dir_from_bytes(&wire.directory_id)?,
            known_dir_of_receiver: dir_from_bytes(&wire.known_directory_of_receiver)?,
            receiver_rejoining: wire.receiver_rejoining,
            sender_settled: wire.sender_settled,
        },
        advertised: wire.advertised,
        software_version: wire.software_version,
        installs_metadata_snapshots: wire.installs_metadata_snapshots,
    };
    check_advertised(&hello.advertised)?;
    Ok(hello)
}

/// Whether `name` is a listener name a node may announce: 1 to [`MAX_LISTENER_NAME_BYTES`]
/// of `[A-Za-z0-9_-]` (what `kafka.listeners` accepts).
pub fn valid_listener_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_LISTENER_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Refuses an advertised address that is not `HOST:PORT`.
pub fn check_advertised(a: &str) -> Result<(), WireError> {
    if valid_advertised(a) {
        Ok(())
    } else {
        Err(WireError::BadHello("advertised address is not HOST:PORT"))
    }
}

/// Whether `a` looks like the `HOST:PORT` a node advertises: printable ASCII without spaces,
/// a non-empty host, a port number.
pub fn valid_advertised(a: &str) -> bool {
    let Some((host, port)) = a.rsplit_once(':') else {
        return false;
    };
    !host.is_empty() && a.bytes().all(|b| b.is_ascii_graphic()) && port.parse::<u16>().is_ok()
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

/// The hello version each peer last dialed this node with: a peer of an earlier release
/// (version 1 or 2) is dialed back in its version, everyone else in [`CURRENT_VERSION`].
#[derive(Debug, Default)]
pub struct PeerVersions {
    heard: Mutex<HashMap<u64, u16>>,
    /// Per peer: whether its last hello said it installs metadata snapshots.
    metadata_snapshots: Mutex<HashMap<u64, bool>>,
}

impl PeerVersions {
    /// Records that `peer`'s admitted hello had `version`; logs when a peer's version changes.
    pub fn heard(&self, peer: u64, version: u16, software_version: &str) {
        let before = self
            .heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(peer, version);
        if before == Some(version) {
            return;
        }
        if version < VERSION_3 {
            tracing::info!(
                peer,
                version,
                "peer speaks peer protocol version {version} (an earlier release): \
                 it is sent version {version} hellos and frames"
            );
        } else if before.is_some() {
            tracing::info!(
                peer,
                version,
                %software_version,
                "peer now speaks peer protocol version {version}"
            );
        }
    }

    /// Records whether `peer`'s last admitted hello said it installs metadata snapshots.
    pub fn heard_metadata_snapshots(&self, peer: u64, installs: bool) {
        self.metadata_snapshots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(peer, installs);
    }

    /// Whether every one of `peers` has said, in its last hello to this node, that it installs
    /// metadata snapshots (a peer not heard from since this node started has not).
    pub fn all_install_metadata_snapshots(&self, peers: &[u64]) -> bool {
        let heard = self
            .metadata_snapshots
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        peers.iter().all(|p| heard.get(p) == Some(&true))
    }

    /// Whether some peer's last hello was of an earlier release (version 1 or 2).
    pub fn any_earlier_release(&self) -> bool {
        self.heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .any(|v| *v < VERSION_3)
    }

    /// The hello version to dial `peer` with.
    pub fn dial_version(&self, peer: u64) -> u16 {
        let heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        match heard.get(&peer) {
            Some(&v) if v < VERSION_3 => v,
            _ => CURRENT_VERSION,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::prelude::{Entry, MessageType};

    fn dirs() -> HelloDirs {
        HelloDirs {
            dir: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            known_dir_of_receiver: 0,
            receiver_rejoining: true,
            sender_settled: true,
        }
    }

    /// Parses a whole hello as the listener does, from bytes in memory.
    fn parse_hello(b: &[u8]) -> Result<Hello, WireError> {
        let start: [u8; 6] = b.get(..6).ok_or(WireError::Truncated)?.try_into().unwrap();
        let version = check_hello_start(&start)?;
        let rest = &b[6..];
        if version == VERSION_3 {
            let len = parse_v3_length(
                rest.get(..4)
                    .ok_or(WireError::Truncated)?
                    .try_into()
                    .unwrap(),
            )?;
            return decode_v3_hello(rest.get(4..4 + len).ok_or(WireError::Truncated)?);
        }
        let head = rest.get(..LEGACY_HEAD_BYTES).ok_or(WireError::Truncated)?;
        let (from, len) = parse_legacy_head(head.try_into().unwrap())?;
        let rest = &rest[LEGACY_HEAD_BYTES..];
        let advertised = String::from_utf8(rest[..len].to_vec()).unwrap();
        let dirs = if version == VERSION_2 {
            parse_legacy_v2_tail(rest[len..len + LEGACY_V2_TAIL_BYTES].try_into().unwrap())
        } else {
            HelloDirs::default()
        };
        Ok(Hello {
            version,
            from,
            advertised,
            dirs,
            software_version: String::new(),
            installs_metadata_snapshots: false,
            listeners: Vec::new(),
        })
    }

    /// Version 3 hellos carry every Kafka listener; bad ones refuse the hello.
    #[test]
    fn hellos_carry_listeners() {
        let listeners = vec![
            ("PLAINTEXT".to_string(), "h:9092".to_string()),
            ("SASL_SSL".to_string(), "h:9093".to_string()),
        ];
        let bytes = encode_hello_with_listeners(VERSION_3, 7, "h:9092", &listeners, dirs());
        assert_eq!(parse_hello(&bytes).unwrap().listeners, listeners);
        // Versions 1 and 2 cannot carry them (an older node reads only `advertised`).
        let v2 = encode_hello_with_listeners(VERSION_2, 7, "h:9092", &listeners, dirs());
        assert!(parse_hello(&v2).unwrap().listeners.is_empty());
        for bad in [("", "h:1"), ("A B", "h:1"), ("OK", "nohostport")] {
            let l = vec![(bad.0.to_string(), bad.1.to_string())];
            let bytes = encode_hello_with_listeners(VERSION_3, 7, "h:1", &l, dirs());
            assert!(parse_hello(&bytes).is_err(), "{bad:?}");
        }
        let many: Vec<(String, String)> = (0..MAX_HELLO_LISTENERS + 1)
            .map(|i| (format!("L{i}"), "h:1".to_string()))
            .collect();
        let wire = PeerHelloWire {
            from_node: 7,
            advertised: "h:1".into(),
            listeners: many
                .into_iter()
                .map(|(name, advertised)| KafkaListenerWire { name, advertised })
                .collect(),
            ..Default::default()
        };
        assert!(decode_v3_hello(&wire.encode_to_vec()).is_err());
    }

    #[test]
    fn hellos_round_trip_in_both_versions() {
        for version in [VERSION_1, VERSION_2, VERSION_3] {
            let bytes = encode_hello(version, 7, "kafka-7.example:9092", dirs());
            let hello = parse_hello(&bytes).unwrap();
            assert_eq!(hello.version, version);
            assert_eq!(hello.from, 7);
            assert_eq!(hello.advertised, "kafka-7.example:9092");
            let sent = if version == VERSION_1 {
                HelloDirs::default()
            } else {
                dirs()
            };
            assert_eq!(hello.dirs, sent);
        }
        // Version 1 is exactly the earlier release's layout.
        let mut v1 = b"VDLP\x00\x01".to_vec();
        v1.extend_from_slice(&7u64.to_be_bytes());
        v1.extend_from_slice(&3u16.to_be_bytes());
        v1.extend_from_slice(b"h:1");
        assert_eq!(encode_hello(VERSION_1, 7, "h:1", dirs()), v1);
        let v3 = parse_hello(&encode_hello(VERSION_3, 7, "h:1", HelloDirs::default())).unwrap();
        assert_eq!(v3.software_version, env!("CARGO_PKG_VERSION"));
        assert_eq!(v3.dirs, HelloDirs::default());
    }

    /// The field numbers of `PeerHello` are the wire format.
    #[test]
    fn hello_field_numbers_are_fixed() {
        let mut expected = b"VDLP\x00\x03".to_vec();
        let body = [
            0x08, 0x05, // from_node = 5
            0x12, 0x03, b'h', b':', b'1', // advertised = "h:1"
            0x30, 0x01, // sender_settled = true
        ];
        expected.extend_from_slice(&(body.len() as u32).to_be_bytes());
        expected.extend_from_slice(&body);
        let hello = parse_hello(&expected).unwrap();
        assert_eq!((hello.from, hello.advertised.as_str()), (5, "h:1"));
        assert!(hello.dirs.sender_settled && !hello.dirs.receiver_rejoining);
        // A directory id of another length than 16 is refused; an empty one is none.
        for (dir, ok) in [
            (vec![], true),
            (vec![1u8; 5], false),
            (vec![1u8; 17], false),
        ] {
            let wire = PeerHelloWire {
                from_node: 5,
                advertised: "h:1".into(),
                directory_id: dir,
                ..Default::default()
            };
            assert_eq!(decode_v3_hello(&wire.encode_to_vec()).is_ok(), ok);
        }
        let err = check_hello_start(b"VDLP\x00\x04").unwrap_err();
        assert!(err.to_string().contains("version 4"), "{err}");
        assert!(parse_v3_length((MAX_HELLO_BYTES as u32 + 1).to_be_bytes()).is_err());
    }

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

    #[test]
    fn peers_heard_in_an_old_version_are_dialed_in_it() {
        let v = PeerVersions::default();
        assert_eq!(v.dial_version(2), VERSION_3);
        assert!(!v.any_earlier_release());
        v.heard(2, VERSION_1, "");
        assert!(v.any_earlier_release());
        assert_eq!(v.dial_version(2), VERSION_1);
        v.heard(2, VERSION_2, "");
        assert_eq!(v.dial_version(2), VERSION_2);
        v.heard(2, VERSION_3, "0.2.0");
        assert_eq!(v.dial_version(2), VERSION_3);
        assert!(!v.any_earlier_release());
        assert_eq!(v.dial_version(3), VERSION_3);
        // Metadata log compaction waits for every peer to have said it installs snapshots.
        assert!(!v.all_install_metadata_snapshots(&[2, 3]));
        v.heard_metadata_snapshots(2, true);
        assert!(!v.all_install_metadata_snapshots(&[2, 3]));
        v.heard_metadata_snapshots(3, true);
        assert!(v.all_install_metadata_snapshots(&[2, 3]));
        v.heard_metadata_snapshots(3, false);
        assert!(!v.all_install_metadata_snapshots(&[2, 3]));
        assert!(v.all_install_metadata_snapshots(&[]));
    }

    #[test]
    fn advertised_addresses_are_host_and_port() {
        for ok in ["127.0.0.1:9092", "kafka-1.example:9092", "[::1]:9092"] {
            assert!(valid_advertised(ok), "{ok}");
        }
        for bad in [
            "",
            ":9092",
            "host",
            "host:",
            "host:99999",
            "ho st:1",
            "h\u{e9}:1",
        ] {
            assert!(!valid_advertised(bad), "{bad}");
        }
    }
}
