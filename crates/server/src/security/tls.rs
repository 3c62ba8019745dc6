//! TLS with rustls (the `ring` provider; TLS 1.2 and 1.3 only): server and client
//! configurations from PEM files, the principal of a client certificate, and reloading
//! certificates without a restart.
//!
//! [`ReloadingServerTls`] holds a listener's current configuration; new connections take the
//! current one, connections already open keep theirs. [`ReloadingServerTls::reload_if_changed`]
//! re-reads the files when one of their modification times changed (the node polls it) and
//! [`ReloadingServerTls::reload`] re-reads them always (on SIGHUP). A reload that fails (a file
//! half written, a key that does not match) keeps the previous configuration and is logged.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use crate::security::config::{ClientAuth, TlsFiles};
use crate::security::Principal;

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// rustls refused the certificates or key (a key that does not match, say).
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client certificate verifier could not be built (an empty CA file).
    #[error("client certificate verification: {0}")]
    Verifier(String),
}

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// TLS 1.2 and 1.3; nothing older.
pub(crate) const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

pub(crate) fn file_error(path: &Path, message: impl ToString) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        message: message.to_string(),
    }
}

/// Reads every certificate of a PEM file (at least one).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no certificate in the file"));
    }
    Ok(certs)
}

pub(crate) fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_error(path, e))
}

/// Reads every CRL of a PEM file (at least one).
pub fn read_crls(path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>, TlsError> {
    let crls = CertificateRevocationListDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if crls.is_empty() {
        return Err(file_error(path, "no X509 CRL in the file"));
    }
    Ok(crls)
}

pub(crate) fn read_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| file_error(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// A server configuration from `files`: its certificate chain and key, and client
/// certificates verified against its CA (and its CRLs, when set) as `files.client_auth` says.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let builder =
        rustls::ServerConfig::builder_with_provider(provider()).with_protocol_versions(VERSIONS)?;
    let builder = match (&files.ca, files.client_auth) {
        (_, ClientAuth::None) | (None, _) => builder.with_no_client_auth(),
        (Some(ca), auth) => {
            let roots = Arc::new(read_roots(ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider());
            let verifier = if auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = match &files.crl {
                Some(crl) => verifier.with_crls(read_crls(crl)?),
                None => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Verifier(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key)?;
    config.alpn_protocols = Vec::new();
    Ok(Arc::new(config))
}

/// A client configuration that trusts the CA of `files` and presents its certificate and
/// key (mutual TLS between nodes).
pub fn client_config(files: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let ca = files
        .ca
        .as_deref()
        .ok_or_else(|| TlsError::Verifier("no CA file".into()))?;
    let roots = read_roots(ca)?;
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)?;
    Ok(Arc::new(config))
}

/// The principal of a client certificate as Kafka's default principal builder gives it:
/// `User:` and the subject's distinguished name in RFC 2253 form (Java's
/// `X500Principal.getName()`: last RDN first, `CN=client,OU=eng,O=example`). `None` when the
/// certificate does not parse.
pub fn certificate_principal(der: &[u8]) -> Option<Principal> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(Principal::user(rfc2253(cert.subject())))
}

/// RFC 2253 keywords Java uses for these attribute OIDs; others are written as dotted OIDs.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// Escapes an attribute value as RFC 2253 section 2.4 asks.
fn escape_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let oid = attr.attr_type().to_id_string();
                    match (keyword(&oid), attr.as_str()) {
                        (Some(k), Ok(v)) => format!("{k}={}", escape_value(v)),
                        (k, _) => {
                            // Not a string (or an unknown type): `OID=#hex` of its DER value.
                            let hex: String = attr
                                .attr_value()
                                .data
                                .iter()
                                .map(|b| format!("{b:02x}"))
                                .collect();
                            let tag = attr.attr_value().header.tag().0 as u8;
                            let len = attr.attr_value().data.len();
                            let len_hex = if len < 128 {
                                format!("{len:02x}")
                            } else {
                                String::new()
                            };
                            format!("{}=#{tag:02x}{len_hex}{hex}", k.unwrap_or(oid.as_str()))
                        }
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// The modification times of `files` (cert, key, and CA and CRL when set): what a reload
/// compares to decide whether the files changed.
pub(crate) fn mtimes(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    [
        Some(&files.cert),
        Some(&files.key),
        files.ca.as_ref(),
        files.crl.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
    .collect()
}

/// A listener's TLS configuration, re-read when its files change or on demand.
pub struct ReloadingServerTls {
    files: TlsFiles,
    current: RwLock<(Arc<rustls::ServerConfig>, Vec<Option<SystemTime>>)>,
}

impl ReloadingServerTls {
    /// Reads `files` (an error if they do not make a configuration).
    pub fn new(files: TlsFiles) -> Result<ReloadingServerTls, TlsError> {
        let stamp = mtimes(&files);
        let config = server_config(&files)?;
        Ok(ReloadingServerTls {
            files,
            current: RwLock::new((config, stamp)),
        })
    }

    /// The acceptor for a new connection: the current configuration.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        tokio_rustls::TlsAcceptor::from(current.0.clone())
    }

    /// Re-reads the files now; on failure the previous configuration stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let stamp = mtimes(&self.files);
        let config = server_config(&self.files)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (config, stamp);
        Ok(())
    }

    /// Re-reads the files if a modification time changed since the last read; returns
    /// whether a new configuration was installed.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let stamp = mtimes(&self.files);
        let changed = self.current.read().unwrap_or_else(|e| e.into_inner()).1 != stamp;
        if !changed {
            return Ok(false);
        }
        match server_config(&self.files) {
            Ok(config) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = (config, stamp);
                Ok(true)
            }
            Err(e) => {
                // Remember the times so a broken file is reported once, not every poll.
                self.current.write().unwrap_or_else(|e| e.into_inner()).1 = stamp;
                Err(e)
            }
        }
    }

    /// The configuration new connections get now (for tests).
    pub fn current_config(&self) -> Arc<rustls::ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }
}
