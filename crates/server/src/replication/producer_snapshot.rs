//! Saving a partition's idempotent-producer table (see [`super::producers`]) so a restart
//! remembers every producer, not only those seen in the part of the log it replays.
//!
//! Each replica writes the file `producers` in the stream's directory every
//! [`SNAPSHOT_EVERY_ENTRIES`] applied entries (when it knows any producer) and when the group
//! stops; a restart loads it and replays the committed log after the index it holds. Written
//! atomically (temp file, fsync, rename, fsync directory) through logstore; a file that fails
//! its checks is ignored with a warning (the table is then rebuilt from the log alone, as
//! before the file existed).
//!
//! Layout, little-endian:
//!
//! ```text
//! "VDLP" | version u16 = 2 | flags u16 = 0 | applied_through u64 | stamp u64 | count u32 |
//! count x ( producer_id i64 | epoch i16 | stamp u64 | n u8 (<= 5) |
//!           n x ( first_seq i32 | last_seq i32 | base_offset u64 ) ) |
//! open u32 | open x ( producer_id i64 | first_offset u64 ) |
//! aborted u32 | aborted x ( producer_id i64 | first_offset u64 | last_offset u64 ) |
//! crc u32 (CRC-32C of everything before it)
//! ```
//!
//! Version 2 added the two transaction sections (see [`super::transactions`]): the open
//! transactions and the aborted ones still in the log. A version 1 file (written before
//! transactions) is still read, as a table with no transaction open or aborted: true of every
//! log those versions wrote, since their produce path refused transactional batches.

use std::path::Path;

use super::producers::{ProducerState, ProducerTable, MAX_PRODUCERS};
use super::transactions::{AbortedTxn, Transactions};

/// The file's name in a stream's directory.
pub const SNAPSHOT_FILE: &str = "producers";

/// Applied entries between two saves of a table that knows producers: well inside the
/// [`super::producers::REBUILD_MAX_ENTRIES`] a restart replays, so the replay always reaches
/// back to the newest save.
pub const SNAPSHOT_EVERY_ENTRIES: u64 = 20_000;

const MAGIC: &[u8; 4] = b"VDLP";
const VERSION: u16 = 2;
/// The version written before transactions (no transaction sections), still read.
const VERSION_1: u16 = 1;
const OPEN_BYTES: usize = 8 + 8;
const ABORTED_BYTES: usize = 8 + 8 + 8;
const HEAD_BYTES: usize = 4 + 2 + 2 + 8 + 8 + 4;
const PRODUCER_HEAD_BYTES: usize = 8 + 2 + 8 + 1;
const BATCH_BYTES: usize = 4 + 4 + 8;
/// Batches a producer may hold in the file (Kafka's five).
const MAX_BATCHES: u8 = 5;

/// Why a saved producer table was not taken.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading the file failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The bytes are not a producer table this version wrote.
    #[error("{path}: {reason}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong.
        reason: &'static str,
    },
}

/// The table's bytes in the file's layout.
pub fn encode(table: &ProducerTable) -> Vec<u8> {
    let (stamp, producers) = table.export();
    let mut b = Vec::with_capacity(
        HEAD_BYTES
            + producers.len() * (PRODUCER_HEAD_BYTES + usize::from(MAX_BATCHES) * BATCH_BYTES)
            + 4,
    );
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&table.applied_through().to_le_bytes());
    b.extend_from_slice(&stamp.to_le_bytes());
    b.extend_from_slice(&(producers.len() as u32).to_le_bytes());
    for p in &producers {
        b.extend_from_slice(&p.producer_id.to_le_bytes());
        b.extend_from_slice(&p.epoch.to_le_bytes());
        b.extend_from_slice(&p.stamp.to_le_bytes());
        let n = p.batches.len().min(usize::from(MAX_BATCHES));
        b.push(n as u8);
        for (first, last, base) in &p.batches[p.batches.len() - n..] {
            b.extend_from_slice(&first.to_le_bytes());
            b.extend_from_slice(&last.to_le_bytes());
            b.extend_from_slice(&base.to_le_bytes());
        }
    }
    let txns = table.transactions();
    let open = txns.open();
    b.extend_from_slice(&(open.len() as u32).to_le_bytes());
    for (producer_id, first) in open {
        b.extend_from_slice(&producer_id.to_le_bytes());
        b.extend_from_slice(&first.to_le_bytes());
    }
    b.extend_from_slice(&(txns.aborted().len() as u32).to_le_bytes());
    for a in txns.aborted() {
        b.extend_from_slice(&a.producer_id.to_le_bytes());
        b.extend_from_slice(&a.first_offset.to_le_bytes());
        b.extend_from_slice(&a.last_offset.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Reads fixed-size fields from a checked buffer; every read is bounds-checked.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let bytes = self.data.get(self.at..self.at.checked_add(N)?)?;
        self.at += N;
        bytes.try_into().ok()
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_le_bytes)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_le_bytes)
    }
}

