//! Making appends durable: [`LogStore::sync`] and its halves for syncing outside the
//! store's lock ([`PendingSync`]), and the policy's timing.

use std::sync::Arc;
use std::time::Instant;

use super::LogStore;
use crate::config::SyncPolicy;
use crate::error::Result;
use crate::fsutil::fdatasync;
use crate::index::write_index_file;

/// An fsync to run outside the store (see [`LogStore::prepare_sync`]).
#[derive(Debug)]
pub struct PendingSync {
    file: Arc<std::fs::File>,
    path: std::path::PathBuf,
    base_index: u64,
    len: u64,
    last_index: u64,
}

impl PendingSync {
    /// fdatasyncs the segment. Panics when the fsync fails: after a failed fsync the page
    /// cache's state is unknown and acknowledging anything could lose it (see the crate docs).
    pub fn run(&self) {
        fdatasync(&self.file, &self.path);
    }

    /// The last Raft index this sync makes durable.
    pub fn last_index(&self) -> u64 {
        self.last_index
    }
}

impl LogStore {
    /// Makes everything appended so far durable (fdatasync of the active segment; earlier
    /// segments were synced when they were sealed). Writes a checkpoint when the active
    /// segment grew by `checkpoint_bytes` since the last one. Panics if fdatasync fails.
    pub fn sync(&mut self) -> Result<()> {
        match self.prepare_sync()? {
            Some(pending) => {
                pending.run();
                self.complete_sync(pending)
            }
            None => self.complete_sync_at(self.active().len, self.active().last_index),
        }
    }

    /// The first half of a [`LogStore::sync`] that can run without holding the store: returns
    /// what to fdatasync (a shared handle on the active segment and the length and index it
    /// covers), or `None` when everything appended is already durable. Run it with
    /// [`PendingSync::run`] (no access to the store needed, so readers are not blocked during
    /// the fsync), then call [`LogStore::complete_sync`]. No other write may happen in between.
    pub fn prepare_sync(&self) -> Result<Option<PendingSync>> {
        let active = self.active();
        if self.synced_len >= active.len {
            return Ok(None);
        }
        let file = active.active_file().shared()?;
        Ok(Some(PendingSync {
            file,
            path: active.path.clone(),
            base_index: active.header.base_index,
            len: active.len,
            last_index: active.last_index,
        }))
    }

    /// The sync the [`SyncPolicy`] asks for now, prepared as [`LogStore::prepare_sync`] does
    /// (run it, then [`LogStore::complete_sync`]): under `Always`, whatever is not durable
    /// yet; under `Interval(d)`, the same once `d` has passed since the last sync, else
    /// `None`; under `Never`, `None`. For a caller that appends with
    /// [`LogStore::append_unsynced`] and fsyncs outside the store's lock (the server's Raft
    /// groups): the policy is decided here, and only here.
    pub fn prepare_due_sync(&self) -> Result<Option<PendingSync>> {
        match self.config.sync_policy {
            SyncPolicy::Always => self.prepare_sync(),
            SyncPolicy::Interval(d) if self.last_sync.elapsed() >= d => self.prepare_sync(),
            SyncPolicy::Interval(_) | SyncPolicy::Never => Ok(None),
        }
    }

    /// When [`LogStore::prepare_due_sync`] will next return a sync, given no more appends:
    /// `None` when everything appended is durable or under `Never`; under `Interval(d)`, the
    /// last sync plus `d`; under `Always`, now. A caller wakes by then, so the last appends
    /// of a burst become durable within one interval even when no append follows.
    pub fn sync_due_at(&self) -> Option<Instant> {
        if self.synced_len >= self.active().len {
            return None;
        }
        match self.config.sync_policy {
            SyncPolicy::Always => Some(Instant::now()),
            SyncPolicy::Interval(d) => Some(self.last_sync + d),
            SyncPolicy::Never => None,
        }
    }

    /// Records that `pending` ran: everything up to its length is durable.
    pub fn complete_sync(&mut self, pending: PendingSync) -> Result<()> {
        let active = self.active();
        assert_eq!(
            active.header.base_index, pending.base_index,
            "the active segment changed between prepare_sync and complete_sync"
        );
        assert!(
            pending.len <= active.len,
            "the log shrank between prepare_sync and complete_sync"
        );
        if pending.len == active.len {
            // Synced through the descriptor that wrote everything: it may be closed.
            active.active_file().mark_synced();
        }
        self.complete_sync_at(pending.len, pending.last_index)
    }

    fn complete_sync_at(&mut self, len: u64, last_index: u64) -> Result<()> {
        let interval = self.config.index_interval_bytes;
        let checkpoint_bytes = self.config.checkpoint_bytes;
        self.synced_len = len;
        self.durable_index = last_index;
        self.last_sync = Instant::now();
        if len - self.checkpoint_len.min(len) >= checkpoint_bytes {
            let active = self.active();
            let idx = active.indexes(interval)?;
            // Derived data: a failed write only means a longer scan at the next open.
            if write_index_file(&active.index_path, &active.summary(), &idx).is_ok() {
                self.checkpoint_len = len;
            }
        }
        Ok(())
    }

    /// Under [`SyncPolicy::Interval`], syncs if the interval has passed since the last sync
    /// (call it from a timer). Under the other policies it does nothing.
    pub fn sync_if_due(&mut self) -> Result<()> {
        if let SyncPolicy::Interval(d) = self.config.sync_policy {
            if self.durable_index != self.last_index() && self.last_sync.elapsed() >= d {
                self.sync()?;
            }
        }
        Ok(())
    }
}
