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

use std::collections::BTreeMap;

use prost::Message as _;
use thiserror::Error;

use crate::flow::settings::{FlowLimits, QuotaAlteration};
use crate::flow::wire::{
    AlterClientQuotasWire, ClientQuotaWire, FlowLimitsWire, QuotaAlterationWire, SetFlowLimitsWire,
};
use crate::metadata::{
    CommittedOffset, GroupMemberRecord, GroupRecord, MetaCommand, MetaEntry, RequestId,
};
use crate::security::acl::AclBinding;
use crate::security::scram::{ScramCredential, ScramMechanism};

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

/// Encodes `entry` in the JSON of earlier releases (serde's encoding of [`MetaEntry`]), for a
/// cluster where a node of such a release still runs: it skips entries it cannot decode, and
/// its metadata would diverge from the others'.
pub fn encode_entry_json(entry: &MetaEntry) -> Vec<u8> {
    serde_json::to_vec(entry).expect("metadata entries serialize to JSON (strings and integers)")
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
        Some(b'{' | b'"') => decode_json(data),
        Some(&other) => Err(MetaDecodeError::UnknownFormat(other)),
    }
}

/// The JSON entries of versions before the protobuf format.
fn decode_json(data: &[u8]) -> Result<(Option<RequestId>, MetaCommand), MetaDecodeError> {
    match serde_json::from_slice::<MetaEntry>(data) {
        Ok(e) => Ok((Some(e.request), e.command)),
        Err(_) => Ok((None, serde_json::from_slice::<MetaCommand>(data)?)),
    }
}

/// `MetaEntry` on the wire (see the module documentation for the schema).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetaEntryWire {
    /// The request id; absent only in entries that never had one.
    #[prost(message, optional, tag = "1")]
    pub request: Option<RequestIdWire>,
    /// The command; `None` when it is a kind this version does not know.
    #[prost(
        oneof = "CommandWire",
        tags = "2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 23, 24, 25, 27, 28, 29"
    )]
    pub command: Option<CommandWire>,
}

/// `RequestId` on the wire.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct RequestIdWire {
    /// The proposing node.
    #[prost(uint64, tag = "1")]
    pub node: u64,
    /// Drawn once per process start.
    #[prost(uint64, tag = "2")]
    pub boot: u64,
    /// Counts requests of this process.
    #[prost(uint64, tag = "3")]
    pub seq: u64,
}

/// The command kinds, fields 2..=18, 23..=25, 27 and 28 of `MetaEntry`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum CommandWire {
    /// [`MetaCommand::CreateTopic`].
    #[prost(message, tag = "2")]
    CreateTopic(CreateTopicWire),
    /// [`MetaCommand::CreatePartitions`].
    #[prost(message, tag = "3")]
    CreatePartitions(CreatePartitionsWire),
    /// [`MetaCommand::DeleteTopic`].
    #[prost(message, tag = "4")]
    DeleteTopic(DeleteTopicWire),
    /// [`MetaCommand::AllocateProducerId`].
    #[prost(message, tag = "5")]
    AllocateProducerId(AllocateProducerIdWire),
    /// [`MetaCommand::CommitOffsets`].
    #[prost(message, tag = "6")]
    CommitOffsets(CommitOffsetsWire),
    /// [`MetaCommand::AlterTopicConfigs`].
    #[prost(message, tag = "7")]
    AlterTopicConfigs(AlterTopicConfigsWire),
    /// [`MetaCommand::DeleteRecords`].
    #[prost(message, tag = "8")]
    DeleteRecords(DeleteRecordsWire),
    /// [`MetaCommand::DeleteGroupOffsets`].
    #[prost(message, tag = "9")]
    DeleteGroupOffsets(DeleteGroupOffsetsWire),
    /// [`MetaCommand::ElectPreferredLeader`].
    #[prost(message, tag = "10")]
    ElectPreferredLeader(ElectPreferredLeaderWire),
    /// [`MetaCommand::StoreGroup`].
    #[prost(message, tag = "11")]
    StoreGroup(StoreGroupWire),
    /// [`MetaCommand::ExpireGroupOffsets`].
    #[prost(message, tag = "12")]
    ExpireGroupOffsets(ExpireGroupOffsetsWire),
    /// [`MetaCommand::CreateAcls`].
    #[prost(message, tag = "13")]
    CreateAcls(AclListWire),
    /// [`MetaCommand::DeleteAcls`].
    #[prost(message, tag = "14")]
    DeleteAcls(AclListWire),
    /// [`MetaCommand::UpsertScramCredential`].
    #[prost(message, tag = "15")]
    UpsertScramCredential(ScramCredentialWire),
    /// [`MetaCommand::DeleteScramCredential`].
    #[prost(message, tag = "16")]
    DeleteScramCredential(DeleteScramCredentialWire),
    /// [`MetaCommand::ImportScramUsers`].
    #[prost(message, tag = "29")]
    ImportScramUsers(ImportScramUsersWire),
    /// [`MetaCommand::SetFlowLimits`].
    #[prost(message, tag = "27")]
    SetFlowLimits(SetFlowLimitsWire),
    /// [`MetaCommand::AlterClientQuotas`].
    #[prost(message, tag = "28")]
    AlterClientQuotas(AlterClientQuotasWire),

    /// [`MetaCommand::AddMember`].
    #[prost(message, tag = "23")]
    AddMember(AddMemberWire),
    /// [`MetaCommand::RemoveMember`].
    #[prost(message, tag = "24")]
    RemoveMember(RemoveMemberWire),
    /// [`MetaCommand::FinishReassignment`].
    #[prost(message, tag = "25")]
    FinishReassignment(FinishReassignmentWire),
    /// [`MetaCommand::TransferLeader`].
    #[prost(message, tag = "17")]
    TransferLeader(TransferLeaderWire),
    /// [`MetaCommand::AdminAddress`].
    #[prost(message, tag = "18")]
    AdminAddress(AdminAddressWire),
}

