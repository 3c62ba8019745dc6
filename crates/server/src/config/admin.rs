//! The `[admin]` section: the admin API's HTTPS files, whether calls must authenticate, and
//! the address it is announced at (how calls are authenticated and authorized is
//! [`crate::admin::auth`]'s job).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::values::invalid;
use super::ConfigError;
use crate::security::config::{ClientAuth, TlsFiles};

/// The `[admin]` settings of a node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AdminSettings {
    /// `HOST:PORT` other nodes and `vdlctl` reach this node's admin API at; `None`: derived
    /// from the bind address ([`AdminSettings::announced_address`]).
    pub advertised: Option<String>,
    /// HTTPS: certificate, key, the CA that verifies client certificates and the other nodes'
    /// admin certificates, and whether client certificates are asked for. `None`: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// Every call must authenticate (401 otherwise).
    pub require_auth: bool,
    /// Accept HTTP Basic on a listener without TLS (the password crosses the network in the
    /// clear); off by default.
    pub allow_basic_without_tls: bool,
}

impl AdminSettings {
    /// The address this node announces for its admin API bound at `bind`: `advertised` when
    /// set; else the bind address, with an unspecified IP (`0.0.0.0`, `::`) replaced by the IP
    /// of `peer` (this node's peer address, which the other nodes reach).
    pub fn announced_address(&self, bind: SocketAddr, peer: SocketAddr) -> String {
        if let Some(a) = &self.advertised {
            return a.clone();
        }
        if bind.ip().is_unspecified() {
            return SocketAddr::new(peer.ip(), bind.port()).to_string();
        }
        bind.to_string()
    }

    /// `https` with TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// `[admin]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAdmin {
    advertised: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    tls_client_auth: Option<String>,
    tls_crl: Option<PathBuf>,
    require_auth: Option<bool>,
    allow_basic_without_tls: Option<bool>,
}

/// Validates `[admin]`. `secured`: the node has some security configured (the default of
/// `require_auth`).
pub(super) fn parse_admin(file: FileAdmin, secured: bool) -> Result<AdminSettings, ConfigError> {
    if let Some(a) = &file.advertised {
        if !crate::replication::peer_wire::valid_advertised(a) {
            return invalid("admin.advertised", &format!("`{a}` is not HOST:PORT"));
        }
    }
    let tls = match (file.tls_cert, file.tls_key) {
        (Some(cert), Some(key)) => {
            let client_auth = match file.tls_client_auth.as_deref().unwrap_or("none") {
                "none" => ClientAuth::None,
                "requested" => ClientAuth::Requested,
                "required" => ClientAuth::Required,
                other => {
                    return invalid(
                        "admin.tls_client_auth",
                        &format!("`{other}` is not none, requested or required"),
                    )
                }
            };
            let Some(ca) = file.tls_ca else {
                return invalid(
                    "admin.tls_ca",
                    "HTTPS needs tls_ca: it verifies client certificates and the other nodes' admin certificates when calls are forwarded",
                );
            };
            Some(TlsFiles {
                cert,
                key,
                ca: Some(ca),
                client_auth,
                crl: file.tls_crl,
            })
        }
        (None, None)
            if file.tls_ca.is_none()
                && file.tls_client_auth.is_none()
                && file.tls_crl.is_none() =>
        {
            None
        }
        _ => {
            return invalid(
                "admin.tls_cert",
                "set tls_cert, tls_key and tls_ca together",
            )
        }
    };
    Ok(AdminSettings {
        advertised: file.advertised,
        tls,
        require_auth: file.require_auth.unwrap_or(secured),
        allow_basic_without_tls: file.allow_basic_without_tls.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_settings_parse_with_defaults() {
        let parse = |text: &str, secured| {
            let f: FileAdmin = toml::from_str(text).unwrap();
            parse_admin(f, secured)
        };
        let plain = parse("", false).unwrap();
        assert!(!plain.require_auth && plain.tls.is_none());
        assert!(parse("", true).unwrap().require_auth);
        assert!(!parse("require_auth = false", true).unwrap().require_auth);
        let tls = parse(
            "tls_cert = \"c\"\ntls_key = \"k\"\ntls_ca = \"ca\"\ntls_client_auth = \"requested\"\nadvertised = \"n1.example:9292\"",
            true,
        )
        .unwrap();
        assert_eq!(tls.tls.unwrap().client_auth, ClientAuth::Requested);
        for bad in [
            "tls_cert = \"c\"\ntls_key = \"k\"",
            "tls_ca = \"ca\"",
            "tls_cert = \"c\"\ntls_key = \"k\"\ntls_ca = \"ca\"\ntls_client_auth = \"maybe\"",
            "advertised = \"nohostport\"",
        ] {
            assert!(parse(bad, true).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_announced_address_is_reachable() {
        let s = AdminSettings::default();
        let peer: SocketAddr = "10.0.0.5:9192".parse().unwrap();
        assert_eq!(
            s.announced_address("0.0.0.0:9292".parse().unwrap(), peer),
            "10.0.0.5:9292"
        );
        assert_eq!(
            s.announced_address("127.0.0.1:9293".parse().unwrap(), peer),
            "127.0.0.1:9293"
        );
        let s = AdminSettings {
            advertised: Some("node1.example:9292".into()),
            ..AdminSettings::default()
        };
        assert_eq!(
            s.announced_address("0.0.0.0:9292".parse().unwrap(), peer),
            "node1.example:9292"
        );
    }
}
