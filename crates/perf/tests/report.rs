//! The report writers produce valid CSV, JSON and SVG, and Markdown tables shaped like the
//! reference reports; a suite run against the fake server fills every section.

use std::collections::BTreeMap;
use std::time::Duration;

use vdl_perf::env::Env;
use vdl_perf::fake_server::FakeServer;
use vdl_perf::mixed::ReadMode;
use vdl_perf::progress::ProgressMode;
use vdl_perf::report::{self, csv, ReportMeta};
use vdl_perf::stats::{RunResult, WorkerStats};
use vdl_perf::suite::{self, SuiteConfig};
use vdl_perf::units::Ratio;

fn result(kind: &str, params: &[(&str, &str)], lat_us: &[u64]) -> RunResult {
    let mut w = WorkerStats::default();
    for us in lat_us {
        w.record_request(
            Duration::from_micros(*us),
            10,
            Some(Duration::from_micros(50)),
        );
        w.payload_bytes += 1000;
    }
    let mut errors = BTreeMap::new();
    if kind == "consume" {
        errors.insert("OFFSET_GAP".to_string(), 2);
        errors.insert("A,\"quoted\" kind".to_string(), 1);
    }
    RunResult::from_stats(
        kind,
        params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        Duration::from_secs(1),
        &w,
        Some(Duration::from_micros(50)),
        errors,
    )
}

/// Splits CSV text into records of fields (RFC 4180 quoting).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let (mut row, mut field, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => quoted = false,
            ('"', false) if field.is_empty() => quoted = true,
            (',', false) => row.push(std::mem::take(&mut field)),
            ('\n', false) => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (c, _) => field.push(c),
        }
    }
    assert!(
        !quoted && field.is_empty() && row.is_empty(),
        "CSV ends cleanly"
    );
    rows
}

/// Checks that every tag is closed in order (a small well-formedness check).
fn check_xml(svg: &str) {
    assert!(svg.starts_with("<svg "), "starts with <svg");
    assert!(svg.trim_end().ends_with("</svg>"));
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find('<') {
        let j = rest[i..].find('>').expect("tag closes") + i;
        let tag = &rest[i + 1..j];
        assert!(!tag.contains('<'), "no < inside a tag: {tag}");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name), "balanced tags");
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().unwrap().to_string();
            stack.push(name);
        }
        // Text between tags must not hold a raw '&' that is not an entity.
        let text_end = rest[j + 1..].find('<').map_or(rest.len(), |k| k + j + 1);
        let text = &rest[j + 1..text_end];
        for (k, _) in text.match_indices('&') {
            assert!(text[k..].contains(';'), "escaped &: {text}");
        }
        rest = &rest[j + 1..];
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

