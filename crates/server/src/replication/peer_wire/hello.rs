//! A hello's bytes in every version this node speaks: this node's encoded
//! ([`encode_hello_with_listeners`]), a peer's read piece by piece as it arrives (the first six
//! bytes, then a version 3 body or the fixed layout of versions 1 and 2), and the checks on
//! what a hello claims (`HOST:PORT` addresses, listener names). The layouts are in the
//! `peer_wire` module documentation.

use bytes::{Buf, BufMut, BytesMut};
use prost::Message as _;

use super::{WireError, VERSION_1, VERSION_3};
use crate::replication::replicas::HelloDirs;

/// First bytes of every hello.
pub const MAGIC: &[u8; 4] = b"VDLP";
/// Longest advertised Kafka address a hello may carry.
pub const MAX_ADVERTISED_BYTES: usize = 1024;
/// Largest protobuf body of a version 3 hello.
pub const MAX_HELLO_BYTES: usize = 4096;
/// Most Kafka listeners a hello may announce.
pub const MAX_HELLO_LISTENERS: usize = 16;
/// Longest listener name a hello may carry (Kafka's listener names are short identifiers).
pub const MAX_LISTENER_NAME_BYTES: usize = 64;
const FLAG_RECEIVER_REJOINING: u8 = 1;
const FLAG_SENDER_SETTLED: u8 = 2;
/// Bytes of a version 1 or 2 hello after magic and version, up to the advertised address.
pub const LEGACY_HEAD_BYTES: usize = 10;
/// Bytes of a version 2 hello after the advertised address.
pub const LEGACY_V2_TAIL_BYTES: usize = 33;

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
    /// The sender appends compacted `Records` entries (their record counts in the entry
    /// context, see `raft_storage`; false from releases before log compaction): only when
    /// every member does may a group's log be compacted.
    pub appends_compacted_entries: bool,
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
    /// The sender appends compacted entries carrying their record counts.
    #[prost(bool, tag = "10")]
    pub appends_compacted_entries: bool,
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
            appends_compacted_entries: true,
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
        appends_compacted_entries: wire.appends_compacted_entries,
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

#[cfg(test)]
#[path = "hello_tests.rs"]
mod tests;
