//! The consumer group messages of an entry and a snapshot (`StoreGroup`, `ExpireGroupOffsets`,
//! `GroupRecord`) and their conversions to and from [`GroupRecord`].

use crate::metadata::{GroupMemberRecord, GroupRecord};

/// `StoreGroup` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreGroupWire {
    /// Consumer group id.
    #[prost(string, tag = "1")]
    pub group: String,
    /// The membership; absent when the group has no members.
    #[prost(message, optional, tag = "2")]
    pub record: Option<GroupRecordWire>,
    /// The proposer's wall clock, ms since the epoch.
    #[prost(int64, tag = "3")]
    pub time_ms: i64,
}

/// `ExpireGroupOffsets` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExpireGroupOffsetsWire {
    /// Consumer group id.
    #[prost(string, tag = "1")]
    pub group: String,
    /// The group's last activity the proposer saw, ms since the epoch.
    #[prost(int64, tag = "2")]
    pub activity_ms: i64,
}

/// `GroupRecord` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupRecordWire {
    /// The generation.
    #[prost(int32, tag = "1")]
    pub generation: i32,
    /// The protocol type.
    #[prost(string, tag = "2")]
    pub protocol_type: String,
    /// The chosen protocol.
    #[prost(string, tag = "3")]
    pub protocol: String,
    /// The leader's member id.
    #[prost(string, tag = "4")]
    pub leader: String,
    /// Members in join order.
    #[prost(message, repeated, tag = "5")]
    pub members: Vec<GroupMemberWire>,
}

/// `GroupMemberRecord` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupMemberWire {
    /// Member id.
    #[prost(string, tag = "1")]
    pub member_id: String,
    /// Static instance id.
    #[prost(string, optional, tag = "2")]
    pub instance_id: Option<String>,
    /// The client's `client.id`.
    #[prost(string, tag = "3")]
    pub client_id: String,
    /// The client's address.
    #[prost(string, tag = "4")]
    pub client_host: String,
    /// Session timeout.
    #[prost(int32, tag = "5")]
    pub session_timeout_ms: i32,
    /// Rebalance timeout.
    #[prost(int32, tag = "6")]
    pub rebalance_timeout_ms: i32,
    /// Supported protocols, most preferred first.
    #[prost(message, repeated, tag = "7")]
    pub protocols: Vec<GroupProtocolWire>,
    /// The member's assignment.
    #[prost(bytes = "vec", tag = "8")]
    pub assignment: Vec<u8>,
}

/// One supported protocol of a group member on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupProtocolWire {
    /// Protocol name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The member's metadata for it.
    #[prost(bytes = "vec", tag = "2")]
    pub metadata: Vec<u8>,
}

impl From<&GroupRecord> for GroupRecordWire {
    fn from(r: &GroupRecord) -> Self {
        GroupRecordWire {
            generation: r.generation,
            protocol_type: r.protocol_type.clone(),
            protocol: r.protocol.clone(),
            leader: r.leader.clone(),
            members: r
                .members
                .iter()
                .map(|m| GroupMemberWire {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocols: m
                        .protocols
                        .iter()
                        .map(|(name, metadata)| GroupProtocolWire {
                            name: name.clone(),
                            metadata: metadata.clone(),
                        })
                        .collect(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }
}

impl From<GroupRecordWire> for GroupRecord {
    fn from(r: GroupRecordWire) -> Self {
        GroupRecord {
            generation: r.generation,
            protocol_type: r.protocol_type,
            protocol: r.protocol,
            leader: r.leader,
            members: r
                .members
                .into_iter()
                .map(|m| GroupMemberRecord {
                    member_id: m.member_id,
                    instance_id: m.instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocols: m
                        .protocols
                        .into_iter()
                        .map(|p| (p.name, p.metadata))
                        .collect(),
                    assignment: m.assignment,
                })
                .collect(),
        }
    }
}
