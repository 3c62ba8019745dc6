//! What the Kafka handlers need of the node they run on, one narrow trait per API family, so
//! that a handler names what it uses instead of taking the whole `Node` (and `kafka/` stops
//! importing `node/`, see "Layout rules" in the crate README). The Kafka service's broker
//! (the node and its group coordinator, `crate::service`) implements each
//! (`service/host.rs`); a test can implement one with a fake.
//!
//! - [`MetadataAccess`]: the replicated metadata, read and changed; what most families below
//!   build on.
//! - [`NodeView`]: this node's configuration, the live brokers, and where the topics and
//!   partitions are as this node sees them; what the families reading topics build on, and
//!   what [`crate::kafka::metadata`]'s lookups (`locate_partition`, `topic_name_by_id`, ...)
//!   take.
//! - [`FlowView`]: the flow limits and client quotas in force; [`ChargeHost`]: the flow
//!   control and counters the data path charges.
//! - [`ProduceHost`]: Produce ([`crate::kafka::produce`]); [`FetchHost`]: Fetch
//!   ([`crate::kafka::fetch`]).
//! - [`MetadataApiHost`]: Metadata and ListOffsets ([`crate::kafka::metadata`]).
//! - [`TopicsHost`]: CreateTopics, DeleteTopics, CreatePartitions ([`crate::kafka::topics`]).
//! - [`PartitionAdminHost`]: DeleteRecords, DescribeLogDirs, DescribeProducers, ElectLeaders,
//!   ListPartitionReassignments ([`crate::kafka::partition_admin`]).
//! - [`UsersHost`]: the user-credential APIs ([`crate::kafka::users`]).
//! - [`QuotasHost`]: the client-quota APIs ([`crate::kafka::quotas`]).
//! - [`AccessHost`]: what a request's principal may do ([`crate::kafka::access`]).
//! - [`AclsHost`]: the ACL APIs ([`crate::kafka::acls`]).
//! - [`ConfigsHost`]: the topic-config APIs ([`crate::kafka::configs`]).
//! - [`MetadataGroupView`]: the metadata group (the controller, the groups' coordinator).
//! - [`ClusterHost`]: InitProducerId, DescribeCluster, DescribeConfigs
//!   ([`crate::kafka::cluster`]).
//! - `GroupsHost` (crate-internal: it hands out the coordinator's state): the consumer
//!   groups (`kafka/groups/`).
//! - `TxnHost` (crate-internal, over [`ClusterHost`]): the transaction coordinator
//!   (`kafka/txn/`).
//! - `KafkaHost` (crate-internal, over `GroupsHost`): all of the above, what the request
//!   dispatch ([`crate::kafka::handlers`]) takes.
//! - `ConnectionHost` (crate-internal, over `KafkaHost`): a connection
//!   ([`crate::kafka::listener`]): the authentication counters and credentials.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, RwLockReadGuard};
use std::time::Duration;

use crate::config::NodeConfig;
use crate::flow::settings::FlowSettings;
use crate::flow::throttle::FlowControl;
use crate::kafka::groups::coordinator::Coordinator;
use crate::kafka::txn::coordinator::TxnCoordinator;
use crate::metadata::proposer::MetadataProposer;
use crate::metadata::{ClusterMeta, TopicLayout};
use crate::metrics::NodeMetrics;
use crate::replication::group::AppendError;
use crate::replication::stream::LogStream;
use crate::security::authorizer::Authorizer;
use crate::security::password::PasswordError;
use crate::security::scram::{ScramCredential, ScramMechanism};
use crate::security::stats::SecurityStats;
use crate::topic_config::TopicSettings;

/// The replicated cluster metadata as the handlers read and change it.
pub trait MetadataAccess: Send + Sync + 'static {
    /// The replicated cluster metadata as this node has applied it (held briefly: every
    /// apply waits for the guard).
    fn metadata(&self) -> RwLockReadGuard<'_, ClusterMeta>;

    /// The one path that commits metadata commands (request ids, retries, deduplication).
    fn metadata_proposer(&self) -> &MetadataProposer;
}

