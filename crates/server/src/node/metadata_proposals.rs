//! Writing to the replicated metadata: proposing a command (retrying while no leader is known,
//! with a request id unique across restarts) and the operations built on it (topics,
//! partitions, producer ids, configs, offsets, barriers).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use crate::metadata::{
    ClusterMeta, CommittedOffset, MetaCommand, MetaEntry, RequestId, METADATA_STREAM,
};
use crate::replication::group::AppendError;

use super::Node;

/// Pause between attempts to propose a metadata command while no leader is known.
pub(super) const METADATA_RETRY_PAUSE: Duration = Duration::from_millis(50);

impl Node {
    /// Commits a metadata command through the metadata group (from any node: followers forward
    /// it to the leader) and returns the Raft index it was applied at; by then this node has
    /// applied it.
    pub async fn propose_metadata(
        &self,
        cmd: &MetaCommand,
        timeout: Duration,
    ) -> Result<u64, AppendError> {
        self.propose_metadata_request(cmd, timeout)
            .await
            .map(|(index, _)| index)
    }

    /// Commits a metadata command only while this node leads the metadata group in term `term`:
    /// one attempt on this node's replica, never forwarded to or retried through another leader
    /// ([`AppendError::NotLeader`] when this node does not lead in `term`, [`AppendError::Lost`]
    /// when it was deposed before the entry committed). For writes validated against the group
    /// coordinator's state of that term (a commit checked against the membership of a deposed
    /// coordinator must not land through its successor). Returns once this node applied it.
    pub async fn propose_metadata_in_term(
        &self,
        cmd: &MetaCommand,
        term: u64,
        timeout: Duration,
    ) -> Result<u64, AppendError> {
        let entry = MetaEntry {
            request: self.next_request_id(),
            command: cmd.clone(),
        };
        let data = if self.peer_versions.any_earlier_release() {
            entry.encode_json()
        } else {
            entry.encode()
        };
        let group = self.metadata_group().ok_or(AppendError::Stopped)?;
        let appended = group
            .append_meta_as_leader(Bytes::from(data), term, timeout)
            .await?;
        Ok(appended.raft_index)
    }

