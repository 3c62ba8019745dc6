//! `vdlctl member list | add | remove`: membership changes through a node's admin API
//! (`GET /members`, `POST /members`, `DELETE /members/{id}`; see the server's `admin.rs`).
//!
//! `add` and `remove` return once the change is done (the new node is a voter of the
//! metadata group; the removed node's replicas moved and it left the metadata group), or fail
//! with the server's message; a change that times out goes on in the cluster.

use std::time::Duration;

use anyhow::{bail, Context};
use clap::Subcommand;

use crate::client::Endpoint;

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

/// Runs one `member` subcommand against the node whose admin listener is `admin`
/// (HOST:PORT), printing the outcome; an error carries the server's message.
pub fn run(admin: &Endpoint, command: MemberCommand) -> anyhow::Result<()> {
    match command {
        MemberCommand::List { json } => {
            let members = call(admin, "GET", "/members", None, Duration::from_secs(10))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&members)?);
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
            let mut body = serde_json::json!({ "id": id, "peer": peer, "kafka": kafka });
            if let Some(n) = name {
                body["name"] = serde_json::Value::String(n);
            }
            let path = format!("/members?timeout_ms={}", timeout_s.saturating_mul(1000));
            let added = call(admin, "POST", &path, Some(body), wait(timeout_s))?;
            println!(
                "node {id} added: {}",
                added["state"].as_str().unwrap_or("?")
            );
        }
        MemberCommand::Remove { id, timeout_s } => {
            let path = format!(
                "/members/{id}?timeout_ms={}",
                timeout_s.saturating_mul(1000)
            );
            call(admin, "DELETE", &path, None, wait(timeout_s))?;
            println!("node {id} removed: it holds no replica and votes nowhere; it can be stopped");
        }
    }
    Ok(())
}

/// The HTTP timeout of a change the server waits up to `timeout_s` for.
fn wait(timeout_s: u64) -> Duration {
    Duration::from_secs(timeout_s.saturating_add(10))
}

/// One request to the admin API; a non-2xx answer is an error with the server's message.
fn call(
    admin: &Endpoint,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
    timeout: Duration,
) -> anyhow::Result<serde_json::Value> {
    let url = admin.url(path);
    let agent = admin.agent(timeout);
    let auth = admin.authorization();
    let response = match (method, body) {
        ("GET", _) => match auth {
            Some(a) => agent.get(&url).header("authorization", a).call(),
            None => agent.get(&url).call(),
        },
        ("DELETE", _) => match auth {
            Some(a) => agent.delete(&url).header("authorization", a).call(),
            None => agent.delete(&url).call(),
        },
        (_, Some(b)) => match auth {
            Some(a) => agent.post(&url).header("authorization", a).send_json(&b),
            None => agent.post(&url).send_json(&b),
        },
        (_, None) => match auth {
            Some(a) => agent.post(&url).header("authorization", a).send_empty(),
            None => agent.post(&url).send_empty(),
        },
    }
    .with_context(|| format!("{method} {url}"))?;
    let status = response.status();
    let text = response
        .into_body()
        .with_config()
        .limit(16 << 20)
        .read_to_string()
        .with_context(|| format!("reading the answer of {method} {url}"))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{method} {url}: not JSON (status {status}): {text}"))?;
    if !status.is_success() {
        bail!(
            "{method} {url}: {status}: {}",
            value["error"].as_str().unwrap_or(&text)
        );
    }
    Ok(value)
}

/// The member list as an aligned table.
fn table(members: &serde_json::Value) -> String {
    let mut out = format!(
        "{:>4}  {:<10} {:<22} {:<22} {:<8} {:<5} {}\n",
        "ID", "NAME", "PEER", "KAFKA", "STATE", "LIVE", "REPLICAS"
    );
    for m in members.as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:>4}  {:<10} {:<22} {:<22} {:<8} {:<5} {}\n",
            m["id"].as_u64().unwrap_or(0),
            m["name"].as_str().unwrap_or(""),
            m["peer_addr"].as_str().unwrap_or(""),
            m["kafka_addr"].as_str().unwrap_or(""),
            m["state"].as_str().unwrap_or(""),
            m["live"].as_bool().unwrap_or(false),
            m["replicas"].as_u64().unwrap_or(0),
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
        let t = table(&members);
        assert_eq!(t.lines().count(), 3);
        assert!(t.lines().nth(2).unwrap().contains("joining"));
        assert!(t.lines().nth(1).unwrap().starts_with("   1  vdl1"));
    }
}
