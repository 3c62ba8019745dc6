//! TLS and SASL for vdl-perf's connections: Kafka's security protocols (PLAINTEXT, SSL,
//! SASL_PLAINTEXT, SASL_SSL) with rustls (ring provider, TLS 1.2+) and the client side of
//! SASL PLAIN and SCRAM-SHA-256/512 (RFC 5802), run on each new connection before its first
//! request.

use std::path::PathBuf;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::sasl_authenticate_request::SaslAuthenticateRequest;
use kafka_proto::messages::sasl_handshake_request::SaslHandshakeRequest;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256, Sha512};

use super::conn::Connection;
use super::ClientError;

/// SaslHandshake version sent (v1: tokens in SaslAuthenticate requests).
pub const SASL_HANDSHAKE_VERSION: i16 = 1;
/// SaslAuthenticate version sent.
pub const SASL_AUTHENTICATE_VERSION: i16 = 1;

/// How connections authenticate, for every connection of a run.
#[derive(Clone, Default)]
pub struct ClientSecurity {
    /// TLS client configuration (SSL, SASL_SSL); `None`: plain TCP.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// SASL credentials (SASL_PLAINTEXT, SASL_SSL); `None`: no SASL.
    pub sasl: Option<SaslCredentials>,
}

impl std::fmt::Debug for ClientSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSecurity")
            .field("tls", &self.tls.is_some())
            .field(
                "sasl",
                &self.sasl.as_ref().map(|s| (&s.mechanism, &s.username)),
            )
            .finish()
    }
}

/// A SASL mechanism and the user's credentials.
#[derive(Clone)]
pub struct SaslCredentials {
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: String,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

/// What the command line said about security (see `vdl-perf produce --help`).
#[derive(Debug, Clone, Default)]
pub struct SecurityOptions {
    /// `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.
    pub protocol: String,
    /// SASL mechanism.
    pub sasl_mechanism: Option<String>,
    /// SASL user.
    pub sasl_username: Option<String>,
    /// SASL password.
    pub sasl_password: Option<String>,
    /// CA certificates (PEM) the servers' certificates must chain to.
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for servers that ask for one.
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    pub tls_key: Option<PathBuf>,
}

impl ClientSecurity {
    /// The settings `opts` describe; an error names what is missing or unreadable.
    pub fn from_options(opts: &SecurityOptions) -> Result<ClientSecurity, String> {
        let (tls, sasl) = match opts.protocol.as_str() {
            "PLAINTEXT" | "" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => return Err(format!("unknown --security-protocol {other}")),
        };
        let tls = if tls {
            Some(Arc::new(tls_config(opts)?))
        } else {
            None
        };
        let sasl = if sasl {
            let mechanism = opts
                .sasl_mechanism
                .clone()
                .unwrap_or_else(|| "PLAIN".into());
            if !matches!(
                mechanism.as_str(),
                "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512"
            ) {
                return Err(format!("unknown --sasl-mechanism {mechanism}"));
            }
            Some(SaslCredentials {
                mechanism,
                username: opts
                    .sasl_username
                    .clone()
                    .ok_or("--sasl-username is required for SASL")?,
                password: opts
                    .sasl_password
                    .clone()
                    .ok_or("--sasl-password is required for SASL")?,
            })
        } else {
            None
        };
        Ok(ClientSecurity { tls, sasl })
    }
}

fn tls_config(opts: &SecurityOptions) -> Result<rustls::ClientConfig, String> {
    let ca = opts
        .tls_ca
        .as_ref()
        .ok_or("--tls-ca is required for SSL and SASL_SSL")?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))? {
        let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    match (&opts.tls_cert, &opts.tls_key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| format!("{}: {e}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{}: {e}", cert.display()))?;
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err("--tls-cert and --tls-key go together".into()),
    }
}

/// Runs SASL on a new connection: SaslHandshake, then the mechanism's exchange.
pub async fn authenticate(
    conn: &mut Connection,
    sasl: &SaslCredentials,
) -> Result<(), ClientError> {
    let handshake = Request::SaslHandshake(SaslHandshakeRequest {
        mechanism: sasl.mechanism.clone(),
    });
    match conn.request(SASL_HANDSHAKE_VERSION, &handshake).await? {
        Response::SaslHandshake(r) if r.error_code == 0 => {}
        Response::SaslHandshake(r) => {
            return Err(ClientError::Broker {
                code: ErrorCode::from_code(r.error_code),
                what: "SaslHandshake",
            })
        }
        other => return Err(ClientError::Unexpected(format!("{:?}", other.api_key()))),
    }
    match sasl.mechanism.as_str() {
        "PLAIN" => {
            let token = format!("\0{}\0{}", sasl.username, sasl.password);
            exchange(conn, token.into_bytes()).await?;
            Ok(())
        }
        m => {
            let hash = if m == "SCRAM-SHA-512" {
                ScramHash::Sha512
            } else {
                ScramHash::Sha256
            };
            scram(conn, hash, sasl).await
        }
    }
}

