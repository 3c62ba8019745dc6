//! Mutual TLS between nodes (`[peer_tls]`): certificates that name a node id, the peer CA,
//! certificate revocation lists, and reloading when the files change.
//!
//! **What a peer certificate must name.** A member's peer certificate carries the URI
//! `vdl-node://<id>` (its node id in decimal, no sign, no leading zero) in its subject
//! alternative names, exactly one id (the same URI repeated is allowed, two different ids
//! are not). `vdl certs generate` writes such certificates (`peer-node<i>.pem`, id `i`),
//! signed by a peer CA of their own (`peer-ca.pem`) that signs nothing else. The host names
//! and IP addresses of the certificate are still checked by the dialer as before.
//!
//! **Both sides check it.** The accepting node requires a client certificate that chains to
//! `[peer_tls] ca`, is not revoked by `[peer_tls] crl`, and names a node: a certificate that
//! names none (a Kafka client certificate, even from the same CA) is refused before any hello
//! byte is read, and the hello must then claim exactly the id the certificate names (see
//! [`crate::replication::peer_guard::PeerGuard::admit_certified_hello`]). The dialing node requires
//! the acceptor's certificate to chain to the same CA, be valid for the peer's IP and name the
//! node id it dialed. So holding node 2's key is needed to be node 2 on the peer port.
//!
//! **Reloading.** [`PeerTls`] holds the current acceptor and connector; new connections take
//! them, and every reload closes the connections opened before it (both directions), so the
//! peers handshake again under the new files at once ([`PeerTls::generation`]): a revoked
//! certificate loses its open connections too. [`PeerTls::reload_if_changed`] re-reads the files (cert, key,
//! CA, CRL) when a modification time changed ([`spawn_reload_poll`] calls it every
//! [`PEER_TLS_RELOAD_POLL`]); [`PeerTls::reload`] always (on SIGHUP). A reload that fails
//! (a half-written file, a key that does not match, a certificate naming another node) keeps
//! the previous configuration.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use rustls::server::WebPkiClientVerifier;

use crate::security::config::TlsFiles;
use crate::security::tls::{self, mtimes, TlsError};

/// The URI scheme (and `//`) of the subject alternative name that names a node.
pub const NODE_URI_PREFIX: &str = "vdl-node://";

/// How often [`spawn_reload_poll`] looks at the files' modification times.
pub const PEER_TLS_RELOAD_POLL: Duration = Duration::from_secs(2);

/// Most decimal digits of a node id in a certificate (`u64::MAX` has 20).
const MAX_ID_DIGITS: usize = 20;

/// The subject alternative name URI that names node `id` (`vdl-node://<id>`).
pub fn node_uri(id: u64) -> String {
    format!("{NODE_URI_PREFIX}{id}")
}

/// Why a certificate does not name a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeNameError {
    /// The connection presented no certificate.
    #[error("no certificate")]
    NoCertificate,
    /// The certificate is not parseable X.509.
    #[error("the certificate does not parse")]
    Unparseable,
    /// No `vdl-node://` URI among the subject alternative names (a client certificate, say).
    #[error("the certificate names no node (no {NODE_URI_PREFIX}<id> subject alternative name)")]
    NoNodeName,
    /// A `vdl-node://` URI that is not followed by a node id.
    #[error("`{0}` is not a node name ({NODE_URI_PREFIX}<id>, id in decimal, 1 or more)")]
    BadNodeName(String),
    /// URIs naming two different node ids.
    #[error("the certificate names nodes {0} and {1}")]
    SeveralNodes(u64, u64),
}

/// Parses the id of a `vdl-node://<id>` URI: 1 to 20 decimal digits, no leading zero, not 0,
/// within `u64`. `None` when `uri` does not start with [`NODE_URI_PREFIX`].
fn parse_node_uri(uri: &str) -> Option<Result<u64, NodeNameError>> {
    let (scheme, rest) = uri.split_at_checked(NODE_URI_PREFIX.len())?;
    if !scheme.eq_ignore_ascii_case(NODE_URI_PREFIX) {
        return None;
    }
    let bad = || NodeNameError::BadNodeName(uri.chars().take(64).collect());
    let digits_only = !rest.is_empty()
        && rest.len() <= MAX_ID_DIGITS
        && rest.bytes().all(|b| b.is_ascii_digit())
        && !rest.starts_with('0');
    if !digits_only {
        return Some(Err(bad()));
    }
    Some(rest.parse::<u64>().map_err(|_| bad()))
}

