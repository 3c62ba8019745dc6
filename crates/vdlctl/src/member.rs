//! `vdlctl member list | add | remove`: membership changes through a node's admin API
//! (`GET /members`, `POST /members`, `DELETE /members/{id}`; see the server's `admin/members.rs`).
//!
//! `add` and `remove` return once the change is done (the new node is a voter of the
//! metadata group; the removed node's replicas moved and it left the metadata group), or fail
//! with the server's message; a change that times out goes on in the cluster.

use std::time::Duration;

use clap::Subcommand;
use vdl_admin_api::members::{AddMember, MemberView, RemovedMember};

use crate::client::{Client, ClientError, Endpoint};

/// The `member` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum MemberCommand {
    /// List every member with its addresses, state and replica count.
    List {
        /// Print the server's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Add a node (started with `join = true`) as a member; returns once it votes.
    Add {
        /// Its Raft id (non-zero, never used before).
        #[arg(long)]
        id: u64,
        /// Its Raft peer address, IP:PORT.
        #[arg(long)]
        peer: String,
        /// Its Kafka address, HOST:PORT.
        #[arg(long)]
        kafka: String,
        /// Its name (default vdl<id>).
        #[arg(long)]
        name: Option<String>,
        /// How long to wait for the node to catch up and become a voter.
        #[arg(long, default_value_t = 120)]
        timeout_s: u64,
    },
    /// Remove a member: its replicas move to other members, then it leaves the metadata
    /// group; it can be stopped once this returns.
    Remove {
        /// Its Raft id.
        #[arg(long)]
        id: u64,
        /// How long to wait for the replicas to move.
        #[arg(long, default_value_t = 300)]
        timeout_s: u64,
    },
}

/// Runs one `member` subcommand against the node whose admin listener is `admin`,
/// printing the outcome; an error carries the server's message.
pub fn run(admin: &Endpoint, command: MemberCommand) -> Result<(), ClientError> {
    match command {
        MemberCommand::List { json } => {
            let client = Client::new(admin, Duration::from_secs(10));
            let answer = client.get_answer("/members")?;
            let members: Vec<MemberView> = answer.document(&[])?;
            if json {
                println!("{}", answer.pretty());
            } else {
                print!("{}", table(&members));
            }
        }
        MemberCommand::Add {
            id,
            peer,
            kafka,
            name,
            timeout_s,
        } => {
            let body = AddMember {
                id,
                peer,
                kafka,
                name,
            };
            let path = format!("/members?timeout_ms={}", timeout_s.saturating_mul(1000));
            let added: MemberView = Client::new(admin, wait(timeout_s)).post_json(&path, &body)?;
            println!("node {id} added: {}", added.state.as_str());
        }
        MemberCommand::Remove { id, timeout_s } => {
            let path = format!(
                "/members/{id}?timeout_ms={}",
                timeout_s.saturating_mul(1000)
            );
            let _: RemovedMember = Client::new(admin, wait(timeout_s)).delete(&path)?;
            println!("node {id} removed: it holds no replica and votes nowhere; it can be stopped");
        }
    }
    Ok(())
}

/// The HTTP timeout of a change the server waits up to `timeout_s` for.
fn wait(timeout_s: u64) -> Duration {
    Duration::from_secs(timeout_s.saturating_add(10))
}

/// The member list as an aligned table.
fn table(members: &[MemberView]) -> String {
    let mut out = format!(
        "{:>4}  {:<10} {:<22} {:<22} {:<8} {:<5} {}\n",
        "ID", "NAME", "PEER", "KAFKA", "STATE", "LIVE", "REPLICAS"
    );
    for m in members {
        out.push_str(&format!(
            "{:>4}  {:<10} {:<22} {:<22} {:<8} {:<5} {}\n",
            m.id,
            m.name,
            m.peer_addr,
            m.kafka_addr,
            m.state.as_str(),
            m.live,
            m.replicas,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_member() {
        let members = serde_json::json!([
            {"id": 1, "name": "vdl1", "peer_addr": "127.0.0.1:1", "kafka_addr": "127.0.0.1:2",
             "state": "voter", "live": true, "replicas": 3},
            {"id": 4, "name": "vdl4", "peer_addr": "127.0.0.1:3", "kafka_addr": "127.0.0.1:4",
             "state": "joining", "live": false, "replicas": 0}
        ]);
        let t = table(&serde_json::from_value::<Vec<MemberView>>(members).unwrap());
        assert_eq!(t.lines().count(), 3);
        assert!(t.lines().nth(2).unwrap().contains("joining"));
        assert!(t.lines().nth(1).unwrap().starts_with("   1  vdl1"));
    }
}
