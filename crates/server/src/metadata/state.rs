//! The replicated metadata as one node holds it ([`ClusterMeta`]): topics, members, producer
//! ids, consumer groups' offsets, ACLs, credentials and flow limits; the queries on it and its
//! conversion to and from snapshots. How commands change it is in `apply.rs`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::flow::settings::{FlowLimits, FlowSettings};
use crate::security::acl::AclSet;
use crate::security::scram::{ScramCredential, ScramMechanism};

use super::*;

/// Where a topic's partitions live: its incarnation and each partition's replicas (preferred
/// leader first), as the replicated metadata says (or, for a stream configured at start, one
/// partition on every member).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicLayout {
    /// The topic's incarnation (0 for a stream configured at start).
    pub incarnation: u64,
    /// Replicas of partition `p` at index `p`.
    pub replicas: Vec<Vec<u64>>,
}

/// A topic known to the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    /// Raft index of the create command: the topic's incarnation.
    pub created_at_index: u64,
    /// Number of partitions (indexes 0..partitions); only grows.
    pub partitions: u32,
    /// Replicas of each partition (`partitions` lists), preferred leader first.
    pub replicas: Vec<Vec<u64>>,
    /// Config overrides (see [`crate::topic_config`]).
    pub configs: BTreeMap<String, String>,
    /// Per partition (by index; shorter when none was set), the offset below which records
    /// were deleted by DeleteRecords (0: none).
    pub deleted_before: Vec<u64>,
    /// Partitions being reassigned (a member is leaving): their replica list before the
    /// reassignment. The old replicas keep their group until
    /// [`MetaCommand::FinishReassignment`].
    pub moving: BTreeMap<u32, Vec<u64>>,
}

impl TopicMeta {
    /// The offset below which DeleteRecords removed partition `partition`'s records (0: none).
    pub fn deleted_before(&self, partition: u32) -> u64 {
        self.deleted_before
            .get(partition as usize)
            .copied()
            .unwrap_or(0)
    }
}

/// Request ids remembered to make retried commands idempotent (a retry comes within a
/// proposal timeout, so far fewer commands than this are applied in between).
const MAX_REMEMBERED_REQUESTS: usize = 65_536;

/// The replicated metadata, as applied on this node.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ClusterMeta {
    /// The cluster's initial members (ascending ids): the replicas of partitions created by
    /// commands from before placement.
    pub(super) members: Vec<u64>,
    /// Every member by id, with its addresses: the initial members, then those added and
    /// removed at runtime (see [`crate::replication::membership`]).
    pub member_records: BTreeMap<u64, MemberRecord>,
    /// A membership command was applied: from then on the member list, not the configured
    /// voters, says who the metadata group's voters are (until then a node's configuration
    /// alone, possibly edited by hand, must never reshape the group).
    pub membership_changed: bool,
    /// Topics by name. Changed only through [`ClusterMeta::insert_topic`] and
    /// [`ClusterMeta::remove_topic`] (outside a topic's own fields), which keep
    /// [`ClusterMeta::topic_ids`] with it.
    pub topics: BTreeMap<String, TopicMeta>,
    /// The names of `topics` by topic id.
    topic_ids: crate::metadata::topic_ids::TopicIds,
    /// The next producer id to hand out.
    pub next_producer_id: i64,
    /// Producer ids handed out, by the request that allocated them (the newest
    /// [`MAX_REMEMBERED_ALLOCATIONS`]).
    pub allocations: HashMap<RequestId, i64>,
    pub(super) allocation_order: VecDeque<RequestId>,
    /// Committed offsets: group -> (topic, partition) -> offset.
    pub offsets: HashMap<String, BTreeMap<(String, i32), CommittedOffset>>,
    /// Offsets committed in transactions not ended yet (see [`crate::metadata::txn_offsets`]).
    pub(super) txn_offsets: TxnOffsetsByGroup,
    /// Consumer groups' membership as last stored by their coordinator (groups with members).
    pub groups: HashMap<String, GroupRecord>,
    /// Consumer-protocol groups (KIP-848) as last stored by their coordinator.
    pub consumer_groups: HashMap<String, crate::metadata::codec::ConsumerGroupRecord>,
    /// Per group with committed offsets: its last activity (a commit, or its membership
    /// stored), ms since the epoch on the proposer's clock. Absent: none recorded (offsets
    /// committed before offset expiry; they do not expire until the group commits again).
    pub group_activity_ms: HashMap<String, i64>,
    /// Every ACL (see [`crate::security::acl`]).
    pub acls: AclSet,
    /// SCRAM credentials by user and mechanism.
    pub scram_credentials: BTreeMap<(String, ScramMechanism), ScramCredential>,
    /// The bootstrap SCRAM users were imported ([`MetaCommand::ImportScramUsers`]): the
    /// configured ones are no longer consulted.
    pub scram_users_imported: bool,
    /// The transaction coordinator's state by transactional id (see
    /// [`crate::metadata::transactions`]).
    pub transactions: BTreeMap<String, crate::metadata::TxnRecord>,
    /// The transactional ids of `transactions` being decided (PrepareCommit or PrepareAbort):
    /// what the marker writers look at, without scanning every id. Derived, not in snapshots.
    pub deciding_transactions: std::collections::BTreeSet<String>,
    /// Transaction version 2's requests to add partitions to transactions, oldest first (see
    /// [`crate::metadata::txn_partition_requests`]).
    pub txn_partition_requests:
        VecDeque<crate::metadata::txn_partition_requests::TxnPartitionRequest>,
    /// Flow control: node-wide limits and client quotas (shared with request handlers,
    /// replaced on change).
    pub flow: Arc<FlowSettings>,
    /// Recently applied requests, oldest first, and the same as a set.
    pub(super) applied_order: VecDeque<RequestId>,
    pub(super) applied: HashSet<RequestId>,
}