/// This node's configuration, the brokers it sees live, and the topics and partitions as it
/// knows them: what the families that read topics build on. Also implemented for an `Arc` of
/// an implementor, so the lookups of [`crate::kafka::metadata`] take a node or its `Arc` alike.
pub trait NodeView: Send + Sync + 'static {
    /// This node's configuration.
    fn config(&self) -> &NodeConfig;

    /// The live brokers: this node and every peer connected to it now, with the Kafka address
    /// each announced (`HOST:PORT`, of its first listener), by node id.
    fn live_brokers(&self) -> Vec<(u64, String)>;

    /// The live brokers with their address on listener `listener`: (node id, `HOST:PORT`).
    fn live_brokers_on(&self, listener: &str) -> Vec<(u64, String)>;

    /// Partition `partition` of topic (or stream) `name`, if this node holds a replica of it.
    fn partition(&self, name: &str, partition: u32) -> Option<LogStream>;

    /// Where topic `name`'s partitions live (its incarnation and replicas), whether this node
    /// holds any of them or not; `None` when there is no such topic.
    fn topic_layout(&self, name: &str) -> Option<TopicLayout>;

    /// The incarnation of topic `name` (0 for a stream configured at start); `None` when there
    /// is no such topic.
    fn topic_incarnation(&self, name: &str) -> Option<u64>;

    /// The names of every topic of the cluster (hosted here or not) and of the streams
    /// configured at start, sorted.
    fn topic_names(&self) -> Vec<String>;

    /// Whether topic `name` exists (in the metadata, or as a stream configured at start).
    fn is_topic(&self, name: &str) -> bool;

    /// The name of the topic (or stream configured at start) whose id is `id`
    /// ([`crate::kafka::metadata::topic_id_of`]). The default hashes every name; a node
    /// answers from the metadata's id index (one hash look-up, whatever the topic count).
    fn topic_name_by_id(&self, id: kafka_proto::Uuid) -> Option<String> {
        self.topic_names()
            .into_iter()
            .find(|n| crate::kafka::metadata::topic_id_of(self, n) == id)
    }

    /// The leader of partition `partition` of incarnation `incarnation` of topic `name`, and
    /// its term, from the leaders' reports (as a node that does not host it knows it); `None`
    /// when none has reported. The leader may have died since: callers check it is live.
    fn reported_leader(&self, name: &str, incarnation: u64, partition: u32) -> Option<(u64, u64)>;
}

impl<H: NodeView + ?Sized> NodeView for Arc<H> {
    fn config(&self) -> &NodeConfig {
        (**self).config()
    }

    fn live_brokers(&self) -> Vec<(u64, String)> {
        (**self).live_brokers()
    }

    fn live_brokers_on(&self, listener: &str) -> Vec<(u64, String)> {
        (**self).live_brokers_on(listener)
    }

    fn partition(&self, name: &str, partition: u32) -> Option<LogStream> {
        (**self).partition(name, partition)
    }

    fn topic_layout(&self, name: &str) -> Option<TopicLayout> {
        (**self).topic_layout(name)
    }

    fn topic_incarnation(&self, name: &str) -> Option<u64> {
        (**self).topic_incarnation(name)
    }

    fn topic_names(&self) -> Vec<String> {
        (**self).topic_names()
    }

    fn is_topic(&self, name: &str) -> bool {
        (**self).is_topic(name)
    }

    fn topic_name_by_id(&self, id: kafka_proto::Uuid) -> Option<String> {
        (**self).topic_name_by_id(id)
    }

    fn reported_leader(&self, name: &str, incarnation: u64, partition: u32) -> Option<(u64, u64)> {
        (**self).reported_leader(name, incarnation, partition)
    }
}

