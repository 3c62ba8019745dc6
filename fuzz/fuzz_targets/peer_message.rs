//! Feeds arbitrary bytes, as the body of a Raft peer frame, to the frame decoder (the first byte
//! picks the format: its low bit set, version 3's protobuf frames; clear, the frames of earlier
//! releases), then
//! every decoded message through both peer checks (`check_message` with the message's own
//! sender as the hello's and the metadata's forwarding checks, `check_in_group`) into a raft-rs node (node 1 of voters 1, 2, 3),
//! ticking it and handling its Readies as a group thread does. Nothing may panic: whatever the
//! checks let through must be safe to step.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use raft::storage::MemStorage;
use raft::RawNode;
use vdl_server::metadata::forwarded::MetadataForwarding;
use vdl_server::replication::peer_guard::{check_in_group, check_message, GroupLimits};
use vdl_server::replication::peer_wire::{decode_frame, FrameFormat};

fn node() -> RawNode<MemStorage> {
    let storage = MemStorage::new_with_conf_state((vec![1, 2, 3], vec![]));
    let cfg = raft::Config {
        id: 1,
        election_tick: 10,
        heartbeat_tick: 2,
        check_quorum: true,
        pre_vote: true,
        ..Default::default()
    };
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    RawNode::new(&cfg, storage, &logger).expect("a raft node")
}

/// Persists what is ready (entries, snapshot, hard state), then advances, as a group does.
fn handle_ready(n: &mut RawNode<MemStorage>) {
    if !n.has_ready() {
        return;
    }
    let mut rd = n.ready();
    let store = n.raft.raft_log.store.clone();
    if !rd.snapshot().is_empty() {
        let _ = store.wl().apply_snapshot(rd.snapshot().clone());
    }
    if !rd.entries().is_empty() {
        store.wl().append(rd.entries()).expect("append");
    }
    if let Some(hs) = rd.hs() {
        store.wl().set_hardstate(hs.clone());
    }
    let _ = rd.take_messages();
    let _ = rd.take_persisted_messages();
    let mut light = n.advance(rd);
    if let Some(commit) = light.commit_index() {
        store.wl().mut_hard_state().set_commit(commit);
    }
    let _ = light.take_messages();
    n.advance_apply();
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let format = if selector & 1 == 1 {
        FrameFormat::Prost
    } else {
        FrameFormat::Legacy
    };
    let Ok(messages) = decode_frame(format, Bytes::copy_from_slice(body)) else {
        return;
    };
    let mut n = node();
    for (group, mut m) in messages {
        // Group 1 stands for the metadata group (forwards proposals, never compacted).
        let metadata = group == 1;
        let limits = GroupLimits {
            forward_proposals: metadata,
            snapshots: !metadata,
            max_entry_bytes: 1 << 20,
            batch_entries_left: 1 << 16,
            batch_bytes_left: 64 << 20,
        };
        let hello = m.from;
        if check_message(1, hello, group, &m, &MetadataForwarding).is_ok()
            && check_in_group(&n.raft, &limits, &mut m).is_ok()
        {
            let _ = n.step(m);
        }
        for _ in 0..(group % 4) {
            n.tick();
        }
        if group % 2 == 0 {
            handle_ready(&mut n);
        }
    }
    handle_ready(&mut n);
});