/// Decodes the file's bytes (`path` names it in errors).
pub fn decode(path: &str, data: &[u8]) -> Result<ProducerTable, SnapshotError> {
    let malformed = |reason| SnapshotError::Malformed {
        path: path.to_owned(),
        reason,
    };
    if data.len() < HEAD_BYTES + 4 {
        return Err(malformed("shorter than its header"));
    }
    let (body, crc) = data.split_at(data.len() - 4);
    let crc = u32::from_le_bytes(crc.try_into().map_err(|_| malformed("no CRC"))?);
    if crc32c::crc32c(body) != crc {
        return Err(malformed("CRC mismatch"));
    }
    let mut r = Reader { data: body, at: 0 };
    if r.take::<4>().as_ref() != Some(MAGIC) {
        return Err(malformed("bad magic"));
    }
    let version = r.u16();
    if version != Some(VERSION) && version != Some(VERSION_1) {
        return Err(malformed("unknown version"));
    }
    let _flags = r.u16();
    let (Some(applied_through), Some(stamp), Some(count)) = (r.u64(), r.u64(), r.u32()) else {
        return Err(malformed("truncated header"));
    };
    if count as usize > MAX_PRODUCERS
        || (count as usize).saturating_mul(PRODUCER_HEAD_BYTES) > body.len()
    {
        return Err(malformed("producer count out of range"));
    }
    let mut producers = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (Some(producer_id), Some(epoch), Some(p_stamp), Some(n)) =
            (r.i64(), r.i16(), r.u64(), r.u8())
        else {
            return Err(malformed("truncated producer"));
        };
        if n > MAX_BATCHES {
            return Err(malformed("more batches than a producer keeps"));
        }
        let mut batches = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            let (Some(first), Some(last), Some(base)) = (r.i32(), r.i32(), r.u64()) else {
                return Err(malformed("truncated batch"));
            };
            batches.push((first, last, base));
        }
        producers.push(ProducerState {
            producer_id,
            epoch,
            stamp: p_stamp,
            batches,
        });
    }
    let txns = if version == Some(VERSION) {
        decode_transactions(&mut r).ok_or_else(|| malformed("truncated transactions"))?
    } else {
        Transactions::default()
    };
    if r.at != body.len() {
        return Err(malformed("bytes after the last section"));
    }
    let mut table = ProducerTable::import(stamp, applied_through, producers);
    table.set_transactions(txns);
    Ok(table)
}

/// The two transaction sections (None when they do not fit the bytes left).
fn decode_transactions(r: &mut Reader<'_>) -> Option<Transactions> {
    let left = |r: &Reader<'_>| r.data.len() - r.at;
    let open_count = r.u32()? as usize;
    if open_count.checked_mul(OPEN_BYTES)? > left(r) {
        return None;
    }
    let mut open = Vec::with_capacity(open_count);
    for _ in 0..open_count {
        open.push((r.i64()?, r.u64()?));
    }
    let aborted_count = r.u32()? as usize;
    if aborted_count.checked_mul(ABORTED_BYTES)? > left(r) {
        return None;
    }
    let mut aborted = Vec::with_capacity(aborted_count);
    for _ in 0..aborted_count {
        aborted.push(AbortedTxn {
            producer_id: r.i64()?,
            first_offset: r.u64()?,
            last_offset: r.u64()?,
        });
    }
    Some(Transactions::import(open, aborted))
}

