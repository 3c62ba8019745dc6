//! The client one node uses to call another node's admin API ([`call_peer_as`], for a caller:
//! HTTPS verified with `[admin] tls_ca`, this node's certificate presented, the caller's
//! `Authorization` passed on; [`call_peer`]: plain HTTP without credentials). Used by the
//! operator endpoints that gather other nodes' views or forward to the partition's leader
//! ([`crate::admin::operator`]).

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderValue;

use crate::config::AdminSettings;
use crate::security::config::TlsFiles;

/// Largest answer read from another node's admin API.
const PEER_MAX_BYTES: u64 = 64 << 20;

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

/// Calls another node's admin API over plain HTTP without credentials (blocking client on a
/// blocking thread): `(status, body)`. Calls made for a caller use [`call_peer_as`].
pub async fn call_peer(
    address: &str,
    method: &'static str,
    path_and_query: &str,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let plain = AdminSettings::default();
    call_peer_as(&plain, None, address, method, path_and_query, timeout).await
}
