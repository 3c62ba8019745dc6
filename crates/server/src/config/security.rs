//! Parsing the security part of the configuration file (`[[kafka.listeners]]`, `[security]`,
//! `[peer_tls]`) into the settings of [`crate::security::config`], which the security room
//! consumes; and the `[[security.scram_users]]` entry `vdl scram-credential` prints. Every key
//! is documented in `deploy/vdl.example.toml`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::Deserialize;

use super::ConfigError;
use crate::security::config::{
    ClientAuth, KafkaListenerConfig, SaslMechanism, ScramUser, SecurityProtocol, SecuritySettings,
    TlsFiles,
};
use crate::security::scram::{ScramCredential, ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS};

// ---- the file format ----------------------------------------------------------------------

/// `[[kafka.listeners]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileKafkaListener {
    name: String,
    listen: String,
    advertised: Option<String>,
    security_protocol: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    tls_client_auth: Option<String>,
    tls_crl: Option<PathBuf>,
    sasl_mechanisms: Option<Vec<String>>,
    max_connections: Option<usize>,
    max_connection_creation_rate: Option<u32>,
}

/// `[security]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileSecurity {
    scram_users: Option<Vec<FileScramUser>>,
    connection_failed_authentication_delay_ms: Option<u64>,
    connections_max_reauth_ms: Option<u64>,
    sasl_max_receive_bytes: Option<usize>,
    authorizer: Option<String>,
    super_users: Option<Vec<String>>,
    allow_everyone_if_no_acl_found: Option<bool>,
}

/// `[[security.scram_users]]` as written (what `vdl scram-credential` prints).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileScramUser {
    name: String,
    mechanism: String,
    salt: String,
    iterations: u32,
    stored_key: String,
    server_key: String,
}

/// `[peer_tls]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilePeerTls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    crl: Option<PathBuf>,
}

fn invalid<T>(key: &'static str, message: String) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid { key, message })
}

