//! The admin HTTP API, one room: node status, append and read on log streams without the
//! Kafka protocol, membership changes, the flow limits, metrics, and the operator endpoints
//! `vdlctl` calls, served on the node's admin listener (plain HTTP or HTTPS), every call
//! authenticated and authorized.
//!
//! One job per file, every arrow pointing down (a file imports only those below it):
//!
//! ```text
//! mod.rs          serve: the listener's TLS from [admin], the router, the transport
//!   router.rs     the route table, the guard, body limit and API version layers
//!     status.rs   GET /status, GET /metrics
//!     streams.rs  POST /streams/{name}/append, GET /streams/{name}/records
//!     members.rs  GET/POST /members, DELETE /members/{id}
//!     rates.rs    GET/PUT /rates (the node-wide flow limits)
//!     operator.rs GET /replicas, GET /cluster/status, leader transfer and balance,
//!                 segment listing and deletion (asks or forwards to other nodes)
//!       peer_client.rs  calls another node's admin API for a caller
//!     reply.rs    the JSON error answers
//!     auth.rs     authentication and the ACL per route (the guard)
//!       http.rs   the transport: HTTP/1 over TCP or TLS, each request tagged with its
//!                 connection; it serves the router it is given and imports nothing above
//! ```
//!
//! The JSON answers' types (except `/status`'s and `/replicas`') are in the `vdl-admin-api`
//! crate, shared with `vdlctl`.

pub mod auth;
pub mod http;
pub mod members;
pub mod operator;
pub mod peer_client;
pub mod rates;
pub mod reply;
pub mod router;
pub mod status;
pub mod streams;

use std::sync::Arc;

use crate::node::Node;
use crate::security::tls::ReloadingServerTls;

/// Serves `node`'s admin API ([`router::router`]) on `listener` until the task is dropped:
/// plain HTTP, or HTTPS when `[admin]` names a certificate ([`http::serve_router`]). With TLS
/// the certificate files are re-read with the Kafka listeners' (when their modification time
/// changes, and on SIGHUP: [`Node::reload_tls`]); an error only when they cannot be read at
/// start.
pub async fn serve(listener: tokio::net::TcpListener, node: Arc<Node>) -> std::io::Result<()> {
    let tls = match &node.config().admin.tls {
        Some(files) => {
            let tls = Arc::new(
                ReloadingServerTls::new(files.clone())
                    .map_err(|e| std::io::Error::other(format!("admin TLS: {e}")))?,
            );
            node.reload_tls_with_listeners("admin", tls.clone());
            Some(tls)
        }
        None => None,
    };
    http::serve_router(listener, router::router(node), tls).await
}
