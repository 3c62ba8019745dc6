//! Charging requests to the limits and quotas that apply to them, and the throttle that
//! results.
//!
//! Every request is charged after the fact (Kafka's way, KIP-219): it is served, its response
//! carries `throttle_time_ms`, and its connection then reads nothing more until that time has
//! passed ([`Mute`]). A client over its rate is slowed to it; nothing is refused or dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::flow::settings::{FlowSettings, QuotaEntity, QuotaKind};
use crate::flow::token_bucket::TokenBucket;

/// Most client quota buckets a node keeps; beyond it, buckets with no debt are forgotten (a
/// fresh bucket is full, so forgetting one changes nothing).
pub const MAX_CLIENT_BUCKETS: usize = 100_000;

/// Who a request is charged to: the principal's name (Kafka's quota "user") and the
/// request's client id.
#[derive(Debug, Clone, Copy)]
pub struct ClientIdentity<'a> {
    /// The principal's name (`ANONYMOUS` without authentication).
    pub user: &'a str,
    /// The request header's client id ("" when null).
    pub client_id: &'a str,
}

/// Whether a fetch read from behind the tail or at it (see [`crate::flow::settings::FlowLimits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadKind {
    /// The read stopped at its byte limit with more committed data behind it.
    CatchUp,
    /// The read reached the high watermark.
    Tail,
}

#[derive(Default)]
struct NodeBuckets {
    produce_requests: Option<TokenBucket>,
    produce_bytes: Option<TokenBucket>,
    catchup_requests: Option<TokenBucket>,
    catchup_bytes: Option<TokenBucket>,
    tail_requests: Option<TokenBucket>,
    tail_bytes: Option<TokenBucket>,
}

/// Charges `amount` to the bucket a limit calls for: created at the limit's rate, re-rated when
/// the limit changed, dropped when the limit was removed.
fn charge_limit(
    slot: &mut Option<TokenBucket>,
    limit: Option<u64>,
    amount: f64,
    now: Instant,
) -> Duration {
    match limit {
        None => {
            *slot = None;
            Duration::ZERO
        }
        Some(rate) => {
            let rate = rate as f64;
            let bucket = slot.get_or_insert_with(|| TokenBucket::new(rate, now));
            if bucket.rate_per_sec() != rate {
                bucket.set_rate(rate, now);
            }
            bucket.charge(amount, now)
        }
    }
}

/// The flow control of one node: its buckets for the node-wide limits and for each client
/// quota in use, and counters of the throttling done.
#[derive(Default)]
pub struct FlowControl {
    node: Mutex<NodeBuckets>,
    clients: Mutex<HashMap<(QuotaKind, QuotaEntity), TokenBucket>>,
    throttled_requests: AtomicU64,
    throttle_time_ms_total: AtomicU64,
}

impl FlowControl {
    /// Charges a produce request of `bytes` record bytes; returns its throttle.
    pub fn charge_produce(
        &self,
        settings: &FlowSettings,
        who: ClientIdentity<'_>,
        bytes: u64,
        now: Instant,
    ) -> Duration {
        if settings.is_unlimited() {
            return Duration::ZERO;
        }
        let limits = settings.limits;
        let node = {
            let mut b = self.node.lock().unwrap_or_else(|e| e.into_inner());
            charge_limit(
                &mut b.produce_requests,
                limits.produce_requests_per_sec,
                1.0,
                now,
            )
            .max(charge_limit(
                &mut b.produce_bytes,
                limits.produce_bytes_per_sec,
                bytes as f64,
                now,
            ))
        };
        let client = self.charge_client(
            settings,
            QuotaKind::ProducerByteRate,
            who,
            bytes as f64,
            now,
        );
        self.note(node.max(client))
    }

    /// Charges a fetch response of `bytes` record bytes; returns its throttle.
    pub fn charge_fetch(
        &self,
        settings: &FlowSettings,
        who: ClientIdentity<'_>,
        bytes: u64,
        kind: ReadKind,
        now: Instant,
    ) -> Duration {
        if settings.is_unlimited() {
            return Duration::ZERO;
        }
        let limits = settings.limits;
        let node = {
            let mut b = self.node.lock().unwrap_or_else(|e| e.into_inner());
            let b = &mut *b;
            let (requests, bytes_bucket, request_limit, bytes_limit) = match kind {
                ReadKind::CatchUp => (
                    &mut b.catchup_requests,
                    &mut b.catchup_bytes,
                    limits.catchup_read_requests_per_sec,
                    limits.catchup_read_bytes_per_sec,
                ),
                ReadKind::Tail => (
                    &mut b.tail_requests,
                    &mut b.tail_bytes,
                    limits.tail_read_requests_per_sec,
                    limits.tail_read_bytes_per_sec,
                ),
            };
            charge_limit(requests, request_limit, 1.0, now).max(charge_limit(
                bytes_bucket,
                bytes_limit,
                bytes as f64,
                now,
            ))
        };
        let client = self.charge_client(
            settings,
            QuotaKind::ConsumerByteRate,
            who,
            bytes as f64,
            now,
        );
        self.note(node.max(client))
    }

    /// Charges the time spent handling a request (Kafka's `request_percentage`); returns the
    /// throttle.
    pub fn charge_request_time(
        &self,
        settings: &FlowSettings,
        who: ClientIdentity<'_>,
        busy: Duration,
        now: Instant,
    ) -> Duration {
        if settings.client_quotas.is_empty() {
            return Duration::ZERO;
        }
        let throttle = self.charge_client(
            settings,
            QuotaKind::RequestPercentage,
            who,
            busy.as_secs_f64(),
            now,
        );
        self.note(throttle)
    }

