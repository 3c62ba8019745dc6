//! The consumer-protocol group (KIP-848) messages of an entry and a snapshot
//! (`StoreConsumerGroup`, entry field 46; `consumer_groups`, snapshot field 43). The record
//! types are both the in-memory record ([`crate::metadata::MetaCommand::StoreConsumerGroup`])
//! and the wire message: a node that does not know them skips the entry
//! ([`super::MetaDecodeError::UnknownCommand`]) and ignores the snapshot field.

use serde::{Deserialize, Serialize};

/// A consumer-protocol group's state as its coordinator stores it: epochs, assignor,
/// subscribed partition counts and every member with its epochs and assignments.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, prost::Message)]
pub struct ConsumerGroupRecord {
    /// The group epoch.
    #[prost(int32, tag = "1")]
    pub group_epoch: i32,
    /// The group epoch of the target assignment.
    #[prost(int32, tag = "2")]
    pub assignment_epoch: i32,
    /// The assignor of the target assignment.
    #[prost(string, tag = "3")]
    pub assignor: String,
    /// The members, by member id order.
    #[prost(message, repeated, tag = "4")]
    pub members: Vec<ConsumerMemberRecord>,
    /// The partition counts of the subscribed topics at the group epoch.
    #[prost(message, repeated, tag = "5")]
    pub partition_counts: Vec<TopicPartitionCount>,
}

/// One member of a [`ConsumerGroupRecord`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, prost::Message)]
pub struct ConsumerMemberRecord {
    /// Member id.
    #[prost(string, tag = "1")]
    pub member_id: String,
    /// Static instance id.
    #[prost(string, optional, tag = "2")]
    pub instance_id: Option<String>,
    /// Rack.
    #[prost(string, optional, tag = "3")]
    pub rack: Option<String>,
    /// The client's `client.id`.
    #[prost(string, tag = "4")]
    pub client_id: String,
    /// The client's address.
    #[prost(string, tag = "5")]
    pub client_host: String,
    /// Subscribed topic names.
    #[prost(string, repeated, tag = "6")]
    pub subscribed_names: Vec<String>,
    /// Subscribed regex.
    #[prost(string, optional, tag = "7")]
    pub subscribed_regex: Option<String>,
    /// Server assignor asked for.
    #[prost(string, optional, tag = "8")]
    pub server_assignor: Option<String>,
    /// Rebalance timeout.
    #[prost(int32, tag = "9")]
    pub rebalance_timeout_ms: i32,
    /// Member epoch (-2: a static member that left).
    #[prost(int32, tag = "10")]
    pub epoch: i32,
    /// Previous member epoch.
    #[prost(int32, tag = "11")]
    pub previous_epoch: i32,
    /// Reconciliation state (0 stable, 1 unrevoked partitions, 2 unreleased partitions).
    #[prost(int32, tag = "12")]
    pub state: i32,
    /// Partitions it owns.
    #[prost(message, repeated, tag = "13")]
    pub assigned: Vec<TopicPartitionsRecord>,
    /// Partitions it must revoke.
    #[prost(message, repeated, tag = "14")]
    pub pending_revocation: Vec<TopicPartitionsRecord>,
    /// Its target assignment.
    #[prost(message, repeated, tag = "15")]
    pub target: Vec<TopicPartitionsRecord>,
    /// Set for a member that uses the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside
    /// the consumer group; absent for a consumer-protocol member (and in records written
    /// before classic members were served).
    #[prost(message, optional, tag = "16")]
    #[serde(default)]
    pub classic: Option<ClassicMemberRecord>,
}

/// What a classic-protocol member of a consumer group joined with.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, prost::Message)]
pub struct ClassicMemberRecord {
    /// Its JoinGroup's session timeout.
    #[prost(int32, tag = "1")]
    pub session_timeout_ms: i32,
    /// Its protocols (name, ConsumerProtocolSubscription), in its order of preference.
    #[prost(message, repeated, tag = "2")]
    pub protocols: Vec<ClassicProtocolRecord>,
}

/// One protocol a classic member supports.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, prost::Message)]
pub struct ClassicProtocolRecord {
    /// Protocol (assignor) name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its metadata (a ConsumerProtocolSubscription).
    #[prost(bytes = "vec", tag = "2")]
    pub metadata: Vec<u8>,
}

/// Partitions of one topic, by topic id.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, prost::Message)]
pub struct TopicPartitionsRecord {
    /// Topic id (16 bytes).
    #[prost(bytes = "vec", tag = "1")]
    pub topic_id: Vec<u8>,
    /// Partition indexes.
    #[prost(int32, repeated, tag = "2")]
    pub partitions: Vec<i32>,
}

/// A topic's partition count, by topic id.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, prost::Message)]
pub struct TopicPartitionCount {
    /// Topic id (16 bytes).
    #[prost(bytes = "vec", tag = "1")]
    pub topic_id: Vec<u8>,
    /// Partitions.
    #[prost(uint32, tag = "2")]
    pub partitions: u32,
}

/// `StoreConsumerGroup` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreConsumerGroupWire {
    /// Group id.
    #[prost(string, tag = "1")]
    pub group: String,
    /// The state; absent when the group is gone (deleted, or converted to a classic group).
    #[prost(message, optional, tag = "2")]
    pub record: Option<ConsumerGroupRecord>,
    /// The proposer's wall clock, ms since the epoch.
    #[prost(int64, tag = "3")]
    pub time_ms: i64,
}

/// One consumer-protocol group in a snapshot.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoredConsumerGroupWire {
    /// Group id.
    #[prost(string, tag = "1")]
    pub group: String,
    /// Its state.
    #[prost(message, optional, tag = "2")]
    pub record: Option<ConsumerGroupRecord>,
}
