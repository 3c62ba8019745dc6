//! Connection limits of the Kafka listeners, after Kafka's (KIP-308, KIP-402, KIP-612):
//!
//! - `kafka.max_connections`: connections of every listener together (`max.connections`);
//!   further ones wait in the accept backlog.
//! - `[[kafka.listeners]] max_connections`: connections of one listener
//!   (`listener.name.NAME.max.connections`); further ones wait in that listener's backlog.
//! - `kafka.max_connections_per_ip` and `kafka.max_connections_per_ip_overrides`: connections
//!   from one client address, all listeners together (`max.connections.per.ip`,
//!   `max.connections.per.ip.overrides`); a connection beyond it is closed at once. Unset, it
//!   is 1000 or half of `kafka.max_connections`, whichever is lower (Kafka: unlimited).
//! - `kafka.max_connection_creation_rate` (or the listener's own `max_connection_creation_rate`):
//!   connections a listener accepts per second (`max.connection.creation.rate`); accepting
//!   pauses when the rate is reached, so the excess waits in the backlog, as in Kafka.
//! - `kafka.max_connection_creation_rate_per_ip`: new connections per second from one client
//!   address (Kafka's per-IP `connection_creation_rate` quota); a connection beyond it is
//!   closed at once (Kafka delays the close by the throttle time; vdl closes without holding
//!   a descriptor for it).
//! - `kafka.authentication_timeout_ms`: a connection to a TLS or SASL listener must finish
//!   authenticating (the TLS handshake, then SASL) within this long of being accepted, or it is
//!   closed. An idle unauthenticated connection otherwise holds its slots until
//!   `connection_idle_ms` (600 s).
//!
//! Nothing is reserved for any principal or listener: an operator who wants connections kept
//! for the admin gives the admin's listener its own `max_connections` headroom below
//! `kafka.max_connections`, or an override for the admin's address.
//!
//! The per-address tables are bounded: the connection counts hold only addresses with an open
//! connection (at most `kafka.max_connections` of them), and the rate buckets at most
//! [`MAX_RATE_ADDRESSES`] addresses; beyond that, buckets that are full again (idle addresses)
//! are dropped, and if none is, new addresses share one bucket.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::config::{canonical_ip, ConnectionLimitSettings};
use crate::security::stats::SecurityStats;

/// Most client addresses with their own creation-rate bucket (see the module doc).
pub const MAX_RATE_ADDRESSES: usize = 65_536;

/// A token bucket of `rate` tokens per second holding at most `rate` (one second's burst).
#[derive(Debug, Clone, Copy)]
pub struct RateBucket {
    rate: u32,
    tokens: f64,
    at: Instant,
}

impl RateBucket {
    /// A full bucket of `rate` per second (`rate` > 0).
    pub fn new(rate: u32, now: Instant) -> Self {
        RateBucket {
            rate: rate.max(1),
            tokens: f64::from(rate.max(1)),
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(self.rate)).min(f64::from(self.rate));
        self.at = now;
    }

    /// Takes a token if there is one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long until a token is there (zero: now).
    pub fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / f64::from(self.rate))
        }
    }

    fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= f64::from(self.rate)
    }
}

/// Why a connection was refused right after being accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Its address holds its most connections already.
    #[error("too many connections from this address")]
    PerIp,
    /// Its address opened connections faster than its creation rate.
    #[error("connections opened too fast from this address")]
    RatePerIp,
}

#[derive(Default)]
struct PerIp {
    open: HashMap<IpAddr, usize>,
    rates: HashMap<IpAddr, RateBucket>,
    overflow: Option<RateBucket>,
}

/// The node-wide limits at run time: the node's connection permits and the per-address
/// tables, shared by every listener.
pub struct ConnectionLimits {
    settings: ConnectionLimitSettings,
    /// `kafka.max_connections` (lowered to the open-file budget).
    max_connections: usize,
    /// `kafka.max_connections` (lowered to the open-file budget): the node's permits.
    pub node_permits: Arc<Semaphore>,
    per_ip: Mutex<PerIp>,
    stats: Arc<SecurityStats>,
}

