//! How far a running node's graceful shutdown (SIGTERM, SIGINT) has gone: the phases the Kafka
//! listeners follow, and the signal that carries them. The composition root (`main.rs`) drives
//! the shutdown, in this order:
//!
//! 1. The Kafka listener stops accepting connections (the open ones are still served):
//!    [`ShutdownPhase::StopAccepting`].
//! 2. Every group this node leads (each partition and the metadata group) hands leadership to
//!    its most caught-up voter (raft-rs leader transfer, on the leader itself), and no group
//!    takes leadership back; clients of the moved partitions get NOT_LEADER_OR_FOLLOWER and
//!    go to the new leader. Bounded by half the shutdown timeout.
//! 3. Connections read no more requests, answer those in flight and close:
//!    [`ShutdownPhase::Drain`].
//! 4. The groups stop and every store's unsynced tail is synced (`Node::shutdown`).
//!
//! Steps 1 to 3 together are bounded by `node.shutdown_timeout_ms` (default 30 s); step 4
//! always runs. A second signal skips what is left of steps 2 and 3.

/// How far a node's shutdown has gone, as its Kafka listeners follow it (see
/// `crate::kafka::listener::serve`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum ShutdownPhase {
    /// Serving.
    #[default]
    Running,
    /// No new connections; the open ones are still served.
    StopAccepting,
    /// Connections read no more requests: they answer those read, then close.
    Drain,
}

/// Tells a Kafka listener how far the node's shutdown has gone.
pub type ShutdownSignal = tokio::sync::watch::Receiver<ShutdownPhase>;
