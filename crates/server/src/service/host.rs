//! [`Broker`] as the host the Kafka handlers see the node through: the traits of
//! [`crate::kafka::host`], each method a call of the node's method of the same name (the
//! group coordinator is the broker's own). Static calls through the broker's `Arc<Node>`:
//! nothing is allocated, locked or dispatched dynamically on the way.

use std::sync::Arc;
use std::time::Duration;

use super::Broker;
use crate::kafka::groups::coordinator::Coordinator;
use crate::kafka::host::{
    AccessHost, AclsHost, ChargeHost, ClusterHost, ConfigsHost, ConnectionHost, FetchHost,
    FlowView, GroupsHost, KafkaHost, MetadataAccess, MetadataApiHost, MetadataGroupView, NodeView,
    PartitionAdminHost, ProduceHost, QuotasHost, TopicsHost, TxnHost, UsersHost,
};
use crate::node::Node;

impl MetadataAccess for Broker {
    fn metadata(&self) -> std::sync::RwLockReadGuard<'_, crate::metadata::ClusterMeta> {
        Node::metadata(&self.node)
    }

    fn metadata_proposer(&self) -> &crate::metadata::proposer::MetadataProposer {
        Node::metadata_proposer(&self.node)
    }
}

impl NodeView for Broker {
    fn config(&self) -> &crate::config::NodeConfig {
        Node::config(&self.node)
    }

    fn live_brokers(&self) -> Vec<(u64, String)> {
        Node::live_brokers(&self.node)
    }

    fn live_brokers_on(&self, listener: &str) -> Vec<(u64, String)> {
        Node::live_brokers_on(&self.node, listener)
    }

    fn partition(
        &self,
        name: &str,
        partition: u32,
    ) -> Option<crate::replication::stream::LogStream> {
        Node::partition(&self.node, name, partition)
    }

    fn topic_layout(&self, name: &str) -> Option<crate::metadata::TopicLayout> {
        Node::topic_layout(&self.node, name)
    }

    fn topic_incarnation(&self, name: &str) -> Option<u64> {
        Node::topic_incarnation(&self.node, name)
    }

    fn topic_names(&self) -> Vec<String> {
        Node::topic_names(&self.node)
    }

    fn is_topic(&self, name: &str) -> bool {
        Node::is_topic(&self.node, name)
    }

    fn topic_name_by_id(&self, id: kafka_proto::Uuid) -> Option<String> {
        Node::topic_name_by_id(&self.node, id)
    }

    fn reported_leader(&self, name: &str, incarnation: u64, partition: u32) -> Option<(u64, u64)> {
        Node::reported_leader(&self.node, name, incarnation, partition)
    }
}

impl MetadataApiHost for Broker {
    fn caught_up(&self) -> bool {
        Node::caught_up(&self.node)
    }

    fn wait_for_catch_up(
        &self,
        timeout: Duration,
    ) -> impl std::future::Future<Output = bool> + Send {
        Node::wait_for_catch_up(&self.node, timeout)
    }

    fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<(), crate::replication::group::AppendError>> + Send
    {
        Node::create_topic(&self.node, name, partitions, timeout)
    }
}

impl TopicsHost for Broker {
    fn placement_members(&self) -> Vec<u64> {
        Node::placement_members(&self.node)
    }

    fn default_replication_factor(&self) -> usize {
        Node::default_replication_factor(&self.node)
    }

    fn check_limits(
        &self,
        meta: &crate::metadata::ClusterMeta,
        new_topics: usize,
        new_partitions: u32,
    ) -> Result<(), crate::replication::group::AppendError> {
        Node::check_limits(&self.node, meta, new_topics, new_partitions)
    }

