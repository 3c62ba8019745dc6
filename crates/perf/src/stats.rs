//! Measurements: latency histograms (HDR, microseconds), their summaries and latency buckets,
//! error counts, the live counters the progress display reads, and the result of one run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency the histograms track: one hour, in microseconds (larger values saturate).
const MAX_MICROS: u64 = 3_600_000_000;

/// A latency histogram in microseconds (3 significant digits: exact below 2 ms, within 0.1%
/// above).
#[derive(Debug, Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies::new()
    }
}

impl Latencies {
    /// An empty histogram.
    pub fn new() -> Latencies {
        // The bounds are constants that hdrhistogram accepts (1 <= low, high >= 2 * low,
        // sigfig <= 5), so this cannot fail.
        Latencies(
            Histogram::new_with_bounds(1, MAX_MICROS, 3)
                .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid")),
        )
    }

    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        self.record_micros(d.as_micros().min(u128::from(MAX_MICROS)) as u64);
    }

    /// Records one latency in microseconds (0 is recorded as 1).
    pub fn record_micros(&mut self, us: u64) {
        self.0.saturating_record(us.clamp(1, MAX_MICROS));
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Latencies) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.0.add(&other.0);
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The summary of the samples (all zero when empty).
    pub fn summary(&self) -> LatencySummary {
        let h = &self.0;
        if h.is_empty() {
            return LatencySummary::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        LatencySummary {
            count: h.len(),
            min_ms: ms(h.min()),
            avg_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p95_ms: ms(h.value_at_quantile(0.95)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }

    /// The share (percent) of samples in each of [`BUCKET_LABELS`]'s buckets.
    pub fn buckets(&self) -> Vec<f64> {
        let mut counts = vec![0u64; BUCKET_UPPER_US.len() + 1];
        for v in self.0.iter_recorded() {
            let us = v.value_iterated_to();
            let i = BUCKET_UPPER_US
                .iter()
                .position(|upper| us < *upper)
                .unwrap_or(BUCKET_UPPER_US.len());
            if let Some(c) = counts.get_mut(i) {
                *c += v.count_at_value();
            }
        }
        let total = self.0.len().max(1) as f64;
        counts
            .into_iter()
            .map(|c| 100.0 * c as f64 / total)
            .collect()
    }
}

/// Upper bounds (exclusive, µs) of the latency buckets of the thread-sweep report; the last
/// bucket (>= 3 ms) has none.
const BUCKET_UPPER_US: [u64; 11] = [200, 300, 400, 500, 600, 700, 800, 900, 1000, 2000, 3000];

/// Labels of the latency buckets, as in the thread-sweep report.
pub const BUCKET_LABELS: [&str; 12] = [
    "<0.2ms",
    "0.2-0.3ms",
    "0.3-0.4ms",
    "0.4-0.5ms",
    "0.5-0.6ms",
    "0.6-0.7ms",
    "0.7-0.8ms",
    "0.8-0.9ms",
    "0.9-1ms",
    "1-2ms",
    "2-3ms",
    ">3ms",
];

/// Latency statistics, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Minimum.
    pub min_ms: f64,
    /// Mean.
    pub avg_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

/// Errors by kind (Kafka error name such as `NOT_LEADER_OR_FOLLOWER`, or `IO`,
/// `CLIENT_TIMEOUT`, `OFFSET_GAP`, ...), shared by the workers of a run.
#[derive(Debug, Default)]
pub struct ErrorCounts(Mutex<BTreeMap<String, u64>>);

impl ErrorCounts {
    /// Counts `n` errors of `kind`.
    pub fn add(&self, kind: &str, n: u64) {
        if n == 0 {
            return;
        }
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(kind.to_string()).or_insert(0) += n;
    }

    /// A copy of the counts.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The total of all kinds.
    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }
}

/// Live totals of a run, updated by the workers and read by the progress display.
#[derive(Debug, Default)]
pub struct Counters {
    /// Records acknowledged (produce) or received (consume).
    pub records: AtomicU64,
    /// Requests completed.
    pub requests: AtomicU64,
    /// Errors seen.
    pub errors: AtomicU64,
}

impl Counters {
    /// Adds completed requests and their records.
    pub fn add(&self, requests: u64, records: u64) {
        self.requests.fetch_add(requests, Ordering::Relaxed);
        self.records.fetch_add(records, Ordering::Relaxed);
    }

    /// Records acknowledged or received so far.
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Errors so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

/// What one worker measured; merged into a [`RunResult`].
#[derive(Debug, Clone, Default)]
pub struct WorkerStats {
    /// Per-request latency.
    pub latency: Latencies,
    /// Per-message amortised latency, VDL's `(T_batch - rtt) / N + rtt`.
    pub amortised: Latencies,
    /// Requests completed (successfully).
    pub requests: u64,
    /// Records acknowledged or received.
    pub records: u64,
    /// Record value bytes acknowledged or received.
    pub payload_bytes: u64,
    /// Bytes of request (produce) or response (consume) frames on the wire.
    pub wire_bytes: u64,
    /// Fetches that returned no records (consume; not in the latency figures).
    pub empty_fetches: u64,
}

impl WorkerStats {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &WorkerStats) {
        self.latency.merge(&other.latency);
        self.amortised.merge(&other.amortised);
        self.requests += other.requests;
        self.records += other.records;
        self.payload_bytes += other.payload_bytes;
        self.wire_bytes += other.wire_bytes;
        self.empty_fetches += other.empty_fetches;
    }

    /// Records one completed request of `records` records taking `elapsed`, with VDL's
    /// amortised per-message latency given the round-trip time `rtt`.
    pub fn record_request(&mut self, elapsed: Duration, records: u64, rtt: Option<Duration>) {
        self.latency.record(elapsed);
        if let (Some(rtt), Some(n)) = (rtt, std::num::NonZeroU64::new(records)) {
            let t = elapsed.as_secs_f64() * 1e6;
            let r = rtt.as_secs_f64() * 1e6;
            let per_message = (t - r).max(0.0) / n.get() as f64 + r.min(t);
            self.amortised.record_micros(per_message.round() as u64);
        }
        self.requests += 1;
        self.records += records;
    }
}

/// The figures of one measured run (one cell of a table).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// What ran: `produce`, `consume`, `mixed-write`, `mixed-read`, ...
    pub kind: String,
    /// The parameters that define the cell (batch, message size, fetch size, threads...).
    pub params: BTreeMap<String, String>,
    /// Wall time of the measured phase, seconds.
    pub elapsed_s: f64,
    /// Requests completed.
    pub requests: u64,
    /// Records acknowledged or received.
    pub records: u64,
    /// Records per second (VDL's TPS).
    pub records_per_s: f64,
    /// Requests per second.
    pub requests_per_s: f64,
    /// Record value bytes per second, in MB/s (10^6 bytes), as VDL's tables.
    pub payload_mb_per_s: f64,
    /// Frame bytes on the wire per second (requests for produce, responses for consume), MB/s.
    pub wire_mb_per_s: f64,
    /// Per-request latency.
    pub latency: LatencySummary,
    /// Per-message amortised latency `(T_batch - rtt) / N + rtt` (VDL's definition), with the
    /// measured `rtt_ms`.
    pub amortised: LatencySummary,
    /// Round-trip time used for the amortised latency (median ApiVersions round trip), ms.
    pub rtt_ms: Option<f64>,
    /// Share of requests (percent) in each latency bucket of [`BUCKET_LABELS`].
    pub buckets: Vec<f64>,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// Offset gaps seen by consumers (also counted in `errors` as `OFFSET_GAP`).
    pub gaps: u64,
    /// Fetches that returned nothing.
    pub empty_fetches: u64,
}

