//! [`Histogram`]: durations in fixed buckets of atomic counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms' buckets: 50 µs to 10 s.
pub const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// A histogram of durations with fixed buckets ([`LATENCY_BUCKETS_SECONDS`]) made of atomic
/// counters: observing is a short scan and three relaxed atomic additions, no lock.
#[derive(Debug)]
pub struct Histogram {
    /// Count per bucket (not cumulative); the last one is `+Inf`.
    buckets: [AtomicU64; LATENCY_BUCKETS_SECONDS.len() + 1],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS_SECONDS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BUCKETS_SECONDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// (sum in seconds, count, per-bucket (upper bound, count) with `+Inf` last), as the
    /// encoder wants them (it makes them cumulative).
    pub(super) fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let buckets = LATENCY_BUCKETS_SECONDS
            .iter()
            .copied()
            // The encoder writes `le="+Inf"` for f64::MAX.
            .chain(std::iter::once(f64::MAX))
            .zip(self.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect::<Vec<_>>();
        // The count is the buckets' sum, so the encoded histogram is consistent even while
        // observations race with the scrape.
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        (sum, count, buckets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_count_and_sum() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(10));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 3);
        assert!((sum - 60.00301).abs() < 1e-9);
        assert_eq!(buckets[0], (0.00005, 1));
        assert_eq!(
            buckets.iter().find(|(b, _)| *b == 0.005).map(|x| x.1),
            Some(1)
        );
        assert_eq!(buckets.last(), Some(&(f64::MAX, 1)));
    }
}
