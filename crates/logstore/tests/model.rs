//! Property test: random operations against an in-memory model, checking every read.

mod common;

use bytes::Bytes;
use common::{assign_offsets, batch, batches_of};
use logstore::{
    EntryKind, LogStore, LogStoreError, NewEntry, RetentionPolicy, StoreConfig, SyncPolicy,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct ModelEntry {
    term: u64,
    kind: EntryKind,
    payload: Vec<u8>,
    context: Vec<u8>,
    first_offset: u64,
    count: u32,
}

#[derive(Debug, Default)]
struct Model {
    first_index: u64,
    prev_term: u64,
    start_offset: u64,
    entries: Vec<ModelEntry>,
}

impl Model {
    fn last_index(&self) -> u64 {
        self.first_index + self.entries.len() as u64 - 1
    }
    fn last_term(&self) -> u64 {
        self.entries.last().map_or(self.prev_term, |e| e.term)
    }
    fn next_offset(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.start_offset, |e| e.first_offset + u64::from(e.count))
    }
    /// Drops everything before `first` (a prefix deletion).
    fn drop_before(&mut self, first: u64) {
        let n = (first - self.first_index) as usize;
        if n == 0 {
            return;
        }
        self.prev_term = self.entries[n - 1].term;
        self.start_offset = self.entries[n - 1].first_offset + u64::from(self.entries[n - 1].count);
        self.entries.drain(..n);
        self.first_index = first;
    }
}

#[derive(Debug, Clone)]
enum EntrySpec {
    Records(Vec<(u8, i64, u8)>), // (records, timestamp, body length)
    Noop,
    Meta(u8),
    Conf(u8),
}

#[derive(Debug, Clone)]
enum Op {
    Append {
        entries: Vec<(EntrySpec, u8)>,
        term_bump: bool,
    },
    Truncate(f64),
    DeletePrefix(f64),
    Retention(f64),
    Sync,
    Reopen,
    Close,
    Snapshot(u8),
    HardState(u64),
}

fn entry_spec() -> impl Strategy<Value = EntrySpec> {
    prop_oneof![
        6 => prop::collection::vec((1u8..5, 0i64..1000, 0u8..120), 1..4).prop_map(EntrySpec::Records),
        1 => Just(EntrySpec::Noop),
        1 => any::<u8>().prop_map(EntrySpec::Meta),
        1 => any::<u8>().prop_map(EntrySpec::Conf),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (prop::collection::vec((entry_spec(), 0u8..8), 1..6), prop::bool::weighted(0.1))
            .prop_map(|(entries, term_bump)| Op::Append { entries, term_bump }),
        2 => (0.0f64..1.0).prop_map(Op::Truncate),
        1 => (0.0f64..1.0).prop_map(Op::DeletePrefix),
        1 => (0.0f64..1.0).prop_map(Op::Retention),
        2 => Just(Op::Sync),
        2 => Just(Op::Reopen),
        1 => Just(Op::Close),
        1 => (0u8..5).prop_map(Op::Snapshot),
        1 => any::<u64>().prop_map(Op::HardState),
    ]
}

