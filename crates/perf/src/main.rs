//! `vdl-perf`: benchmark client for Kafka-compatible servers. See the crate README.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use kafka_proto::records::Compression;
use vdl_perf::consume::{self, ConsumeConfig};
use vdl_perf::env::Env;
use vdl_perf::mixed::{self, RatioConfig};
use vdl_perf::produce::{self, ProduceConfig};
use vdl_perf::progress::ProgressMode;
use vdl_perf::report::{self, text, ReportMeta};
use vdl_perf::stats::RunResult;
use vdl_perf::suite::{self, SuiteConfig};
use vdl_perf::units::{ByteSize, StartOffset};

mod cli;

use cli::*;

fn main() -> Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    rt.block_on(run(cli))
}

fn env_for(t: &Target, json: bool) -> Result<Env> {
    let security = t.security.client_security()?;
    Ok(Env::new(&t.bootstrap, t.timeout, ProgressMode::detect(json)).with_security(security))
}

/// Creates the topic with `--partitions` partitions and the `--topic-config`s when that flag is
/// given (see [`Target`]).
async fn prepare_topic(env: &Env, t: &Target) -> Result<()> {
    if let Some(n) = t.partitions {
        let deadline = std::time::Instant::now() + t.timeout.max(Duration::from_secs(60));
        env.cluster
            .ensure_topic(&t.topic, n, &t.topic_configs, deadline)
            .await
            .with_context(|| format!("preparing {} with {n} partitions", t.topic))?;
    }
    Ok(())
}

fn emit(results: &[RunResult], json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(results)?);
    } else {
        for r in results {
            print!("{}", text::render(r));
        }
    }
    Ok(())
}

