//! What the Kafka handlers need of the node they run on, one narrow trait per API family, so
//! that a handler names what it uses instead of taking the whole `Node` (and `kafka/` stops
//! importing `node/`, see "Layout rules" in the crate README). The node implements each
//! (`node/listeners.rs`); a test can implement one with a fake.
//!
//! - [`MetadataAccess`]: the replicated metadata, read and changed; what every family below
//!   builds on.
//! - [`UsersHost`]: the user-credential APIs ([`crate::kafka::users`]).
//! - [`QuotasHost`]: the client-quota APIs ([`crate::kafka::quotas`]).
//! - [`AclsHost`]: the ACL APIs ([`crate::kafka::acls`]).
//! - [`ConfigsHost`]: the topic-config APIs ([`crate::kafka::configs`]).
//! - [`ClusterHost`]: InitProducerId, DescribeCluster, DescribeConfigs
//!   ([`crate::kafka::cluster`]).

use std::future::Future;
use std::sync::{Arc, RwLockReadGuard};
use std::time::Duration;

use crate::config::NodeConfig;
use crate::flow::settings::FlowSettings;
use crate::metadata::proposer::MetadataProposer;
use crate::metadata::ClusterMeta;
use crate::replication::group::AppendError;
use crate::replication::stream::LogStream;
use crate::security::authorizer::Authorizer;
use crate::security::scram::{ScramCredential, ScramMechanism};

/// The replicated cluster metadata as the handlers read and change it.
pub trait MetadataAccess: Send + Sync + 'static {
    /// The replicated cluster metadata as this node has applied it (held briefly: every
    /// apply waits for the guard).
    fn metadata(&self) -> RwLockReadGuard<'_, ClusterMeta>;

    /// The one path that commits metadata commands (request ids, retries, deduplication).
    fn metadata_proposer(&self) -> &MetadataProposer;
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
/// settings of the replicated metadata, and committing changes to them.
pub trait QuotasHost: MetadataAccess {
    /// The flow limits and client quotas in force (as applied on this node).
    fn flow_settings(&self) -> Arc<FlowSettings>;
}

/// What CreateAcls, DescribeAcls and DeleteAcls ([`crate::kafka::acls`]) need: the ACLs of
/// the replicated metadata, committing changes to them, and whether an authorizer is
/// configured at all.
pub trait AclsHost: MetadataAccess {
    /// The authorizer configured for this node (`[security]`).
    fn authorizer(&self) -> &Authorizer;
}

/// What AlterConfigs and IncrementalAlterConfigs ([`crate::kafka::configs`]) need: the topics
/// and their config overrides in the replicated metadata, and committing changes to them.
pub trait ConfigsHost: MetadataAccess {
    /// The incarnation of topic `name` (what a change to it is fenced by);
    /// `AppendError::Invalid` when there is no such topic.
    fn current_incarnation(&self, name: &str) -> Result<u64, AppendError>;
}

/// What InitProducerId, DescribeCluster and DescribeConfigs ([`crate::kafka::cluster`]) need:
/// the node's configuration, the metadata group, the live brokers, the topics' replication
/// and producer id allocation.
pub trait ClusterHost: MetadataAccess {
    /// This node's configuration.
    fn config(&self) -> &NodeConfig;

    /// The metadata group's handle, while it is open (its leader is the controller).
    fn metadata_group(&self) -> Option<LogStream>;

    /// The live brokers with their address on listener `listener`: (node id, `HOST:PORT`).
    fn live_brokers_on(&self, listener: &str) -> Vec<(u64, String)>;

    /// The replication factor of topic `name` (replicas of its first partition, 1 with
    /// none); `None` when there is no such topic.
    fn topic_replication_factor(&self, name: &str) -> Option<usize>;

    /// A new cluster-unique producer id, committed through the metadata within `timeout`.
    fn allocate_producer_id(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<i64, AppendError>> + Send;
}
