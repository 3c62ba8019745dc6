//! Helpers shared by the integration tests.
#![allow(dead_code, missing_docs)]

pub mod compaction_util;
pub mod crash_util;
pub mod kv_codec;

use bytes::Bytes;
use logstore::{EntryKind, NewEntry};

/// A magic-2 Kafka record batch with `records` offsets, timestamps `ts ..= ts + records - 1`,
/// and `body_len` bytes of deterministic filler as "records". Its CRC is valid.
pub fn batch(records: u32, ts: i64, body_len: usize, seed: u64) -> Vec<u8> {
    assert!(records >= 1);
    let len = 61 + body_len;
    let mut b = vec![0u8; len];
    b[0..8].copy_from_slice(&(-1i64).to_be_bytes());
    b[8..12].copy_from_slice(&((len - 12) as i32).to_be_bytes());
    b[16] = 2;
    b[23..27].copy_from_slice(&((records - 1) as i32).to_be_bytes());
    b[27..35].copy_from_slice(&ts.to_be_bytes());
    b[35..43].copy_from_slice(&(ts + i64::from(records) - 1).to_be_bytes());
    b[43..51].copy_from_slice(&(-1i64).to_be_bytes());
    b[57..61].copy_from_slice(&(records as i32).to_be_bytes());
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for byte in &mut b[61..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *byte = x as u8;
    }
    let crc = crc32c_of(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// CRC-32C, bitwise (tests only; no extra dependency).
pub fn crc32c_of(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0x82F6_3B78 & mask);
        }
    }
    !crc
}

/// Sets the base offsets of the batches in `payload` as the store does.
pub fn assign_offsets(payload: &mut [u8], mut base: u64) -> u64 {
    let mut pos = 0;
    while pos < payload.len() {
        let len = 12 + i32::from_be_bytes(payload[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let delta = i32::from_be_bytes(payload[pos + 23..pos + 27].try_into().unwrap()) as u64;
        payload[pos..pos + 8].copy_from_slice(&(base as i64).to_be_bytes());
        base += delta + 1;
        pos += len;
    }
    base
}

/// (base offset, last offset, max timestamp, byte range) of each batch in a payload whose
/// offsets are assigned.
pub fn batches_of(payload: &[u8]) -> Vec<(u64, u64, i64, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < payload.len() {
        let base = i64::from_be_bytes(payload[pos..pos + 8].try_into().unwrap()) as u64;
        let len = 12 + i32::from_be_bytes(payload[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let delta = i32::from_be_bytes(payload[pos + 23..pos + 27].try_into().unwrap()) as u64;
        let max_ts = i64::from_be_bytes(payload[pos + 35..pos + 43].try_into().unwrap());
        out.push((base, base + delta, max_ts, pos..pos + len));
        pos += len;
    }
    out
}

/// A deterministic entry for index `index` (used by the crash tests: content is a function of
/// the index, so the checker needs no record of what was written).
pub fn det_entry(index: u64, term: u64) -> NewEntry {
    let kind = match index % 7 {
        3 => EntryKind::Noop,
        5 => EntryKind::Meta,
        _ => EntryKind::Records,
    };
    let payload = match kind {
        EntryKind::Records => {
            let mut p = batch(
                (index % 3 + 1) as u32,
                index as i64 * 10,
                (index % 97) as usize,
                index,
            );
            if index % 4 == 0 {
                p.extend(batch(2, index as i64 * 10 + 5, 13, index + 1));
            }
            p
        }
        EntryKind::Meta => format!("meta-{index}").into_bytes(),
        _ => Vec::new(),
    };
    NewEntry {
        index,
        term,
        kind,
        payload: Bytes::from(payload),
        context: Bytes::from(format!("ctx{index}")),
    }
}

/// Checks that a stored entry matches `det_entry(index, term)` (apart from base offsets).
pub fn check_det_entry(e: &logstore::Entry, term: u64) {
    let want = det_entry(e.index, term);
    assert_eq!(e.kind, want.kind, "kind of {}", e.index);
    assert_eq!(e.term, term, "term of {}", e.index);
    assert_eq!(e.context, want.context, "context of {}", e.index);
    let mut expect = want.payload.to_vec();
    if e.kind == EntryKind::Records {
        let next = assign_offsets(&mut expect, e.first_offset);
        assert_eq!(next, e.next_offset(), "record count of {}", e.index);
    } else {
        assert_eq!(e.record_count, 0);
    }
    assert_eq!(&e.payload[..], &expect[..], "payload of {}", e.index);
}

/// Installs a `FaultInjectingFs` for this test process, controlled by `dir/faults` (returned).
/// Once per process: a binary that uses it holds one test.
pub fn install_fault_injecting_fs(dir: &std::path::Path) -> std::path::PathBuf {
    let control = dir.join("faults");
    assert!(logstore::install_file_system(std::sync::Arc::new(
        logstore::FaultInjectingFs::new(&control).unwrap()
    )));
    control
}

/// Sets the faults and waits for the file system to read them (every 50 ms).
pub fn set_faults(control: &std::path::Path, faults: &str) {
    std::fs::write(control, faults).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(120));
}
