//! How metadata commands are stored in the metadata group's Raft log.
//!
//! An entry written by this version is one format byte, [`FORMAT_PROST_V1`], followed by a
//! protobuf [`MetaEntryWire`] (prost, hand-written message structs, no code generation). Entries
//! written by earlier versions are JSON (serde's encoding of [`MetaEntry`], or of a bare
//! [`MetaCommand`] before request ids): they start with `{` or `"`, never with the format byte,
//! and still decode, so an old data directory replays exactly as before.
//!
//! The protobuf schema (field numbers are part of the on-disk format: never reuse or renumber
//! one; a new field takes a new number and older nodes ignore it):
//!
//! ```text
//! message MetaEntry {
//!   RequestId request = 1;
//!   oneof command {
//!     CreateTopic        create_topic         = 2;
//!     CreatePartitions   create_partitions    = 3;
//!     DeleteTopic        delete_topic         = 4;
//!     AllocateProducerId allocate_producer_id = 5;
//!     CommitOffsets      commit_offsets       = 6;
//!     AlterTopicConfigs  alter_topic_configs  = 7;
//!     DeleteRecords      delete_records       = 8;
//!     DeleteGroupOffsets delete_group_offsets = 9;
//!     ElectPreferredLeader elect_preferred_leader = 10;
//!     StoreGroup         store_group          = 11;
//!     ExpireGroupOffsets expire_group_offsets = 12;
//!     CreateAcls         create_acls          = 13;
//!     DeleteAcls         delete_acls          = 14;
//!     ScramCredential    upsert_scram_credential = 15;
//!     DeleteScramCredential delete_scram_credential = 16;
//!     ImportScramUsers   import_scram_users   = 29;
//!     SetFlowLimits      set_flow_limits      = 27;
//!     AlterClientQuotas  alter_client_quotas  = 28;
//!     AddMember          add_member           = 23;
//!     RemoveMember       remove_member        = 24;
//!     FinishReassignment finish_reassignment  = 25;
//!     TransferLeader     transfer_leader      = 17;
//!     AdminAddress       admin_address        = 18;
//!     CommitTxnOffsets   commit_txn_offsets   = 40;
//!     EndTxnOffsets      end_txn_offsets      = 41;
//!     PutTransaction     put_transaction      = 42;
//!     TxnMarkersWritten  txn_markers_written  = 43;
//!     ExpireTransactionalId expire_transactional_id = 44;
//!     RequestTxnPartitions request_txn_partitions = 45;
//!     StoreConsumerGroup store_consumer_group = 46;
//!   }
//! }
//! message AddMember          { uint64 id = 1; string name = 2; string peer_addr = 3;
//!                              string kafka_addr = 4; repeated Member members = 5; }
//! message RemoveMember       { uint64 id = 1; repeated Member members = 2; }
//! message Member             { uint64 id = 1; string name = 2; string peer_addr = 3;
//!                              string kafka_addr = 4; bool leaving = 5; }
//! message FinishReassignment { string name = 1; uint64 incarnation = 2; uint32 partition = 3; }
//! message RequestId          { uint64 node = 1; uint64 boot = 2; uint64 seq = 3; }
//! message CreateTopic        { string name = 1; uint32 partitions = 2;
//!                              repeated ReplicaList replicas = 3;
//!                              repeated ConfigEntry configs = 4; }
//! message ConfigEntry        { string name = 1; string value = 2; }
//! message CreatePartitions   { string name = 1; uint64 incarnation = 2; uint32 count = 3;
//!                              repeated ReplicaList replicas = 4; }
//! message ReplicaList        { repeated uint64 nodes = 1; }  // one partition, leader first
//! message DeleteTopic        { string name = 1; optional uint64 incarnation = 2; }
//! message AllocateProducerId { }
//! message CommitOffsets      { string group = 1; repeated CommittedOffset offsets = 2;
//!                              int64 commit_time_ms = 3; }
//! message CommittedOffset    { string topic = 1; int32 partition = 2; int64 offset = 3;
//!                              int32 leader_epoch = 4; optional string metadata = 5; }
//! message AlterTopicConfigs  { string name = 1; uint64 incarnation = 2;
//!                              repeated ConfigEntry set = 3; repeated string remove = 4;
//!                              bool replace_all = 5; }
//! message DeleteRecords      { string name = 1; uint64 incarnation = 2; uint32 partition = 3;
//!                              uint64 offset = 4; }
//! message DeleteGroupOffsets { string group = 1; bool whole_group = 2;
//!                              repeated TopicPartition partitions = 3; }
//! message TopicPartition     { string topic = 1; int32 partition = 2; }
//! message ElectPreferredLeader { string name = 1; uint64 incarnation = 2; uint32 partition = 3; }
//! message StoreGroup         { string group = 1; optional GroupRecord record = 2;
//!                              int64 time_ms = 3; }
//! message ExpireGroupOffsets { string group = 1; int64 activity_ms = 2; }
//! message CommitTxnOffsets   { string group = 1; int64 producer_id = 2; int32 producer_epoch = 3;
//!                              repeated CommittedOffset offsets = 4; int64 commit_time_ms = 5; }
//! message EndTxnOffsets      { int64 producer_id = 1; bool all_groups = 2;
//!                              repeated string groups = 3; bool commit = 4; }
//! message SetFlowLimits      { FlowLimits limits = 1; }
//! message FlowLimits         { optional uint64 produce_requests_per_sec = 1;
//!                              optional uint64 produce_bytes_per_sec = 2;
//!                              optional uint64 catchup_read_requests_per_sec = 3;
//!                              optional uint64 catchup_read_bytes_per_sec = 4;
//!                              optional uint64 tail_read_requests_per_sec = 5;
//!                              optional uint64 tail_read_bytes_per_sec = 6;
//!                              optional uint64 catchup_replication_bytes_per_sec = 7; }
//! message AlterClientQuotas  { repeated QuotaAlteration alterations = 1; }
//! message QuotaAlteration    { QuotaEntity entity = 1; repeated QuotaValue set = 2;
//!                              repeated string remove = 3; }
//! message QuotaEntity        { optional EntityName user = 1; optional EntityName client_id = 2; }
//! message EntityName         { bool is_default = 1; string name = 2; }
//! message QuotaValue         { string key = 1; double value = 2; }
//! message TransferLeader     { string name = 1; uint64 incarnation = 2; uint32 partition = 3;
//!                              uint64 to = 4; }
//! message AdminAddress       { uint64 node = 1; string address = 2; }
//! message GroupRecord        { int32 generation = 1; string protocol_type = 2;
//!                              string protocol = 3; string leader = 4;
//!                              repeated GroupMember members = 5; }  // in join order
//! message GroupMember        { string member_id = 1; optional string instance_id = 2;
//!                              string client_id = 3; string client_host = 4;
//!                              int32 session_timeout_ms = 5; int32 rebalance_timeout_ms = 6;
//!                              repeated GroupProtocol protocols = 7; bytes assignment = 8; }
//! message GroupProtocol      { string name = 1; bytes metadata = 2; }
//! message CreateAcls         { repeated AclBinding acls = 1; }
//! message DeleteAcls         { repeated AclBinding acls = 1; }
//! message AclBinding         { int32 resource_type = 1; string resource_name = 2;
//!                              int32 pattern_type = 3; string principal = 4; string host = 5;
//!                              int32 operation = 6; int32 permission = 7; }  // Kafka's codes
//! message ScramCredential    { string user = 1; int32 mechanism = 2; bytes salt = 3;
//!                              uint32 iterations = 4; bytes stored_key = 5;
//!                              bytes server_key = 6; }  // mechanism: Kafka's type (1, 2)
//! message DeleteScramCredential { string user = 1; int32 mechanism = 2; }
//! message ImportScramUsers   { repeated ScramCredential credentials = 1; }
//! message PutTransaction     { string transactional_id = 1; TxnRecord record = 2; }
//! message TxnRecord          { int64 producer_id = 1; int32 producer_epoch = 2;
//!                              int32 timeout_ms = 3; int32 status = 4;  // TxnStatus::code
//!                              repeated TopicPartition partitions = 5;
//!                              repeated string groups = 6; int64 start_ms = 7;
//!                              int64 update_ms = 8; int32 coordinator_epoch = 9; }
//! message TxnMarkersWritten  { string transactional_id = 1; int64 producer_id = 2;
//!                              int32 producer_epoch = 3; repeated TopicPartition partitions = 4;
//!                              int64 time_ms = 5; }
//! message ExpireTransactionalId { string transactional_id = 1; int64 producer_id = 2;
//!                              int32 producer_epoch = 3; int64 update_ms = 4; }
//! message StoreConsumerGroup { string group = 1; optional ConsumerGroupRecord record = 2;
//!                              int64 time_ms = 3; }  // KIP-848 groups; record absent: gone
//! message ConsumerGroupRecord { int32 group_epoch = 1; int32 assignment_epoch = 2;
//!                              string assignor = 3; repeated ConsumerMember members = 4;
//!                              repeated TopicPartitionCount partition_counts = 5; }
//! message ConsumerMember     { string member_id = 1; optional string instance_id = 2;
//!                              optional string rack = 3; string client_id = 4;
//!                              string client_host = 5; repeated string subscribed_names = 6;
//!                              optional string subscribed_regex = 7;
//!                              optional string server_assignor = 8;
//!                              int32 rebalance_timeout_ms = 9; int32 epoch = 10;
//!                              int32 previous_epoch = 11; int32 state = 12;
//!                              repeated TopicPartitions assigned = 13;
//!                              repeated TopicPartitions pending_revocation = 14;
//!                              repeated TopicPartitions target = 15;
//!                              optional ClassicMember classic = 16; }  // classic-protocol member
//! message ClassicMember      { int32 session_timeout_ms = 1; repeated ClassicProtocol protocols = 2; }
//! message ClassicProtocol    { string name = 1; bytes metadata = 2; }
//! message TopicPartitions    { bytes topic_id = 1; repeated int32 partitions = 2; }
//! message TopicPartitionCount { bytes topic_id = 1; uint32 partitions = 2; }
//! ```
//!
//! A command kind this node does not know (a `oneof` case added by a newer version) decodes as
//! an entry without a command: [`MetaDecodeError::UnknownCommand`], which every node of this
//! version skips alike. An unknown format byte is [`MetaDecodeError::UnknownFormat`].
//!
//! **Mixed clusters.** A node of an earlier release reads only JSON and skips anything else,
//! so its metadata would diverge (topics not opened, producer ids handed out twice). While any
//! peer's last hello was of an earlier release ([`crate::replication::peer_wire::PeerVersions`]), a
//! node writes its commands in that JSON ([`encode_entry_json`]); once every node is upgraded, only
//! protobuf is written.
//!
//! [`MetaCommand`] stays the in-memory type; this module only converts it to and from the wire
//! structs (`From` impls), so adding a field to a command means one wire field here and one
//! line in each conversion.

