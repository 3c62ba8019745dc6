//! Output: one run as text ([`text`]); a report folder with Markdown tables shaped like the
//! reference reports ([`markdown`]), CSV ([`csv`]) and JSON of every figure, and SVG charts
//! ([`svg`]).

pub mod compare;
pub mod csv;
pub mod markdown;
pub mod svg;
pub mod text;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::stats::RunResult;
use svg::{Chart, Series};

/// What a report says about how it was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportMeta {
    /// Name of the run (e.g. `kafka-default`, `vdl`).
    pub label: String,
    /// The command line.
    pub command: String,
    /// When it started (UTC).
    pub started: String,
    /// The machine (cores, memory).
    pub machine: String,
    /// The servers measured.
    pub bootstrap: String,
}

/// The JSON document of a report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportJson {
    /// How it was made.
    pub meta: ReportMeta,
    /// Every run.
    pub results: Vec<RunResult>,
}

/// Now, as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn now_utc() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// This machine: logical cores and memory, from the OS.
pub fn machine_description() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / (1024.0 * 1024.0));
    let mem = mem_gib.map_or(String::new(), |g| format!(", {g:.0} GiB RAM"));
    format!(
        "{cores} cores{mem}, client and servers on the same machine; load average at start: {}",
        load_average()
    )
}

/// The 1/5/15-minute load averages from /proc/loadavg (other work on the machine skews
/// results; reports say how busy it was).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

fn numeric(r: &RunResult, key: &str) -> f64 {
    r.param(key).parse().unwrap_or(f64::NAN)
}

/// The charts that `results` have data for, as (file name, chart).
pub fn charts(results: &[RunResult]) -> Vec<(String, Chart)> {
    let mut out = Vec::new();
    let of =
        |kind: &str| -> Vec<&RunResult> { results.iter().filter(|r| r.kind == kind).collect() };
    let sizes = |rs: &[&RunResult]| {
        let mut v: Vec<u64> = rs
            .iter()
            .filter_map(|r| r.param("message_size").parse().ok())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let produce = of("produce");
    if !produce.is_empty() {
        let series = sizes(&produce)
            .into_iter()
            .map(|size| Series {
                name: format!("{size} B messages"),
                points: produce
                    .iter()
                    .filter(|r| r.param("message_size") == size.to_string())
                    .map(|r| (numeric(r, "batch"), r.records_per_s))
                    .collect(),
                dashed: false,
            })
            .collect();
        out.push((
            "tps_vs_batch.svg".to_string(),
            Chart {
                title: "Produce: records/s vs batch size (synchronous, acks -1)".into(),
                x_label: "records per request (batch)".into(),
                y_label: "records/s".into(),
                categorical_x: true,
                series,
            },
        ));
        let mut series = Vec::new();
        for size in sizes(&produce) {
            let rs: Vec<&&RunResult> = produce
                .iter()
                .filter(|r| r.param("message_size") == size.to_string())
                .collect();
            series.push(Series {
                name: format!("{size} B p50"),
                points: rs
                    .iter()
                    .map(|r| (numeric(r, "batch"), r.latency.p50_ms))
                    .collect(),
                dashed: false,
            });
            series.push(Series {
                name: format!("{size} B p99"),
                points: rs
                    .iter()
                    .map(|r| (numeric(r, "batch"), r.latency.p99_ms))
                    .collect(),
                dashed: true,
            });
        }
        out.push((
            "latency_percentiles.svg".to_string(),
            Chart {
                title: "Produce: request latency percentiles vs batch size".into(),
                x_label: "records per request (batch)".into(),
                y_label: "latency per request (ms)".into(),
                categorical_x: true,
                series,
            },
        ));
    }
    let consume = of("consume");
    if !consume.is_empty() {
        let series = sizes(&consume)
            .into_iter()
            .map(|size| Series {
                name: format!("{size} B messages"),
                points: consume
                    .iter()
                    .filter(|r| r.param("message_size") == size.to_string())
                    .map(|r| (numeric(r, "fetch_size") / 1024.0, r.records_per_s))
                    .collect(),
                dashed: false,
            })
            .collect();
        out.push((
            "consume_tps_vs_fetch.svg".to_string(),
            Chart {
                title: "Consume: records/s vs fetch size".into(),
                x_label: "fetch size (KiB)".into(),
                y_label: "records/s".into(),
                categorical_x: true,
                series,
            },
        ));
    }
    let load = of("load");
    if !load.is_empty() {
        let pts = |f: fn(&RunResult) -> f64| -> Vec<(f64, f64)> {
            load.iter().map(|r| (numeric(r, "rate"), f(r))).collect()
        };
        out.push((
            "latency_vs_load.svg".to_string(),
            Chart {
                title: "Produce latency vs offered load (from scheduled send time)".into(),
                x_label: "offered requests/s".into(),
                y_label: "latency (ms)".into(),
                categorical_x: false,
                series: vec![
                    Series {
                        name: "p50".into(),
                        points: pts(|r| r.latency.p50_ms),
                        dashed: false,
                    },
                    Series {
                        name: "p99".into(),
                        points: pts(|r| r.latency.p99_ms),
                        dashed: false,
                    },
                    Series {
                        name: "p99.9".into(),
                        points: pts(|r| r.latency.p999_ms),
                        dashed: true,
                    },
                ],
            },
        ));
    }
    let sweep = of("sweep");
    if !sweep.is_empty() {
        out.push((
            "sweep_throughput.svg".to_string(),
            Chart {
                title: "Thread sweep: records/s and average latency".into(),
                x_label: "threads".into(),
                y_label: "records/s".into(),
                categorical_x: true,
                series: vec![Series {
                    name: "records/s".into(),
                    points: sweep
                        .iter()
                        .map(|r| (numeric(r, "threads"), r.records_per_s))
                        .collect(),
                    dashed: false,
                }],
            },
        ));
    }
    out
}

/// Writes `report.md`, `results.csv`, `results.json` and `charts/*.svg` into `dir`.
pub fn write_folder(dir: &Path, meta: &ReportMeta, results: &[RunResult]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("charts"))?;
    let mut md = markdown::render(meta, results);
    let charts = charts(results);
    if !charts.is_empty() {
        md.push_str("## Charts\n\n");
        for (name, chart) in &charts {
            md.push_str(&format!("![{}](charts/{name})\n\n", chart.title));
        }
    }
    std::fs::write(dir.join("report.md"), md)?;
    std::fs::write(dir.join("results.csv"), csv::render(results))?;
    let json = ReportJson {
        meta: meta.clone(),
        results: results.to_vec(),
    };
    let text = serde_json::to_string_pretty(&json).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("results.json"), text)?;
    for (name, chart) in charts {
        std::fs::write(dir.join("charts").join(name), chart.render())?;
    }
    Ok(())
}

/// Reads a `results.json` written by [`write_folder`].
pub fn read_json(path: &Path) -> std::io::Result<ReportJson> {
    let text = std::fs::read_to_string(path)?;
    serde_json::from_str(&text).map_err(std::io::Error::other)
}