/// The flow limits and client quotas in force: what the client-quota APIs read and what the
/// data path charges against.
pub trait FlowView: Send + Sync + 'static {
    /// The flow limits and client quotas in force (as applied on this node).
    fn flow_settings(&self) -> Arc<FlowSettings>;
}

/// What Produce and Fetch charge and count besides [`FlowView`]: this node's flow-control
/// buckets and its counters.
pub trait ChargeHost: FlowView {
    /// This node's flow control: the buckets of the limits and quotas in use here.
    fn flow(&self) -> &FlowControl;

    /// This node's counters (request latencies, throttle time, connections).
    fn metrics(&self) -> &Arc<NodeMetrics>;
}

/// What Produce ([`crate::kafka::produce`]) needs besides [`NodeView`] and [`ChargeHost`]: a
/// topic's effective settings, and a partition's replicas. Called per request and partition,
/// never per record; the handlers are generic over it (no `dyn` on the data path).
pub trait ProduceHost: NodeView + ChargeHost {
    /// The effective settings of topic `name`: its config overrides over this node's
    /// configuration (the node's alone for a topic it does not know).
    fn topic_settings(&self, name: &str) -> TopicSettings;

    /// The replicas of `stream` in Kafka's order: the preferred leader first (a stream
    /// configured at start: every member in id order).
    fn replicas_of(&self, stream: &LogStream) -> Vec<u64>;

    /// Whether the replicated transaction state, as this node has applied it, lets producer
    /// `producer_id` at `producer_epoch` write a transactional batch to `(topic, partition)`
    /// for `transactional_id`: an ongoing transaction of that producer holds the partition.
    fn transaction_includes(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> bool;

    /// The producer id and epoch transactional id `transactional_id` holds in the replicated
    /// transaction state as this node has applied it; None when it is unknown.
    fn transaction_producer(&self, transactional_id: &str) -> Option<(i64, i16)>;
}

/// What Fetch ([`crate::kafka::fetch`]) needs: [`NodeView`] (the partitions, by name or topic
/// id) and [`ChargeHost`] (the flow control its responses are charged to), nothing more.
pub trait FetchHost: NodeView + ChargeHost {}

/// What Metadata and ListOffsets ([`crate::kafka::metadata`]) need besides [`NodeView`]:
/// whether this node has caught up with the cluster's metadata, and auto-creating a topic.
pub trait MetadataApiHost: NodeView {
    /// Whether this node has caught up with the cluster after its start (its metadata is
    /// current and the connected peers have reported the partitions they lead). Set once,
    /// never cleared.
    fn caught_up(&self) -> bool;

    /// Waits at most `timeout` until [`MetadataApiHost::caught_up`]; whether it did.
    fn wait_for_catch_up(&self, timeout: Duration) -> impl Future<Output = bool> + Send;

    /// Creates topic `name` with `partitions` partitions on the default replication factor's
    /// number of nodes (a no-op when it exists), committed through the metadata within
    /// `timeout`; returns once this node has applied it.
    fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), AppendError>> + Send;
}

/// What CreateTopics, DeleteTopics and CreatePartitions ([`crate::kafka::topics`]) need besides
/// [`MetadataAccess`] and [`NodeView`]: where new replicas may go, the cluster's limits, and
/// creating topics and partitions.
pub trait TopicsHost: MetadataAccess + NodeView {
    /// The members new replicas may be placed on (those not leaving), ascending.
    fn placement_members(&self) -> Vec<u64>;

    /// The configured default replication factor, at most the members new replicas may be
    /// placed on.
    fn default_replication_factor(&self) -> usize;

    /// Refuses `new_topics` more topics with `new_partitions` more partitions when the cluster
    /// would pass `kafka.max_topics` or `kafka.max_partitions`, or this node could host more
    /// partitions than its open-file limit allows (answered POLICY_VIOLATION).
    fn check_limits(
        &self,
        meta: &ClusterMeta,
        new_topics: usize,
        new_partitions: u32,
    ) -> Result<(), AppendError>;

