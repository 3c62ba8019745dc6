//! Cluster metadata, replicated through its own Raft group (group id 1, every node a voter):
//! which topics exist, producer ids handed out, and consumer groups' committed offsets. Every
//! node applies the same commands in the same order, so every node holds the same metadata, and
//! a committed change survives the death of any minority of nodes.
//!
//! Commands are JSON documents in `Meta` entries (small, rare, and readable when debugging).
//! On restart the group replays its whole log to rebuild this state; the metadata log is never
//! trimmed by retention.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock, Weak};

use serde::{Deserialize, Serialize};

use crate::group::StateMachine;
use crate::node::Node;

/// Group id of the metadata group.
pub const METADATA_GROUP_ID: u64 = 1;
/// Name of the metadata group's stream directory (not a topic).
pub const METADATA_STREAM: &str = "__cluster_metadata";
/// Producer ids handed out per InitProducerId (one id per producer, as Kafka does).
const FIRST_PRODUCER_ID: i64 = 1000;
/// Allocation results remembered for proposers to read back.
const MAX_REMEMBERED_ALLOCATIONS: usize = 4096;

/// A change to the cluster metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaCommand {
    /// Create a topic (a log stream with one partition) on every node.
    CreateTopic {
        /// Topic name.
        name: String,
    },
    /// Delete a topic and its data on every node.
    DeleteTopic {
        /// Topic name.
        name: String,
    },
    /// Hand out one new producer id.
    AllocateProducerId,
    /// Record committed offsets of a consumer group.
    CommitOffsets {
        /// Consumer group id.
        group: String,
        /// (topic, partition, offset, leader epoch, metadata) per partition.
        offsets: Vec<CommittedOffset>,
    },
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
    /// Raft index of the create command.
    pub created_at_index: u64,
}

/// The replicated metadata, as applied on this node.
#[derive(Debug, Default)]
pub struct ClusterMeta {
    /// Topics by name.
    pub topics: BTreeMap<String, TopicMeta>,
    /// The next producer id to hand out.
    pub next_producer_id: i64,
    /// Producer ids handed out, by the Raft index of the command that allocated them.
    pub allocations: BTreeMap<u64, i64>,
    /// Committed offsets: group -> (topic, partition) -> offset.
    pub offsets: HashMap<String, BTreeMap<(String, i32), CommittedOffset>>,
}

impl ClusterMeta {
    fn apply(&mut self, index: u64, cmd: MetaCommand) -> Option<Effect> {
        match cmd {
            MetaCommand::CreateTopic { name } => {
                if self.topics.contains_key(&name) {
                    return None;
                }
                self.topics.insert(
                    name.clone(),
                    TopicMeta {
                        created_at_index: index,
                    },
                );
                Some(Effect::OpenStream(name))
            }
            MetaCommand::DeleteTopic { name } => {
                // Also drops a stream configured at start (not in `topics`).
                self.topics.remove(&name);
                Some(Effect::DropStream(name))
            }
            MetaCommand::AllocateProducerId => {
                if self.next_producer_id < FIRST_PRODUCER_ID {
                    self.next_producer_id = FIRST_PRODUCER_ID;
                }
                self.allocations.insert(index, self.next_producer_id);
                self.next_producer_id += 1;
                while self.allocations.len() > MAX_REMEMBERED_ALLOCATIONS {
                    self.allocations.pop_first();
                }
                None
            }
            MetaCommand::CommitOffsets { group, offsets } => {
                let g = self.offsets.entry(group).or_default();
                for o in offsets {
                    g.insert((o.topic.clone(), o.partition), o);
                }
                None
            }
        }
    }
}

/// What applying a command asks of the node.
enum Effect {
    OpenStream(String),
    DropStream(String),
}

/// Applies metadata commands on the metadata group's thread.
pub struct MetadataStateMachine {
    state: Arc<RwLock<ClusterMeta>>,
    node: Weak<Node>,
}

impl MetadataStateMachine {
    /// A state machine writing into `state` and opening or dropping streams on `node`.
    pub fn new(state: Arc<RwLock<ClusterMeta>>, node: Weak<Node>) -> MetadataStateMachine {
        MetadataStateMachine { state, node }
    }
}

impl StateMachine for MetadataStateMachine {
    fn apply(&mut self, index: u64, data: &[u8]) {
        let cmd: MetaCommand = match serde_json::from_slice(data) {
            Ok(c) => c,
            Err(e) => {
                // Every node skips the same undecodable entry, so they stay in agreement.
                tracing::error!(index, "undecodable metadata command skipped: {e}");
                return;
            }
        };
        let effect = self
            .state
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply(index, cmd);
        let Some(node) = self.node.upgrade() else {
            return;
        };
        match effect {
            Some(Effect::OpenStream(name)) => {
                if let Err(e) = node.open_stream(&name) {
                    tracing::error!(topic = %name, "cannot open the stream of a created topic: {e}");
                }
            }
            Some(Effect::DropStream(name)) => node.drop_stream(&name),
            None => {}
        }
    }
}
