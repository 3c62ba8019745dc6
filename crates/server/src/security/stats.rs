//! Counters of what authentication did on this node's Kafka listeners (for metrics).

use std::sync::atomic::{AtomicU64, Ordering};

/// Authentication counters of a node, all listeners together. Monotonic from start.
#[derive(Debug, Default)]
pub struct SecurityStats {
    authentication_successes: AtomicU64,
    authentication_failures: AtomicU64,
    reauthentications: AtomicU64,
    tls_handshake_failures: AtomicU64,
    unauthenticated_request_closes: AtomicU64,
    expired_session_closes: AtomicU64,
    connections_refused_per_ip: AtomicU64,
    connections_refused_rate_per_ip: AtomicU64,
    authentication_timeouts: AtomicU64,
    admin_authentication_failures: AtomicU64,
    admin_calls_denied: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SecurityStatsSnapshot {
    /// SASL authentications that succeeded (re-authentications included).
    pub authentication_successes: u64,
    /// SASL authentications that failed (each closed its connection after the delay).
    pub authentication_failures: u64,
    /// Successful re-authentications of an authenticated connection (KIP-368).
    pub reauthentications: u64,
    /// TLS handshakes that failed or timed out (a plaintext client on a TLS port, an
    /// unknown or expired client certificate).
    pub tls_handshake_failures: u64,
    /// Connections closed for a request other than ApiVersions / SaslHandshake /
    /// SaslAuthenticate before authentication.
    pub unauthenticated_request_closes: u64,
    /// Connections closed for a request after their SASL session expired.
    pub expired_session_closes: u64,
    /// Connections closed at once because their client address held
    /// `kafka.max_connections_per_ip` (or its override) already.
    pub connections_refused_per_ip: u64,
    /// Connections closed at once because their client address opened connections faster
    /// than `kafka.max_connection_creation_rate_per_ip`.
    pub connections_refused_rate_per_ip: u64,
    /// Connections closed because they had not authenticated (TLS handshake and SASL)
    /// within `kafka.authentication_timeout_ms` of being accepted.
    pub authentication_timeouts: u64,
    /// Admin API calls refused with 401: no credentials where they are required, a wrong
    /// password, Basic without TLS.
    pub admin_authentication_failures: u64,
    /// Admin API calls refused with 403: authenticated, but the ACLs do not allow the call.
    pub admin_calls_denied: u64,
}

impl SecurityStats {
    /// Counts a successful authentication (`reauth`: of an already authenticated connection).
    pub fn authenticated(&self, reauth: bool) {
        self.authentication_successes
            .fetch_add(1, Ordering::Relaxed);
        if reauth {
            self.reauthentications.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a failed authentication.
    pub fn authentication_failed(&self) {
        self.authentication_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failed TLS handshake.
    pub fn tls_handshake_failed(&self) {
        self.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed for a request before authentication.
    pub fn unauthenticated_request(&self) {
        self.unauthenticated_request_closes
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed because its session expired.
    pub fn expired_session(&self) {
        self.expired_session_closes.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection refused for its address's connection limit.
    pub fn refused_per_ip(&self) {
        self.connections_refused_per_ip
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection refused for its address's creation rate.
    pub fn refused_rate_per_ip(&self) {
        self.connections_refused_rate_per_ip
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed for not authenticating in time.
    pub fn authentication_timed_out(&self) {
        self.authentication_timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an admin API call refused with 401.
    pub fn admin_authentication_failed(&self) {
        self.admin_authentication_failures
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an admin API call refused with 403.
    pub fn admin_call_denied(&self) {
        self.admin_calls_denied.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> SecurityStatsSnapshot {
        SecurityStatsSnapshot {
            authentication_successes: self.authentication_successes.load(Ordering::Relaxed),
            authentication_failures: self.authentication_failures.load(Ordering::Relaxed),
            reauthentications: self.reauthentications.load(Ordering::Relaxed),
            tls_handshake_failures: self.tls_handshake_failures.load(Ordering::Relaxed),
            unauthenticated_request_closes: self
                .unauthenticated_request_closes
                .load(Ordering::Relaxed),
            expired_session_closes: self.expired_session_closes.load(Ordering::Relaxed),
            connections_refused_per_ip: self.connections_refused_per_ip.load(Ordering::Relaxed),
            connections_refused_rate_per_ip: self
                .connections_refused_rate_per_ip
                .load(Ordering::Relaxed),
            authentication_timeouts: self.authentication_timeouts.load(Ordering::Relaxed),
            admin_authentication_failures: self
                .admin_authentication_failures
                .load(Ordering::Relaxed),
            admin_calls_denied: self.admin_calls_denied.load(Ordering::Relaxed),
        }
    }
}
