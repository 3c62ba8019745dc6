//! Reading by Raft index: entries, terms and the offset after an entry.

use super::LogStore;
use crate::entry::{entry_from_frame, Entry};
use crate::error::{corruption, LogStoreError, Result};

impl LogStore {
    /// Entries `[lo, hi)`, stopping before the total size would exceed `max_bytes` but
    /// always at least one entry when `lo < hi` (raft-rs semantics; sizes are
    /// [`Entry::size`]). Errors when `lo < first_index()` or `hi > last_index() + 1`.
    pub fn entries(&self, lo: u64, hi: u64, max_bytes: u64) -> Result<Vec<Entry>> {
        if lo < self.first_index() {
            return Err(LogStoreError::Compacted {
                index: lo,
                first_index: self.first_index(),
            });
        }
        if hi > self.last_index() + 1 {
            return Err(LogStoreError::Unavailable {
                index: hi - 1,
                last_index: self.last_index(),
            });
        }
        let mut out: Vec<Entry> = Vec::new();
        let mut size = 0u64;
        let mut push = |e: Entry, out: &mut Vec<Entry>| -> bool {
            let s = e.size();
            if !out.is_empty() && size + s > max_bytes {
                return false;
            }
            size += s;
            out.push(e);
            true
        };
        let interval = self.config.index_interval_bytes;
        let mut i = lo;
        while i < hi {
            // From the cache when it holds `i` (asked again each round: other stores' appends
            // may take its oldest entries at any time), else from the disk up to where the
            // cache began when asked.
            let cache_first = {
                let cache = self.cache.lock();
                if let Some(mut p) = cache.position_of_index(i) {
                    while i < hi {
                        let e = cache
                            .entry_at(p)
                            .expect("the cache holds a suffix of the log")
                            .clone();
                        if !push(e, &mut out) {
                            break;
                        }
                        i += 1;
                        p += 1;
                    }
                    return Ok(out);
                }
                cache.first_index().unwrap_or(u64::MAX)
            };
            let seg = &self.segments[self.segment_for_index(i)];
            let (mut pos, _) = seg
                .locate_index(i, interval)
                .map_err(|e| self.note_damage(e, i))?;
            while i < hi && i <= seg.last_index && i < cache_first {
                let (h, frame) = seg.read_frame(pos).map_err(|e| self.note_damage(e, i))?;
                if h.index != i {
                    return Err(self.note_damage(
                        corruption(
                            &seg.path,
                            pos,
                            format!("expected index {i}, found {}", h.index),
                        ),
                        i,
                    ));
                }
                if !push(entry_from_frame(&h, &frame), &mut out) {
                    return Ok(out);
                }
                pos += h.total_len();
                i += 1;
            }
        }
        Ok(out)
    }

    /// One entry.
    pub fn entry(&self, index: u64) -> Result<Entry> {
        self.check_index(index)?;
        let mut v = self.entries(index, index + 1, u64::MAX)?;
        v.pop().ok_or(LogStoreError::Unavailable {
            index,
            last_index: self.last_index(),
        })
    }

    /// Term of entry `index`, also for `first_index() - 1` (remembered across prefix
    /// deletion and snapshots).
    pub fn term(&self, index: u64) -> Result<u64> {
        if index == self.last_index() {
            return Ok(self.last_term());
        }
        if index + 1 == self.first_index() {
            return Ok(self.segments[0].header.prev_term);
        }
        self.check_index(index)?;
        if let Some(term) = self.cache.lock().get(index).map(|e| e.term) {
            return Ok(term);
        }
        let seg = &self.segments[self.segment_for_index(index)];
        if index == seg.last_index {
            return Ok(seg.last_term);
        }
        Ok(seg
            .locate_index(index, self.config.index_interval_bytes)
            .map_err(|e| self.note_damage(e, index))?
            .1
            .term)
    }

    /// The Kafka offset after entry `index` (`first_offset + record_count`), also for
    /// `first_index() - 1`. Turns a Raft commit index into a high watermark.
    pub fn next_offset_after_index(&self, index: u64) -> Result<u64> {
        if index == self.last_index() {
            return Ok(self.next_offset());
        }
        if index + 1 == self.first_index() {
            return Ok(self.log_start_offset());
        }
        self.check_index(index)?;
        if let Some(next) = self.cache.lock().get(index).map(|e| e.next_offset()) {
            return Ok(next);
        }
        let seg = &self.segments[self.segment_for_index(index)];
        if index == seg.last_index {
            return Ok(seg.next_offset);
        }
        Ok(seg
            .locate_index(index, self.config.index_interval_bytes)
            .map_err(|e| self.note_damage(e, index))?
            .1
            .next_offset())
    }
}
