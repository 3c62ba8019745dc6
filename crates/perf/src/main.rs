//! `vdl-perf`: benchmark client for Kafka-compatible servers. See the crate README.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use kafka_proto::records::Compression;
use vdl_perf::consume::{self, ConsumeConfig};
use vdl_perf::env::Env;
use vdl_perf::mixed::{self, RatioConfig, ReadMode};
use vdl_perf::produce::{self, ProduceConfig};
use vdl_perf::progress::ProgressMode;
use vdl_perf::report::{self, text, ReportMeta};
use vdl_perf::stats::RunResult;
use vdl_perf::suite::{self, SuiteConfig};
use vdl_perf::units::{parse_duration, ByteSize, Ratio, StartOffset, ThreadRange};

/// Benchmark client for Kafka-compatible servers (vdl, Apache Kafka): produce, consume, mixed,
/// thread sweep, the full VDL suite, and the client's own ceiling.
#[derive(Debug, Parser)]
#[command(name = "vdl-perf", version)]
struct Cli {
    /// Print results as JSON on stdout (no progress display).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Produce records and measure throughput and latency.
    Produce(ProduceArgs),
    /// Consume records, checking offsets are dense and in order.
    Consume(ConsumeArgs),
    /// Produce and consume at the same time (VDL tables 8-11), or read/write mixes (--ratio).
    Mixed(MixedArgs),
    /// Synchronous produce with 1, 2, ... N threads: throughput and latency buckets.
    Sweep(SweepArgs),
    /// The whole VDL matrix; writes a report folder (Markdown, CSV, JSON, SVG).
    Suite(SuiteArgs),
    /// Rewrite a report folder from its results.json (e.g. after changing the report format).
    Report(ReportArgs),
    /// Side-by-side Markdown table of several reports' results.json (first one sets the rows).
    Compare(CompareArgs),
    /// Measure the client's ceiling against an in-process server that does no work.
    Ceiling(CeilingArgs),
    /// Measure the physical floor of a replicated fsynced produce here: append + fdatasync
    /// and loopback round-trip latency (floor = fsync p50 + 2 x round trip p50), and the
    /// same with `--replicas` syncs sharing the disk (a local cluster's floor).
    Floor(FloorArgs),
    /// Run the trivial in-memory server on its own (for manual ceiling runs).
    FakeServer(FakeServerArgs),
    /// Load a group coordinator: G groups x M members join, then heartbeat; heartbeat latency
    /// and the server's CPU.
    Groups(GroupsArgs),
    /// Jepsen-style safety check: unique values produced with acks=all (optionally idempotent),
    /// tailing consumers (assign mode) and consumer-group members, a final read; reports lost,
    /// duplicate, inconsistent-offset, non-monotonic, skipped and lost-by-the-group records
    /// (exit status 1 on any), unseen and re-delivered records, availability and latency.
    Verify(VerifyArgs),
}

#[derive(Debug, Args)]
struct VerifyArgs {
    /// Bootstrap servers, `host:port[,host:port...]`.
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// Topic (created with --partitions partitions when missing; use a fresh one per run).
    #[arg(long)]
    topic: String,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=1000))]
    partitions: i32,
    /// How long the producers send.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Concurrent producers (one request in flight each).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    producers: u32,
    /// Concurrent tailing consumers (assign mode: each reads every partition).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=64))]
    consumers: u32,
    /// Members of one consumer group (`vdl-perf-verify-<topic>`; group mode: they share the
    /// partitions with the range assignor, commit as they poll, resume from the committed
    /// offsets after a rebalance; they join one after another over the first part of the
    /// run). Runs alongside the assign-mode consumers.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
    group_consumers: u32,
    /// Idempotent producers: a producer id (InitProducerId), sequence numbers per partition,
    /// and the same batch sent again after an unknown outcome (timeout, disconnect,
    /// NOT_LEADER_OR_FOLLOWER), as the Java client does.
    #[arg(long)]
    idempotent: bool,
    /// Most sends in all (and most records kept per consumer and partition): bounds memory.
    #[arg(long, default_value_t = 1_000_000)]
    max_records: u64,
    /// Per-request timeout (a produce that times out has an unknown outcome).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// Write the history (sends, polls, final read) as JSON lines to this file.
    #[arg(long)]
    history: Option<std::path::PathBuf>,
}

