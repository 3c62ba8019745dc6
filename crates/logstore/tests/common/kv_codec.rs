//! A tiny record format for the compaction tests, inside real magic-2 batch headers (the
//! store reads only the header), and a `RecordCompactor` over it.
//!
//! Records after the 61-byte header, back to back: offset delta u32, timestamp i64, key
//! length i32 (-1: no key), key, value length i32 (-1: a tombstone), value (big-endian).
//! Attribute bit 0x20 marks a control batch. A rewritten batch keeps its baseOffset and
//! lastOffsetDelta, as Kafka's cleaner does. A data batch may carry a producer id (header
//! bytes 43..51, -1 for none); one that keeps no record stays as its header when the store
//! says it is its producer's last batch, as Kafka's cleaner does.
#![allow(dead_code, missing_docs)]

use logstore::{RecordCompactor, RecordView, RetainOutcome};

use super::crc32c_of;

/// One record to build: key, value (`None`: tombstone), timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub ts: i64,
}

/// A parsed record with its offset delta.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub delta: u32,
    pub ts: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

fn put_bytes(out: &mut Vec<u8>, b: &Option<Vec<u8>>) {
    match b {
        Some(b) => {
            out.extend_from_slice(&(b.len() as i32).to_be_bytes());
            out.extend_from_slice(b);
        }
        None => out.extend_from_slice(&(-1i32).to_be_bytes()),
    }
}

fn encode_records(recs: &[Parsed]) -> Vec<u8> {
    let mut body = Vec::new();
    for r in recs {
        body.extend_from_slice(&r.delta.to_be_bytes());
        body.extend_from_slice(&r.ts.to_be_bytes());
        put_bytes(&mut body, &r.key);
        put_bytes(&mut body, &r.value);
    }
    body
}

