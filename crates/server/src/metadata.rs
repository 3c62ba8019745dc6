//! Cluster metadata, replicated through its own Raft group (group id 1, every node a voter):
//! which topics exist, producer ids handed out, and consumer groups' committed offsets. Every
//! node applies the same commands in the same order, so every node holds the same metadata, and
//! a committed change survives the death of any minority of nodes.
//!
//! Commands are stored in `Meta` entries as protobuf with a leading format byte
//! ([`crate::metadata_codec`], which also reads the JSON entries of older versions). Every
//! `metadata.snapshot_interval_entries` applied entries the state is written to a snapshot and
//! the log compacted below it ([`crate::metadata_snapshot`]); on restart the group loads the
//! newest snapshot and replays the entries after it. Retention rules never apply to this log.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, RwLock, Weak};

use serde::{Deserialize, Serialize};

use crate::flow::settings::{FlowLimits, FlowSettings, QuotaAlteration};
use crate::replication::group::StateMachine;
use crate::security::acl::{AclBinding, AclSet};
use crate::security::scram::{ScramCredential, ScramMechanism};

/// Group id of the metadata group.
pub const METADATA_GROUP_ID: u64 = 1;
/// Name of the metadata group's stream directory (not a topic).
pub const METADATA_STREAM: &str = "__cluster_metadata";
/// Producer ids handed out per InitProducerId (one id per producer, as Kafka does).
/// The first producer id the metadata hands out ([`MetaCommand::AllocateProducerId`]).
pub const FIRST_PRODUCER_ID: i64 = 1000;
/// Allocation results remembered for proposers to read back.
const MAX_REMEMBERED_ALLOCATIONS: usize = 4096;

/// A change to the cluster metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaCommand {
    /// Create a topic on every node: `partitions` log streams, each its own Raft group. The
    /// topic's incarnation is the Raft index of this command, so a topic deleted and created
    /// again under the same name is a different set of streams (own directories, Raft groups
    /// and topic id).
    CreateTopic {
        /// Topic name.
        name: String,
        /// Number of partitions (commands written before partitions: 1).
        #[serde(default = "one_partition")]
        partitions: u32,
        /// The replicas of each partition, preferred leader first, chosen by the proposer (see
        /// [`crate::replication::placement`]). Empty (commands written before placement): every
        /// member.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        replicas: Vec<Vec<u64>>,
        /// The topic's config overrides (Kafka names, validated values; see
        /// [`crate::topic_config`]).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        configs: BTreeMap<String, String>,
    },
    /// Grow a topic to `count` partitions (CreatePartitions). Does nothing when the named
    /// incarnation is no longer current or the topic has `count` partitions or more already.
    CreatePartitions {
        /// Topic name.
        name: String,
        /// The incarnation the request was made against.
        incarnation: u64,
        /// The new total number of partitions.
        count: u32,
        /// The replicas of every partition `0..count`, preferred leader first; only the lists of
        /// partitions that do not exist yet are used (indexing by partition keeps two racing
        /// requests consistent). Empty (commands written before placement): the new partitions
        /// live on every member.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        replicas: Vec<Vec<u64>>,
    },
    /// Delete a topic and its data on every node.
    DeleteTopic {
        /// Topic name.
        name: String,
        /// The incarnation to delete: a command that names an incarnation that is no longer
        /// current (the topic was deleted and created again since) does nothing. None (commands
        /// written before incarnations, and streams configured at start) deletes whatever is
        /// there under the name.
        #[serde(default)]
        incarnation: Option<u64>,
    },
    /// Change a topic's config overrides (AlterConfigs, IncrementalAlterConfigs): with
    /// `replace_all` the overrides become exactly `set` (AlterConfigs' semantics); otherwise the
    /// names in `remove` go back to their defaults, then `set` is applied. Does nothing when the
    /// named incarnation is no longer current.
    AlterTopicConfigs {
        /// Topic name.
        name: String,
        /// The incarnation the request was made against.
        incarnation: u64,
        /// Overrides to set (validated by the proposer).
        set: BTreeMap<String, String>,
        /// Overrides to remove.
        remove: Vec<String>,
        /// Replace every override (AlterConfigs) instead of changing the named ones.
        replace_all: bool,
    },
    /// Delete a partition's records below `offset` (DeleteRecords): its log start offset
    /// becomes at least `offset` on every replica, whole segments below it are removed. Does
    /// nothing when the named incarnation is no longer current.
    DeleteRecords {
        /// Topic name.
        name: String,
        /// The incarnation the request was made against.
        incarnation: u64,
        /// Partition index.
        partition: u32,
        /// The new log start offset (at most the high watermark when proposed).
        offset: u64,
    },
    /// Remove a consumer group's committed offsets: every one (DeleteGroups) when `partitions`
    /// is `None`, else those of the listed (topic, partition)s (OffsetDelete).
    DeleteGroupOffsets {
        /// Consumer group id.
        group: String,
        /// The partitions whose offsets go; `None`: the whole group.
        partitions: Option<Vec<(String, i32)>>,
    },
    /// Ask the replica leading a partition to hand leadership to its preferred replica
    /// (ElectLeaders): the node applying it that leads the partition starts a Raft leader
    /// transfer. Nothing is stored; a command replayed at start does nothing.
    ElectPreferredLeader {
        /// Topic name.
        name: String,
        /// The incarnation the request was made against.
        incarnation: u64,
        /// Partition index.
        partition: u32,
    },
    /// Ask the replica leading a partition to hand leadership to replica `to` (`vdlctl leader
    /// transfer`): like [`MetaCommand::ElectPreferredLeader`] with a chosen target, which must
    /// be one of the partition's replicas. Nothing is stored; replayed at start it does nothing.
    TransferLeader {
        /// Topic name.
        name: String,
        /// The incarnation the request was made against (0: a stream configured at start).
        incarnation: u64,
        /// Partition index.
        partition: u32,
        /// The replica that should lead.
        to: u64,
    },
    /// Node `node` serves its admin HTTP API at `address` (each node announces its own, at
    /// start and then periodically, so any node can forward an operator's request to another).
    /// Soft state: kept by each node outside the replicated state, not in snapshots.
    AdminAddress {
        /// Node id.
        node: u64,
        /// Its admin listener, `HOST:PORT`.
        address: String,
    },
    /// Hand out one new producer id.
    AllocateProducerId,
    /// Record committed offsets of a consumer group.
    CommitOffsets {
        /// Consumer group id.
        group: String,
        /// (topic, partition, offset, leader epoch, metadata) per partition.
        offsets: Vec<CommittedOffset>,
        /// The proposer's wall clock at the commit (ms since the epoch; 0: commands written
        /// before offset expiry), the group's last activity for `offsets.retention`.
        #[serde(default, skip_serializing_if = "is_zero")]
        commit_time_ms: i64,
    },
    /// A consumer group's membership as its coordinator stores it where Kafka's writes its
    /// group metadata record: when a rebalance completes (the leader's SyncGroup), when a static
    /// member is replaced, and when the group becomes empty (`record: None`, the group is
    /// forgotten). A new coordinator loads these and resumes the same generation.
    StoreGroup {
        /// Consumer group id.
        group: String,
        /// The membership; None: the group has no members.
        record: Option<GroupRecord>,
        /// The proposer's wall clock (ms since the epoch): a group with committed offsets was
        /// last active then (an emptied group's offsets expire `offsets.retention` later).
        #[serde(default, skip_serializing_if = "is_zero")]
        time_ms: i64,
    },
    /// Expire a consumer group's committed offsets (`offsets.retention`, proposed by the
    /// coordinator): every offset goes, unless the group was active since the proposer looked
    /// (its last activity is no longer `activity_ms`) or has a stored membership.
    ExpireGroupOffsets {
        /// Consumer group id.
        group: String,
        /// The group's last activity (ms since the epoch) the proposer saw.
        activity_ms: i64,
    },
    /// Add ACLs (CreateAcls); bindings present already stay (adding one twice is no error).
    CreateAcls {
        /// The bindings, validated by the proposer.
        acls: Vec<AclBinding>,
    },
    /// Remove ACLs (DeleteAcls): the bindings the proposer found matching the request's
    /// filters; ones gone already are skipped.
    DeleteAcls {
        /// The bindings to remove.
        acls: Vec<AclBinding>,
    },
    /// Set a user's SCRAM credential for one mechanism (AlterUserScramCredentials): salt,
    /// iterations and the derived keys, never a password.
    UpsertScramCredential {
        /// The user name (the SASL user name, principal `User:{user}`).
        user: String,
        /// Kafka's mechanism type (1: SCRAM-SHA-256, 2: SCRAM-SHA-512); an unknown one is not
        /// applied.
        mechanism: i8,
        /// The salt.
        salt: Vec<u8>,
        /// PBKDF2 iterations.
        iterations: u32,
        /// `H(ClientKey)`.
        stored_key: Vec<u8>,
        /// `HMAC(SaltedPassword, "Server Key")`.
        server_key: Vec<u8>,
    },
    /// Import the bootstrap SCRAM users of the configuration (`[[security.scram_users]]`),
    /// once in the cluster's life (Kafka's `kafka-storage format --add-scram`): applied only
    /// while no import is recorded; each credential whose user and mechanism has none yet is
    /// added (within [`crate::security::scram::MAX_CREDENTIALS`]), and the import is recorded
    /// even when it adds nothing. From then on nodes consult only the replicated credentials
    /// (see [`crate::bootstrap_users`]).
    ImportScramUsers {
        /// The configured credentials.
        credentials: Vec<crate::bootstrap_users::ImportedCredential>,
    },
    /// Remove a user's SCRAM credential for one mechanism.
    DeleteScramCredential {
        /// The user name.
        user: String,
        /// Kafka's mechanism type.
        mechanism: i8,
    },
    /// Replace the node-wide flow limits (`vdlctl rate update`, the admin API's `PUT /rates`):
    /// every node then enforces them on its own traffic.
    SetFlowLimits {
        /// The new limits (all of them; `None` is unlimited).
        limits: FlowLimits,
    },
    /// Change client quotas (AlterClientQuotas), each alteration validated by the proposer.
    AlterClientQuotas {
        /// Per entity: quotas set, then quotas removed.
        alterations: Vec<QuotaAlteration>,
    },
    /// Add a member to the cluster (see [`crate::replication::membership`]): every node learns its
    /// peer address, and the metadata group's leader adds it as a learner and promotes it once
    /// caught up. A known id is not changed.
    AddMember {
        /// Its Raft id (non-zero).
        id: u64,
        /// Its name.
        name: String,
        /// Its Raft peer address (`IP:PORT`).
        peer_addr: String,
        /// The Kafka address it advertises (`HOST:PORT`).
        kafka_addr: String,
        /// The member list as the proposer knew it, which applying replaces the list with
        /// first: a node that joined later replays this command with the member list everyone
        /// else had (it started from its own configuration's).
        members: BTreeMap<u64, MemberRecord>,
    },
    /// Remove a member: it is marked leaving, each partition replica it holds moves to another
    /// member (the partition is reassigned, see [`TopicMeta::moving`]), and once it holds none
    /// the metadata group's leader removes it from the metadata group.
    RemoveMember {
        /// Its Raft id.
        id: u64,
        /// The member list as the proposer knew it (see [`MetaCommand::AddMember`]).
        members: BTreeMap<u64, MemberRecord>,
    },
    /// A reassigned partition's Raft group has exactly its new replicas as voters (proposed
    /// by its leader): the replicas that left it stop their group and delete its data.
    FinishReassignment {
        /// Topic name.
        name: String,
        /// The incarnation.
        incarnation: u64,
        /// Partition index.
        partition: u32,
    },
}