/// Where to connect.
#[derive(Debug, Args)]
struct Target {
    /// Bootstrap servers, `host:port[,host:port...]`.
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// Topic.
    #[arg(long, default_value = "vdl-perf")]
    topic: String,
    /// Partition (default: worker i uses partition i mod the partition count).
    #[arg(long)]
    partition: Option<i32>,
    /// Create the topic with this many partitions (CreateTopics, the server's default
    /// replication factor) if it does not exist, and wait until each has a leader; a topic that
    /// exists with another count is an error. Without it the topic is auto-created as the
    /// server's defaults say.
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=100_000))]
    partitions: Option<i32>,
    /// A topic config for the creation with --partitions, `KEY=VALUE` (repeatable), e.g.
    /// `cleanup.policy=compact`; the server validates it. A topic that exists keeps its own.
    #[arg(long = "topic-config", value_name = "KEY=VALUE", value_parser = parse_topic_config, requires = "partitions")]
    topic_configs: Vec<(String, String)>,
    /// Per-request timeout.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    security: SecurityArgs,
}

/// How connections are secured and authenticated (Kafka's client settings of the same names).
#[derive(Debug, Args)]
struct SecurityArgs {
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    #[arg(long, default_value = "PLAINTEXT")]
    security_protocol: String,
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_PLAINTEXT, SASL_SSL).
    #[arg(long)]
    sasl_mechanism: Option<String>,
    /// SASL user name.
    #[arg(long)]
    sasl_username: Option<String>,
    /// SASL password.
    #[arg(long)]
    sasl_password: Option<String>,
    /// CA certificates (PEM) the servers' certificates must chain to (SSL, SASL_SSL).
    #[arg(long)]
    tls_ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM), for listeners that ask for one.
    #[arg(long)]
    tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long)]
    tls_key: Option<std::path::PathBuf>,
}