fn config(cache: usize) -> StoreConfig {
    StoreConfig {
        segment_bytes: 1024,
        cache_bytes: cache,
        index_interval_bytes: 128,
        checkpoint_bytes: 300,
        sync_policy: SyncPolicy::Never,
        retention: RetentionPolicy {
            max_segments: Some(3),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn check(store: &LogStore, m: &Model, probe: u64) {
    assert_eq!(store.first_index(), m.first_index, "first_index");
    assert_eq!(store.last_index(), m.last_index(), "last_index");
    assert_eq!(store.last_term(), m.last_term(), "last_term");
    assert_eq!(store.next_offset(), m.next_offset(), "next_offset");
    assert_eq!(store.log_start_offset(), m.start_offset, "log_start_offset");
    assert_eq!(
        store.term(m.first_index - 1).unwrap(),
        m.prev_term,
        "term(first-1)"
    );
    assert_eq!(
        store.next_offset_after_index(m.first_index - 1).unwrap(),
        m.start_offset
    );
    if m.first_index >= 2 {
        assert!(matches!(
            store.term(m.first_index - 2),
            Err(LogStoreError::Compacted { .. })
        ));
    }
    assert!(matches!(
        store.term(m.last_index() + 1),
        Err(LogStoreError::Unavailable { .. })
    ));
    // Every entry by index.
    let all = store
        .entries(m.first_index, m.last_index() + 1, u64::MAX)
        .unwrap();
    assert_eq!(all.len(), m.entries.len());
    for (i, (e, me)) in all.iter().zip(&m.entries).enumerate() {
        let index = m.first_index + i as u64;
        assert_eq!(e.index, index);
        assert_eq!(e.term, me.term, "term of {index}");
        assert_eq!(e.kind, me.kind, "kind of {index}");
        assert_eq!(&e.payload[..], &me.payload[..], "payload of {index}");
        assert_eq!(&e.context[..], &me.context[..], "context of {index}");
        assert_eq!(e.first_offset, me.first_offset, "first offset of {index}");
        assert_eq!(e.record_count, me.count, "count of {index}");
        assert_eq!(store.term(index).unwrap(), me.term);
        assert_eq!(
            store.next_offset_after_index(index).unwrap(),
            me.first_offset + u64::from(me.count)
        );
    }
    // Size-limited reads from a probe position.
    if !m.entries.is_empty() {
        let lo = m.first_index + probe % m.entries.len() as u64;
        let max = probe % 700;
        let got = store.entries(lo, m.last_index() + 1, max).unwrap();
        assert!(!got.is_empty());
        let mut size = 0;
        let mut n = 0;
        for e in &all[(lo - m.first_index) as usize..] {
            if n > 0 && size + e.size() > max {
                break;
            }
            size += e.size();
            n += 1;
        }
        assert_eq!(got.len(), n, "entries({lo}, .., {max})");
    }
    // Reads by offset: every offset, with a probe-dependent size limit and visible end.
    let batches: Vec<(u64, u64, i64, Vec<u8>)> = m
        .entries
        .iter()
        .filter(|e| e.kind == EntryKind::Records)
        .flat_map(|e| {
            batches_of(&e.payload)
                .into_iter()
                .map(|(b, l, t, r)| (b, l, t, e.payload[r].to_vec()))
        })
        .collect();
    let next = m.next_offset();
    let visible = if probe % 3 == 0 {
        next
    } else {
        m.start_offset + (probe % (next - m.start_offset + 1))
    };
    for o in m.start_offset..=next {
        let max = (probe / 7) % 400;
        let got = store.read_records(o, max, visible).unwrap();
        let data: Vec<u8> = got.chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(data.len() as u64, got.bytes);
        let mut expect = Vec::new();
        let mut first = None;
        let mut next_o = o;
        for (b, l, _, bytes) in &batches {
            if *l < o {
                continue;
            }
            if *l >= visible || (!expect.is_empty() && expect.len() + bytes.len() > max as usize) {
                break;
            }
            first.get_or_insert(*b);
            expect.extend_from_slice(bytes);
            next_o = l + 1;
        }
        assert_eq!(
            got.first_batch_offset, first,
            "first batch reading from {o}"
        );
        assert_eq!(
            data, expect,
            "records from offset {o} max {max} visible {visible}"
        );
        assert_eq!(got.next_offset, next_o);
    }
    assert!(matches!(
        store.read_records(next + 1, 100, u64::MAX),
        Err(LogStoreError::OffsetOutOfRange { .. })
    ));
    if m.start_offset > 0 {
        assert!(store
            .read_records(m.start_offset - 1, 100, u64::MAX)
            .is_err());
    }
    // Time lookups.
    for ts in [-5i64, 0, (probe % 1000) as i64, 500, 999, 2000] {
        let want = batches.iter().find(|b| b.2 >= ts).map(|b| b.0);
        assert_eq!(
            store.offset_for_timestamp(ts).unwrap(),
            want,
            "offset_for_timestamp({ts})"
        );
    }
}

fn run(ops: Vec<Op>, cache: usize, probe_seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let mut store = Some(LogStore::open(&path, config(cache)).unwrap());
    let mut m = Model {
        first_index: 1,
        ..Default::default()
    };
    let mut term = 1u64;
    let mut probe = probe_seed;
    let mut hs = logstore::HardState::default();
    for op in ops {
        let s = store.as_mut().unwrap();
        match op {
            Op::Append { entries, term_bump } => {
                if term_bump {
                    term += 1;
                }
                term = term.max(m.last_term());
                let mut batch_entries = Vec::new();
                let mut next = m.next_offset();
                let base = m.last_index() + 1;
                for (k, (spec, ctx)) in entries.into_iter().enumerate() {
                    let index = base + k as u64;
                    let (kind, payload) = match spec {
                        EntrySpec::Records(bs) => {
                            let mut p = Vec::new();
                            for (i, (r, ts, len)) in bs.into_iter().enumerate() {
                                p.extend(batch(
                                    u32::from(r),
                                    ts,
                                    usize::from(len),
                                    index * 8 + i as u64,
                                ));
                            }
                            (EntryKind::Records, p)
                        }
                        EntrySpec::Noop => (EntryKind::Noop, Vec::new()),
                        EntrySpec::Meta(n) => (EntryKind::Meta, vec![n; usize::from(n) % 50]),
                        EntrySpec::Conf(n) => (
                            if n % 2 == 0 {
                                EntryKind::ConfChange
                            } else {
                                EntryKind::ConfChangeV2
                            },
                            vec![n; 10],
                        ),
                    };
                    let context = vec![ctx; usize::from(ctx)];
                    batch_entries.push(NewEntry {
                        index,
                        term,
                        kind,
                        payload: Bytes::from(payload.clone()),
                        context: Bytes::from(context.clone()),
                    });
                    let mut stored = payload;
                    let first = next;
                    if kind == EntryKind::Records {
                        next = assign_offsets(&mut stored, next);
                    }
                    m.entries.push(ModelEntry {
                        term,
                        kind,
                        payload: stored,
                        context,
                        first_offset: first,
                        count: (next - first) as u32,
                    });
                }
                let r = s.append(&batch_entries).unwrap();
                assert_eq!(r.last_index, m.last_index());
                assert_eq!(r.next_offset, m.next_offset());
            }
            Op::Truncate(f) => {
                let n = m.entries.len() as u64;
                let from = m.first_index + ((n + 1) as f64 * f) as u64;
                s.truncate_suffix(from).unwrap();
                m.entries.truncate((from - m.first_index).min(n) as usize);
            }
            Op::DeletePrefix(f) | Op::Retention(f) => {
                let n = m.entries.len() as u64;
                let floor = m.first_index + ((n + 1) as f64 * f) as u64;
                let old_first = m.first_index;
                let out = if matches!(op, Op::DeletePrefix(_)) {
                    s.delete_prefix(floor).unwrap()
                } else {
                    s.apply_retention(floor).unwrap()
                };
                assert!(out.first_index >= old_first);
                assert!(
                    out.first_index <= floor.max(old_first),
                    "deleted past the floor"
                );
                assert!(out.first_index <= m.last_index() + 1);
                m.drop_before(out.first_index);
                assert_eq!(out.log_start_offset, m.start_offset);
            }
            Op::Sync => s.sync().unwrap(),
            Op::Reopen => {
                drop(store.take());
                store = Some(LogStore::open(&path, config(cache)).unwrap());
                assert_eq!(store.as_ref().unwrap().hard_state(), hs);
            }
            Op::Close => {
                store.take().unwrap().close().unwrap();
                let s = LogStore::open(&path, config(cache)).unwrap();
                assert_eq!(s.recovery_report().tail_bytes_scanned, 0);
                store = Some(s);
            }
            Op::Snapshot(adv) => {
                let index = m.last_index() + u64::from(adv);
                term += 1;
                let next = m.next_offset() + u64::from(adv) * 3;
                s.install_snapshot(index, term, next).unwrap();
                m = Model {
                    first_index: index + 1,
                    prev_term: term,
                    start_offset: next,
                    entries: vec![],
                };
            }
            Op::HardState(x) => {
                hs = logstore::HardState {
                    term: x % 100,
                    vote: x % 3,
                    commit: x % 1000,
                };
                s.save_hard_state(&hs).unwrap();
            }
        }
        probe = probe
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        check(store.as_ref().unwrap(), &m, probe >> 20);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn matches_model(ops in prop::collection::vec(op(), 1..40), cache in prop_oneof![Just(0usize), Just(600), Just(1 << 20)], seed in any::<u64>()) {
        run(ops, cache, seed);
    }
}

#[test]
fn long_sequence_rolls_and_reopens() {
    // A deterministic longer run mixing everything, beyond what the random cases reach.
    let mut ops = Vec::new();
    for i in 0..120u32 {
        ops.push(Op::Append {
            entries: (0..(i % 5 + 1))
                .map(|k| {
                    (
                        EntrySpec::Records(vec![(
                            ((i + k) % 4 + 1) as u8,
                            i64::from(i * 7 % 1000),
                            (i % 90) as u8,
                        )]),
                        (k % 3) as u8,
                    )
                })
                .collect(),
            term_bump: i % 17 == 0,
        });
        match i % 13 {
            3 => ops.push(Op::Sync),
            5 => ops.push(Op::Reopen),
            7 => ops.push(Op::Truncate(0.9)),
            9 => ops.push(Op::Retention(0.5)),
            11 => ops.push(Op::Close),
            _ => {}
        }
    }
    run(ops, 600, 42);
}
