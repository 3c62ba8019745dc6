//! The admin API client: HTTP/1.1 or HTTPS to one node (`--admin [https://]HOST:PORT`),
//! with credentials (HTTP Basic with a SCRAM user, a client certificate); JSON answers read as
//! the `vdl-admin-api` crate's types after their API version is checked.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde::de::DeserializeOwned;
use serde::Serialize;
use vdl_admin_api::{check_version, ErrorBody, VersionError, VERSION_HEADER};

/// Largest answer read (a cluster status of many partitions fits easily).
const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// The environment variable holding the password when `--password-file` is not given.
pub const PASSWORD_ENV: &str = "VDLCTL_PASSWORD";

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The node could not be reached or the answer not read.
    #[error("cannot reach the admin API at {address}: {message}")]
    Unreachable {
        /// The node's admin address.
        address: String,
        /// What went wrong.
        message: String,
    },
    /// The node answered with an error.
    #[error("{message} (HTTP {status})")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The error the node gave, or the body.
        message: String,
    },
    /// The answer was not the JSON document expected.
    #[error("the answer is not the expected JSON document: {0}")]
    NotJson(String),
    /// The node speaks an admin API version this client does not know.
    #[error("{0}")]
    Version(VersionError),
    /// The command line asked for something that cannot be sent.
    #[error("{0}")]
    Usage(String),
}

/// How to reach and authenticate to one node's admin API (from the global options).
#[derive(Clone)]
pub struct Endpoint {
    /// `http://HOST:PORT` or `https://HOST:PORT`.
    base: String,
    /// `HOST:PORT` (in error messages).
    host: String,
    /// `Basic ...` when a user was given.
    authorization: Option<String>,
    /// CA and client certificate for HTTPS.
    tls: Option<ureq::tls::TlsConfig>,
}

/// The credential options of the command line.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// `--user`: a SCRAM user (HTTP Basic).
    pub user: Option<String>,
    /// `--password-file`: its first line is the password (else `VDLCTL_PASSWORD`).
    pub password_file: Option<PathBuf>,
    /// `--tls-ca`: the CA that signed the nodes' admin certificates (implies HTTPS).
    pub tls_ca: Option<PathBuf>,
    /// `--tls-cert` / `--tls-key`: a client certificate.
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's key.
    pub tls_key: Option<PathBuf>,
}

fn usage(message: impl Into<String>) -> ClientError {
    ClientError::Usage(message.into())
}

fn read(path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|e| usage(format!("{}: {e}", path.display())))
}

fn certs(path: &Path) -> Result<Vec<ureq::tls::Certificate<'static>>, ClientError> {
    let certs: Vec<_> = ureq::tls::parse_pem(&read(path)?)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(usage(format!("{}: no certificate", path.display())));
    }
    Ok(certs)
}

impl Endpoint {
    /// The endpoint of `admin` (`HOST:PORT`, `http://HOST:PORT` or `https://HOST:PORT`;
    /// HTTPS by default when `--tls-ca` is given) with `credentials`. The password is read
    /// from `--password-file` or `VDLCTL_PASSWORD`, never from the command line.
    pub fn new(admin: &str, credentials: &Credentials) -> Result<Endpoint, ClientError> {
        let (scheme, host) = match admin.split_once("://") {
            Some(("http", h)) => ("http", h),
            Some(("https", h)) => ("https", h),
            Some((other, _)) => {
                return Err(usage(format!(
                    "--admin: scheme `{other}` is not http or https"
                )))
            }
            None if credentials.tls_ca.is_some() => ("https", admin),
            None => ("http", admin),
        };
        let host = host.trim_end_matches('/');
        let authorization = match &credentials.user {
            None => None,
            Some(user) => {
                let password = match &credentials.password_file {
                    Some(f) => {
                        let text = String::from_utf8(read(f)?)
                            .map_err(|_| usage(format!("{}: not UTF-8", f.display())))?;
                        text.lines().next().unwrap_or_default().to_string()
                    }
                    None => std::env::var(PASSWORD_ENV).map_err(|_| {
                        usage(format!(
                            "--user needs a password: --password-file FILE or {PASSWORD_ENV}"
                        ))
                    })?,
                };
                if user.is_empty() || user.contains(':') || password.is_empty() {
                    return Err(usage(
                        "the user must be non-empty without `:` and the password non-empty",
                    ));
                }
                let token =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                Some(format!("Basic {token}"))
            }
        };
        let client_cert = match (&credentials.tls_cert, &credentials.tls_key) {
            (Some(c), Some(k)) => {
                let key = ureq::tls::PrivateKey::from_pem(&read(k)?)
                    .map_err(|e| usage(format!("{}: {e}", k.display())))?;
                Some(ureq::tls::ClientCert::new_with_certs(&certs(c)?, key))
            }
            (None, None) => None,
            _ => return Err(usage("--tls-cert and --tls-key go together")),
        };
        let tls = if scheme == "https" {
            let roots = match &credentials.tls_ca {
                Some(ca) => ureq::tls::RootCerts::new_with_certs(&certs(ca)?),
                None => {
                    return Err(usage(
                        "https needs --tls-ca (the CA of the nodes' admin certificates)",
                    ))
                }
            };
            Some(
                ureq::tls::TlsConfig::builder()
                    .provider(ureq::tls::TlsProvider::Rustls)
                    .root_certs(roots)
                    .client_cert(client_cert)
                    .unversioned_rustls_crypto_provider(Arc::new(
                        rustls::crypto::ring::default_provider(),
                    ))
                    .build(),
            )
        } else {
            if client_cert.is_some() {
                return Err(usage("a client certificate needs https (--tls-ca)"));
            }
            None
        };
        Ok(Endpoint {
            base: format!("{scheme}://{host}"),
            host: host.to_owned(),
            authorization,
            tls,
        })
    }