/// The node id a certificate (DER) names with its `vdl-node://<id>` subject alternative
/// name; an error when it names none, names two different ids, or a `vdl-node://` URI is
/// malformed.
pub fn certificate_node_id(der: &[u8]) -> Result<u64, NodeNameError> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|_| NodeNameError::Unparseable)?;
    let san = cert
        .subject_alternative_name()
        .map_err(|_| NodeNameError::Unparseable)?;
    let mut found: Option<u64> = None;
    for name in san.iter().flat_map(|ext| ext.value.general_names.iter()) {
        let x509_parser::extensions::GeneralName::URI(uri) = name else {
            continue;
        };
        let Some(id) = parse_node_uri(uri) else {
            continue;
        };
        let id = id?;
        match found {
            Some(other) if other != id => return Err(NodeNameError::SeveralNodes(other, id)),
            _ => found = Some(id),
        }
    }
    found.ok_or(NodeNameError::NoNodeName)
}

/// The node id the peer's certificate names on an established TLS connection (the peer's
/// end-entity certificate, already verified against the CA by rustls).
pub fn connection_node_id(conn: &rustls::CommonState) -> Result<u64, NodeNameError> {
    let first = conn
        .peer_certificates()
        .and_then(|certs| certs.first())
        .ok_or(NodeNameError::NoCertificate)?;
    certificate_node_id(first)
}

/// Why the peer TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PeerTlsError {
    /// A file, the key or the CA is unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// This node's own certificate does not name this node (see [`check_own_certificate`]).
    #[error("{path}: the peer certificate must name this node ({uri}): {why}")]
    OwnName {
        /// The certificate file.
        path: PathBuf,
        /// The name it must carry.
        uri: String,
        /// What it names instead.
        why: String,
    },
}

fn ca_path(files: &TlsFiles) -> Result<&Path, TlsError> {
    files
        .ca
        .as_deref()
        .ok_or_else(|| TlsError::Verifier("no peer CA file".into()))
}

/// The acceptor's configuration: this node's certificate, client certificates required,
/// chaining to the peer CA and not revoked by the CRLs.
fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = tls::read_certs(&files.cert)?;
    let key = tls::read_key(&files.key)?;
    let roots = Arc::new(tls::read_roots(ca_path(files)?)?);
    let mut verifier = WebPkiClientVerifier::builder_with_provider(roots, tls::provider());
    if let Some(crl) = &files.crl {
        verifier = verifier.with_crls(tls::read_crls(crl)?);
    }
    let verifier = verifier
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(tls::VERSIONS)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    config.alpn_protocols = Vec::new();
    Ok(Arc::new(config))
}

/// The dialer's configuration: presents this node's certificate, checks the acceptor's
/// against the peer CA and the CRLs (the node id is checked after the handshake).
fn client_config(files: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let roots = Arc::new(tls::read_roots(ca_path(files)?)?);
    let certs = tls::read_certs(&files.cert)?;
    let key = tls::read_key(&files.key)?;
    let mut verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, tls::provider());
    if let Some(crl) = &files.crl {
        verifier = verifier.with_crls(tls::read_crls(crl)?);
    }
    let verifier = verifier
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
    let config = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(tls::VERSIONS)?
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(certs, key)?;
    Ok(Arc::new(config))
}

/// Whether this node's own certificate names `self_id`; `Err` says what it names instead.
/// Peers refuse a certificate that does not name the node it is used by, so a mismatch is a
/// misconfiguration: it is logged at error level when the files are (re)read, but not fatal
/// (a node's own check protects nothing: peers check, see the module documentation).
pub fn check_own_certificate(files: &TlsFiles, self_id: u64) -> Result<(), PeerTlsError> {
    let own = tls::read_certs(&files.cert)?;
    match certificate_node_id(&own[0]) {
        Ok(id) if id == self_id => Ok(()),
        named => Err(PeerTlsError::OwnName {
            path: files.cert.clone(),
            uri: node_uri(self_id),
            why: match named {
                Ok(other) => format!("it names node {other}"),
                Err(e) => e.to_string(),
            },
        }),
    }
}

/// Both configurations (this node's certificate is checked to name `self_id`, logged).
fn build(
    files: &TlsFiles,
    self_id: u64,
) -> Result<(tokio_rustls::TlsAcceptor, tokio_rustls::TlsConnector), PeerTlsError> {
    if let Err(e) = check_own_certificate(files, self_id) {
        tracing::error!("{e}; the other members will refuse this node's peer connections");
    }
    Ok((
        tokio_rustls::TlsAcceptor::from(server_config(files)?),
        tokio_rustls::TlsConnector::from(client_config(files)?),
    ))
}

/// The acceptor and connector in use and the files' modification times they were read at.
struct Current {
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
    stamp: Vec<Option<SystemTime>>,
}

/// Mutual TLS between nodes: what the acceptor and the dialer use now (see the module
/// documentation), re-read when the files change.
pub struct PeerTls {
    files: TlsFiles,
    self_id: u64,
    current: RwLock<Current>,
    /// Counts the configurations installed by reloads; connections opened under an older one
    /// are closed (see [`PeerTls::generation`]).
    generation: tokio::sync::watch::Sender<u64>,
}

