//! The listeners of a node: binding one (retrying while its address is still in use: the peer
//! listener here, the Kafka listeners in the Kafka service, `crate::service`), what starts once
//! the node serves clients, and the TLS files of the listeners that use TLS (the Kafka
//! listeners', the admin listener's, `[peer_tls]`) with their reloads.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use super::{Node, NodeError};

/// How long a listener's address may stay in use before binding it fails: the listener of a
/// node that was just shut down in the same process (its task is cancelled, not yet dropped),
/// or of a previous process of this node that is still exiting, lets go of it within this.
pub(crate) const BIND_RETRY_FOR: Duration = Duration::from_secs(5);

/// Binds `addr`, retrying while it is in use for at most [`BIND_RETRY_FOR`].
pub(crate) async fn bind_listener(addr: std::net::SocketAddr) -> Result<TcpListener, NodeError> {
    let deadline = tokio::time::Instant::now() + BIND_RETRY_FOR;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(source) => return Err(NodeError::Bind { addr, source }),
        }
    }
}

impl Node {
    /// Starts what runs once this node serves clients (the Kafka service calls it once its
    /// listeners are bound): the catch-up with the cluster's metadata ([`Node::caught_up`])
    /// and the import of the bootstrap SCRAM users.
    pub(crate) fn start_serving_clients(self: &Arc<Self>) {
        self.start_metadata_catch_up();
        super::bootstrap_users::start_import(self);
    }

    /// Adds `tls` (named `name` in logs) to what [`Node::reload_tls`] re-reads: the Kafka
    /// service adds each TLS Kafka listener's, the admin API its listener's, so all are
    /// reloaded together.
    pub fn reload_tls_with_listeners(
        &self,
        name: &str,
        tls: Arc<crate::security::tls::ReloadingServerTls>,
    ) {
        self.listener_tls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_string(), tls));
    }

    /// Re-reads the TLS files of the Kafka listeners, the admin listener and `[peer_tls]`: all of them (`force`,
    /// on SIGHUP) or those whose modification time changed. New connections get the new
    /// certificates; a file that does not load keeps the previous ones (logged).
    pub fn reload_tls(&self, force: bool) {
        // Changed peer TLS files are picked up by their own poll task.
        if let (true, Some((peer_tls, _))) = (force, &self.peer_tls) {
            peer_tls.reload_logged(true);
        }
        let listeners = self
            .listener_tls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (name, tls) in listeners {
            let result = if force {
                tls.reload().map(|()| true)
            } else {
                tls.reload_if_changed()
            };
            match result {
                Ok(true) => tracing::info!(listener = %name, "TLS certificates reloaded"),
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    listener = %name,
                    "TLS certificates not reloaded, the previous ones stay in use: {e}"
                ),
            }
        }
    }
}
