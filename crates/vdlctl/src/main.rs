//! `vdlctl`: operates a vdl cluster through the admin HTTP API of any node.
//!
//! Minimal entry point for the membership commands (`vdlctl member ...`, see [`member`]).

mod member;

use clap::{Parser, Subcommand};

/// Command line of `vdlctl`.
#[derive(Parser)]
#[command(
    name = "vdlctl",
    about = "Operate a vdl cluster through a node's admin API"
)]
struct Cli {
    /// Admin address (HOST:PORT) of any node.
    #[arg(long, default_value = "127.0.0.1:9292", global = true)]
    admin: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List, add or remove cluster members, one at a time.
    #[command(subcommand)]
    Member(member::MemberCommand),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Member(c) => member::run(&cli.admin, c),
    }
}