    fn create_topic_configured(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: usize,
        configs: std::collections::BTreeMap<String, String>,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<(), crate::replication::group::AppendError>> + Send
    {
        Node::create_topic_configured(
            &self.node,
            name,
            partitions,
            replication_factor,
            configs,
            timeout,
        )
    }

    fn create_partitions(
        &self,
        name: &str,
        count: u32,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<(), crate::replication::group::AppendError>> + Send
    {
        Node::create_partitions(&self.node, name, count, timeout)
    }
}

impl PartitionAdminHost for Broker {
    fn partitions(&self, name: &str) -> Vec<crate::replication::stream::LogStream> {
        Node::partitions(&self.node, name)
    }

    fn current_incarnation(
        &self,
        name: &str,
    ) -> Result<u64, crate::replication::group::AppendError> {
        Node::current_incarnation(&self.node, name)
    }

    fn elect_preferred_leader(
        &self,
        name: &str,
        incarnation: u64,
        partition: u32,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<(), crate::replication::group::AppendError>> + Send
    {
        Node::elect_preferred_leader(&self.node, name, incarnation, partition, timeout)
    }
}

impl UsersHost for Broker {
    fn replicated_scram_credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::ScramMechanism,
    ) -> Option<crate::security::scram::ScramCredential> {
        Node::replicated_scram_credential(&self.node, user, mechanism)
    }
}

impl FlowView for Broker {
    fn flow_settings(&self) -> Arc<crate::flow::settings::FlowSettings> {
        Node::flow_settings(&self.node)
    }
}

impl ChargeHost for Broker {
    fn flow(&self) -> &crate::flow::throttle::FlowControl {
        Node::flow(&self.node)
    }

    fn metrics(&self) -> &Arc<crate::metrics::NodeMetrics> {
        Node::metrics(&self.node)
    }
}

impl ProduceHost for Broker {
    fn topic_settings(&self, name: &str) -> crate::topic_config::TopicSettings {
        Node::topic_settings(&self.node, name)
    }

    fn replicas_of(&self, stream: &crate::replication::stream::LogStream) -> Vec<u64> {
        Node::replicas_of(&self.node, stream)
    }

    fn transaction_includes(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> bool {
        Node::metadata(&self.node).transaction_includes(
            transactional_id,
            producer_id,
            producer_epoch,
            topic,
            partition,
        )
    }

    fn transaction_producer(&self, transactional_id: &str) -> Option<(i64, i16)> {
        Node::metadata(&self.node)
            .transactions
            .get(transactional_id)
            .map(|r| (r.producer_id, r.producer_epoch))
    }
}

impl FetchHost for Broker {}

impl QuotasHost for Broker {}

impl ConfigsHost for Broker {
    fn current_incarnation(
        &self,
        name: &str,
    ) -> Result<u64, crate::replication::group::AppendError> {
        Node::current_incarnation(&self.node, name)
    }
}

impl AccessHost for Broker {
    fn authorizer(&self) -> &crate::security::authorizer::Authorizer {
        Node::authorizer(&self.node)
    }

    fn acls_current(&self) -> bool {
        Node::acls_current(&self.node)
    }
}

impl AclsHost for Broker {}

impl MetadataGroupView for Broker {
    fn metadata_group(&self) -> Option<crate::replication::stream::LogStream> {
        Node::metadata_group(&self.node)
    }
}

impl GroupsHost for Broker {
    fn group_coordinator(&self) -> &Coordinator {
        &self.coordinator
    }
}

impl TxnHost for Broker {
    fn txn_coordinator(&self) -> &crate::kafka::txn::coordinator::TxnCoordinator {
        &self.txn_coordinator
    }

    fn transaction_work(&self) -> tokio::sync::watch::Receiver<u64> {
        self.node.transaction_work()
    }
}

impl ClusterHost for Broker {
    fn topic_replication_factor(&self, name: &str) -> Option<usize> {
        Node::topic_layout(&self.node, name).map(|l| l.replicas.first().map_or(1, Vec::len))
    }

    fn allocate_producer_id(
        &self,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<i64, crate::replication::group::AppendError>> + Send
    {
        Node::allocate_producer_id(&self.node, timeout)
    }
}

impl KafkaHost for Broker {}

impl ConnectionHost for Broker {
    fn security_stats(&self) -> &crate::security::stats::SecurityStats {
        Node::security_stats(&self.node)
    }

    fn security_stats_arc(&self) -> Arc<crate::security::stats::SecurityStats> {
        Node::security_stats_arc(&self.node)
    }

    fn scram_credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::ScramMechanism,
    ) -> Option<crate::security::scram::ScramCredential> {
        Node::scram_credential(&self.node, user, mechanism)
    }

    fn verify_password(
        &self,
        user: &str,
        password: String,
    ) -> impl std::future::Future<Output = Result<bool, crate::security::password::PasswordError>> + Send
    {
        Node::verify_password(&self.node, user, password)
    }
}