/// Sends one SaslAuthenticate and returns the server's token.
async fn exchange(conn: &mut Connection, token: Vec<u8>) -> Result<Vec<u8>, ClientError> {
    let req = Request::SaslAuthenticate(SaslAuthenticateRequest {
        auth_bytes: token.into(),
        ..Default::default()
    });
    match conn.request(SASL_AUTHENTICATE_VERSION, &req).await? {
        Response::SaslAuthenticate(r) if r.error_code == 0 => Ok(r.auth_bytes.to_vec()),
        Response::SaslAuthenticate(r) => Err(ClientError::Unexpected(format!(
            "SASL authentication failed ({}): {}",
            ErrorCode::from_code(r.error_code).name(),
            r.error_message.unwrap_or_default()
        ))),
        other => Err(ClientError::Unexpected(format!("{:?}", other.api_key()))),
    }
}

#[derive(Clone, Copy)]
enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            ScramHash::Sha512 => {
                let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    fn salted(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut out = vec![0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out
            }
            ScramHash::Sha512 => {
                let mut out = vec![0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out
            }
        }
    }
}

/// Most PBKDF2 iterations a server may ask for (a hostile server cannot make us spin).
const MAX_ITERATIONS: u32 = 100_000;

/// The client side of a SCRAM exchange (RFC 5802), checking the server's signature.
async fn scram(
    conn: &mut Connection,
    hash: ScramHash,
    sasl: &SaslCredentials,
) -> Result<(), ClientError> {
    let bad = |why: &str| ClientError::Unexpected(format!("SCRAM: {why}"));
    let mut nonce_bytes = [0u8; 24];
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut nonce_bytes);
    let client_nonce: String = nonce_bytes.iter().map(|b| format!("{b:02x}")).collect();
    let user = sasl.username.replace('=', "=3D").replace(',', "=2C");
    let first_bare = format!("n={user},r={client_nonce}");
    let server_first = exchange(conn, format!("n,,{first_bare}").into_bytes()).await?;
    let server_first = String::from_utf8(server_first).map_err(|_| bad("not UTF-8"))?;
    let (mut nonce, mut salt, mut iterations) = (None, None, None);
    for field in server_first.split(',') {
        if let Some(v) = field.strip_prefix("r=") {
            nonce = Some(v);
        } else if let Some(v) = field.strip_prefix("s=") {
            salt = B64.decode(v).ok();
        } else if let Some(v) = field.strip_prefix("i=") {
            iterations = v.parse::<u32>().ok();
        }
    }
    let nonce = nonce
        .filter(|n| n.starts_with(&client_nonce) && n.len() > client_nonce.len())
        .ok_or_else(|| bad("bad server nonce"))?;
    let salt = salt.ok_or_else(|| bad("no salt"))?;
    let iterations = iterations
        .filter(|i| (1..=MAX_ITERATIONS).contains(i))
        .ok_or_else(|| bad("bad iteration count"))?;
    let salted = hash.salted(sasl.password.as_bytes(), &salt, iterations);
    let client_key = hash.hmac(&salted, b"Client Key");
    let stored_key = hash.hash(&client_key);
    let without_proof = format!("c=biws,r={nonce}");
    let auth_message = format!("{first_bare},{server_first},{without_proof}");
    let signature = hash.hmac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(a, b)| a ^ b)
        .collect();
    let server_final = exchange(
        conn,
        format!("{without_proof},p={}", B64.encode(proof)).into_bytes(),
    )
    .await?;
    let server_key = hash.hmac(&salted, b"Server Key");
    let expected = format!(
        "v={}",
        B64.encode(hash.hmac(&server_key, auth_message.as_bytes()))
    );
    if server_final != expected.as_bytes() {
        return Err(bad("the server's signature does not match"));
    }
    Ok(())
}
