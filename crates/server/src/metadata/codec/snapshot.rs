//! The metadata snapshot format: format byte, CRC-32C, protobuf [`MetaSnapshotWire`].

use prost::Message as _;
use thiserror::Error;

use crate::flow::wire::{ClientQuotaWire, FlowLimitsWire};

use super::groups::GroupRecordWire;
use super::messages::{
    AclBindingWire, CommittedOffsetWire, ConfigEntryWire, MemberWire, MovingWire, ReplicaListWire,
    RequestIdWire, ScramCredentialWire,
};
use super::txn_offsets::PendingTxnOffsetsWire;

/// First byte of a metadata snapshot (see [`crate::metadata::snapshot`]), version 1: then a
/// CRC-32C of the body (4 bytes, big endian), then a protobuf [`MetaSnapshotWire`].
pub const SNAPSHOT_FORMAT_V1: u8 = 0x01;

/// Why a metadata snapshot did not decode: it is never guessed past.
#[derive(Debug, Error)]
pub enum SnapshotDecodeError {
    /// Shorter than its header.
    #[error("metadata snapshot of {0} bytes is shorter than its 5-byte header")]
    Truncated(usize),
    /// An unknown format byte.
    #[error("unknown metadata snapshot format byte {0:#04x} (this version reads format 1)")]
    UnknownFormat(u8),
    /// The body's CRC does not match.
    #[error(
        "metadata snapshot checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    Checksum {
        /// The CRC in the header.
        stored: u32,
        /// The CRC of the body read.
        computed: u32,
    },
    /// The protobuf body did not decode.
    #[error("undecodable metadata snapshot body: {0}")]
    Protobuf(#[from] prost::DecodeError),
}

/// Encodes a snapshot: [`SNAPSHOT_FORMAT_V1`], the body's CRC-32C, the body.
pub fn encode_snapshot(wire: &MetaSnapshotWire) -> Vec<u8> {
    let body = wire.encode_to_vec();
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(SNAPSHOT_FORMAT_V1);
    out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Decodes [`encode_snapshot`]'s output, checking format byte and CRC first.
pub fn decode_snapshot(data: &[u8]) -> Result<MetaSnapshotWire, SnapshotDecodeError> {
    if data.len() < 5 {
        return Err(SnapshotDecodeError::Truncated(data.len()));
    }
    if data[0] != SNAPSHOT_FORMAT_V1 {
        return Err(SnapshotDecodeError::UnknownFormat(data[0]));
    }
    let stored = u32::from_be_bytes([data[1], data[2], data[3], data[4]]);
    let body = &data[5..];
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(SnapshotDecodeError::Checksum { stored, computed });
    }
    Ok(MetaSnapshotWire::decode(body)?)
}