/// `TransferLeader` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TransferLeaderWire {
    /// Topic name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The incarnation the request was made against.
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
    /// Partition index.
    #[prost(uint32, tag = "3")]
    pub partition: u32,
    /// The replica that should lead.
    #[prost(uint64, tag = "4")]
    pub to: u64,
}

/// `AdminAddress` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AdminAddressWire {
    /// Node id.
    #[prost(uint64, tag = "1")]
    pub node: u64,
    /// Its admin listener, `HOST:PORT`.
    #[prost(string, tag = "2")]
    pub address: String,
}

/// `CreateAcls` and `DeleteAcls` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AclListWire {
    /// The bindings.
    #[prost(message, repeated, tag = "1")]
    pub acls: Vec<AclBindingWire>,
}

/// One ACL on the wire, with Kafka's codes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AclBindingWire {
    /// Kafka's resource type code.
    #[prost(int32, tag = "1")]
    pub resource_type: i32,
    /// Resource name or prefix.
    #[prost(string, tag = "2")]
    pub resource_name: String,
    /// Kafka's pattern type code.
    #[prost(int32, tag = "3")]
    pub pattern_type: i32,
    /// `Type:name`.
    #[prost(string, tag = "4")]
    pub principal: String,
    /// Host or `*`.
    #[prost(string, tag = "5")]
    pub host: String,
    /// Kafka's operation code.
    #[prost(int32, tag = "6")]
    pub operation: i32,
    /// Kafka's permission type code.
    #[prost(int32, tag = "7")]
    pub permission: i32,
}

impl From<&AclBinding> for AclBindingWire {
    fn from(b: &AclBinding) -> Self {
        AclBindingWire {
            resource_type: i32::from(b.resource_type.code()),
            resource_name: b.resource_name.clone(),
            pattern_type: i32::from(b.pattern_type.code()),
            principal: b.principal.clone(),
            host: b.host.clone(),
            operation: i32::from(b.operation.code()),
            permission: i32::from(b.permission.code()),
        }
    }
}

impl AclBindingWire {
    /// The binding, or `None` (logged) when a code is not one this version knows: every node
    /// of a version drops the same ones.
    pub fn to_binding(&self) -> Option<AclBinding> {
        let code = |c: i32| i8::try_from(c).unwrap_or(0);
        match AclBinding::from_kafka(
            code(self.resource_type),
            &self.resource_name,
            code(self.pattern_type),
            &self.principal,
            &self.host,
            code(self.operation),
            code(self.permission),
        ) {
            Ok(b) => Some(b),
            Err(e) => {
                tracing::error!("an ACL in the metadata is not applied: {e}");
                None
            }
        }
    }
}

fn acls_from_wire(list: AclListWire) -> Vec<AclBinding> {
    list.acls
        .iter()
        .filter_map(AclBindingWire::to_binding)
        .collect()
}

fn acls_to_wire(acls: &[AclBinding]) -> AclListWire {
    AclListWire {
        acls: acls.iter().map(AclBindingWire::from).collect(),
    }
}

/// A user's SCRAM credential for one mechanism on the wire (`UpsertScramCredential`, and in
/// snapshots).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScramCredentialWire {
    /// The user name.
    #[prost(string, tag = "1")]
    pub user: String,
    /// Kafka's mechanism type (1, 2).
    #[prost(int32, tag = "2")]
    pub mechanism: i32,
    /// The salt.
    #[prost(bytes = "vec", tag = "3")]
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    #[prost(uint32, tag = "4")]
    pub iterations: u32,
    /// `H(ClientKey)`.
    #[prost(bytes = "vec", tag = "5")]
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    #[prost(bytes = "vec", tag = "6")]
    pub server_key: Vec<u8>,
}

impl ScramCredentialWire {
    /// `credential` of `user`.
    pub fn new(user: &str, credential: &ScramCredential) -> ScramCredentialWire {
        ScramCredentialWire {
            user: user.to_owned(),
            mechanism: i32::from(credential.mechanism.kafka_type()),
            salt: credential.salt.clone(),
            iterations: credential.iterations,
            stored_key: credential.stored_key.clone(),
            server_key: credential.server_key.clone(),
        }
    }

    /// The user and credential; `None` for a mechanism this version does not know.
    pub fn to_credential(self) -> Option<(String, ScramCredential)> {
        let mechanism = ScramMechanism::from_kafka_type(i8::try_from(self.mechanism).unwrap_or(0))?;
        Some((
            self.user,
            ScramCredential {
                mechanism,
                salt: self.salt,
                iterations: self.iterations,
                stored_key: self.stored_key,
                server_key: self.server_key,
            },
        ))
    }
}

/// `ImportScramUsers` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImportScramUsersWire {
    /// The configured credentials.
    #[prost(message, repeated, tag = "1")]
    pub credentials: Vec<ScramCredentialWire>,
}

/// `DeleteScramCredential` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteScramCredentialWire {
    /// The user name.
    #[prost(string, tag = "1")]
    pub user: String,
    /// Kafka's mechanism type.
    #[prost(int32, tag = "2")]
    pub mechanism: i32,
}

/// `AddMember` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AddMemberWire {
    /// Raft id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Raft peer address.
    #[prost(string, tag = "3")]
    pub peer_addr: String,
    /// Advertised Kafka address.
    #[prost(string, tag = "4")]
    pub kafka_addr: String,
    /// The member list the proposer knew.
    #[prost(message, repeated, tag = "5")]
    pub members: Vec<MemberWire>,
}

/// `RemoveMember` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RemoveMemberWire {
    /// Raft id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The member list the proposer knew.
    #[prost(message, repeated, tag = "2")]
    pub members: Vec<MemberWire>,
}