impl SecurityArgs {
    fn client_security(&self) -> Result<vdl_perf::client::security::ClientSecurity> {
        let opts = vdl_perf::client::security::SecurityOptions {
            protocol: self.security_protocol.clone(),
            sasl_mechanism: self.sasl_mechanism.clone(),
            sasl_username: self.sasl_username.clone(),
            sasl_password: self.sasl_password.clone(),
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
        };
        vdl_perf::client::security::ClientSecurity::from_options(&opts)
            .map_err(|e| anyhow::anyhow!(e))
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl From<Codec> for Compression {
    fn from(c: Codec) -> Compression {
        match c {
            Codec::None => Compression::None,
            Codec::Gzip => Compression::Gzip,
            Codec::Snappy => Compression::Snappy,
            Codec::Lz4 => Compression::Lz4,
            Codec::Zstd => Compression::Zstd,
        }
    }
}

#[derive(Debug, Args)]
struct ProduceArgs {
    #[command(flatten)]
    target: Target,
    /// Records to produce in total.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Bytes of each record's value.
    #[arg(long, default_value = "1024")]
    message_size: ByteSize,
    /// Records per Produce request (one batch).
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Independent connections/workers.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Requests in flight per connection (1 = synchronous).
    #[arg(long, default_value_t = 1)]
    in_flight: usize,
    /// acks: -1 (all in-sync replicas), 1 (leader), 0 (none).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    acks: i16,
    /// Batch compression.
    #[arg(long, value_enum, default_value = "none")]
    compression: Codec,
    /// Stop after this long even if not all records were produced.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Fixed total request rate (requests/s); latency is measured from the scheduled send time.
    #[arg(long)]
    rate: Option<f64>,
    /// Keyed records over N keys: a worker's record i gets the key `k<i mod N>`, zero-padded
    /// to the width of N-1 (`k0000`..`k9999` for 10000), as a compacted topic needs; default
    /// no key.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    keys: Option<u64>,
    /// Also write a report folder here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ConsumeArgs {
    #[command(flatten)]
    target: Target,
    /// Max bytes per partition per Fetch (VDL's fetch.message.max.bytes).
    #[arg(long, default_value = "1MiB")]
    fetch_size: ByteSize,
    /// Where to start: earliest, latest or an offset.
    #[arg(long, default_value = "earliest")]
    from: StartOffset,
    /// Records each consumer reads (default: up to the end of the log at the start).
    #[arg(long)]
    messages: Option<u64>,
    /// Independent consumers (each reads the whole range on its own connection).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// max_wait_ms of each Fetch.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    max_wait: Duration,
    /// Stop after this long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Check each batch's CRC-32C.
    #[arg(long)]
    verify_crc: bool,
    /// Also write a report folder here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct MixedArgs {
    #[command(flatten)]
    target: Target,
    /// Bytes of each record's value.
    #[arg(long, default_value = "1024")]
    message_size: ByteSize,
    /// Records per Produce request.
    #[arg(long, default_value_t = 25)]
    batch: usize,
    /// Records to produce in total (concurrent mode).
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Producer connections (concurrent mode).
    #[arg(long, default_value_t = 1)]
    producers: usize,
    /// Consumer connections (concurrent mode), each reading everything produced.
    #[arg(long, default_value_t = 1)]
    consumers: usize,
    /// Produce requests in flight per producer (concurrent mode).
    #[arg(long, default_value_t = 1)]
    in_flight: usize,
    /// Max bytes per partition per Fetch.
    #[arg(long, default_value = "32KiB")]
    fetch_size: ByteSize,
    /// Length of the run (per ratio with --ratio).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Read:write mixes instead of the concurrent run, e.g. `1:0,0:1,1:1,1:3,3:1,30:1`.
    #[arg(long, value_delimiter = ',')]
    ratio: Vec<Ratio>,
    /// Where reads of a mix fetch: catchup (random earlier offset) or tail (newest batch).
    #[arg(long, default_value = "catchup")]
    read: ReadMode,
    /// Workers of a mix.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Records written before a mix so that catch-up reads have data.
    #[arg(long, default_value_t = 10_000)]
    preload: u64,
    /// Also write a report folder here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct SweepArgs {
    #[command(flatten)]
    target: Target,
    /// Thread counts: `1..15`, `1..15/2`, `1,2,4,8`.
    #[arg(long, default_value = "1..15")]
    threads: ThreadRange,
    /// Records per request.
    #[arg(long, default_value_t = 5)]
    batch: usize,
    /// Bytes of each record's value.
    #[arg(long, default_value = "200")]
    message_size: ByteSize,
    /// Records each thread produces (at most; see --duration).
    #[arg(long, default_value_t = 500_000)]
    messages_per_thread: u64,
    /// Length of each step at most.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    duration: Duration,
    /// Also write a report folder here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct SuiteArgs {
    #[command(flatten)]
    target: Target,
    /// Report folder.
    #[arg(long, default_value = "bench-reports/latest")]
    out: PathBuf,
    /// Name of the run in the report (e.g. vdl, kafka-default, kafka-fsync).
    #[arg(long, default_value = "run")]
    label: String,
    /// Length of each cell at most.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    cell_duration: Duration,
    /// Unmeasured load before the first cell.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    warmup: Duration,
    /// Produce batch sizes.
    #[arg(long, value_delimiter = ',', default_value = "1,10,25,50")]
    batches: Vec<usize>,
    /// Message sizes.
    #[arg(long, value_delimiter = ',', default_value = "100,500,1024,4096")]
    message_sizes: Vec<ByteSize>,
    /// Fetch sizes.
    #[arg(long, value_delimiter = ',', default_value = "32KiB,64KiB,256KiB,1MiB")]
    fetch_sizes: Vec<ByteSize>,
    /// Records per consume cell at most.
    #[arg(long, default_value_t = 200_000)]
    consume_messages: u64,
    /// Bytes per consume cell at most.
    #[arg(long, default_value = "64MiB")]
    consume_max_bytes: ByteSize,
    /// Read/write mixes to add, e.g. `1:0,0:1,1:1,1:3,3:1,30:1` (default: none).
    #[arg(long, value_delimiter = ',')]
    ratios: Vec<Ratio>,
    /// Where reads of the mixes fetch.
    #[arg(long, default_value = "catchup")]
    read: ReadMode,
    /// Add a thread sweep over these counts (batch 5 x 200 B), e.g. `1..8`.
    #[arg(long)]
    sweep_threads: Option<ThreadRange>,
    /// Measure the client's ceiling (in-process fake server) first and include it.
    #[arg(long)]
    with_ceiling: bool,
}

#[derive(Debug, Args)]
struct CompareArgs {
    /// results.json files, e.g. vdl's then Kafka's.
    #[arg(required = true)]
    reports: Vec<PathBuf>,
}

#[derive(Debug, Args)]
struct ReportArgs {
    /// A results.json written by vdl-perf.
    #[arg(long)]
    from: PathBuf,
    /// Folder to write.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct CeilingArgs {
    /// Length of each workload.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    duration: Duration,
    /// Also write a report folder here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct FloorArgs {
    /// Directory for the fsync test file (put it on the disk the servers' data is on).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Bytes per append and per round-trip request.
    #[arg(long, default_value = "4096")]
    message_size: ByteSize,
    /// Measurements of each kind.
    #[arg(long, default_value_t = 10_000)]
    iterations: u32,
    /// Replicas sharing this disk (a local cluster's nodes): also measure this many appends +
    /// fdatasyncs started together and the time until a majority finished (1: skip).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    replicas: u32,
}

#[derive(Debug, Args)]
struct GroupsArgs {
    /// Bootstrap server, `host:port` (the coordinator is found through it).
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// Consumer groups.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    groups: u32,
    /// Members per group.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    members: u32,
    /// Connections to the coordinator.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    connections: u32,
    /// Groups each connection joins at once (keep members x this below the server's in-flight
    /// limit per connection, 64 by default).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    join_concurrency: u32,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    in_flight: u32,
    /// Heartbeat interval of each member (Java's `heartbeat.interval.ms` default).
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    heartbeat_interval: Duration,
    /// Heartbeats before measuring starts.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    warmup: Duration,
    /// Measured window.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// The members' `session.timeout.ms` (Java's default).
    #[arg(long, default_value_t = 45_000)]
    session_timeout_ms: i32,
    /// The members' `max.poll.interval.ms` (Java's default).
    #[arg(long, default_value_t = 300_000)]
    rebalance_timeout_ms: i32,
    /// Per-request timeout.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    timeout: Duration,
    /// The server's PID: its CPU time over the measured window is reported (Linux /proc).
    #[arg(long)]
    server_pid: Option<u32>,
    /// Group ids are `<prefix>-<n>`.
    #[arg(long, default_value = "vdl-perf-group")]
    group_prefix: String,
}

#[derive(Debug, Args)]
struct FakeServerArgs {
    /// Address to listen on (127.0.0.1 only is sensible).
    #[arg(long, default_value = "127.0.0.1:9099")]
    listen: String,
    /// Partitions per topic.
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// Stop after this long.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    duration: Duration,
}

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

/// A `--topic-config` value: `KEY=VALUE` with a non-empty key.
fn parse_topic_config(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
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
                group_prefix: a.group_prefix,
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
