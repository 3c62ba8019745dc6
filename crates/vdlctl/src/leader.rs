//! `vdlctl leader transfer|balance`: move partition leadership (raft-rs leader transfer,
//! started on the current leader through the replicated metadata).

use std::time::Duration;

use clap::Subcommand;
use vdl_admin_api::leaders::{LeaderTransferred, LeadersBalanced};

use crate::client::{segment, Client, ClientError};
use crate::Outcome;

/// `vdlctl leader ...`.
#[derive(Subcommand)]
pub enum LeaderCommand {
    /// Make node N lead partition PARTITION of TOPIC; fails with the reason when it does not
    /// happen within --timeout-ms.
    Transfer {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// The replica that should lead.
        #[arg(long)]
        to: u64,
    },
    /// Move every partition's leadership to its preferred replica (the first in its replica
    /// list).
    Balance,
}

/// Runs a `leader` subcommand.
pub fn run(cmd: LeaderCommand, client: &Client, timeout: Duration) -> Result<Outcome, ClientError> {
    let timeout_ms = timeout.as_millis();
    match cmd {
        LeaderCommand::Transfer {
            topic,
            partition,
            to,
        } => {
            let answer: LeaderTransferred = client.post(&format!(
                "/partitions/{}/{partition}/leader?to={to}&timeout_ms={timeout_ms}",
                segment(&topic)
            ))?;
            println!(
                "{topic}-{partition}: node {to} leads (took {} ms)",
                answer.elapsed_ms
            );
            Ok(Outcome::Ok)
        }
        LeaderCommand::Balance => {
            let answer: LeadersBalanced =
                client.post(&format!("/leaders/balance?timeout_ms={timeout_ms}"))?;
            println!(
                "{} partition(s) not led by their preferred replica; {} moved",
                answer.asked, answer.moved
            );
            Ok(Outcome::Ok)
        }
    }
}
