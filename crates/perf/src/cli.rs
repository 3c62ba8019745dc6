//! The command line of `vdl-perf`: its subcommands and their flags (clap), parsed into the
//! structs `main.rs` runs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};
use kafka_proto::records::Compression;
use vdl_perf::groups::GroupProtocol;
use vdl_perf::mixed::ReadMode;
use vdl_perf::units::{parse_duration, ByteSize, Ratio, StartOffset, ThreadRange};

/// Benchmark client for Kafka-compatible servers (vdl, Apache Kafka): produce, consume, mixed,
/// thread sweep, the full VDL suite, and the client's own ceiling.
#[derive(Debug, Parser)]
#[command(name = "vdl-perf", version)]
pub(crate) struct Cli {
    /// Print results as JSON on stdout (no progress display).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    /// Jepsen-style safety check: unique values produced with acks=all (optionally idempotent,
    /// or in transactions read at read_committed), tailing consumers (assign mode) and
    /// consumer-group members, a final read; reports lost, duplicate, inconsistent-offset,
    /// non-monotonic, skipped and lost-by-the-group records and the transactional anomalies
    /// (exit status 1 on any), unseen and re-delivered records, availability and latency.
    Verify(VerifyArgs),
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// Bootstrap servers, `host:port[,host:port...]`.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub(crate) bootstrap: String,
    /// Topic (created with --partitions partitions when missing; use a fresh one per run).
    #[arg(long)]
    pub(crate) topic: String,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=1000))]
    pub(crate) partitions: i32,
    /// How long the producers send.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// Concurrent producers (one request in flight each).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) producers: u32,
    /// Concurrent tailing consumers (assign mode: each reads every partition).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub(crate) consumers: u32,
    /// Members of one consumer group (`vdl-perf-verify-<topic>`; group mode: they share the
    /// partitions with the range assignor, commit as they poll, resume from the committed
    /// offsets after a rebalance; they join one after another over the first part of the
    /// run). Runs alongside the assign-mode consumers.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub(crate) group_consumers: u32,
    /// Idempotent producers: a producer id (InitProducerId), sequence numbers per partition,
    /// and the same batch sent again after an unknown outcome (timeout, disconnect,
    /// NOT_LEADER_OR_FOLLOWER), as the Java client does.
    #[arg(long)]
    pub(crate) idempotent: bool,
    /// Most sends in all (and most records kept per consumer and partition): bounds memory.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) max_records: u64,
    /// Per-request timeout (a produce that times out has an unknown outcome).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
    /// Write the history (sends, polls, final read) as JSON lines to this file.
    #[arg(long)]
    pub(crate) history: Option<std::path::PathBuf>,
    /// Transactional producers (each its own transactional.id: InitProducerId through the
    /// transaction coordinator, AddPartitionsToTxn, one Produce per value, EndTxn commit or
    /// abort) and read_committed consumers; checks that committed transactions are never
    /// lost, aborted ones never read, none is torn or read before its commit, and that a
    /// fenced producer's writes never become visible. Not with --group-consumers.
    #[arg(long, conflicts_with_all = ["group_consumers", "idempotent"])]
    pub(crate) transactional: bool,
    /// Values per transaction (transactional runs).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) txn_values: u32,
    /// Partitions each transaction writes to (transactional runs; at most --partitions).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) txn_partitions: u32,
    /// Abort one transaction in this many instead of committing it (0: commit all).
    #[arg(long, default_value_t = 4)]
    pub(crate) abort_one_in: u32,
    /// The producers' transaction.timeout.ms (the coordinator aborts a transaction left open
    /// longer); the final read waits this long and 15 s for every last stable offset to reach
    /// the high watermark.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) transaction_timeout: Duration,
    /// Leave out the fencing check of transactional runs (a second producer with the same
    /// transactional.id fencing the first mid-transaction, over and over).
    #[arg(long)]
    pub(crate) no_fencing: bool,
}

