//! The node-wide connection limits of `[kafka]`: connections and new connections per second
//! per client address, its exceptions, the listeners' default accept rate and the
//! authentication deadline (what they mean and how the listeners enforce them:
//! [`crate::kafka::conn_limits`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

/// `kafka.max_connections_per_ip` when unset: this, or half of `kafka.max_connections` when
/// that is lower (at least 1), so that one address never holds every connection.
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 1000;

/// The per-address limit when `kafka.max_connections_per_ip` is unset, for a node that
/// accepts `max_connections` in all.
pub fn default_per_ip(max_connections: usize) -> usize {
    DEFAULT_MAX_CONNECTIONS_PER_IP.min((max_connections / 2).max(1))
}

/// Default `kafka.authentication_timeout_ms`.
pub const DEFAULT_AUTHENTICATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Node-wide connection limits of `[kafka]` (the per-listener ones are in
/// [`crate::security::config::KafkaListenerConfig`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimitSettings {
    /// Most connections from one client address, all listeners together; `None`:
    /// [`default_per_ip`].
    pub max_connections_per_ip: Option<usize>,
    /// Per-address exceptions to `max_connections_per_ip` (0: no connection from it).
    pub max_connections_per_ip_overrides: BTreeMap<IpAddr, usize>,
    /// Default of each listener's accept rate, per second; `None`: no limit.
    pub max_connection_creation_rate: Option<u32>,
    /// New connections per second from one client address; `None`: no limit.
    pub max_connection_creation_rate_per_ip: Option<u32>,
    /// Longest a connection to a TLS or SASL listener may take to authenticate.
    pub authentication_timeout: Duration,
}

impl Default for ConnectionLimitSettings {
    fn default() -> Self {
        ConnectionLimitSettings {
            max_connections_per_ip: None,
            max_connections_per_ip_overrides: BTreeMap::new(),
            max_connection_creation_rate: None,
            max_connection_creation_rate_per_ip: None,
            authentication_timeout: DEFAULT_AUTHENTICATION_TIMEOUT,
        }
    }
}

/// A connection-limit key whose value is out of range.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
pub struct LimitError {
    /// The configuration key.
    pub key: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl ConnectionLimitSettings {
    /// Builds the settings from the keys as written; `None` keeps a default. Rates and
    /// timeouts must be positive; override keys must be IP addresses.
    pub fn from_file(
        per_ip: Option<usize>,
        overrides: Option<BTreeMap<String, usize>>,
        rate: Option<u32>,
        rate_per_ip: Option<u32>,
        authentication_timeout_ms: Option<u64>,
    ) -> Result<Self, LimitError> {
        let err = |key, message: &str| LimitError {
            key,
            message: message.to_owned(),
        };
        let mut s = ConnectionLimitSettings::default();
        if let Some(n) = per_ip {
            if n == 0 {
                return Err(err("kafka.max_connections_per_ip", "must be positive"));
            }
            s.max_connections_per_ip = Some(n);
        }
        for (addr, n) in overrides.unwrap_or_default() {
            let ip: IpAddr = addr.parse().map_err(|_| LimitError {
                key: "kafka.max_connections_per_ip_overrides",
                message: format!("`{addr}` is not an IP address"),
            })?;
            s.max_connections_per_ip_overrides
                .insert(canonical_ip(ip), n);
        }
        for (key, value, target) in [
            (
                "kafka.max_connection_creation_rate",
                rate,
                &mut s.max_connection_creation_rate,
            ),
            (
                "kafka.max_connection_creation_rate_per_ip",
                rate_per_ip,
                &mut s.max_connection_creation_rate_per_ip,
            ),
        ] {
            if let Some(r) = value {
                if r == 0 {
                    return Err(err(key, "must be positive (leave it out for no limit)"));
                }
                *target = Some(r);
            }
        }
        if let Some(ms) = authentication_timeout_ms {
            if ms == 0 || ms > 3_600_000 {
                return Err(err(
                    "kafka.authentication_timeout_ms",
                    "must be in 1..=3600000",
                ));
            }
            s.authentication_timeout = Duration::from_millis(ms);
        }
        Ok(s)
    }

    /// The most connections `ip` may hold on a node that accepts `max_connections` in all.
    pub fn max_for(&self, ip: IpAddr, max_connections: usize) -> usize {
        self.max_connections_per_ip_overrides
            .get(&canonical_ip(ip))
            .copied()
            .unwrap_or_else(|| {
                self.max_connections_per_ip
                    .unwrap_or_else(|| default_per_ip(max_connections))
            })
    }
}

/// `ip` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) written as the IPv4 address, so
/// that one client counts (and matches ACLs) as one address whichever socket family it used.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn settings_are_checked() {
        assert!(ConnectionLimitSettings::from_file(Some(0), None, None, None, None).is_err());
        assert!(ConnectionLimitSettings::from_file(None, None, Some(0), None, None).is_err());
        assert!(ConnectionLimitSettings::from_file(None, None, None, None, Some(0)).is_err());
        let bad = BTreeMap::from([("example.com".to_string(), 3)]);
        assert!(ConnectionLimitSettings::from_file(None, Some(bad), None, None, None).is_err());
        let good = BTreeMap::from([("::ffff:10.1.2.3".to_string(), 3)]);
        let s =
            ConnectionLimitSettings::from_file(Some(5), Some(good), Some(10), Some(2), Some(500))
                .unwrap();
        assert_eq!(s.max_for(ip("10.1.2.3"), 100), 3);
        assert_eq!(s.max_for(ip("10.1.2.4"), 100), 5);
        // Unset: 1000, or half the node's connections.
        let d = ConnectionLimitSettings::default();
        assert_eq!(d.max_for(ip("10.1.2.4"), 10_000), 1000);
        assert_eq!(d.max_for(ip("10.1.2.4"), 8), 4);
        assert_eq!(d.max_for(ip("10.1.2.4"), 1), 1);
        assert_eq!(s.authentication_timeout, Duration::from_millis(500));
    }
}