impl PeerTls {
    /// Both sides from `[peer_tls]`'s files, for node `self_id` (whose certificate should name
    /// it: see [`check_own_certificate`]).
    pub fn from_files(files: &TlsFiles, self_id: u64) -> Result<PeerTls, PeerTlsError> {
        let stamp = mtimes(files);
        let (acceptor, connector) = build(files, self_id)?;
        Ok(PeerTls {
            files: files.clone(),
            self_id,
            current: RwLock::new(Current {
                acceptor,
                connector,
                stamp,
            }),
            generation: tokio::sync::watch::Sender::new(0),
        })
    }

    /// The number of configurations installed by reloads so far. Each reload closes the
    /// connections opened before it (incoming ones through [`PeerTls::subscribe`], outgoing ones
    /// when their sender sees the generation change), so a certificate revoked or a CA removed
    /// applies to every connection, not only to new ones: the peers reconnect at once and
    /// handshake again under the new files.
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// A receiver that changes at each reload (see [`PeerTls::generation`]).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    fn install(
        &self,
        acceptor: tokio_rustls::TlsAcceptor,
        connector: tokio_rustls::TlsConnector,
        stamp: Vec<Option<SystemTime>>,
    ) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Current {
            acceptor,
            connector,
            stamp,
        };
        self.generation.send_modify(|g| *g += 1);
    }

    /// The acceptor for a new incoming connection: requires a client certificate from the
    /// peer CA, not revoked.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .acceptor
            .clone()
    }

    /// The connector for a new outgoing connection: presents this node's certificate and
    /// checks the peer's against the peer CA and the CRLs.
    pub fn connector(&self) -> tokio_rustls::TlsConnector {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .connector
            .clone()
    }

    /// Re-reads the files now; on failure the previous configuration stays.
    pub fn reload(&self) -> Result<(), PeerTlsError> {
        let stamp = mtimes(&self.files);
        let (acceptor, connector) = build(&self.files, self.self_id)?;
        self.install(acceptor, connector, stamp);
        Ok(())
    }

    /// Re-reads the files if a modification time changed since the last read; returns whether
    /// a new configuration was installed. A failure is reported once per change.
    pub fn reload_if_changed(&self) -> Result<bool, PeerTlsError> {
        let stamp = mtimes(&self.files);
        if self.current.read().unwrap_or_else(|e| e.into_inner()).stamp == stamp {
            return Ok(false);
        }
        match build(&self.files, self.self_id) {
            Ok((acceptor, connector)) => {
                self.install(acceptor, connector, stamp);
                Ok(true)
            }
            Err(e) => {
                self.current
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .stamp = stamp;
                Err(e)
            }
        }
    }

    /// [`PeerTls::reload`] (`force`) or [`PeerTls::reload_if_changed`], logged.
    pub fn reload_logged(&self, force: bool) {
        let result = if force {
            self.reload().map(|()| true)
        } else {
            self.reload_if_changed()
        };
        match result {
            Ok(true) => tracing::info!("peer TLS certificates reloaded"),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                "peer TLS certificates not reloaded, the previous ones stay in use: {e}"
            ),
        }
    }
}

