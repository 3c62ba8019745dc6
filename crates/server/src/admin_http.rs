//! The admin listener's transport: plain HTTP or HTTPS (`[admin] tls_cert`, the Kafka
//! listeners' TLS code, certificates reloaded when their files change), each request tagged
//! with its connection ([`AdminConnection`]: address, TLS, client certificate principal) for
//! [`crate::admin_auth::guard`]; and the client one node uses to call another node's admin API
//! for a caller ([`call_peer_as`]: HTTPS verified with `tls_ca`, this node's certificate
//! presented, the caller's `Authorization` passed on).

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderValue;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;

use crate::admin_auth::AdminConnection;
use crate::config::AdminSettings;
use crate::node::Node;
use crate::security::config::TlsFiles;
use crate::security::tls::ReloadingServerTls;

/// Longest a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most admin connections served at once (one more waits for a slot to free).
pub const MAX_ADMIN_CONNECTIONS: usize = 256;
/// Largest answer read from another node's admin API.
const PEER_MAX_BYTES: u64 = 64 << 20;

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

/// The ureq TLS settings that verify another node's admin certificate with `files.ca` and
/// present `files`' certificate.
fn client_tls(files: &TlsFiles) -> Result<ureq::tls::TlsConfig, String> {
    let read = |p: &std::path::Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let ca = files.ca.as_deref().ok_or("admin TLS has no tls_ca")?;
    let roots: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&read(ca)?)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if roots.is_empty() {
        return Err(format!("{}: no CA certificate", ca.display()));
    }
    let chain: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&read(&files.cert)?)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    let key = ureq::tls::PrivateKey::from_pem(&read(&files.key)?)
        .map_err(|e| format!("{}: {e}", files.key.display()))?;
    Ok(ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
        .client_cert(Some(ureq::tls::ClientCert::new_with_certs(&chain, key)))
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .build())
}

/// Calls `address`'s admin API (another node, [`crate::node::Node::admin_addresses`]) with
/// `settings`' scheme and TLS, passing `authorization` (the caller's header) on: `(status,
/// body)`. Blocking client on a blocking thread.
pub async fn call_peer_as(
    settings: &AdminSettings,
    authorization: Option<&HeaderValue>,
    address: &str,
    method: &'static str,
    path_and_query: &str,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let url = format!("{}://{address}{path_and_query}", settings.scheme());
    let tls = settings.tls.as_ref().map(client_tls).transpose()?;
    let authorization = authorization
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    tokio::task::spawn_blocking(move || {
        let mut config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false);
        if let Some(tls) = tls {
            config = config.tls_config(tls);
        }
        let agent: ureq::Agent = config.build().into();
        let response = match method {
            "POST" => {
                let mut r = agent.post(&url);
                if let Some(a) = &authorization {
                    r = r.header("authorization", a);
                }
                r.send_empty()
            }
            _ => {
                let mut r = agent.get(&url);
                if let Some(a) = &authorization {
                    r = r.header("authorization", a);
                }
                r.call()
            }
        };
        let mut response = response.map_err(|e| format!("{url}: {e}"))?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(PEER_MAX_BYTES)
            .read_to_string()
            .map_err(|e| format!("{url}: {e}"))?;
        Ok((status, body))
    })
    .await
    .map_err(|e| format!("admin call task failed: {e}"))?
}

/// Serves `node`'s admin API on `listener` (see [`crate::admin`]).
/// With `[admin]` TLS the certificate files are re-read with the Kafka listeners' (when their
/// modification time changes, and on SIGHUP: [`Node::reload_tls`]); an error only when they
/// cannot be read at start.
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
    serve_router(listener, crate::admin::router(node), tls).await
}