/// Where to connect.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// Bootstrap servers, `host:port[,host:port...]`.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub(crate) bootstrap: String,
    /// Topic.
    #[arg(long, default_value = "vdl-perf")]
    pub(crate) topic: String,
    /// Partition (default: worker i uses partition i mod the partition count).
    #[arg(long)]
    pub(crate) partition: Option<i32>,
    /// Create the topic with this many partitions (CreateTopics, the server's default
    /// replication factor) if it does not exist, and wait until each has a leader; a topic that
    /// exists with another count is an error. Without it the topic is auto-created as the
    /// server's defaults say.
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=100_000))]
    pub(crate) partitions: Option<i32>,
    /// A topic config for the creation with --partitions, `KEY=VALUE` (repeatable), e.g.
    /// `cleanup.policy=compact`; the server validates it. A topic that exists keeps its own.
    #[arg(long = "topic-config", value_name = "KEY=VALUE", value_parser = parse_topic_config, requires = "partitions")]
    pub(crate) topic_configs: Vec<(String, String)>,
    /// Per-request timeout.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
    #[command(flatten)]
    pub(crate) security: SecurityArgs,
}

/// How connections are secured and authenticated (Kafka's client settings of the same names).
#[derive(Debug, Args)]
pub(crate) struct SecurityArgs {
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    #[arg(long, default_value = "PLAINTEXT")]
    pub(crate) security_protocol: String,
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_PLAINTEXT, SASL_SSL).
    #[arg(long)]
    pub(crate) sasl_mechanism: Option<String>,
    /// SASL user name.
    #[arg(long)]
    pub(crate) sasl_username: Option<String>,
    /// SASL password.
    #[arg(long)]
    pub(crate) sasl_password: Option<String>,
    /// CA certificates (PEM) the servers' certificates must chain to (SSL, SASL_SSL).
    #[arg(long)]
    pub(crate) tls_ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM), for listeners that ask for one.
    #[arg(long)]
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long)]
    pub(crate) tls_key: Option<std::path::PathBuf>,
}

