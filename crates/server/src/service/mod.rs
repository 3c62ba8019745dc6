//! The Kafka service of a node: the composition root that wires a running [`Node`] and the
//! Kafka protocol (`kafka/`) together, so that neither imports the other (`node/` imports
//! nothing of `kafka/`; `kafka/` sees the node only through the traits of
//! [`crate::kafka::host`]). Like `main.rs` and `lib.rs` it may import every room; no room
//! imports it (see "Layout rules" in the crate README).
//!
//! - `Broker` (this file): the node as the Kafka handlers see it, with the state only the
//!   Kafka service has: this node's consumer group coordinator and transaction coordinator.
//! - `host`: `Broker`'s implementations of the traits of [`crate::kafka::host`], each a
//!   call of the node's method of the same name (or the coordinator).
//! - `listeners`: [`Node::serve_kafka`] and [`Node::serve_kafka_until`]: binding the Kafka
//!   listeners, starting the coordinator's tasks and what runs once the node serves clients,
//!   serving the listeners, and polling their TLS files ([`TLS_RELOAD_POLL`]).
//!
//! Lifetimes: the listeners hold the `Broker` (and through it the node); the coordinator's
//! tasks hold it weakly and end once the listeners have (aborted, or drained at a graceful
//! shutdown, whose order `main.rs` owns).

mod host;
mod listeners;

use std::sync::Arc;

use crate::kafka::groups::coordinator::Coordinator;
use crate::kafka::txn::coordinator::TxnCoordinator;
use crate::node::Node;

pub use listeners::TLS_RELOAD_POLL;

/// The node as the Kafka handlers see it ([`crate::kafka::host::ConnectionHost`] and the
/// families' traits under it): the running node and this node's consumer group coordinator
/// (its groups' membership, held in memory while the node leads the metadata group). One per
/// start of the Kafka listeners; the handlers are generic over it, so the data path calls the
/// node's methods directly (no `dyn`, no allocation, no lock of its own).
pub(crate) struct Broker {
    node: Arc<Node>,
    coordinator: Coordinator,
    txn_coordinator: TxnCoordinator,
}

impl Broker {
    /// The Kafka service's view of `node`, with a coordinator without groups (it loads the
    /// groups stored in the metadata when it first coordinates in a metadata term).
    pub(crate) fn new(node: Arc<Node>) -> Arc<Broker> {
        Arc::new(Broker {
            node,
            coordinator: Coordinator::new(),
            txn_coordinator: TxnCoordinator::new(),
        })
    }
}
