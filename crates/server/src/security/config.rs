//! The security part of a node's configuration: Kafka listeners with their security protocol,
//! TLS and SASL settings, the bootstrap SCRAM users, authentication timing, and mutual TLS
//! between nodes: the parsed settings, plain data. Parsed from the TOML file by `config/`
//! (`config/security.rs`); every key is documented in `deploy/vdl.example.toml`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::security::scram::{ScramCredential, ScramMechanism};

/// Kafka's security protocols, as a listener names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    /// No TLS, no authentication: every client is `User:ANONYMOUS`.
    Plaintext,
    /// TLS; the principal is the client certificate's subject (or `ANONYMOUS` without one).
    Ssl,
    /// SASL authentication over plain TCP.
    SaslPlaintext,
    /// SASL authentication over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Kafka's name (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`).
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// The protocol of Kafka's name, exactly as Kafka spells it.
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        [
            SecurityProtocol::Plaintext,
            SecurityProtocol::Ssl,
            SecurityProtocol::SaslPlaintext,
            SecurityProtocol::SaslSsl,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }

    /// Whether connections are wrapped in TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether clients must authenticate with SASL before any other request.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// Whether a TLS listener asks clients for a certificate (Kafka's `ssl.client.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// A certificate is asked for; a client without one is admitted (as `ANONYMOUS`), a
    /// client with one that does not verify against the CA is refused.
    Requested,
    /// A certificate that verifies against the CA is required.
    Required,
}

/// The SASL mechanisms a listener may enable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaslMechanism {
    /// `PLAIN` (RFC 4616): user name and password in the clear (use it over TLS).
    Plain,
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512` (RFC 5802/7677).
    Scram(ScramMechanism),
}

impl SaslMechanism {
    /// The mechanism's SASL name.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(m) => m.sasl_name(),
        }
    }

    /// The mechanism of a SASL name, exactly as Kafka spells it.
    pub fn parse(name: &str) -> Option<SaslMechanism> {
        if name == "PLAIN" {
            return Some(SaslMechanism::Plain);
        }
        ScramMechanism::from_sasl_name(name).map(SaslMechanism::Scram)
    }
}

/// TLS settings of a listener or of the peer transport: PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM), this node's certificate first.
    pub cert: PathBuf,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates (PEM) that client (or peer) certificates must chain to.
    pub ca: Option<PathBuf>,
    /// Whether client certificates are asked for (always `Required` for peers).
    pub client_auth: ClientAuth,
    /// Certificate revocation lists (PEM, one or more `X509 CRL` blocks) of the CA: a client
    /// (or peer) certificate listed there is refused; with a CRL set, a certificate whose
    /// issuer has no CRL in the file is refused too. `None`: no revocation check.
    pub crl: Option<PathBuf>,
}

/// One Kafka listener (`[[kafka.listeners]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaListenerConfig {
    /// The listener's name (`PLAINTEXT` for the single default listener); Metadata answers a
    /// client with every node's address on the listener of this name.
    pub name: String,
    /// Address to bind.
    pub listen: SocketAddr,
    /// `HOST:PORT` clients are told to connect to for this listener.
    pub advertised: String,
    /// Security protocol.
    pub protocol: SecurityProtocol,
    /// TLS files: present exactly when the protocol uses TLS.
    pub tls: Option<TlsFiles>,
    /// SASL mechanisms enabled, in the order SaslHandshake lists them (empty unless the
    /// protocol uses SASL).
    pub sasl_mechanisms: Vec<SaslMechanism>,
    /// Most connections this listener holds at once (Kafka's
    /// `listener.name.NAME.max.connections`); `None`: only the node-wide and per-address
    /// limits apply. Further connections wait in the accept backlog.
    pub max_connections: Option<usize>,
    /// Most new connections this listener accepts per second (Kafka's
    /// `listener.name.NAME.max.connection.creation.rate`); `None`: `kafka.max_connection_creation_rate`.
    /// Accepting pauses when it is reached (the connections wait in the backlog).
    pub max_connection_creation_rate: Option<u32>,
}

impl KafkaListenerConfig {
    /// The single PLAINTEXT listener named `PLAINTEXT` that `listeners.kafka` /
    /// `listeners.kafka_advertised` describe.
    pub fn plaintext(listen: SocketAddr, advertised: String) -> KafkaListenerConfig {
        KafkaListenerConfig {
            name: "PLAINTEXT".to_string(),
            listen,
            advertised,
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl_mechanisms: Vec::new(),
            max_connections: None,
            max_connection_creation_rate: None,
        }
    }
}

/// A bootstrap SCRAM user from `[[security.scram_users]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramUser {
    /// The user name (the principal is `User:{name}`).
    pub name: String,
    /// The salted, hashed credential (no password).
    pub credential: ScramCredential,
}

/// Authentication settings (`[security]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecuritySettings {
    /// SCRAM users known from the configuration (`vdl scram-credential` prints an entry).
    pub scram_users: Vec<ScramUser>,
    /// How long a connection whose authentication failed waits before it gets the failure and
    /// is closed (Kafka's `connection.failed.authentication.delay.ms`, default 100 ms).
    pub failed_authentication_delay: Duration,
    /// Longest a SASL session lasts before the client must re-authenticate (Kafka's
    /// `connections.max.reauth.ms`, KIP-368); `None` (0): sessions do not expire.
    pub connections_max_reauth: Option<Duration>,
    /// Largest SASL token (and whole request) accepted before authentication, in bytes
    /// (Kafka's `sasl.server.max.receive.size`, default 524288).
    pub sasl_max_receive_bytes: usize,
    /// `authorizer`: `"none"` (every request allowed, the default) or `"acl"` (Kafka's ACLs,
    /// see [`crate::security::authorizer`]).
    pub authorizer: crate::security::authorizer::AuthorizerMode,
    /// `super_users`: principals (`User:name`) allowed everything whatever the ACLs say.
    pub super_users: Vec<String>,
    /// `allow_everyone_if_no_acl_found`: with the ACL authorizer, a resource no ACL names is
    /// open to everyone (Kafka's `allow.everyone.if.no.acl.found`); default false: denied.
    pub allow_everyone_if_no_acl_found: bool,
}

impl Default for SecuritySettings {
    fn default() -> Self {
        SecuritySettings {
            scram_users: Vec::new(),
            failed_authentication_delay: Duration::from_millis(100),
            connections_max_reauth: None,
            sasl_max_receive_bytes: 524_288,
            authorizer: crate::security::authorizer::AuthorizerMode::default(),
            super_users: Vec::new(),
            allow_everyone_if_no_acl_found: false,
        }
    }
}

impl SecuritySettings {
    /// The bootstrap credential of `user` for `mechanism`, if configured.
    pub fn scram_user(&self, user: &str, mechanism: ScramMechanism) -> Option<&ScramCredential> {
        self.scram_users
            .iter()
            .find(|u| u.name == user && u.credential.mechanism == mechanism)
            .map(|u| &u.credential)
    }
}
