//! `vdl-perf verify`: a Jepsen-style safety check of any Kafka-protocol cluster.
//!
//! - [`history`]: what a run records (sends and their outcomes, polls, the final read).
//! - [`checker`]: finds the anomalies of Jepsen's Kafka workload in a history.
//! - [`run`]: the producers, tailing consumers and final read that make a history.

pub mod checker;
pub mod history;
pub mod run;
