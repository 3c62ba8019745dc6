//! What the stores of one node share.

use std::sync::Arc;

use crate::budget::CacheBudget;
use crate::open_segments::OpenSegments;

/// The resources shared by every store of a node: one memory budget for the tail caches and
/// one bounded set of open sealed segment files. Cloning shares them. Pass the same value to
/// every [`crate::LogStore::open_shared`] of a node; [`crate::LogStore::open`] makes private
/// ones for a store used alone.
#[derive(Debug, Clone)]
pub struct StoreResources {
    /// The tail caches' budget (see [`CacheBudget`]).
    pub cache_budget: Arc<CacheBudget>,
    /// The open sealed segments (see [`OpenSegments`]).
    pub open_segments: Arc<OpenSegments>,
}

impl StoreResources {
    /// A cache budget of `cache_budget_bytes` and a set of at most `max_open_segment_files`
    /// open sealed segments (at least 1).
    pub fn new(cache_budget_bytes: u64, max_open_segment_files: usize) -> StoreResources {
        StoreResources {
            cache_budget: CacheBudget::new(cache_budget_bytes),
            open_segments: OpenSegments::new(max_open_segment_files),
        }
    }
}