    /// Creates topic `name` with `partitions` partitions on `replication_factor` nodes and the
    /// config overrides `configs` (validated by the caller), committed through the metadata
    /// within `timeout`; returns once this node has applied it.
    fn create_topic_configured(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: usize,
        configs: BTreeMap<String, String>,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), AppendError>> + Send;

    /// Grows topic `name` to `count` partitions (the new ones placed to continue its
    /// pattern), committed within `timeout`; returns once this node has applied it. Fails when
    /// the topic does not exist or has `count` partitions or more, or a limit would be passed.
    fn create_partitions(
        &self,
        name: &str,
        count: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), AppendError>> + Send;
}

/// What DeleteRecords, DescribeLogDirs, DescribeProducers, ElectLeaders and
/// ListPartitionReassignments ([`crate::kafka::partition_admin`]) need besides
/// [`MetadataAccess`] and [`NodeView`]: the replicas hosted here, topic incarnations, and
/// preferred-leader elections.
pub trait PartitionAdminHost: MetadataAccess + NodeView {
    /// The partitions of topic `name` this node is a replica of, in partition order (empty
    /// when it hosts none, or the topic is unknown).
    fn partitions(&self, name: &str) -> Vec<LogStream>;

    /// The incarnation of topic `name` in the replicated metadata (what a change to it is
    /// fenced by); `AppendError::Invalid` when there is no such topic.
    fn current_incarnation(&self, name: &str) -> Result<u64, AppendError>;

    /// Asks the leader of partition `partition` of incarnation `incarnation` of topic `name`,
    /// wherever it runs, to hand leadership to the partition's preferred replica (through the
    /// replicated metadata, within `timeout`). Returns once this node has applied the
    /// request; whether leadership moved shows in the partition's leader.
    fn elect_preferred_leader(
        &self,
        name: &str,
        incarnation: u64,
        partition: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), AppendError>> + Send;
}

/// What DescribeUserScramCredentials and AlterUserScramCredentials
/// ([`crate::kafka::users`]) need: the SCRAM credentials of the replicated metadata, and
/// committing changes to them.
pub trait UsersHost: MetadataAccess {
    /// The replicated SCRAM credential of `user` for `mechanism` (not a bootstrap one from the
    /// configuration), if any.
    fn replicated_scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential>;
}

/// What DescribeClientQuotas and AlterClientQuotas ([`crate::kafka::quotas`]) need: the flow
/// settings of the replicated metadata ([`FlowView`]), and committing changes to them.
pub trait QuotasHost: MetadataAccess + FlowView {}

/// What a request's [`crate::kafka::access::Access`] decides with: the authorizer, whether the
/// ACLs are current, and the ACLs of the replicated metadata ([`MetadataAccess`]).
/// Dyn-compatible: `Access` holds the node as `Arc<dyn AccessHost>`.
pub trait AccessHost: MetadataAccess {
    /// The authorizer configured for this node (`[security]`; whether it checks requests is
    /// fixed at start).
    fn authorizer(&self) -> &Authorizer;

    /// Whether this node's ACLs are known to be current (every ACL change committed before its
    /// start is applied); always true without an authorizer. Until then only super users are
    /// allowed anything.
    fn acls_current(&self) -> bool;
}

/// What CreateAcls, DescribeAcls and DeleteAcls ([`crate::kafka::acls`]) need: the ACLs of
/// the replicated metadata, committing changes to them, and whether an authorizer is
/// configured at all ([`AccessHost::authorizer`]).
pub trait AclsHost: AccessHost {}

/// What AlterConfigs and IncrementalAlterConfigs ([`crate::kafka::configs`]) need: the topics
/// and their config overrides in the replicated metadata, and committing changes to them.
pub trait ConfigsHost: MetadataAccess {
    /// The incarnation of topic `name` (what a change to it is fenced by);
    /// `AppendError::Invalid` when there is no such topic.
    fn current_incarnation(&self, name: &str) -> Result<u64, AppendError>;
}