/// Validates `[[kafka.listeners]]`: unique valid names and bind addresses, TLS files exactly
/// for SSL and SASL_SSL, a CA whenever client certificates are asked for, SASL mechanisms only
/// for SASL protocols (default: SCRAM-SHA-256 and SCRAM-SHA-512).
pub(crate) fn parse_listeners(
    file: Vec<FileKafkaListener>,
) -> Result<Vec<KafkaListenerConfig>, ConfigError> {
    if file.is_empty() {
        return invalid("kafka.listeners", "must list at least one listener".into());
    }
    let mut out: Vec<KafkaListenerConfig> = Vec::with_capacity(file.len());
    for l in file {
        let name = l.name;
        if !crate::replication::peer_wire::valid_listener_name(&name) {
            return invalid(
                "kafka.listeners.name",
                format!("`{name}` is not 1-64 of [A-Za-z0-9_-]"),
            );
        }
        if out.iter().any(|o| o.name == name) {
            return invalid("kafka.listeners.name", format!("`{name}` is listed twice"));
        }
        if out.len() >= crate::replication::peer_wire::MAX_HELLO_LISTENERS {
            return invalid(
                "kafka.listeners",
                format!(
                    "at most {} listeners",
                    crate::replication::peer_wire::MAX_HELLO_LISTENERS
                ),
            );
        }
        let listen: SocketAddr = l.listen.parse().map_err(|_| ConfigError::Invalid {
            key: "kafka.listeners.listen",
            message: format!("`{}` (listener {name}) is not IP:PORT", l.listen),
        })?;
        if out.iter().any(|o| o.listen == listen) {
            return invalid(
                "kafka.listeners.listen",
                format!("{listen} is used by two listeners"),
            );
        }
        let advertised = l.advertised.unwrap_or_else(|| listen.to_string());
        if !crate::replication::peer_wire::valid_advertised(&advertised) {
            return invalid(
                "kafka.listeners.advertised",
                format!("`{advertised}` (listener {name}) is not HOST:PORT"),
            );
        }
        let protocol_name = l.security_protocol.unwrap_or_else(|| "PLAINTEXT".into());
        let Some(protocol) = SecurityProtocol::parse(&protocol_name) else {
            return invalid(
                "kafka.listeners.security_protocol",
                format!(
                    "`{protocol_name}` (listener {name}) is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
                ),
            );
        };
        let tls = match (protocol.uses_tls(), l.tls_cert, l.tls_key) {
            (true, Some(cert), Some(key)) => {
                let client_auth = match l.tls_client_auth.as_deref().unwrap_or("none") {
                    "none" => ClientAuth::None,
                    "requested" => ClientAuth::Requested,
                    "required" => ClientAuth::Required,
                    other => {
                        return invalid(
                            "kafka.listeners.tls_client_auth",
                            format!(
                                "`{other}` (listener {name}) is not none, requested or required"
                            ),
                        )
                    }
                };
                if client_auth != ClientAuth::None && l.tls_ca.is_none() {
                    return invalid(
                        "kafka.listeners.tls_ca",
                        format!("listener {name} asks for client certificates: set tls_ca"),
                    );
                }
                if l.tls_crl.is_some() && client_auth == ClientAuth::None {
                    return invalid(
                        "kafka.listeners.tls_crl",
                        format!("listener {name} asks for no client certificates: tls_crl does not apply"),
                    );
                }
                Some(TlsFiles {
                    cert,
                    key,
                    ca: l.tls_ca,
                    client_auth,
                    crl: l.tls_crl,
                })
            }
            (true, _, _) => {
                return invalid(
                    "kafka.listeners.tls_cert",
                    format!("listener {name} ({protocol_name}) needs tls_cert and tls_key"),
                )
            }
            (false, None, None)
                if l.tls_ca.is_none() && l.tls_client_auth.is_none() && l.tls_crl.is_none() =>
            {
                None
            }
            (false, _, _) => {
                return invalid(
                    "kafka.listeners.tls_cert",
                    format!("listener {name} is {protocol_name}: TLS settings do not apply"),
                )
            }
        };
        let sasl_mechanisms = match (protocol.uses_sasl(), l.sasl_mechanisms) {
            (true, None) => vec![
                SaslMechanism::Scram(ScramMechanism::Sha256),
                SaslMechanism::Scram(ScramMechanism::Sha512),
            ],
            (true, Some(names)) => {
                let mut v = Vec::new();
                for n in names {
                    let Some(m) = SaslMechanism::parse(&n) else {
                        return invalid(
                            "kafka.listeners.sasl_mechanisms",
                            format!(
                                "`{n}` (listener {name}) is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
                            ),
                        );
                    };
                    if !v.contains(&m) {
                        v.push(m);
                    }
                }
                if v.is_empty() {
                    return invalid(
                        "kafka.listeners.sasl_mechanisms",
                        format!("listener {name} enables no mechanism"),
                    );
                }
                v
            }
            (false, None) => Vec::new(),
            (false, Some(_)) => {
                return invalid(
                    "kafka.listeners.sasl_mechanisms",
                    format!("listener {name} is {protocol_name}: SASL settings do not apply"),
                )
            }
        };
        if l.max_connections == Some(0) {
            return invalid(
                "kafka.listeners.max_connections",
                format!("listener {name}: must be positive"),
            );
        }
        if l.max_connection_creation_rate == Some(0) {
            return invalid(
                "kafka.listeners.max_connection_creation_rate",
                format!("listener {name}: must be positive (leave it out for no limit)"),
            );
        }
        out.push(KafkaListenerConfig {
            name,
            listen,
            advertised,
            protocol,
            tls,
            sasl_mechanisms,
            max_connections: l.max_connections,
            max_connection_creation_rate: l.max_connection_creation_rate,
        });
    }
    Ok(out)
}

