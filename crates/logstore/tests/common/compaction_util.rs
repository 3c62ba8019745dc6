//! Helpers of the compaction tests: a workload with a model of what it produced, reading
//! every record back, and the checks.
#![allow(dead_code, missing_docs)]

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use logstore::{CompactionPlan, Entry, EntryKind, LogStore, NewEntry, StoreConfig};

use super::kv_codec::{control_batch, kv_batch, records_of, KvRecord, Rec};

/// Appends `entries` to `to` as a Raft follower takes them: in appends of `chunk` entries
/// (segments may roll between them), each `Records` entry with the leader's record count so a
/// compacted entry keeps its offsets; then syncs.
pub fn append_as_follower(to: &mut LogStore, entries: &[Entry], chunk: usize) {
    for part in entries.chunks(chunk) {
        let new: Vec<NewEntry> = part.iter().map(new_entry).collect();
        let counts: Vec<Option<u32>> = part
            .iter()
            .map(|e| (e.kind == EntryKind::Records).then_some(e.record_count))
            .collect();
        to.append_unsynced_with_counts(&new, &counts).unwrap();
    }
    to.sync().unwrap();
}

/// `e` as the leader sends it to a follower (index, term, kind, payload, context).
pub fn new_entry(e: &Entry) -> NewEntry {
    NewEntry {
        index: e.index,
        term: e.term,
        kind: e.kind,
        payload: e.payload.clone(),
        context: e.context.clone(),
    }
}

pub fn cfg() -> StoreConfig {
    StoreConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        // Segment files end at their last frame (no zeros ahead of the writer), so they can
        // be compared byte for byte.
        preallocate_bytes: 0,
        ..Default::default()
    }
}

/// A produced record: key, value (`None`: a tombstone), timestamp.
pub type Produced = (Option<Vec<u8>>, Option<Vec<u8>>, i64);

/// What was produced: every record, and the latest per key.
#[derive(Default)]
pub struct Model {
    /// offset -> (key, value, timestamp)
    pub all: BTreeMap<u64, Produced>,
    pub latest: BTreeMap<Vec<u8>, u64>,
}

pub fn rec(key: &str, value: Option<&str>, ts: i64) -> Rec {
    Rec {
        key: Some(key.as_bytes().to_vec()),
        value: value.map(|v| v.as_bytes().to_vec()),
        ts,
    }
}

/// Appends one Records entry holding `batches`.
pub fn produce(s: &mut LogStore, m: &mut Model, batches: &[Vec<Rec>]) {
    let mut payload = Vec::new();
    let mut o = s.next_offset();
    for b in batches {
        payload.extend(kv_batch(b));
        for r in b {
            m.all.insert(o, (r.key.clone(), r.value.clone(), r.ts));
            if let Some(k) = &r.key {
                m.latest.insert(k.clone(), o);
            }
            o += 1;
        }
    }
    let index = s.last_index() + 1;
    s.append(&[NewEntry {
        index,
        term: 1 + index / 25,
        kind: EntryKind::Records,
        payload: Bytes::from(payload),
        context: Bytes::from(format!("ctx{index}")),
    }])
    .unwrap();
    assert_eq!(s.next_offset(), o);
}

pub fn append_other(s: &mut LogStore, kind: EntryKind, payload: Vec<u8>) {
    let index = s.last_index() + 1;
    s.append(&[NewEntry {
        index,
        term: 1 + index / 25,
        kind,
        payload: Bytes::from(payload),
        context: Bytes::new(),
    }])
    .unwrap();
}

