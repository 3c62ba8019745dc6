//! The hello an accepted peer connection opens with, read off the socket in any version this
//! node speaks (the byte layouts are in [`crate::replication::peer_wire`]), no byte past it.

use tokio::io::AsyncReadExt;

use super::{PeerFrameError, PeerStream};
use crate::replication::peer_wire::{self, Hello, WireError};

/// Reads a hello of any version this node speaks (see [`crate::replication::peer_wire`]), reading
/// no byte past it.
pub(super) async fn read_hello(sock: &mut Box<dyn PeerStream>) -> Result<Hello, PeerFrameError> {
    let hello_error = |e| match e {
        WireError::BadHello(why) => PeerFrameError::BadHello(why),
        e @ WireError::UnsupportedVersion(_) => PeerFrameError::UnsupportedVersion(e),
        _ => PeerFrameError::BadHello("malformed"),
    };
    let mut start = [0u8; 6];
    sock.read_exact(&mut start).await?;
    let version = peer_wire::check_hello_start(&start).map_err(hello_error)?;
    if version >= peer_wire::VERSION_3 {
        let mut len = [0u8; 4];
        sock.read_exact(&mut len).await?;
        let len = peer_wire::parse_v3_length(len).map_err(hello_error)?;
        let mut body = vec![0u8; len];
        sock.read_exact(&mut body).await?;
        return peer_wire::decode_v3_hello(&body).map_err(hello_error);
    }
    let mut head = [0u8; peer_wire::LEGACY_HEAD_BYTES];
    sock.read_exact(&mut head).await?;
    let (from, adv_len) = peer_wire::parse_legacy_head(&head).map_err(hello_error)?;
    let mut adv = vec![0u8; adv_len];
    sock.read_exact(&mut adv).await?;
    let advertised =
        String::from_utf8(adv).map_err(|_| PeerFrameError::BadHello("address not UTF-8"))?;
    peer_wire::check_advertised(&advertised).map_err(hello_error)?;
    let mut dirs = crate::replication::replicas::HelloDirs::default();
    if version >= peer_wire::VERSION_2 {
        let mut tail = [0u8; peer_wire::LEGACY_V2_TAIL_BYTES];
        sock.read_exact(&mut tail).await?;
        dirs = peer_wire::parse_legacy_v2_tail(&tail);
    }
    Ok(Hello {
        version,
        from,
        advertised,
        dirs,
        software_version: String::new(),
        installs_metadata_snapshots: false,
        appends_compacted_entries: false,
        listeners: Vec::new(),
    })
}
