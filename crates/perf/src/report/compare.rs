//! Side-by-side tables of several reports (e.g. vdl, Kafka default, Kafka with fsync): one row
//! per cell present in the first report, records/s and request latency p50 / p99 per report.

use std::fmt::Write;

use super::markdown::table;
use super::ReportJson;
use crate::stats::RunResult;

/// Parameters that identify a cell across reports (the offered rate differs between servers,
/// so load cells are matched by their factor).
const KEY_PARAMS: [&str; 8] = [
    "scenario",
    "batch",
    "message_size",
    "fetch_size",
    "threads",
    "in_flight",
    "load_factor",
    "ratio",
];

fn key(r: &RunResult) -> Vec<String> {
    let mut k = vec![r.kind.clone()];
    k.extend(KEY_PARAMS.iter().map(|p| r.param(p).to_string()));
    k
}

fn describe(r: &RunResult) -> String {
    let p = |k: &str| r.param(k);
    match r.kind.as_str() {
        "produce" => format!("produce b{} x {} B", p("batch"), p("message_size")),
        "consume" => format!(
            "consume {} B, fetch {} KiB",
            p("message_size"),
            p("fetch_size").parse::<u64>().unwrap_or(0) / 1024
        ),
        "mixed-write" | "mixed-read" => format!(
            "concurrent {} {} {} B",
            p("scenario"),
            if r.kind == "mixed-write" {
                "write"
            } else {
                "read"
            },
            p("message_size")
        ),
        "load" => format!(
            "load x{} (b{} x {} B)",
            p("load_factor"),
            p("batch"),
            p("message_size")
        ),
        "ratio-read" | "ratio-write" => format!(
            "mix {} {}",
            p("ratio"),
            if r.kind == "ratio-read" {
                "reads"
            } else {
                "writes"
            }
        ),
        "sweep" => format!("sweep {} threads", p("threads")),
        _ => format!("{} {:?}", r.kind, r.params),
    }
}

/// The Markdown comparison of `reports` (labels from their metadata).
pub fn render(reports: &[ReportJson]) -> String {
    let mut s = String::new();
    let Some(first) = reports.first() else {
        return s;
    };
    let mut headers = vec!["cell".to_string()];
    for r in reports {
        headers.push(format!("{} rec/s", r.meta.label));
        headers.push(format!("{} p50 ms", r.meta.label));
        headers.push(format!("{} p99 ms", r.meta.label));
    }
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut rows = Vec::new();
    for cell in &first.results {
        if matches!(cell.kind.as_str(), "ceiling") || cell.requests == 0 {
            continue;
        }
        let k = key(cell);
        let mut row = vec![describe(cell)];
        for rep in reports {
            match rep.results.iter().find(|r| key(r) == k) {
                Some(r) if r.error_total() == 0 || r.requests > 0 => {
                    let flag = if r.error_total() > 0 { " (errors)" } else { "" };
                    row.push(format!("{:.0}{flag}", r.records_per_s));
                    row.push(format!("{:.3}", r.latency.p50_ms));
                    row.push(format!("{:.3}", r.latency.p99_ms));
                }
                _ => row.extend(["-".to_string(), "-".to_string(), "-".to_string()]),
            }
        }
        rows.push(row);
    }
    let _ = writeln!(
        s,
        "Records/s and per-request latency (p50, p99) of every cell, by server. Latency is per Produce or Fetch request.\n"
    );
    s.push_str(&table(&headers, &rows));
    s
}
