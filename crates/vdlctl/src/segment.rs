//! `vdlctl segment list|delete`: a partition's segment files on its leader, and deleting the
//! old ones (only where `storage.operator_delete_allowed` is on, never below what a voter
//! still needs).

use std::time::Duration;

use clap::Subcommand;
use serde_json::Value;

use crate::client::{segment, Client, ClientError};
use crate::Outcome;

/// `vdlctl segment ...`.
#[derive(Subcommand)]
pub enum SegmentCommand {
    /// The leader's segment files of a partition: Raft indexes, offsets, bytes.
    List {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete the sealed segments that lie wholly below OFFSET (the partition's log start
    /// offset rises to the end of the last one deleted, on every replica).
    Delete {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// Delete segments whose records are all below this offset.
        #[arg(long)]
        before: u64,
    },
}

fn render(segments: &Value) -> String {
    let mut out =
        String::from("BASE-INDEX  LAST-INDEX  FIRST-OFFSET  NEXT-OFFSET  BYTES       ACTIVE\n");
    for s in segments.as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<11} {:<11} {:<13} {:<12} {:<11} {}\n",
            s["base_index"].to_string(),
            s["last_index"].to_string(),
            s["first_offset"].to_string(),
            s["next_offset"].to_string(),
            s["bytes"].to_string(),
            s["active"]
        ));
    }
    out
}

/// Runs a `segment` subcommand.
pub fn run(
    cmd: SegmentCommand,
    client: &Client,
    timeout: Duration,
) -> Result<Outcome, ClientError> {
    match cmd {
        SegmentCommand::List {
            topic,
            partition,
            json,
        } => {
            let answer = client.get(&format!(
                "/partitions/{}/{partition}/segments",
                segment(&topic)
            ))?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&answer).unwrap_or_default()
                );
            } else {
                println!("{topic}-{partition} on node {}:", answer["node"]);
                print!("{}", render(&answer["segments"]));
            }
            Ok(Outcome::Ok)
        }
        SegmentCommand::Delete {
            topic,
            partition,
            before,
        } => {
            let answer = client.post(&format!(
                "/partitions/{}/{partition}/segments/delete?before={before}&timeout_ms={}",
                segment(&topic),
                timeout.as_millis()
            ))?;
            let deleted = answer["deleted"].as_array().map_or(0, Vec::len);
            println!(
                "{topic}-{partition}: {deleted} segment(s) deleted; log start offset now {}",
                answer["log_start_offset"]
            );
            Ok(Outcome::Ok)
        }
    }
}
