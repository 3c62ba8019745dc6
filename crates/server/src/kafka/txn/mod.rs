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
//! **Files.** [`coordinator`]: the term, the per-id locks, writing the state, the producer
//! checks; [`limits`]: timeouts and periods; [`init_producer_id`]: InitProducerId with a
//! transactional id; [`add_api`]: AddPartitionsToTxn and AddOffsetsToTxn; [`end_txn_api`]:
//! EndTxn; [`describe_api`]: DescribeTransactions and ListTransactions; [`markers`]: the
//! marker writer; [`tasks`]: the background tasks (the marker writer, timeouts);
//! [`produce_check`]: what a transactional Produce must pass.

pub(crate) mod add_api;
pub(crate) mod coordinator;
pub(crate) mod describe_api;
pub(crate) mod end_txn_api;
pub(crate) mod init_producer_id;
mod limits;
mod markers;
pub(crate) mod produce_check;
pub(crate) mod tasks;
