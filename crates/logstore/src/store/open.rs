//! Opening a [`LogStore`] (recovery, then the store's state), upgrading a version-1 active
//! segment, and closing.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use super::LogStore;
use crate::cache::StoreCache;
use crate::config::StoreConfig;
use crate::error::{io_err, LogStoreError, Result};
use crate::fsutil::fsync_dir;
use crate::hard_state;
use crate::index::write_index_file;
use crate::open_segments::DEFAULT_MAX_OPEN_SEGMENT_FILES;
use crate::recovery::recover;
use crate::repair;
use crate::reserve::ZeroReserve;
use crate::resources::StoreResources;
use crate::root_lock::lock_store;
use crate::segment::{create_segment_file, Segment, SegmentHeader, SEGMENT_HEADER_LEN};

impl LogStore {
    /// Opens the log in `dir` (creating the directory and an empty log when missing),
    /// recovering from any crash as described in the crate docs. Fails on corruption of
    /// synced data, on files of a newer format, and with `Locked` when another store holds the
    /// directory or a node's [`crate::RootLock`] holds a directory above it.
    /// The store gets resources of its own: a cache budget of `config.cache_bytes` and at
    /// most [`DEFAULT_MAX_OPEN_SEGMENT_FILES`] open sealed segments. A process opening many
    /// stores should share one [`StoreResources`] with [`LogStore::open_shared`].
    pub fn open(dir: &Path, config: StoreConfig) -> Result<LogStore> {
        let resources =
            StoreResources::new(config.cache_bytes as u64, DEFAULT_MAX_OPEN_SEGMENT_FILES);
        LogStore::open_shared(dir, config, &resources)
    }

