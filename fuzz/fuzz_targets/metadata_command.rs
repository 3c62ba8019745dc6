//! Feeds arbitrary bytes to the replicated metadata's decoders: as a metadata log entry
//! (`decode_entry`: the protobuf format, the JSON of earlier releases) and as a metadata
//! snapshot file (`decode_snapshot`). Whatever decodes must re-encode to something that
//! decodes to the same command, and must apply to a cluster state (and a state loaded from a
//! decoded snapshot must snapshot again) without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vdl_server::metadata::{ClusterMeta, MetaEntry, RequestId};
use vdl_server::metadata_codec::{decode_entry, decode_snapshot, encode_entry, encode_snapshot};

fuzz_target!(|data: &[u8]| {
    if let Ok((request, command)) = decode_entry(data) {
        let entry = MetaEntry {
            request: request.unwrap_or(RequestId {
                node: 1,
                boot: 1,
                seq: 1,
            }),
            command: command.clone(),
        };
        let (_, again) = decode_entry(&encode_entry(&entry)).expect("a re-encoded entry decodes");
        assert_eq!(again, command);
        let mut state = ClusterMeta::new(vec![1, 2, 3]);
        state.apply_to_state(1, request, command.clone());
        state.apply_to_state(2, None, command);
        let _ = state.to_snapshot(2, 1);
    }
    if let Ok(snapshot) = decode_snapshot(data) {
        let state = ClusterMeta::from_snapshot(vec![1, 2, 3], snapshot);
        let bytes = encode_snapshot(&state.to_snapshot(9, 1));
        decode_snapshot(&bytes).expect("a re-encoded snapshot decodes");
    }
});
