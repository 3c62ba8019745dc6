//! `vdl-perf verify`: a Jepsen-style safety check of any Kafka-protocol cluster.
//!
//! - [`history`]: what a run records (sends and their outcomes, polls, the final read).
//! - [`checker`]: finds the anomalies of Jepsen's Kafka workload in a history.
//! - [`run`]: the producers, tailing consumers and final read that make a history.
//! - [`group`]: the group-mode consumers (members of one consumer group) of a run.
//! - [`txn_run`]: the transactional producers and the fencing check (`--transactional`).
//! - [`isolation`]: what a read_committed consumer keeps of a Fetch answer.
//! - [`txn_checker`]: finds the transactional anomalies (lost, aborted, torn, read before
//!   commit, fencing) in a transactional run's history.

pub mod checker;
pub mod group;
pub mod history;
pub mod isolation;
pub mod run;
pub mod txn_checker;
pub mod txn_run;