/// The metadata group's handle: its leader is the controller, and coordinates every consumer
/// group.
pub trait MetadataGroupView: Send + Sync + 'static {
    /// The metadata group's handle, while it is open (its leader is the controller).
    fn metadata_group(&self) -> Option<LogStream>;
}

/// What InitProducerId, DescribeCluster and DescribeConfigs ([`crate::kafka::cluster`]) need
/// besides [`NodeView`] (the node's configuration, the live brokers): the metadata group
/// ([`MetadataGroupView`]), the topics' replication and producer id allocation.
pub trait ClusterHost: MetadataAccess + NodeView + MetadataGroupView {
    /// The replication factor of topic `name` (replicas of its first partition, 1 with
    /// none); `None` when there is no such topic.
    fn topic_replication_factor(&self, name: &str) -> Option<usize>;

    /// A new cluster-unique producer id, committed through the metadata within `timeout`.
    fn allocate_producer_id(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<i64, AppendError>> + Send;
}

/// What the consumer groups ([`crate::kafka::groups`]: FindCoordinator, the membership, offset
/// and group admin APIs, the coordinator's background tasks) need besides [`MetadataAccess`]
/// (the stored groups and offsets, committing them) and [`NodeView`] (the live brokers, the
/// topics): the metadata group, whose leader coordinates every group, and this node's
/// coordinator state. The tasks hold a `Weak` of the host and end with it.
pub(crate) trait GroupsHost: MetadataAccess + NodeView + MetadataGroupView {
    /// This node's consumer group coordinator state (in memory; used while this node leads
    /// the metadata group).
    fn group_coordinator(&self) -> &Coordinator;
}

/// What the transaction coordinator (`kafka/txn/`: its handlers, the marker writer, the
/// timeout check) needs besides [`ClusterHost`] (the metadata, the partitions, producer id
/// allocation): this node's coordinator state (the per-id locks). The tasks hold a `Weak` of
/// the host and end with it.
pub(crate) trait TxnHost: ClusterHost {
    /// This node's transaction coordinator state (in memory; the transactions themselves are
    /// in the replicated metadata).
    fn txn_coordinator(&self) -> &TxnCoordinator;

    /// Changes when the metadata applied on this node decides a transaction (its markers are
    /// due) or queues a request to add a partition to one: the transaction tasks wait on it
    /// between their scans.
    fn transaction_work(&self) -> tokio::sync::watch::Receiver<u64>;
}

/// Every API family's host: what the request dispatch ([`crate::kafka::handlers`]) hands the
/// handlers, each of which asks only its own family's trait of it.
pub(crate) trait KafkaHost:
    MetadataApiHost
    + TopicsHost
    + PartitionAdminHost
    + UsersHost
    + QuotasHost
    + AclsHost
    + ConfigsHost
    + ClusterHost
    + ProduceHost
    + FetchHost
    + GroupsHost
    + TxnHost
{
}

/// What a Kafka connection ([`crate::kafka::listener`]: accepting, TLS, SASL, the request
/// loop) needs besides the handlers' [`KafkaHost`]: the authentication counters and the
/// credentials SASL checks against.
pub(crate) trait ConnectionHost: KafkaHost {
    /// The authentication counters of the Kafka listeners.
    fn security_stats(&self) -> &SecurityStats;

    /// The same counters, shared (for the connection limits).
    fn security_stats_arc(&self) -> Arc<SecurityStats>;

    /// The SCRAM credential of `user` for `mechanism`: the replicated one, else (until the
    /// bootstrap users were imported) the configured one.
    fn scram_credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;

    /// Checks `user`'s `password` against the user's credentials off the runtime threads
    /// (bounded, equal cost for unknown users): what SASL PLAIN uses.
    fn verify_password(
        &self,
        user: &str,
        password: String,
    ) -> impl Future<Output = Result<bool, PasswordError>> + Send;
}
