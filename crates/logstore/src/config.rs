//! Store configuration.

use std::time::Duration;

/// When appended data is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// [`crate::LogStore::append`] returns only after the appended entries are durable
    /// (one fdatasync per append call). The default, and what the server uses.
    Always,
    /// `append` syncs when at least this long has passed since the last sync; the caller can
    /// also call [`crate::LogStore::sync_if_due`] from a timer. Up to one interval of
    /// acknowledged appends can be lost in a power failure.
    Interval(Duration),
    /// `append` never syncs; only explicit [`crate::LogStore::sync`] calls (and segment rolls)
    /// do. For benchmarks and tests.
    Never,
}

/// Which sealed segments [`crate::LogStore::apply_retention`] deletes. `None` disables a
/// rule; a segment is deleted when any enabled rule asks for it (and the floor allows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionPolicy {
    /// Keep at most this many segments (the active one included).
    pub max_segments: Option<usize>,
    /// Keep at most this many bytes of segment files (the active one included).
    pub max_bytes: Option<u64>,
    /// Delete segments whose newest record timestamp (or, without records, file modification
    /// time) is older than this.
    pub max_age: Option<Duration>,
}

/// Configuration of one [`crate::LogStore`]. `Default` gives the server's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Roll to a new segment when an append would make the active one larger than this
    /// (a segment always takes at least one append batch). Default 256 MiB.
    pub segment_bytes: u64,
    /// Most bytes of newest entries this store keeps in memory (0 disables its cache). The
    /// store's cache is also charged to the [`crate::CacheBudget`] of the
    /// [`crate::StoreResources`] it was opened with, shared with the other stores of a node;
    /// [`crate::LogStore::open`] gives it a budget of its own of this size. Default 64 MiB.
    pub cache_bytes: usize,
    /// Distance in bytes between entries of the sparse indexes. Default 4096.
    pub index_interval_bytes: u64,
    /// After a sync, write a checkpoint (the active segment's index file) when the active
    /// segment grew by this much since the last one; recovery scans only what follows the
    /// checkpoint. Default 32 MiB.
    pub checkpoint_bytes: u64,
    /// When appends become durable. Default [`SyncPolicy::Always`].
    pub sync_policy: SyncPolicy,
    /// Largest accepted entry (payload + context). Default 64 MiB, at most 1 GiB.
    pub max_entry_bytes: u64,
    /// Largest accepted append batch in encoded bytes. Default 256 MiB.
    pub max_batch_bytes: u64,
    /// Most entries accepted in one append call. Default 65 536.
    pub max_batch_entries: usize,
    /// What `apply_retention` deletes. Default: nothing.
    pub retention: RetentionPolicy,
    /// When false, no segment is ever deleted by retention or prefix deletion.
    /// Default true.
    pub deletion_allowed: bool,
    /// Bytes of zeros a background thread keeps written (and synced) ahead of the active
    /// segment's end, so that syncing an append flushes data only, not file-system metadata
    /// (see `reserve.rs`). 0 disables it. Default 16 MiB; never past `segment_bytes`. Only
    /// for a store being written: one idle for `preallocate_idle_release` gives the zeros
    /// back and holds no handle for them.
    pub preallocate_bytes: u64,
    /// A store not appended to for this long has its zeros cut off and the filler's file
    /// handle closed (within about a second more); a second append within this time of the
    /// previous one starts filling again. Default 10 s.
    pub preallocate_idle_release: Duration,
}

/// Upper bound for `max_entry_bytes`.
pub const MAX_ENTRY_BYTES_LIMIT: u64 = 1 << 30;

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            segment_bytes: 256 << 20,
            cache_bytes: 64 << 20,
            index_interval_bytes: 4096,
            checkpoint_bytes: 32 << 20,
            sync_policy: SyncPolicy::Always,
            max_entry_bytes: 64 << 20,
            max_batch_bytes: 256 << 20,
            max_batch_entries: 65_536,
            retention: RetentionPolicy::default(),
            deletion_allowed: true,
            preallocate_bytes: 16 << 20,
            preallocate_idle_release: Duration::from_secs(10),
        }
    }
}

impl StoreConfig {
    /// Checks the values; returns a description of the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        if self.segment_bytes < 1024 {
            return Err(format!(
                "segment_bytes {} is below 1024",
                self.segment_bytes
            ));
        }
        if self.index_interval_bytes == 0 {
            return Err("index_interval_bytes must be positive".into());
        }
        if self.max_entry_bytes == 0 || self.max_entry_bytes > MAX_ENTRY_BYTES_LIMIT {
            return Err(format!(
                "max_entry_bytes must be in 1..={MAX_ENTRY_BYTES_LIMIT}"
            ));
        }
        if self.max_batch_entries == 0 || self.max_batch_bytes == 0 {
            return Err("max_batch_entries and max_batch_bytes must be positive".into());
        }
        Ok(())
    }
}
