//! The Kafka listeners of a node: binding them (retrying while an address is still in use),
//! serving them, and reloading their TLS files; and the node as the host the Kafka handlers
//! see it through ([`crate::kafka::host`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use super::{Node, NodeError};

/// How long a listener's address may stay in use before binding it fails: the listener of a
/// node that was just shut down in the same process (its task is cancelled, not yet dropped),
/// or of a previous process of this node that is still exiting, lets go of it within this.
pub(super) const BIND_RETRY_FOR: Duration = Duration::from_secs(5);

/// Binds `addr`, retrying while it is in use for at most [`BIND_RETRY_FOR`].
pub(super) async fn bind_listener(addr: std::net::SocketAddr) -> Result<TcpListener, NodeError> {
    let deadline = tokio::time::Instant::now() + BIND_RETRY_FOR;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(source) => return Err(NodeError::Bind { addr, source }),
        }
    }
}

/// How often the TLS files of the Kafka listeners are checked for changes.
pub const TLS_RELOAD_POLL: Duration = Duration::from_secs(2);

impl Node {
    /// Binds every Kafka listener (reading the TLS files of those that use TLS) and serves
    /// Kafka clients on them until the returned task is aborted. While it runs, TLS files
    /// whose modification time changed are re-read every [`TLS_RELOAD_POLL`].
    pub async fn serve_kafka(self: &Arc<Self>) -> Result<tokio::task::JoinHandle<()>, NodeError> {
        // The sender stays with the listeners' task: the shutdown signal never fires.
        let (keep, never) = tokio::sync::watch::channel(crate::shutdown::ShutdownPhase::Running);
        self.start_kafka_listeners(never, Some(keep)).await
    }

    /// Like [`Node::serve_kafka`], with a graceful shutdown (see [`crate::shutdown`]): at
    /// `StopAccepting` the listeners close their sockets, at `Drain` every connection answers
    /// what it has read and closes; the returned task ends once all have.
    pub async fn serve_kafka_until(
        self: &Arc<Self>,
        shutdown: crate::shutdown::ShutdownSignal,
    ) -> Result<tokio::task::JoinHandle<()>, NodeError> {
        self.start_kafka_listeners(shutdown, None).await
    }

    pub(super) async fn start_kafka_listeners(
        self: &Arc<Self>,
        shutdown: crate::shutdown::ShutdownSignal,
        keep: Option<tokio::sync::watch::Sender<crate::shutdown::ShutdownPhase>>,
    ) -> Result<tokio::task::JoinHandle<()>, NodeError> {
        let mut endpoints = Vec::new();
        for config in self.config.kafka_listeners() {
            let tls = match &config.tls {
                None => None,
                Some(files) => {
                    let tls = crate::security::tls::ReloadingServerTls::new(files.clone())
                        .map_err(|e| NodeError::Tls {
                            listener: config.name.clone(),
                            message: e.to_string(),
                        })?;
                    Some(Arc::new(tls))
                }
            };
            let listener = bind_listener(config.listen).await?;
            if let Some(tls) = &tls {
                self.listener_tls
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((config.name.clone(), tls.clone()));
            }
            endpoints.push((
                listener,
                Arc::new(crate::kafka::listener::Endpoint { config, tls }),
            ));
        }
        // The group coordinator's background tasks (deadlines, stored membership, offset
        // expiry) run whether or not a group request ever reaches this node.
        crate::kafka::groups::node_coordinator::coordinator(self);
        self.start_metadata_catch_up();
        super::bootstrap_users::start_import(self);
        let node = self.clone();
        Ok(tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            let limits = crate::kafka::listener::connection_limits(&*node);
            for (listener, endpoint) in endpoints {
                tasks.spawn(crate::kafka::serve(
                    listener,
                    node.clone(),
                    endpoint,
                    limits.clone(),
                    shutdown.clone(),
                ));
            }
            let weak = Arc::downgrade(&node);
            drop(node);
            let reload = async move {
                loop {
                    tokio::time::sleep(TLS_RELOAD_POLL).await;
                    let Some(node) = weak.upgrade() else { return };
                    node.reload_tls(false);
                }
            };
            // Ends when every listener has (after a shutdown's drain); aborting this task
            // drops the set, which aborts every listener.
            tokio::select! {
                _ = async { while tasks.join_next().await.is_some() {} } => {}
                _ = reload => {}
            }
            drop(keep);
        }))
    }

    /// Adds `tls` (named `name` in logs) to what [`Node::reload_tls`] re-reads: the admin
    /// listener's certificates are reloaded with the Kafka listeners'.
    pub fn reload_tls_with_listeners(
        &self,
        name: &str,
        tls: Arc<crate::security::tls::ReloadingServerTls>,
    ) {
        self.listener_tls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_string(), tls));
    }

    /// Re-reads the TLS files of the Kafka listeners, the admin listener and `[peer_tls]`: all of them (`force`,
    /// on SIGHUP) or those whose modification time changed. New connections get the new
    /// certificates; a file that does not load keeps the previous ones (logged).
    pub fn reload_tls(&self, force: bool) {
        // Changed peer TLS files are picked up by their own poll task.
        if let (true, Some((peer_tls, _))) = (force, &self.peer_tls) {
            peer_tls.reload_logged(true);
        }
        let listeners = self
            .listener_tls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (name, tls) in listeners {
            let result = if force {
                tls.reload().map(|()| true)
            } else {
                tls.reload_if_changed()
            };
            match result {
                Ok(true) => tracing::info!(listener = %name, "TLS certificates reloaded"),
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    listener = %name,
                    "TLS certificates not reloaded, the previous ones stay in use: {e}"
                ),
            }
        }
    }
}

