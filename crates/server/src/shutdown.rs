//! Graceful shutdown of a running node (SIGTERM, SIGINT): the steps and their bounds.
//!
//! 1. The Kafka listener stops accepting connections (the open ones are still served).
//! 2. Every group this node leads (each partition and the metadata group) hands leadership to
//!    its most caught-up voter (raft-rs leader transfer, on the leader itself), and no group
//!    takes leadership back; clients of the moved partitions get NOT_LEADER_OR_FOLLOWER and
//!    go to the new leader. Bounded by half the shutdown timeout.
//! 3. Connections read no more requests, answer those in flight and close.
//! 4. The groups stop and every store's unsynced tail is synced (`Node::shutdown`).
//!
//! Steps 1 to 3 together are bounded by `node.shutdown_timeout_ms` (default 30 s); step 4
//! always runs. A second signal skips what is left of steps 2 and 3.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::kafka::listener::ShutdownPhase;
use crate::node::Node;

/// What a graceful shutdown did, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Groups led here when it started.
    pub led: usize,
    /// Groups still led here after the hand-off (0: all handed over).
    pub still_led: usize,
    /// Whether every Kafka connection closed within the bound.
    pub connections_closed: bool,
    /// Time the whole shutdown took.
    pub elapsed: Duration,
}

/// Runs steps 1 to 4 above. `kafka` is the listener task started with
/// [`Node::serve_kafka_until`] and `phase` the sender of its signal; `interrupted` resolves
/// when the operator insists (a second signal).
pub async fn graceful_shutdown(
    node: &Arc<Node>,
    phase: &tokio::sync::watch::Sender<ShutdownPhase>,
    kafka: tokio::task::JoinHandle<()>,
    interrupted: impl std::future::Future<Output = ()>,
) -> ShutdownReport {
    let started = Instant::now();
    let bound = node.config().shutdown_timeout;
    let deadline = started + bound;
    let _ = phase.send(ShutdownPhase::StopAccepting);
    let steps = async {
        let handed = node.hand_off_leadership(bound / 2).await;
        if handed.still_led > 0 {
            tracing::warn!(
                led = handed.led,
                still_led = handed.still_led,
                "some groups still led here after the hand-off bound; they will elect anew"
            );
        } else {
            tracing::info!(led = handed.led, "leadership handed over");
        }
        let _ = phase.send(ShutdownPhase::Drain);
        let left = deadline.saturating_duration_since(Instant::now());
        let closed = tokio::time::timeout(left, kafka).await.is_ok();
        (handed, closed)
    };
    let (led, still_led, connections_closed) = tokio::select! {
        (handed, closed) = steps => (handed.led, handed.still_led, closed),
        _ = interrupted => {
            tracing::warn!("second signal: stopping now");
            (0, 0, false)
        }
    };
    node.shutdown();
    ShutdownReport {
        led,
        still_led,
        connections_closed,
        elapsed: started.elapsed(),
    }
}