/// A workload of `n` records over `keys` keys (values `v<n>`), in entries of one to three
/// batches, with Noop entries and control batches mixed in.
pub fn workload(s: &mut LogStore, m: &mut Model, n: u32, keys: u32, ts0: i64) {
    let mut i = 0;
    while i < n {
        let batches: Vec<Vec<Rec>> = (0..(i % 3 + 1))
            .map(|b| {
                (0..(b + i % 2 + 1))
                    .map(|j| {
                        let k = i + b * 7 + j;
                        rec(
                            &format!("key{}", k % keys),
                            Some(&format!("v{k}")),
                            ts0 + i64::from(k),
                        )
                    })
                    .collect()
            })
            .collect();
        i += batches.iter().map(|b| b.len() as u32).sum::<u32>();
        produce(s, m, &batches);
        if i % 5 == 0 {
            append_other(s, EntryKind::Noop, Vec::new());
        }
        if i % 11 == 0 {
            // A transaction marker: kept by every pass.
            let o = s.next_offset();
            let index = s.last_index() + 1;
            s.append(&[NewEntry {
                index,
                term: 1 + index / 25,
                kind: EntryKind::Records,
                payload: Bytes::from(control_batch(ts0 + i64::from(i))),
                context: Bytes::new(),
            }])
            .unwrap();
            m.all.insert(o, (None, None, ts0));
        }
    }
}

pub fn plan(s: &LogStore) -> CompactionPlan {
    CompactionPlan {
        clean_limit: s.last_index() + 1,
        now_ms: 1 << 40,
        min_compaction_lag_ms: 0,
        delete_retention_ms: 1 << 39,
        tombstone_limit: u64::MAX,
        key_map_bytes: 1 << 20,
    }
}

pub fn no_throttle() -> impl FnMut(u64) {
    |_| {}
}

/// Every data record readable from the log start on: (offset, key, value).
pub type Read = Vec<KvRecord>;

pub fn read_all(s: &LogStore) -> Read {
    let mut out = Vec::new();
    let mut from = s.log_start_offset();
    loop {
        let r = s.read_records(from, 700, s.next_offset()).unwrap();
        if r.chunks.is_empty() {
            break;
        }
        out.extend(records_of(&r.chunks).into_iter().filter(|x| x.0 >= from));
        from = r.next_offset;
    }
    out
}

/// Checks that `read` holds the latest record of every key at its offset, every record of
/// the sealed segments at or after `kept_from` (not compacted), and is in offset order.
pub fn check_latest(m: &Model, read: &Read, kept_from: u64) {
    let got: BTreeMap<u64, _> = read
        .iter()
        .map(|(o, k, v)| (*o, (k.clone(), v.clone())))
        .collect();
    assert_eq!(got.len(), read.len(), "an offset read twice");
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "offsets ascend");
    for (key, o) in &m.latest {
        let (k, v, _) = &m.all[o];
        if v.is_some() {
            assert_eq!(
                got.get(o),
                Some(&(k.clone(), v.clone())),
                "latest of {key:?} at {o}"
            );
        }
    }
    for (o, (k, v, _)) in m.all.range(kept_from..) {
        if k.is_some() {
            assert_eq!(
                got.get(o),
                Some(&(k.clone(), v.clone())),
                "uncompacted record {o}"
            );
        }
    }
    for (o, (k, v)) in &got {
        assert_eq!(
            m.all.get(o).map(|x| (&x.0, &x.1)),
            Some((k, v)),
            "record {o} as produced"
        );
        // No deleted key comes back: while an older record of a key is visible, so is its
        // latest record (a tombstone included).
        if let Some(key) = k {
            let latest = m.latest[key];
            assert!(
                got.contains_key(&latest),
                "record {o} of {key:?} visible without its latest record {latest}"
            );
        }
    }
}

pub fn entry_shape(s: &LogStore) -> Vec<(u64, u64, EntryKind, u64, u32, Bytes)> {
    s.entries(s.first_index(), s.last_index() + 1, u64::MAX)
        .unwrap()
        .into_iter()
        .map(|e| {
            (
                e.index,
                e.term,
                e.kind,
                e.first_offset,
                e.record_count,
                e.context,
            )
        })
        .collect()
}

pub fn active_bytes(s: &LogStore) -> (u64, Vec<u8>) {
    let a = s.segment_summaries().pop().unwrap();
    (
        a.base_index,
        std::fs::read(s.dir().join(format!("{:020}.log", a.base_index))).unwrap(),
    )
}

pub fn segment_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}
