//! The append path: validation, encoding every entry of an append into one write, the sync
//! lag each frame records, and rolling to a new segment.

use bytes::Bytes;

use super::LogStore;
use crate::batch;
use crate::config::SyncPolicy;
use crate::entry::{
    encode_frame, encode_sync_lag, Entry, EntryKind, FrameMeta, NewEntry, FRAME_HEADER_LEN,
};
use crate::error::{io_err, LogStoreError, Result};
use crate::fsutil::fdatasync;
use crate::index::write_index_file;
use crate::segment::{create_segment_file, now_ms, Segment, SegmentHeader, SEGMENT_HEADER_LEN};

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    /// Last Raft index after the append.
    pub last_index: u64,
    /// Next Kafka offset after the append.
    pub next_offset: u64,
    /// Whether everything appended so far was durable when the call returned.
    pub durable: bool,
}

/// Where a `Records` entry's offsets come from.
enum Offsets {
    /// Counted from its batches; the store writes their base offsets (a new entry).
    Assign(Vec<batch::BatchInfo>),
    /// Given by the caller (a compacted entry from a replica): its batches keep their base
    /// offsets.
    Given { count: u32, max_timestamp: i64 },
}

impl LogStore {
    /// Appends entries (indexes `last_index()+1, +2, ...`) in one write, then syncs if the
    /// [`SyncPolicy`] says so: under `Always`, the entries are durable when this returns.
    /// On error nothing was appended. Records payloads get their offsets assigned here.
    pub fn append(&mut self, entries: &[NewEntry]) -> Result<AppendResult> {
        self.append_unsynced(entries)?;
        match self.config.sync_policy {
            SyncPolicy::Always => self.sync()?,
            SyncPolicy::Interval(_) => self.sync_if_due()?,
            SyncPolicy::Never => {}
        }
        Ok(self.append_result())
    }

    /// Like [`LogStore::append`], but when the first entry's index is already in the log,
    /// first truncates the log from there (raft-rs semantics: new entries replace the
    /// conflicting suffix).
    pub fn append_replacing(&mut self, entries: &[NewEntry]) -> Result<AppendResult> {
        if let Some(first) = entries.first() {
            if first.index <= self.last_index() {
                self.truncate_suffix(first.index)?;
            }
        }
        self.append(entries)
    }

    fn append_result(&self) -> AppendResult {
        AppendResult {
            last_index: self.last_index(),
            next_offset: self.next_offset(),
            durable: self.durable_index == self.last_index(),
        }
    }

    /// Appends entries in one write without syncing (whatever the policy). They are
    /// readable at once and durable after the next [`LogStore::sync`]. On error nothing was
    /// appended.
    pub fn append_unsynced(&mut self, entries: &[NewEntry]) -> Result<AppendResult> {
        self.append_unsynced_with_counts(entries, &[])
    }

