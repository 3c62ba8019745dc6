//! The JSON entries of releases before the protobuf format: still read, and written while a
//! peer of such a release runs.

use crate::metadata::{MetaCommand, MetaEntry, RequestId};

use super::MetaDecodeError;

/// Encodes `entry` in the JSON of earlier releases (serde's encoding of [`MetaEntry`]), for a
/// cluster where a node of such a release still runs: it skips entries it cannot decode, and
/// its metadata would diverge from the others'.
pub fn encode_entry_json(entry: &MetaEntry) -> Vec<u8> {
    serde_json::to_vec(entry).expect("metadata entries serialize to JSON (strings and integers)")
}

/// The JSON entries of versions before the protobuf format.
pub(super) fn decode_json(
    data: &[u8],
) -> Result<(Option<RequestId>, MetaCommand), MetaDecodeError> {
    match serde_json::from_slice::<MetaEntry>(data) {
        Ok(e) => Ok((Some(e.request), e.command)),
        Err(_) => Ok((None, serde_json::from_slice::<MetaCommand>(data)?)),
    }
}
