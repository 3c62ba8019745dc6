//! Markdown tables shaped like the reference reports: VDL's produce / consume / concurrent
//! tables (one table per message size or scenario), the thread-sweep table with latency
//! buckets, the Pegasus read/write mix table, the latency-vs-load table, and a plain table for
//! anything else.

use std::fmt::Write;

use super::text::errors_line;
use super::ReportMeta;
use crate::stats::{RunResult, BUCKET_LABELS};

/// A Markdown table.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| {} |", headers.join(" | "));
    let _ = writeln!(
        s,
        "|{}|",
        headers.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    );
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

fn f2(v: f64) -> String {
    format!("{v:.2}")
}

fn f3(v: f64) -> String {
    format!("{v:.3}")
}

fn us(ms: f64) -> String {
    format!("{:.0}", ms * 1000.0)
}

fn kib(bytes: &str) -> String {
    bytes
        .parse::<u64>()
        .map(|b| (b / 1024).to_string())
        .unwrap_or_else(|_| bytes.to_string())
}

fn errs(r: &RunResult) -> String {
    if r.error_total() == 0 {
        "0".into()
    } else {
        errors_line(r)
    }
}

/// Distinct values of a parameter among `results`, in numeric order.
fn distinct(results: &[&RunResult], key: &str) -> Vec<String> {
    let mut v: Vec<String> = results.iter().map(|r| r.param(key).to_string()).collect();
    v.sort_by_key(|s| s.parse::<f64>().map_or(i64::MAX, |x| (x * 1000.0) as i64));
    v.dedup();
    v
}

const PRODUCE_HEADERS: [&str; 13] = [
    "batch",
    "TPS (records/s)",
    "requests/s",
    "avg ms",
    "p95 ms",
    "p99 ms",
    "p99.9 ms",
    "max ms",
    "amortised avg ms",
    "amortised p95 ms",
    "amortised p99 ms",
    "MB/s",
    "errors",
];

fn perf_row(first: String, r: &RunResult) -> Vec<String> {
    vec![
        first,
        f2(r.records_per_s),
        f2(r.requests_per_s),
        f3(r.latency.avg_ms),
        f3(r.latency.p95_ms),
        f3(r.latency.p99_ms),
        f3(r.latency.p999_ms),
        f3(r.latency.max_ms),
        f3(r.amortised.avg_ms),
        f3(r.amortised.p95_ms),
        f3(r.amortised.p99_ms),
        f2(r.payload_mb_per_s),
        errs(r),
    ]
}

fn with_first(first: &str) -> Vec<&str> {
    let mut h = PRODUCE_HEADERS.to_vec();
    if let Some(h0) = h.first_mut() {
        *h0 = first;
    }
    h
}

const LATENCY_NOTE: &str =
    "Latency columns are per request (one Produce of `batch` records, or one Fetch), \
measured by the client from send to response. \"amortised\" is VDL's per-message figure \
(T_request - rtt) / N + rtt with N the records in the request and rtt the measured median \
ApiVersions round trip (given per table), so these columns can be read next to VDL's report; \
VDL's own tables show only that amortised figure. MB/s is record values (10^6 bytes/s), as VDL's.";

