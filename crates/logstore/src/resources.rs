//! What the stores of one node share.

use std::sync::Arc;

use crate::active_files::{ActiveFiles, DEFAULT_MAX_OPEN_ACTIVE_FILES};
use crate::budget::CacheBudget;
use crate::open_segments::OpenSegments;
use crate::root_lock::RootLock;

/// The resources shared by every store of a node: one memory budget for the tail caches, one
/// bounded set of open sealed segment files and one bounded set of active segments' file
/// descriptors. Cloning shares them. Pass the same value to
/// every [`crate::LogStore::open_shared`] of a node; [`crate::LogStore::open`] makes private
/// ones for a store used alone.
#[derive(Debug, Clone)]
pub struct StoreResources {
    /// The tail caches' budget (see [`CacheBudget`]).
    pub cache_budget: Arc<CacheBudget>,
    /// The open sealed segments (see [`OpenSegments`]).
    pub open_segments: Arc<OpenSegments>,
    /// The active segments' open descriptors (see [`ActiveFiles`]; the same set as
    /// `open_segments.active_files()`).
    pub active_files: Arc<ActiveFiles>,
    /// The lock on the directory holding the node's stores, when the node took one (see
    /// [`RootLock`]): stores opened below it hold no lock descriptor of their own.
    pub root_lock: Option<Arc<RootLock>>,
}

impl StoreResources {
    /// A cache budget of `cache_budget_bytes`, a set of at most `max_open_segment_files`
    /// open sealed segments (at least 1) and one of [`DEFAULT_MAX_OPEN_ACTIVE_FILES`] active
    /// segments' descriptors.
    pub fn new(cache_budget_bytes: u64, max_open_segment_files: usize) -> StoreResources {
        StoreResources::with_limits(
            cache_budget_bytes,
            max_open_segment_files,
            DEFAULT_MAX_OPEN_ACTIVE_FILES,
        )
    }

    /// Like [`StoreResources::new`], keeping at most `max_open_active_files` (at least 1)
    /// active segments' descriptors open while their stores have nothing unsynced (see
    /// [`ActiveFiles`]).
    pub fn with_limits(
        cache_budget_bytes: u64,
        max_open_segment_files: usize,
        max_open_active_files: usize,
    ) -> StoreResources {
        let active_files = ActiveFiles::new(max_open_active_files);
        StoreResources {
            cache_budget: CacheBudget::new(cache_budget_bytes),
            open_segments: OpenSegments::with_active_files(
                max_open_segment_files,
                Arc::clone(&active_files),
            ),
            active_files,
            root_lock: None,
        }
    }

    /// These resources, with stores opened below `lock`'s directory locked by it instead of
    /// by a `LOCK` descriptor each (see [`RootLock`]).
    pub fn with_root_lock(mut self, lock: Arc<RootLock>) -> StoreResources {
        self.root_lock = Some(lock);
        self
    }
}
