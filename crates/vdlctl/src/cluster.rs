//! `vdlctl cluster status`: members, partitions, roles, lag, ISR; exit 1 when unhealthy.

use clap::Subcommand;
use vdl_admin_api::cluster::ClusterStatus;

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
            let answer = client.get_answer("/cluster/status")?;
            let status: ClusterStatus = answer.document(&[503])?;
            if json {
                println!("{}", answer.pretty());
            } else {
                print!("{}", render(&status));
            }
            Ok(if status.healthy {
                Outcome::Ok
            } else {
                Outcome::Unhealthy
            })
        }
    }
}

fn ids(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// The status as text tables.
fn render(status: &ClusterStatus) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "cluster: {} (answered by node {})\n",
        if status.healthy {
            "healthy"
        } else {
            "UNHEALTHY"
        },
        status.answered_by
    ));
    for p in &status.problems {
        out.push_str(&format!("  problem: {p}\n"));
    }
    out.push_str("\nNODE  NAME        LIVE   ADMIN-OK  PEER                   KAFKA                  ADMIN\n");
    for n in &status.nodes {
        out.push_str(&format!(
            "{:<5} {:<11} {:<6} {:<9} {:<22} {:<22} {}\n",
            n.id, n.name, n.live, n.reachable, n.peer, n.kafka, n.admin
        ));
    }
    out.push_str("\nPARTITION                      LEADER  REPLICAS  ISR       REPLICA STATE (id:role lag entries/bytes)\n");
    for p in &status.partitions {
        let name = format!("{}-{}", p.topic, p.partition);
        let mark = if p.under_replicated {
            " UNDER-REPLICATED"
        } else {
            ""
        };
        let replicas = p
            .replica_status
            .iter()
            .map(|r| format!("{}:{} {}/{}", r.id, r.role, r.lag_entries, r.lag_bytes))
            .collect::<Vec<_>>()
            .join("  ");
        out.push_str(&format!(
            "{:<30} {:<7} {:<9} {:<9} {}{}\n",
            name,
            p.leader,
            ids(&p.replicas),
            ids(&p.isr),
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
        let text = render(&serde_json::from_value(status).unwrap());
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
