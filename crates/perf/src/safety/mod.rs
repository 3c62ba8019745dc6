//! `vdl-perf verify`: a Jepsen-style safety check of any Kafka-protocol cluster.
//!
//! - [`history`]: what a run records (sends and their outcomes, polls, the final read).
//! - [`checker`]: finds the anomalies of Jepsen's Kafka workload in a history.
//! - [`run`]: the producers, tailing consumers and final read that make a history.
//! - [`group`]: the group-mode consumers (members of one consumer group) of a run.

pub mod checker;
pub mod group;
pub mod history;
pub mod run;