#[test]
fn writers_produce_valid_csv_json_svg_and_vdl_shaped_tables() {
    let mut results = Vec::new();
    for size in ["100", "1024"] {
        for batch in ["1", "10", "50"] {
            results.push(result(
                "produce",
                &[
                    ("batch", batch),
                    ("message_size", size),
                    ("in_flight", "1"),
                    ("acks", "-1"),
                ],
                &[150, 250, 900, 1500, 4000],
            ));
        }
        results.push(result(
            "consume",
            &[("fetch_size", "32768"), ("message_size", size)],
            &[100, 120],
        ));
    }
    results.push(result(
        "load",
        &[
            ("batch", "1"),
            ("message_size", "1024"),
            ("rate", "100"),
            ("load_factor", "0.5"),
        ],
        &[300],
    ));
    results.push(result(
        "sweep",
        &[("threads", "2"), ("batch", "5")],
        &[180, 220],
    ));
    let meta = ReportMeta {
        label: "test <&> run".into(),
        command: "vdl-perf suite".into(),
        started: report::now_utc(),
        machine: report::machine_description(),
        bootstrap: "127.0.0.1:1".into(),
    };
    let dir = tempfile::tempdir().unwrap();
    report::write_folder(dir.path(), &meta, &results).unwrap();

    let csv_text = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
    let rows = parse_csv(&csv_text);
    assert_eq!(rows.len(), results.len() + 1);
    let width = csv::header().len();
    assert!(
        rows.iter().all(|r| r.len() == width),
        "every row has {width} fields"
    );
    let errors_col = rows[0].iter().position(|h| h == "errors").unwrap();
    let consume_row = rows.iter().find(|r| r[0] == "consume").unwrap();
    assert!(consume_row[errors_col].contains("A,\"quoted\" kind=1"));

    let json = report::read_json(&dir.path().join("results.json")).unwrap();
    assert_eq!(json.results, results);
    assert_eq!(json.meta, meta);

    for name in [
        "tps_vs_batch.svg",
        "latency_percentiles.svg",
        "consume_tps_vs_fetch.svg",
        "latency_vs_load.svg",
        "sweep_throughput.svg",
    ] {
        let svg = std::fs::read_to_string(dir.path().join("charts").join(name)).unwrap();
        check_xml(&svg);
        assert!(svg.contains("<polyline"), "{name} has lines");
    }

    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(md.contains("Table 1: produce, message size 100 B"));
    assert!(md.contains("Table 2: produce, message size 1024 B"));
    assert!(md.contains("| batch | TPS (records/s) |"));
    assert!(md.contains("| fetch size (KiB) |"));
    assert!(md.contains("| 32 |"), "fetch size in KiB");
    assert!(md.contains("OFFSET_GAP=2"));
    assert!(md.contains("| threads | records | records/s |"));
    assert!(md.contains("<0.2ms"));
    assert!(md.contains("(T_request - rtt) / N + rtt"));
    assert!(md.contains("![Produce: records/s vs batch size"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_suite_against_the_fake_server_fills_every_section() {
    let server = FakeServer::start("127.0.0.1:0", 1).await.unwrap();
    let env = Env::new(
        &server.addr().to_string(),
        Duration::from_secs(5),
        ProgressMode::Quiet,
    );
    let cfg = SuiteConfig {
        topic: "suite".into(),
        batches: vec![1, 10],
        message_sizes: vec![100, 1000],
        fetch_sizes: vec![4 << 10, 64 << 10],
        cell_duration: Duration::from_millis(150),
        warmup: Duration::from_millis(50),
        consume_messages: 2000,
        load_factors: vec![0.5, 1.0],
        load_shape: (1, 100),
        ratios: vec![
            "1:1".parse::<Ratio>().unwrap(),
            "0:1".parse::<Ratio>().unwrap(),
        ],
        ratio_threads: 2,
        read_mode: ReadMode::Tail,
        sweep_threads: vec![1, 2],
        ..SuiteConfig::default()
    };
    let mut seen = 0;
    let mut on_cell = |_: &RunResult| seen += 1;
    let results = suite::run(&env, &cfg, &mut on_cell).await.unwrap();
    let count = |k: &str| results.iter().filter(|r| r.kind == k).count();
    assert_eq!(count("produce"), 4);
    assert_eq!(count("consume"), 4);
    assert_eq!(count("mixed-write"), 4);
    assert_eq!(count("mixed-read"), 4);
    assert_eq!(count("load"), 2);
    assert_eq!(count("ratio-read"), 2);
    assert_eq!(count("sweep"), 2);
    assert_eq!(seen, results.len());
    for r in &results {
        assert_eq!(
            r.error_total(),
            0,
            "{} {:?}: {:?}",
            r.kind,
            r.params,
            r.errors
        );
    }
    // A consume cell reads its records or stops at the cell's duration (150 ms here, which a
    // loaded machine can reach before 2,000 records of 1 KB in 4 KiB fetches: seen once in a
    // full run), checking offsets dense and in order as it goes (a gap is an error, counted
    // above): some records, never more than asked.
    for r in results.iter().filter(|r| r.kind == "consume") {
        assert!(
            r.records > 0 && r.records <= 2000,
            "{:?}: {} records",
            r.params,
            r.records
        );
    }
    for r in results.iter().filter(|r| r.kind == "mixed-read") {
        let w = results
            .iter()
            .find(|w| {
                w.kind == "mixed-write"
                    && w.param("scenario") == r.param("scenario")
                    && w.param("message_size") == r.param("message_size")
            })
            .unwrap();
        assert_eq!(
            r.records, w.records,
            "the consumer reads all that was written"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let meta = ReportMeta::default();
    report::write_folder(dir.path(), &meta, &results).unwrap();
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    for needle in [
        "## Produce (VDL tables 1-4)",
        "## Consume (VDL tables 5-8)",
        "concurrent scenario 2 (read side)",
        "## Latency vs offered load",
        "| R:W | threads | read | R-QPS |",
        "## Thread sweep",
    ] {
        assert!(md.contains(needle), "report has {needle}");
    }
}

#[test]
fn compare_puts_reports_side_by_side() {
    let a = result(
        "produce",
        &[("batch", "1"), ("message_size", "100")],
        &[1000],
    );
    let mut b = a.clone();
    b.records_per_s = 5.0;
    let doc = |label: &str, r: RunResult| report::ReportJson {
        meta: ReportMeta {
            label: label.into(),
            ..ReportMeta::default()
        },
        results: vec![r],
    };
    let md = report::compare::render(&[doc("vdl", a), doc("kafka", b)]);
    assert!(md.contains("| cell | vdl rec/s | vdl p50 ms | vdl p99 ms | kafka rec/s |"));
    assert!(
        md.contains("| produce b1 x 100 B | 10 | 1.000 | 1.000 | 5 | 1.000 | 1.000 |"),
        "{md}"
    );
}