/// A member list on the wire.
pub fn members_to_wire(members: &BTreeMap<u64, crate::metadata::MemberRecord>) -> Vec<MemberWire> {
    members
        .iter()
        .map(|(id, m)| MemberWire {
            id: *id,
            name: m.name.clone(),
            peer_addr: m.peer_addr.clone(),
            kafka_addr: m.kafka_addr.clone(),
            leaving: m.leaving,
        })
        .collect()
}

/// A member list from the wire.
pub fn members_from_wire(members: Vec<MemberWire>) -> BTreeMap<u64, crate::metadata::MemberRecord> {
    members
        .into_iter()
        .map(|m| {
            (
                m.id,
                crate::metadata::MemberRecord {
                    name: m.name,
                    peer_addr: m.peer_addr,
                    kafka_addr: m.kafka_addr,
                    leaving: m.leaving,
                },
            )
        })
        .collect()
}

/// `FinishReassignment` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FinishReassignmentWire {
    /// Topic name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Incarnation.
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
    /// Partition index.
    #[prost(uint32, tag = "3")]
    pub partition: u32,
}

/// A member in a snapshot.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MemberWire {
    /// Raft id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Raft peer address (empty for an initial member: from the configuration).
    #[prost(string, tag = "3")]
    pub peer_addr: String,
    /// Advertised Kafka address (empty: from its hellos).
    #[prost(string, tag = "4")]
    pub kafka_addr: String,
    /// Being removed.
    #[prost(bool, tag = "5")]
    pub leaving: bool,
}

/// A partition being reassigned, in a snapshot.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MovingWire {
    /// Partition index.
    #[prost(uint32, tag = "1")]
    pub partition: u32,
    /// Its replicas before the reassignment.
    #[prost(uint64, repeated, tag = "2")]
    pub old_replicas: Vec<u64>,
}

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

/// `ElectPreferredLeader` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ElectPreferredLeaderWire {
    /// Topic name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The incarnation the request was made against.
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
    /// Partition index.
    #[prost(uint32, tag = "3")]
    pub partition: u32,
}

/// One config override on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigEntryWire {
    /// Kafka's config name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

pub(crate) fn configs_to_wire(configs: &BTreeMap<String, String>) -> Vec<ConfigEntryWire> {
    configs
        .iter()
        .map(|(name, value)| ConfigEntryWire {
            name: name.clone(),
            value: value.clone(),
        })
        .collect()
}

pub(crate) fn configs_from_wire(configs: Vec<ConfigEntryWire>) -> BTreeMap<String, String> {
    configs.into_iter().map(|c| (c.name, c.value)).collect()
}

/// `AlterTopicConfigs` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterTopicConfigsWire {
    /// Topic name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The incarnation the request was made against.
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
    /// Overrides to set.
    #[prost(message, repeated, tag = "3")]
    pub set: Vec<ConfigEntryWire>,
    /// Overrides to remove.
    #[prost(string, repeated, tag = "4")]
    pub remove: Vec<String>,
    /// Replace every override.
    #[prost(bool, tag = "5")]
    pub replace_all: bool,
}

/// `DeleteRecords` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteRecordsWire {
    /// Topic name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The incarnation the request was made against.
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
    /// Partition index.
    #[prost(uint32, tag = "3")]
    pub partition: u32,
    /// The new log start offset.
    #[prost(uint64, tag = "4")]
    pub offset: u64,
}

/// `DeleteGroupOffsets` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteGroupOffsetsWire {
    /// Consumer group id.
    #[prost(string, tag = "1")]
    pub group: String,
    /// Every offset of the group (`partitions` is then empty).
    #[prost(bool, tag = "2")]
    pub whole_group: bool,
    /// The partitions whose offsets go.
    #[prost(message, repeated, tag = "3")]
    pub partitions: Vec<TopicPartitionWire>,
}

/// A (topic, partition) on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TopicPartitionWire {
    /// Topic name.
    #[prost(string, tag = "1")]
    pub topic: String,
    /// Partition index.
    #[prost(int32, tag = "2")]
    pub partition: i32,
}

/// `CreateTopic` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateTopicWire {
    /// Topic name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Number of partitions.
    #[prost(uint32, tag = "2")]
    pub partitions: u32,
    /// Each partition's replicas, preferred leader first (empty: every member, as commands
    /// written before replica placement).
    #[prost(message, repeated, tag = "3")]
    pub replicas: Vec<ReplicaListWire>,
    /// The topic's config overrides.
    #[prost(message, repeated, tag = "4")]
    pub configs: Vec<ConfigEntryWire>,
}

/// One partition's replicas on the wire, preferred leader first.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReplicaListWire {
    /// Node ids.
    #[prost(uint64, repeated, tag = "1")]
    pub nodes: Vec<u64>,
}

pub(crate) fn replicas_to_wire(replicas: &[Vec<u64>]) -> Vec<ReplicaListWire> {
    replicas
        .iter()
        .map(|nodes| ReplicaListWire {
            nodes: nodes.clone(),
        })
        .collect()
}

pub(crate) fn replicas_from_wire(replicas: Vec<ReplicaListWire>) -> Vec<Vec<u64>> {
    replicas.into_iter().map(|r| r.nodes).collect()
}

/// `CreatePartitions` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreatePartitionsWire {
    /// Topic name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The incarnation the request was made against.
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
    /// The new total number of partitions.
    #[prost(uint32, tag = "3")]
    pub count: u32,
    /// The replicas of every partition `0..count`, preferred leader first (see
    /// [`MetaCommand::CreatePartitions`]).
    #[prost(message, repeated, tag = "4")]
    pub replicas: Vec<ReplicaListWire>,
}

