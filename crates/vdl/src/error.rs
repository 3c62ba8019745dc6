//! The errors of the embedded API: what happened to the caller's data is part of each variant.

use thiserror::Error;

/// Why a call of the embedded API failed. Each append error says whether the records may
/// still be in the log: [`Error::NotLeader`], [`Error::TooLarge`], [`Error::InvalidRecord`],
/// [`Error::Busy`] and [`Error::Closed`] before submission mean nothing was written;
/// [`Error::Timeout`] and [`Error::LeaderChanged`] mean the outcome is unknown (the records may
/// still commit: read the log to find out).
#[derive(Debug, Error)]
pub enum Error {
    /// This node does not lead the partition, so it did not write anything. Forward the append
    /// to `leader` (a node id; `kafka_address` is where it serves Kafka clients, when it
    /// announced one), or retry once an election settled (`leader` is `None` while none is
    /// known).
    #[error(
        "node {node} does not lead {stream}/{partition} (leader: {leader:?}); nothing was written"
    )]
    NotLeader {
        /// The node that refused.
        node: u64,
        /// The stream.
        stream: String,
        /// The partition.
        partition: u32,
        /// The leader's node id, when known.
        leader: Option<u64>,
        /// The leader's Kafka address, when it announced one to this node.
        kafka_address: Option<String>,
    },
    /// The append was not committed within the deadline. The records may still commit later
    /// (they may be appended on a majority already); read the log before writing them again.
    #[error("not committed within {0:?}; the records may still commit")]
    Timeout(std::time::Duration),
    /// This node stopped leading while the append was in flight. As with [`Error::Timeout`],
    /// the records may still commit under the new leader.
    #[error("the leader changed while the append was in flight (new leader: {leader:?}); the records may still commit")]
    LeaderChanged {
        /// The new leader's node id, when known.
        leader: Option<u64>,
    },
    /// The log (or this stream on this node) is shut down.
    #[error("the log is closed")]
    Closed,
    /// A batch is larger than the stream's `max.message.bytes` (or the 32 MiB hard cap);
    /// nothing was written.
    #[error(
        "record batch of {size} bytes is larger than the limit of {max} bytes; nothing was written"
    )]
    TooLarge {
        /// The encoded batch's size in bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The records cannot be appended as given (empty, a timestamp too far ahead, spread over
    /// partitions in an atomic append, a partition beyond the stream); nothing was written.
    #[error("invalid records: {0}; nothing was written")]
    InvalidRecord(String),
    /// The stream's `min.insync.replicas` asks for more replicas in sync than are; nothing was
    /// written.
    #[error("{in_sync} replicas in sync, {required} required; nothing was written")]
    NotEnoughReplicas {
        /// Replicas in sync now (the leader included).
        in_sync: usize,
        /// What `min.insync.replicas` asks.
        required: usize,
    },
    /// Too many appends are waiting on this partition; nothing was written. Retry later.
    #[error("too many appends waiting; nothing was written")]
    Busy,
    /// A stream name, option or config is not acceptable.
    #[error("invalid stream: {0}")]
    InvalidStream(String),
    /// This node holds no replica of the partition, so it cannot read it.
    #[error("node {node} holds no replica of {stream}/{partition}")]
    NotHosted {
        /// This node.
        node: u64,
        /// The stream.
        stream: String,
        /// The partition.
        partition: u32,
    },
    /// The offset is outside the partition's stored range `[log start, high watermark]`
    /// (below it: retention deleted it).
    #[error("offset {offset} is outside [{log_start}, {high_watermark}]")]
    OffsetOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// The first offset still stored.
        log_start: u64,
        /// The offset after the last committed record.
        high_watermark: u64,
    },
    /// A replicated metadata change (creating a stream, committing a position) failed.
    #[error("metadata change failed: {0}")]
    Metadata(String),
    /// The node could not start (configuration, ports, data directory).
    #[error("cannot start the node: {0}")]
    Start(#[from] vdl_server::node::NodeError),
    /// No free local ports for an in-process cluster.
    #[error("network: {0}")]
    Network(String),
    /// Reading the local store failed, or a stored batch did not decode.
    #[error("storage: {0}")]
    Storage(String),
}

impl Error {
    /// Whether an append that failed with this error may still commit: its outcome is unknown
    /// ([`Error::Timeout`], [`Error::LeaderChanged`], and [`Error::Closed`] for an append in
    /// flight at shutdown). Before writing such records again, look for them in the log once a
    /// leader has committed in its own term ([`crate::PartitionStatus::leader_ready`]).
    pub fn may_have_committed(&self) -> bool {
        matches!(
            self,
            Error::Timeout(_) | Error::LeaderChanged { .. } | Error::Closed
        )
    }
}

/// The result type of the embedded API.
pub type Result<T, E = Error> = std::result::Result<T, E>;
