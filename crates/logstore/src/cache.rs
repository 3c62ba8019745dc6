//! Bounded in-memory cache of the newest entries.

use std::collections::VecDeque;

use crate::entry::{Entry, EntryKind};

/// The newest entries of the log, contiguous by index, bounded in bytes (entry frame sizes).
///
/// Invariant: when not empty, the cache holds exactly the entries `[first, last_index]` of
/// the log, where `last_index` is the store's last index.
#[derive(Debug)]
pub(crate) struct EntryCache {
    entries: VecDeque<Entry>,
    bytes: u64,
    capacity: u64,
}

impl EntryCache {
    pub fn new(capacity: usize) -> EntryCache {
        EntryCache {
            entries: VecDeque::new(),
            bytes: 0,
            capacity: capacity as u64,
        }
    }

    /// Adds the entry that follows the current newest one (anything else clears the cache
    /// first, so it stays contiguous). Evicts the oldest entries beyond the capacity.
    pub fn push(&mut self, e: Entry) {
        if let Some(back) = self.entries.back() {
            if back.index + 1 != e.index {
                self.clear();
            }
        }
        let size = e.size();
        if size > self.capacity {
            // Cannot hold it; keep the invariant (a suffix of the log) by holding nothing.
            self.clear();
            return;
        }
        self.bytes += size;
        self.entries.push_back(e);
        while self.bytes > self.capacity {
            match self.entries.pop_front() {
                Some(old) => self.bytes -= old.size(),
                None => break,
            }
        }
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// Index of the oldest cached entry.
    pub fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|e| e.index)
    }

    pub fn get(&self, index: u64) -> Option<&Entry> {
        let first = self.first_index()?;
        if index < first {
            return None;
        }
        self.entries.get((index - first) as usize)
    }

    /// Drops entries with index >= `index`.
    pub fn truncate_from(&mut self, index: u64) {
        while self.entries.back().is_some_and(|e| e.index >= index) {
            if let Some(e) = self.entries.pop_back() {
                self.bytes -= e.size();
            }
        }
    }

    /// Drops entries with index < `index`.
    pub fn drop_before(&mut self, index: u64) {
        while self.entries.front().is_some_and(|e| e.index < index) {
            if let Some(e) = self.entries.pop_front() {
                self.bytes -= e.size();
            }
        }
    }

    /// Position (for [`EntryCache::entry_at`]) of the Records entry holding `offset`.
    pub fn position_of_offset(&self, offset: u64) -> Option<usize> {
        let i = self.entries.partition_point(|e| e.next_offset() <= offset);
        let e = self.entries.get(i)?;
        (e.kind == EntryKind::Records && e.first_offset <= offset).then_some(i)
    }

    pub fn entry_at(&self, pos: usize) -> Option<&Entry> {
        self.entries.get(pos)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}
