//! How a committed command changes the metadata ([`ClusterMeta::apply_to_state`]) and what it
//! then asks of the node hosting the replica ([`Effect`]). Every node applies the same commands
//! in the same order with these rules, so every node holds the same metadata.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::security::scram::{ScramCredential, ScramMechanism};

use super::*;

impl ClusterMeta {
    /// Applies `cmd` (committed at `index`, proposed as `request`) to this state alone, without
    /// the effects on a node (opening or dropping streams): for tools, tests and fuzzing. The
    /// same rules as the metadata group's apply, so the same commands give the same state.
    pub fn apply_to_state(&mut self, index: u64, request: Option<RequestId>, cmd: MetaCommand) {
        let _ = self.apply(index, request, cmd);
    }

    pub(super) fn apply(
        &mut self,
        index: u64,
        request: Option<RequestId>,
        cmd: MetaCommand,
    ) -> Option<Effect> {
        if let Some(id) = request {
            if self.applied.contains(&id) {
                // A retry of a request that committed already: applied once.
                return None;
            }
            self.remember(id);
        }
        match cmd {
            MetaCommand::CreateTopic {
                name,
                partitions,
                replicas,
                configs,
            } => {
                if self.topics.contains_key(&name) || partitions == 0 {
                    return None;
                }
                let replicas = self.resolve_replicas(&name, index, 0, partitions, replicas)?;
                self.insert_topic(
                    name.clone(),
                    TopicMeta {
                        created_at_index: index,
                        partitions,
                        replicas: replicas.clone(),
                        configs: valid_overrides(configs),
                        deleted_before: Vec::new(),
                        moving: BTreeMap::new(),
                    },
                );
                Some(Effect::OpenTopic(name, index, replicas))
            }
            MetaCommand::CreatePartitions {
                name,
                incarnation,
                count,
                replicas,
            } => {
                let current = self.topics.get(&name)?;
                if current.created_at_index != incarnation || current.partitions >= count {
                    return None;
                }
                let first = current.partitions;
                let added = self.resolve_replicas(&name, incarnation, first, count, replicas)?;
                let topic = self.topics.get_mut(&name)?;
                topic.partitions = count;
                topic.replicas.extend(added);
                Some(Effect::OpenTopic(name, incarnation, topic.replicas.clone()))
            }
            MetaCommand::DeleteTopic { name, incarnation } => {
                let current = self.incarnation(&name);
                match (incarnation, current) {
                    // An older incarnation: it is gone already (its files too, or the drop
                    // below removes what is left); the current one stays.
                    (Some(wanted), Some(now)) if wanted != now => {
                        Some(Effect::DropTopic(name, Some(wanted)))
                    }
                    _ => {
                        self.remove_topic(&name);
                        // A deleted topic's committed offsets go with it, as in Kafka: a topic
                        // created again under the name starts with none.
                        for group in self.offsets.values_mut() {
                            group.retain(|(topic, _), _| *topic != name);
                        }
                        self.offsets.retain(|_, g| !g.is_empty());
                        self.drop_topic_txn_offsets(&name);
                        // Also drops a stream configured at start (not in `topics`).
                        Some(Effect::DropTopic(name, incarnation.or(current)))
                    }
                }
            }
            MetaCommand::AlterTopicConfigs {
                name,
                incarnation,
                set,
                remove,
                replace_all,
            } => {
                let topic = self
                    .topics
                    .get_mut(&name)
                    .filter(|t| t.created_at_index == incarnation)?;
                if replace_all {
                    topic.configs.clear();
                }
                for key in remove {
                    topic.configs.remove(&key);
                }
                topic.configs.extend(valid_overrides(set));
                Some(Effect::TopicConfigChanged(name, incarnation))
            }
            MetaCommand::DeleteRecords {
                name,
                incarnation,
                partition,
                offset,
            } => {
                let topic = self
                    .topics
                    .get_mut(&name)
                    .filter(|t| t.created_at_index == incarnation && partition < t.partitions)?;
                let slot = partition as usize;
                if topic.deleted_before.len() <= slot {
                    topic.deleted_before.resize(slot + 1, 0);
                }
                if offset <= topic.deleted_before[slot] {
                    return None;
                }
                topic.deleted_before[slot] = offset;
                Some(Effect::RecordsDeleted(name, incarnation, partition, offset))
            }
            MetaCommand::DeleteGroupOffsets { group, partitions } => {
                self.drop_group_txn_offsets(&group, partitions.as_deref());
                match partitions {
                    None => {
                        self.offsets.remove(&group);
                        self.groups.remove(&group);
                        self.consumer_groups.remove(&group);
                        self.group_activity_ms.remove(&group);
                    }
                    Some(list) => {
                        if let Some(g) = self.offsets.get_mut(&group) {
                            for key in list {
                                g.remove(&key);
                            }
                            if g.is_empty() {
                                self.offsets.remove(&group);
                                self.group_activity_ms.remove(&group);
                            }
                        }
                    }
                }
                None
            }
            MetaCommand::ElectPreferredLeader {
                name,
                incarnation,
                partition,
            } => {
                let preferred = if incarnation == 0 {
                    // A stream configured at start: one partition on every member, the
                    // lowest id preferred (as Metadata lists its replicas).
                    if partition != 0 {
                        return None;
                    }
                    *self.members.first()?
                } else {
                    *self
                        .topics
                        .get(&name)
                        .filter(|t| t.created_at_index == incarnation)?
                        .replicas
                        .get(partition as usize)?
                        .first()?
                };
                Some(Effect::ElectPreferred(
                    name,
                    incarnation,
                    partition,
                    preferred,
                ))
            }
            MetaCommand::TransferLeader {
                name,
                incarnation,
                partition,
                to,
            } => {
                let is_replica = if incarnation == 0 {
                    partition == 0 && self.members.contains(&to)
                } else {
                    self.topics
                        .get(&name)
                        .filter(|t| t.created_at_index == incarnation)?
                        .replicas
                        .get(partition as usize)?
                        .contains(&to)
                };
                is_replica.then_some(Effect::ElectPreferred(name, incarnation, partition, to))
            }
            MetaCommand::AdminAddress { node, address } => {
                Some(Effect::AdminAddress(node, address))
            }
            MetaCommand::AllocateProducerId => {
                if self.next_producer_id < FIRST_PRODUCER_ID {
                    self.next_producer_id = FIRST_PRODUCER_ID;
                }
                if let Some(id) = request {
                    self.allocations.insert(id, self.next_producer_id);
                    self.allocation_order.push_back(id);
                }
                self.next_producer_id += 1;
                while self.allocation_order.len() > MAX_REMEMBERED_ALLOCATIONS {
                    if let Some(old) = self.allocation_order.pop_front() {
                        self.allocations.remove(&old);
                    }
                }
                None
            }
            MetaCommand::StoreGroup {
                group,
                record,
                time_ms,
            } => {
                if self.offsets.contains_key(&group) {
                    self.note_activity(&group, time_ms);
                }
                match record {
                    Some(r) if !r.members.is_empty() => {
                        // A group is one kind at a time: a classic group with members
                        // replaces a consumer group of that id (a downgraded one).
                        self.consumer_groups.remove(&group);
                        self.groups.insert(group, r);
                    }
                    _ => {
                        self.groups.remove(&group);
                    }
                }
                None
            }
            MetaCommand::StoreConsumerGroup {
                group,
                record,
                time_ms,
            } => {
                if self.offsets.contains_key(&group) {
                    self.note_activity(&group, time_ms);
                }
                match record {
                    Some(r) => {
                        self.groups.remove(&group);
                        self.consumer_groups.insert(group, r);
                    }
                    None => {
                        self.consumer_groups.remove(&group);
                    }
                }
                None
            }
            MetaCommand::CommitOffsets {
                group,
                offsets,
                commit_time_ms,
            } => {
                if offsets.is_empty() {
                    // A read barrier: nothing to record.
                    return None;
                }
                self.note_activity(&group, commit_time_ms);
                self.supersede_txn_offsets(&group, &offsets);
                let g = self.offsets.entry(group).or_default();
                for o in offsets {
                    g.insert((o.topic.clone(), o.partition), o);
                }
                None
            }
            MetaCommand::CommitTxnOffsets {
                group,
                producer_id,
                producer_epoch,
                offsets,
                commit_time_ms,
            } => {
                self.add_txn_offsets(
                    index,
                    group,
                    producer_id,
                    producer_epoch,
                    offsets,
                    commit_time_ms,
                );
                None
            }
            MetaCommand::EndTxnOffsets {
                producer_id,
                groups,
                commit,
            } => {
                self.end_txn_offsets(producer_id, groups.as_deref(), commit);
                None
            }
            MetaCommand::ExpireGroupOffsets { group, activity_ms } => {
                let unchanged = self.group_activity_ms.get(&group) == Some(&activity_ms);
                // Offsets pending in a transaction keep the group (Kafka does not expire a
                // partition's offset while a transaction's is pending).
                let consumer_members = self
                    .consumer_groups
                    .get(&group)
                    .is_some_and(|r| !r.members.is_empty());
                if unchanged
                    && !self.groups.contains_key(&group)
                    && !consumer_members
                    && !self.has_pending_txn_offsets(&group)
                {
                    self.offsets.remove(&group);
                    self.group_activity_ms.remove(&group);
                    // An empty consumer-protocol group goes with its offsets (Kafka's cleanup).
                    self.consumer_groups.remove(&group);
                }
                None
            }
            cmd @ (MetaCommand::PutTransaction { .. }
            | MetaCommand::TxnMarkersWritten { .. }
            | MetaCommand::ExpireTransactionalId { .. }) => self.apply_transaction(cmd),
            cmd @ MetaCommand::RequestTxnPartitions { .. } => {
                self.queue_txn_partition_request(index, cmd);
                Some(Effect::TransactionWork)
            }
            MetaCommand::CreateAcls { acls } => {
                for b in acls {
                    if self.acls.len() >= crate::security::acl::MAX_ACLS && !self.acls.contains(&b)
                    {
                        tracing::error!("ACL not added: the cluster holds the most it may");
                        continue;
                    }
                    self.acls.insert(b);
                }
                None
            }
            MetaCommand::DeleteAcls { acls } => {
                for b in &acls {
                    self.acls.remove(b);
                }
                None
            }
            MetaCommand::UpsertScramCredential {
                user,
                mechanism,
                salt,
                iterations,
                stored_key,
                server_key,
            } => {
                let Some(mechanism) = ScramMechanism::from_kafka_type(mechanism) else {
                    tracing::error!(%user, mechanism, "SCRAM credential of an unknown mechanism not applied");
                    return None;
                };
                let key = (user, mechanism);
                if self.scram_credentials.len() >= crate::security::scram::MAX_CREDENTIALS
                    && !self.scram_credentials.contains_key(&key)
                {
                    tracing::error!(user = %key.0, "SCRAM credential not added: the cluster holds the most it may");
                    return None;
                }
                self.scram_credentials.insert(
                    key,
                    ScramCredential {
                        mechanism,
                        salt,
                        iterations,
                        stored_key,
                        server_key,
                    },
                );
                None
            }
            MetaCommand::ImportScramUsers { credentials } => {
                if !self.scram_users_imported {
                    self.scram_users_imported = true;
                    let added = crate::security::scram_import::apply_import(
                        &mut self.scram_credentials,
                        credentials,
                    );
                    tracing::info!(added, "bootstrap SCRAM users imported into the metadata");
                }
                None
            }
            MetaCommand::DeleteScramCredential { user, mechanism } => {
                if let Some(mechanism) = ScramMechanism::from_kafka_type(mechanism) {
                    self.scram_credentials.remove(&(user, mechanism));
                }
                None
            }
            MetaCommand::SetFlowLimits { limits } => {
                Arc::make_mut(&mut self.flow).limits = limits;
                tracing::info!(?limits, "flow limits changed");
                None
            }
            MetaCommand::AlterClientQuotas { alterations } => {
                let flow = Arc::make_mut(&mut self.flow);
                for a in &alterations {
                    flow.alter(a);
                }
                None
            }
            MetaCommand::AddMember {
                id,
                name,
                peer_addr,
                kafka_addr,
                members,
            } => {
                if !members.is_empty() {
                    self.member_records = members;
                }
                self.membership_changed = true;
                if id == 0
                    || self.member_records.contains_key(&id)
                    || peer_addr.parse::<std::net::SocketAddr>().is_err()
                {
                    return None;
                }
                self.member_records.insert(
                    id,
                    MemberRecord {
                        name,
                        peer_addr,
                        kafka_addr,
                        leaving: false,
                    },
                );
                Some(Effect::MembershipChanged)
            }
            MetaCommand::RemoveMember { id, members } => {
                if !members.is_empty() {
                    self.member_records = members;
                }
                self.membership_changed = true;
                self.remove_member(id).then_some(Effect::MembershipChanged)
            }
            MetaCommand::FinishReassignment {
                name,
                incarnation,
                partition,
            } => {
                let topic = self
                    .topics
                    .get_mut(&name)
                    .filter(|t| t.created_at_index == incarnation)?;
                topic.moving.remove(&partition)?;
                Some(Effect::MembershipChanged)
            }
        }
    }
}

