//! The metadata's commands as the log stores them: [`MetaCommand`] (every change to the
//! cluster metadata), the records they carry, and [`MetaEntry`] (a command with the request id
//! that makes a retried proposal apply once).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::flow::settings::{FlowLimits, QuotaAlteration};
use crate::security::acl::AclBinding;

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
    /// Record offsets a transactional producer commits for a consumer group (TxnOffsetCommit):
    /// they are **pending**, invisible to OffsetFetch, until the producer's transaction ends
    /// ([`MetaCommand::EndTxnOffsets`], or [`ClusterMeta::end_txn_offsets`] from the apply of
    /// the transaction coordinator's own command). A partition committed again in the same
    /// transaction keeps the newer offset.
    ///
    /// [`ClusterMeta::end_txn_offsets`]: crate::metadata::ClusterMeta::end_txn_offsets
    CommitTxnOffsets {
        /// Consumer group id.
        group: String,
        /// The transactional producer.
        producer_id: i64,
        /// Its epoch when it committed.
        producer_epoch: i16,
        /// (topic, partition, offset, leader epoch, metadata) per partition.
        offsets: Vec<CommittedOffset>,
        /// The proposer's wall clock (ms since the epoch): the group's activity once the
        /// offsets are committed.
        commit_time_ms: i64,
    },
    /// End a producer's transaction for consumer groups' offsets: with `commit` its pending
    /// offsets ([`MetaCommand::CommitTxnOffsets`]) become the groups' committed offsets (each
    /// unless a later commit of that partition was applied since, as Kafka keeps the newer
    /// record), without it they are dropped. The seam for the transaction coordinator: see
    /// [`ClusterMeta::end_txn_offsets`], which this applies.
    ///
    /// [`ClusterMeta::end_txn_offsets`]: crate::metadata::ClusterMeta::end_txn_offsets
    EndTxnOffsets {
        /// The transactional producer.
        producer_id: i64,
        /// The groups whose pending offsets end; `None`: every group the producer has pending
        /// offsets in (transaction version 2, where TxnOffsetCommit v5 adds the group to the
        /// transaction itself).
        groups: Option<Vec<String>>,
        /// Commit (true) or abort (false).
        commit: bool,
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
    /// A consumer-protocol group's state (KIP-848) as its coordinator stores it before it
    /// answers a heartbeat that changed it; `record: None`: the group is gone (deleted, or
    /// converted to a classic group). Storing a record forgets the group's classic membership
    /// (the group was converted).
    StoreConsumerGroup {
        /// Group id.
        group: String,
        /// The state; None: forget the group.
        record: Option<crate::metadata::codec::ConsumerGroupRecord>,
        /// The proposer's wall clock (ms since the epoch): the group's last activity.
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
    /// A transactional id's whole state as its coordinator (the metadata leader, in its term)
    /// decided it: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, a timeout.
    /// Applied as written, except that a transaction decided with no partition left to mark
    /// completes at once; a decided one also ends its groups' pending transactional offsets
    /// (see [`crate::metadata::transactions`]).
    PutTransaction {
        /// The transactional id.
        transactional_id: String,
        /// Its new state.
        record: crate::metadata::TxnRecord,
    },
    /// A partition leader committed the markers of a decided transaction to `partitions`:
    /// they leave the transaction's partitions still to mark, and the transaction completes
    /// when none is left. Ignored unless the transactional id still holds that producer id and
    /// epoch in a PrepareCommit or PrepareAbort.
    TxnMarkersWritten {
        /// The transactional id.
        transactional_id: String,
        /// The producer id the markers were written for.
        producer_id: i64,
        /// The producer epoch the markers carry.
        producer_epoch: i16,
        /// The (topic, partition)s marked.
        partitions: Vec<(String, i32)>,
        /// The proposer's wall clock, ms since the epoch.
        time_ms: i64,
    },
    /// The coordinator forgets a transactional id unused for `transactional.id.expiration.ms`
    /// (Kafka's expiration). Ignored unless the id still holds exactly that producer id, epoch
    /// and last change, with no transaction ongoing or being decided (a producer that came
    /// back since keeps its id).
    ExpireTransactionalId {
        /// The transactional id.
        transactional_id: String,
        /// The producer id it held when the coordinator found it expired.
        producer_id: i64,
        /// Its epoch then.
        producer_epoch: i16,
        /// Its last change then (ms since the epoch).
        update_ms: i64,
    },
    /// Transaction version 2: a partition leader asks the coordinator to add `partitions` to
    /// the transaction of `transactional_id` (a Produce v12 wrote to them first). Changes no
    /// transaction: it is queued for the coordinator, which carries it out with a
    /// [`MetaCommand::PutTransaction`] (see [`crate::metadata::txn_partition_requests`]).
    RequestTxnPartitions {
        /// The transactional id.
        transactional_id: String,
        /// The producer id of the batches.
        producer_id: i64,
        /// Their producer epoch.
        producer_epoch: i16,
        /// The (topic, partition)s to add.
        partitions: Vec<(String, i32)>,
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
    /// (see `crate::node::bootstrap_users`).
    ImportScramUsers {
        /// The configured credentials.
        credentials: Vec<crate::security::scram_import::ImportedCredential>,
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

impl MetaCommand {
    /// A command that changes nothing (removes no ACLs), proposed as a read barrier: once this
    /// node applied it, its metadata holds every change committed before the proposal, on any
    /// node, leader or not.
    pub fn barrier() -> MetaCommand {
        MetaCommand::DeleteAcls { acls: Vec::new() }
    }
}

impl MetaEntry {
    /// The entry's bytes in the metadata log (the current format, see
    /// [`crate::metadata::codec`]).
    pub fn encode(&self) -> Vec<u8> {
        crate::metadata::codec::encode_entry(self)
    }

    /// The entry's bytes in the JSON of earlier releases, which they can read (written only
    /// while a node of such a release is in the cluster).
    pub fn encode_json(&self) -> Vec<u8> {
        crate::metadata::codec::encode_entry_json(self)
    }

    /// Decodes an entry of any version: protobuf, or the JSON of older logs, with or without a
    /// request id.
    pub fn decode(
        data: &[u8],
    ) -> Result<(Option<RequestId>, MetaCommand), crate::metadata::codec::MetaDecodeError> {
        crate::metadata::codec::decode_entry(data)
    }
}

fn is_zero(v: &i64) -> bool {
    *v == 0
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