/// A cluster member as the replicated metadata knows it (see [`crate::replication::membership`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// Its name.
    pub name: String,
    /// Its Raft peer address (`IP:PORT`).
    pub peer_addr: String,
    /// The Kafka address it advertises (empty for members of the initial configuration, whose
    /// Kafka address is known from their peer hellos).
    pub kafka_addr: String,
    /// A [`MetaCommand::RemoveMember`] was applied: it is being, or has been, removed.
    pub leaving: bool,
}

/// A consumer group's membership in the metadata (see [`MetaCommand::StoreGroup`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// The generation.
    pub generation: i32,
    /// The protocol type ("consumer").
    pub protocol_type: String,
    /// The chosen protocol.
    pub protocol: String,
    /// The leader's member id.
    pub leader: String,
    /// Members in join order.
    pub members: Vec<GroupMemberRecord>,
}

/// One member of a [`GroupRecord`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMemberRecord {
    /// Member id.
    pub member_id: String,
    /// Static instance id.
    pub instance_id: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: i32,
    /// (name, metadata) per supported protocol, most preferred first.
    pub protocols: Vec<(String, Vec<u8>)>,
    /// The member's assignment.
    pub assignment: Vec<u8>,
}

/// A command as it is stored in the metadata log: with the id of the request that proposed it,
/// so a proposal retried after its first attempt was reported lost (but committed all the same)
/// is applied once. Entries written before request ids decode as a bare [`MetaCommand`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaEntry {
    /// Unique per request across nodes and restarts (see [`RequestId`]).
    pub request: RequestId,
    /// The command.
    pub command: MetaCommand,
}

/// A metadata request's id: the proposing node, a nonce drawn when that node started (clock and
/// process id), and a counter. Unique across restarts without any state on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId {
    /// The proposing node.
    pub node: u64,
    /// Drawn once per process start.
    pub boot: u64,
    /// Counts requests of this process.
    pub seq: u64,
}

impl MetaEntry {
    /// The entry's bytes in the metadata log (the current format, see
    /// [`crate::metadata_codec`]).
    pub fn encode(&self) -> Vec<u8> {
        crate::metadata_codec::encode_entry(self)
    }

    /// The entry's bytes in the JSON of earlier releases, which they can read (written only
    /// while a node of such a release is in the cluster).
    pub fn encode_json(&self) -> Vec<u8> {
        crate::metadata_codec::encode_entry_json(self)
    }

