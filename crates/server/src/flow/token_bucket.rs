//! A token bucket that may go into debt: the rate a quota allows, and how long a client that
//! went over it must wait.

use std::time::{Duration, Instant};

/// Longest throttle one request is given, whatever the debt: a client told to wait longer than
/// its request timeout would give up instead of waiting (Kafka bounds its throttle times by
/// the quota window the same way). A larger debt stays in the bucket and throttles the next
/// requests too, so the average rate still holds.
pub const MAX_THROTTLE: Duration = Duration::from_secs(10);

/// How much a bucket may hold when full: this many seconds of its rate. A client idle for a
/// while may send this much at once without being throttled.
pub const BURST_SECONDS: f64 = 1.0;

/// Tokens refilling at `rate_per_sec` up to `BURST_SECONDS` worth. A charge always succeeds and
/// may leave the bucket negative (in debt); the debt divided by the rate is how long the client
/// must wait before it is back under its rate.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate_per_sec: f64,
    tokens: f64,
    refilled_at: Instant,
}

impl TokenBucket {
    /// A full bucket refilling at `rate_per_sec` (> 0).
    pub fn new(rate_per_sec: f64, now: Instant) -> TokenBucket {
        assert!(
            rate_per_sec > 0.0 && rate_per_sec.is_finite(),
            "a token bucket needs a positive rate"
        );
        TokenBucket {
            rate_per_sec,
            tokens: rate_per_sec * BURST_SECONDS,
            refilled_at: now,
        }
    }

    /// The rate this bucket refills at, per second.
    pub fn rate_per_sec(&self) -> f64 {
        self.rate_per_sec
    }

    /// Changes the rate (a quota was altered); the tokens held are kept, capped at the new
    /// burst.
    pub fn set_rate(&mut self, rate_per_sec: f64, now: Instant) {
        assert!(rate_per_sec > 0.0 && rate_per_sec.is_finite());
        self.refill(now);
        self.rate_per_sec = rate_per_sec;
        self.tokens = self.tokens.min(rate_per_sec * BURST_SECONDS);
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens =
            (self.tokens + elapsed * self.rate_per_sec).min(self.rate_per_sec * BURST_SECONDS);
        self.refilled_at = self.refilled_at.max(now);
    }

    /// Takes `amount` tokens and returns how long the client must now wait to be back under
    /// the rate (zero when the bucket is not in debt), at most [`MAX_THROTTLE`].
    pub fn charge(&mut self, amount: f64, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= amount.max(0.0);
        self.debt_wait()
    }

    /// How long until the bucket is out of debt, at most [`MAX_THROTTLE`].
    pub fn debt_wait(&self) -> Duration {
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((-self.tokens / self.rate_per_sec).min(MAX_THROTTLE.as_secs_f64()))
    }

    /// Whether the bucket is full at `now` (nothing to remember: a fresh bucket is the same).
    pub fn is_full(&self, now: Instant) -> bool {
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens + elapsed * self.rate_per_sec >= self.rate_per_sec * BURST_SECONDS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_the_rate_nothing_waits_and_debt_is_paid_back_at_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000.0, t0);
        // The burst: one second's worth.
        assert_eq!(b.charge(1000.0, t0), Duration::ZERO);
        // 500 more: half a second of debt.
        let wait = b.charge(500.0, t0);
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-9, "{wait:?}");
        // After that half second, the debt is paid.
        assert_eq!(b.debt_wait(), wait);
        assert_eq!(
            b.charge(0.0, t0 + Duration::from_millis(500)),
            Duration::ZERO
        );
        assert!(!b.is_full(t0 + Duration::from_millis(500)));
        assert!(b.is_full(t0 + Duration::from_millis(1500)));
    }

    #[test]
    fn sustained_rate_is_the_configured_rate() {
        // A client that always waits what it is told sends at the rate, over any long run.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(100.0, t0);
        let mut now = t0;
        let mut sent: f64 = 0.0;
        while now < t0 + Duration::from_secs(60) {
            sent += 30.0;
            now += b.charge(30.0, now);
        }
        let rate = (sent - 100.0) / 60.0; // minus the initial burst
        assert!((rate - 100.0).abs() < 1.0, "rate {rate}");
    }

    #[test]
    fn throttle_is_capped_and_the_rest_of_the_debt_stays() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, t0);
        assert_eq!(b.charge(1000.0, t0), MAX_THROTTLE);
        assert_eq!(b.charge(0.0, t0 + MAX_THROTTLE), MAX_THROTTLE);
    }

    #[test]
    fn lowering_the_rate_caps_the_tokens_held() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000.0, t0);
        b.set_rate(10.0, t0);
        assert_eq!(b.charge(10.0, t0), Duration::ZERO);
        assert!(b.charge(10.0, t0) > Duration::ZERO);
    }
}
