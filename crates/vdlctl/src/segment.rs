//! `vdlctl segment list|delete`: a partition's segment files on its leader, and deleting the
//! old ones (only where `storage.operator_delete_allowed` is on, never below what a voter
//! still needs).

use std::time::Duration;

use clap::Subcommand;
use vdl_admin_api::segments::{SegmentEntry, SegmentList, SegmentsDeleted};

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

fn render(segments: &[SegmentEntry]) -> String {
    let mut out =
        String::from("BASE-INDEX  LAST-INDEX  FIRST-OFFSET  NEXT-OFFSET  BYTES       ACTIVE\n");
    for s in segments {
        out.push_str(&format!(
            "{:<11} {:<11} {:<13} {:<12} {:<11} {}\n",
            s.base_index, s.last_index, s.first_offset, s.next_offset, s.bytes, s.active
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
            let path = format!("/partitions/{}/{partition}/segments", segment(&topic));
            let answer = client.get_answer(&path)?;
            let list: SegmentList = answer.document(&[])?;
            if json {
                println!("{}", answer.pretty());
            } else {
                println!("{topic}-{partition} on node {}:", list.node);
                print!("{}", render(&list.segments));
            }
            Ok(Outcome::Ok)
        }
        SegmentCommand::Delete {
            topic,
            partition,
            before,
        } => {
            let answer: SegmentsDeleted = client.post(&format!(
                "/partitions/{}/{partition}/segments/delete?before={before}&timeout_ms={}",
                segment(&topic),
                timeout.as_millis()
            ))?;
            println!(
                "{topic}-{partition}: {} segment(s) deleted; log start offset now {}",
                answer.deleted.len(),
                answer.log_start_offset
            );
            Ok(Outcome::Ok)
        }
    }
}