    /// Decodes an entry of any version: protobuf, or the JSON of older logs, with or without a
    /// request id.
    pub fn decode(
        data: &[u8],
    ) -> Result<(Option<RequestId>, MetaCommand), crate::metadata_codec::MetaDecodeError> {
        crate::metadata_codec::decode_entry(data)
    }
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// Now on this node's wall clock, ms since the epoch (the time metadata commands carry).
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn one_partition() -> u32 {
    1
}

/// One partition's committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The next offset the group will consume.
    pub offset: i64,
    /// Leader epoch the client saw, -1 when unknown.
    pub leader_epoch: i32,
    /// Client metadata string.
    pub metadata: Option<String>,
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
    members: Vec<u64>,
    /// Every member by id, with its addresses: the initial members, then those added and
    /// removed at runtime (see [`crate::replication::membership`]).
    pub member_records: BTreeMap<u64, MemberRecord>,
    /// A membership command was applied: from then on the member list, not the configured
    /// voters, says who the metadata group's voters are (until then a node's configuration
    /// alone, possibly edited by hand, must never reshape the group).
    pub membership_changed: bool,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicMeta>,
    /// The next producer id to hand out.
    pub next_producer_id: i64,
    /// Producer ids handed out, by the request that allocated them (the newest
    /// [`MAX_REMEMBERED_ALLOCATIONS`]).
    pub allocations: HashMap<RequestId, i64>,
    allocation_order: VecDeque<RequestId>,
    /// Committed offsets: group -> (topic, partition) -> offset.
    pub offsets: HashMap<String, BTreeMap<(String, i32), CommittedOffset>>,
    /// Consumer groups' membership as last stored by their coordinator (groups with members).
    pub groups: HashMap<String, GroupRecord>,
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
    /// Flow control: node-wide limits and client quotas (shared with request handlers,
    /// replaced on change).
    pub flow: Arc<FlowSettings>,
    /// Recently applied requests, oldest first, and the same as a set.
    applied_order: VecDeque<RequestId>,
    applied: HashSet<RequestId>,
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
    fn replica_counts(&self) -> BTreeMap<u64, usize> {
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
    fn remove_member(&mut self, id: u64) -> bool {
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
    fn resolve_replicas(
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
    /// [`crate::metadata_codec::encode_snapshot`]. Carries every field applying a command reads
    /// (see [`crate::metadata_snapshot`] for why replaying after it equals a full replay),
    /// except `members`, which comes from the node's configuration. Maps are written in key
    /// order, so equal states give equal bytes.
    pub fn to_snapshot(&self, index: u64, term: u64) -> crate::metadata_codec::MetaSnapshotWire {
        use crate::metadata_codec::*;
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
            groups,
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
        wire: crate::metadata_codec::MetaSnapshotWire,
    ) -> ClusterMeta {
        use crate::metadata_codec::*;
        let mut meta = ClusterMeta::new(members);
        // Snapshots from before runtime membership have no member list: the initial one
        // stands.
        if !wire.members.is_empty() {
            meta.member_records = members_from_wire(wire.members);
        }
        meta.membership_changed = wire.membership_changed;
        for t in wire.topics {
            meta.topics.insert(
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

    /// Partitions of every topic together.
    pub fn total_partitions(&self) -> u64 {
        self.topics.values().map(|t| u64::from(t.partitions)).sum()
    }

    /// Whether request `id` was applied (among the most recent [`MAX_REMEMBERED_REQUESTS`]).
    pub fn was_applied(&self, id: &RequestId) -> bool {
        self.applied.contains(id)
    }

    /// Records activity of group `group` at `time_ms` (0: unknown, ignored).
    fn note_activity(&mut self, group: &str, time_ms: i64) {
        if time_ms <= 0 {
            return;
        }
        let at = self.group_activity_ms.entry(group.to_owned()).or_insert(0);
        *at = (*at).max(time_ms);
    }

    /// Groups whose committed offsets are due to expire at `now_ms` after `retention_ms`
    /// without activity, with the activity seen: groups without a stored membership whose last
    /// recorded activity is at least `retention_ms` old. At most `limit`.
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
                    && self.offsets.contains_key(*g)
            })
            .take(limit)
            .map(|(g, at)| (g.clone(), *at))
            .collect()
    }

    fn remember(&mut self, id: RequestId) {
        if self.applied.insert(id) {
            self.applied_order.push_back(id);
        }
        while self.applied_order.len() > MAX_REMEMBERED_REQUESTS {
            if let Some(old) = self.applied_order.pop_front() {
                self.applied.remove(&old);
            }
        }
    }

    /// Applies `cmd` (committed at `index`, proposed as `request`) to this state alone, without
    /// the effects on a node (opening or dropping streams): for tools, tests and fuzzing. The
    /// same rules as the metadata group's apply, so the same commands give the same state.
    pub fn apply_to_state(&mut self, index: u64, request: Option<RequestId>, cmd: MetaCommand) {
        let _ = self.apply(index, request, cmd);
    }

    fn apply(
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
                self.topics.insert(
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
                        self.topics.remove(&name);
                        // A deleted topic's committed offsets go with it, as in Kafka: a topic
                        // created again under the name starts with none.
                        for group in self.offsets.values_mut() {
                            group.retain(|(topic, _), _| *topic != name);
                        }
                        self.offsets.retain(|_, g| !g.is_empty());
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
                match partitions {
                    None => {
                        self.offsets.remove(&group);
                        self.groups.remove(&group);
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
                        self.groups.insert(group, r);
                    }
                    _ => {
                        self.groups.remove(&group);
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
                let g = self.offsets.entry(group).or_default();
                for o in offsets {
                    g.insert((o.topic.clone(), o.partition), o);
                }
                None
            }
            MetaCommand::ExpireGroupOffsets { group, activity_ms } => {
                let unchanged = self.group_activity_ms.get(&group) == Some(&activity_ms);
                if unchanged && !self.groups.contains_key(&group) {
                    self.offsets.remove(&group);
                    self.group_activity_ms.remove(&group);
                }
                None
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
                    let added = crate::bootstrap_users::apply_import(
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

/// What the metadata group's state machine asks of the node that hosts the replica. The node
/// implements it; the deterministic simulation (`tests/simulation/`) implements it with a
/// recorder, so the metadata group runs there without a node, a runtime or sockets.
pub trait MetadataHost: Send + Sync {
    /// Carries out what a command applied just now asks of this node (open or drop a topic's
    /// streams, apply its settings, ...). Called on the metadata group's thread, in log order.
    fn carry_out(&self, effect: Effect);
    /// Entry `index` was applied (or skipped as undecodable, as on every node) and its effect
    /// carried out; also called once with the index a start or an installed snapshot begins at.
    fn metadata_applied(&self, index: u64);
    /// A snapshot at `index` received from the leader replaced the state (the entries it covers
    /// are not applied one by one): bring the node in line with the new state.
    fn snapshot_installed(&self, index: u64);
    /// Whether the metadata log may be compacted below a snapshot now (every member can install
    /// one).
    fn compaction_allowed(&self) -> bool;
}

/// Applies metadata commands on the metadata group's thread, and writes and installs the
/// state's snapshots (see [`crate::metadata_snapshot`]).
pub struct MetadataStateMachine {
    state: Arc<RwLock<ClusterMeta>>,
    host: Weak<dyn MetadataHost>,
    /// The metadata group's directory, where snapshot files go.
    dir: std::path::PathBuf,
    /// Applied entries between snapshots (0: none are taken).
    interval_entries: u64,
    /// The newest durable snapshot, shared with the group's Raft storage.
    latest: crate::replication::raft_storage::LatestSnapshot,
    /// The applied index at which the next snapshot is due.
    next_due: u64,
}

impl MetadataStateMachine {
    /// A state machine writing into `state`, asking `host` to carry out what applied commands
    /// ask of the node (open or drop streams, ...), and snapshotting every `interval_entries`
    /// applied entries (0: never) into `dir`. The host is held weakly: once it is gone,
    /// commands still change `state` but their effects are dropped.
    pub fn new(
        state: Arc<RwLock<ClusterMeta>>,
        host: Weak<dyn MetadataHost>,
        dir: std::path::PathBuf,
        interval_entries: u64,
    ) -> MetadataStateMachine {
        MetadataStateMachine {
            state,
            host,
            dir,
            interval_entries,
            latest: crate::replication::raft_storage::LatestSnapshot::default(),
            next_due: interval_entries,
        }
    }

    /// The newest durable snapshot, which the group's Raft storage sends to followers.
    pub fn latest(&self) -> crate::replication::raft_storage::LatestSnapshot {
        self.latest.clone()
    }

    /// The snapshot loaded at start (the newest in the metadata directory): its state replaces
    /// this machine's, and it becomes the one sent to followers. Returns its (index, term).
    pub fn load(
        &mut self,
        wire: crate::metadata_codec::MetaSnapshotWire,
        bytes: Vec<u8>,
    ) -> (u64, u64) {
        let (index, term) = (wire.index, wire.term);
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let keep = wire
            .members
            .is_empty()
            .then(|| state.member_records.clone());
        *state = ClusterMeta::from_snapshot(state.members.clone(), wire);
        if let Some(records) = keep {
            state.member_records = records;
        }
        drop(state);
        self.latest
            .set(crate::replication::raft_storage::StoredSnapshot {
                index,
                term,
                data: bytes.into(),
            });
        self.next_due = index.saturating_add(self.interval_entries);
        (index, term)
    }
}

/// Why the metadata log and its snapshots could not be brought back at start.
#[derive(Debug, thiserror::Error)]
pub enum MetadataRecoveryError {
    /// The newest snapshot could not be read or is damaged.
    #[error("{0}")]
    Snapshot(#[from] crate::metadata_snapshot::SnapshotFileError),
    /// The log was compacted but no snapshot covers the entries removed.
    #[error(
        "the metadata log in {dir} starts at index {first_index} but the newest snapshot covers \
         only up to {snapshot_index}: the entries between are missing"
    )]
    LogGap {
        /// The metadata directory.
        dir: std::path::PathBuf,
        /// The first entry kept.
        first_index: u64,
        /// The newest snapshot's index (0: none).
        snapshot_index: u64,
    },
    /// The metadata log's store failed.
    #[error("{0}")]
    Store(#[from] logstore::LogStoreError),
}

impl MetadataStateMachine {
    /// At start, before the group opens: loads the newest snapshot in `dir` into this machine
    /// (its state and the snapshot sent to followers) and makes the metadata log `store` start
    /// no later than right after it. Returns the snapshot's index: the group replays the log
    /// from there (None: no snapshot, the log must start at index 1). Does not tell the host:
    /// the caller brings the node in line with the loaded state.
    pub fn recover(
        &mut self,
        dir: &std::path::Path,
        store: &mut logstore::LogStore,
    ) -> Result<Option<u64>, MetadataRecoveryError> {
        let Some((wire, bytes)) = crate::metadata_snapshot::load_newest(dir)? else {
            if store.first_index() > 1 {
                return Err(MetadataRecoveryError::LogGap {
                    dir: dir.to_owned(),
                    first_index: store.first_index(),
                    snapshot_index: 0,
                });
            }
            return Ok(None);
        };
        let (index, term) = self.load(wire, bytes);
        if index + 1 < store.first_index() {
            return Err(MetadataRecoveryError::LogGap {
                dir: dir.to_owned(),
                first_index: store.first_index(),
                snapshot_index: index,
            });
        }
        // The log ends before the snapshot (a snapshot installed from the leader, then a crash
        // before the log was reset), or holds another term at its index (entries never
        // committed): the log restarts right after the snapshot.
        let matches = index <= store.last_index()
            && (index + 1 == store.first_index() || store.term(index).ok() == Some(term));
        if !matches {
            store.install_snapshot(index, term, store.next_offset())?;
        }
        Ok(Some(index))
    }
}

impl StateMachine for MetadataStateMachine {
    fn apply(&mut self, index: u64, data: &[u8]) {
        let host = self.host.upgrade();
        let (request, cmd) = match MetaEntry::decode(data) {
            Ok(c) => c,
            Err(e) => {
                // Every node skips the same undecodable entry, so they stay in agreement.
                tracing::error!(index, "undecodable metadata command skipped: {e}");
                if let Some(host) = host {
                    host.metadata_applied(index);
                }
                return;
            }
        };
        let effect = self
            .state
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply(index, request, cmd);
        let Some(host) = host else {
            return;
        };
        if let Some(effect) = effect {
            host.carry_out(effect);
        }
        host.metadata_applied(index);
    }

    fn after_apply(&mut self, index: u64, term: u64) -> u64 {
        if self.interval_entries == 0 || index < self.next_due {
            return self.latest.index();
        }
        // Retried an interval later when it fails.
        self.next_due = index.saturating_add(self.interval_entries);
        let started = std::time::Instant::now();
        let wire = self
            .state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .to_snapshot(index, term);
        let bytes = crate::metadata_codec::encode_snapshot(&wire);
        drop(wire);
        if bytes.len() > crate::metadata_snapshot::MAX_SNAPSHOT_BYTES {
            tracing::error!(
                index,
                bytes = bytes.len(),
                "the metadata state is too large for a snapshot: none written, the log is kept"
            );
            return self.latest.index();
        }
        match crate::metadata_snapshot::write(&self.dir, index, &bytes) {
            Ok(path) => {
                tracing::info!(
                    index,
                    bytes = bytes.len(),
                    took_ms = started.elapsed().as_millis() as u64,
                    path = %path.display(),
                    "metadata snapshot written"
                );
                self.latest
                    .set(crate::replication::raft_storage::StoredSnapshot {
                        index,
                        term,
                        data: bytes.into(),
                    });
            }
            Err(e) => tracing::error!(index, "writing a metadata snapshot failed: {e}"),
        }
        self.latest.index()
    }

    fn newest_snapshot(&self) -> u64 {
        self.latest.index()
    }

    fn compaction_allowed(&self) -> bool {
        self.host.upgrade().is_some_and(|h| h.compaction_allowed())
    }

    fn check_snapshot(&self, index: u64, data: &[u8]) -> Result<(), String> {
        let wire = crate::metadata_codec::decode_snapshot(data).map_err(|e| e.to_string())?;
        if wire.index != index {
            return Err(format!(
                "the state is at index {} but the snapshot claims {index}",
                wire.index
            ));
        }
        Ok(())
    }

    fn install_snapshot(&mut self, index: u64, term: u64, data: &[u8]) {
        let wire = crate::metadata_codec::decode_snapshot(data)
            .unwrap_or_else(|e| panic!("a checked metadata snapshot does not decode: {e}"));
        // Durable before the log is reset after it (a restart then loads this state).
        let path = crate::metadata_snapshot::write(&self.dir, index, data)
            .unwrap_or_else(|e| panic!("persisting a received metadata snapshot failed: {e}"));
        tracing::info!(index, term, path = %path.display(), "metadata snapshot installed from the leader");
        self.load(wire, data.to_vec());
        if let Some(host) = self.host.upgrade() {
            host.snapshot_installed(index);
            host.metadata_applied(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(seq: u64) -> Option<RequestId> {
        Some(RequestId {
            node: 1,
            boot: 42,
            seq,
        })
    }

    fn create(name: &str) -> MetaCommand {
        MetaCommand::CreateTopic {
            name: name.into(),
            partitions: 1,
            replicas: Vec::new(),
            configs: BTreeMap::new(),
        }
    }

    /// Item 11 of the lifecycle issue: a retried command (same request id) applies once, and a
    /// delete naming an older incarnation leaves the newer one alone.
    #[test]
    fn retries_apply_once_and_deletes_name_their_incarnation() {
        let mut m = ClusterMeta::default();
        assert!(m.apply(5, id(1), create("t")).is_some());
        let delete_old = MetaCommand::DeleteTopic {
            name: "t".into(),
            incarnation: Some(5),
        };
        assert!(m.apply(6, id(2), delete_old.clone()).is_some());
        assert!(m.apply(9, id(3), create("t")).is_some());
        assert_eq!(m.incarnation("t"), Some(9));
        // The delete retried with its request id: nothing happens.
        assert!(m.apply(10, id(2), delete_old.clone()).is_none());
        // The same delete under a new id (a client retry): the current incarnation stays.
        m.apply(11, id(4), delete_old);
        assert_eq!(m.incarnation("t"), Some(9));
        // A producer id allocation retried applies once.
        m.apply(12, id(5), MetaCommand::AllocateProducerId);
        m.apply(13, id(5), MetaCommand::AllocateProducerId);
        assert_eq!(m.next_producer_id, FIRST_PRODUCER_ID + 1);
        assert_eq!(m.allocations.get(&id(5).unwrap()), Some(&FIRST_PRODUCER_ID));
        // Old log entries without ids still decode.
        let bare = serde_json::to_vec(&create("x")).unwrap();
        assert_eq!(MetaEntry::decode(&bare).unwrap(), (None, create("x")));
        let old_delete = br#"{"DeleteTopic":{"name":"x"}}"#;
        assert_eq!(
            MetaEntry::decode(old_delete).unwrap().1,
            MetaCommand::DeleteTopic {
                name: "x".into(),
                incarnation: None
            }
        );
    }

    /// Partitions only grow, and only for the incarnation the request named; old create
    /// commands (before partitions) mean one partition.
    #[test]
    fn partitions_grow_for_the_named_incarnation_only() {
        let mut m = ClusterMeta::default();
        let created = MetaCommand::CreateTopic {
            name: "t".into(),
            partitions: 3,
            replicas: Vec::new(),
            configs: BTreeMap::new(),
        };
        assert!(m.apply(4, id(1), created).is_some());
        let grow = |incarnation, count| MetaCommand::CreatePartitions {
            name: "t".into(),
            incarnation,
            count,
            replicas: Vec::new(),
        };
        assert!(m.apply(5, id(2), grow(4, 2)).is_none(), "shrinking");
        assert!(
            m.apply(6, id(3), grow(3, 8)).is_none(),
            "another incarnation"
        );
        assert_eq!(m.topics["t"].partitions, 3);
        assert!(m.apply(7, id(4), grow(4, 5)).is_some());
        assert_eq!(m.topics["t"].partitions, 5);
        assert_eq!(m.total_partitions(), 5);
        let old_create = br#"{"CreateTopic":{"name":"x"}}"#;
        assert_eq!(
            MetaEntry::decode(old_create).unwrap().1,
            MetaCommand::CreateTopic {
                name: "x".into(),
                partitions: 1,
                replicas: Vec::new(),
                configs: BTreeMap::new(),
            }
        );
    }

    /// Replica lists travel in the commands: stored as given, refused when malformed, every
    /// member for commands from before placement; growth takes the lists of the new partitions
    /// only, by partition index, so two racing grow requests agree.
    #[test]
    fn replica_lists_come_from_the_commands() {
        let mut m = ClusterMeta::new(vec![3, 1, 2, 4, 5]);
        let lists = crate::replication::placement::assign(&[1, 2, 3, 4, 5], 3, 0, 4, 2, 1);
        let create = |name: &str, replicas: Vec<Vec<u64>>| MetaCommand::CreateTopic {
            name: name.into(),
            partitions: replicas.len().max(1) as u32,
            replicas,
            configs: BTreeMap::new(),
        };
        assert!(m.apply(1, id(1), create("t", lists.clone())).is_some());
        assert_eq!(m.topics["t"].replicas, lists);
        // Malformed: node id 0, a duplicate, a partition without replicas. An id this node
        // does not know is applied (a node that joined later replays commands from before it
        // knew every member; see `resolve_replicas`).
        assert!(m.apply(2, id(2), create("bad", vec![vec![1, 0]])).is_none());
        assert!(m
            .apply(2, id(20), create("bad", vec![vec![1, 1]]))
            .is_none());
        assert!(m.apply(3, id(3), create("bad", vec![vec![]])).is_none());
        assert!(!m.topics.contains_key("bad"));
        // Before placement: every member, rotated.
        assert!(m.apply(4, id(4), create("old", Vec::new())).is_some());
        assert_eq!(m.topics["old"].replicas[0].len(), 5);
        let all = crate::replication::placement::assign(&[1, 2, 3, 4, 5], 3, 0, 8, 2, 1);
        let grow = |count: u32, replicas: Vec<Vec<u64>>| MetaCommand::CreatePartitions {
            name: "t".into(),
            incarnation: 1,
            count,
            replicas,
        };
        assert!(m.apply(5, id(5), grow(6, all[..6].to_vec())).is_some());
        // A request made when the topic had 4 partitions, applied after it grew to 6.
        assert!(m.apply(6, id(6), grow(8, all.clone())).is_some());
        assert_eq!(m.topics["t"].replicas, all);
        assert!(
            m.apply(7, id(7), grow(9, all.clone())).is_none(),
            "8 lists for 9"
        );
        assert_eq!(m.topics["t"].partitions, 8);
        // Encoded without the field when empty, so older nodes read new commands of old shape.
        let json = serde_json::to_string(&create("x", Vec::new())).unwrap();
        assert!(!json.contains("replicas"), "{json}");
    }

    /// Item 6: deleting a topic removes every group's committed offsets for it.
    #[test]
    fn a_deleted_topics_offsets_are_removed() {
        let mut m = ClusterMeta::default();
        m.apply(1, id(1), create("t"));
        let offset = |topic: &str| CommittedOffset {
            topic: topic.into(),
            partition: 0,
            offset: 100,
            leader_epoch: -1,
            metadata: None,
        };
        m.apply(
            2,
            id(2),
            MetaCommand::CommitOffsets {
                group: "g".into(),
                offsets: vec![offset("t"), offset("other")],
                commit_time_ms: 0,
            },
        );
        m.apply(
            3,
            id(3),
            MetaCommand::DeleteTopic {
                name: "t".into(),
                incarnation: Some(1),
            },
        );
        let g = &m.offsets["g"];
        assert!(!g.contains_key(&("t".to_string(), 0)));
        assert!(g.contains_key(&("other".to_string(), 0)));
    }

    /// Topic configs: set at creation, changed incrementally or replaced, only for the named
    /// incarnation; invalid values never stored. DeleteRecords only raises a partition's floor.
    /// Group offsets go per partition or all at once.
    #[test]
    fn configs_records_floors_and_group_offsets_follow_their_commands() {
        let mut m = ClusterMeta::default();
        let configs: BTreeMap<String, String> = [
            ("retention.ms".to_string(), "1000".to_string()),
            ("no.such".to_string(), "1".to_string()),
        ]
        .into();
        m.apply(
            1,
            id(1),
            MetaCommand::CreateTopic {
                name: "t".into(),
                partitions: 2,
                replicas: Vec::new(),
                configs,
            },
        );
        assert_eq!(
            m.topics["t"].configs.len(),
            1,
            "the unknown name is dropped"
        );
        let alter = |incarnation, set: &[(&str, &str)], remove: &[&str], replace_all| {
            MetaCommand::AlterTopicConfigs {
                name: "t".into(),
                incarnation,
                set: set
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                remove: remove.iter().map(|k| k.to_string()).collect(),
                replace_all,
            }
        };
        assert!(m
            .apply(
                2,
                id(2),
                alter(1, &[("segment.bytes", "2097152")], &[], false)
            )
            .is_some());
        assert_eq!(m.topics["t"].configs.len(), 2);
        assert!(m
            .apply(3, id(3), alter(7, &[("retention.ms", "5")], &[], false))
            .is_none());
        m.apply(4, id(4), alter(1, &[], &["retention.ms"], false));
        assert_eq!(
            m.topics["t"].configs.keys().collect::<Vec<_>>(),
            ["segment.bytes"]
        );
        m.apply(5, id(5), alter(1, &[("retention.ms", "9")], &[], true));
        assert_eq!(
            m.topics["t"].configs.keys().collect::<Vec<_>>(),
            ["retention.ms"]
        );
        let delete = |partition, offset| MetaCommand::DeleteRecords {
            name: "t".into(),
            incarnation: 1,
            partition,
            offset,
        };
        assert!(m.apply(6, id(6), delete(1, 50)).is_some());
        assert!(m.apply(7, id(7), delete(1, 40)).is_none(), "never lowered");
        assert!(m.apply(8, id(8), delete(2, 40)).is_none(), "no partition 2");
        assert_eq!(m.topics["t"].deleted_before(1), 50);
        assert_eq!(m.topics["t"].deleted_before(0), 0);
        let offset = |partition| CommittedOffset {
            topic: "t".into(),
            partition,
            offset: 1,
            leader_epoch: -1,
            metadata: None,
        };
        m.apply(
            9,
            id(9),
            MetaCommand::CommitOffsets {
                group: "g".into(),
                offsets: vec![offset(0), offset(1)],
                commit_time_ms: 0,
            },
        );
        m.apply(
            10,
            id(10),
            MetaCommand::DeleteGroupOffsets {
                group: "g".into(),
                partitions: Some(vec![("t".into(), 0)]),
            },
        );
        assert_eq!(m.offsets["g"].len(), 1);
        m.apply(
            11,
            id(11),
            MetaCommand::DeleteGroupOffsets {
                group: "g".into(),
                partitions: None,
            },
        );
        assert!(!m.offsets.contains_key("g"));
    }

    /// Issue 20 item 1: a group's membership is stored, replaced and forgotten by its commands.
    #[test]
    fn group_membership_is_stored_and_forgotten() {
        let mut m = ClusterMeta::default();
        let record = |generation| GroupRecord {
            generation,
            protocol_type: "consumer".into(),
            protocol: "range".into(),
            leader: "m1".into(),
            members: vec![GroupMemberRecord {
                member_id: "m1".into(),
                instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 300_000,
                protocols: vec![("range".into(), vec![0, 1])],
                assignment: vec![2, 3],
            }],
        };
        let store = |record| MetaCommand::StoreGroup {
            group: "g".into(),
            record,
            time_ms: 0,
        };
        m.apply(1, id(1), store(Some(record(1))));
        m.apply(2, id(2), store(Some(record(2))));
        assert_eq!(m.groups["g"], record(2));
        m.apply(3, id(3), store(None));
        assert!(m.groups.is_empty());
        m.apply(4, id(4), store(Some(record(3))));
        m.apply(
            5,
            id(5),
            MetaCommand::DeleteGroupOffsets {
                group: "g".into(),
                partitions: None,
            },
        );
        assert!(m.groups.is_empty(), "DeleteGroups forgets the group");
    }

    /// Issue 20 item 5: offsets of a group without members expire once its last activity is
    /// older than the retention, unless it was active again or has a stored membership by the
    /// time the expiry applies; offsets without a recorded time never expire.
    #[test]
    fn idle_groups_offsets_expire_unless_active_again() {
        let mut m = ClusterMeta::default();
        let commit = |group: &str, at| MetaCommand::CommitOffsets {
            group: group.into(),
            offsets: vec![CommittedOffset {
                topic: "t".into(),
                partition: 0,
                offset: 5,
                leader_epoch: -1,
                metadata: None,
            }],
            commit_time_ms: at,
        };
        m.apply(1, id(1), commit("idle", 1_000));
        m.apply(2, id(2), commit("busy", 1_000));
        m.apply(3, id(3), commit("old", 0));
        // An empty barrier is no activity.
        m.apply(
            4,
            id(4),
            MetaCommand::CommitOffsets {
                group: "idle".into(),
                offsets: Vec::new(),
                commit_time_ms: 50_000,
            },
        );
        let mut due = m.expired_groups(11_000, 10_000, 10);
        due.sort();
        assert_eq!(
            due,
            vec![("busy".to_string(), 1_000), ("idle".to_string(), 1_000)]
        );
        assert!(m.expired_groups(10_999, 10_000, 10).is_empty());
        // "busy" commits again before its expiry applies; "idle" gets members stored.
        m.apply(5, id(5), commit("busy", 10_500));
        let expire = |group: &str, activity_ms| MetaCommand::ExpireGroupOffsets {
            group: group.into(),
            activity_ms,
        };
        m.apply(6, id(6), expire("busy", 1_000));
        assert!(m.offsets.contains_key("busy"), "active again: kept");
        m.apply(7, id(7), expire("idle", 1_000));
        assert!(!m.offsets.contains_key("idle"), "idle: expired");
        assert!(!m.group_activity_ms.contains_key("idle"));
        assert!(m
            .expired_groups(i64::MAX, 10_000, 10)
            .iter()
            .all(|(g, _)| g != "old"));
        // A group with a stored membership keeps its offsets.
        m.apply(8, id(8), commit("members", 1_000));
        m.apply(
            9,
            id(9),
            MetaCommand::StoreGroup {
                group: "members".into(),
                record: Some(GroupRecord {
                    generation: 1,
                    protocol_type: "consumer".into(),
                    protocol: "range".into(),
                    leader: "m".into(),
                    members: vec![GroupMemberRecord {
                        member_id: "m".into(),
                        instance_id: None,
                        client_id: String::new(),
                        client_host: String::new(),
                        session_timeout_ms: 10_000,
                        rebalance_timeout_ms: 10_000,
                        protocols: Vec::new(),
                        assignment: Vec::new(),
                    }],
                }),
                time_ms: 2_000,
            },
        );
        assert_eq!(m.group_activity_ms["members"], 2_000);
        m.apply(10, id(10), expire("members", 2_000));
        assert!(m.offsets.contains_key("members"));
    }

    /// A command list touching every kind of state: topics with configs, partitions grown,
    /// floors, a topic deleted and created again, producer ids (one retried), offsets with and
    /// without times, stored and forgotten groups, expiry, and a retried commit.
    fn history() -> Vec<(u64, Option<RequestId>, MetaCommand)> {
        let commit = |group: &str, topic: &str, partition, offset, at| MetaCommand::CommitOffsets {
            group: group.into(),
            offsets: vec![CommittedOffset {
                topic: topic.into(),
                partition,
                offset,
                leader_epoch: 3,
                metadata: Some(format!("m{offset}")),
            }],
            commit_time_ms: at,
        };
        let member = GroupMemberRecord {
            member_id: "m1".into(),
            instance_id: Some("i1".into()),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 300_000,
            protocols: vec![("range".into(), vec![0, 1])],
            assignment: vec![2, 3],
        };
        let store = |group: &str, generation| MetaCommand::StoreGroup {
            group: group.into(),
            record: Some(GroupRecord {
                generation,
                protocol_type: "consumer".into(),
                protocol: "range".into(),
                leader: "m1".into(),
                members: vec![member.clone()],
            }),
            time_ms: 5_000 + i64::from(generation),
        };
        let mut cmds = vec![
            MetaCommand::CreateTopic {
                name: "t".into(),
                partitions: 2,
                replicas: Vec::new(),
                configs: [("retention.ms".to_string(), "1000".to_string())].into(),
            },
            MetaCommand::CreateTopic {
                name: "gone".into(),
                partitions: 1,
                replicas: Vec::new(),
                configs: BTreeMap::new(),
            },
            MetaCommand::AllocateProducerId,
            MetaCommand::CreatePartitions {
                name: "t".into(),
                incarnation: 1,
                count: 3,
                replicas: Vec::new(),
            },
            MetaCommand::DeleteRecords {
                name: "t".into(),
                incarnation: 1,
                partition: 1,
                offset: 77,
            },
            MetaCommand::AlterTopicConfigs {
                name: "t".into(),
                incarnation: 1,
                set: [("segment.bytes".to_string(), "2097152".to_string())].into(),
                remove: Vec::new(),
                replace_all: false,
            },
            commit("g", "t", 0, 10, 1_000),
            commit("g", "gone", 0, 11, 1_000),
            commit("old", "t", 2, 12, 0),
            commit("idle", "t", 1, 13, 2_000),
            store("g", 1),
            MetaCommand::DeleteTopic {
                name: "gone".into(),
                incarnation: Some(2),
            },
            MetaCommand::AllocateProducerId,
            store("h", 4),
            MetaCommand::StoreGroup {
                group: "h".into(),
                record: None,
                time_ms: 0,
            },
            store("g", 2),
            MetaCommand::ExpireGroupOffsets {
                group: "idle".into(),
                activity_ms: 2_000,
            },
            MetaCommand::SetFlowLimits {
                limits: crate::flow::settings::FlowLimits {
                    produce_bytes_per_sec: Some(1 << 20),
                    tail_read_requests_per_sec: Some(100),
                    ..Default::default()
                },
            },
            MetaCommand::AlterClientQuotas {
                alterations: vec![
                    crate::flow::settings::QuotaAlteration {
                        entity: crate::flow::settings::QuotaEntity {
                            user: Some(crate::flow::settings::EntityName::Named("alice".into())),
                            client_id: Some(crate::flow::settings::EntityName::Default),
                        },
                        set: vec![
                            ("producer_byte_rate".into(), 1024.0),
                            ("request_percentage".into(), 12.5),
                        ],
                        remove: vec![],
                    },
                    crate::flow::settings::QuotaAlteration {
                        entity: crate::flow::settings::QuotaEntity {
                            user: None,
                            client_id: Some(crate::flow::settings::EntityName::Named("x".into())),
                        },
                        set: vec![("consumer_byte_rate".into(), 2048.0)],
                        remove: vec![],
                    },
                ],
            },
            MetaCommand::CreateTopic {
                name: "gone".into(),
                partitions: 1,
                replicas: Vec::new(),
                configs: BTreeMap::new(),
            },
            MetaCommand::CreateAcls {
                acls: vec![
                    AclBinding::from_kafka(2, "t", 3, "User:a", "*", 3, 3).unwrap(),
                    AclBinding::from_kafka(2, "t", 3, "User:b", "*", 3, 3).unwrap(),
                    AclBinding::from_kafka(3, "g-", 4, "User:*", "*", 2, 2).unwrap(),
                ],
            },
            MetaCommand::DeleteAcls {
                acls: vec![AclBinding::from_kafka(2, "t", 3, "User:b", "*", 3, 3).unwrap()],
            },
            MetaCommand::UpsertScramCredential {
                user: "alice".into(),
                mechanism: 2,
                salt: vec![5; 16],
                iterations: 8192,
                stored_key: vec![1; 64],
                server_key: vec![2; 64],
            },
            MetaCommand::UpsertScramCredential {
                user: "bob".into(),
                mechanism: 1,
                salt: vec![6; 16],
                iterations: 4096,
                stored_key: vec![3; 32],
                server_key: vec![4; 32],
            },
            MetaCommand::DeleteScramCredential {
                user: "bob".into(),
                mechanism: 1,
            },
            // An unknown mechanism is not applied.
            MetaCommand::UpsertScramCredential {
                user: "carol".into(),
                mechanism: 9,
                salt: vec![],
                iterations: 4096,
                stored_key: vec![],
                server_key: vec![],
            },
            MetaCommand::AddMember {
                id: 4,
                name: "vdl4".into(),
                peer_addr: "127.0.0.1:9195".into(),
                kafka_addr: "127.0.0.1:9095".into(),
                members: BTreeMap::new(),
            },
            MetaCommand::RemoveMember {
                id: 1,
                members: BTreeMap::new(),
            },
            MetaCommand::FinishReassignment {
                name: "t".into(),
                incarnation: 1,
                partition: 0,
            },
        ];
        for i in 0..40 {
            cmds.push(commit(
                "many",
                "t",
                i % 3,
                i64::from(i),
                3_000 + i64::from(i),
            ));
        }
        let mut out: Vec<_> = (1u64..)
            .zip(cmds)
            .map(|(index, cmd)| (index, id(index), cmd))
            .collect();
        // Retries of requests applied before: an allocation and a commit (refused), and a
        // request without an id.
        let n = out.len() as u64;
        out.push((n + 1, id(3), MetaCommand::AllocateProducerId));
        out.push((n + 2, id(7), commit("g", "t", 0, 999, 9_000)));
        out.push((n + 3, None, MetaCommand::AllocateProducerId));
        out
    }

    /// ACLs and SCRAM credentials stop at their bounds, on every node alike; what exists may
    /// still be replaced or removed.
    #[test]
    fn acls_and_credentials_are_bounded() {
        use crate::security::acl::MAX_ACLS;
        use crate::security::scram::MAX_CREDENTIALS;
        let mut m = ClusterMeta::new(vec![1]);
        let binding =
            |i: usize| AclBinding::from_kafka(2, &format!("t{i}"), 3, "User:a", "*", 3, 3).unwrap();
        m.apply(
            1,
            id(1),
            MetaCommand::CreateAcls {
                acls: (0..=MAX_ACLS).map(binding).collect(),
            },
        );
        assert_eq!(m.acls.len(), MAX_ACLS);
        assert!(!m.acls.contains(&binding(MAX_ACLS)));
        m.apply(
            2,
            id(2),
            MetaCommand::DeleteAcls {
                acls: vec![binding(0)],
            },
        );
        m.apply(
            3,
            id(3),
            MetaCommand::CreateAcls {
                acls: vec![binding(MAX_ACLS)],
            },
        );
        assert!(m.acls.contains(&binding(MAX_ACLS)));
        let upsert = |user: String| MetaCommand::UpsertScramCredential {
            user,
            mechanism: 1,
            salt: vec![1],
            iterations: 4096,
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
        };
        for i in 0..=MAX_CREDENTIALS {
            m.apply(10 + i as u64, None, upsert(format!("u{i}")));
        }
        assert_eq!(m.scram_credentials.len(), MAX_CREDENTIALS);
        // Replacing an existing credential is still allowed.
        m.apply(1 << 40, None, upsert("u0".into()));
        assert_eq!(m.scram_credentials.len(), MAX_CREDENTIALS);
    }

    /// Removing a member moves each of its replicas, in its place, to the member holding none
    /// of that partition and the fewest replicas; the old lists wait in `moving` until the
    /// partition's reassignment finishes; the metadata group keeps the leaving member while it
    /// holds replicas. A member list carried by a command replaces the node's own first.
    #[test]
    fn removing_a_member_reassigns_its_replicas() {
        let mut m = ClusterMeta::new(vec![1, 2, 3]);
        let create = MetaCommand::CreateTopic {
            name: "t".into(),
            partitions: 2,
            replicas: vec![vec![1, 2, 3], vec![2, 3, 1]],
            configs: BTreeMap::new(),
        };
        assert!(m.apply(1, id(1), create).is_some());
        // A joined node's own list lacks node 1; the command's list is applied first.
        let proposer_view = m.member_records.clone();
        let mut joined = ClusterMeta::new(vec![2, 3]);
        let create_again = MetaCommand::CreateTopic {
            name: "t".into(),
            partitions: 2,
            replicas: vec![vec![1, 2, 3], vec![2, 3, 1]],
            configs: BTreeMap::new(),
        };
        assert!(joined.apply(1, id(1), create_again).is_some());
        let add = MetaCommand::AddMember {
            id: 4,
            name: "vdl4".into(),
            peer_addr: "127.0.0.1:9195".into(),
            kafka_addr: "127.0.0.1:9095".into(),
            members: proposer_view,
        };
        for meta in [&mut m, &mut joined] {
            assert!(meta.apply(2, id(2), add.clone()).is_some());
            let remove = MetaCommand::RemoveMember {
                id: 1,
                members: meta.member_records.clone(),
            };
            assert!(meta.apply(3, id(3), remove).is_some());
        }
        // The same state, but for the configured (bootstrap) list each started from.
        assert_eq!(m.member_records, joined.member_records);
        assert_eq!(m.topics, joined.topics);
        let t = &m.topics["t"];
        assert_eq!(t.replicas, vec![vec![4, 2, 3], vec![2, 3, 4]]);
        assert_eq!(t.moving[&0], vec![1, 2, 3]);
        assert_eq!(m.active_members(), vec![2, 3, 4]);
        assert_eq!(m.metadata_voters(), vec![1, 2, 3, 4]);
        // Removing it again, or an unknown id, changes nothing.
        let again = MetaCommand::RemoveMember {
            id: 1,
            members: BTreeMap::new(),
        };
        assert!(m.apply(4, id(4), again).is_none());
        for p in 0..2 {
            let finish = MetaCommand::FinishReassignment {
                name: "t".into(),
                incarnation: 1,
                partition: p,
            };
            assert!(m
                .apply(5 + u64::from(p), id(5 + u64::from(p)), finish)
                .is_some());
        }
        assert!(m.topics["t"].moving.is_empty());
        assert!(!m.hosts_replicas(1));
        assert_eq!(m.metadata_voters(), vec![2, 3, 4]);
    }

    /// A snapshot round-trips every kind of content exactly.
    #[test]
    fn snapshot_round_trips_every_field() {
        let mut m = ClusterMeta::new(vec![1, 2, 3]);
        for (index, request, cmd) in history() {
            m.apply(index, request, cmd);
        }
        assert!(!m.topics.is_empty() && !m.offsets.is_empty() && !m.groups.is_empty());
        assert!(!m.allocations.is_empty() && !m.group_activity_ms.is_empty());
        assert!(m.flow.limits.any() && m.flow.client_quotas.len() == 2);
        assert!(m.topics["t"].deleted_before(1) == 77 && m.topics["t"].configs.len() == 2);
        assert_eq!(m.acls.len(), 2);
        assert_eq!(
            m.scram_credentials.keys().cloned().collect::<Vec<_>>(),
            vec![("alice".to_string(), ScramMechanism::Sha512)]
        );
        assert!(m.member_records.len() == 4 && m.member_records[&1].leaving);
        assert!(m.membership_changed && !m.topics["t"].moving.is_empty());
        let bytes = crate::metadata_codec::encode_snapshot(&m.to_snapshot(60, 7));
        // A seed for the metadata_command fuzz target (fuzz/seed-corpus.sh sets the variable).
        if let Some(dir) = std::env::var_os("VDL_FUZZ_SEEDS_DIR") {
            std::fs::write(std::path::Path::new(&dir).join("snapshot"), &bytes).unwrap();
        }
        let wire = crate::metadata_codec::decode_snapshot(&bytes).unwrap();
        assert_eq!((wire.index, wire.term), (60, 7));
        let back = ClusterMeta::from_snapshot(vec![3, 2, 1], wire);
        assert_eq!(back, m);
        // Deterministic: the same state gives the same bytes.
        assert_eq!(
            crate::metadata_codec::encode_snapshot(&back.to_snapshot(60, 7)),
            bytes
        );
        // Damage is detected, never decoded into a different state.
        for at in [0, 2, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(
                crate::metadata_codec::decode_snapshot(&bad).is_err(),
                "{at}"
            );
        }
        assert!(crate::metadata_codec::decode_snapshot(&bytes[..4]).is_err());
    }

    /// Loading a snapshot taken at any index and applying the commands after it gives the state
    /// a full replay gives; retried requests after the snapshot are still refused.
    #[test]
    fn replay_after_a_snapshot_equals_a_full_replay() {
        let commands = history();
        let mut full = ClusterMeta::new(vec![1, 2, 3]);
        for (index, request, cmd) in commands.clone() {
            full.apply(index, request, cmd);
        }
        for cut in 0..=commands.len() {
            let mut before = ClusterMeta::new(vec![1, 2, 3]);
            for (index, request, cmd) in commands[..cut].iter().cloned() {
                before.apply(index, request, cmd);
            }
            let bytes = crate::metadata_codec::encode_snapshot(&before.to_snapshot(cut as u64, 1));
            let wire = crate::metadata_codec::decode_snapshot(&bytes).unwrap();
            let mut after = ClusterMeta::from_snapshot(vec![1, 2, 3], wire);
            for (index, request, cmd) in commands[cut..].iter().cloned() {
                after.apply(index, request, cmd);
            }
            assert_eq!(after, full, "snapshot after {cut} commands");
        }
    }
}
