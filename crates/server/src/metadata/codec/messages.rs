//! The protobuf message structs of a metadata entry (schema in [`super`]), and the small
//! conversions of the lists they carry.

use std::collections::BTreeMap;

use crate::flow::wire::{AlterClientQuotasWire, SetFlowLimitsWire};
use crate::security::acl::AclBinding;
use crate::security::scram::{ScramCredential, ScramMechanism};
use crate::security::scram_import::ImportedCredential;

use super::groups::{ExpireGroupOffsetsWire, StoreGroupWire};
use super::txn_offsets::{CommitTxnOffsetsWire, EndTxnOffsetsWire};

/// `MetaEntry` on the wire (see the module documentation for the schema).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetaEntryWire {
    /// The request id; absent only in entries that never had one.
    #[prost(message, optional, tag = "1")]
    pub request: Option<RequestIdWire>,
    /// The command; `None` when it is a kind this version does not know.
    #[prost(
        oneof = "CommandWire",
        tags = "2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 23, 24, 25, 27, 28, 29, 40, 41, 42, 43, 44, 45, 46"
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

/// The command kinds, fields 2..=18, 23..=25, 27..=29, 40 to 46 of `MetaEntry`.
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
    /// [`MetaCommand::PutTransaction`].
    #[prost(message, tag = "42")]
    PutTransaction(super::transactions::PutTransactionWire),
    /// [`MetaCommand::TxnMarkersWritten`].
    #[prost(message, tag = "43")]
    TxnMarkersWritten(super::transactions::TxnMarkersWrittenWire),
    /// [`MetaCommand::ExpireTransactionalId`].
    #[prost(message, tag = "44")]
    ExpireTransactionalId(super::transactions::ExpireTransactionalIdWire),
    /// [`MetaCommand::RequestTxnPartitions`].
    #[prost(message, tag = "45")]
    RequestTxnPartitions(super::transactions::RequestTxnPartitionsWire),
    /// [`MetaCommand::StoreConsumerGroup`].
    #[prost(message, tag = "46")]
    StoreConsumerGroup(super::consumer_groups::StoreConsumerGroupWire),
    /// [`MetaCommand::AdminAddress`].
    #[prost(message, tag = "18")]
    AdminAddress(AdminAddressWire),
    /// [`MetaCommand::CommitTxnOffsets`].
    #[prost(message, tag = "40")]
    CommitTxnOffsets(CommitTxnOffsetsWire),
    /// [`MetaCommand::EndTxnOffsets`].
    #[prost(message, tag = "41")]
    EndTxnOffsets(EndTxnOffsetsWire),
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

pub(super) fn acls_from_wire(list: AclListWire) -> Vec<AclBinding> {
    list.acls
        .iter()
        .filter_map(AclBindingWire::to_binding)
        .collect()
}

pub(super) fn acls_to_wire(acls: &[AclBinding]) -> AclListWire {
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

/// A credential of the bootstrap import as stored in the log.
impl From<ScramCredentialWire> for ImportedCredential {
    fn from(w: ScramCredentialWire) -> Self {
        ImportedCredential {
            user: w.user,
            // A code that does not fit is kept as 0 (unknown): skipped when applied.
            mechanism: i8::try_from(w.mechanism).unwrap_or(0),
            salt: w.salt,
            iterations: w.iterations,
            stored_key: w.stored_key,
            server_key: w.server_key,
        }
    }
}

/// A credential of the bootstrap import as written to the log.
impl From<&ImportedCredential> for ScramCredentialWire {
    fn from(c: &ImportedCredential) -> Self {
        ScramCredentialWire {
            user: c.user.clone(),
            mechanism: i32::from(c.mechanism),
            salt: c.salt.clone(),
            iterations: c.iterations,
            stored_key: c.stored_key.clone(),
            server_key: c.server_key.clone(),
        }
    }
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
