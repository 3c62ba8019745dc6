//! Quiescence: an idle Raft group stops ticking, so thousands of idle partitions cost their
//! nodes almost nothing (CockroachDB's quiesced ranges, TiKV's hibernated regions).
//!
//! The protocol, for topic partitions (the metadata group always ticks):
//! 1. A leader whose log is idle — nothing queued or waiting, everything committed and applied,
//!    every voter's matched index at the last index unless node liveness reports that voter
//!    down, no leadership transfer — for
//!    [`QUIESCE_AFTER_IDLE_ELECTIONS`] election timeouts broadcasts one more heartbeat marked
//!    with [`QUIESCE_CONTEXT`] and stops ticking (so it sends no more heartbeats).
//! 2. A follower that receives the marked heartbeat from its leader, and whose log ends at the
//!    commit index the heartbeat carries (all of it committed and applied), stops ticking too
//!    (so it never times out waiting for heartbeats that will not come). A follower that does
//!    not agree keeps ticking: it times out, its pre-vote wakes the leader, and the group runs
//!    on until it is idle again.
//! 3. Anything wakes a quiesced group: a message from a peer (other than the marked heartbeat),
//!    a proposal, an election request, a leadership hand-over, a peer reported unreachable or
//!    down. A woken group ticks on from where it stopped.
//! 4. Failure detection does not rely on the groups' heartbeats: every node pings every peer
//!    once per heartbeat interval on the peer transport (group id
//!    [`crate::replication::liveness`]'s `LIVENESS_GROUP`); a peer not heard from for an
//!    election timeout is reported down to every group. A quiesced follower whose leader is
//!    down wakes and a designated successor campaigns (see `replication/group/succession.rs`);
//!    a quiesced leader of which it is a voter wakes (to check its quorum) only when the
//!    voters not reported down are no longer a majority, and when the peer is heard again
//!    (to bring it up to date). A connection failure wakes a leader on the same condition
//!    and no follower. The same pings carry each node's list of the groups it leads (see
//!    [`crate::replication::leaders`]).

use raft::prelude::{Message, MessageType};
use raft::{Raft, StateRole, Storage};

/// Context of the heartbeat with which a leader tells its followers it stops ticking.
pub const QUIESCE_CONTEXT: &[u8] = b"vdl-quiesce";

/// Election timeouts a leader's log must stay idle before the group quiesces: long enough that
/// a group written every few hundred milliseconds stays awake, short enough that idle
/// partitions stop costing anything within seconds.
pub const QUIESCE_AFTER_IDLE_ELECTIONS: usize = 1;

/// Whether `msg` is a leader's quiesce heartbeat.
pub fn is_quiesce_heartbeat(msg: &Message) -> bool {
    msg.get_msg_type() == MessageType::MsgHeartbeat && msg.context.as_ref() == QUIESCE_CONTEXT
}

/// On a leader: whether its Raft state allows quiescing (the caller also checks that no
/// proposal is queued or waiting, and that every voter lacking part of the log is reported
/// down by node liveness): everything appended is committed and applied, and no leadership
/// transfer is under way.
pub fn leader_may_quiesce<S: Storage>(raft: &Raft<S>) -> bool {
    let log = &raft.raft_log;
    let last = log.last_index();
    raft.state == StateRole::Leader
        && raft.lead_transferee.is_none()
        && log.committed == last
        && log.applied == last
}

/// On a follower that has just stepped `heartbeat` (a quiesce heartbeat): whether it agrees to
/// stop ticking: the heartbeat came from its leader, and its own log ends at the commit index
/// the heartbeat carries, all committed and applied.
pub fn follower_may_quiesce<S: Storage>(raft: &Raft<S>, heartbeat: &Message) -> bool {
    let log = &raft.raft_log;
    let last = log.last_index();
    raft.state == StateRole::Follower
        && raft.leader_id == heartbeat.from
        && heartbeat.commit == last
        && log.committed == last
        && log.applied == last
}
