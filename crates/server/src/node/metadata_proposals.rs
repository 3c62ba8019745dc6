//! The metadata operations with logic of their own, which stay on the node because they need
//! its state: topic creation and growth (placement over the members, the cluster's limits and
//! this node's open-file budget, which counts the partitions it hosts) and the producer id
//! allocation (it reads its result back by request id, which only the proposer knows).
//!
//! Every other change to the metadata is a [`MetaCommand`] the caller builds and proposes
//! through [`Node::metadata_proposer`] (see [`crate::metadata::proposer`]): no wrapper here.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::metadata::{ClusterMeta, MetaCommand, METADATA_STREAM};
use crate::replication::group::AppendError;

use super::Node;

impl Node {
    /// Creates a topic with `partitions` partitions, each on
    /// [`NodeConfig::default_replication_factor`] nodes (a no-op when it exists). Returns once
    /// this node has applied it (its replicas here are open).
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        let replication_factor = self.default_replication_factor();
        self.create_topic_replicated(name, partitions, replication_factor, timeout)
            .await
    }

    /// Creates a topic with `partitions` partitions of `replication_factor` replicas each
    /// (1..=members), placed as [`crate::replication::placement`] says (a no-op when it exists).
    /// Returns once this node has applied it.
    pub async fn create_topic_replicated(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: usize,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        self.create_topic_configured(
            name,
            partitions,
            replication_factor,
            BTreeMap::new(),
            timeout,
        )
        .await
    }

    /// [`Node::create_topic_replicated`] with config overrides (validated by the caller with
    /// [`crate::topic_config::validate_all`]).
    pub async fn create_topic_configured(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: usize,
        configs: BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        let members = self.placement_members();
        if !(1..=members.len()).contains(&replication_factor) {
            return Err(AppendError::Invalid(format!(
                "replication factor {replication_factor} with {} nodes",
                members.len()
            )));
        }
        if !crate::config::valid_stream_name(name) || name == METADATA_STREAM {
            return Err(AppendError::Invalid(format!("invalid topic name {name:?}")));
        }
        if partitions == 0 {
            return Err(AppendError::Invalid(
                "a topic needs at least one partition".into(),
            ));
        }
        // The limits are checked by the proposer against what it has applied; creates racing
        // from several nodes may pass them by a few.
        {
            let meta = self.metadata();
            if !meta.topics.contains_key(name) {
                self.check_limits(&meta, 1, partitions)?;
            }
        }
        let (start, shift) = crate::replication::placement::random_pattern(members.len());
        let replicas = crate::replication::placement::assign(
            &members,
            replication_factor,
            0,
            partitions,
            start,
            shift,
        );
        self.metadata_proposer
            .propose(
                &MetaCommand::CreateTopic {
                    name: name.to_owned(),
                    partitions,
                    replicas,
                    configs,
                },
                timeout,
            )
            .await
            .map(|_| ())
    }

    /// Refuses `new_topics` more topics with `new_partitions` more partitions when the cluster
    /// would pass `kafka.max_topics` or `kafka.max_partitions`, or this node could host more
    /// partitions than its open-file limit allows
    /// ([`crate::runtime::fd_budget::partition_capacity`]); the message says "holds its limit of"
    /// (answered POLICY_VIOLATION).
    pub fn check_limits(
        &self,
        meta: &ClusterMeta,
        new_topics: usize,
        new_partitions: u32,
    ) -> Result<(), AppendError> {
        let k = &self.config.kafka;
        if new_topics > 0 && meta.topics.len() + new_topics > k.max_topics {
            return Err(AppendError::Invalid(format!(
                "the cluster holds its limit of {} topics (kafka.max_topics)",
                k.max_topics
            )));
        }
        let total = meta.total_partitions() + u64::from(new_partitions);
        if total > u64::from(k.max_partitions) {
            return Err(AppendError::Invalid(format!(
                "the cluster holds its limit of {} partitions (kafka.max_partitions): {} exist, {new_partitions} more asked",
                k.max_partitions,
                meta.total_partitions()
            )));
        }
        // This node's open files: running out of them would stop the node (a failed log write
        // is fail-stop), so a create that could make it host more partitions than its
        // descriptors allow is refused instead (counting every new partition as hosted here).
        if new_partitions > 0 {
            if let Ok((nofile, _)) = crate::runtime::fd_budget::nofile_limits() {
                let storage = &self.config.storage;
                let each = crate::runtime::fd_budget::descriptors_per_partition(matches!(
                    storage.sync,
                    crate::config::SyncMode::Always
                ));
                let reserve_handles = if storage.preallocate_bytes > 0 {
                    logstore::MAX_OPEN_RESERVE_HANDLES
                } else {
                    0
                };
                let capacity = crate::runtime::fd_budget::partition_capacity(
                    nofile,
                    k.max_connections,
                    storage.max_open_active_files,
                    reserve_handles,
                    each,
                );
                let hosted = self.streams.lock().unwrap_or_else(|e| e.into_inner()).len() as u64;
                if hosted + u64::from(new_partitions) > capacity {
                    return Err(AppendError::Invalid(format!(
                        "node {} holds its limit of {capacity} partitions for its open-file limit of {nofile} \
                         ({} descriptors each while written beyond {} active segments' and the reserve handles' sets, client connections' and a reserve kept): it hosts {hosted}, \
                         {new_partitions} more asked; raise LimitNOFILE or lower kafka.max_connections",
                        self.config.id,
                        each,
                        storage.max_open_active_files,
                    )));
                }
            }
        }
        Ok(())
    }

    /// Grows topic `name` to `count` partitions, the new ones with as many replicas as its
    /// partition 0 and placed to continue its pattern (see [`crate::replication::placement`]).
    /// Returns once this node has applied it. Fails when the topic does not exist or has `count`
    /// partitions or more already (Kafka's INVALID_PARTITIONS), or a limit would be passed.
    pub async fn create_partitions(
        &self,
        name: &str,
        count: u32,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        let members = self.placement_members();
        let (incarnation, replicas) = {
            let meta = self.metadata();
            let Some(topic) = meta.topics.get(name) else {
                return Err(AppendError::Invalid(format!("unknown topic {name}")));
            };
            if count <= topic.partitions {
                return Err(AppendError::Invalid(format!(
                    "topic {name} has {} partitions; the new count must be higher, not {count}",
                    topic.partitions
                )));
            }
            self.check_limits(&meta, 0, count - topic.partitions)?;
            let first = topic.replicas.first().cloned().unwrap_or_default();
            let replication_factor = first.len().clamp(1, members.len());
            let (start, shift) = crate::replication::placement::pattern_of(&members, &first)
                .unwrap_or_else(|| crate::replication::placement::random_pattern(members.len()));
            let mut replicas = topic.replicas.clone();
            replicas.extend(crate::replication::placement::assign(
                &members,
                replication_factor,
                topic.partitions,
                count,
                start,
                shift,
            ));
            (topic.created_at_index, replicas)
        };
        self.metadata_proposer
            .propose(
                &MetaCommand::CreatePartitions {
                    name: name.to_owned(),
                    incarnation,
                    count,
                    replicas,
                },
                timeout,
            )
            .await
            .map(|_| ())
    }

    /// Allocates a producer id unique in the cluster.
    pub async fn allocate_producer_id(&self, timeout: Duration) -> Result<i64, AppendError> {
        let request = self
            .metadata_proposer
            .propose(&MetaCommand::AllocateProducerId, timeout)
            .await?
            .request;
        self.metadata()
            .allocations
            .get(&request)
            .copied()
            .ok_or_else(|| AppendError::Invalid("producer id allocation not found".into()))
    }
}