impl SecurityArgs {
    pub(crate) fn client_security(&self) -> Result<vdl_perf::client::security::ClientSecurity> {
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
pub(crate) enum Codec {
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
pub(crate) struct ProduceArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// Records to produce in total.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) messages: u64,
    /// Bytes of each record's value.
    #[arg(long, default_value = "1024")]
    pub(crate) message_size: ByteSize,
    /// Records per Produce request (one batch).
    #[arg(long, default_value_t = 1)]
    pub(crate) batch: usize,
    /// Independent connections/workers.
    #[arg(long, default_value_t = 1)]
    pub(crate) threads: usize,
    /// Requests in flight per connection (1 = synchronous).
    #[arg(long, default_value_t = 1)]
    pub(crate) in_flight: usize,
    /// acks: -1 (all in-sync replicas), 1 (leader), 0 (none).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub(crate) acks: i16,
    /// Batch compression.
    #[arg(long, value_enum, default_value = "none")]
    pub(crate) compression: Codec,
    /// Stop after this long even if not all records were produced.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// Fixed total request rate (requests/s); latency is measured from the scheduled send time.
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Keyed records over N keys: a worker's record i gets the key `k<i mod N>`, zero-padded
    /// to the width of N-1 (`k0000`..`k9999` for 10000), as a compacted topic needs; default
    /// no key.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) keys: Option<u64>,
    /// Also write a report folder here.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ConsumeArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// Max bytes per partition per Fetch (VDL's fetch.message.max.bytes).
    #[arg(long, default_value = "1MiB")]
    pub(crate) fetch_size: ByteSize,
    /// Where to start: earliest, latest or an offset.
    #[arg(long, default_value = "earliest")]
    pub(crate) from: StartOffset,
    /// Records each consumer reads (default: up to the end of the log at the start).
    #[arg(long)]
    pub(crate) messages: Option<u64>,
    /// Independent consumers (each reads the whole range on its own connection).
    #[arg(long, default_value_t = 1)]
    pub(crate) threads: usize,
    /// max_wait_ms of each Fetch.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    pub(crate) max_wait: Duration,
    /// Stop after this long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// Check each batch's CRC-32C.
    #[arg(long)]
    pub(crate) verify_crc: bool,
    /// Also write a report folder here.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct MixedArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// Bytes of each record's value.
    #[arg(long, default_value = "1024")]
    pub(crate) message_size: ByteSize,
    /// Records per Produce request.
    #[arg(long, default_value_t = 25)]
    pub(crate) batch: usize,
    /// Records to produce in total (concurrent mode).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) messages: u64,
    /// Producer connections (concurrent mode).
    #[arg(long, default_value_t = 1)]
    pub(crate) producers: usize,
    /// Consumer connections (concurrent mode), each reading everything produced.
    #[arg(long, default_value_t = 1)]
    pub(crate) consumers: usize,
    /// Produce requests in flight per producer (concurrent mode).
    #[arg(long, default_value_t = 1)]
    pub(crate) in_flight: usize,
    /// Max bytes per partition per Fetch.
    #[arg(long, default_value = "32KiB")]
    pub(crate) fetch_size: ByteSize,
    /// Length of the run (per ratio with --ratio).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// Read:write mixes instead of the concurrent run, e.g. `1:0,0:1,1:1,1:3,3:1,30:1`.
    #[arg(long, value_delimiter = ',')]
    pub(crate) ratio: Vec<Ratio>,
    /// Where reads of a mix fetch: catchup (random earlier offset) or tail (newest batch).
    #[arg(long, default_value = "catchup")]
    pub(crate) read: ReadMode,
    /// Workers of a mix.
    #[arg(long, default_value_t = 4)]
    pub(crate) threads: usize,
    /// Records written before a mix so that catch-up reads have data.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) preload: u64,
    /// Also write a report folder here.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// Thread counts: `1..15`, `1..15/2`, `1,2,4,8`.
    #[arg(long, default_value = "1..15")]
    pub(crate) threads: ThreadRange,
    /// Records per request.
    #[arg(long, default_value_t = 5)]
    pub(crate) batch: usize,
    /// Bytes of each record's value.
    #[arg(long, default_value = "200")]
    pub(crate) message_size: ByteSize,
    /// Records each thread produces (at most; see --duration).
    #[arg(long, default_value_t = 500_000)]
    pub(crate) messages_per_thread: u64,
    /// Length of each step at most.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// Also write a report folder here.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct SuiteArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// Report folder.
    #[arg(long, default_value = "bench-reports/latest")]
    pub(crate) out: PathBuf,
    /// Name of the run in the report (e.g. vdl, kafka-default, kafka-fsync).
    #[arg(long, default_value = "run")]
    pub(crate) label: String,
    /// Length of each cell at most.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub(crate) cell_duration: Duration,
    /// Unmeasured load before the first cell.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub(crate) warmup: Duration,
    /// Produce batch sizes.
    #[arg(long, value_delimiter = ',', default_value = "1,10,25,50")]
    pub(crate) batches: Vec<usize>,
    /// Message sizes.
    #[arg(long, value_delimiter = ',', default_value = "100,500,1024,4096")]
    pub(crate) message_sizes: Vec<ByteSize>,
    /// Fetch sizes.
    #[arg(long, value_delimiter = ',', default_value = "32KiB,64KiB,256KiB,1MiB")]
    pub(crate) fetch_sizes: Vec<ByteSize>,
    /// Records per consume cell at most.
    #[arg(long, default_value_t = 200_000)]
    pub(crate) consume_messages: u64,
    /// Bytes per consume cell at most.
    #[arg(long, default_value = "64MiB")]
    pub(crate) consume_max_bytes: ByteSize,
    /// Read/write mixes to add, e.g. `1:0,0:1,1:1,1:3,3:1,30:1` (default: none).
    #[arg(long, value_delimiter = ',')]
    pub(crate) ratios: Vec<Ratio>,
    /// Where reads of the mixes fetch.
    #[arg(long, default_value = "catchup")]
    pub(crate) read: ReadMode,
    /// Add a thread sweep over these counts (batch 5 x 200 B), e.g. `1..8`.
    #[arg(long)]
    pub(crate) sweep_threads: Option<ThreadRange>,
    /// Measure the client's ceiling (in-process fake server) first and include it.
    #[arg(long)]
    pub(crate) with_ceiling: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    /// results.json files, e.g. vdl's then Kafka's.
    #[arg(required = true)]
    pub(crate) reports: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// A results.json written by vdl-perf.
    #[arg(long)]
    pub(crate) from: PathBuf,
    /// Folder to write.
    #[arg(long)]
    pub(crate) out: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct CeilingArgs {
    /// Length of each workload.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// Also write a report folder here.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct FloorArgs {
    /// Directory for the fsync test file (put it on the disk the servers' data is on).
    #[arg(long, default_value = ".")]
    pub(crate) dir: PathBuf,
    /// Bytes per append and per round-trip request.
    #[arg(long, default_value = "4096")]
    pub(crate) message_size: ByteSize,
    /// Measurements of each kind.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) iterations: u32,
    /// Replicas sharing this disk (a local cluster's nodes): also measure this many appends +
    /// fdatasyncs started together and the time until a majority finished (1: skip).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub(crate) replicas: u32,
}

#[derive(Debug, Args)]
pub(crate) struct GroupsArgs {
    /// Bootstrap server, `host:port` (the coordinator is found through it).
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub(crate) bootstrap: String,
    /// Consumer groups.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) groups: u32,
    /// Members per group.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(crate) members: u32,
    /// Connections to the coordinator.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) connections: u32,
    /// Groups each connection joins at once (keep members x this below the server's in-flight
    /// limit per connection, 64 by default).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(crate) join_concurrency: u32,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) in_flight: u32,
    /// Heartbeat interval of each member (Java's `heartbeat.interval.ms` default).
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub(crate) heartbeat_interval: Duration,
    /// Heartbeats before measuring starts.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) warmup: Duration,
    /// Measured window.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// The members' `session.timeout.ms` (Java's default).
    #[arg(long, default_value_t = 45_000)]
    pub(crate) session_timeout_ms: i32,
    /// The members' `max.poll.interval.ms` (Java's default).
    #[arg(long, default_value_t = 300_000)]
    pub(crate) rebalance_timeout_ms: i32,
    /// Per-request timeout.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
    /// The server's PID: its CPU time over the measured window is reported (Linux /proc).
    #[arg(long)]
    pub(crate) server_pid: Option<u32>,
    /// Group ids are `<prefix>-<n>` (use another prefix per protocol: a group of one protocol
    /// refuses members of the other).
    #[arg(long, default_value = "vdl-perf-group")]
    pub(crate) group_prefix: String,
    /// The group protocol: classic (JoinGroup, SyncGroup, Heartbeat) or consumer (KIP-848's
    /// ConsumerGroupHeartbeat v1; heartbeats at the interval the coordinator answers, not
    /// --heartbeat-interval; the session timeout is the server's).
    #[arg(long, default_value = "classic")]
    pub(crate) protocol: GroupProtocol,
    /// The topic the members subscribe to (consumer protocol: created when missing).
    #[arg(long, default_value = "vdl-perf-groups")]
    pub(crate) topic: String,
    /// Consumer protocol: the topic's partitions (default: --members, one per member).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) partitions: Option<u32>,
    /// Consumer protocol: the server-side assignor the members name (`uniform`, `range`;
    /// default: none, the server's default).
    #[arg(long)]
    pub(crate) assignor: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct FakeServerArgs {
    /// Address to listen on (127.0.0.1 only is sensible).
    #[arg(long, default_value = "127.0.0.1:9099")]
    pub(crate) listen: String,
    /// Partitions per topic.
    #[arg(long, default_value_t = 1)]
    pub(crate) partitions: i32,
    /// Stop after this long.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub(crate) duration: Duration,
}

/// A `--topic-config` value: `KEY=VALUE` with a non-empty key.
pub(crate) fn parse_topic_config(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}