    /// A new metadata request id, unique across nodes and restarts.
    pub(super) fn next_request_id(&self) -> RequestId {
        RequestId {
            node: self.config.id,
            boot: self.boot_nonce,
            seq: self
                .request_seq
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// [`Node::propose_metadata`], also returning the request id the command was stored with.
    /// Every retry carries the same id, so a command is applied once even when an attempt
    /// reported lost had committed after all.
    pub(super) async fn propose_metadata_request(
        &self,
        cmd: &MetaCommand,
        timeout: Duration,
    ) -> Result<(u64, RequestId), AppendError> {
        let request = self.next_request_id();
        let entry = MetaEntry {
            request,
            command: cmd.clone(),
        };
        // A node of an earlier release cannot read protobuf entries (it would skip them and its
        // metadata would diverge): while one is in the cluster, commands are written in JSON.
        let data = if self.peer_versions.any_earlier_release() {
            entry.encode_json()
        } else {
            entry.encode()
        };
        let data = Bytes::from(data);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let group = self.metadata_group().ok_or(AppendError::Stopped)?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match group.append_meta(data.clone(), left).await {
                Ok(appended) => return Ok((appended.raft_index, request)),
                // The entry is applied already (an earlier attempt committed after it was
                // reported lost): done.
                Err(_) if self.metadata().was_applied(&request) => {
                    let index = self
                        .metadata_group()
                        .map_or(0, |g| g.visible().applied_index);
                    return Ok((index, request));
                }
                // No leader yet (start-up, election) or the proposal died with its leader:
                // try again until the deadline. The request id makes the retry apply once
                // even if the lost attempt commits after all.
                Err(AppendError::NotLeader { .. } | AppendError::Lost)
                    if tokio::time::Instant::now() + METADATA_RETRY_PAUSE < deadline =>
                {
                    tokio::time::sleep(METADATA_RETRY_PAUSE).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

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
        self.propose_metadata(
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
                let capacity =
                    crate::runtime::fd_budget::partition_capacity(nofile, k.max_connections);
                let hosted = self
                    .streams
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .map(|p| p.len() as u64)
                    .sum::<u64>();
                if hosted + u64::from(new_partitions) > capacity {
                    return Err(AppendError::Invalid(format!(
                        "node {} holds its limit of {capacity} partitions for its open-file limit of {nofile} \
                         ({} descriptors each, client connections and a reserve kept): it hosts {hosted}, \
                         {new_partitions} more asked; raise LimitNOFILE or lower kafka.max_connections",
                        self.config.id,
                        crate::runtime::fd_budget::DESCRIPTORS_PER_PARTITION
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
        self.propose_metadata(
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

    /// Deletes a topic and its data on every node: the incarnation this node knows now, so a
    /// retried or late delete never removes a topic created again under the same name.
    pub async fn delete_topic(&self, name: &str, timeout: Duration) -> Result<(), AppendError> {
        let incarnation = self.metadata().incarnation(name);
        self.propose_metadata(
            &MetaCommand::DeleteTopic {
                name: name.to_owned(),
                incarnation,
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Allocates a producer id unique in the cluster.
    pub async fn allocate_producer_id(&self, timeout: Duration) -> Result<i64, AppendError> {
        let (_, request) = self
            .propose_metadata_request(&MetaCommand::AllocateProducerId, timeout)
            .await?;
        self.metadata()
            .allocations
            .get(&request)
            .copied()
            .ok_or_else(|| AppendError::Invalid("producer id allocation not found".into()))
    }

    /// Changes topic `name`'s config overrides through the replicated metadata: with
    /// `replace_all` they become exactly `set`, otherwise `remove` goes back to defaults and
    /// `set` is applied. The caller validated the result ([`crate::topic_config`]). Returns once
    /// this node has applied it; every replica applies it as it commits.
    pub async fn alter_topic_configs(
        &self,
        name: &str,
        set: BTreeMap<String, String>,
        remove: Vec<String>,
        replace_all: bool,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        let incarnation = self.current_incarnation(name)?;
        self.propose_metadata(
            &MetaCommand::AlterTopicConfigs {
                name: name.to_owned(),
                incarnation,
                set,
                remove,
                replace_all,
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Deletes partition `partition` of topic `name`'s records below `offset` on every replica
    /// (DeleteRecords) through the replicated metadata; the caller checked `offset` against the
    /// high watermark. Returns once this node has applied it.
    pub async fn delete_records(
        &self,
        name: &str,
        partition: u32,
        offset: u64,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        let incarnation = self.current_incarnation(name)?;
        self.propose_metadata(
            &MetaCommand::DeleteRecords {
                name: name.to_owned(),
                incarnation,
                partition,
                offset,
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Removes consumer group `group`'s committed offsets: all of them (`None`, DeleteGroups)
    /// or those of the listed partitions (OffsetDelete). Returns once this node has applied it.
    pub async fn delete_group_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, i32)>>,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        self.propose_metadata(
            &MetaCommand::DeleteGroupOffsets {
                group: group.to_owned(),
                partitions,
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Records a consumer group's committed offsets, replicated.
    pub async fn commit_offsets(
        &self,
        group: &str,
        offsets: Vec<CommittedOffset>,
        timeout: Duration,
    ) -> Result<(), AppendError> {
        self.propose_metadata(
            &MetaCommand::CommitOffsets {
                group: group.to_owned(),
                offsets,
                commit_time_ms: crate::metadata::wall_clock_ms(),
            },
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Commits a metadata command that changes nothing and returns once this node applied it:
    /// afterwards this node's metadata holds every change committed before the call (a read
    /// barrier that works on any node, leader or not).
    pub async fn metadata_barrier(&self, timeout: Duration) -> Result<(), AppendError> {
        self.propose_metadata(&MetaCommand::DeleteAcls { acls: Vec::new() }, timeout)
            .await
            .map(|_| ())
    }
}
