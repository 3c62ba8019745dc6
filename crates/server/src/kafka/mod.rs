//! The Kafka protocol listener: connections, request dispatch and the handlers of each API.
//!
//! - [`listener`]: accepts connections (bounded), reads frames, handles requests concurrently
//!   and writes responses in request order.
//! - [`conn_limits`]: connection limits per listener and client address, accept rates, the
//!   authentication deadline.
//! - [`connection`]: what a handler knows of its connection (peer, principal, listener).
//! - [`access`]: what the request's principal may do (the authorizer over the replicated ACLs).
//! - [`acls`]: CreateAcls, DescribeAcls, DeleteAcls.
//! - [`users`]: DescribeUserScramCredentials, AlterUserScramCredentials.
//! - [`handlers`]: turns one decoded request into its response.
//! - [`host`]: what the handlers need of the node, one narrow trait per API family (and what
//!   the dispatch and a connection need); kafka/ imports nothing of the node itself.
//! - [`reply`]: what a handler answers (the [`reply::Reply`] the listener writes) and the one
//!   encoding of a response for its request's correlation id and version ([`reply::now`],
//!   [`reply::later`]).
//! - [`error_codes`]: the one table of Kafka error codes for failed appends and proposals,
//!   keyed by what was proposed (records, a metadata change, an offset commit, ...).
//! - [`fields`]: field values converted the same way for every API (an admin request's
//!   timeout, an advertised address's host and port).
//! - [`produce`] (with [`produce_keys`], the keys a compacted topic requires), [`fetch`],
//!   [`metadata`], [`topics`], [`cluster`]: the APIs' logic over the node's log streams and the
//!   replicated cluster metadata.
//! - [`configs`]: AlterConfigs and IncrementalAlterConfigs (topic config overrides).
//! - [`partition_admin`]: DeleteRecords, DescribeLogDirs, DescribeProducers, ElectLeaders,
//!   ListPartitionReassignments.
//! - [`quotas`]: DescribeClientQuotas and AlterClientQuotas (client quotas, see [`crate::flow`]).
//! - [`txn_markers`]: WriteTxnMarkers, the transaction markers a coordinator writes to a
//!   partition (the partition side of transactions).
//! - [`groups`]: consumer groups (classic protocol): coordinator lookup, membership and
//!   rebalances (with each group's next deadline in a heap), committed offsets.
//! - [`txn`]: the transaction coordinator (InitProducerId with a transactional id,
//!   AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions), the
//!   markers that end transactions, and the check of transactional produces.
//!
//! Each partition of a topic is its own log stream and Raft group (see the crate README).

pub mod access;
pub mod acls;
pub mod cluster;
pub mod configs;
pub mod conn_limits;
pub mod connection;
pub mod direct_answer;
pub mod error_codes;
pub mod fetch;
pub mod fields;
pub(crate) mod groups;
pub mod handlers;
pub mod host;
pub mod in_order;
pub mod listener;
pub mod metadata;
pub mod partition_admin;
pub mod produce;
pub mod produce_keys;
pub mod quotas;
pub mod reply;
pub mod topics;
pub(crate) mod txn;
pub mod txn_markers;
pub mod users;

pub(crate) use listener::serve;
