//! Starting a node's Kafka service: binding every Kafka listener (reading the TLS files of
//! those that use TLS), starting the group coordinator's tasks and what runs once the node
//! serves clients, then serving the listeners and polling their TLS files.

use std::sync::Arc;
use std::time::Duration;

use super::Broker;
use crate::node::{bind_listener, Node, NodeError};
use crate::shutdown::{ShutdownPhase, ShutdownSignal};

/// How often the TLS files of the Kafka listeners are checked for changes.
pub const TLS_RELOAD_POLL: Duration = Duration::from_secs(2);

impl Node {
    /// Binds every Kafka listener (reading the TLS files of those that use TLS) and serves
    /// Kafka clients on them until the returned task is aborted. While it runs, TLS files
    /// whose modification time changed are re-read every [`TLS_RELOAD_POLL`]. (Defined by the
    /// Kafka service, `crate::service`: the node itself knows nothing of Kafka.)
    pub async fn serve_kafka(self: &Arc<Self>) -> Result<tokio::task::JoinHandle<()>, NodeError> {
        // The sender stays with the listeners' task: the shutdown signal never fires.
        let (keep, never) = tokio::sync::watch::channel(ShutdownPhase::Running);
        start(Broker::new(self.clone()), never, Some(keep)).await
    }

    /// Like [`Node::serve_kafka`], with a graceful shutdown (see [`crate::shutdown`]): at
    /// `StopAccepting` the listeners close their sockets, at `Drain` every connection answers
    /// what it has read and closes; the returned task ends once all have.
    pub async fn serve_kafka_until(
        self: &Arc<Self>,
        shutdown: ShutdownSignal,
    ) -> Result<tokio::task::JoinHandle<()>, NodeError> {
        start(Broker::new(self.clone()), shutdown, None).await
    }
}

/// Binds `broker`'s Kafka listeners, starts its coordinator's tasks and the node's client
/// tasks, and returns the task serving the listeners until `shutdown` drains them (or the
/// task is aborted); `keep` is dropped with it.
async fn start(
    broker: Arc<Broker>,
    shutdown: ShutdownSignal,
    keep: Option<tokio::sync::watch::Sender<ShutdownPhase>>,
) -> Result<tokio::task::JoinHandle<()>, NodeError> {
    let node = &broker.node;
    let mut endpoints = Vec::new();
    for config in node.config().kafka_listeners() {
        let tls =
            match &config.tls {
                None => None,
                Some(files) => {
                    let tls = crate::security::tls::ReloadingServerTls::new(files.clone())
                        .map_err(|e| NodeError::Tls {
                            listener: config.name.clone(),
                            message: e.to_string(),
                        })?;
                    Some(Arc::new(tls))
                }
            };
        let listener = bind_listener(config.listen).await?;
        if let Some(tls) = &tls {
            node.reload_tls_with_listeners(&config.name, tls.clone());
        }
        endpoints.push((
            listener,
            Arc::new(crate::kafka::listener::Endpoint { config, tls }),
        ));
    }
    // The group coordinator's background tasks (deadlines, stored membership, offset
    // expiry) run whether or not a group request ever reaches this node.
    crate::kafka::groups::node_coordinator::coordinator(&broker);
    // The transaction coordinator's tasks: the marker writer runs on every node.
    crate::kafka::txn::tasks::start(&broker);
    node.start_serving_clients();
    Ok(tokio::spawn(async move {
        let mut tasks = tokio::task::JoinSet::new();
        let limits = crate::kafka::listener::connection_limits(&*broker);
        for (listener, endpoint) in endpoints {
            tasks.spawn(crate::kafka::serve(
                listener,
                broker.clone(),
                endpoint,
                limits.clone(),
                shutdown.clone(),
            ));
        }
        let weak = Arc::downgrade(&broker.node);
        drop(broker);
        let reload = async move {
            loop {
                tokio::time::sleep(TLS_RELOAD_POLL).await;
                let Some(node) = weak.upgrade() else { return };
                node.reload_tls(false);
            }
        };
        // Ends when every listener has (after a shutdown's drain); aborting this task
        // drops the set, which aborts every listener.
        tokio::select! {
            _ = async { while tasks.join_next().await.is_some() {} } => {}
            _ = reload => {}
        }
        drop(keep);
    }))
}
