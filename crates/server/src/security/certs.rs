//! Test and local-cluster certificates (`vdl certs generate`), made with rcgen on ring (no
//! openssl). Keys are ECDSA P-256. Two CAs that sign different things:
//!
//! - the client CA (`ca.pem`, `ca.key`): the Kafka listeners' certificates `node<i>.pem` /
//!   `node<i>.key` (server and client use: the admin API's calls between nodes) and the Kafka client certificates `client-<name>.pem` /
//!   `client-<name>.key` (client use); its `ca.pem` is what `tls_ca` of a listener that asks
//!   for client certificates trusts;
//! - the peer CA (`peer-ca.pem`, `peer-ca.key`): only the node peer certificates
//!   `peer-node<i>.pem` / `peer-node<i>.key` (server and client use) for `[peer_tls]`, each
//!   naming its node id `i` with the URI `vdl-node://<i>` (see [`crate::security::peer_tls`]).
//!   No Kafka client certificate comes from it, so none passes on the peer port.
//!
//! for i in 1..=nodes. [`revoke_certificates`] (`vdl certs revoke`) writes `peer-crl.pem` or
//! `crl.pem`, a CRL of the peer or client CA listing the given certificates. Key files are
//! created with mode 0600.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// What to generate.
#[derive(Debug, Clone)]
pub struct CertSpec {
    /// Node certificates to make (`node1` ..).
    pub nodes: usize,
    /// Host names and IP addresses every node certificate is valid for.
    pub hosts: Vec<String>,
    /// Client certificates to make: the subject is `CN=<name>,OU=clients,O=vdl`.
    pub clients: Vec<String>,
    /// Client certificates to make that expired yesterday (to test that they are refused).
    pub expired_clients: Vec<String>,
    /// Days the certificates are valid for, from yesterday.
    pub valid_days: u32,
}

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen failed.
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// Writing a file failed.
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// A name that cannot be a file name.
    #[error("`{0}` is not a usable client name (1-64 of [A-Za-z0-9._-])")]
    BadName(String),
}

fn write_file(dir: &Path, name: &str, text: &str, private: bool) -> Result<PathBuf, CertError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    if private {
        opts.mode(0o600);
    }
    let mut f = opts
        .open(&path)
        .map_err(|e| CertError::Io(path.clone(), e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| CertError::Io(path.clone(), e))?;
    Ok(path)
}

fn name(cn: &str, ou: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "vdl");
    dn.push(DnType::OrganizationalUnitName, ou);
    dn.push(DnType::CommonName, cn);
    dn
}

fn validity(params: &mut CertificateParams, valid_days: u32, expired: bool) {
    let now = time::OffsetDateTime::now_utc();
    if expired {
        params.not_before = now - time::Duration::days(30);
        params.not_after = now - time::Duration::days(1);
    } else {
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(i64::from(valid_days.max(1)));
    }
}

fn valid_file_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && n != "."
        && n != ".."
}

/// Subject CN of the client CA.
const CLIENT_CA_NAME: &str = "vdl local CA";
/// Subject CN of the peer CA.
const PEER_CA_NAME: &str = "vdl local peer CA";

/// The parameters of a CA named `cn` (the same each time, so a CRL signed later by the same
/// key names the same issuer).
fn ca_params(cn: &str, valid_days: u32) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = name(cn, "ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, valid_days, false);
    params
}

/// Which CA of [`generate`] a CRL is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaKind {
    /// The client CA (`ca.pem`): Kafka client certificates; its CRL is `crl.pem`.
    Client,
    /// The peer CA (`peer-ca.pem`): member certificates; its CRL is `peer-crl.pem`.
    Peer,
}

/// Writes `dir/peer-crl.pem`: a CRL of the peer CA made by [`generate`] in `dir` (see
/// [`revoke_certificates`]).
pub fn revoke_peer_certificates(
    dir: &Path,
    revoked: &[PathBuf],
    valid_days: u32,
) -> Result<PathBuf, CertError> {
    revoke_certificates(dir, CaKind::Peer, revoked, valid_days)
}

