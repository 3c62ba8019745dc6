//! One node's replicated state, without any protocol (no network, no Kafka, no admin API):
//! the decisions the node carries out and that the deterministic simulation drives the same
//! way.
//!
//! - `catalog`: the partitions open on the node, by topic and partition;
//! - `data_dir`: the data directory's layout (where each stream's and partition's files live,
//!   its migration, the directories of deleted incarnations);
//! - `effects`: what each applied metadata command means for one node, dispatched onto an
//!   [`effects::EffectHost`] (the node, or the simulation), and bringing a node in line with
//!   a metadata snapshot;
//! - `membership`: what a partition open here does when the replica lists change (new
//!   voters, or dropped), and when a reassignment it leads is done;
//! - `topics`: which partitions of a topic the node opens and with what configuration, and
//!   the opening and dropping of a topic over a [`topics::PartitionHost`] (the node, or the
//!   simulation), and the deleted incarnations found in the metadata log at start.
//!
//! Rule (kept by `tests/layout_rules.rs`): core imports nothing of `kafka/`, the admin API or
//! `node/`; `replication/` imports nothing of core.

pub mod catalog;
pub mod data_dir;
pub mod effects;
pub mod membership;
pub mod topics;