    /// Like [`LogStore::append_unsynced`], for entries a replica sends that compaction may
    /// have shrunk: `record_counts[i]`, when given (`Some`), is the number of offsets the
    /// `Records` entry `entries[i]` takes (the leader's [`Entry::record_count`]) instead of
    /// the count of its batches. Such an entry's batches keep the base offsets they carry,
    /// which must lie inside its offsets in order (`InvalidRecords` otherwise); its payload
    /// may hold no batch at all (every record removed). Missing or `None` counts: as
    /// [`LogStore::append_unsynced`] (offsets counted from the batches and written into
    /// them). A count for another kind of entry, or a zero count, is `InvalidRecords`.
    pub fn append_unsynced_with_counts(
        &mut self,
        entries: &[NewEntry],
        record_counts: &[Option<u32>],
    ) -> Result<AppendResult> {
        if entries.is_empty() {
            return Ok(self.append_result());
        }
        let cfg = &self.config;
        // Validate everything before writing anything.
        let mut prev_term = self.last_term();
        let mut total: u64 = 0;
        let mut batches: Vec<Option<Offsets>> = Vec::with_capacity(entries.len());
        let mut next = self.next_offset();
        for (i, (expected, e)) in (self.last_index() + 1..).zip(entries).enumerate() {
            let given = record_counts.get(i).copied().flatten();
            if e.index != expected {
                return Err(LogStoreError::NonContiguous {
                    expected,
                    got: e.index,
                });
            }
            if e.term < prev_term {
                return Err(LogStoreError::TermRegression {
                    index: e.index,
                    term: e.term,
                    prev_term,
                });
            }
            let size = (e.payload.len() + e.context.len()) as u64;
            if size > cfg.max_entry_bytes {
                return Err(LogStoreError::EntryTooLarge {
                    index: e.index,
                    size,
                    limit: cfg.max_entry_bytes,
                });
            }
            if let Some(count) = given {
                let placed = if e.kind == EntryKind::Records && count > 0 {
                    batch::stored_batches(&e.payload, next, next + u64::from(count))
                } else {
                    Err((0, format!("{count} offsets for a {:?} entry", e.kind)))
                };
                let placed = placed.map_err(|(at, reason)| LogStoreError::InvalidRecords {
                    index: e.index,
                    at,
                    reason,
                })?;
                let max_timestamp = placed.iter().map(|b| b.info.max_timestamp).max();
                batches.push(Some(Offsets::Given {
                    count,
                    max_timestamp: max_timestamp.unwrap_or(-1),
                }));
                next += u64::from(count);
            } else if e.kind == EntryKind::Records {
                let infos = batch::walk(&e.payload).map_err(|(at, reason)| {
                    LogStoreError::InvalidRecords {
                        index: e.index,
                        at,
                        reason,
                    }
                })?;
                let count: u64 = infos.iter().map(|b| u64::from(b.offset_count)).sum();
                if count > u64::from(u32::MAX) {
                    return Err(LogStoreError::InvalidRecords {
                        index: e.index,
                        at: 0,
                        reason: format!("{count} offsets in one entry"),
                    });
                }
                next += count;
                batches.push(Some(Offsets::Assign(infos)));
            } else {
                batches.push(None);
            }
            total += FRAME_HEADER_LEN as u64 + size;
            prev_term = e.term;
        }
        if entries.len() > cfg.max_batch_entries || total > cfg.max_batch_bytes {
            return Err(LogStoreError::BatchTooLarge {
                entries: entries.len(),
                bytes: total,
            });
        }
        let active_len = self.active().len;
        if active_len > SEGMENT_HEADER_LEN && active_len + total > self.config.segment_bytes {
            self.roll()?;
        }

        // Encode all frames into one buffer: one write per append batch.
        let mut buf = Vec::with_capacity(total as usize);
        let mut next_offset = self.next_offset();
        let sync_lags = SyncLags::for_append(self.active(), self.synced_len);
        let mut metas = Vec::with_capacity(entries.len());
        for (e, infos) in entries.iter().zip(&batches) {
            let (count, max_ts) = match infos {
                Some(Offsets::Assign(infos)) => (
                    infos.iter().map(|b| b.offset_count).sum::<u32>(),
                    infos.iter().map(|b| b.max_timestamp).max().unwrap_or(-1),
                ),
                Some(Offsets::Given {
                    count,
                    max_timestamp,
                }) => (*count, *max_timestamp),
                None => (0, -1),
            };
            let m = FrameMeta {
                index: e.index,
                term: e.term,
                kind: e.kind,
                sync_lag: sync_lags.at(buf.len() as u64),
                first_offset: next_offset,
                record_count: count,
                max_timestamp: max_ts,
            };
            let start = buf.len();
            encode_frame(&mut buf, &m, &e.context, &e.payload, |p| {
                if let Some(Offsets::Assign(infos)) = infos {
                    let mut o = m.first_offset;
                    for b in infos {
                        batch::set_base_offset(p, b.pos, o);
                        o += u64::from(b.offset_count);
                    }
                }
            });
            next_offset += u64::from(count);
            metas.push((m, start, e.context.len(), e.payload.len()));
        }
        debug_assert_eq!(buf.len() as u64, total);

        let interval = self.config.index_interval_bytes;
        let active = self
            .segments
            .last_mut()
            .expect("a store always has an active segment");
        let pos0 = active.len;
        debug_assert_eq!(pos0, sync_lags.append_pos);
        let reserve = &self.reserve;
        let written = active.active_file().write(|file| {
            reserve.write_below(pos0 + total, || {
                crate::fs::fs().write_all_at(file, &active.path, &buf, pos0)
            })
        })?;
        if let Err(e) = written {
            // Best effort: remove a partial write so the next append starts clean. Recovery
            // would cut it anyway (it cannot be a valid continuation of the log).
            self.reserve.detach();
            let _ = active.active_file().write(|f| f.set_len(pos0));
            let limit = self.config.segment_bytes;
            self.reserve.attach(&active.path, pos0, pos0, limit);
            return Err(io_err(&active.path)(e));
        }
        let bytes = Bytes::from(buf);
        for (m, start, ctx_len, payload_len) in &metas {
            let abs = pos0 + *start as u64;
            let records =
                (m.kind == EntryKind::Records).then_some((m.first_offset, m.max_timestamp));
            active
                .indexes_mut()
                .on_append(m.index, abs, records, interval);
            if records.is_some() {
                active.max_timestamp = active.max_timestamp.max(m.max_timestamp);
            }
            active.last_entry_pos = abs;
            let ctx_start = start + FRAME_HEADER_LEN;
            let end = ctx_start + ctx_len + payload_len;
            self.cache.push(Entry {
                index: m.index,
                term: m.term,
                kind: m.kind,
                context: bytes.slice(ctx_start..ctx_start + ctx_len),
                payload: bytes.slice(ctx_start + ctx_len..end),
                first_offset: m.first_offset,
                record_count: m.record_count,
            });
        }
        let last = metas
            .last()
            .map(|(m, ..)| *m)
            .expect("entries is not empty");
        assert!(last.index > active.last_index, "log indexes must ascend");
        assert!(
            next_offset >= active.next_offset,
            "offsets must not go back"
        );
        active.len = pos0 + total;
        active.last_index = last.index;
        active.last_term = last.term;
        active.next_offset = next_offset;
        Ok(self.append_result())
    }