impl ClusterMeta {
    /// Empty metadata of a cluster of `members`.
    pub fn new(mut members: Vec<u64>) -> ClusterMeta {
        members.sort_unstable();
        let member_records = members
            .iter()
            .map(|id| {
                (
                    *id,
                    MemberRecord {
                        name: format!("node{id}"),
                        peer_addr: String::new(),
                        kafka_addr: String::new(),
                        leaving: false,
                    },
                )
            })
            .collect();
        ClusterMeta {
            members,
            member_records,
            ..ClusterMeta::default()
        }
    }

    /// Empty metadata of a cluster whose initial members are `records`.
    pub fn with_members(records: BTreeMap<u64, MemberRecord>) -> ClusterMeta {
        ClusterMeta {
            members: records.keys().copied().collect(),
            member_records: records,
            ..ClusterMeta::default()
        }
    }

    /// Applies `cmd` at `index` without a request id (unit tests of other modules).
    #[cfg(test)]
    pub(crate) fn apply_for_test(&mut self, index: u64, cmd: MetaCommand) {
        let _ = self.apply(index, None, cmd);
    }

    /// Ids of the members that are not leaving, ascending: where new replicas may go.
    pub fn active_members(&self) -> Vec<u64> {
        self.member_records
            .iter()
            .filter(|(_, m)| !m.leaving)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether node `id` holds a replica of any partition, or of one being reassigned away
    /// from it.
    pub fn hosts_replicas(&self, id: u64) -> bool {
        self.topics.values().any(|t| {
            t.replicas.iter().any(|r| r.contains(&id))
                || t.moving.values().any(|old| old.contains(&id))
        })
    }

    /// The voters the metadata group should have: every member not leaving, and leaving
    /// ones while they still hold replicas (they are removed last).
    pub fn metadata_voters(&self) -> Vec<u64> {
        self.member_records
            .iter()
            .filter(|(id, m)| !m.leaving || self.hosts_replicas(**id))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Replicas each member holds (for picking where a moved replica goes).
    pub(super) fn replica_counts(&self) -> BTreeMap<u64, usize> {
        let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
        for t in self.topics.values() {
            for r in t.replicas.iter().flatten() {
                *counts.entry(*r).or_default() += 1;
            }
        }
        counts
    }

    /// Marks member `id` leaving and moves each of its replicas to the active member holding
    /// none of that partition with the fewest replicas (lowest id on ties), in the leaving
    /// member's place in the list (so a preferred leader's successor is preferred). A
    /// partition with no such member keeps its replica on the leaving member.
    pub(super) fn remove_member(&mut self, id: u64) -> bool {
        let active = self.active_members();
        if !active.contains(&id) || active.len() < 2 {
            return false;
        }
        if let Some(m) = self.member_records.get_mut(&id) {
            m.leaving = true;
        }
        let candidates: Vec<u64> = active.into_iter().filter(|m| *m != id).collect();
        let mut counts = self.replica_counts();
        for t in self.topics.values_mut() {
            for (p, list) in (0u32..).zip(t.replicas.iter_mut()) {
                let Some(pos) = list.iter().position(|r| *r == id) else {
                    continue;
                };
                let Some(&to) = candidates
                    .iter()
                    .filter(|c| !list.contains(c))
                    .min_by_key(|c| (counts.get(c).copied().unwrap_or(0), **c))
                else {
                    tracing::warn!(
                        partition = p,
                        member = id,
                        "no member can take this replica: it stays"
                    );
                    continue;
                };
                t.moving.entry(p).or_insert_with(|| list.clone());
                list[pos] = to;
                *counts.entry(to).or_default() += 1;
            }
        }
        true
    }

    /// The replica lists of partitions `first..count` of incarnation `incarnation` of topic
    /// `name`, from a command's `lists` (indexed by partition), or every member when it has none
    /// (commands from before placement). `None` when the lists are malformed (see
    /// [`crate::replication::placement::check`]): the command is then not applied, on every node
    /// alike.
    pub(super) fn resolve_replicas(
        &self,
        name: &str,
        incarnation: u64,
        first: u32,
        count: u32,
        lists: Vec<Vec<u64>>,
    ) -> Option<Vec<Vec<u64>>> {
        if lists.is_empty() {
            return Some(
                (first..count)
                    .map(|p| {
                        crate::replication::placement::every_member(
                            &self.members,
                            name,
                            incarnation,
                            p,
                        )
                    })
                    .collect(),
            );
        }
        // Any non-zero id may be named: a node that joined later replays commands from before
        // it knew the members then, and must apply them as everyone did. Proposers place
        // replicas only on members.
        let named: Vec<u64> = lists
            .iter()
            .flatten()
            .copied()
            .filter(|id| *id != 0)
            .collect();
        if let Err(e) = crate::replication::placement::check(&lists, count as usize, &named) {
            tracing::error!(topic = %name, "metadata command with bad replica lists not applied: {e}");
            return None;
        }
        Some(lists.into_iter().skip(first as usize).collect())
    }

    /// The state as a snapshot at applied index `index` (term `term`), for
    /// [`crate::metadata::codec::encode_snapshot`]. Carries every field applying a command reads
    /// (see [`crate::metadata::snapshot`] for why replaying after it equals a full replay),
    /// except `members`, which comes from the node's configuration. Maps are written in key
    /// order, so equal states give equal bytes.
    pub fn to_snapshot(&self, index: u64, term: u64) -> crate::metadata::codec::MetaSnapshotWire {
        use crate::metadata::codec::*;
        let mut offsets: Vec<GroupOffsetsWire> = self
            .offsets
            .iter()
            .map(|(group, g)| GroupOffsetsWire {
                group: group.clone(),
                offsets: g.values().map(CommittedOffsetWire::from).collect(),
            })
            .collect();
        offsets.sort_by(|a, b| a.group.cmp(&b.group));
        let mut groups: Vec<StoredGroupWire> = self
            .groups
            .iter()
            .map(|(group, r)| StoredGroupWire {
                group: group.clone(),
                record: Some(GroupRecordWire::from(r)),
            })
            .collect();
        groups.sort_by(|a, b| a.group.cmp(&b.group));
        let mut consumer_groups: Vec<crate::metadata::codec::StoredConsumerGroupWire> = self
            .consumer_groups
            .iter()
            .map(
                |(group, r)| crate::metadata::codec::StoredConsumerGroupWire {
                    group: group.clone(),
                    record: Some(r.clone()),
                },
            )
            .collect();
        consumer_groups.sort_by(|a, b| a.group.cmp(&b.group));
        let mut activity: Vec<GroupActivityWire> = self
            .group_activity_ms
            .iter()
            .map(|(group, at)| GroupActivityWire {
                group: group.clone(),
                time_ms: *at,
            })
            .collect();
        activity.sort_by(|a, b| a.group.cmp(&b.group));
        MetaSnapshotWire {
            index,
            term,
            topics: self
                .topics
                .iter()
                .map(|(name, t)| TopicStateWire {
                    name: name.clone(),
                    incarnation: t.created_at_index,
                    partitions: t.partitions,
                    replicas: replicas_to_wire(&t.replicas),
                    configs: configs_to_wire(&t.configs),
                    deleted_before: t.deleted_before.clone(),
                    moving: t
                        .moving
                        .iter()
                        .map(|(p, old)| MovingWire {
                            partition: *p,
                            old_replicas: old.clone(),
                        })
                        .collect(),
                })
                .collect(),
            members: members_to_wire(&self.member_records),
            membership_changed: self.membership_changed,
            next_producer_id: self.next_producer_id,
            allocations: self
                .allocation_order
                .iter()
                .filter_map(|id| {
                    self.allocations.get(id).map(|pid| AllocationWire {
                        request: Some(RequestIdWire::from(*id)),
                        producer_id: *pid,
                    })
                })
                .collect(),
            offsets,
            txn_offsets: self
                .txn_offsets
                .iter()
                .map(PendingTxnOffsetsWire::from)
                .collect(),
            groups,
            consumer_groups,
            activity,
            applied: self
                .applied_order
                .iter()
                .map(|id| RequestIdWire::from(*id))
                .collect(),
            acls: self.acls.iter().map(AclBindingWire::from).collect(),
            scram_credentials: self
                .scram_credentials
                .iter()
                .map(|((user, _), c)| ScramCredentialWire::new(user, c))
                .collect(),
            scram_users_imported: self.scram_users_imported,
            transactions: self
                .transactions
                .iter()
                .map(|(id, r)| PutTransactionWire {
                    transactional_id: id.clone(),
                    record: Some(TxnRecordWire::from(r)),
                })
                .collect(),
            txn_partition_requests: self
                .txn_partition_requests
                .iter()
                .map(crate::metadata::codec::transactions::RequestTxnPartitionsWire::from)
                .collect(),
            flow_limits: self
                .flow
                .limits
                .any()
                .then(|| crate::flow::wire::FlowLimitsWire::from(&self.flow.limits)),
            client_quotas: crate::flow::wire::client_quotas_to_wire(&self.flow.client_quotas),
        }
    }

    /// The state a snapshot holds, in a cluster of `members` (see [`ClusterMeta::to_snapshot`]).
    /// The remembered allocations and request ids keep their order and their bounds.
    pub fn from_snapshot(
        members: Vec<u64>,
        wire: crate::metadata::codec::MetaSnapshotWire,
    ) -> ClusterMeta {
        use crate::metadata::codec::*;
        let mut meta = ClusterMeta::new(members);
        // Snapshots from before runtime membership have no member list: the initial one
        // stands.
        if !wire.members.is_empty() {
            meta.member_records = members_from_wire(wire.members);
        }
        meta.membership_changed = wire.membership_changed;
        for t in wire.topics {
            meta.insert_topic(
                t.name,
                TopicMeta {
                    created_at_index: t.incarnation,
                    partitions: t.partitions,
                    replicas: replicas_from_wire(t.replicas),
                    configs: configs_from_wire(t.configs),
                    deleted_before: t.deleted_before,
                    moving: t
                        .moving
                        .into_iter()
                        .map(|m| (m.partition, m.old_replicas))
                        .collect(),
                },
            );
        }
        meta.next_producer_id = wire.next_producer_id;
        for a in wire.allocations {
            let id = RequestId::from(a.request.unwrap_or_default());
            if meta.allocations.insert(id, a.producer_id).is_none() {
                meta.allocation_order.push_back(id);
            }
        }
        while meta.allocation_order.len() > MAX_REMEMBERED_ALLOCATIONS {
            if let Some(old) = meta.allocation_order.pop_front() {
                meta.allocations.remove(&old);
            }
        }
        for g in wire.offsets {
            let offsets = g
                .offsets
                .into_iter()
                .map(CommittedOffset::from)
                .map(|o| ((o.topic.clone(), o.partition), o))
                .collect();
            meta.offsets.insert(g.group, offsets);
        }
        for p in wire.txn_offsets {
            let (key, pending) = p.into_pending();
            if !pending.offsets.is_empty() {
                meta.txn_offsets.insert(key, pending);
            }
        }
        for g in wire.consumer_groups {
            if let Some(record) = g.record {
                meta.consumer_groups.insert(g.group, record);
            }
        }
        for g in wire.groups {
            if let Some(record) = g.record {
                meta.groups.insert(g.group, GroupRecord::from(record));
            }
        }
        for a in wire.activity {
            meta.group_activity_ms.insert(a.group, a.time_ms);
        }
        for id in wire.applied {
            meta.remember(RequestId::from(id));
        }
        for b in wire.acls {
            if let Some(b) = b.to_binding() {
                meta.acls.insert(b);
            }
        }
        for c in wire.scram_credentials {
            if let Some((user, credential)) = c.to_credential() {
                meta.scram_credentials
                    .insert((user, credential.mechanism), credential);
            }
        }
        meta.scram_users_imported = wire.scram_users_imported;
        for t in wire.transactions {
            let record = crate::metadata::TxnRecord::from(t.record.unwrap_or_default());
            if record.status.preparing().is_some() {
                meta.deciding_transactions
                    .insert(t.transactional_id.clone());
            }
            meta.transactions.insert(t.transactional_id, record);
        }
        meta.txn_partition_requests = wire
            .txn_partition_requests
            .into_iter()
            .map(crate::metadata::txn_partition_requests::TxnPartitionRequest::from)
            .collect();
        meta.flow = Arc::new(FlowSettings {
            limits: wire.flow_limits.map(FlowLimits::from).unwrap_or_default(),
            client_quotas: crate::flow::wire::client_quotas_from_wire(wire.client_quotas),
        });
        meta
    }

    /// The current incarnation of topic `name`, if it exists.
    pub fn incarnation(&self, name: &str) -> Option<u64> {
        self.topics.get(name).map(|t| t.created_at_index)
    }

    /// Adds topic `name` (replacing one of that name) and indexes its id.
    pub(super) fn insert_topic(&mut self, name: String, topic: TopicMeta) {
        let incarnation = topic.created_at_index;
        if let Some(old) = self.topics.insert(name.clone(), topic) {
            self.topic_ids.remove(&name, old.created_at_index);
        }
        self.topic_ids.insert(&name, incarnation);
    }

    /// Removes topic `name` and its id.
    pub(super) fn remove_topic(&mut self, name: &str) -> Option<TopicMeta> {
        let topic = self.topics.remove(name)?;
        self.topic_ids.remove(name, topic.created_at_index);
        Some(topic)
    }

    /// The topic (name) whose id is `id`; one hash look-up. Streams configured at start are
    /// not topics of the metadata: the node looks them up itself.
    pub fn topic_name_by_id(&self, id: kafka_proto::Uuid) -> Option<&str> {
        let name = self.topic_ids.name(id)?;
        debug_assert_eq!(
            self.incarnation(name)
                .map(|i| crate::metadata::topic_ids::topic_id(name, i)),
            Some(id),
            "the id index follows the topics"
        );
        Some(name)
    }

    /// The id index, for tests of its consistency with [`ClusterMeta::topics`].
    pub fn topic_ids(&self) -> &crate::metadata::topic_ids::TopicIds {
        &self.topic_ids
    }

    /// Partitions of every topic together.
    pub fn total_partitions(&self) -> u64 {
        self.topics.values().map(|t| u64::from(t.partitions)).sum()
    }

    /// Whether request `id` was applied (among the most recent [`MAX_REMEMBERED_REQUESTS`]).
    pub fn was_applied(&self, id: &RequestId) -> bool {
        self.applied.contains(id)
    }

    /// Records activity of group `group` at `time_ms` (0: unknown, ignored).
    pub(super) fn note_activity(&mut self, group: &str, time_ms: i64) {
        if time_ms <= 0 {
            return;
        }
        let at = self.group_activity_ms.entry(group.to_owned()).or_insert(0);
        *at = (*at).max(time_ms);
    }

    /// Groups whose committed offsets are due to expire at `now_ms` after `retention_ms`
    /// without activity, with the activity seen: groups without a stored membership or pending
    /// transactional offsets whose last recorded activity is at least `retention_ms` old. At
    /// most `limit`.
    pub fn expired_groups(
        &self,
        now_ms: i64,
        retention_ms: i64,
        limit: usize,
    ) -> Vec<(String, i64)> {
        self.group_activity_ms
            .iter()
            .filter(|(g, at)| {
                at.saturating_add(retention_ms) <= now_ms
                    && !self.groups.contains_key(*g)
                    && self
                        .consumer_groups
                        .get(*g)
                        .is_none_or(|r| r.members.is_empty())
                    && self.offsets.contains_key(*g)
                    && !self.has_pending_txn_offsets(g)
            })
            .take(limit)
            .map(|(g, at)| (g.clone(), *at))
            .collect()
    }

    pub(super) fn remember(&mut self, id: RequestId) {
        if self.applied.insert(id) {
            self.applied_order.push_back(id);
        }
        while self.applied_order.len() > MAX_REMEMBERED_REQUESTS {
            if let Some(old) = self.applied_order.pop_front() {
                self.applied.remove(&old);
            }
        }
    }
}
