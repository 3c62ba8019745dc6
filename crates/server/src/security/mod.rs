//! Who is on the other end of a Kafka connection, and what they may do.
//!
//! - [`Principal`]: the authenticated identity of a connection, in Kafka's `Type:name` form.
//!   A connection on a listener without authentication is `User:ANONYMOUS`, as in Kafka.
//! - [`scram`]: SCRAM credentials (salt, iterations, stored and server keys) and their
//!   derivation; what is stored per user, never a password. [`scram_import`]: the record of
//!   the one-time import of the configured (bootstrap) users into the metadata.
//! - [`config`]: the settings of listeners (security protocol, TLS, SASL), bootstrap users and
//!   peer TLS, as parsed by `crate::config` (plain data).
//! - [`tls`]: rustls configurations from PEM files, certificate principals, reloading.
//! - [`peer_tls`]: mutual TLS between nodes: certificates naming node ids, the peer CA, CRLs,
//!   reloading.
//! - [`sasl`]: the SASL state machine of a connection (PLAIN, SCRAM server side, KIP-368).
//! - [`password`]: password checks against SCRAM credentials (PLAIN, the admin API's Basic
//!   authentication), off the runtime threads, equal cost for unknown users.
//! - [`certs`]: CA, node and client certificates for tests and local clusters (rcgen).
//! - [`stats`]: authentication counters.
//! - [`acl`]: Kafka's ACL model (bindings, filters, implied operations); [`authorizer`]:
//!   super users, deny wins, `allow_everyone_if_no_acl_found`.

use std::fmt;

pub mod acl;
pub mod authorizer;
pub mod certs;
pub mod config;
pub mod password;
pub mod peer_tls;
pub mod sasl;
pub mod scram;
pub mod scram_import;
pub mod stats;
pub mod tls;

/// The identity a connection acts as, as Kafka's `KafkaPrincipal`: a type (always `User` for
/// the principals vdl derives: SASL user names and TLS certificate subjects) and a name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    /// The principal type (`User`).
    pub principal_type: String,
    /// The name: a SASL user name, a certificate's subject, or `ANONYMOUS`.
    pub name: String,
}

impl Principal {
    /// The principal type of every principal vdl derives.
    pub const USER_TYPE: &'static str = "User";

    /// `User:ANONYMOUS`: the principal of a connection that did not authenticate.
    pub fn anonymous() -> Principal {
        Principal::user("ANONYMOUS")
    }

    /// `User:{name}`.
    pub fn user(name: impl Into<String>) -> Principal {
        Principal {
            principal_type: Principal::USER_TYPE.to_string(),
            name: name.into(),
        }
    }

    /// Parses Kafka's `Type:name` form (the name may itself contain `:`); `None` when there is
    /// no `:` or either side is empty.
    pub fn parse(text: &str) -> Option<Principal> {
        let (principal_type, name) = text.split_once(':')?;
        if principal_type.is_empty() || name.is_empty() {
            return None;
        }
        Some(Principal {
            principal_type: principal_type.to_string(),
            name: name.to_string(),
        })
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principal_round_trips_kafka_form() {
        let p = Principal::parse("User:CN=client,O=vdl").unwrap();
        assert_eq!(p, Principal::user("CN=client,O=vdl"));
        assert_eq!(p.to_string(), "User:CN=client,O=vdl");
        assert_eq!(Principal::anonymous().to_string(), "User:ANONYMOUS");
        assert!(Principal::parse("User:").is_none());
        assert!(Principal::parse("nocolon").is_none());
    }
}