    /// Seals the active segment and starts a new one when the active segment holds at least
    /// one entry and was created at least `age` before `now_ms` (ms since the Unix epoch, by
    /// its header's creation time): Kafka's `segment.ms`, so that the data of a partition
    /// that went quiet leaves the active segment (and becomes compactable). Returns whether it
    /// rolled. Durable as any roll: the old segment is synced first. Call it from the store's
    /// writer (the thread that appends and syncs).
    pub fn roll_if_older_than(&mut self, age: std::time::Duration, now_ms: u64) -> Result<bool> {
        let active = self.active();
        let holds_entries = active.last_index >= active.header.base_index;
        let age_ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
        let due = active.header.created_ms.saturating_add(age_ms) <= now_ms;
        if !holds_entries || !due {
            return Ok(false);
        }
        self.roll()?;
        Ok(true)
    }

    /// Seals the active segment (fdatasync, index file) and starts a new one. The new
    /// segment's file is created before the old one is sealed: when that fails (a full
    /// disk), the old segment stays active and the store is as before (the error is the
    /// append's).
    pub(super) fn roll(&mut self) -> Result<()> {
        let interval = self.config.index_interval_bytes;
        let generation = self.generation;
        let synced_len = self.synced_len;
        let segment_bytes = self.config.segment_bytes;
        self.reserve.detach();
        let trimmed = self.trim_active()?;
        let active = self.active();
        if synced_len < active.len && !trimmed {
            let file = active.active_file();
            file.read(|f| fdatasync(f, &active.path))?;
            file.mark_synced();
        }
        let s = active.summary();
        let idx = active.indexes(interval)?;
        let header = SegmentHeader::new(
            s.last_index + 1,
            s.next_offset,
            s.last_term,
            generation,
            now_ms(),
        );
        let (path, file) = match create_segment_file(&self.dir, &header) {
            Ok(created) => created,
            Err(e) => {
                // Still the active segment (trimmed to its data): reserve for it again.
                self.reserve
                    .attach(&active.path, active.len, active.len, segment_bytes);
                return Err(e);
            }
        };
        let active = self.active_mut();
        let _ = write_index_file(&active.index_path, &s, &idx);
        active.seal();
        self.reserve.attach(
            &path,
            SEGMENT_HEADER_LEN,
            SEGMENT_HEADER_LEN,
            self.config.segment_bytes,
        );
        self.segments.push(Segment::new_empty(
            header,
            path,
            file,
            &self.dir,
            &self.open_segments,
        ));
        self.synced_len = SEGMENT_HEADER_LEN;
        self.checkpoint_len = 0;
        self.durable_index = s.last_index;
        Ok(())
    }

    /// Cuts the reserve's zeros off the active segment (the reserve must be detached) and
    /// makes the cut durable; returns whether there was anything to cut. Sealed segments
    /// end exactly at their last frame, which recovery relies on.
    pub(super) fn trim_active(&mut self) -> Result<bool> {
        let active = self.active();
        let file = active.active_file();
        let file_len = file
            .read(|f| f.metadata())?
            .map_err(io_err(&active.path))?
            .len();
        assert!(file_len >= active.len, "the active segment lost data");
        if file_len == active.len {
            return Ok(false);
        }
        file.write(|f| f.set_len(active.len))?
            .map_err(io_err(&active.path))?;
        // fdatasync covers the new size (and any data appended before it).
        file.read(|f| fdatasync(f, &active.path))?;
        file.mark_synced();
        let len = active.len;
        let last_index = active.last_index;
        self.synced_len = self.synced_len.max(len);
        self.durable_index = self.durable_index.max(last_index);
        Ok(true)
    }
}

/// The sync lag each frame of one append records (see `entry.rs`): how far the frame's
/// position is past the length of the active segment that a completed fdatasync made durable
/// before the append was written. `synced_len` only grows when an fdatasync of the active
/// segment has returned (`complete_sync_at`, `trim_active`, recovery's own sync at open),
/// never when a sync is merely prepared, so the lag never claims an unfinished sync.
struct SyncLags {
    /// Where the append's first frame goes (the active segment's length).
    append_pos: u64,
    /// The synced length of the active segment; `None`: a version-1 segment (no lag field).
    synced_len: Option<u64>,
}

impl SyncLags {
    fn for_append(active: &Segment, synced_len: u64) -> SyncLags {
        SyncLags {
            append_pos: active.len,
            synced_len: active
                .header
                .has_sync_lag()
                .then_some(synced_len.min(active.len)),
        }
    }

    /// The field for the frame at `offset_in_append` bytes into the append's buffer.
    fn at(&self, offset_in_append: u64) -> u32 {
        match self.synced_len {
            Some(synced) => encode_sync_lag(self.append_pos + offset_in_append - synced),
            None => 0,
        }
    }
}