/// Validates `[security]`.
pub(crate) fn parse_security(file: FileSecurity) -> Result<SecuritySettings, ConfigError> {
    use crate::security::authorizer::AuthorizerMode;
    let authorizer = match file.authorizer.as_deref() {
        None | Some("none") => AuthorizerMode::None,
        Some("acl") => AuthorizerMode::Acl,
        Some(other) => {
            return invalid(
                "security.authorizer",
                format!("`{other}` is not one of \"none\", \"acl\""),
            )
        }
    };
    let super_users = file.super_users.unwrap_or_default();
    for u in &super_users {
        if crate::security::Principal::parse(u).is_none() {
            return invalid(
                "security.super_users",
                format!("`{u}` is not a principal of the form Type:name (User:admin)"),
            );
        }
    }
    let mut s = SecuritySettings {
        authorizer,
        super_users,
        allow_everyone_if_no_acl_found: file.allow_everyone_if_no_acl_found.unwrap_or(false),
        ..SecuritySettings::default()
    };
    if let Some(ms) = file.connection_failed_authentication_delay_ms {
        s.failed_authentication_delay = Duration::from_millis(ms);
    }
    if let Some(ms) = file.connections_max_reauth_ms {
        s.connections_max_reauth = (ms > 0).then(|| Duration::from_millis(ms));
    }
    if let Some(b) = file.sasl_max_receive_bytes {
        if !(1024..=(64 << 20)).contains(&b) {
            return invalid(
                "security.sasl_max_receive_bytes",
                "must be in 1024..=67108864".into(),
            );
        }
        s.sasl_max_receive_bytes = b;
    }
    for u in file.scram_users.unwrap_or_default() {
        let key = "security.scram_users";
        let Some(mechanism) = ScramMechanism::from_sasl_name(&u.mechanism) else {
            return invalid(
                key,
                format!(
                    "user {}: mechanism `{}` is not SCRAM-SHA-256 or SCRAM-SHA-512",
                    u.name, u.mechanism
                ),
            );
        };
        if u.name.is_empty() {
            return invalid(key, "a user has an empty name".into());
        }
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&u.iterations) {
            return invalid(
                key,
                format!(
                    "user {}: iterations must be in {MIN_ITERATIONS}..={MAX_ITERATIONS}",
                    u.name
                ),
            );
        }
        let decode = |field: &str, v: &str| {
            B64.decode(v).map_err(|_| ConfigError::Invalid {
                key,
                message: format!("user {}: {field} is not base64", u.name),
            })
        };
        let salt = decode("salt", &u.salt)?;
        let stored_key = decode("stored_key", &u.stored_key)?;
        let server_key = decode("server_key", &u.server_key)?;
        if salt.is_empty()
            || stored_key.len() != mechanism.hash_len()
            || server_key.len() != mechanism.hash_len()
        {
            return invalid(
                key,
                format!(
                    "user {}: salt must not be empty and both keys must be {} bytes",
                    u.name,
                    mechanism.hash_len()
                ),
            );
        }
        if s.scram_user(&u.name, mechanism).is_some() {
            return invalid(
                key,
                format!("user {} has two {} entries", u.name, u.mechanism),
            );
        }
        s.scram_users.push(ScramUser {
            name: u.name,
            credential: ScramCredential {
                mechanism,
                salt,
                iterations: u.iterations,
                stored_key,
                server_key,
            },
        });
    }
    Ok(s)
}

/// Validates `[peer_tls]`: mutual TLS between nodes (see [`crate::security::peer_tls`]): cert,
/// key and the peer CA required (it may differ from the Kafka listeners' `tls_ca`), CRL
/// optional.
pub(crate) fn parse_peer_tls(file: FilePeerTls) -> TlsFiles {
    TlsFiles {
        cert: file.cert,
        key: file.key,
        ca: Some(file.ca),
        client_auth: ClientAuth::Required,
        crl: file.crl,
    }
}

