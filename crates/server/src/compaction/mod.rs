//! Log compaction (Kafka's `cleanup.policy=compact`) at the server level.
//!
//! The store (`logstore::compaction`) rewrites sealed segments and keeps the Raft log whole;
//! the record level is the server's: [`codec::KafkaRecordCompactor`] implements
//! `logstore::RecordCompactor` over `kafka-proto`'s batch codec. A leaf room: it imports
//! only `logstore` and `kafka_proto`, nothing of the crate. How compacted entries reach
//! followers: `replication::raft_storage` (record counts in the entry context); when a group
//! may compact at all: `replication::peer_wire::compaction_allowed`. The passes the node's
//! log cleaner thread runs: [`cleaner`].

pub mod cleaner;
pub mod codec;

pub use codec::{KafkaRecordCompactor, DEFAULT_MAX_DECOMPRESSED_BYTES};

#[cfg(test)]
mod txn_pass_tests;
