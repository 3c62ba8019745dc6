//! The topic catalog of a node: the streams and topic partitions hosted here, looking them up,
//! opening and dropping them, and their topic-level settings.

use std::collections::BTreeMap;

use crate::replication::group::{try_deliver, AppendError, GroupInput};
use crate::replication::ids::group_id_for;
use crate::replication::stream::LogStream;
use crate::topic_config::TopicSettings;

use crate::core::data_dir::DataDir;
use crate::core::topics::{OpenTopicError, PartitionHost, PartitionToOpen};
use crate::metadata::TopicLayout;

use super::{GroupKind, Node, NodeError};

/// The store retention policy of a topic's settings.
pub(super) fn retention_policy(settings: &TopicSettings) -> logstore::RetentionPolicy {
    logstore::RetentionPolicy {
        max_segments: None,
        max_bytes: settings.retention_bytes,
        max_age: settings.retention_age,
    }
}

impl Node {
    /// A handle on partition 0 of topic (or configured stream) `name`.
    pub fn stream(&self, name: &str) -> Option<LogStream> {
        self.partition(name, 0)
    }

    /// A handle on partition `partition` of topic `name`, if this node is one of its replicas.
    pub fn partition(&self, name: &str, partition: u32) -> Option<LogStream> {
        self.streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name, partition)
            .cloned()
    }

    /// Handles on the partitions of topic `name` this node is a replica of, in partition order
    /// (empty when it hosts none, or the topic is unknown).
    pub fn partitions(&self, name: &str) -> Vec<LogStream> {
        self.streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .partitions(name)
    }

    /// Where topic `name` lives: from the replicated metadata, or a stream configured at start
    /// (one partition, every member). `None` when there is no such topic.
    pub fn topic_layout(&self, name: &str) -> Option<TopicLayout> {
        if let Some(t) = self.metadata().topics.get(name) {
            return Some(TopicLayout {
                incarnation: t.created_at_index,
                replicas: t.replicas.clone(),
            });
        }
        self.partition(name, 0)
            .filter(|s| s.incarnation == 0)
            .map(|_| TopicLayout {
                incarnation: 0,
                replicas: vec![self.config.member_ids()],
            })
    }

    /// The incarnation of topic `name` (0 for a stream configured at start), without copying
    /// its replica lists; `None` when there is no such topic.
    pub fn topic_incarnation(&self, name: &str) -> Option<u64> {
        if let Some(i) = self.metadata().incarnation(name) {
            return Some(i);
        }
        self.partition(name, 0)
            .filter(|s| s.incarnation == 0)
            .map(|_| 0)
    }

    /// The name of the topic, or stream configured at start, whose id is `id` (see
    /// `metadata::topic_ids`): the metadata's index (one hash look-up); then the streams
    /// configured at start (incarnation 0, not in the metadata): those this configuration
    /// names, then, for an id still unknown (a deleted topic's, or none), every stream
    /// hosted here, as [`Node::topic_names`] lists them.
    pub fn topic_name_by_id(&self, id: kafka_proto::Uuid) -> Option<String> {
        if let Some(name) = self.metadata().topic_name_by_id(id) {
            return Some(name.to_owned());
        }
        let is_stream = |name: &String| {
            crate::metadata::topic_ids::topic_id(name, 0) == id
                && self.topic_incarnation(name) == Some(0)
        };
        if let Some(name) = self.config.initial_streams.iter().find(|n| is_stream(n)) {
            return Some(name.clone());
        }
        self.stream_names().into_iter().find(is_stream)
    }

    /// Names of every topic of the cluster (hosted here or not) and of the streams configured
    /// at start, sorted.
    pub fn topic_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.metadata().topics.keys().cloned().collect();
        for name in self.stream_names() {
            if self.partition(&name, 0).is_some_and(|s| s.incarnation == 0) {
                names.push(name);
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// Names of every stream this node hosts a partition of.
    pub fn stream_names(&self) -> Vec<String> {
        self.streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .names()
    }

    /// Stops one partition's group and deletes its data here (its replica moved to another
    /// node). Appends waiting on it fail with `Stopped`.
    pub(super) fn drop_partition(&self, name: &str, incarnation: u64, partition: u32) {
        crate::core::topics::drop_partition(
            &mut NodePartitions(self),
            name,
            incarnation,
            partition,
        );
    }

    /// The effective settings of topic `name`: its config overrides over this node's
    /// configuration (the node's alone for a topic it does not know).
    pub fn topic_settings(&self, name: &str) -> TopicSettings {
        let meta = self.metadata();
        match meta.topics.get(name) {
            Some(t) if !t.configs.is_empty() => TopicSettings::resolve(&self.config, &t.configs),
            _ => TopicSettings::resolve(&self.config, &BTreeMap::new()),
        }
    }

    /// Applies topic `name`'s current config overrides to its partitions open here (called
    /// when the replicated metadata changed them): retention and segment size on their stores;
    /// the produce path reads the rest per request.
    pub fn apply_topic_settings(&self, name: &str, incarnation: u64) {
        let settings = self.topic_settings(name);
        for stream in self.partitions(name) {
            if stream.incarnation != incarnation {
                continue;
            }
            {
                let mut store = stream.store.write().unwrap_or_else(|e| e.into_inner());
                store.set_retention(retention_policy(&settings));
                store.set_segment_bytes(settings.segment_bytes);
                store.set_roll_age(Some(settings.segment_age));
            }
            tracing::info!(stream = %name, partition = stream.partition, ?settings, "topic configs changed");
        }
    }

    /// The current incarnation of topic `name` in the replicated metadata, for a command that
    /// names it (`Invalid` when there is no such topic).
    pub fn current_incarnation(&self, name: &str) -> Result<u64, AppendError> {
        self.metadata()
            .incarnation(name)
            .ok_or_else(|| AppendError::Invalid(format!("no topic {name}")))
    }

    /// Raises the log start offset of partition `partition` of topic `name` to `offset`
    /// (DeleteRecords, applied from the replicated metadata): records below it are no longer
    /// readable here, and the segments wholly below it are removed by the partition's group.
    pub fn delete_records_before(&self, name: &str, incarnation: u64, partition: u32, offset: u64) {
        let Some(stream) = self
            .partition(name, partition)
            .filter(|s| s.incarnation == incarnation)
        else {
            return;
        };
        stream
            .store
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .raise_records_floor(offset);
        try_deliver(&stream.inbox, GroupInput::RecordsFloorRaised);
    }

    /// Opens (creating on first use) a stream configured at start and starts its Raft group;
    /// returns the existing handle when it is already open. Every member of the cluster is a
    /// voter.
    pub fn open_stream(&self, name: &str) -> Result<LogStream, NodeError> {
        if let Some(s) = self.stream(name) {
            return Ok(s);
        }
        let group = group_id_for(name);
        self.open_group(
            name,
            0,
            group,
            0,
            GroupKind::Stream(self.stream_dir(name)),
            self.config.member_ids(),
            Vec::new(),
            None,
        )
    }

    /// Opens (creating on first use) the partitions of incarnation `incarnation` of topic
    /// `name` this node is a replica of (`replicas[p]` lists partition `p`'s, preferred leader
    /// first), starting a Raft group whose voters are those replicas for each that is not open
    /// yet. An older incarnation still open under the name is dropped first (what is opened
    /// is decided by [`crate::core::topics::open_topic`]).
    pub fn open_topic(
        &self,
        name: &str,
        incarnation: u64,
        replicas: &[Vec<u64>],
    ) -> Result<(), NodeError> {
        let _opening = self.open_lock.lock().unwrap_or_else(|e| e.into_inner());
        crate::core::topics::open_topic(&mut NodePartitions(self), name, incarnation, replicas)
            .map_err(|e| match e {
                OpenTopicError::Migrate(e) => e.into(),
                OpenTopicError::Open(e) => e,
            })
    }

    /// The replicas of `stream` in Kafka's order: the preferred leader first (a stream
    /// configured at start: every member in id order).
    pub fn replicas_of(&self, stream: &LogStream) -> Vec<u64> {
        self.topic_layout(&stream.name)
            .filter(|l| l.incarnation == stream.incarnation)
            .and_then(|l| l.replicas.get(stream.partition as usize).cloned())
            .unwrap_or_else(|| self.config.member_ids())
    }

    /// Stops a topic's groups (every partition) and deletes its data on this node (the topic
    /// was deleted). With an incarnation, only that incarnation is touched: a newer one open
    /// under the same name stays, and the older one's directories are removed if they are
    /// still there. Without one, the stream open under the name (a stream configured at start)
    /// is dropped. Appends waiting on a dropped stream fail with `Stopped`.
    pub fn drop_topic(&self, name: &str, incarnation: Option<u64>) {
        crate::core::topics::drop_topic(&mut NodePartitions(self), name, incarnation);
    }

    /// Whether `name` is a topic (created through the metadata group, hosted here or not, or
    /// a stream configured at start).
    pub fn is_topic(&self, name: &str) -> bool {
        self.topic_layout(name).is_some()
    }
}

/// The node as the host of the partitions [`crate::core::topics::open_topic`] decides to open:
/// each is a Raft group on the node's runtime, in its catalog.
struct NodePartitions<'a>(&'a Node);