/// The `[[security.scram_users]]` entry for `user` and `credential`, as TOML (what
/// `vdl scram-credential` prints).
pub fn scram_user_toml(user: &str, credential: &ScramCredential) -> String {
    let quoted = toml::Value::String(user.to_string()).to_string();
    format!(
        "[[security.scram_users]]\nname = {quoted}\nmechanism = \"{}\"\nsalt = \"{}\"\niterations = {}\nstored_key = \"{}\"\nserver_key = \"{}\"\n",
        credential.mechanism.sasl_name(),
        B64.encode(&credential.salt),
        credential.iterations,
        B64.encode(&credential.stored_key),
        B64.encode(&credential.server_key),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listeners(toml_text: &str) -> Result<Vec<KafkaListenerConfig>, ConfigError> {
        #[derive(Deserialize)]
        struct W {
            listeners: Vec<FileKafkaListener>,
        }
        let w: W = toml::from_str(toml_text).unwrap();
        parse_listeners(w.listeners)
    }

    #[test]
    fn listeners_parse_with_defaults_and_checks() {
        let l = listeners(
            r#"
            [[listeners]]
            name = "INTERNAL"
            listen = "127.0.0.1:9092"
            [[listeners]]
            name = "EXTERNAL"
            listen = "127.0.0.1:9093"
            advertised = "broker.example:9093"
            security_protocol = "SASL_SSL"
            tls_cert = "c.pem"
            tls_key = "k.pem"
            "#,
        )
        .unwrap();
        assert_eq!(l[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(l[0].advertised, "127.0.0.1:9092");
        assert_eq!(l[1].protocol, SecurityProtocol::SaslSsl);
        assert_eq!(l[1].sasl_mechanisms.len(), 2);
        assert_eq!(l[1].tls.as_ref().unwrap().client_auth, ClientAuth::None);
        for bad in [
            // TLS protocol without files.
            "[[listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:1\"\nsecurity_protocol = \"SSL\"",
            // Client certificates without a CA.
            "[[listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:1\"\nsecurity_protocol = \"SSL\"\ntls_cert = \"c\"\ntls_key = \"k\"\ntls_client_auth = \"required\"",
            // SASL settings on a plaintext listener.
            "[[listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:1\"\nsasl_mechanisms = [\"PLAIN\"]",
            // Unknown mechanism, duplicate names, bad protocol.
            "[[listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:1\"\nsecurity_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanisms = [\"GSSAPI\"]",
            "[[listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:1\"\n[[listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:2\"",
            "[[listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:1\"\nsecurity_protocol = \"TLS\"",
            // A CRL without client certificates, or on a plaintext listener.
            "[[listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:1\"\nsecurity_protocol = \"SSL\"\ntls_cert = \"c\"\ntls_key = \"k\"\ntls_crl = \"crl.pem\"",
            "[[listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:1\"\ntls_crl = \"crl.pem\"",
        ] {
            assert!(listeners(bad).is_err(), "{bad}");
        }
        let with_crl = listeners(
            "[[listeners]]\nname = \"A\"\nlisten = \"127.0.0.1:1\"\nsecurity_protocol = \"SSL\"\ntls_cert = \"c\"\ntls_key = \"k\"\ntls_ca = \"ca\"\ntls_client_auth = \"required\"\ntls_crl = \"crl.pem\"",
        )
        .unwrap();
        assert_eq!(
            with_crl[0].tls.as_ref().unwrap().crl,
            Some(PathBuf::from("crl.pem"))
        );
    }

    #[test]
    fn scram_users_round_trip_through_the_printed_entry() {
        let cred = ScramCredential::generate(ScramMechanism::Sha512, "secret", 4096);
        let text = scram_user_toml("admin", &cred);
        #[derive(Deserialize)]
        struct W {
            security: FileSecurity,
        }
        let w: W = toml::from_str(&text).unwrap();
        let s = parse_security(w.security).unwrap();
        assert_eq!(s.scram_user("admin", ScramMechanism::Sha512), Some(&cred));
        assert_eq!(s.scram_user("admin", ScramMechanism::Sha256), None);
        assert_eq!(s.failed_authentication_delay, Duration::from_millis(100));
    }
}
