//! Transactions over the Kafka protocol, the coordinator side (issue 36, step 2; the
//! partition side is `replication::transactions` and `kafka::txn_markers`): InitProducerId with
//! a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
//! ListTransactions, the markers that end a transaction on its partitions, transaction
//! timeouts, and the check a transactional Produce passes.
//!
//! **Placement.** As for consumer groups, the coordinator of every transactional id is the
//! node leading the metadata Raft group (FindCoordinator with key type 1 names it); requests
//! reaching another node get NOT_COORDINATOR.
//!
//! **State.** One record per transactional id in the replicated metadata
//! (`ClusterMeta::transactions`: producer id and epoch, timeout, state, partitions, groups,
//! times), written whole by [`MetaCommand::PutTransaction`](crate::metadata::MetaCommand)
//! only while this node coordinates in the term it decided in, under the id's lock, and
//! answered after the commit. Every node applies it: the snapshots carry it, a new coordinator
//! (once it has applied the metadata through its term's start) carries on from it, and each
//! partition leader verifies transactional batches against it.
//!
//! **Ending a transaction.** EndTxn writes PrepareCommit or PrepareAbort and answers. The
//! markers are written by each partition's leader, which sees the decision in the state
//! ([`markers`]), and reported back through the metadata group; the last report completes the
//! transaction (CompleteCommit or CompleteAbort). Why this path and not the coordinator
//! calling the leaders: see [`markers`].
//!
//! **Transaction versions** (KIP-890). ApiVersions finalizes the feature `transaction.version`
//! at 2, as a Kafka 4.x broker does; a client that reads it (the Kafka 4.x Java client) uses
//! version 2, others (librdkafka, the 3.9 Java client) version 1, and both are served. Under
//! version 2 every EndTxn (v5) bumps the producer epoch ([`end_txn_api`]), so an EndTxn of an
//! older epoch is a retry or fenced, never the end of a later transaction (KAFKA-17754); and
//! the producer sends no AddPartitionsToTxn/AddOffsetsToTxn: its first Produce (v12) to a
//! partition has the partition leader ask the coordinator through the metadata group
//! ([`produce_check`], [`implicit_add`]), and TxnOffsetCommit v5 adds its group here. The
//! coordinator stays the only writer of a record either way. The record remembers the
//! version of its last change (`TxnRecord::transaction_version`).
//!
//! **Files.** [`coordinator`]: the term, the per-id locks, writing the state, the producer
//! checks; [`limits`]: timeouts and periods; [`init_producer_id`]: InitProducerId with a
//! transactional id; [`add_api`]: AddPartitionsToTxn and AddOffsetsToTxn; [`end_txn_api`]:
//! EndTxn; [`implicit_add`]: transaction version 2's implicit additions; [`describe_api`]:
//! DescribeTransactions and ListTransactions; [`markers`]: the marker writer; [`tasks`]: the
//! background tasks (the marker writer, timeouts); [`produce_check`]: what a transactional
//! Produce must pass.

pub(crate) mod add_api;
mod barrier;
pub(crate) mod coordinator;
pub(crate) mod describe_api;
pub(crate) mod end_txn_api;
pub(crate) mod implicit_add;
pub(crate) mod init_producer_id;
mod limits;
mod markers;
pub(crate) mod produce_check;
pub(crate) mod tasks;