/// `DeleteTopic` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteTopicWire {
    /// Topic name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The incarnation to delete; absent: whatever is there under the name.
    #[prost(uint64, optional, tag = "2")]
    pub incarnation: Option<u64>,
}

/// `AllocateProducerId` on the wire (no fields).
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct AllocateProducerIdWire {}

/// `CommitOffsets` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommitOffsetsWire {
    /// Consumer group id.
    #[prost(string, tag = "1")]
    pub group: String,
    /// One entry per partition.
    #[prost(message, repeated, tag = "2")]
    pub offsets: Vec<CommittedOffsetWire>,
    /// The proposer's wall clock at the commit, ms since the epoch (0: unknown).
    #[prost(int64, tag = "3")]
    pub commit_time_ms: i64,
}

/// `CommittedOffset` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommittedOffsetWire {
    /// Topic name.
    #[prost(string, tag = "1")]
    pub topic: String,
    /// Partition index.
    #[prost(int32, tag = "2")]
    pub partition: i32,
    /// The next offset the group will consume.
    #[prost(int64, tag = "3")]
    pub offset: i64,
    /// Leader epoch the client saw, -1 when unknown.
    #[prost(int32, tag = "4")]
    pub leader_epoch: i32,
    /// Client metadata string.
    #[prost(string, optional, tag = "5")]
    pub metadata: Option<String>,
}

impl From<&MetaEntry> for MetaEntryWire {
    fn from(e: &MetaEntry) -> Self {
        MetaEntryWire {
            request: Some(RequestIdWire::from(e.request)),
            command: Some(CommandWire::from(&e.command)),
        }
    }
}

impl From<RequestId> for RequestIdWire {
    fn from(r: RequestId) -> Self {
        RequestIdWire {
            node: r.node,
            boot: r.boot,
            seq: r.seq,
        }
    }
}

impl From<RequestIdWire> for RequestId {
    fn from(r: RequestIdWire) -> Self {
        RequestId {
            node: r.node,
            boot: r.boot,
            seq: r.seq,
        }
    }
}

impl From<&MetaCommand> for CommandWire {
    fn from(c: &MetaCommand) -> Self {
        match c {
            MetaCommand::CreateTopic {
                name,
                partitions,
                replicas,
                configs,
            } => CommandWire::CreateTopic(CreateTopicWire {
                name: name.clone(),
                partitions: *partitions,
                replicas: replicas_to_wire(replicas),
                configs: configs_to_wire(configs),
            }),
            MetaCommand::CreatePartitions {
                name,
                incarnation,
                count,
                replicas,
            } => CommandWire::CreatePartitions(CreatePartitionsWire {
                name: name.clone(),
                incarnation: *incarnation,
                count: *count,
                replicas: replicas_to_wire(replicas),
            }),
            MetaCommand::DeleteTopic { name, incarnation } => {
                CommandWire::DeleteTopic(DeleteTopicWire {
                    name: name.clone(),
                    incarnation: *incarnation,
                })
            }
            MetaCommand::AllocateProducerId => {
                CommandWire::AllocateProducerId(AllocateProducerIdWire {})
            }
            MetaCommand::CommitOffsets {
                group,
                offsets,
                commit_time_ms,
            } => CommandWire::CommitOffsets(CommitOffsetsWire {
                group: group.clone(),
                offsets: offsets.iter().map(CommittedOffsetWire::from).collect(),
                commit_time_ms: *commit_time_ms,
            }),
            MetaCommand::AlterTopicConfigs {
                name,
                incarnation,
                set,
                remove,
                replace_all,
            } => CommandWire::AlterTopicConfigs(AlterTopicConfigsWire {
                name: name.clone(),
                incarnation: *incarnation,
                set: configs_to_wire(set),
                remove: remove.clone(),
                replace_all: *replace_all,
            }),
            MetaCommand::DeleteRecords {
                name,
                incarnation,
                partition,
                offset,
            } => CommandWire::DeleteRecords(DeleteRecordsWire {
                name: name.clone(),
                incarnation: *incarnation,
                partition: *partition,
                offset: *offset,
            }),
            MetaCommand::ElectPreferredLeader {
                name,
                incarnation,
                partition,
            } => CommandWire::ElectPreferredLeader(ElectPreferredLeaderWire {
                name: name.clone(),
                incarnation: *incarnation,
                partition: *partition,
            }),
            MetaCommand::TransferLeader {
                name,
                incarnation,
                partition,
                to,
            } => CommandWire::TransferLeader(TransferLeaderWire {
                name: name.clone(),
                incarnation: *incarnation,
                partition: *partition,
                to: *to,
            }),
            MetaCommand::AdminAddress { node, address } => {
                CommandWire::AdminAddress(AdminAddressWire {
                    node: *node,
                    address: address.clone(),
                })
            }
            MetaCommand::DeleteGroupOffsets { group, partitions } => {
                CommandWire::DeleteGroupOffsets(DeleteGroupOffsetsWire {
                    group: group.clone(),
                    whole_group: partitions.is_none(),
                    partitions: partitions
                        .iter()
                        .flatten()
                        .map(|(topic, partition)| TopicPartitionWire {
                            topic: topic.clone(),
                            partition: *partition,
                        })
                        .collect(),
                })
            }
            MetaCommand::StoreGroup {
                group,
                record,
                time_ms,
            } => CommandWire::StoreGroup(StoreGroupWire {
                group: group.clone(),
                record: record.as_ref().map(GroupRecordWire::from),
                time_ms: *time_ms,
            }),
            MetaCommand::ExpireGroupOffsets { group, activity_ms } => {
                CommandWire::ExpireGroupOffsets(ExpireGroupOffsetsWire {
                    group: group.clone(),
                    activity_ms: *activity_ms,
                })
            }
            MetaCommand::CreateAcls { acls } => CommandWire::CreateAcls(acls_to_wire(acls)),
            MetaCommand::DeleteAcls { acls } => CommandWire::DeleteAcls(acls_to_wire(acls)),
            MetaCommand::UpsertScramCredential {
                user,
                mechanism,
                salt,
                iterations,
                stored_key,
                server_key,
            } => CommandWire::UpsertScramCredential(ScramCredentialWire {
                user: user.clone(),
                mechanism: i32::from(*mechanism),
                salt: salt.clone(),
                iterations: *iterations,
                stored_key: stored_key.clone(),
                server_key: server_key.clone(),
            }),
            MetaCommand::ImportScramUsers { credentials } => {
                CommandWire::ImportScramUsers(ImportScramUsersWire {
                    credentials: credentials.iter().map(ScramCredentialWire::from).collect(),
                })
            }
            MetaCommand::DeleteScramCredential { user, mechanism } => {
                CommandWire::DeleteScramCredential(DeleteScramCredentialWire {
                    user: user.clone(),
                    mechanism: i32::from(*mechanism),
                })
            }
            MetaCommand::SetFlowLimits { limits } => {
                CommandWire::SetFlowLimits(SetFlowLimitsWire {
                    limits: Some(FlowLimitsWire::from(limits)),
                })
            }
            MetaCommand::AlterClientQuotas { alterations } => {
                CommandWire::AlterClientQuotas(AlterClientQuotasWire {
                    alterations: alterations.iter().map(QuotaAlterationWire::from).collect(),
                })
            }
            MetaCommand::AddMember {
                id,
                name,
                peer_addr,
                kafka_addr,
                members,
            } => CommandWire::AddMember(AddMemberWire {
                id: *id,
                name: name.clone(),
                peer_addr: peer_addr.clone(),
                kafka_addr: kafka_addr.clone(),
                members: members_to_wire(members),
            }),
            MetaCommand::RemoveMember { id, members } => {
                CommandWire::RemoveMember(RemoveMemberWire {
                    id: *id,
                    members: members_to_wire(members),
                })
            }
            MetaCommand::FinishReassignment {
                name,
                incarnation,
                partition,
            } => CommandWire::FinishReassignment(FinishReassignmentWire {
                name: name.clone(),
                incarnation: *incarnation,
                partition: *partition,
            }),
        }
    }
}