    fn charge_client(
        &self,
        settings: &FlowSettings,
        kind: QuotaKind,
        who: ClientIdentity<'_>,
        amount: f64,
        now: Instant,
    ) -> Duration {
        let Some((entity, quota)) = settings.resolve(kind, who.user, who.client_id) else {
            return Duration::ZERO;
        };
        // request_percentage: percent of one handler's time, so seconds of handling per second.
        let rate = match kind {
            QuotaKind::RequestPercentage => quota / 100.0,
            _ => quota,
        };
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if clients.len() >= MAX_CLIENT_BUCKETS {
            clients.retain(|_, b| !b.is_full(now));
        }
        let bucket = clients
            .entry((kind, entity))
            .or_insert_with(|| TokenBucket::new(rate, now));
        if bucket.rate_per_sec() != rate {
            bucket.set_rate(rate, now);
        }
        bucket.charge(amount, now)
    }

    fn note(&self, throttle: Duration) -> Duration {
        if !throttle.is_zero() {
            self.throttled_requests.fetch_add(1, Ordering::Relaxed);
            self.throttle_time_ms_total
                .fetch_add(throttle.as_millis() as u64, Ordering::Relaxed);
        }
        throttle
    }

    /// Requests throttled since start.
    pub fn throttled_requests(&self) -> u64 {
        self.throttled_requests.load(Ordering::Relaxed)
    }

    /// Sum of the throttle times given since start, in milliseconds.
    pub fn throttle_time_ms_total(&self) -> u64 {
        self.throttle_time_ms_total.load(Ordering::Relaxed)
    }
}

/// A connection's mute: the instant before which it reads no further request (set by the
/// throttle of a request it sent; the latest deadline wins).
#[derive(Debug)]
pub struct Mute {
    base: Instant,
    /// Nanoseconds after `base` (0: not muted).
    until_ns: AtomicU64,
}

impl Default for Mute {
    fn default() -> Self {
        Mute {
            base: Instant::now(),
            until_ns: AtomicU64::new(0),
        }
    }
}

impl Mute {
    /// Mutes the connection for `throttle` from `now` (never shortens a longer mute).
    pub fn mute_for(&self, throttle: Duration, now: Instant) {
        if throttle.is_zero() {
            return;
        }
        let until = (now + throttle)
            .saturating_duration_since(self.base)
            .as_nanos() as u64;
        self.until_ns.fetch_max(until.max(1), Ordering::Relaxed);
    }

    /// The instant the mute ends, if it is still in force at `now`.
    pub fn muted_until(&self, now: Instant) -> Option<Instant> {
        let ns = self.until_ns.load(Ordering::Relaxed);
        if ns == 0 {
            return None;
        }
        let until = self.base + Duration::from_nanos(ns);
        (until > now).then_some(until)
    }
}

/// `throttle` as a response's `throttle_time_ms`.
pub fn throttle_ms(throttle: Duration) -> i32 {
    i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::settings::{EntityName, QuotaAlteration};

    fn who() -> ClientIdentity<'static> {
        ClientIdentity {
            user: "ANONYMOUS",
            client_id: "app",
        }
    }

    #[test]
    fn unlimited_settings_cost_nothing() {
        let f = FlowControl::default();
        let s = FlowSettings::default();
        let now = Instant::now();
        assert_eq!(f.charge_produce(&s, who(), 1 << 30, now), Duration::ZERO);
        assert_eq!(f.throttled_requests(), 0);
    }

    #[test]
    fn node_limit_and_client_quota_both_throttle_the_larger_wins() {
        let f = FlowControl::default();
        let mut s = FlowSettings::default();
        s.limits.produce_bytes_per_sec = Some(1000);
        let now = Instant::now();
        assert_eq!(f.charge_produce(&s, who(), 1000, now), Duration::ZERO);
        let t = f.charge_produce(&s, who(), 1000, now);
        assert_eq!(t, Duration::from_secs(1));
        s.alter(&QuotaAlteration {
            entity: QuotaEntity {
                user: None,
                client_id: Some(EntityName::Default),
            },
            set: vec![("producer_byte_rate".into(), 500.0)],
            remove: vec![],
        });
        // Node bucket: -1000 - 500 = 1.5 s; client bucket: 500 - 500 = 0 s.
        assert_eq!(
            f.charge_produce(&s, who(), 500, now),
            Duration::from_millis(1500)
        );
        assert_eq!(f.throttled_requests(), 2);
        assert_eq!(f.throttle_time_ms_total(), 2500);
    }

    #[test]
    fn reads_are_charged_by_kind() {
        let f = FlowControl::default();
        let mut s = FlowSettings::default();
        s.limits.catchup_read_requests_per_sec = Some(1);
        let now = Instant::now();
        assert_eq!(
            f.charge_fetch(&s, who(), 10, ReadKind::CatchUp, now),
            Duration::ZERO
        );
        assert_eq!(
            f.charge_fetch(&s, who(), 10, ReadKind::CatchUp, now),
            Duration::from_secs(1)
        );
        assert_eq!(
            f.charge_fetch(&s, who(), 10, ReadKind::Tail, now),
            Duration::ZERO
        );
    }

    #[test]
    fn mute_keeps_the_latest_deadline() {
        let m = Mute::default();
        let now = Instant::now();
        assert!(m.muted_until(now).is_none());
        m.mute_for(Duration::from_millis(200), now);
        m.mute_for(Duration::from_millis(100), now);
        let until = m.muted_until(now).unwrap();
        assert!(until >= now + Duration::from_millis(199));
        assert!(m.muted_until(now + Duration::from_millis(300)).is_none());
        assert_eq!(throttle_ms(Duration::from_millis(1500)), 1500);
    }
}
