//! `vdlctl`: operate a vdl cluster through any node's admin HTTP API.
//!
//! One module per group of subcommands (`cluster`, `leader`, `segment`, `member`, `rate`);
//! each defines its
//! clap subcommand and runs it against a [`client::Client`]. Exit status: 0 success (and a
//! healthy cluster for `cluster status`), 1 failure or unhealthy cluster, 2 usage error.

mod client;
mod cluster;
mod leader;
mod member;
mod rate;
mod segment;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Operate a vdl cluster (any node answers for the cluster or forwards).
#[derive(Parser)]
#[command(name = "vdlctl", version)]
struct Cli {
    /// Admin address of any node: HOST:PORT (http, or https with --tls-ca), or a URL
    /// `https://HOST:PORT`.
    #[arg(long, global = true, default_value = "127.0.0.1:9292")]
    admin: String,
    /// A SCRAM user to authenticate as (HTTP Basic); the password comes from
    /// --password-file or the environment variable VDLCTL_PASSWORD, never the command line.
    #[arg(long, global = true)]
    user: Option<String>,
    /// A file whose first line is the password of --user.
    #[arg(long, global = true)]
    password_file: Option<std::path::PathBuf>,
    /// The CA (PEM) that signed the nodes' admin certificates; implies https.
    #[arg(long, global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// A client certificate (PEM) to authenticate with (with --tls-key).
    #[arg(long, global = true)]
    tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, global = true)]
    tls_key: Option<std::path::PathBuf>,
    /// Longest an operation may take, in milliseconds (the node waits this long for a leader
    /// transfer, a balance or a deletion; the HTTP call a little longer).
    #[arg(long, global = true, default_value_t = 30_000)]
    timeout_ms: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Cluster-wide views.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Partition leadership.
    #[command(subcommand)]
    Leader(leader::LeaderCommand),
    /// A partition's segment files.
    #[command(subcommand)]
    Segment(segment::SegmentCommand),
    /// List, add or remove cluster members, one at a time.
    #[command(subcommand)]
    Member(member::MemberCommand),
    /// The node-wide flow limits (requests and bytes per second).
    #[command(subcommand)]
    Rate(rate::RateCommand),
}

/// What a subcommand's run tells `main`.
pub enum Outcome {
    /// Done; exit 0.
    Ok,
    /// Done, but the answer is bad news (an unhealthy cluster); exit 1.
    Unhealthy,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let op_timeout = Duration::from_millis(cli.timeout_ms);
    // The HTTP call outlives the node's own wait so that its answer (done or timed out) arrives.
    let credentials = client::Credentials {
        user: cli.user.clone(),
        password_file: cli.password_file.clone(),
        tls_ca: cli.tls_ca.clone(),
        tls_cert: cli.tls_cert.clone(),
        tls_key: cli.tls_key.clone(),
    };
    let endpoint = match client::Endpoint::new(&cli.admin, &credentials) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("vdlctl: {e}");
            return ExitCode::from(2);
        }
    };
    let client = client::Client::new(&endpoint, op_timeout + Duration::from_secs(10));
    let result: Result<Outcome, String> = match cli.command {
        Command::Cluster(c) => cluster::run(c, &client).map_err(|e| e.to_string()),
        Command::Leader(c) => leader::run(c, &client, op_timeout).map_err(|e| e.to_string()),
        Command::Segment(c) => segment::run(c, &client, op_timeout).map_err(|e| e.to_string()),
        Command::Member(c) => member::run(&endpoint, c)
            .map(|()| Outcome::Ok)
            .map_err(|e| e.to_string()),
        Command::Rate(c) => rate::run(c, &client).map_err(|e| e.to_string()),
    };
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Unhealthy) => ExitCode::from(1),
        Err(e) => {
            eprintln!("vdlctl: {e}");
            ExitCode::from(1)
        }
    }
}