/// The Markdown report.
pub fn render(meta: &ReportMeta, results: &[RunResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# vdl-perf report: {}\n", meta.label);
    let _ = writeln!(s, "- started: {}", meta.started);
    let _ = writeln!(s, "- servers: `{}`", meta.bootstrap);
    let _ = writeln!(s, "- machine: {}", meta.machine);
    let _ = writeln!(s, "- command: `{}`", meta.command);
    let _ = writeln!(s, "\n{LATENCY_NOTE}\n");
    let by =
        |kind: &str| -> Vec<&RunResult> { results.iter().filter(|r| r.kind == kind).collect() };
    let rtt_note = |rs: &[&RunResult]| -> String {
        let rtts: Vec<f64> = rs.iter().filter_map(|r| r.rtt_ms).collect();
        if rtts.is_empty() {
            return String::new();
        }
        let avg = rtts.iter().sum::<f64>() / rtts.len() as f64;
        format!(" (rtt {avg:.3} ms)")
    };
    let mut n = 0;

    let produce = by("produce");
    if !produce.is_empty() {
        let _ = writeln!(s, "## Produce (VDL tables 1-4)\n");
        for size in distinct(&produce, "message_size") {
            let rs: Vec<&RunResult> = produce
                .iter()
                .copied()
                .filter(|r| r.param("message_size") == size)
                .collect();
            n += 1;
            let rows: Vec<Vec<String>> = rs
                .iter()
                .map(|r| perf_row(r.param("batch").to_string(), r))
                .collect();
            let _ = writeln!(
                s,
                "Table {n}: produce, message size {size} B, synchronous (in flight {}), acks {}{}\n",
                rs.first().map_or("", |r| r.param("in_flight")),
                rs.first().map_or("", |r| r.param("acks")),
                rtt_note(&rs)
            );
            s.push_str(&table(&with_first("batch"), &rows));
            s.push('\n');
        }
    }

    let consume = by("consume");
    if !consume.is_empty() {
        let _ = writeln!(s, "## Consume (VDL tables 5-8)\n");
        for size in distinct(&consume, "message_size") {
            let rs: Vec<&RunResult> = consume
                .iter()
                .copied()
                .filter(|r| r.param("message_size") == size)
                .collect();
            n += 1;
            let rows: Vec<Vec<String>> = rs
                .iter()
                .map(|r| perf_row(kib(r.param("fetch_size")), r))
                .collect();
            let _ = writeln!(
                s,
                "Table {n}: consume, message size {size} B, one fetch at a time{}\n",
                rtt_note(&rs)
            );
            s.push_str(&table(&with_first("fetch size (KiB)"), &rows));
            s.push('\n');
        }
    }

    let (mw, mr) = (by("mixed-write"), by("mixed-read"));
    if !mw.is_empty() {
        let _ = writeln!(
            s,
            "## Produce and consume at the same time (VDL tables 8-11)\n"
        );
        for sc in distinct(&mw, "scenario") {
            for (side, rs) in [("write", &mw), ("read", &mr)] {
                let rs: Vec<&RunResult> = rs
                    .iter()
                    .copied()
                    .filter(|r| r.param("scenario") == sc)
                    .collect();
                let Some(first) = rs.first() else { continue };
                n += 1;
                let rows: Vec<Vec<String>> = rs
                    .iter()
                    .map(|r| perf_row(r.param("message_size").to_string(), r))
                    .collect();
                let _ = writeln!(
                    s,
                    "Table {n}: concurrent scenario {sc} ({side} side): produce batch {}, consume fetch {} KiB{}\n",
                    first.param("batch"),
                    kib(first.param("fetch_size")),
                    rtt_note(&rs)
                );
                s.push_str(&table(&with_first("message size (B)"), &rows));
                s.push('\n');
            }
        }
    }

    let load = by("load");
    if !load.is_empty() {
        n += 1;
        let first = load[0];
        let _ = writeln!(
            s,
            "## Latency vs offered load\n\nTable {n}: produce batch {} x {} B at fixed request rates (up to {} in flight); latency measured from each request's scheduled send time, so queueing shows (no coordinated omission)\n",
            first.param("batch"),
            first.param("message_size"),
            first.param("in_flight")
        );
        let rows: Vec<Vec<String>> = load
            .iter()
            .map(|r| {
                vec![
                    r.param("load_factor").to_string(),
                    r.param("rate").parse::<f64>().map(f2).unwrap_or_default(),
                    f2(r.requests_per_s),
                    f2(r.records_per_s),
                    f3(r.latency.p50_ms),
                    f3(r.latency.p99_ms),
                    f3(r.latency.p999_ms),
                    f3(r.latency.max_ms),
                    errs(r),
                ]
            })
            .collect();
        s.push_str(&table(
            &[
                "x sync rate",
                "offered req/s",
                "achieved req/s",
                "records/s",
                "p50 ms",
                "p99 ms",
                "p99.9 ms",
                "max ms",
                "errors",
            ],
            &rows,
        ));
        s.push('\n');
    }

    let (rr, rw) = (by("ratio-read"), by("ratio-write"));
    if !rr.is_empty() || !rw.is_empty() {
        n += 1;
        let _ = writeln!(
            s,
            "## Read/write mixes (Pegasus style)\n\nTable {n}: each worker does one operation at a time; a write is one Produce of `batch` records, a read one Fetch (catch-up: random earlier offset; tail: the newest batch). Latencies in microseconds.\n"
        );
        let rows: Vec<Vec<String>> = rr
            .iter()
            .map(|r| {
                let w = rw
                    .iter()
                    .find(|w| w.param("ratio") == r.param("ratio") && w.params == r.params);
                let w = w.filter(|w| w.requests > 0);
                let wcols = |f: fn(&RunResult) -> String| w.map_or("-".into(), |w| f(w));
                let rcol = |f: fn(&RunResult) -> String| {
                    if r.requests > 0 {
                        f(r)
                    } else {
                        "-".into()
                    }
                };
                vec![
                    r.param("ratio").to_string(),
                    r.param("threads").to_string(),
                    r.param("read_mode").to_string(),
                    rcol(|r| f2(r.requests_per_s)),
                    rcol(|r| us(r.latency.avg_ms)),
                    rcol(|r| us(r.latency.p99_ms)),
                    rcol(|r| us(r.latency.p999_ms)),
                    wcols(|w| f2(w.requests_per_s)),
                    wcols(|w| us(w.latency.avg_ms)),
                    wcols(|w| us(w.latency.p99_ms)),
                    wcols(|w| us(w.latency.p999_ms)),
                    errs(r),
                ]
            })
            .collect();
        s.push_str(&table(
            &[
                "R:W",
                "threads",
                "read",
                "R-QPS",
                "R-AVG µs",
                "R-P99 µs",
                "R-P999 µs",
                "W-QPS",
                "W-AVG µs",
                "W-P99 µs",
                "W-P999 µs",
                "errors",
            ],
            &rows,
        ));
        s.push('\n');
    }

    let sweep = by("sweep");
    if !sweep.is_empty() {
        n += 1;
        let first = sweep[0];
        let _ = writeln!(
            s,
            "## Thread sweep\n\nTable {n}: batch {} x {} B per request, each thread synchronous; buckets are the share of requests (%)\n",
            first.param("batch"),
            first.param("message_size")
        );
        let mut headers = vec![
            "threads",
            "records",
            "records/s",
            "elapsed s",
            "max ms",
            "min ms",
            "avg ms",
        ];
        headers.extend(BUCKET_LABELS.iter());
        let rows: Vec<Vec<String>> = sweep
            .iter()
            .map(|r| {
                let mut row = vec![
                    r.param("threads").to_string(),
                    r.records.to_string(),
                    f2(r.records_per_s),
                    f2(r.elapsed_s),
                    f3(r.latency.max_ms),
                    f3(r.latency.min_ms),
                    f3(r.latency.avg_ms),
                ];
                row.extend(r.buckets.iter().map(|b| f3(*b)));
                row
            })
            .collect();
        s.push_str(&table(&headers, &rows));
        s.push('\n');
    }

    let ceiling = by("ceiling");
    if !ceiling.is_empty() {
        n += 1;
        let _ = writeln!(
            s,
            "## Client ceiling\n\nTable {n}: the same client against vdl-perf's in-process fake server, which acknowledges produces at once and serves fetches from memory (client and server share the machine's cores)\n"
        );
        let rows: Vec<Vec<String>> = ceiling
            .iter()
            .map(|r| {
                let shape = if r.param("workload") == "consume" {
                    format!("consume, fetch {} KiB", kib(r.param("fetch_size")))
                } else {
                    format!(
                        "produce, batch {} x {} B, in flight {}",
                        r.param("batch"),
                        r.param("message_size"),
                        r.param("in_flight")
                    )
                };
                perf_row(shape, r)
            })
            .collect();
        s.push_str(&table(&with_first("workload"), &rows));
        s.push('\n');
    }

    let known = [
        "ceiling",
        "produce",
        "consume",
        "mixed-write",
        "mixed-read",
        "load",
        "ratio-read",
        "ratio-write",
        "sweep",
    ];
    let other: Vec<&RunResult> = results
        .iter()
        .filter(|r| !known.contains(&r.kind.as_str()))
        .collect();
    if !other.is_empty() {
        let _ = writeln!(s, "## Other runs\n");
        let rows: Vec<Vec<String>> = other
            .iter()
            .map(|r| {
                let params: Vec<String> =
                    r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
                perf_row(format!("{} {}", r.kind, params.join(" ")), r)
            })
            .collect();
        s.push_str(&table(&with_first("run"), &rows));
        s.push('\n');
    }
    s
}