/// The whole [`crate::metadata::ClusterMeta`] at one applied Raft index (schema:
///
/// ```text
/// message MetaSnapshot {
///   uint64 index = 1;                       // last applied entry covered
///   uint64 term = 2;                        // its term
///   repeated TopicState topics = 3;
///   int64 next_producer_id = 4;
///   repeated Allocation allocations = 5;    // oldest first
///   repeated GroupOffsets offsets = 6;
///   repeated StoredGroup groups = 7;
///   repeated GroupActivity activity = 8;
///   repeated RequestId applied = 9;         // remembered request ids, oldest first
///   repeated AclBinding acls = 13;          // every ACL, in binding order
///   repeated ScramCredential scram_credentials = 14;  // by user, then mechanism
///   FlowLimits flow_limits = 21;            // absent: unlimited
///   repeated ClientQuota client_quotas = 22; // in entity order
///   bool scram_users_imported = 23;         // the bootstrap SCRAM users were imported
///   repeated PendingTxnOffsets txn_offsets = 40;  // by group, then producer id
///   repeated PutTransaction transactions = 41; // by transactional id
///   repeated RequestTxnPartitions txn_partition_requests = 42; // oldest first, with index
///   repeated StoredConsumerGroup consumer_groups = 43; // { string group = 1; ConsumerGroupRecord record = 2; }
/// }
/// message ClientQuota  { QuotaEntity entity = 1; repeated QuotaValue values = 2; }
/// message TopicState   { string name = 1; uint64 incarnation = 2; uint32 partitions = 3;
///                        repeated ReplicaList replicas = 4; repeated ConfigEntry configs = 5;
///                        repeated uint64 deleted_before = 6; }
/// message Allocation   { RequestId request = 1; int64 producer_id = 2; }
/// message GroupOffsets { string group = 1; repeated CommittedOffset offsets = 2; }
/// message StoredGroup  { string group = 1; GroupRecord record = 2; }
/// message GroupActivity { string group = 1; int64 time_ms = 2; }
/// message PendingTxnOffsets { string group = 1; int64 producer_id = 2; int32 producer_epoch = 3;
///                        int64 commit_time_ms = 4; repeated PendingOffset offsets = 5; }
/// message PendingOffset { CommittedOffset offset = 1; uint64 index = 2; bool superseded = 3; }
/// ```
/// ). Field numbers are on-disk format, as for entries.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetaSnapshotWire {
    /// The last applied Raft index the snapshot covers.
    #[prost(uint64, tag = "1")]
    pub index: u64,
    /// That entry's term.
    #[prost(uint64, tag = "2")]
    pub term: u64,
    /// Topics, by name order.
    #[prost(message, repeated, tag = "3")]
    pub topics: Vec<TopicStateWire>,
    /// The next producer id to hand out.
    #[prost(int64, tag = "4")]
    pub next_producer_id: i64,
    /// Remembered producer id allocations, oldest first.
    #[prost(message, repeated, tag = "5")]
    pub allocations: Vec<AllocationWire>,
    /// Committed offsets per group.
    #[prost(message, repeated, tag = "6")]
    pub offsets: Vec<GroupOffsetsWire>,
    /// Stored group memberships.
    #[prost(message, repeated, tag = "7")]
    pub groups: Vec<StoredGroupWire>,
    /// Groups' last activity times.
    #[prost(message, repeated, tag = "8")]
    pub activity: Vec<GroupActivityWire>,
    /// Remembered request ids, oldest first.
    #[prost(message, repeated, tag = "9")]
    pub applied: Vec<RequestIdWire>,
    /// Every ACL.
    #[prost(message, repeated, tag = "13")]
    pub acls: Vec<AclBindingWire>,
    /// Every SCRAM credential.
    #[prost(message, repeated, tag = "14")]
    pub scram_credentials: Vec<ScramCredentialWire>,
    /// The node-wide flow limits (absent: unlimited).
    #[prost(message, optional, tag = "21")]
    pub flow_limits: Option<FlowLimitsWire>,
    /// Client quotas, in entity order.
    #[prost(message, repeated, tag = "22")]
    pub client_quotas: Vec<ClientQuotaWire>,
    /// Members, by id (empty in snapshots from before runtime membership).
    #[prost(message, repeated, tag = "10")]
    pub members: Vec<MemberWire>,
    /// A membership command was applied (see `ClusterMeta::membership_changed`).
    #[prost(bool, tag = "11")]
    pub membership_changed: bool,
    /// The bootstrap SCRAM users were imported (see `ClusterMeta::scram_users_imported`).
    #[prost(bool, tag = "23")]
    pub scram_users_imported: bool,
    /// Offsets committed in transactions not ended yet, by group then producer id.
    #[prost(message, repeated, tag = "40")]
    pub txn_offsets: Vec<PendingTxnOffsetsWire>,
    /// The transaction coordinator's state, by transactional id.
    #[prost(message, repeated, tag = "41")]
    pub transactions: Vec<super::transactions::PutTransactionWire>,
    /// Transaction version 2's queued requests to add partitions, oldest first.
    #[prost(message, repeated, tag = "42")]
    pub txn_partition_requests: Vec<super::transactions::RequestTxnPartitionsWire>,
    /// Consumer-protocol groups (KIP-848), by group id.
    #[prost(message, repeated, tag = "43")]
    pub consumer_groups: Vec<super::consumer_groups::StoredConsumerGroupWire>,
}

/// One topic in a snapshot.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TopicStateWire {
    /// Topic name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its incarnation (the create command's index).
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
    /// Number of partitions.
    #[prost(uint32, tag = "3")]
    pub partitions: u32,
    /// Replicas per partition, preferred leader first.
    #[prost(message, repeated, tag = "4")]
    pub replicas: Vec<ReplicaListWire>,
    /// Config overrides.
    #[prost(message, repeated, tag = "5")]
    pub configs: Vec<ConfigEntryWire>,
    /// DeleteRecords floors per partition.
    #[prost(uint64, repeated, tag = "6")]
    pub deleted_before: Vec<u64>,
    /// Partitions being reassigned.
    #[prost(message, repeated, tag = "7")]
    pub moving: Vec<MovingWire>,
}

/// A remembered producer id allocation.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocationWire {
    /// The allocating request.
    #[prost(message, optional, tag = "1")]
    pub request: Option<RequestIdWire>,
    /// The id handed out.
    #[prost(int64, tag = "2")]
    pub producer_id: i64,
}

/// A group's committed offsets.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupOffsetsWire {
    /// Consumer group id.
    #[prost(string, tag = "1")]
    pub group: String,
    /// One per partition.
    #[prost(message, repeated, tag = "2")]
    pub offsets: Vec<CommittedOffsetWire>,
}

/// A group's stored membership.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoredGroupWire {
    /// Consumer group id.
    #[prost(string, tag = "1")]
    pub group: String,
    /// The membership.
    #[prost(message, optional, tag = "2")]
    pub record: Option<GroupRecordWire>,
}

/// A group's last activity.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupActivityWire {
    /// Consumer group id.
    #[prost(string, tag = "1")]
    pub group: String,
    /// ms since the epoch.
    #[prost(int64, tag = "2")]
    pub time_ms: i64,
}