fn meta(label: &str, bootstrap: &str) -> ReportMeta {
    ReportMeta {
        label: label.to_string(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        started: report::now_utc(),
        machine: report::machine_description(),
        bootstrap: bootstrap.to_string(),
    }
}

fn write_out(out: Option<&Path>, meta: &ReportMeta, results: &[RunResult]) -> Result<()> {
    if let Some(dir) = out {
        report::write_folder(dir, meta, results)
            .with_context(|| format!("writing the report to {}", dir.display()))?;
        eprintln!("report written to {}", dir.display());
    }
    Ok(())
}

fn sizes(v: &[ByteSize], what: &str) -> Result<Vec<usize>> {
    v.iter().map(|b| size(*b, what)).collect()
}

fn size(b: ByteSize, what: &str) -> Result<usize> {
    usize::try_from(b.bytes()).with_context(|| format!("{what} too large"))
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Produce(a) => {
            let env = env_for(&a.target, cli.json)?;
            prepare_topic(&env, &a.target).await?;
            let cfg = ProduceConfig {
                topic: a.target.topic.clone(),
                partition: a.target.partition,
                messages: a.messages,
                message_size: size(a.message_size, "--message-size")?,
                batch: a.batch,
                threads: a.threads,
                in_flight: a.in_flight,
                acks: a.acks,
                compression: a.compression.into(),
                duration: a.duration,
                rate: a.rate,
                keys: a.keys,
            };
            let m = meta("produce", &a.target.bootstrap);
            let r = produce::run(&env, &cfg)
                .await
                .with_context(|| format!("producing to {}", a.target.bootstrap))?;
            write_out(a.out.as_deref(), &m, std::slice::from_ref(&r))?;
            emit(&[r], cli.json)
        }
        Command::Consume(a) => {
            let env = env_for(&a.target, cli.json)?;
            prepare_topic(&env, &a.target).await?;
            let cfg = ConsumeConfig {
                topic: a.target.topic.clone(),
                partition: a.target.partition,
                threads: a.threads,
                from: a.from,
                messages: a.messages,
                fetch_size: size(a.fetch_size, "--fetch-size")?,
                max_wait_ms: a.max_wait.as_millis().min(i32::MAX as u128) as i32,
                duration: a.duration,
                verify_crc: a.verify_crc,
            };
            let m = meta("consume", &a.target.bootstrap);
            let r = consume::run(&env, &cfg)
                .await
                .with_context(|| format!("consuming from {}", a.target.bootstrap))?;
            write_out(a.out.as_deref(), &m, std::slice::from_ref(&r))?;
            emit(&[r], cli.json)
        }
        Command::Mixed(a) => {
            let env = env_for(&a.target, cli.json)?;
            prepare_topic(&env, &a.target).await?;
            let m = meta("mixed", &a.target.bootstrap);
            let message_size = size(a.message_size, "--message-size")?;
            let fetch_size = size(a.fetch_size, "--fetch-size")?;
            let mut results = Vec::new();
            if a.ratio.is_empty() {
                let p = ProduceConfig {
                    topic: a.target.topic.clone(),
                    partition: a.target.partition,
                    messages: a.messages,
                    message_size,
                    batch: a.batch,
                    threads: a.producers,
                    in_flight: a.in_flight,
                    acks: -1,
                    compression: Compression::None,
                    duration: a.duration,
                    rate: None,
                    keys: None,
                };
                let c = ConsumeConfig {
                    topic: a.target.topic.clone(),
                    partition: a.target.partition,
                    threads: a.consumers,
                    from: StartOffset::Latest,
                    messages: None,
                    fetch_size,
                    max_wait_ms: 100,
                    duration: a.duration,
                    verify_crc: false,
                };
                let (w, r) = mixed::run_concurrent(&env, &p, &c)
                    .await
                    .with_context(|| format!("mixed run against {}", a.target.bootstrap))?;
                results.extend([w, r]);
            } else {
                for ratio in &a.ratio {
                    let cfg = RatioConfig {
                        topic: a.target.topic.clone(),
                        partition: a.target.partition.unwrap_or(0),
                        threads: a.threads,
                        ratio: *ratio,
                        read_mode: a.read,
                        message_size,
                        batch: a.batch,
                        fetch_size,
                        duration: a.duration,
                        preload: a.preload,
                    };
                    let (r, w) = mixed::run_ratio(&env.fresh(), &cfg)
                        .await
                        .with_context(|| format!("mix {ratio} against {}", a.target.bootstrap))?;
                    results.extend([r, w]);
                }
            }
            write_out(a.out.as_deref(), &m, &results)?;
            emit(&results, cli.json)
        }
        Command::Sweep(a) => {
            let env = env_for(&a.target, cli.json)?;
            let m = meta("sweep", &a.target.bootstrap);
            let base = ProduceConfig {
                topic: a.target.topic.clone(),
                partition: a.target.partition,
                messages: 0,
                message_size: size(a.message_size, "--message-size")?,
                batch: a.batch,
                threads: 1,
                in_flight: 1,
                acks: -1,
                compression: Compression::None,
                duration: a.duration,
                rate: None,
                keys: None,
            };
            let results = vdl_perf::sweep::run(&env, &base, &a.threads.0, a.messages_per_thread)
                .await
                .with_context(|| format!("thread sweep against {}", a.target.bootstrap))?;
            write_out(a.out.as_deref(), &m, &results)?;
            if cli.json {
                emit(&results, true)
            } else {
                print!("{}", report::markdown::render(&m, &results));
                Ok(())
            }
        }
        Command::Suite(a) => {
            let env = env_for(&a.target, cli.json)?;
            let m = meta(&a.label, &a.target.bootstrap);
            let cfg = SuiteConfig {
                topic: a.target.topic.clone(),
                batches: a.batches.clone(),
                message_sizes: sizes(&a.message_sizes, "--message-sizes")?,
                fetch_sizes: sizes(&a.fetch_sizes, "--fetch-sizes")?,
                cell_duration: a.cell_duration,
                warmup: a.warmup,
                consume_messages: a.consume_messages,
                consume_max_bytes: a.consume_max_bytes.bytes(),
                ratios: a.ratios.clone(),
                read_mode: a.read,
                sweep_threads: a.sweep_threads.clone().map(|t| t.0).unwrap_or_default(),
                ..SuiteConfig::default()
            };
            let mut results = Vec::new();
            if a.with_ceiling {
                let ceiling =
                    vdl_perf::ceiling::run(a.cell_duration, ProgressMode::detect(cli.json))
                        .await
                        .context("measuring the ceiling")?;
                results.extend(ceiling);
            }
            let json = cli.json;
            let mut on_cell = |r: &RunResult| {
                if !json {
                    print!("{}", text::render(r));
                }
            };
            let cells = suite::run(&env, &cfg, &mut on_cell)
                .await
                .with_context(|| format!("suite against {}", a.target.bootstrap))?;
            results.extend(cells);
            write_out(Some(&a.out), &m, &results)?;
            if json {
                emit(&results, true)?;
            }
            Ok(())
        }
        Command::Report(a) => {
            let doc = report::read_json(&a.from)
                .with_context(|| format!("reading {}", a.from.display()))?;
            write_out(Some(&a.out), &doc.meta, &doc.results)
        }
        Command::Compare(a) => {
            let docs = a
                .reports
                .iter()
                .map(|p| report::read_json(p).with_context(|| format!("reading {}", p.display())))
                .collect::<Result<Vec<_>>>()?;
            print!("{}", report::compare::render(&docs));
            Ok(())
        }
        Command::Ceiling(a) => {
            let m = meta("ceiling", "in-process fake server");
            let results = vdl_perf::ceiling::run(a.duration, ProgressMode::detect(cli.json))
                .await
                .context("measuring the ceiling against the in-process server")?;
            write_out(a.out.as_deref(), &m, &results)?;
            emit(&results, cli.json)
        }
        Command::Floor(a) => {
            let size = usize::try_from(a.message_size.bytes()).context("message size")?;
            let f = vdl_perf::floor::measure(
                &a.dir,
                size,
                a.iterations.max(1) as usize,
                a.replicas as usize,
            )
            .with_context(|| format!("measuring the floor in {}", a.dir.display()))?;
            if cli.json {
                println!("{}", serde_json::to_string_pretty(&f)?);
            } else {
                println!(
                    "append {size} B + fdatasync: p50 {:.3} ms, p99 {:.3} ms",
                    f.fsync.p50_ms, f.fsync.p99_ms
                );
                println!(
                    "loopback round trip ({size} B out, 8 B back): p50 {:.3} ms, p99 {:.3} ms",
                    f.round_trip.p50_ms, f.round_trip.p99_ms
                );
                println!(
                    "floor of a replicated fsynced produce (fsync + 2 round trips): p50 {:.3} ms",
                    f.floor_ms_p50
                );
                if let (Some(m), Some(floor)) = (&f.majority_fsync, f.shared_disk_floor_ms_p50) {
                    println!(
                        "{} appends + fdatasyncs together on this disk, until a majority finished: p50 {:.3} ms, p99 {:.3} ms",
                        f.replicas, m.p50_ms, m.p99_ms
                    );
                    println!(
                        "floor when the {} replicas share this disk (majority fsync + 2 round trips): p50 {floor:.3} ms",
                        f.replicas
                    );
                }
            }
            Ok(())
        }
        Command::Groups(a) => {
            let cfg = vdl_perf::groups::GroupsConfig {
                bootstrap: a.bootstrap,
                groups: a.groups as usize,
                members: a.members as usize,
                connections: a.connections as usize,
                join_concurrency: a.join_concurrency as usize,
                max_in_flight: a.in_flight as usize,
                heartbeat_interval: a.heartbeat_interval,
                warmup: a.warmup,
                duration: a.duration,
                session_timeout_ms: a.session_timeout_ms,
                rebalance_timeout_ms: a.rebalance_timeout_ms,
                request_timeout: a.timeout,
                server_pid: a.server_pid,
                partitions: a.partitions.unwrap_or(a.members),
                group_prefix: a.group_prefix,
                protocol: a.protocol,
                topic: a.topic,
                server_assignor: a.assignor,
            };
            let r = vdl_perf::groups::run(cfg)
                .await
                .context("running the groups workload")?;
            if cli.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", vdl_perf::groups::render(&r));
            }
            Ok(())
        }
        Command::Verify(a) => {
            let cfg = vdl_perf::safety::run::VerifyConfig {
                bootstrap: a.bootstrap,
                topic: a.topic,
                partitions: a.partitions,
                duration: a.duration,
                producers: a.producers,
                consumers: a.consumers,
                group_consumers: a.group_consumers,
                idempotent: a.idempotent,
                max_records: a.max_records,
                request_timeout: a.timeout,
                transactions: a.transactional.then_some(vdl_perf::safety::run::TxnConfig {
                    values_per_txn: a.txn_values,
                    partitions_per_txn: a.txn_partitions,
                    abort_one_in: a.abort_one_in,
                    transaction_timeout: a.transaction_timeout,
                    fencing: !a.no_fencing,
                }),
            };
            let history = vdl_perf::safety::run::run(cfg)
                .await
                .context("running the verify workload")?;
            if let Some(path) = &a.history {
                let file = std::fs::File::create(path)
                    .with_context(|| format!("creating {}", path.display()))?;
                let mut out = std::io::BufWriter::new(file);
                history
                    .write_jsonl(&mut out)
                    .and_then(|()| std::io::Write::flush(&mut out))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            let report = vdl_perf::safety::checker::check(&history);
            if cli.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", vdl_perf::safety::checker::render(&report));
            }
            if !report.safe {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::FakeServer(a) => {
            let server = vdl_perf::fake_server::FakeServer::start(&a.listen, a.partitions)
                .await
                .with_context(|| format!("listening on {}", a.listen))?;
            eprintln!(
                "fake server on {} for {:?} (Ctrl-C to stop)",
                server.addr(),
                a.duration
            );
            tokio::select! {
                _ = tokio::time::sleep(a.duration) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vdl_perf::mixed::ReadMode;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("vdl-perf").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn verify_flags_of_the_issue() {
        let cli = parse(&[
            "verify",
            "--bootstrap",
            "h:1,h:2",
            "--topic",
            "T",
            "--partitions",
            "6",
            "--duration",
            "60s",
            "--producers",
            "4",
            "--consumers",
            "2",
            "--history",
            "h.jsonl",
        ]);
        let Command::Verify(a) = cli.command else {
            panic!("not verify: {:?}", cli.command)
        };
        assert_eq!((a.bootstrap.as_str(), a.topic.as_str()), ("h:1,h:2", "T"));
        assert_eq!((a.partitions, a.producers, a.consumers), (6, 4, 2));
        assert_eq!(a.duration, Duration::from_secs(60));
        assert_eq!(a.max_records, 1_000_000);
        assert_eq!(a.history.as_deref(), Some(std::path::Path::new("h.jsonl")));
        assert_eq!((a.group_consumers, a.idempotent), (0, false));
        let cli = parse(&[
            "verify",
            "--topic",
            "T",
            "--group-consumers",
            "3",
            "--idempotent",
        ]);
        let Command::Verify(a) = cli.command else {
            panic!("not verify: {:?}", cli.command)
        };
        assert_eq!((a.consumers, a.group_consumers, a.idempotent), (2, 3, true));
        assert!(
            Cli::try_parse_from(["vdl-perf", "verify"]).is_err(),
            "--topic is required"
        );
    }

    #[test]
    fn produce_flags_of_the_issue() {
        let cli = parse(&[
            "produce",
            "--bootstrap",
            "h:1",
            "--topic",
            "T",
            "--messages",
            "10",
            "--message-size",
            "4KiB",
            "--batch",
            "50",
            "--threads",
            "2",
            "--in-flight",
            "4",
            "--acks",
            "-1",
            "--compression",
            "zstd",
            "--duration",
            "5s",
            "--rate",
            "100",
        ]);
        let Command::Produce(a) = cli.command else {
            panic!("produce")
        };
        assert_eq!(a.target.bootstrap, "h:1");
        assert_eq!(a.message_size, ByteSize(4096));
        assert_eq!((a.batch, a.threads, a.in_flight, a.acks), (50, 2, 4, -1));
        assert!(matches!(a.compression, Codec::Zstd));
        assert_eq!(a.duration, Duration::from_secs(5));
        assert_eq!(a.rate, Some(100.0));
        assert_eq!(a.keys, None, "keyless by default");
        assert!(a.target.topic_configs.is_empty());
    }

    #[test]
    fn keyed_produce_to_a_topic_created_with_configs() {
        let cli = parse(&[
            "produce",
            "--topic",
            "C",
            "--keys",
            "10000",
            "--partitions",
            "1",
            "--topic-config",
            "cleanup.policy=compact",
            "--topic-config",
            "min.cleanable.dirty.ratio=0.1",
        ]);
        let Command::Produce(a) = cli.command else {
            panic!("produce")
        };
        assert_eq!(a.keys, Some(10_000));
        assert_eq!(a.target.partitions, Some(1));
        assert_eq!(
            a.target.topic_configs,
            [
                ("cleanup.policy".to_string(), "compact".to_string()),
                ("min.cleanable.dirty.ratio".to_string(), "0.1".to_string()),
            ]
        );
        for bad in [
            &["produce", "--keys", "0"][..],
            &["produce", "--topic-config", "cleanup.policy=compact"],
            &[
                "produce",
                "--partitions",
                "1",
                "--topic-config",
                "no-equals",
            ],
            &["produce", "--partitions", "1", "--topic-config", "=x"],
        ] {
            assert!(
                Cli::try_parse_from(std::iter::once("vdl-perf").chain(bad.iter().copied()))
                    .is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn consume_sweep_mixed_suite_flags() {
        let Command::Consume(c) = parse(&[
            "consume",
            "--fetch-size",
            "32KiB",
            "--from",
            "latest",
            "--messages",
            "5",
        ])
        .command
        else {
            panic!("consume")
        };
        assert_eq!(c.fetch_size, ByteSize(32 << 10));
        assert_eq!(c.from, StartOffset::Latest);
        let Command::Sweep(s) = parse(&["sweep", "--threads", "1..15"]).command else {
            panic!("sweep")
        };
        assert_eq!(s.threads.0.len(), 15);
        let Command::Mixed(m) = parse(&[
            "mixed",
            "--ratio",
            "1:0,0:1,1:1,1:3,3:1,30:1",
            "--read",
            "tail",
        ])
        .command
        else {
            panic!("mixed")
        };
        assert_eq!(m.ratio.len(), 6);
        assert_eq!(m.read, ReadMode::Tail);
        let Command::Suite(s) = parse(&[
            "--json",
            "suite",
            "--fetch-sizes",
            "32KiB,1MiB",
            "--message-sizes",
            "100,4KiB",
        ])
        .command
        else {
            panic!("suite")
        };
        assert_eq!(s.fetch_sizes, vec![ByteSize(32 << 10), ByteSize(1 << 20)]);
        assert_eq!(s.message_sizes, vec![ByteSize(100), ByteSize(4096)]);
        assert!(Cli::try_parse_from(["vdl-perf", "consume", "--fetch-size", "lots"]).is_err());
        assert!(Cli::try_parse_from(["vdl-perf", "sweep", "--threads", "9..1"]).is_err());
    }
}
