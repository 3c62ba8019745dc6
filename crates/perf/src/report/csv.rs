//! Every figure of every run as one CSV row.

use crate::stats::{LatencySummary, RunResult, BUCKET_LABELS};

/// Parameter columns, in order (empty when a run does not have the parameter).
pub const PARAM_COLUMNS: [&str; 13] = [
    "scenario",
    "batch",
    "message_size",
    "fetch_size",
    "threads",
    "in_flight",
    "acks",
    "compression",
    "rate",
    "load_factor",
    "ratio",
    "read_mode",
    "label",
];

/// Quotes a field if it needs it (RFC 4180).
pub fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn latency_cols(prefix: &str) -> Vec<String> {
    ["avg", "p50", "p95", "p99", "p999", "max"]
        .iter()
        .map(|c| format!("{prefix}_{c}_ms"))
        .collect()
}

fn latency_vals(l: &LatencySummary) -> Vec<String> {
    [l.avg_ms, l.p50_ms, l.p95_ms, l.p99_ms, l.p999_ms, l.max_ms]
        .iter()
        .map(|v| format!("{v:.4}"))
        .collect()
}

/// The header line's columns.
pub fn header() -> Vec<String> {
    let mut h: Vec<String> = vec!["kind".into()];
    h.extend(PARAM_COLUMNS.iter().map(|s| s.to_string()));
    h.extend(
        [
            "elapsed_s",
            "requests",
            "records",
            "records_per_s",
            "requests_per_s",
            "payload_mb_per_s",
            "wire_mb_per_s",
            "latency_min_ms",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    h.extend(latency_cols("latency"));
    h.extend(latency_cols("amortised"));
    h.extend(
        ["rtt_ms", "errors_total", "errors", "gaps", "empty_fetches"]
            .iter()
            .map(|s| s.to_string()),
    );
    h.extend(BUCKET_LABELS.iter().map(|b| format!("pct_{b}")));
    h
}

/// One run's row.
pub fn row(r: &RunResult) -> Vec<String> {
    let mut v = vec![r.kind.clone()];
    v.extend(PARAM_COLUMNS.iter().map(|p| r.param(p).to_string()));
    v.push(format!("{:.3}", r.elapsed_s));
    v.push(r.requests.to_string());
    v.push(r.records.to_string());
    v.push(format!("{:.2}", r.records_per_s));
    v.push(format!("{:.2}", r.requests_per_s));
    v.push(format!("{:.3}", r.payload_mb_per_s));
    v.push(format!("{:.3}", r.wire_mb_per_s));
    v.push(format!("{:.4}", r.latency.min_ms));
    v.extend(latency_vals(&r.latency));
    v.extend(latency_vals(&r.amortised));
    v.push(r.rtt_ms.map(|x| format!("{x:.4}")).unwrap_or_default());
    v.push(r.error_total().to_string());
    v.push(
        r.errors
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect::<Vec<_>>()
            .join(";"),
    );
    v.push(r.gaps.to_string());
    v.push(r.empty_fetches.to_string());
    let mut buckets = r.buckets.clone();
    buckets.resize(BUCKET_LABELS.len(), 0.0);
    v.extend(buckets.iter().map(|b| format!("{b:.3}")));
    v
}

/// The whole CSV document.
pub fn render(results: &[RunResult]) -> String {
    let mut out = String::new();
    for line in std::iter::once(header()).chain(results.iter().map(row)) {
        let fields: Vec<String> = line.iter().map(|f| field(f)).collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}