/// Polls `tls`'s files every [`PEER_TLS_RELOAD_POLL`] and reloads them when they change; the
/// task ends once every other holder of `tls` dropped it.
pub fn spawn_reload_poll(tls: &Arc<PeerTls>) -> tokio::task::JoinHandle<()> {
    let weak: Weak<PeerTls> = Arc::downgrade(tls);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(PEER_TLS_RELOAD_POLL).await;
            let Some(tls) = weak.upgrade() else { return };
            tls.reload_logged(false);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with(uris: &[&str]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        for u in uris {
            params
                .subject_alt_names
                .push(rcgen::SanType::URI((*u).try_into().unwrap()));
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    /// The node id comes from exactly one `vdl-node://<id>` URI; anything else is refused.
    #[test]
    fn certificate_names_one_node() {
        assert_eq!(certificate_node_id(&cert_with(&["vdl-node://7"])), Ok(7));
        assert_eq!(
            certificate_node_id(&cert_with(&["https://example.com/", "vdl-node://42"])),
            Ok(42)
        );
        assert_eq!(
            certificate_node_id(&cert_with(&["vdl-node://3", "vdl-node://3"])),
            Ok(3)
        );
        assert_eq!(
            certificate_node_id(&cert_with(&[])),
            Err(NodeNameError::NoNodeName)
        );
        assert_eq!(
            certificate_node_id(&cert_with(&["https://vdl-node/1"])),
            Err(NodeNameError::NoNodeName)
        );
        assert_eq!(
            certificate_node_id(&cert_with(&["vdl-node://1", "vdl-node://2"])),
            Err(NodeNameError::SeveralNodes(1, 2))
        );
        for bad in [
            "vdl-node://",
            "vdl-node://0",
            "vdl-node://01",
            "vdl-node://+1",
            "vdl-node://1/",
            "vdl-node://1x",
            "vdl-node:// 1",
            "vdl-node://18446744073709551616",
            "vdl-node://123456789012345678901",
        ] {
            assert!(
                matches!(
                    certificate_node_id(&cert_with(&[bad])),
                    Err(NodeNameError::BadNodeName(_))
                ),
                "{bad}"
            );
        }
        assert_eq!(
            certificate_node_id(&cert_with(&["vdl-node://18446744073709551615"])),
            Ok(u64::MAX)
        );
        assert_eq!(
            certificate_node_id(b"not a certificate"),
            Err(NodeNameError::Unparseable)
        );
    }

    use crate::security::certs::{generate, revoke_peer_certificates, CertSpec};
    use crate::security::config::{ClientAuth, TlsFiles};

    fn files(dir: &Path, cert: &str, crl: bool) -> TlsFiles {
        TlsFiles {
            cert: dir.join(format!("{cert}.pem")),
            key: dir.join(format!("{cert}.key")),
            ca: Some(dir.join("peer-ca.pem")),
            client_auth: ClientAuth::Required,
            crl: crl.then(|| dir.join("peer-crl.pem")),
        }
    }

    /// A TLS handshake in memory from `client` to `server`: the ids each side's peer
    /// certificate names, or the handshake's error.
    async fn handshake(
        server: &PeerTls,
        client: tokio_rustls::TlsConnector,
    ) -> Result<(u64, u64), String> {
        let (a, b) = tokio::io::duplex(1 << 16);
        let name =
            rustls::pki_types::ServerName::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]).into());
        let acceptor = server.acceptor();
        let (accepted, connected) = tokio::join!(acceptor.accept(a), client.connect(name, b));
        let accepted = accepted.map_err(|e| format!("server: {e}"))?;
        let connected = connected.map_err(|e| format!("client: {e}"))?;
        Ok((
            connection_node_id(accepted.get_ref().1).map_err(|e| e.to_string())?,
            connection_node_id(connected.get_ref().1).map_err(|e| e.to_string())?,
        ))
    }

    /// `vdl certs generate`'s peer certificates name their node and pass between members;
    /// a Kafka client certificate (the client CA) does not pass the peer CA; a certificate
    /// revoked in the CRL is refused once the changed CRL is reloaded.
    #[tokio::test]
    async fn generated_peer_certificates_name_nodes_and_revocation_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        generate(
            d,
            &CertSpec {
                nodes: 2,
                hosts: vec!["127.0.0.1".into()],
                clients: vec!["alice".into()],
                expired_clients: vec![],
                valid_days: 10,
            },
        )
        .unwrap();
        revoke_peer_certificates(d, &[], 10).unwrap();
        let node1 = PeerTls::from_files(&files(d, "peer-node1", true), 1).unwrap();
        let node2 = PeerTls::from_files(&files(d, "peer-node2", true), 2).unwrap();
        assert_eq!(handshake(&node1, node2.connector()).await, Ok((2, 1)));
        // The Kafka listener certificate and the client certificate come from the client CA.
        assert!(check_own_certificate(&files(d, "node1", false), 1).is_err());
        for stranger in ["client-alice", "node2"] {
            // Presents the stranger's certificate, trusts the peer CA.
            let config = client_config(&files(d, stranger, false)).unwrap();
            let r = handshake(&node1, tokio_rustls::TlsConnector::from(config)).await;
            assert!(r.is_err(), "{stranger}: {r:?}");
        }
        // Node 2 revoked: refused by node 1 once the CRL's change is noticed.
        std::thread::sleep(std::time::Duration::from_millis(20));
        revoke_peer_certificates(d, &[d.join("peer-node2.pem")], 10).unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.join("peer-crl.pem"))
            .unwrap();
        f.set_modified(SystemTime::now() + Duration::from_secs(5))
            .unwrap();
        let reloads = node1.subscribe();
        assert_eq!(node1.generation(), 0);
        assert!(node1.reload_if_changed().unwrap());
        assert!(!node1.reload_if_changed().unwrap());
        assert_eq!(node1.generation(), 1);
        assert!(reloads.has_changed().unwrap());
        let r = handshake(&node1, node2.connector()).await;
        assert!(r.is_err(), "{r:?}");
        // Node 1 dialing the revoked node 2 refuses its server certificate as well.
        let r = handshake(&node2, node1.connector()).await;
        assert!(r.as_ref().is_err_and(|e| e.contains("Revoked")), "{r:?}");
    }
}