mod commands;
pub(crate) mod consumer_groups;
mod groups;
mod json;
mod messages;
mod snapshot;
#[cfg(test)]
mod tests;
pub(crate) mod transactions;
mod txn_offsets;

use prost::Message as _;
use thiserror::Error;

use crate::metadata::{MetaCommand, MetaEntry, RequestId};

pub use consumer_groups::*;
pub use groups::*;
pub use json::encode_entry_json;
pub use messages::*;
pub use snapshot::*;
pub use transactions::*;
pub use txn_offsets::*;

/// First byte of a metadata entry in the protobuf format, version 1. JSON entries of older
/// versions start with `{` or `"`.
pub const FORMAT_PROST_V1: u8 = 0x01;

/// Why a metadata entry did not decode. Every node decodes the same bytes the same way, so
/// every node skips the same entries.
#[derive(Debug, Error)]
pub enum MetaDecodeError {
    /// The entry is empty.
    #[error("empty metadata entry")]
    Empty,
    /// The first byte is neither a known format byte nor the start of a JSON entry.
    #[error("unknown metadata entry format byte {0:#04x} (this version reads JSON and format 1)")]
    UnknownFormat(u8),
    /// The protobuf body did not decode (truncated, bad UTF-8, wrong wire types).
    #[error("undecodable protobuf metadata entry: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// The entry names no command this version knows (a newer version's command kind).
    #[error("metadata entry with an unknown command kind")]
    UnknownCommand,
    /// A JSON entry of an older version did not decode.
    #[error("undecodable JSON metadata entry: {0}")]
    Json(#[from] serde_json::Error),
}

/// Encodes `entry` in the current format: [`FORMAT_PROST_V1`] then the protobuf body.
pub fn encode_entry(entry: &MetaEntry) -> Vec<u8> {
    let wire = MetaEntryWire::from(entry);
    let mut out = Vec::with_capacity(1 + wire.encoded_len());
    out.push(FORMAT_PROST_V1);
    wire.encode(&mut out)
        .expect("a Vec grows to fit the protobuf encoding");
    out
}

/// Decodes an entry of any version: the protobuf format, JSON with a request id, or JSON of a
/// bare command (before request ids; no request id then).
pub fn decode_entry(data: &[u8]) -> Result<(Option<RequestId>, MetaCommand), MetaDecodeError> {
    match data.first() {
        None => Err(MetaDecodeError::Empty),
        Some(&FORMAT_PROST_V1) => {
            let wire = MetaEntryWire::decode(&data[1..])?;
            let command = wire.command.ok_or(MetaDecodeError::UnknownCommand)?;
            Ok((
                wire.request.map(RequestId::from),
                MetaCommand::from(command),
            ))
        }
        Some(b'{' | b'"') => json::decode_json(data),
        Some(&other) => Err(MetaDecodeError::UnknownFormat(other)),
    }
}
