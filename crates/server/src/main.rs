//! `vdl`: the server binary.
//!
//! `vdl start` runs a single node with data in `./vdl-data` and Kafka on 127.0.0.1:9092;
//! `vdl start --config FILE` runs a cluster member described by a TOML file
//! (see `deploy/vdl.example.toml`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use vdl_server::config::NodeConfig;
use vdl_server::shutdown::ShutdownPhase;
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
    /// Print a `[[security.scram_users]]` entry (salted and hashed, no password) to add to
    /// every node's configuration: bootstraps the first user, as Kafka's
    /// `kafka-storage format --add-scram` does.
    ScramCredential {
        /// The user name.
        #[arg(long)]
        user: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
        /// A file whose first line is the password.
        #[arg(
            long,
            conflicts_with = "password",
            required_unless_present = "password"
        )]
        password_file: Option<PathBuf>,
        /// The password (visible to other users of the host in the process list; prefer
        /// --password-file).
        #[arg(long)]
        password: Option<String>,
        /// PBKDF2 iterations (4096 to 16384).
        #[arg(long, default_value_t = 4096)]
        iterations: u32,
    },
    /// Tests only: after a node that ran with `storage.fault_injection_file` was killed (and
    /// before it starts again), drop every write it made after the last fsync of each file, as
    /// a power cut would (the control file's journal of writes and syncs says which); prints
    /// how many writes were dropped. Used by the client tests' power-cut nemesis.
    PowerCut {
        /// The node's `storage.fault_injection_file`.
        #[arg(long)]
        control: PathBuf,
        /// Keep the first half of each file's first lost write (a torn write).
        #[arg(long)]
        torn: bool,
    },
    /// Certificates for tests and local clusters.
    Certs {
        #[command(subcommand)]
        command: CertsCommand,
    },
}

#[derive(Subcommand)]
enum CertsCommand {
    /// Write a client CA (`ca.pem`) with Kafka listener certificates (`node<i>.pem`) and client
    /// certificates (`client-<name>.pem`), and a separate peer CA (`peer-ca.pem`) with node
    /// peer certificates for `[peer_tls]` (`peer-node<i>.pem`, naming node i as
    /// `vdl-node://<i>`).
    Generate {
        /// Output directory (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Nodes to make certificates for (ids 1..=nodes): `node<i>` and `peer-node<i>`.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Host names and IP addresses the node certificates are valid for (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "localhost,127.0.0.1")]
        hosts: Vec<String>,
        /// Client certificates to make (comma-separated names; subject CN=<name>,OU=clients,O=vdl).
        #[arg(long, value_delimiter = ',')]
        clients: Vec<String>,
        /// Client certificates to make already expired (to test that they are refused).
        #[arg(long, value_delimiter = ',')]
        expired_clients: Vec<String>,
        /// Days the certificates are valid.
        #[arg(long, default_value_t = 365)]
        valid_days: u32,
    },
    /// Write `<dir>/peer-crl.pem`: a CRL of the peer CA made by `certs generate` in `<dir>`,
    /// revoking the given peer certificates (set it as `[peer_tls] crl` on every node); with
    /// `--client-ca`, `<dir>/crl.pem` of the client CA (a Kafka listener's `tls_crl`).
    Revoke {
        /// The directory of `certs generate` (peer-ca.key or ca.key is read from it).
        #[arg(long)]
        dir: PathBuf,
        /// Revoke client certificates of the client CA instead of peer certificates.
        #[arg(long)]
        client_ca: bool,
        /// Days until the CRL's next update.
        #[arg(long, default_value_t = 30)]
        valid_days: u32,
        /// Peer certificates (PEM files) to revoke; none: an empty CRL.
        certs: Vec<PathBuf>,
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
        Command::ScramCredential {
            user,
            mechanism,
            password_file,
            password,
            iterations,
        } => {
            use vdl_server::security::scram::{self, ScramCredential, ScramMechanism};
            let mechanism = ScramMechanism::from_sasl_name(&mechanism)
                .with_context(|| format!("`{mechanism}` is not SCRAM-SHA-256 or SCRAM-SHA-512"))?;
            anyhow::ensure!(
                (scram::MIN_ITERATIONS..=scram::MAX_ITERATIONS).contains(&iterations),
                "--iterations must be in {}..={}",
                scram::MIN_ITERATIONS,
                scram::MAX_ITERATIONS
            );
            anyhow::ensure!(!user.is_empty(), "--user must not be empty");
            let password = match (password, password_file) {
                (Some(p), _) => p,
                (None, Some(f)) => {
                    let text = std::fs::read_to_string(&f)
                        .with_context(|| format!("reading {}", f.display()))?;
                    text.lines().next().unwrap_or_default().to_string()
                }
                (None, None) => anyhow::bail!("give --password-file or --password"),
            };
            anyhow::ensure!(!password.is_empty(), "the password is empty");
            let cred = ScramCredential::generate(mechanism, &password, iterations);
            print!(
                "{}",
                vdl_server::config::security::scram_user_toml(&user, &cred)
            );
            Ok(())
        }
        Command::Certs {
            command:
                CertsCommand::Generate {
                    out,
                    nodes,
                    hosts,
                    clients,
                    expired_clients,
                    valid_days,
                },
        } => {
            let spec = vdl_server::security::certs::CertSpec {
                nodes,
                hosts,
                clients,
                expired_clients,
                valid_days,
            };
            for path in vdl_server::security::certs::generate(&out, &spec)? {
                println!("{}", path.display());
            }
            Ok(())
        }
        Command::Certs {
            command:
                CertsCommand::Revoke {
                    dir,
                    client_ca,
                    valid_days,
                    certs,
                },
        } => {
            use vdl_server::security::certs::{revoke_certificates, CaKind};
            let ca = if client_ca {
                CaKind::Client
            } else {
                CaKind::Peer
            };
            let path = revoke_certificates(&dir, ca, &certs, valid_days)?;
            println!("{}", path.display());
            Ok(())
        }
        Command::PowerCut { control, torn } => {
            let dropped = logstore::simulate_power_cut(&control, torn)
                .with_context(|| format!("power cut of {}", control.display()))?;
            println!("{dropped}");
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
    match vdl_server::runtime::fd_budget::raise_nofile_limit() {
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
    let (phase, phase_rx) = tokio::sync::watch::channel(ShutdownPhase::Running);
    let kafka = node
        .serve_kafka_until(phase_rx)
        .await
        .context("starting the Kafka listener")?;
    let admin = match config.admin_listen {
        Some(addr) => {
            if let Some(files) = &config.admin.tls {
                vdl_server::security::tls::ReloadingServerTls::new(files.clone())
                    .context("the admin listener's TLS files ([admin])")?;
            }
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the admin listener on {addr}"))?;
            let peer = config
                .member(config.id)
                .map_or(config.peer_listen, |m| m.peer_addr);
            let announced = config.admin.announced_address(addr, peer);
            tracing::info!(
                %addr,
                %announced,
                https = config.admin.tls.is_some(),
                require_auth = config.admin.require_auth,
                "admin API listening"
            );
            if config.admin.require_auth
                && config.admin.tls.is_none()
                && !config.admin.allow_basic_without_tls
            {
                tracing::warn!("the admin API requires authentication but has no TLS and refuses Basic without it: every call will be refused (set [admin] tls_cert/tls_key/tls_ca)");
            }
            // Other nodes forward operators' requests here (see vdl_server::admin::operator).
            vdl_server::admin::operator::announce_admin_address(
                &node,
                announced,
                ADMIN_ANNOUNCE_REFRESH,
            );
            Some(tokio::spawn(vdl_server::admin::serve(
                listener,
                node.clone(),
            )))
        }
        None => None,
    };
    // SIGHUP re-reads the TLS certificates of the Kafka listeners (changed files are also
    // picked up by polling).
    let reload = {
        let node = node.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut hup) = signal(SignalKind::hangup()) else {
                return;
            };
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading TLS certificates");
                node.reload_tls(true);
            }
        })
    };
    wait_for_shutdown_signal().await;
    reload.abort();
    tracing::info!(
        timeout_ms = config.shutdown_timeout.as_millis() as u64,
        "shutting down: handing leadership over, then answering the requests in flight"
    );
    let report = graceful_shutdown(&node, &phase, kafka, wait_for_shutdown_signal()).await;
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