    /// The URL of `path` on the node.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// An agent that gives up after `timeout`, with the endpoint's TLS settings.
    pub fn agent(&self, timeout: Duration) -> ureq::Agent {
        let mut config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false);
        if let Some(tls) = &self.tls {
            config = config.tls_config(tls.clone());
        }
        config.build().into()
    }

    /// The `Authorization` header value, when a user was given.
    pub fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }
}

/// A client of one node's admin API.
pub struct Client {
    endpoint: Endpoint,
    agent: ureq::Agent,
}

/// An answer whose API version was checked: its status and body.
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body (JSON from a vdl node).
    pub text: String,
}

impl Answer {
    /// The body as a `T` when the status is 2xx or one of `also_ok` (a status that carries the
    /// same document, e.g. 503 for an unhealthy cluster status); any other status is
    /// [`ClientError::Refused`] with the node's `error` message.
    pub fn document<T: DeserializeOwned>(&self, also_ok: &[u16]) -> Result<T, ClientError> {
        if (200..300).contains(&self.status) || also_ok.contains(&self.status) {
            return serde_json::from_str(&self.text)
                .map_err(|e| ClientError::NotJson(format!("{e}: {}", self.text.trim())));
        }
        let message = match serde_json::from_str::<ErrorBody>(&self.text) {
            Ok(e) => e.error,
            Err(_) => self.text.trim().to_owned(),
        };
        Err(ClientError::Refused {
            status: self.status,
            message,
        })
    }

    /// The body pretty-printed as the node sent it (every field, known to this client or
    /// not), for `--json`.
    pub fn pretty(&self) -> String {
        match serde_json::from_str::<serde_json::Value>(&self.text) {
            Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_else(|_| self.text.clone()),
            Err(_) => self.text.clone(),
        }
    }
}

impl Client {
    /// A client of the node at `endpoint`; each call gives up after `timeout`.
    pub fn new(endpoint: &Endpoint, timeout: Duration) -> Client {
        Client {
            agent: endpoint.agent(timeout),
            endpoint: endpoint.clone(),
        }
    }

    /// `POST path` (empty body): the answer of a 2xx status as a `T`; 4xx/5xx is
    /// [`ClientError::Refused`] with the node's message.
    pub fn post<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.call("POST", path, None)?.document(&[])
    }

    /// `POST path` with `body` as JSON: as [`Client::post`].
    pub fn post_json<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.call("POST", path, Some(to_json(body)?))?.document(&[])
    }

    /// `PUT path` with `body` as JSON: as [`Client::post`].
    pub fn put_json<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.call("PUT", path, Some(to_json(body)?))?.document(&[])
    }

    /// `DELETE path`: as [`Client::post`].
    pub fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.call("DELETE", path, None)?.document(&[])
    }

    /// `GET path`, whatever the status: the answer, to read with [`Answer::document`].
    pub fn get_answer(&self, path: &str) -> Result<Answer, ClientError> {
        self.call("GET", path, None)
    }

    /// One request; the answer's admin API version is checked
    /// ([`vdl_admin_api::check_version`]) before anything else is read from it.
    fn call(&self, method: &str, path: &str, body: Option<String>) -> Result<Answer, ClientError> {
        let url = self.endpoint.url(path);
        let unreachable = |e: ureq::Error| ClientError::Unreachable {
            address: self.endpoint.host.clone(),
            message: e.to_string(),
        };
        let auth = self.endpoint.authorization();
        let with_auth = |r: ureq::RequestBuilder<ureq::typestate::WithoutBody>| match auth {
            Some(a) => r.header("authorization", a),
            None => r,
        };
        let with_auth_body = |r: ureq::RequestBuilder<ureq::typestate::WithBody>| match auth {
            Some(a) => r.header("authorization", a),
            None => r,
        };
        let json = |r: ureq::RequestBuilder<ureq::typestate::WithBody>, b: String| {
            with_auth_body(r)
                .header("content-type", "application/json")
                .send(b)
        };
        let mut response = match (method, body) {
            ("PUT", Some(b)) => json(self.agent.put(&url), b),
            ("POST", Some(b)) => json(self.agent.post(&url), b),
            ("POST", None) => with_auth_body(self.agent.post(&url)).send_empty(),
            ("DELETE", _) => with_auth(self.agent.delete(&url)).call(),
            _ => with_auth(self.agent.get(&url)).call(),
        }
        .map_err(unreachable)?;
        let version = response
            .headers()
            .get(VERSION_HEADER)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        check_version(version.as_deref()).map_err(ClientError::Version)?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .map_err(unreachable)?;
        Ok(Answer { status, text })
    }
}

fn to_json<B: Serialize>(body: &B) -> Result<String, ClientError> {
    serde_json::to_string(body).map_err(|e| ClientError::Usage(format!("cannot encode: {e}")))
}

/// Percent-encodes a path segment (topic names are `[a-zA-Z0-9._-]`, but be safe).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
