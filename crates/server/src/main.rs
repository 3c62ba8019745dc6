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
    #[command(subcommand)]
    command: Command,
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    // Fail-stop: a panic anywhere (a failed fsync, a Raft invariant) ends the process, so a node
    // never keeps serving with a group thread gone or with state it can no longer trust. A
    // restarted node recovers from its disk.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::exit(70);
    }));
    let cli = Cli::parse();
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
    if let Some(control) = &config.storage.fault_injection_file {
        let fs = logstore::FaultInjectingFs::new(control)
            .with_context(|| format!("fault injection journal next to {}", control.display()))?;
        logstore::install_file_system(std::sync::Arc::new(fs));
        tracing::warn!(control = %control.display(), "disk fault injection is on (tests only)");
    }
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
    let kafka = node
        .serve_kafka()
        .await
        .context("starting the Kafka listener")?;
    let admin = match config.admin_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the admin listener on {addr}"))?;
            tracing::info!(%addr, "admin API listening");
            Some(tokio::spawn(vdl_server::admin::serve(
                listener,
                node.clone(),
            )))
        }
        None => None,
    };
    wait_for_shutdown_signal().await;
    kafka.abort();
    if let Some(task) = admin {
        task.abort();
    }
    tracing::info!("shutting down");
    node.shutdown();
    Ok(())
}

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
