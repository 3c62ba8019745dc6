//! Raft replication: one Raft group per partition (and one for the cluster metadata), the
//! transport between nodes, and where replicas and leaders live.
//!
//! - [`group`]: one group's Ready loop, proposals, commit notification; [`state_machine`]: what
//!   a group with replicated state (the metadata) asks of it; [`in_sync`]: what a
//!   leader knows of its voters' copies (durable copies, Kafka's in-sync rule).
//! - [`raft_storage`]: raft-rs's `Storage` over the log store; [`raft_log`]: raft-rs's log
//!   records forwarded to `tracing`.
//! - [`transport`]: Raft messages between nodes over TCP; [`peer_wire`]: the bytes of the peer
//!   protocol; [`peer_guard`]: which connections, hellos and messages the peer port admits;
//!   [`direct_send`]: a group's worker writing to an idle peer link itself.
//! - [`stream`]: a handle on one partition's log stream (append, read, await commits);
//!   [`router`]: what the peer transport receives, routed to groups, liveness and leaders;
//!   [`ids`]: group ids derived from names, the boot nonce.
//! - [`liveness`]: one ping per peer per heartbeat interval, whatever the partition count.
//! - [`placement`]: which nodes hold each partition's replicas, and which should lead;
//!   [`leaders`]: who leads the partitions a node does not host.
//! - [`membership`]: adding and removing members one at a time (learner, catch up, promote,
//!   remove; replicas of a removed member reassigned); [`known_peers`]: the members added at
//!   runtime, remembered across restarts.
//! - [`replicas`]: data directory ids; a node rejoining after its disk was replaced.
//! - [`producers`]: idempotent producers' state, derived from each partition's replicated log;
//!   [`producer_snapshot`]: that state saved, so a restart remembers every producer, and
//!   rebuilt from the saved table and the log after it; [`transactions`]: the open and
//!   aborted transactions and the last stable offset, part of that state.

pub mod direct_send;
pub mod group;
pub mod ids;
pub mod in_sync;
pub mod known_peers;
pub mod leaders;
pub mod liveness;
pub mod membership;
pub mod peer_guard;
pub mod peer_wire;
pub mod placement;
pub mod producer_snapshot;
pub mod producers;
pub mod raft_log;
pub mod raft_storage;
pub mod replicas;
pub mod router;
pub mod state_machine;
pub mod stream;
pub mod transactions;
pub mod transport;