/// A batch with the given header fields and records.
fn assemble(
    base: i64,
    last_delta: u32,
    control: bool,
    producer_id: i64,
    recs: &[Parsed],
) -> Vec<u8> {
    let body = encode_records(recs);
    let len = 61 + body.len();
    let mut b = vec![0u8; len];
    b[0..8].copy_from_slice(&base.to_be_bytes());
    b[8..12].copy_from_slice(&((len - 12) as i32).to_be_bytes());
    b[16] = 2;
    let attrs: i16 = if control { 0x20 } else { 0 };
    b[21..23].copy_from_slice(&attrs.to_be_bytes());
    b[23..27].copy_from_slice(&(last_delta as i32).to_be_bytes());
    let base_ts = recs.iter().map(|r| r.ts).min().unwrap_or(-1);
    let max_ts = recs.iter().map(|r| r.ts).max().unwrap_or(-1);
    b[27..35].copy_from_slice(&base_ts.to_be_bytes());
    b[35..43].copy_from_slice(&max_ts.to_be_bytes());
    b[43..51].copy_from_slice(&producer_id.to_be_bytes());
    b[57..61].copy_from_slice(&(recs.len() as i32).to_be_bytes());
    b[61..].copy_from_slice(&body);
    let crc = crc32c_of(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// A data batch holding `recs` at consecutive offsets (base offset assigned by the store).
pub fn kv_batch(recs: &[Rec]) -> Vec<u8> {
    kv_producer_batch(-1, recs)
}

/// [`kv_batch`] written by the producer `producer_id` (-1: none).
pub fn kv_producer_batch(producer_id: i64, recs: &[Rec]) -> Vec<u8> {
    assert!(!recs.is_empty());
    let parsed: Vec<Parsed> = recs
        .iter()
        .enumerate()
        .map(|(i, r)| Parsed {
            delta: i as u32,
            ts: r.ts,
            key: r.key.clone(),
            value: r.value.clone(),
        })
        .collect();
    assemble(-1, recs.len() as u32 - 1, false, producer_id, &parsed)
}

/// A control batch (a transaction marker) of one record.
pub fn control_batch(ts: i64) -> Vec<u8> {
    let r = Parsed {
        delta: 0,
        ts,
        key: Some(b"\0\0\0\x01".to_vec()),
        value: Some(b"commit".to_vec()),
    };
    assemble(-1, 0, true, 7, &[r])
}

/// The producer id in a batch's header (-1: none).
pub fn producer_of(batch: &[u8]) -> i64 {
    i64::from_be_bytes(batch[43..51].try_into().unwrap())
}

fn be_i32(b: &[u8], at: usize) -> Result<i32, String> {
    b.get(at..at + 4)
        .map(|s| i32::from_be_bytes(s.try_into().unwrap()))
        .ok_or_else(|| format!("short at {at}"))
}

fn take(b: &[u8], at: &mut usize) -> Result<Option<Vec<u8>>, String> {
    let n = be_i32(b, *at)?;
    *at += 4;
    if n < 0 {
        return Ok(None);
    }
    let v = b
        .get(*at..*at + n as usize)
        .ok_or_else(|| format!("bytes overrun at {at}"))?
        .to_vec();
    *at += n as usize;
    Ok(Some(v))
}

/// Parses a batch: (base offset, last offset delta, control, records).
pub fn parse(batch: &[u8]) -> Result<(u64, u32, bool, Vec<Parsed>), String> {
    if batch.len() < 61 {
        return Err("short batch".into());
    }
    let base = i64::from_be_bytes(batch[0..8].try_into().unwrap());
    let control = i16::from_be_bytes(batch[21..23].try_into().unwrap()) & 0x20 != 0;
    let last_delta = be_i32(batch, 23)? as u32;
    let count = be_i32(batch, 57)?;
    let mut at = 61;
    let mut out = Vec::new();
    for _ in 0..count {
        let delta = be_i32(batch, at)? as u32;
        let ts = i64::from_be_bytes(
            batch
                .get(at + 4..at + 12)
                .ok_or("short timestamp")?
                .try_into()
                .unwrap(),
        );
        at += 12;
        let key = take(batch, &mut at)?;
        let value = take(batch, &mut at)?;
        out.push(Parsed {
            delta,
            ts,
            key,
            value,
        });
    }
    if at != batch.len() {
        return Err(format!("{} trailing bytes", batch.len() - at));
    }
    Ok((base as u64, last_delta, control, out))
}

/// The test codec.
pub struct KvCodec;

fn view(base: u64, control: bool, r: &Parsed) -> RecordView<'_> {
    RecordView {
        offset: base + u64::from(r.delta),
        key: r.key.as_deref(),
        tombstone: r.value.is_none(),
        timestamp_ms: r.ts,
        control,
    }
}

impl RecordCompactor for KvCodec {
    fn visit(&self, batch: &[u8], f: &mut dyn FnMut(RecordView<'_>)) -> Result<(), String> {
        let (base, _, control, recs) = parse(batch)?;
        for r in &recs {
            f(view(base, control, r));
        }
        Ok(())
    }

    fn producer_id(&self, batch: &[u8]) -> Option<i64> {
        let (_, _, control, _) = parse(batch).ok()?;
        let id = producer_of(batch);
        (!control && id != -1).then_some(id)
    }

    fn retain(
        &self,
        batch: &[u8],
        keep: &mut dyn FnMut(RecordView<'_>) -> bool,
        _delete_horizon_ms: Option<i64>,
        producer_last: bool,
    ) -> Result<RetainOutcome, String> {
        let (base, last_delta, control, recs) = parse(batch)?;
        let kept: Vec<Parsed> = recs
            .iter()
            .filter(|r| keep(view(base, control, r)))
            .cloned()
            .collect();
        let producer = producer_of(batch);
        let keep_header = producer_last && producer != -1 && !control;
        Ok(if kept.is_empty() && !keep_header {
            // An empty header (kept by an earlier pass) goes too.
            RetainOutcome::Empty
        } else if kept.len() == recs.len() {
            RetainOutcome::Unchanged
        } else {
            RetainOutcome::Rewritten(assemble(base as i64, last_delta, control, producer, &kept))
        })
    }
}

/// A data record as read back: offset, key, value (`None`: a tombstone).
pub type KvRecord = (u64, Option<Vec<u8>>, Option<Vec<u8>>);

/// Every data record of a read (`chunks` concatenated), control batches left out.
pub fn records_of(chunks: &[bytes::Bytes]) -> Vec<KvRecord> {
    let data: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let len = 12 + i32::from_be_bytes(data[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let (base, _, control, recs) = parse(&data[pos..pos + len]).unwrap();
        if !control {
            for r in recs {
                out.push((base + u64::from(r.delta), r.key, r.value));
            }
        }
        pos += len;
    }
    out
}