impl ConnectionLimits {
    /// Limits of `settings`, `max_connections` node-wide, counting into `stats`.
    pub fn new(
        settings: ConnectionLimitSettings,
        max_connections: usize,
        stats: Arc<SecurityStats>,
    ) -> Arc<Self> {
        Arc::new(ConnectionLimits {
            settings,
            max_connections,
            node_permits: Arc::new(Semaphore::new(max_connections)),
            per_ip: Mutex::new(PerIp::default()),
            stats,
        })
    }

    /// The settings.
    pub fn settings(&self) -> &ConnectionLimitSettings {
        &self.settings
    }

    /// Admits a connection from `ip` accepted at `now`, or says why not (and counts it). The
    /// returned slot counts the connection until it is dropped.
    pub fn admit(self: &Arc<Self>, ip: IpAddr, now: Instant) -> Result<IpSlot, Refused> {
        let ip = canonical_ip(ip);
        let max = self.settings.max_for(ip, self.max_connections);
        let mut t = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        if t.open.get(&ip).copied().unwrap_or(0) >= max {
            self.stats.refused_per_ip();
            return Err(Refused::PerIp);
        }
        if let Some(rate) = self.settings.max_connection_creation_rate_per_ip {
            if !take_rate(&mut t, ip, rate, now) {
                self.stats.refused_rate_per_ip();
                return Err(Refused::RatePerIp);
            }
        }
        *t.open.entry(ip).or_insert(0) += 1;
        Ok(IpSlot {
            limits: self.clone(),
            ip,
        })
    }

    /// Connections open from `ip` now.
    pub fn open_from(&self, ip: IpAddr) -> usize {
        let t = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        t.open.get(&canonical_ip(ip)).copied().unwrap_or(0)
    }
}

/// Takes a token from `ip`'s bucket, keeping the table within [`MAX_RATE_ADDRESSES`].
fn take_rate(t: &mut PerIp, ip: IpAddr, rate: u32, now: Instant) -> bool {
    if !t.rates.contains_key(&ip) && t.rates.len() >= MAX_RATE_ADDRESSES {
        t.rates.retain(|_, b| !b.is_full(now));
    }
    if t.rates.contains_key(&ip) || t.rates.len() < MAX_RATE_ADDRESSES {
        return t
            .rates
            .entry(ip)
            .or_insert_with(|| RateBucket::new(rate, now))
            .try_take(now);
    }
    t.overflow
        .get_or_insert_with(|| RateBucket::new(rate, now))
        .try_take(now)
}

/// One admitted connection, counted against its address until dropped.
pub struct IpSlot {
    limits: Arc<ConnectionLimits>,
    ip: IpAddr,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut t = self.limits.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = t.open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                t.open.remove(&self.ip);
            }
        }
    }
}

/// One listener's own limits: its connection permits and accept rate.
pub struct ListenerLimits {
    permits: Option<Arc<Semaphore>>,
    rate: Option<RateBucket>,
}

impl ListenerLimits {
    /// `max_connections` and `rate` (per second) of one listener.
    pub fn new(max_connections: Option<usize>, rate: Option<u32>) -> Self {
        ListenerLimits {
            permits: max_connections.map(|n| Arc::new(Semaphore::new(n))),
            rate: rate.map(|r| RateBucket::new(r, Instant::now())),
        }
    }

    /// Waits for one of this listener's connection slots (at once without a limit); `None`
    /// when the semaphore is closed.
    pub async fn acquire(&self) -> Option<Option<tokio::sync::OwnedSemaphorePermit>> {
        match &self.permits {
            None => Some(None),
            Some(p) => p.clone().acquire_owned().await.ok().map(Some),
        }
    }