    /// Like [`LogStore::open`], with the tail cache charged to `resources.cache_budget`,
    /// sealed segments kept open in `resources.open_segments` and the active segment's
    /// descriptor in `resources.active_files`, all shared with every other store opened with
    /// the same resources. Below the directory of `resources.root_lock`, when set, the store
    /// takes no `LOCK` of its own (see [`crate::RootLock`]); a second open of it is refused
    /// with `Locked` all the same.
    pub fn open_shared(
        dir: &Path,
        config: StoreConfig,
        resources: &StoreResources,
    ) -> Result<LogStore> {
        config.validate().map_err(LogStoreError::InvalidArgument)?;
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fsync_dir(parent)?;
            }
        }
        let lock = lock_store(dir, resources.root_lock.as_ref())?;
        // Retention's clock is anchored before any wall-clock jump can make data look old.
        crate::clock::anchor_retention_clock();
        // A damaged hard state is reported, not guessed: the store starts with the default
        // (term 0, no vote) and the caller decides how to rebuild it (vdl: from its peers).
        let (loaded_hard_state, hard_state_damage) = match hard_state::load_hard_state(dir) {
            Ok(loaded) => (loaded, None),
            Err(e @ LogStoreError::Corruption { .. }) => {
                (hard_state::LoadedHardState::default(), Some(e.to_string()))
            }
            Err(e) => return Err(e),
        };
        // A lost vote stays lost until the caller rebuilt it (`clear_vote_unknown`), across
        // restarts: the next saved hard state no longer looks damaged.
        let vote_unknown_path = dir.join(hard_state::VOTE_UNKNOWN_FILE);
        let vote_unknown = hard_state_damage.is_some() || vote_unknown_path.exists();
        if hard_state_damage.is_some() && !vote_unknown_path.exists() {
            crate::fsutil::atomic_write(dir, hard_state::VOTE_UNKNOWN_FILE, b"")?;
        }
        let loaded_conf_state = hard_state::load_conf_state(dir)?;
        // Recovery treats a bad frame holding a committed entry as damage (a damaged hard
        // state tells no commit: 0).
        let saved_commit = loaded_hard_state.state.commit;
        let rec = recover(dir, &config, &resources.open_segments, saved_commit)?;
        let repair_marker = repair::load(dir)?;
        let active = rec
            .segments
            .last()
            .expect("recovery returns at least one segment");
        let synced_len = active.len;
        let checkpoint_len = if rec.report.tail_bytes_scanned >= config.checkpoint_bytes {
            active.len
        } else {
            active.len - rec.report.tail_bytes_scanned.min(active.len)
        };
        let durable_index = active.last_index;
        let reserve = ZeroReserve::new(config.preallocate_bytes, config.preallocate_idle_release);
        // Recovery keeps an all-zero tail (reserve left by the previous run).
        let file_len = active
            .active_file()
            .read(|f| f.metadata())?
            .map_err(io_err(&active.path))?
            .len();
        reserve.attach(&active.path, active.len, file_len, config.segment_bytes);
        let mut store = LogStore {
            dir: dir.to_path_buf(),
            cache: StoreCache::new(&resources.cache_budget, config.cache_bytes as u64),
            open_segments: Arc::clone(&resources.open_segments),
            config,
            _lock: lock,
            reserve,
            segments: rec.segments,
            generation: rec.generation,
            synced_len,
            checkpoint_len,
            durable_index,
            last_sync: Instant::now(),
            hard_state: loaded_hard_state.state,
            hard_state_seq: loaded_hard_state.seq,
            hard_state_in_place: loaded_hard_state.in_place,
            conf_state: loaded_conf_state.state,
            conf_state_seq: loaded_conf_state.seq,
            conf_state_in_place: loaded_conf_state.in_place,
            report: rec.report,
            records_floor: 0,
            damaged_from: AtomicU64::new(u64::MAX),
            repair_marker,
            roll_age: None,
            hard_state_damage,
            vote_unknown,
        };
        store.upgrade_active_segment();
        Ok(store)
    }

    /// Makes the active segment a version-2 one when it is a version-1 segment (written by an
    /// older build, or made active again by a truncation into it), so that appends from now
    /// on record their sync lag (see `recovery.rs`; a version-1 tail has only the old rule):
    /// a non-empty one is sealed (a roll), an empty one is replaced by an empty version-2
    /// file with the same header fields. Best effort: when that fails (a full disk), the
    /// version-1 segment stays active until it rolls, as before this format existed.
    pub(super) fn upgrade_active_segment(&mut self) {
        if self.active().header.has_sync_lag() {
            return;
        }
        let _ = if self.active().is_empty() {
            self.replace_empty_active()
        } else {
            self.roll()
        };
    }

    /// Replaces the empty active segment by a new file holding only its header, in the
    /// current format version (atomically: temp file, fsync, rename, fsync directory).
    fn replace_empty_active(&mut self) -> Result<()> {
        debug_assert!(self.active().is_empty());
        self.reserve.detach();
        let old = self.active().header;
        let header = SegmentHeader::new(
            old.base_index,
            old.base_offset,
            old.prev_term,
            old.generation,
            old.created_ms,
        );
        let created = create_segment_file(&self.dir, &header).map(|(path, file)| {
            *self.active_mut() =
                Segment::new_empty(header, path, file, &self.dir, &self.open_segments);
            self.synced_len = SEGMENT_HEADER_LEN;
            self.checkpoint_len = 0;
        });
        self.attach_reserve_to_active()?;
        created
    }

    /// Attaches the reserve to the active segment as its file is now (zeros after the data
    /// included).
    fn attach_reserve_to_active(&self) -> Result<()> {
        let active = self.active();
        let file_len = active
            .active_file()
            .read(|f| f.metadata())?
            .map_err(io_err(&active.path))?
            .len();
        self.reserve.attach(
            &active.path,
            active.len,
            file_len,
            self.config.segment_bytes,
        );
        Ok(())
    }

    /// Syncs, writes the active segment's checkpoint (so the next open scans nothing) and
    /// closes the store.
    pub fn close(mut self) -> Result<()> {
        self.sync()?;
        self.reserve.detach();
        self.trim_active()?;
        let active = self.active();
        let idx = active.indexes(self.config.index_interval_bytes)?;
        let _ = write_index_file(&active.index_path, &active.summary(), &idx);
        Ok(())
    }
}