impl crate::kafka::host::MetadataAccess for Node {
    fn metadata(&self) -> std::sync::RwLockReadGuard<'_, crate::metadata::ClusterMeta> {
        Node::metadata(self)
    }

    fn metadata_proposer(&self) -> &crate::metadata::proposer::MetadataProposer {
        Node::metadata_proposer(self)
    }
}

impl crate::kafka::host::NodeView for Node {
    fn config(&self) -> &crate::config::NodeConfig {
        Node::config(self)
    }

    fn live_brokers(&self) -> Vec<(u64, String)> {
        Node::live_brokers(self)
    }

    fn live_brokers_on(&self, listener: &str) -> Vec<(u64, String)> {
        Node::live_brokers_on(self, listener)
    }

    fn partition(
        &self,
        name: &str,
        partition: u32,
    ) -> Option<crate::replication::stream::LogStream> {
        Node::partition(self, name, partition)
    }

    fn topic_layout(&self, name: &str) -> Option<crate::metadata::TopicLayout> {
        Node::topic_layout(self, name)
    }

    fn topic_incarnation(&self, name: &str) -> Option<u64> {
        Node::topic_incarnation(self, name)
    }

    fn topic_names(&self) -> Vec<String> {
        Node::topic_names(self)
    }

    fn is_topic(&self, name: &str) -> bool {
        Node::is_topic(self, name)
    }

    fn reported_leader(&self, name: &str, incarnation: u64, partition: u32) -> Option<(u64, u64)> {
        Node::reported_leader(self, name, incarnation, partition)
    }
}

impl crate::kafka::host::MetadataApiHost for Node {
    fn caught_up(&self) -> bool {
        Node::caught_up(self)
    }

    fn wait_for_catch_up(
        &self,
        timeout: Duration,
    ) -> impl std::future::Future<Output = bool> + Send {
        Node::wait_for_catch_up(self, timeout)
    }

    fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<(), crate::replication::group::AppendError>> + Send
    {
        Node::create_topic(self, name, partitions, timeout)
    }
}

impl crate::kafka::host::TopicsHost for Node {
    fn placement_members(&self) -> Vec<u64> {
        Node::placement_members(self)
    }

    fn default_replication_factor(&self) -> usize {
        Node::default_replication_factor(self)
    }

    fn check_limits(
        &self,
        meta: &crate::metadata::ClusterMeta,
        new_topics: usize,
        new_partitions: u32,
    ) -> Result<(), crate::replication::group::AppendError> {
        Node::check_limits(self, meta, new_topics, new_partitions)
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
        Node::create_topic_configured(self, name, partitions, replication_factor, configs, timeout)
    }