impl From<CommandWire> for MetaCommand {
    fn from(c: CommandWire) -> Self {
        match c {
            CommandWire::CreateTopic(c) => MetaCommand::CreateTopic {
                name: c.name,
                partitions: c.partitions,
                replicas: replicas_from_wire(c.replicas),
                configs: configs_from_wire(c.configs),
            },
            CommandWire::CreatePartitions(c) => MetaCommand::CreatePartitions {
                name: c.name,
                incarnation: c.incarnation,
                count: c.count,
                replicas: replicas_from_wire(c.replicas),
            },
            CommandWire::DeleteTopic(c) => MetaCommand::DeleteTopic {
                name: c.name,
                incarnation: c.incarnation,
            },
            CommandWire::AllocateProducerId(AllocateProducerIdWire {}) => {
                MetaCommand::AllocateProducerId
            }
            CommandWire::CommitOffsets(c) => MetaCommand::CommitOffsets {
                group: c.group,
                offsets: c.offsets.into_iter().map(CommittedOffset::from).collect(),
                commit_time_ms: c.commit_time_ms,
            },
            CommandWire::AlterTopicConfigs(c) => MetaCommand::AlterTopicConfigs {
                name: c.name,
                incarnation: c.incarnation,
                set: configs_from_wire(c.set),
                remove: c.remove,
                replace_all: c.replace_all,
            },
            CommandWire::DeleteRecords(c) => MetaCommand::DeleteRecords {
                name: c.name,
                incarnation: c.incarnation,
                partition: c.partition,
                offset: c.offset,
            },
            CommandWire::ElectPreferredLeader(c) => MetaCommand::ElectPreferredLeader {
                name: c.name,
                incarnation: c.incarnation,
                partition: c.partition,
            },
            CommandWire::TransferLeader(c) => MetaCommand::TransferLeader {
                name: c.name,
                incarnation: c.incarnation,
                partition: c.partition,
                to: c.to,
            },
            CommandWire::AdminAddress(c) => MetaCommand::AdminAddress {
                node: c.node,
                address: c.address,
            },
            CommandWire::DeleteGroupOffsets(c) => MetaCommand::DeleteGroupOffsets {
                group: c.group,
                partitions: (!c.whole_group).then(|| {
                    c.partitions
                        .into_iter()
                        .map(|tp| (tp.topic, tp.partition))
                        .collect()
                }),
            },
            CommandWire::StoreGroup(c) => MetaCommand::StoreGroup {
                group: c.group,
                record: c.record.map(GroupRecord::from),
                time_ms: c.time_ms,
            },
            CommandWire::ExpireGroupOffsets(c) => MetaCommand::ExpireGroupOffsets {
                group: c.group,
                activity_ms: c.activity_ms,
            },
            CommandWire::CreateAcls(c) => MetaCommand::CreateAcls {
                acls: acls_from_wire(c),
            },
            CommandWire::DeleteAcls(c) => MetaCommand::DeleteAcls {
                acls: acls_from_wire(c),
            },
            // A mechanism code that does not fit is kept as 0 (unknown): not applied.
            CommandWire::UpsertScramCredential(c) => MetaCommand::UpsertScramCredential {
                user: c.user,
                mechanism: i8::try_from(c.mechanism).unwrap_or(0),
                salt: c.salt,
                iterations: c.iterations,
                stored_key: c.stored_key,
                server_key: c.server_key,
            },
            CommandWire::ImportScramUsers(c) => MetaCommand::ImportScramUsers {
                credentials: c
                    .credentials
                    .into_iter()
                    .map(crate::bootstrap_users::ImportedCredential::from)
                    .collect(),
            },
            CommandWire::DeleteScramCredential(c) => MetaCommand::DeleteScramCredential {
                user: c.user,
                mechanism: i8::try_from(c.mechanism).unwrap_or(0),
            },
            CommandWire::SetFlowLimits(c) => MetaCommand::SetFlowLimits {
                limits: c.limits.map(FlowLimits::from).unwrap_or_default(),
            },
            CommandWire::AlterClientQuotas(c) => MetaCommand::AlterClientQuotas {
                alterations: c
                    .alterations
                    .into_iter()
                    .map(QuotaAlteration::from)
                    .collect(),
            },
            CommandWire::AddMember(c) => MetaCommand::AddMember {
                id: c.id,
                name: c.name,
                peer_addr: c.peer_addr,
                kafka_addr: c.kafka_addr,
                members: members_from_wire(c.members),
            },
            CommandWire::RemoveMember(c) => MetaCommand::RemoveMember {
                id: c.id,
                members: members_from_wire(c.members),
            },
            CommandWire::FinishReassignment(c) => MetaCommand::FinishReassignment {
                name: c.name,
                incarnation: c.incarnation,
                partition: c.partition,
            },
        }
    }
}