/// What applying a command asks of the node hosting the replica ([`MetadataHost::carry_out`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Open the streams of a topic's partitions this node is a replica of: (name, incarnation,
    /// replicas of every partition); partitions open already stay.
    OpenTopic(String, u64, Vec<Vec<u64>>),
    /// Stop and delete a topic's stream: (name, incarnation; None: whatever is open under the
    /// name, for streams configured at start).
    DropTopic(String, Option<u64>),
    /// A topic's config overrides changed: (name, incarnation).
    TopicConfigChanged(String, u64),
    /// DeleteRecords raised a partition's log start offset: (name, incarnation, partition,
    /// offset).
    RecordsDeleted(String, u64, u32, u64),
    /// The leader of a partition should hand leadership to its preferred replica: (name,
    /// incarnation, partition, preferred replica).
    ElectPreferred(String, u64, u32, u64),
    /// Members or replica lists changed (see [`crate::replication::membership`]): the node opens,
    /// retargets or drops its groups to match.
    MembershipChanged,
    /// A node announced its admin address: (node, address).
    AdminAddress(u64, String),
    /// A transaction was decided (PrepareCommit or PrepareAbort: its partitions' leaders write
    /// the markers), or a partition leader asked the coordinator to add a partition to one
    /// (transaction version 2): the transaction tasks look now rather than at their next scan.
    TransactionWork,
}

/// The overrides of a command that pass validation (every node keeps the same ones: the check
/// depends on the names and values only). The proposer validated them; anything else is from
/// a different version's validator and is dropped with a log line.
fn valid_overrides(configs: BTreeMap<String, String>) -> BTreeMap<String, String> {
    configs
        .into_iter()
        .filter_map(|(k, v)| match crate::topic_config::validate(&k, Some(&v)) {
            Ok(stored) => Some((k, stored)),
            Err(e) => {
                tracing::warn!("topic config override not applied: {e}");
                None
            }
        })
        .collect()
}