/// Writes a CRL of the CA `ca` made by [`generate`] in `dir` (signed with its key in `dir`):
/// `dir/peer-crl.pem` or `dir/crl.pem`, revoking the certificates in `revoked` (PEM files;
/// their serial numbers are listed; none: an empty CRL), valid for `valid_days`. Returns the
/// file written.
pub fn revoke_certificates(
    dir: &Path,
    ca: CaKind,
    revoked: &[PathBuf],
    valid_days: u32,
) -> Result<PathBuf, CertError> {
    let (key_file, ca_name, out_file) = match ca {
        CaKind::Client => ("ca.key", CLIENT_CA_NAME, "crl.pem"),
        CaKind::Peer => ("peer-ca.key", PEER_CA_NAME, "peer-crl.pem"),
    };
    let key_path = dir.join(key_file);
    let key_pem =
        std::fs::read_to_string(&key_path).map_err(|e| CertError::Io(key_path.clone(), e))?;
    let ca_key = KeyPair::from_pem(&key_pem)?;
    // The issuer as rcgen needs it: same name and key as the CA (the CRL names the issuer by
    // its subject and key identifier, both the same).
    let ca = ca_params(ca_name, valid_days).self_signed(&ca_key)?;
    let now = time::OffsetDateTime::now_utc();
    let mut revoked_certs = Vec::new();
    for path in revoked {
        let certs = crate::security::tls::read_certs(path)
            .map_err(|e| CertError::Io(path.clone(), std::io::Error::other(e.to_string())))?;
        let (_, cert) = x509_parser::parse_x509_certificate(&certs[0])
            .map_err(|e| CertError::Io(path.clone(), std::io::Error::other(e.to_string())))?;
        revoked_certs.push(rcgen::RevokedCertParams {
            serial_number: rcgen::SerialNumber::from_slice(cert.raw_serial()),
            revocation_time: now,
            reason_code: Some(rcgen::RevocationReason::KeyCompromise),
            invalidity_date: None,
        });
    }
    let params = rcgen::CertificateRevocationListParams {
        this_update: now - time::Duration::minutes(1),
        next_update: now + time::Duration::days(i64::from(valid_days.max(1))),
        crl_number: rcgen::SerialNumber::from(now.unix_timestamp() as u64),
        issuing_distribution_point: None,
        revoked_certs,
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    };
    let crl = params.signed_by(&ca, &ca_key)?;
    write_file(dir, out_file, &crl.pem()?, false)
}