/// Saves `table` in `dir` (atomically, durable when it returns).
pub fn save(dir: &Path, table: &ProducerTable) -> Result<(), logstore::LogStoreError> {
    logstore::atomic_write(dir, SNAPSHOT_FILE, &encode(table))
}

/// The table saved in `dir`, if any.
pub fn load(dir: &Path) -> Result<Option<ProducerTable>, SnapshotError> {
    let path = dir.join(SNAPSHOT_FILE);
    match std::fs::read(&path) {
        Ok(data) => decode(&path.display().to_string(), &data).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SnapshotError::Io {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// Rebuilds a stream's producer table: the one saved in its directory (see
/// [`crate::replication::producer_snapshot`]), then the committed entries after it (at most the
/// newest [`crate::replication::producers::REBUILD_MAX_ENTRIES`]).
pub(crate) fn rebuild_producers(
    store: &crate::replication::raft_storage::SharedStore,
    applied: u64,
) -> crate::replication::producers::ProducerTable {
    let s = crate::replication::raft_storage::read(store);
    // The newest saved table, then the committed log after it (the saved table may hold
    // entries past `applied`: the group skips those when it applies them again).
    let mut table = match load(s.dir()) {
        Ok(saved) => saved.unwrap_or_default(),
        Err(e) => {
            tracing::warn!("{e}: the producer table is rebuilt from the log alone");
            crate::replication::producers::ProducerTable::default()
        }
    };
    let mut lo = s
        .first_index()
        .max(applied.saturating_sub(crate::replication::producers::REBUILD_MAX_ENTRIES) + 1)
        .max(table.applied_through() + 1);
    while lo <= applied {
        let Ok(entries) = s.entries(lo, applied + 1, 4 << 20) else {
            break;
        };
        let Some(last) = entries.last().map(|e| e.index) else {
            break;
        };
        for e in entries {
            if e.kind == logstore::EntryKind::Records {
                // Stored batches carry their offsets (a compacted entry has gaps).
                let placed = crate::replication::producers::placed_batch_infos(&e.payload);
                if !placed.is_empty() {
                    table.on_committed_placed_at(e.index, &placed);
                }
            }
        }
        lo = last + 1;
    }
    table.trim_aborted_below(s.first_readable_offset());
    table
}

/// The `applied_through` of the table saved in `dir` (its header only; `None` without a file
/// or with a header this version does not read). The log cleaner removes transaction markers
/// only in entries at or below it (`compaction::cleaner::CleanTarget::marker_limit`): a restart
/// loads the saved table (whose transactions those markers already closed) and replays the
/// log after it, so it never needs a removed marker; a later save only covers more. A file
/// whose body is damaged is ignored at load (the table is rebuilt from the log alone, which
/// agrees with the cleaned log: a transaction whose data and marker are gone never opens).
pub fn saved_applied_through(dir: &Path) -> Option<u64> {
    use std::io::Read;
    let mut header = [0u8; 16];
    std::fs::File::open(dir.join(SNAPSHOT_FILE))
        .and_then(|mut f| f.read_exact(&mut header))
        .ok()?;
    let version = u16::from_le_bytes([header[4], header[5]]);
    if &header[..4] != MAGIC || !(VERSION_1..=VERSION).contains(&version) {
        return None;
    }
    Some(u64::from_le_bytes(header[8..16].try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::producers::tests::b;
    use crate::replication::producers::SequenceCheck;

    fn table() -> ProducerTable {
        let mut t = ProducerTable::default();
        for i in 0..8u64 {
            t.on_committed_at(i + 1, &[b(7, 0, (i * 5) as i32, 5)], i * 5);
        }
        t.on_committed_at(9, &[b(9, 3, 0, 2), b(11, 0, 100, 1)], 40);
        t
    }

    #[test]
    fn a_saved_table_answers_retries_as_the_original() {
        let t = table();
        let loaded = decode("t", &encode(&t)).unwrap();
        assert_eq!(loaded.export(), t.export());
        assert_eq!(loaded.applied_through(), 9);
        let mut loaded = loaded;
        // The last five batches of producer 7 are remembered, with their offsets.
        assert_eq!(
            loaded.check(&[b(7, 0, 35, 5)]),
            SequenceCheck::Duplicate { base_offset: 35 }
        );
        assert_eq!(loaded.check(&[b(7, 0, 40, 5)]), SequenceCheck::Append);
        // Entries the table holds already are skipped when applied again after a restart.
        loaded.on_committed_at(9, &[b(9, 2, 0, 1)], 40);
        assert_eq!(loaded.export(), table().export());
    }

    #[test]
    fn damaged_or_foreign_bytes_are_refused_never_a_panic() {
        let good = encode(&table());
        for cut in 0..good.len() {
            assert!(decode("t", &good[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            assert!(decode("t", &bad).is_err(), "flip at {at}");
        }
        // A correct CRC over nonsense: bounds-checked, refused.
        let mut nonsense = b"VDLP\x01\x00\x00\x00".to_vec();
        nonsense.extend_from_slice(&[0xff; 20]);
        let crc = crc32c::crc32c(&nonsense);
        nonsense.extend_from_slice(&crc.to_le_bytes());
        assert!(decode("t", &nonsense).is_err());
    }

    /// The hole this file closes: a producer whose last batch is older than the part of the
    /// log a restart replays was unknown afterwards, so a retry of that batch was appended a
    /// second time. With the table saved, the retry is answered with its original offset.
    #[test]
    fn a_restart_remembers_a_producer_older_than_the_replayed_log() {
        use crate::replication::raft_storage::{records_entry as entry, scratch_store};
        use kafka_proto::records::{Compression, NewRecord, RecordBatchBuilder};
        use logstore::NewEntry;

        let batch = |producer: Option<(i64, i32)>| {
            let mut b = RecordBatchBuilder::new(Compression::None)
                .with_records(&[NewRecord::new(1_700_000_000_000, &b"v"[..])])
                .unwrap();
            if let Some((id, seq)) = producer {
                b = b.producer(id, 0, seq);
            }
            b.build().unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let store = scratch_store(dir.path());
        store
            .write()
            .unwrap()
            .append(&[entry(1, batch(Some((7, 0))))])
            .unwrap();
        // What the group saves as it applies: the table through entry 1.
        save(dir.path(), &rebuild_producers(&store, 1)).unwrap();
        // More entries than a restart replays, none of them from producer 7.
        let filler = batch(None);
        let last = crate::replication::producers::REBUILD_MAX_ENTRIES + 10;
        let mut index = 2;
        while index <= last {
            let chunk: Vec<NewEntry> = (index..(index + 10_000).min(last + 1))
                .map(|i| entry(i, filler.clone()))
                .collect();
            index += chunk.len() as u64;
            store.write().unwrap().append(&chunk).unwrap();
        }
        let mut table = rebuild_producers(&store, last);
        assert_eq!(
            table.check(&[b(7, 0, 0, 1)]),
            SequenceCheck::Duplicate { base_offset: 0 },
            "the retry of producer 7's batch would be written again"
        );
        // Without the saved table, producer 7 is unknown (what a restart did before).
        std::fs::remove_file(dir.path().join(SNAPSHOT_FILE)).unwrap();
        let mut table = rebuild_producers(&store, last);
        assert_eq!(table.check(&[b(7, 0, 0, 1)]), SequenceCheck::Append);
    }

    #[test]
    fn the_saved_tables_applied_index_is_read_from_its_header() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(saved_applied_through(dir.path()), None);
        save(dir.path(), &table()).unwrap();
        assert_eq!(saved_applied_through(dir.path()), Some(9));
        std::fs::write(
            dir.path().join(SNAPSHOT_FILE),
            b"VDLQ\x02\0\0\0\x09\0\0\0\0\0\0\0",
        )
        .unwrap();
        assert_eq!(saved_applied_through(dir.path()), None, "not a table");
        std::fs::write(dir.path().join(SNAPSHOT_FILE), b"VDLP").unwrap();
        assert_eq!(saved_applied_through(dir.path()), None, "too short");
    }

    #[test]
    fn save_and_load_in_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_none());
        save(dir.path(), &table()).unwrap();
        let loaded = load(dir.path()).unwrap().expect("saved");
        assert_eq!(loaded.export(), table().export());
        std::fs::write(dir.path().join(SNAPSHOT_FILE), b"junk").unwrap();
        assert!(load(dir.path()).is_err());
    }
}