    /// Waits until the accept rate allows one more connection, and takes it.
    pub async fn pace(&mut self) {
        let Some(bucket) = self.rate.as_mut() else {
            return;
        };
        loop {
            let wait = bucket.wait(Instant::now());
            if wait.is_zero() {
                break;
            }
            tokio::time::sleep(wait).await;
        }
        bucket.try_take(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn per_ip_cap_counts_open_connections_and_overrides() {
        let mut settings = ConnectionLimitSettings {
            max_connections_per_ip: Some(2),
            ..Default::default()
        };
        settings
            .max_connections_per_ip_overrides
            .insert(ip("10.0.0.9"), 0);
        let limits = ConnectionLimits::new(settings, 100, Arc::default());
        let now = Instant::now();
        let a = limits.admit(ip("127.0.0.1"), now).unwrap();
        // The IPv4-mapped form is the same address.
        let b = limits.admit(ip("::ffff:127.0.0.1"), now).unwrap();
        assert_eq!(
            limits.admit(ip("127.0.0.1"), now).err(),
            Some(Refused::PerIp)
        );
        // Another address is not affected.
        let _c = limits.admit(ip("127.0.0.2"), now).unwrap();
        assert_eq!(
            limits.admit(ip("10.0.0.9"), now).err(),
            Some(Refused::PerIp)
        );
        drop(a);
        let _d = limits.admit(ip("127.0.0.1"), now).unwrap();
        drop(b);
        drop(_d);
        assert_eq!(limits.open_from(ip("127.0.0.1")), 0);
        // Addresses without connections leave the table.
        assert!(!limits
            .per_ip
            .lock()
            .unwrap()
            .open
            .contains_key(&ip("127.0.0.1")));
        assert_eq!(limits.stats.snapshot().connections_refused_per_ip, 2);
    }

    #[test]
    fn per_ip_rate_refuses_the_excess_and_refills() {
        let settings = ConnectionLimitSettings {
            max_connection_creation_rate_per_ip: Some(3),
            ..Default::default()
        };
        let limits = ConnectionLimits::new(settings, 100, Arc::default());
        let now = Instant::now();
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(limits.admit(ip("127.0.0.1"), now).unwrap());
        }
        assert_eq!(
            limits.admit(ip("127.0.0.1"), now).err(),
            Some(Refused::RatePerIp)
        );
        assert!(limits.admit(ip("127.0.0.3"), now).is_ok());
        let later = now + Duration::from_millis(400);
        assert!(limits.admit(ip("127.0.0.1"), later).is_ok());
        assert_eq!(limits.stats.snapshot().connections_refused_rate_per_ip, 1);
    }

    #[test]
    fn rate_table_is_bounded() {
        let mut t = PerIp::default();
        let now = Instant::now();
        for i in 0..MAX_RATE_ADDRESSES as u32 {
            assert!(take_rate(&mut t, IpAddr::from(i.to_be_bytes()), 1, now));
        }
        // Every bucket is empty: a new address shares the overflow bucket.
        assert!(take_rate(&mut t, ip("255.255.255.255"), 1, now));
        assert!(!take_rate(&mut t, ip("255.255.255.254"), 1, now));
        assert_eq!(t.rates.len(), MAX_RATE_ADDRESSES);
        // Once they refill, idle buckets are dropped to make room.
        let later = now + Duration::from_secs(2);
        assert!(take_rate(&mut t, ip("255.255.255.253"), 1, later));
        assert_eq!(t.rates.len(), 1);
    }

    #[tokio::test]
    async fn listener_rate_paces_accepts() {
        let mut l = ListenerLimits::new(Some(1), Some(20));
        let start = Instant::now();
        for _ in 0..30 {
            l.pace().await;
        }
        // 20 at once, then 10 more at 20 per second.
        assert!(
            start.elapsed() >= Duration::from_millis(400),
            "{:?}",
            start.elapsed()
        );
        let p = l.acquire().await.unwrap();
        assert!(p.is_some());
        assert!(l.permits.as_ref().unwrap().available_permits() == 0);
    }
}
