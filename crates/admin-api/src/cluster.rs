//! `GET /cluster/status`: every member and every partition as the answering node gathered
//! them from all members' admin listeners. Status 200 when healthy, 503 with the same
//! document when not.

use serde::{Deserialize, Serialize};

/// A member in [`ClusterStatus::nodes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    /// Node id.
    pub id: u64,
    /// Node name.
    pub name: String,
    /// Raft peer address.
    pub peer: String,
    /// Kafka address it announced (empty: not connected to the answering node).
    pub kafka: String,
    /// Admin address it announced (empty: unknown).
    pub admin: String,
    /// Connected to the answering node (or is it).
    pub live: bool,
    /// Its admin API answered.
    pub reachable: bool,
}

/// One replica of a partition in [`PartitionStatus::replica_status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStatus {
    /// Node id.
    pub id: u64,
    /// `leader`, `follower`, `candidate`, `pre_candidate`, or `unknown` (node unreachable).
    pub role: String,
    /// Raft entries behind the leader (leader's last index minus this replica's matched
    /// index, as the leader tracks it).
    pub lag_entries: u64,
    /// Bytes behind the leader: the leader's log bytes minus this replica's (approximate:
    /// assumes the two apply the same retention).
    pub lag_bytes: u64,
    /// Offset after the last record stored on the replica.
    pub log_end_offset: u64,
}

/// One partition in [`ClusterStatus::partitions`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionStatus {
    /// Topic name (`__cluster_metadata` for the metadata group).
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// Replicas, preferred leader first.
    pub replicas: Vec<u64>,
    /// Leader (0: none).
    pub leader: u64,
    /// In-sync replicas as the leader reports them.
    pub isr: Vec<u64>,
    /// Fewer in-sync replicas than replicas (or no leader).
    pub under_replicated: bool,
    /// Each replica's state, in the order of `replicas`.
    pub replica_status: Vec<ReplicaStatus>,
}

/// The `GET /cluster/status` document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The node that answered.
    pub answered_by: u64,
    /// No problem found: `problems` is empty.
    pub healthy: bool,
    /// What makes the cluster unhealthy, one sentence each.
    pub problems: Vec<String>,
    /// Every member.
    pub nodes: Vec<MemberStatus>,
    /// Every partition (and the metadata group).
    pub partitions: Vec<PartitionStatus>,
    /// Partitions under-replicated, as `topic-partition`.
    pub under_replicated: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ClusterStatus {
        ClusterStatus {
            answered_by: 2,
            healthy: false,
            problems: vec!["node 3 is not connected".into()],
            nodes: vec![MemberStatus {
                id: 1,
                name: "vdl1".into(),
                peer: "127.0.0.1:1".into(),
                kafka: "127.0.0.1:2".into(),
                admin: "127.0.0.1:3".into(),
                live: true,
                reachable: true,
            }],
            partitions: vec![PartitionStatus {
                topic: "t".into(),
                partition: 0,
                replicas: vec![1, 2],
                leader: 1,
                isr: vec![1],
                under_replicated: true,
                replica_status: vec![ReplicaStatus {
                    id: 1,
                    role: "leader".into(),
                    lag_entries: 0,
                    lag_bytes: 0,
                    log_end_offset: 5,
                }],
            }],
            under_replicated: vec!["t-0".into()],
        }
    }

    #[test]
    fn the_status_round_trips() {
        let s = sample();
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<ClusterStatus>(&text).unwrap(), s);
    }

    #[test]
    fn wire_bytes() {
        let text = serde_json::to_string(&sample()).unwrap();
        assert_eq!(
            text,
            r#"{"answered_by":2,"healthy":false,"problems":["node 3 is not connected"],"nodes":[{"id":1,"name":"vdl1","peer":"127.0.0.1:1","kafka":"127.0.0.1:2","admin":"127.0.0.1:3","live":true,"reachable":true}],"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"leader":1,"isr":[1],"under_replicated":true,"replica_status":[{"id":1,"role":"leader","lag_entries":0,"lag_bytes":0,"log_end_offset":5}]}],"under_replicated":["t-0"]}"#
        );
    }

    #[test]
    fn fields_added_later_are_ignored() {
        let mut v: serde_json::Value = serde_json::to_value(sample()).unwrap();
        v["added_in_a_later_release"] = serde_json::json!({"x": 1});
        v["nodes"][0]["zone"] = "a".into();
        let s: ClusterStatus = serde_json::from_value(v).unwrap();
        assert_eq!(s, sample());
    }
}
