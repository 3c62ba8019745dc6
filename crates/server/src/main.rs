//! `vdl`: the server binary.
//!
//! `vdl start` runs a single node with data in `./vdl-data` and Kafka on 127.0.0.1:9092;
//! `vdl start --config FILE` runs a cluster member described by a TOML file
//! (see `deploy/vdl.example.toml`).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use vdl_server::config::NodeConfig;
use vdl_server::Node;

#[derive(Parser)]
#[command(
    name = "vdl",
    version,
    about = "Replicated log service speaking the Kafka protocol"
)]
struct Cli {
    /// Log line format: `text` (human) or `json` (one JSON object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written (to stderr).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (tracing-subscriber's JSON format).
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Start a node (single node with local data when no config is given).
    Start {
        /// TOML configuration file.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Check a configuration file and print the resolved settings.
    CheckConfig {
        /// TOML configuration file.
        config: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    // Fail-stop: a panic anywhere (a failed fsync, a Raft invariant) ends the process, so a node
    // never keeps serving with a group thread gone or with state it can no longer trust. A
    // restarted node recovers from its disk.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::exit(70);
    }));
    match cli.command {
        Command::CheckConfig { config } => {
            let c = NodeConfig::from_file(&config)?;
            println!("{c:#?}");
            Ok(())
        }
        Command::Start { config } => {
            let config = match config {
                Some(path) => NodeConfig::from_file(&path)?,
                None => NodeConfig::single_node_default(),
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            runtime.block_on(run(config))
        }
    }
}

async fn run(config: NodeConfig) -> anyhow::Result<()> {
    match vdl_server::fd_budget::raise_nofile_limit() {
        Ok(limit) => tracing::info!(open_files = limit, "open file limit"),
        Err(e) => tracing::warn!("cannot raise the open file limit: {e}"),
    }
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data directory {}", config.data_dir.display()))?;
    let node = Node::start(config.clone())
        .await
        .context("starting the node")?;
    tracing::info!(
        node = config.id,
        name = %config.name,
        peer = %config.peer_listen,
        kafka = %config.kafka_listen,
        streams = ?node.stream_names(),
        "vdl node started"
    );
    let (phase, phase_rx) =
        tokio::sync::watch::channel(vdl_server::kafka::listener::ShutdownPhase::Running);
    let kafka = node
        .serve_kafka_until(phase_rx)
        .await
        .context("starting the Kafka listener")?;
    let admin = match config.admin_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the admin listener on {addr}"))?;
            tracing::info!(%addr, "admin API listening");
            // Other nodes forward operators' requests here (see vdl_server::admin_ops).
            node.announce_admin_address(addr.to_string(), ADMIN_ANNOUNCE_REFRESH);
            Some(tokio::spawn(vdl_server::admin::serve(
                listener,
                node.clone(),
            )))
        }
        None => None,
    };
    wait_for_shutdown_signal().await;
    tracing::info!(
        timeout_ms = config.shutdown_timeout.as_millis() as u64,
        "shutting down: handing leadership over, then answering the requests in flight"
    );
    let report =
        vdl_server::shutdown::graceful_shutdown(&node, &phase, kafka, wait_for_shutdown_signal())
            .await;
    if let Some(task) = admin {
        task.abort();
    }
    tracing::info!(
        led = report.led,
        still_led = report.still_led,
        connections_closed = report.connections_closed,
        elapsed_ms = report.elapsed.as_millis() as u64,
        "shut down"
    );
    Ok(())
}

/// How often a node announces its admin address again (see `Node::announce_admin_address`).
const ADMIN_ANNOUNCE_REFRESH: std::time::Duration = std::time::Duration::from_secs(300);

async fn wait_for_shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