/// How often a node announces its admin address again (see `admin::operator::announce_admin_address`).
const ADMIN_ANNOUNCE_REFRESH: Duration = Duration::from_secs(300);

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

/// What a graceful shutdown did, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ShutdownReport {
    /// Groups led here when it started.
    led: usize,
    /// Groups still led here after the hand-off (0: all handed over).
    still_led: usize,
    /// Whether every Kafka connection closed within the bound.
    connections_closed: bool,
    /// Time the whole shutdown took.
    elapsed: Duration,
}

/// Runs the steps of a graceful shutdown in the order [`vdl_server::shutdown`] describes
/// (this file, the composition root, owns that order). `kafka` is the listener task started
/// with [`Node::serve_kafka_until`] and `phase` the sender of its signal; `interrupted`
/// resolves when the operator insists (a second signal).
async fn graceful_shutdown(
    node: &Arc<Node>,
    phase: &tokio::sync::watch::Sender<ShutdownPhase>,
    kafka: tokio::task::JoinHandle<()>,
    interrupted: impl std::future::Future<Output = ()>,
) -> ShutdownReport {
    let started = Instant::now();
    let bound = node.config().shutdown_timeout;
    let deadline = started + bound;
    let _ = phase.send(ShutdownPhase::StopAccepting);
    let steps = async {
        let handed = node.hand_off_leadership(bound / 2).await;
        if handed.still_led > 0 {
            tracing::warn!(
                led = handed.led,
                still_led = handed.still_led,
                "some groups still led here after the hand-off bound; they will elect anew"
            );
        } else {
            tracing::info!(led = handed.led, "leadership handed over");
        }
        let _ = phase.send(ShutdownPhase::Drain);
        let left = deadline.saturating_duration_since(Instant::now());
        let closed = tokio::time::timeout(left, kafka).await.is_ok();
        (handed, closed)
    };
    let (led, still_led, connections_closed) = tokio::select! {
        (handed, closed) = steps => (handed.led, handed.still_led, closed),
        _ = interrupted => {
            tracing::warn!("second signal: stopping now");
            (0, 0, false)
        }
    };
    node.shutdown();
    ShutdownReport {
        led,
        still_led,
        connections_closed,
        elapsed: started.elapsed(),
    }
}
