//! [`MetaCommand`] and [`MetaEntry`] to and from their wire structs.

use crate::flow::settings::{FlowLimits, QuotaAlteration};
use crate::flow::wire::{
    AlterClientQuotasWire, FlowLimitsWire, QuotaAlterationWire, SetFlowLimitsWire,
};
use crate::metadata::{CommittedOffset, GroupRecord, MetaCommand, MetaEntry, RequestId, TxnRecord};

use super::groups::{ExpireGroupOffsetsWire, GroupRecordWire, StoreGroupWire};
use super::messages::{
    acls_from_wire, acls_to_wire, configs_from_wire, configs_to_wire, members_from_wire,
    members_to_wire, replicas_from_wire, replicas_to_wire, AddMemberWire, AdminAddressWire,
    AllocateProducerIdWire, AlterTopicConfigsWire, CommandWire, CommitOffsetsWire,
    CommittedOffsetWire, CreatePartitionsWire, CreateTopicWire, DeleteGroupOffsetsWire,
    DeleteRecordsWire, DeleteScramCredentialWire, DeleteTopicWire, ElectPreferredLeaderWire,
    FinishReassignmentWire, ImportScramUsersWire, MetaEntryWire, RemoveMemberWire, RequestIdWire,
    ScramCredentialWire, TopicPartitionWire, TransferLeaderWire,
};
use super::transactions::{
    epoch_from_wire, partitions_to_wire, ExpireTransactionalIdWire, PutTransactionWire,
    RequestTxnPartitionsWire, TxnMarkersWrittenWire, TxnRecordWire,
};
use super::txn_offsets::{CommitTxnOffsetsWire, EndTxnOffsetsWire};

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
            MetaCommand::CommitTxnOffsets {
                group,
                producer_id,
                producer_epoch,
                offsets,
                commit_time_ms,
            } => CommandWire::CommitTxnOffsets(CommitTxnOffsetsWire {
                group: group.clone(),
                producer_id: *producer_id,
                producer_epoch: i32::from(*producer_epoch),
                offsets: offsets.iter().map(CommittedOffsetWire::from).collect(),
                commit_time_ms: *commit_time_ms,
            }),
            MetaCommand::EndTxnOffsets {
                producer_id,
                groups,
                commit,
            } => CommandWire::EndTxnOffsets(EndTxnOffsetsWire {
                producer_id: *producer_id,
                all_groups: groups.is_none(),
                groups: groups.clone().unwrap_or_default(),
                commit: *commit,
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
            MetaCommand::StoreConsumerGroup {
                group,
                record,
                time_ms,
            } => CommandWire::StoreConsumerGroup(super::consumer_groups::StoreConsumerGroupWire {
                group: group.clone(),
                record: record.clone(),
                time_ms: *time_ms,
            }),
            MetaCommand::PutTransaction {
                transactional_id,
                record,
            } => CommandWire::PutTransaction(PutTransactionWire {
                transactional_id: transactional_id.clone(),
                record: Some(TxnRecordWire::from(record)),
            }),
            MetaCommand::TxnMarkersWritten {
                transactional_id,
                producer_id,
                producer_epoch,
                partitions,
                time_ms,
            } => CommandWire::TxnMarkersWritten(TxnMarkersWrittenWire {
                transactional_id: transactional_id.clone(),
                producer_id: *producer_id,
                producer_epoch: i32::from(*producer_epoch),
                partitions: partitions_to_wire(partitions),
                time_ms: *time_ms,
            }),
            MetaCommand::ExpireTransactionalId {
                transactional_id,
                producer_id,
                producer_epoch,
                update_ms,
            } => CommandWire::ExpireTransactionalId(ExpireTransactionalIdWire {
                transactional_id: transactional_id.clone(),
                producer_id: *producer_id,
                producer_epoch: i32::from(*producer_epoch),
                update_ms: *update_ms,
            }),
            MetaCommand::RequestTxnPartitions {
                transactional_id,
                producer_id,
                producer_epoch,
                partitions,
            } => CommandWire::RequestTxnPartitions(RequestTxnPartitionsWire {
                transactional_id: transactional_id.clone(),
                producer_id: *producer_id,
                producer_epoch: i32::from(*producer_epoch),
                partitions: partitions_to_wire(partitions),
                index: 0,
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
            CommandWire::CommitTxnOffsets(c) => MetaCommand::CommitTxnOffsets {
                group: c.group,
                producer_id: c.producer_id,
                producer_epoch: epoch_from_wire(c.producer_epoch),
                offsets: c.offsets.into_iter().map(CommittedOffset::from).collect(),
                commit_time_ms: c.commit_time_ms,
            },
            CommandWire::EndTxnOffsets(c) => MetaCommand::EndTxnOffsets {
                producer_id: c.producer_id,
                groups: (!c.all_groups).then_some(c.groups),
                commit: c.commit,
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
            CommandWire::StoreConsumerGroup(c) => MetaCommand::StoreConsumerGroup {
                group: c.group,
                record: c.record,
                time_ms: c.time_ms,
            },
            CommandWire::PutTransaction(c) => MetaCommand::PutTransaction {
                transactional_id: c.transactional_id,
                record: TxnRecord::from(c.record.unwrap_or_default()),
            },
            CommandWire::TxnMarkersWritten(c) => MetaCommand::TxnMarkersWritten {
                transactional_id: c.transactional_id,
                producer_id: c.producer_id,
                producer_epoch: epoch_from_wire(c.producer_epoch),
                partitions: c
                    .partitions
                    .into_iter()
                    .map(|p| (p.topic, p.partition))
                    .collect(),
                time_ms: c.time_ms,
            },
            CommandWire::ExpireTransactionalId(c) => MetaCommand::ExpireTransactionalId {
                transactional_id: c.transactional_id,
                producer_id: c.producer_id,
                producer_epoch: epoch_from_wire(c.producer_epoch),
                update_ms: c.update_ms,
            },
            CommandWire::RequestTxnPartitions(c) => {
                let r = crate::metadata::txn_partition_requests::TxnPartitionRequest::from(c);
                MetaCommand::RequestTxnPartitions {
                    transactional_id: r.transactional_id,
                    producer_id: r.producer_id,
                    producer_epoch: r.producer_epoch,
                    partitions: r.partitions,
                }
            }
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
                    .map(crate::security::scram_import::ImportedCredential::from)
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
