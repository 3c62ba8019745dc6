//! Cluster metadata, replicated through its own Raft group (group id 1, every node a voter):
//! which topics exist, producer ids handed out, and consumer groups' committed offsets. Every
//! node applies the same commands in the same order, so every node holds the same metadata, and
//! a committed change survives the death of any minority of nodes.
//!
//! Commands are stored in `Meta` entries as protobuf with a leading format byte
//! ([`crate::metadata::codec`], which also reads the JSON entries of older versions). Every
//! `metadata.snapshot_interval_entries` applied entries the state is written to a snapshot and
//! the log compacted below it ([`crate::metadata::snapshot`]); on restart the group loads the
//! newest snapshot and replays the entries after it. Retention rules never apply to this log.
//!
//! The room, one job per file: `command.rs` (the commands and the records they carry),
//! `state.rs` (the state one node holds, its queries and snapshot conversion), `apply.rs` (how
//! a command changes the state, and the [`Effect`] it asks of the node), `state_machine.rs`
//! (the group's state machine, which asks its effects of a [`MetadataHost`]: the node, or the
//! simulation's recorder), `codec/` (the log and snapshot formats), `snapshot.rs` (snapshot
//! files), `proposer.rs` (the one path that writes commands: request ids, encoding,
//! retries), `topic_ids.rs` (a topic's id, and the index from id to name), `txn_offsets.rs` (groups'
//! offsets committed in transactions, pending until the transaction ends), `transactions.rs` (the
//! transaction coordinator's state), `forwarded.rs` (what a member may propose through another node, and the
//! metadata group's other checks the peer guard asks of it). It imports nothing of the Kafka handlers, the admin API or the node.

mod apply;
pub mod codec;
mod command;
#[cfg(test)]
mod consumer_groups_tests;
pub mod forwarded;
pub mod proposer;
pub mod snapshot;
mod state;
mod state_machine;
#[cfg(test)]
mod tests;
pub mod topic_ids;
mod transactions;
pub mod txn_offsets;
#[cfg(test)]
mod txn_offsets_tests;
pub mod txn_partition_requests;

pub use apply::Effect;
pub use command::{
    CommittedOffset, GroupMemberRecord, GroupRecord, MemberRecord, MetaCommand, MetaEntry,
    RequestId,
};
pub use state::{ClusterMeta, TopicLayout, TopicMeta};
pub use state_machine::{MetadataHost, MetadataRecoveryError, MetadataStateMachine};
pub use transactions::{TxnRecord, TxnStatus};
pub use txn_offsets::{PendingOffset, PendingTxnOffsets, TxnOffsetsByGroup};

/// Group id of the metadata group.
pub const METADATA_GROUP_ID: u64 = 1;
/// Name of the metadata group's stream directory (not a topic).
pub const METADATA_STREAM: &str = "__cluster_metadata";
/// The first producer id the metadata hands out ([`MetaCommand::AllocateProducerId`]; one id
/// per InitProducerId, as Kafka does).
pub const FIRST_PRODUCER_ID: i64 = 1000;
/// Allocation results remembered for proposers to read back.
const MAX_REMEMBERED_ALLOCATIONS: usize = 4096;

/// Now on this node's wall clock, ms since the epoch (the time metadata commands carry).
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
