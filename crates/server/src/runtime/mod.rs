//! How a node runs thousands of Raft groups on a few threads.
//!
//! - [`workers`]: the worker pool and timer thread every group runs on, in turns (its items
//!   are re-exported here: `runtime::Runtime`, `runtime::Task`, ...).
//! - [`inbox`]: each group's bounded input queue.
//! - [`quiesce`]: when an idle group stops ticking and heartbeating.
//! - [`fd_budget`]: the open-file limit, raised at start and split between client connections
//!   and storage.
//! - [`timeline`]: timestamps at each hand-off of the produce path, for benchmarks
//!   (`VDL_TIMELINE`).
//! - [`background`]: a named thread that runs a step every interval and stops promptly when
//!   dropped (the log cleaner's and the scrubber's).

pub mod background;
pub mod fd_budget;
pub mod inbox;
pub mod quiesce;
pub mod timeline;
pub mod workers;

pub use workers::*;
