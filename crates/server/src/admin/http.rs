//! The admin listener's transport: plain HTTP or HTTPS (the Kafka listeners' TLS code,
//! certificates reloaded when their files change), HTTP/1 served with hyper directly (not
//! `axum::serve`) so that each request is tagged with its connection ([`AdminConnection`]:
//! address, TLS, client certificate principal) for [`crate::admin::auth::guard`]. It serves
//! whatever router it is given ([`serve_router`]); [`crate::admin::serve`] hands it the admin
//! API's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;

use crate::security::tls::ReloadingServerTls;
use crate::security::Principal;

/// Longest a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most admin connections served at once (one more waits for a slot to free).
pub const MAX_ADMIN_CONNECTIONS: usize = 256;

/// What a connection to the admin listener brought (inserted into every request's
/// extensions by [`serve_router`], read by [`crate::admin::auth::guard`]).
#[derive(Debug, Clone)]
pub struct AdminConnection {
    /// The client's address.
    pub peer: SocketAddr,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The principal of the verified client certificate, if one was presented.
    pub certificate: Option<Principal>,
}

/// Serves `router` on `listener`, over HTTPS with `tls` (else plain HTTP), until the task is
/// dropped.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    tls: Option<Arc<ReloadingServerTls>>,
) -> std::io::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_ADMIN_CONNECTIONS));
    loop {
        let permit = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(std::io::Error::other)?;
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!("admin accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let router = router.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                None => {
                    let conn = AdminConnection {
                        peer,
                        tls: false,
                        certificate: None,
                    };
                    serve_connection(stream, router, conn).await;
                }
                Some(tls) => {
                    let accepted =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor().accept(stream))
                            .await;
                    let stream = match accepted {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, "admin TLS handshake failed: {e}");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "admin TLS handshake timed out");
                            return;
                        }
                    };
                    let certificate = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|c| crate::security::tls::certificate_principal(c));
                    let conn = AdminConnection {
                        peer,
                        tls: true,
                        certificate,
                    };
                    serve_connection(stream, router, conn).await;
                }
            }
        });
    }
}

async fn serve_connection<S>(stream: S, router: axum::Router, conn: AdminConnection)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let peer = conn.peer;
    let service = TowerToHyperService::new(router.layer(axum::Extension(conn)));
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(%peer, "admin connection ended: {e}");
    }
}
