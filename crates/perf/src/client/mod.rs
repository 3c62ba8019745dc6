//! vdl-perf's own Kafka client, on kafka-proto and tokio: connections with pipelining
//! ([`conn`]), request builders and response readers for the four APIs it uses ([`protocol`]),
//! and leader discovery through Metadata ([`cluster`]), TLS and SASL ([`security`]), group and
//! producer-id coordinator calls ([`coordinator`]) and the consumer protocol's embedded
//! subscription, assignment and range assignor ([`consumer_protocol`]), and a transactional
//! producer's and read_committed consumer's calls ([`txn`]).
//!
//! Fixed versions, known to Apache Kafka 3.9 and to vdl: Produce v9, Fetch v12 (topic names),
//! ListOffsets v7, Metadata v12, ApiVersions v3; for groups and idempotence (see
//! [`coordinator`]) FindCoordinator v4, JoinGroup v9, SyncGroup v5, Heartbeat v4,
//! OffsetCommit v8, OffsetFetch v7, LeaveGroup v5, InitProducerId v4; for transactions
//! AddPartitionsToTxn v3 and EndTxn v3. No ApiVersions negotiation: the tool measures
//! servers that speak these versions.

pub mod cluster;
pub mod conn;
pub mod consumer_protocol;
pub mod coordinator;
pub mod protocol;
pub mod security;
pub mod txn;

use kafka_proto::error_code::ErrorCode;
use kafka_proto::{DecodeError, EncodeError};
use thiserror::Error;

pub use cluster::{Cluster, PartitionLeader};
pub use conn::{measure_rtt, Connection, FrameReader, FrameWriter};

/// Produce request version.
pub const PRODUCE_VERSION: i16 = 9;
/// Fetch request version (v12: the last one that names topics instead of topic ids).
pub const FETCH_VERSION: i16 = 12;
/// ListOffsets request version.
pub const LIST_OFFSETS_VERSION: i16 = 7;
/// Metadata request version.
pub const METADATA_VERSION: i16 = 12;
/// CreateTopics request version.
pub const CREATE_TOPICS_VERSION: i16 = 5;
/// ApiVersions request version (used to measure the round-trip time).
pub const API_VERSIONS_VERSION: i16 = 3;

/// What can go wrong talking to a broker.
#[derive(Debug, Error)]
pub enum ClientError {
    /// A socket error (connection refused, reset, closed).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A response could not be decoded.
    #[error("decoding a response: {0}")]
    Decode(#[from] DecodeError),
    /// A request could not be encoded.
    #[error("encoding a request: {0}")]
    Encode(#[from] EncodeError),
    /// A response answered another request than the one expected.
    #[error("correlation id mismatch: expected {expected}, got {got}")]
    CorrelationMismatch {
        /// The id of the oldest request in flight.
        expected: i32,
        /// The id in the response.
        got: i32,
    },
    /// No answer in time.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The broker answered with an error code.
    #[error("broker error {} ({}) on {what}", .code.name(), .code.code())]
    Broker {
        /// The error.
        code: ErrorCode,
        /// Which request.
        what: &'static str,
    },
    /// The response was well formed but not what the request asked for.
    #[error("unexpected response: {0}")]
    Unexpected(String),
    /// Metadata did not list the topic or partition, or no leader for it.
    #[error("no leader for {topic}-{partition}: {why}")]
    NoLeader {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// Details.
        why: String,
    },
}

impl ClientError {
    /// Whether retrying after a metadata refresh and reconnect may help (connection errors,
    /// timeouts, and Kafka's retriable error codes such as NOT_LEADER_OR_FOLLOWER).
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Io(_) | ClientError::Timeout(_) | ClientError::NoLeader { .. } => true,
            ClientError::Broker { code, .. } => code.is_retriable(),
            _ => false,
        }
    }

    /// A short name for counting errors by kind: the Kafka error name, or the kind of failure.
    pub fn kind(&self) -> String {
        match self {
            ClientError::Io(_) => "IO".into(),
            ClientError::Decode(_) => "DECODE".into(),
            ClientError::Encode(_) => "ENCODE".into(),
            ClientError::CorrelationMismatch { .. } => "CORRELATION_MISMATCH".into(),
            ClientError::Timeout(_) => "CLIENT_TIMEOUT".into(),
            ClientError::Broker { code, .. } => code.name().to_string(),
            ClientError::Unexpected(_) => "UNEXPECTED_RESPONSE".into(),
            ClientError::NoLeader { .. } => "NO_LEADER".into(),
        }
    }
}
