//! `vdlctl cluster status`: members, partitions, roles, lag, ISR; exit 1 when unhealthy.

use clap::Subcommand;
use serde_json::Value;

use crate::client::{Client, ClientError};
use crate::Outcome;

/// `vdlctl cluster ...`.
#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Nodes (addresses, liveness), each partition's leader, replicas' roles and lag, ISR,
    /// under-replicated partitions. Exits 1 when the cluster is unhealthy (a node down or
    /// unreachable, a partition without leader or under-replicated): usable as a gate.
    Status {
        /// Print the status document as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `cluster` subcommand.
pub fn run(cmd: ClusterCommand, client: &Client) -> Result<Outcome, ClientError> {
    match cmd {
        ClusterCommand::Status { json } => {
            // 503 carries the same document: the cluster is unhealthy.
            let (code, status) = client.get_with_status("/cluster/status")?;
            if status.get("healthy").is_none() {
                // Not a status document: an error answer (401, 403, ...) or something else.
                return Err(match status.get("error").and_then(|e| e.as_str()) {
                    Some(message) => ClientError::Refused {
                        status: code,
                        message: message.to_owned(),
                        body: Some(status.clone()),
                    },
                    None => ClientError::NotJson(status.to_string()),
                });
            }
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&status).unwrap_or_default()
                );
            } else {
                print!("{}", render(&status));
            }
            Ok(if status["healthy"].as_bool() == Some(true) {
                Outcome::Ok
            } else {
                Outcome::Unhealthy
            })
        }
    }
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn ids(v: &Value) -> String {
    v.as_array()
        .map(|a| a.iter().map(s).collect::<Vec<_>>().join(","))
        .unwrap_or_default()
}

/// The status as text tables.
fn render(status: &Value) -> String {
    let mut out = String::new();
    let healthy = status["healthy"].as_bool() == Some(true);
    out.push_str(&format!(
        "cluster: {} (answered by node {})\n",
        if healthy { "healthy" } else { "UNHEALTHY" },
        s(&status["answered_by"])
    ));
    for p in status["problems"].as_array().into_iter().flatten() {
        out.push_str(&format!("  problem: {}\n", s(p)));
    }
    out.push_str("\nNODE  NAME        LIVE   ADMIN-OK  PEER                   KAFKA                  ADMIN\n");
    for n in status["nodes"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<5} {:<11} {:<6} {:<9} {:<22} {:<22} {}\n",
            s(&n["id"]),
            s(&n["name"]),
            s(&n["live"]),
            s(&n["reachable"]),
            s(&n["peer"]),
            s(&n["kafka"]),
            s(&n["admin"])
        ));
    }
    out.push_str("\nPARTITION                      LEADER  REPLICAS  ISR       REPLICA STATE (id:role lag entries/bytes)\n");
    for p in status["partitions"].as_array().into_iter().flatten() {
        let name = format!("{}-{}", s(&p["topic"]), s(&p["partition"]));
        let mark = if p["under_replicated"].as_bool() == Some(true) {
            " UNDER-REPLICATED"
        } else {
            ""
        };
        let replicas = p["replica_status"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                format!(
                    "{}:{} {}/{}",
                    s(&r["id"]),
                    s(&r["role"]),
                    s(&r["lag_entries"]),
                    s(&r["lag_bytes"])
                )
            })
            .collect::<Vec<_>>()
            .join("  ");
        out.push_str(&format!(
            "{:<30} {:<7} {:<9} {:<9} {}{}\n",
            name,
            s(&p["leader"]),
            ids(&p["replicas"]),
            ids(&p["isr"]),
            replicas,
            mark
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_problems_nodes_and_partitions() {
        let status = serde_json::json!({
            "answered_by": 2, "healthy": false,
            "problems": ["node 3 is not connected"],
            "nodes": [{"id": 1, "name": "vdl1", "peer": "p", "kafka": "k", "admin": "a",
                       "live": true, "reachable": true}],
            "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "leader": 1,
                            "isr": [1], "under_replicated": true,
                            "replica_status": [{"id": 1, "role": "leader", "lag_entries": 0,
                                                "lag_bytes": 0, "log_end_offset": 5}]}],
            "under_replicated": ["t-0"],
        });
        let text = render(&status);
        assert!(
            text.contains("cluster: UNHEALTHY (answered by node 2)"),
            "{text}"
        );
        assert!(text.contains("problem: node 3 is not connected"), "{text}");
        assert!(text.contains("vdl1"), "{text}");
        assert!(
            text.contains("t-0") && text.contains("UNDER-REPLICATED"),
            "{text}"
        );
        assert!(text.contains("1:leader 0/0"), "{text}");
    }
}