impl From<&CommittedOffset> for CommittedOffsetWire {
    fn from(o: &CommittedOffset) -> Self {
        CommittedOffsetWire {
            topic: o.topic.clone(),
            partition: o.partition,
            offset: o.offset,
            leader_epoch: o.leader_epoch,
            metadata: o.metadata.clone(),
        }
    }
}

impl From<CommittedOffsetWire> for CommittedOffset {
    fn from(o: CommittedOffsetWire) -> Self {
        CommittedOffset {
            topic: o.topic,
            partition: o.partition,
            offset: o.offset,
            leader_epoch: o.leader_epoch,
            metadata: o.metadata,
        }
    }
}

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
/// }
/// message ClientQuota  { QuotaEntity entity = 1; repeated QuotaValue values = 2; }
/// message TopicState   { string name = 1; uint64 incarnation = 2; uint32 partitions = 3;
///                        repeated ReplicaList replicas = 4; repeated ConfigEntry configs = 5;
///                        repeated uint64 deleted_before = 6; }
/// message Allocation   { RequestId request = 1; int64 producer_id = 2; }
/// message GroupOffsets { string group = 1; repeated CommittedOffset offsets = 2; }
/// message StoredGroup  { string group = 1; GroupRecord record = 2; }
/// message GroupActivity { string group = 1; int64 time_ms = 2; }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::settings::{EntityName, QuotaEntity};

    fn request(seq: u64) -> RequestId {
        RequestId {
            node: 3,
            boot: 0xdead_beef_0042,
            seq,
        }
    }

    /// One command of every kind, with values that differ from the protobuf defaults and some
    /// that equal them (0, empty, None), so both encodings are exercised.
    fn every_command() -> Vec<MetaCommand> {
        vec![
            MetaCommand::CreateTopic {
                name: "orders".into(),
                partitions: 12,
                replicas: vec![vec![1, 2, 3], vec![3, 1, 2], vec![2, 3, 1]],
                configs: [("retention.ms".to_string(), "-1".to_string())].into(),
            },
            MetaCommand::CreateTopic {
                name: String::new(),
                partitions: 0,
                replicas: vec![],
                configs: BTreeMap::new(),
            },
            MetaCommand::CreatePartitions {
                name: "orders".into(),
                incarnation: u64::MAX,
                count: 40,
                replicas: vec![vec![5, 1, 2], vec![u64::MAX]],
            },
            MetaCommand::DeleteTopic {
                name: "orders".into(),
                incarnation: Some(0),
            },
            MetaCommand::DeleteTopic {
                name: "gone".into(),
                incarnation: None,
            },
            MetaCommand::AllocateProducerId,
            MetaCommand::CommitOffsets {
                group: "g".into(),
                offsets: vec![
                    CommittedOffset {
                        topic: "orders".into(),
                        partition: 7,
                        offset: i64::MAX,
                        leader_epoch: -1,
                        metadata: Some(String::new()),
                    },
                    CommittedOffset {
                        topic: "\u{e9}t\u{e9}".into(),
                        partition: -1,
                        offset: 0,
                        leader_epoch: 5,
                        metadata: None,
                    },
                ],
                commit_time_ms: 1_795_000_000_123,
            },
            MetaCommand::CommitOffsets {
                group: String::new(),
                offsets: Vec::new(),
                commit_time_ms: 0,
            },
            MetaCommand::AlterTopicConfigs {
                name: "orders".into(),
                incarnation: 9,
                set: [("segment.bytes".to_string(), "1048576".to_string())].into(),
                remove: vec!["retention.ms".into()],
                replace_all: false,
            },
            MetaCommand::AlterTopicConfigs {
                name: "orders".into(),
                incarnation: 0,
                set: BTreeMap::new(),
                remove: Vec::new(),
                replace_all: true,
            },
            MetaCommand::DeleteRecords {
                name: "orders".into(),
                incarnation: 3,
                partition: 2,
                offset: u64::MAX,
            },
            MetaCommand::DeleteGroupOffsets {
                group: "g".into(),
                partitions: None,
            },
            MetaCommand::ElectPreferredLeader {
                name: "orders".into(),
                incarnation: 5,
                partition: 0,
            },
            MetaCommand::TransferLeader {
                name: "orders".into(),
                incarnation: 5,
                partition: 1,
                to: 3,
            },
            MetaCommand::AdminAddress {
                node: 2,
                address: "127.0.0.1:9293".into(),
            },
            MetaCommand::DeleteGroupOffsets {
                group: "g".into(),
                partitions: Some(vec![("orders".into(), 1)]),
            },
            MetaCommand::DeleteGroupOffsets {
                group: "g".into(),
                partitions: Some(Vec::new()),
            },
            MetaCommand::StoreGroup {
                group: "g".into(),
                record: Some(GroupRecord {
                    generation: 7,
                    protocol_type: "consumer".into(),
                    protocol: "range".into(),
                    leader: "m1".into(),
                    members: vec![
                        GroupMemberRecord {
                            member_id: "m1".into(),
                            instance_id: Some("i1".into()),
                            client_id: "c".into(),
                            client_host: "/127.0.0.1".into(),
                            session_timeout_ms: 45_000,
                            rebalance_timeout_ms: i32::MAX,
                            protocols: vec![
                                ("range".into(), vec![0, 1, 255]),
                                ("cooperative-sticky".into(), Vec::new()),
                            ],
                            assignment: vec![9; 40],
                        },
                        GroupMemberRecord {
                            member_id: String::new(),
                            instance_id: None,
                            client_id: String::new(),
                            client_host: String::new(),
                            session_timeout_ms: 0,
                            rebalance_timeout_ms: -1,
                            protocols: Vec::new(),
                            assignment: Vec::new(),
                        },
                    ],
                }),
                time_ms: 1_795_000_000_000,
            },
            MetaCommand::StoreGroup {
                group: "g".into(),
                record: None,
                time_ms: 0,
            },
            MetaCommand::ExpireGroupOffsets {
                group: "g".into(),
                activity_ms: 1_795_000_000_000,
            },
            MetaCommand::CreateAcls {
                acls: vec![
                    AclBinding::from_kafka(2, "orders-", 4, "User:alice", "*", 3, 3).unwrap(),
                    AclBinding::from_kafka(4, "kafka-cluster", 3, "User:*", "10.0.0.1", 2, 2)
                        .unwrap(),
                ],
            },
            MetaCommand::DeleteAcls { acls: vec![] },
            MetaCommand::DeleteAcls {
                acls: vec![AclBinding::from_kafka(3, "g", 3, "User:b", "*", 8, 3).unwrap()],
            },
            MetaCommand::UpsertScramCredential {
                user: "alice".into(),
                mechanism: 2,
                salt: vec![1, 2, 3],
                iterations: 8192,
                stored_key: vec![7; 64],
                server_key: vec![9; 64],
            },
            MetaCommand::DeleteScramCredential {
                user: "alice".into(),
                mechanism: 1,
            },
            MetaCommand::ImportScramUsers {
                credentials: vec![crate::bootstrap_users::ImportedCredential {
                    user: "admin".into(),
                    mechanism: 1,
                    salt: vec![4, 5],
                    iterations: 4096,
                    stored_key: vec![1; 32],
                    server_key: vec![2; 32],
                }],
            },
            MetaCommand::ImportScramUsers {
                credentials: vec![],
            },
            MetaCommand::SetFlowLimits {
                limits: FlowLimits {
                    produce_requests_per_sec: Some(10),
                    catchup_read_bytes_per_sec: Some(1 << 30),
                    ..FlowLimits::default()
                },
            },
            MetaCommand::SetFlowLimits {
                limits: FlowLimits::default(),
            },
            MetaCommand::AlterClientQuotas {
                alterations: vec![QuotaAlteration {
                    entity: QuotaEntity {
                        user: Some(EntityName::Default),
                        client_id: Some(EntityName::Named("app".into())),
                    },
                    set: vec![("consumer_byte_rate".into(), 4096.0)],
                    remove: vec!["producer_byte_rate".into()],
                }],
            },
        ]
    }

    /// With `VDL_FUZZ_SEEDS_DIR` set, writes every command's encoded entry (protobuf and
    /// JSON) there as seeds for the `metadata_command` fuzz target (fuzz/seed-corpus.sh);
    /// otherwise checks only that they decode.
    #[test]
    fn fuzz_seeds_decode() {
        let dir = std::env::var_os("VDL_FUZZ_SEEDS_DIR").map(std::path::PathBuf::from);
        for (seq, command) in every_command().into_iter().enumerate() {
            let entry = MetaEntry {
                request: request(seq as u64),
                command,
            };
            for (kind, bytes) in [
                ("pb", encode_entry(&entry)),
                ("json", encode_entry_json(&entry)),
            ] {
                decode_entry(&bytes).unwrap();
                if let Some(dir) = &dir {
                    std::fs::write(dir.join(format!("entry-{seq:02}-{kind}")), &bytes).unwrap();
                }
            }
        }
    }

    #[test]
    fn every_command_round_trips_with_its_request_id() {
        for (seq, command) in every_command().into_iter().enumerate() {
            let entry = MetaEntry {
                request: request(seq as u64),
                command: command.clone(),
            };
            let bytes = encode_entry(&entry);
            assert_eq!(bytes[0], FORMAT_PROST_V1);
            assert_eq!(
                decode_entry(&bytes).unwrap(),
                (Some(request(seq as u64)), command)
            );
        }
    }

    /// What a node writes while an earlier release runs in the cluster is exactly that
    /// release's JSON, and decodes to the same entry.
    #[test]
    fn json_written_for_earlier_releases_round_trips() {
        for (seq, command) in every_command().into_iter().enumerate() {
            let entry = MetaEntry {
                request: request(seq as u64),
                command: command.clone(),
            };
            let json = encode_entry_json(&entry);
            assert_eq!(json, serde_json::to_vec(&entry).unwrap());
            assert!(json.starts_with(b"{"));
            assert_eq!(
                decode_entry(&json).unwrap(),
                (Some(request(seq as u64)), command)
            );
        }
    }

    /// Entries as earlier versions wrote them (JSON with a request id, and bare commands from
    /// before request ids) decode to what they decoded to before.
    #[test]
    fn json_entries_of_older_versions_still_decode() {
        for (seq, command) in every_command().into_iter().enumerate() {
            let entry = MetaEntry {
                request: request(seq as u64),
                command: command.clone(),
            };
            let json = serde_json::to_vec(&entry).unwrap();
            assert_eq!(
                decode_entry(&json).unwrap(),
                (Some(request(seq as u64)), command.clone())
            );
            let bare = serde_json::to_vec(&command).unwrap();
            assert_eq!(decode_entry(&bare).unwrap(), (None, command));
        }
        // Literal bytes as versions before partitions and incarnations wrote them.
        let cases: [(&[u8], MetaCommand); 4] = [
            (
                br#"{"CreateTopic":{"name":"x"}}"#,
                MetaCommand::CreateTopic {
                    name: "x".into(),
                    partitions: 1,
                    replicas: vec![],
                    configs: BTreeMap::new(),
                },
            ),
            (
                br#"{"DeleteTopic":{"name":"x"}}"#,
                MetaCommand::DeleteTopic {
                    name: "x".into(),
                    incarnation: None,
                },
            ),
            (br#""AllocateProducerId""#, MetaCommand::AllocateProducerId),
            (
                br#"{"request":{"node":2,"boot":9,"seq":4},"command":{"CreateTopic":{"name":"y","partitions":3}}}"#,
                MetaCommand::CreateTopic {
                    name: "y".into(),
                    partitions: 3,
                    replicas: vec![],
                    configs: BTreeMap::new(),
                },
            ),
        ];
        for (bytes, command) in cases {
            assert_eq!(decode_entry(bytes).unwrap().1, command);
        }
    }

    /// The field numbers are the on-disk format: these bytes must decode the same forever.
    #[test]
    fn field_numbers_are_fixed() {
        let entry = MetaEntry {
            request: RequestId {
                node: 1,
                boot: 2,
                seq: 3,
            },
            command: MetaCommand::CreateTopic {
                name: "t".into(),
                partitions: 4,
                replicas: vec![],
                configs: BTreeMap::new(),
            },
        };
        // 0x01 | field 1 (request) {1: 1, 2: 2, 3: 3} | field 2 (create_topic) {1: "t", 2: 4}
        let expected = [
            0x01, 0x0a, 0x06, 0x08, 0x01, 0x10, 0x02, 0x18, 0x03, 0x12, 0x05, 0x0a, 0x01, b't',
            0x10, 0x04,
        ];
        assert_eq!(encode_entry(&entry), expected);
        assert_eq!(
            decode_entry(&expected).unwrap(),
            (Some(entry.request), entry.command)
        );
        // StoreGroup is field 11: 0x5a = (11 << 3) | 2.
        let store = MetaEntry {
            request: entry.request,
            command: MetaCommand::StoreGroup {
                group: "g".into(),
                record: None,
                time_ms: 0,
            },
        };
        let expected = [
            0x01, 0x0a, 0x06, 0x08, 0x01, 0x10, 0x02, 0x18, 0x03, 0x5a, 0x03, 0x0a, 0x01, b'g',
        ];
        assert_eq!(encode_entry(&store), expected);
        // DeleteScramCredential is field 16: 0x82 0x01 = (16 << 3) | 2.
        let delete = MetaEntry {
            request: entry.request,
            command: MetaCommand::DeleteScramCredential {
                user: "u".into(),
                mechanism: 2,
            },
        };
        let expected = [
            0x01, 0x0a, 0x06, 0x08, 0x01, 0x10, 0x02, 0x18, 0x03, 0x82, 0x01, 0x05, 0x0a, 0x01,
            b'u', 0x10, 0x02,
        ];
        assert_eq!(encode_entry(&delete), expected);
    }

    #[test]
    fn unknown_kinds_formats_and_damaged_entries_are_errors() {
        // A newer version's command kind (field 100) with a request id: no command we know.
        let newer = [FORMAT_PROST_V1, 0x0a, 0x02, 0x08, 0x01, 0xa2, 0x06, 0x00];
        assert!(matches!(
            decode_entry(&newer),
            Err(MetaDecodeError::UnknownCommand)
        ));
        // Unknown fields inside a known command are ignored.
        let extra = [
            FORMAT_PROST_V1,
            0x12,
            0x07,
            0x0a,
            0x01,
            b't',
            0x10,
            0x02,
            0x78,
            0x05, // field 15 of CreateTopic, varint 5: unknown to this version
        ];
        assert_eq!(
            decode_entry(&extra).unwrap(),
            (
                None,
                MetaCommand::CreateTopic {
                    name: "t".into(),
                    partitions: 2,
                    replicas: vec![],
                    configs: BTreeMap::new(),
                }
            )
        );
        assert!(matches!(decode_entry(&[]), Err(MetaDecodeError::Empty)));
        assert!(matches!(
            decode_entry(&[0x02, 0x00]),
            Err(MetaDecodeError::UnknownFormat(0x02))
        ));
        assert!(matches!(
            decode_entry(b"{not json"),
            Err(MetaDecodeError::Json(_))
        ));
        // Every truncation of a valid entry is an error or a shorter valid entry, never a panic.
        let full = encode_entry(&MetaEntry {
            request: request(1),
            command: every_command().remove(6),
        });
        for cut in 1..full.len() {
            let _ = decode_entry(&full[..cut]);
        }
        // A length claim past the end, and a name that is not UTF-8.
        assert!(decode_entry(&[FORMAT_PROST_V1, 0x12, 0x7f]).is_err());
        assert!(decode_entry(&[FORMAT_PROST_V1, 0x12, 0x03, 0x0a, 0x01, 0xff]).is_err());
    }
}