/// Writes the client CA, the peer CA, node (Kafka and peer) and client certificates into `out`
/// (created if missing); returns the files written.
pub fn generate(out: &Path, spec: &CertSpec) -> Result<Vec<PathBuf>, CertError> {
    for c in spec.clients.iter().chain(&spec.expired_clients) {
        if !valid_file_name(c) {
            return Err(CertError::BadName(c.clone()));
        }
    }
    std::fs::create_dir_all(out).map_err(|e| CertError::Io(out.to_owned(), e))?;
    let mut written = Vec::new();

    let ca_key = KeyPair::generate()?;
    let ca = ca_params(CLIENT_CA_NAME, spec.valid_days).self_signed(&ca_key)?;
    written.push(write_file(out, "ca.pem", &ca.pem(), false)?);
    written.push(write_file(out, "ca.key", &ca_key.serialize_pem(), true)?);
    let peer_ca_key = KeyPair::generate()?;
    let peer_ca = ca_params(PEER_CA_NAME, spec.valid_days).self_signed(&peer_ca_key)?;
    written.push(write_file(out, "peer-ca.pem", &peer_ca.pem(), false)?);
    written.push(write_file(
        out,
        "peer-ca.key",
        &peer_ca_key.serialize_pem(),
        true,
    )?);

    for i in 1..=spec.nodes {
        // The Kafka listener's certificate (client CA) and the peer certificate (peer CA,
        // naming node i).
        for (prefix, issuer, issuer_key, peer) in [
            ("node", &ca, &ca_key, false),
            ("peer-node", &peer_ca, &peer_ca_key, true),
        ] {
            let mut params = CertificateParams::new(spec.hosts.clone())?;
            params.distinguished_name = name(&format!("vdl{i}"), "nodes");
            // Both uses: a node dials as well as serves (peers; the admin API's calls to other
            // nodes present the node's certificate of the client CA).
            params.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            if peer {
                let uri = crate::security::peer_tls::node_uri(i as u64);
                params
                    .subject_alt_names
                    .push(SanType::URI(uri.as_str().try_into()?));
            }
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            validity(&mut params, spec.valid_days, false);
            let key = KeyPair::generate()?;
            let cert = params.signed_by(&key, issuer, issuer_key)?;
            written.push(write_file(
                out,
                &format!("{prefix}{i}.pem"),
                &cert.pem(),
                false,
            )?);
            written.push(write_file(
                out,
                &format!("{prefix}{i}.key"),
                &key.serialize_pem(),
                true,
            )?);
        }
    }

    let clients = spec
        .clients
        .iter()
        .map(|c| (c, false))
        .chain(spec.expired_clients.iter().map(|c| (c, true)));
    for (client, expired) in clients {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(client, "clients");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        validity(&mut params, spec.valid_days, expired);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca, &ca_key)?;
        written.push(write_file(
            out,
            &format!("client-{client}.pem"),
            &cert.pem(),
            false,
        )?);
        written.push(write_file(
            out,
            &format!("client-{client}.key"),
            &key.serialize_pem(),
            true,
        )?);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::config::{ClientAuth, TlsFiles};
    use crate::security::tls;

    fn spec() -> CertSpec {
        CertSpec {
            nodes: 1,
            hosts: vec!["localhost".into(), "127.0.0.1".into()],
            clients: vec!["alice".into()],
            expired_clients: vec![],
            valid_days: 10,
        }
    }

    #[test]
    fn generated_certificates_make_configurations_and_principals() {
        let dir = tempfile::tempdir().unwrap();
        generate(dir.path(), &spec()).unwrap();
        let files = TlsFiles {
            cert: dir.path().join("node1.pem"),
            key: dir.path().join("node1.key"),
            ca: Some(dir.path().join("ca.pem")),
            client_auth: ClientAuth::Required,
            crl: None,
        };
        tls::server_config(&files).unwrap();
        tls::client_config(&files).unwrap();
        let der = &tls::read_certs(&dir.path().join("client-alice.pem")).unwrap()[0];
        assert_eq!(
            tls::certificate_principal(der).unwrap().to_string(),
            "User:CN=alice,OU=clients,O=vdl"
        );
        assert!(generate(
            dir.path(),
            &CertSpec {
                clients: vec!["../x".into()],
                ..spec()
            }
        )
        .is_err());
    }

    /// New files are picked up when their modification time changes; a broken file keeps
    /// the previous configuration.
    #[test]
    fn certificates_reload_when_files_change() {
        let dir = tempfile::tempdir().unwrap();
        generate(dir.path(), &spec()).unwrap();
        let files = TlsFiles {
            cert: dir.path().join("node1.pem"),
            key: dir.path().join("node1.key"),
            ca: None,
            client_auth: ClientAuth::None,
            crl: None,
        };
        let reloading = tls::ReloadingServerTls::new(files.clone()).unwrap();
        let before = reloading.current_config();
        assert!(!reloading.reload_if_changed().unwrap());
        assert!(Arc::ptr_eq(&before, &reloading.current_config()));
        // A new certificate and key (another CA run), with a later modification time.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let other = tempfile::tempdir().unwrap();
        generate(other.path(), &spec()).unwrap();
        std::fs::copy(other.path().join("node1.pem"), &files.cert).unwrap();
        std::fs::copy(other.path().join("node1.key"), &files.key).unwrap();
        bump_mtime(&files.cert);
        assert!(reloading.reload_if_changed().unwrap());
        let after = reloading.current_config();
        assert!(!Arc::ptr_eq(&before, &after));
        // A key that does not match the certificate: refused, the last good one stays.
        std::fs::copy(dir.path().join("ca.key"), &files.key).unwrap();
        bump_mtime(&files.key);
        assert!(reloading.reload_if_changed().is_err());
        assert!(Arc::ptr_eq(&after, &reloading.current_config()));
        assert!(reloading.reload().is_err());
    }

    /// A Kafka listener with `tls_crl` refuses a revoked client certificate and still takes
    /// the others.
    #[tokio::test]
    async fn listener_crl_refuses_revoked_client_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        generate(
            d,
            &CertSpec {
                clients: vec!["alice".into(), "bob".into()],
                ..spec()
            },
        )
        .unwrap();
        revoke_certificates(d, CaKind::Client, &[d.join("client-bob.pem")], 10).unwrap();
        let server = tls::server_config(&TlsFiles {
            cert: d.join("node1.pem"),
            key: d.join("node1.key"),
            ca: Some(d.join("ca.pem")),
            client_auth: ClientAuth::Required,
            crl: Some(d.join("crl.pem")),
        })
        .unwrap();
        for (client, ok) in [("alice", true), ("bob", false)] {
            let client = tls::client_config(&TlsFiles {
                cert: d.join(format!("client-{client}.pem")),
                key: d.join(format!("client-{client}.key")),
                ca: Some(d.join("ca.pem")),
                client_auth: ClientAuth::None,
                crl: None,
            })
            .unwrap();
            let (a, b) = tokio::io::duplex(1 << 16);
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let (accepted, _) = tokio::join!(
                tokio_rustls::TlsAcceptor::from(server.clone()).accept(a),
                tokio_rustls::TlsConnector::from(client).connect(name, b)
            );
            assert_eq!(accepted.is_ok(), ok, "{accepted:?}");
        }
    }

    use std::sync::Arc;

    fn bump_mtime(path: &Path) {
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        let t = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        f.set_modified(t).unwrap();
    }
}