    fn create_partitions(
        &self,
        name: &str,
        count: u32,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<(), crate::replication::group::AppendError>> + Send
    {
        Node::create_partitions(self, name, count, timeout)
    }
}

impl crate::kafka::host::PartitionAdminHost for Node {
    fn partitions(&self, name: &str) -> Vec<crate::replication::stream::LogStream> {
        Node::partitions(self, name)
    }

    fn current_incarnation(
        &self,
        name: &str,
    ) -> Result<u64, crate::replication::group::AppendError> {
        Node::current_incarnation(self, name)
    }

    fn elect_preferred_leader(
        &self,
        name: &str,
        incarnation: u64,
        partition: u32,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<(), crate::replication::group::AppendError>> + Send
    {
        Node::elect_preferred_leader(self, name, incarnation, partition, timeout)
    }
}

impl crate::kafka::host::UsersHost for Node {
    fn replicated_scram_credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::ScramMechanism,
    ) -> Option<crate::security::scram::ScramCredential> {
        Node::replicated_scram_credential(self, user, mechanism)
    }
}

impl crate::kafka::host::FlowView for Node {
    fn flow_settings(&self) -> Arc<crate::flow::settings::FlowSettings> {
        Node::flow_settings(self)
    }
}

impl crate::kafka::host::ChargeHost for Node {
    fn flow(&self) -> &crate::flow::throttle::FlowControl {
        Node::flow(self)
    }

    fn metrics(&self) -> &Arc<crate::metrics::NodeMetrics> {
        Node::metrics(self)
    }
}

impl crate::kafka::host::ProduceHost for Node {
    fn topic_settings(&self, name: &str) -> crate::topic_config::TopicSettings {
        Node::topic_settings(self, name)
    }

    fn replicas_of(&self, stream: &crate::replication::stream::LogStream) -> Vec<u64> {
        Node::replicas_of(self, stream)
    }
}

impl crate::kafka::host::FetchHost for Node {}

impl crate::kafka::host::QuotasHost for Node {}

impl crate::kafka::host::ConfigsHost for Node {
    fn current_incarnation(
        &self,
        name: &str,
    ) -> Result<u64, crate::replication::group::AppendError> {
        Node::current_incarnation(self, name)
    }
}

impl crate::kafka::host::AccessHost for Node {
    fn authorizer(&self) -> &crate::security::authorizer::Authorizer {
        Node::authorizer(self)
    }

    fn acls_current(&self) -> bool {
        Node::acls_current(self)
    }
}

impl crate::kafka::host::AclsHost for Node {}

impl crate::kafka::host::MetadataGroupView for Node {
    fn metadata_group(&self) -> Option<crate::replication::stream::LogStream> {
        Node::metadata_group(self)
    }
}

impl crate::kafka::host::GroupsHost for Node {
    fn group_coordinator(&self) -> &crate::kafka::groups::coordinator::Coordinator {
        Node::group_coordinator(self)
    }
}

impl crate::kafka::host::ClusterHost for Node {
    fn topic_replication_factor(&self, name: &str) -> Option<usize> {
        Node::topic_layout(self, name).map(|l| l.replicas.first().map_or(1, Vec::len))
    }

    fn allocate_producer_id(
        &self,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<i64, crate::replication::group::AppendError>> + Send
    {
        Node::allocate_producer_id(self, timeout)
    }
}

impl crate::kafka::host::KafkaHost for Node {}

impl crate::kafka::host::ConnectionHost for Node {
    fn security_stats(&self) -> &crate::security::stats::SecurityStats {
        Node::security_stats(self)
    }

    fn security_stats_arc(&self) -> Arc<crate::security::stats::SecurityStats> {
        Node::security_stats_arc(self)
    }

    fn scram_credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::ScramMechanism,
    ) -> Option<crate::security::scram::ScramCredential> {
        Node::scram_credential(self, user, mechanism)
    }

    fn verify_password(
        &self,
        user: &str,
        password: String,
    ) -> impl std::future::Future<Output = Result<bool, crate::security::password::PasswordError>> + Send
    {
        Node::verify_password(self, user, password)
    }
}
