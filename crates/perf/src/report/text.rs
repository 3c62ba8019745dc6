//! One run's figures as a few human-readable lines.

use std::fmt::Write;

use crate::stats::{LatencySummary, RunResult};

/// Formats a latency summary as `avg .. p50 .. p95 .. p99 .. p99.9 .. max ..` (ms).
pub fn latency_line(l: &LatencySummary) -> String {
    format!(
        "avg {:.3}  p50 {:.3}  p95 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
        l.avg_ms, l.p50_ms, l.p95_ms, l.p99_ms, l.p999_ms, l.max_ms
    )
}

/// The errors of a run as `KIND=n, ...`, or `none`.
pub fn errors_line(r: &RunResult) -> String {
    if r.errors.is_empty() {
        return "none".into();
    }
    r.errors
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A run as text.
pub fn render(r: &RunResult) -> String {
    let mut s = String::new();
    let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(s, "{}  {}", r.kind, params.join(" "));
    let _ = writeln!(
        s,
        "  {} records, {} requests in {:.2} s: {:.1} records/s, {:.1} requests/s, {:.2} MB/s of record values ({:.2} MB/s of frames on the wire)",
        r.records, r.requests, r.elapsed_s, r.records_per_s, r.requests_per_s, r.payload_mb_per_s, r.wire_mb_per_s
    );
    let _ = writeln!(
        s,
        "  latency per request (ms):  {}",
        latency_line(&r.latency)
    );
    if let Some(rtt) = r.rtt_ms {
        let _ = writeln!(
            s,
            "  per-message amortised latency, VDL's (T - rtt)/N + rtt with rtt {:.3} ms (ms):  {}",
            rtt,
            latency_line(&r.amortised)
        );
    }
    if r.empty_fetches > 0 {
        let _ = writeln!(s, "  empty fetches (not in latency): {}", r.empty_fetches);
    }
    let _ = writeln!(s, "  errors: {}", errors_line(r));
    s
}