impl RunResult {
    /// Builds the result of a run from the merged worker figures.
    pub fn from_stats(
        kind: &str,
        params: BTreeMap<String, String>,
        elapsed: Duration,
        stats: &WorkerStats,
        rtt: Option<Duration>,
        errors: BTreeMap<String, u64>,
    ) -> RunResult {
        let secs = elapsed.as_secs_f64().max(1e-9);
        RunResult {
            kind: kind.to_string(),
            params,
            elapsed_s: elapsed.as_secs_f64(),
            requests: stats.requests,
            records: stats.records,
            records_per_s: stats.records as f64 / secs,
            requests_per_s: stats.requests as f64 / secs,
            payload_mb_per_s: stats.payload_bytes as f64 / secs / 1e6,
            wire_mb_per_s: stats.wire_bytes as f64 / secs / 1e6,
            latency: stats.latency.summary(),
            amortised: stats.amortised.summary(),
            rtt_ms: rtt.map(|r| r.as_secs_f64() * 1e3),
            buckets: stats.latency.buckets(),
            gaps: errors.get("OFFSET_GAP").copied().unwrap_or(0),
            errors,
            empty_fetches: stats.empty_fetches,
        }
    }

    /// Total errors of every kind.
    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }

    /// A parameter's value, or "".
    pub fn param(&self, key: &str) -> &str {
        self.params.get(key).map_or("", String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_buckets() {
        let mut l = Latencies::new();
        for us in [100, 150, 250, 350, 950, 1500, 2500, 5000, 199, 200] {
            l.record_micros(us);
        }
        let s = l.summary();
        assert_eq!(s.count, 10);
        assert!((s.min_ms - 0.1).abs() < 1e-9);
        assert!((s.max_ms - 5.0).abs() < 0.01);
        let b = l.buckets();
        assert_eq!(b.len(), BUCKET_LABELS.len());
        assert!((b[0] - 30.0).abs() < 1e-9, "{b:?}"); // 100, 150, 199
        assert!((b[1] - 20.0).abs() < 1e-9, "{b:?}"); // 200, 250
        assert!((b[11] - 10.0).abs() < 1e-9, "{b:?}"); // 5000
        assert!((b.iter().sum::<f64>() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn amortised_latency_is_vdls_formula() {
        let mut w = WorkerStats::default();
        // T = 1000 µs for 50 records with rtt 100 µs: (1000 - 100) / 50 + 100 = 118 µs.
        w.record_request(
            Duration::from_micros(1000),
            50,
            Some(Duration::from_micros(100)),
        );
        assert_eq!(w.amortised.summary().max_ms, 0.118);
        assert_eq!(w.latency.summary().max_ms, 1.0);
        assert_eq!((w.requests, w.records), (1, 50));
    }
}