impl PartitionHost for NodePartitions<'_> {
    type Error = NodeError;

    fn me(&self) -> u64 {
        self.0.config.id
    }

    fn data_dir(&self) -> &DataDir {
        &self.0.data_dir
    }

    fn open_incarnation(&self, name: &str) -> Option<u64> {
        self.0
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .open_incarnation(name)
    }

    fn is_open(&self, name: &str, partition: u32) -> bool {
        self.0.partition(name, partition).is_some()
    }

    fn deleted_before_start(&self, name: &str, incarnation: u64) -> bool {
        self.0
            .deleted_before_start
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(name.to_owned(), incarnation))
    }

    fn moving(&self, name: &str, incarnation: u64) -> BTreeMap<u32, Vec<u64>> {
        self.0
            .metadata()
            .topics
            .get(name)
            .filter(|t| t.created_at_index == incarnation)
            .map(|t| t.moving.clone())
            .unwrap_or_default()
    }

    fn open_partitions(&self, name: &str) -> Vec<(u32, u64, u64)> {
        self.0
            .partitions(name)
            .iter()
            .map(|s| (s.partition, s.incarnation, s.group))
            .collect()
    }

    fn stop_group(&mut self, group: u64) {
        self.0.stop_group(group);
    }

    fn forget_topic(&mut self, name: &str) {
        self.0
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove_topic(name);
    }

    fn forget_partition(&mut self, name: &str, partition: u32) {
        self.0
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove_partition(name, partition);
    }

    fn open_partition(
        &mut self,
        name: &str,
        incarnation: u64,
        plan: &PartitionToOpen,
        dir: std::path::PathBuf,
    ) -> Result<(), NodeError> {
        let node = self.0;
        let stream = node.open_group(
            name,
            plan.partition,
            plan.group,
            incarnation,
            GroupKind::Stream(dir),
            plan.voters.clone(),
            plan.learners.clone(),
            Some(plan.preferred),
        )?;
        // Not while the metadata log is replayed from disk at start (no metadata leader
        // known yet): every replica may be replaying at once after a restart of every node,
        // and a campaign would elect a leader for a topic incarnation that the rest of the
        // log deletes (an empty log, answering ListOffsets with 0 until the delete
        // replays). Elections then wait for a timeout, and leader rebalance moves
        // leadership to the preferred replica.
        let live = node
            .metadata_group()
            .is_some_and(|g| g.visible().leader != 0);
        if plan.stands_for_election && live {
            stream.campaign();
        }
        Ok(())
    }
}
