//! The classic consumer group protocol's state machine, after Kafka's `GroupCoordinator`: group
//! membership, rebalances, generations and assignments, held in memory on the coordinator (the
//! metadata group's leader, see [`crate::kafka::groups`]).
//!
//! A group moves through Kafka's states: `Empty` (no members) → `PreparingRebalance` (members
//! (re)join; JoinGroup requests wait) → `CompletingRebalance` (JoinGroup answered: the leader
//! computes the assignment; SyncGroup requests wait for it) → `Stable` (the leader's SyncGroup
//! delivered every member's assignment). A join, a leave, an expired session or a changed
//! subscription starts the next rebalance. `Dead` is only ever reported for unknown groups.
//!
//! Each group has its own lock (groups live in sharded maps of `Arc<Mutex<Group>>`), so requests
//! for different groups never wait for each other; see [`Coordinator`] for the lock order.
//! Waiting requests are `oneshot` channels completed under the group's lock; nothing here blocks
//! or awaits. Deadlines (join completion, session expiry, pending sync, member ids handed out
//! but unused) are enforced by [`Coordinator::tick`], which the Kafka layer calls every
//! [`TICK`]; it visits only the groups whose next deadline is due, kept in a heap
//! ([`crate::kafka::group_deadlines`]), not every group.
//!
//! The state belongs to one metadata Raft term: when this node stops leading, or leads again in a
//! later term, the state is dropped and every waiting request is answered NOT_COORDINATOR, so the
//! clients rediscover the coordinator. A coordinator taking over loads the groups stored in the
//! metadata ([`Coordinator::load`]) and resumes their generations; the records to store (a
//! completed rebalance, a replaced static member, an emptied group) wait in an outbox, one per
//! group, for the persisting task ([`Coordinator::take_records`]).
//!
//! Static membership (`group.instance.id`, KIP-345): a member joining with an unknown member id
//! and an instance id the group knows takes the old member's place (its assignment and
//! leadership) under a new member id, without a rebalance when the group is Stable and its
//! protocols are unchanged; a process still using the old member id is fenced
//! (FENCED_INSTANCE_ID on every request); LeaveGroup can name members by instance id.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use tokio::sync::{oneshot, watch, Notify};

use crate::kafka::group_deadlines::Deadlines;
use crate::metadata::{GroupMemberRecord, GroupRecord};

/// How often deadlines are checked.
pub const TICK: Duration = Duration::from_millis(50);
/// How long the first rebalance of an empty group waits for more members to join (Kafka's
/// `group.initial.rebalance.delay.ms`, 3 s by default there; short here so a consumer starts
/// quickly). Each further join during the delay extends it, up to the rebalance timeout.
pub const INITIAL_REBALANCE_DELAY: Duration = Duration::from_millis(200);
/// Shortest session timeout accepted (Kafka's `group.min.session.timeout.ms` is 6 s; lower here
/// so tests can expire members quickly).
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(1_000);
/// Longest session timeout accepted (`group.max.session.timeout.ms`).
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(1_800);
/// Bound on a member's rebalance timeout (how long a rebalance waits for members to rejoin, and
/// for SyncGroup after the join completes). Kafka takes the member's `max.poll.interval.ms` as
/// is: Java's default is 5 minutes, stream processors often set hours, and Kafka Streams sets
/// `Integer.MAX_VALUE`. A day keeps every such setting working as configured (a member that
/// stops heartbeating is still removed when its session expires) while every waiting request
/// and deadline stays bounded.
pub const MAX_REBALANCE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Groups with members held in memory at once; joining a further group is refused
/// (GROUP_MAX_SIZE_REACHED).
pub const MAX_GROUPS: usize = 10_000;
/// Members (and member ids handed out but not yet joined) per group (`group.max.size`).
pub const MAX_MEMBERS: usize = 1_000;

/// A record for the metadata: a group's id and its membership (None: it became empty).
pub type StoredRecord = (String, Option<GroupRecord>);

/// A group's state, as Kafka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members.
    Empty,
    /// Members are (re)joining.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// No such group.
    Dead,
}

impl GroupState {
    /// The name Kafka reports (DescribeGroups, ListGroups).
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A JoinGroup request, as the state machine needs it.
#[derive(Debug, Clone)]
pub struct JoinParams {
    /// Group id.
    pub group_id: String,
    /// Member id; empty for a new member.
    pub member_id: String,
    /// Static instance id (`group.instance.id`, KIP-345).
    pub group_instance_id: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's address, as reported by DescribeGroups.
    pub client_host: String,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout (the session timeout for v0 requests).
    pub rebalance_timeout_ms: i32,
    /// Protocol type ("consumer").
    pub protocol_type: String,
    /// (name, metadata) per supported protocol, most preferred first.
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: a new member first gets MEMBER_ID_REQUIRED with its id.
    pub require_known_member_id: bool,
}

/// One member in the leader's JoinGroup response.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinedMember {
    /// Member id.
    pub member_id: String,
    /// Static instance id, as sent.
    pub group_instance_id: Option<String>,
    /// The member's metadata for the chosen protocol.
    pub metadata: Bytes,
}

/// The answer to a JoinGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinOutcome {
    /// Error (NONE on success).
    pub error: ErrorCode,
    /// The new generation (-1 on error).
    pub generation_id: i32,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The chosen protocol.
    pub protocol_name: Option<String>,
    /// The leader's member id.
    pub leader: String,
    /// The member id of the requester (also for MEMBER_ID_REQUIRED).
    pub member_id: String,
    /// Every member with its metadata, for the leader only.
    pub members: Vec<JoinedMember>,
    /// v9+: the leader must not compute an assignment (a static leader that rejoined without
    /// a rebalance: the group keeps the current one).
    pub skip_assignment: bool,
}

impl JoinOutcome {
    /// A failed join of `member_id`.
    pub fn error(error: ErrorCode, member_id: &str) -> JoinOutcome {
        JoinOutcome {
            error,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_owned(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// A SyncGroup request, as the state machine needs it.
#[derive(Debug, Clone)]
pub struct SyncParams {
    /// Group id.
    pub group_id: String,
    /// The generation the member joined.
    pub generation_id: i32,
    /// Member id.
    pub member_id: String,
    /// v3+: the member's static instance id.
    pub group_instance_id: Option<String>,
    /// v5+: the protocol type the member expects.
    pub protocol_type: Option<String>,
    /// v5+: the protocol the member expects.
    pub protocol_name: Option<String>,
    /// The leader's assignment per member (empty from followers).
    pub assignments: Vec<(String, Bytes)>,
}

/// The answer to a SyncGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncOutcome {
    /// Error (NONE on success).
    pub error: ErrorCode,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The chosen protocol.
    pub protocol_name: Option<String>,
    /// The member's assignment.
    pub assignment: Bytes,
}

impl SyncOutcome {
    /// A failed sync.
    pub fn error(error: ErrorCode) -> SyncOutcome {
        SyncOutcome {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// An answer available now, or one to wait for (at most the given time).
#[derive(Debug)]
pub enum Pending<T> {
    /// The answer.
    Now(T),
    /// The answer arrives on the channel; give up after the duration.
    Wait(oneshot::Receiver<T>, Duration),
}

/// A group as listed by ListGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group_id: String,
    /// Protocol type ("" when unknown).
    pub protocol_type: String,
    /// State.
    pub state: GroupState,
}

/// A member as described by DescribeGroups.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberDescription {
    /// Member id.
    pub member_id: String,
    /// Static instance id.
    pub group_instance_id: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// Metadata for the chosen protocol (only when Stable).
    pub metadata: Bytes,
    /// Assignment (only when Stable).
    pub assignment: Bytes,
}

/// A group as described by DescribeGroups.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDescription {
    /// State.
    pub state: GroupState,
    /// Protocol type.
    pub protocol_type: String,
    /// The chosen protocol (only when Stable).
    pub protocol: String,
    /// Members.
    pub members: Vec<MemberDescription>,
}

struct Member {
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    heartbeat_deadline: Instant,
    join_waiter: Option<oneshot::Sender<JoinOutcome>>,
    sync_waiter: Option<oneshot::Sender<SyncOutcome>>,
    /// Join order: the first member becomes leader.
    seq: u64,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }
}

struct Group {
    state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: HashMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with the time they must join by.
    pending: HashMap<String, Instant>,
    /// Static members: instance id -> the member id that holds it now.
    static_members: HashMap<String, String>,
    /// PreparingRebalance: when the join completes with whoever rejoined.
    join_deadline: Option<Instant>,
    /// The rebalance is the initial one of an empty group: it waits its whole delay.
    initial_delay: bool,
    /// Latest join_deadline an initial delay may be extended to.
    initial_delay_limit: Option<Instant>,
    /// Members that joined the current generation but have not sent SyncGroup yet, and when they
    /// must have.
    pending_sync: HashSet<String>,
    sync_deadline: Option<Instant>,
    next_seq: u64,
    /// The metadata holds a record of this group's membership (see [`Shared::note`]).
    stored: bool,
    /// The membership changed in a way the metadata must learn (a rebalance completed, a static
    /// member was replaced).
    dirty: bool,
    /// The sequence number of this group's last queued record (0: none).
    record_seq: u64,
    /// Taken out of the coordinator's map: a request that found it before must look again.
    removed: bool,
}

impl Group {
    fn new() -> Group {
        Group {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: HashMap::new(),
            pending: HashMap::new(),
            static_members: HashMap::new(),
            join_deadline: None,
            initial_delay: false,
            initial_delay_limit: None,
            pending_sync: HashSet::new(),
            sync_deadline: None,
            next_seq: 0,
            stored: false,
            dirty: false,
            record_seq: 0,
            removed: false,
        }
    }

    /// A Stable group as stored in the metadata by a previous coordinator: the same generation,
    /// members, protocol, leader and assignments; every session starts now (as when Kafka's
    /// coordinator loads a group).
    fn from_record(r: GroupRecord, now: Instant) -> Group {
        let mut g = Group::new();
        g.state = GroupState::Stable;
        g.generation = r.generation;
        g.protocol_type = Some(r.protocol_type);
        g.protocol = Some(r.protocol);
        for (seq, m) in r.members.into_iter().enumerate() {
            let session_timeout = session_timeout(m.session_timeout_ms);
            if let Some(instance) = &m.instance_id {
                g.static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            g.members.insert(
                m.member_id,
                Member {
                    instance_id: m.instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout,
                    rebalance_timeout: rebalance_timeout(m.rebalance_timeout_ms),
                    protocols: m
                        .protocols
                        .into_iter()
                        .map(|(name, metadata)| (name, Bytes::from(metadata)))
                        .collect(),
                    assignment: Bytes::from(m.assignment),
                    heartbeat_deadline: now + session_timeout,
                    join_waiter: None,
                    sync_waiter: None,
                    seq: seq as u64,
                },
            );
        }
        g.next_seq = g.members.len() as u64;
        g.leader = g
            .members
            .contains_key(&r.leader)
            .then_some(r.leader)
            .or_else(|| {
                g.members
                    .iter()
                    .min_by_key(|(_, m)| m.seq)
                    .map(|(id, _)| id.clone())
            });
        g.stored = true;
        g
    }

    /// The group's membership as the metadata stores it.
    fn record(&self) -> GroupRecord {
        let mut ordered: Vec<(&String, &Member)> = self.members.iter().collect();
        ordered.sort_by_key(|(_, m)| m.seq);
        GroupRecord {
            generation: self.generation,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: self.protocol.clone().unwrap_or_default(),
            leader: self.leader.clone().unwrap_or_default(),
            members: ordered
                .into_iter()
                .map(|(id, m)| GroupMemberRecord {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: i32::try_from(m.session_timeout.as_millis())
                        .unwrap_or(i32::MAX),
                    rebalance_timeout_ms: i32::try_from(m.rebalance_timeout.as_millis())
                        .unwrap_or(i32::MAX),
                    protocols: m
                        .protocols
                        .iter()
                        .map(|(name, metadata)| (name.clone(), metadata.to_vec()))
                        .collect(),
                    assignment: m.assignment.to_vec(),
                })
                .collect(),
        }
    }

    /// Whether the metadata must learn of this group's membership (see [`Shared::note`]).
    fn needs_store(&self) -> bool {
        (self.dirty && self.state == GroupState::Stable) || (self.members.is_empty() && self.stored)
    }

    fn rebalance_timeout(&self) -> Duration {
        self.members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(INITIAL_REBALANCE_DELAY)
    }

    /// Whether a member with these protocols may join (Kafka's `supportsProtocols`).
    fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        protocols.iter().any(|(name, _)| {
            self.members
                .values()
                .all(|m| m.protocols.iter().any(|(n, _)| n == name))
        })
    }

    /// Chooses the protocol every member supports with the most first-preference votes (ties go
    /// to the leader's preference order).
    fn select_protocol(&self) -> Option<String> {
        let mut ordered: Vec<&Member> = self.members.values().collect();
        ordered.sort_by_key(|m| m.seq);
        let candidates: Vec<&String> = ordered
            .first()?
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|name| {
                ordered
                    .iter()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == *name))
            })
            .collect();
        let mut best: Option<(&String, usize)> = None;
        for c in &candidates {
            let votes = ordered
                .iter()
                .filter(|m| {
                    m.protocols
                        .iter()
                        .map(|(n, _)| n)
                        .find(|n| candidates.contains(n))
                        == Some(*c)
                })
                .count();
            if best.is_none_or(|(_, v)| votes > v) {
                best = Some((c, votes));
            }
        }
        best.map(|(c, _)| c.clone())
    }

    fn prepare_rebalance(&mut self, now: Instant) {
        if self.state == GroupState::CompletingRebalance {
            for m in self.members.values_mut() {
                if let Some(w) = m.sync_waiter.take() {
                    let _ = w.send(SyncOutcome::error(ErrorCode::RebalanceInProgress));
                }
            }
        }
        self.pending_sync.clear();
        self.sync_deadline = None;
        if self.state == GroupState::Empty {
            self.initial_delay = true;
            let limit = now + self.rebalance_timeout().max(INITIAL_REBALANCE_DELAY);
            self.initial_delay_limit = Some(limit);
            self.join_deadline = Some((now + INITIAL_REBALANCE_DELAY).min(limit));
        } else {
            self.initial_delay = false;
            self.initial_delay_limit = None;
            self.join_deadline = Some(now + self.rebalance_timeout());
        }
        self.state = GroupState::PreparingRebalance;
    }

    /// Completes the join when every member has rejoined (outside an initial delay) or the
    /// deadline passed.
    fn try_complete_join(&mut self, now: Instant) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let all_joined =
            self.pending.is_empty() && self.members.values().all(|m| m.join_waiter.is_some());
        let expired = self.join_deadline.is_none_or(|d| now >= d);
        if (all_joined && !self.initial_delay) || expired {
            self.complete_join(now);
        }
    }

    fn complete_join(&mut self, now: Instant) {
        // Members that did not rejoin in time leave the group.
        self.members.retain(|_, m| m.join_waiter.is_some());
        self.join_deadline = None;
        self.initial_delay = false;
        self.initial_delay_limit = None;
        self.generation = self.generation.wrapping_add(1).max(1);
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol = None;
            self.protocol_type = None;
            self.leader = None;
            return;
        }
        let protocol = self.select_protocol();
        self.protocol = protocol.clone();
        let protocol = protocol.unwrap_or_default();
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self
                .members
                .iter()
                .min_by_key(|(_, m)| m.seq)
                .map(|(id, _)| id.clone());
        }
        let leader = self.leader.clone().unwrap_or_default();
        self.state = GroupState::CompletingRebalance;
        let mut ordered: Vec<(&String, &Member)> = self.members.iter().collect();
        ordered.sort_by_key(|(_, m)| m.seq);
        let all: Vec<JoinedMember> = ordered
            .iter()
            .map(|(id, m)| JoinedMember {
                member_id: (*id).clone(),
                group_instance_id: m.instance_id.clone(),
                metadata: m.metadata_for(&protocol),
            })
            .collect();
        let mut sync_timeout = Duration::ZERO;
        for (id, m) in self.members.iter_mut() {
            m.assignment = Bytes::new();
            m.heartbeat_deadline = now + m.session_timeout;
            sync_timeout = sync_timeout.max(m.rebalance_timeout);
            self.pending_sync.insert(id.clone());
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinOutcome {
                    error: ErrorCode::None,
                    generation_id: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: Some(protocol.clone()),
                    leader: leader.clone(),
                    member_id: id.clone(),
                    members: if *id == leader {
                        all.clone()
                    } else {
                        Vec::new()
                    },
                    skip_assignment: false,
                });
            }
        }
        self.sync_deadline = Some(now + sync_timeout);
    }

    fn remove_member(&mut self, id: &str, now: Instant) {
        let Some(mut m) = self.members.remove(id) else {
            return;
        };
        if let Some(instance) = &m.instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(id) {
                self.static_members.remove(instance);
            }
        }
        if let Some(w) = m.join_waiter.take() {
            let _ = w.send(JoinOutcome::error(ErrorCode::UnknownMemberId, id));
        }
        if let Some(w) = m.sync_waiter.take() {
            let _ = w.send(SyncOutcome::error(ErrorCode::UnknownMemberId));
        }
        self.pending_sync.remove(id);
        if self.leader.as_deref() == Some(id) {
            self.leader = None;
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now);
                self.try_complete_join(now);
            }
            GroupState::PreparingRebalance => self.try_complete_join(now),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    fn add_member(
        &mut self,
        id: String,
        p: &JoinParams,
        waiter: oneshot::Sender<JoinOutcome>,
        now: Instant,
    ) {
        if self.members.is_empty() {
            self.protocol_type = Some(p.protocol_type.clone());
        }
        let session_timeout = session_timeout(p.session_timeout_ms);
        let m = Member {
            instance_id: p.group_instance_id.clone(),
            client_id: p.client_id.clone(),
            client_host: p.client_host.clone(),
            session_timeout,
            rebalance_timeout: rebalance_timeout(p.rebalance_timeout_ms),
            protocols: p.protocols.clone(),
            assignment: Bytes::new(),
            heartbeat_deadline: now + session_timeout,
            join_waiter: Some(waiter),
            sync_waiter: None,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        if self.leader.is_none() {
            self.leader = Some(id.clone());
        }
        if let Some(instance) = &m.instance_id {
            self.static_members.insert(instance.clone(), id.clone());
        }
        self.members.insert(id, m);
        match self.state {
            GroupState::PreparingRebalance if self.initial_delay => {
                // A new member during the initial delay: wait a little longer for more.
                if let (Some(d), Some(limit)) = (self.join_deadline, self.initial_delay_limit) {
                    self.join_deadline = Some(d.max((now + INITIAL_REBALANCE_DELAY).min(limit)));
                }
            }
            GroupState::PreparingRebalance | GroupState::Dead => {}
            GroupState::Empty | GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now)
            }
        }
        self.try_complete_join(now);
    }

    fn update_member(
        &mut self,
        id: &str,
        p: &JoinParams,
        waiter: oneshot::Sender<JoinOutcome>,
        now: Instant,
    ) {
        if let Some(m) = self.members.get_mut(id) {
            m.protocols = p.protocols.clone();
            m.session_timeout = session_timeout(p.session_timeout_ms);
            m.rebalance_timeout = rebalance_timeout(p.rebalance_timeout_ms);
            m.heartbeat_deadline = now + m.session_timeout;
            m.client_id = p.client_id.clone();
            m.client_host = p.client_host.clone();
            // A join superseding one still waiting (a client retry) answers the old one.
            if let Some(old) = m.join_waiter.replace(waiter) {
                let _ = old.send(JoinOutcome::error(ErrorCode::RebalanceInProgress, id));
            }
        }
    }

    /// Whether a request naming `member_id` and static `instance_id` comes from a fenced
    /// process: the instance id is held by another member id now (KIP-345).
    fn fenced(&self, member_id: &str, instance_id: Option<&str>) -> bool {
        instance_id
            .and_then(|i| self.static_members.get(i))
            .is_some_and(|holder| holder != member_id)
    }

    /// A static member joining with an unknown member id and the known instance id of member
    /// `old` (a restarted process): `new` takes `old`'s place (its assignment, its leadership,
    /// its join order), and whatever `old` waits for is answered FENCED_INSTANCE_ID. In a
    /// Stable group with unchanged protocols there is no rebalance: the answer (Some) is the
    /// current generation. Otherwise the join waits on `waiter` like any other.
    fn replace_static_member(
        &mut self,
        old: &str,
        new: String,
        p: &JoinParams,
        waiter: oneshot::Sender<JoinOutcome>,
        now: Instant,
    ) -> Option<JoinOutcome> {
        let mut m = self.members.remove(old)?;
        if let Some(w) = m.join_waiter.take() {
            let _ = w.send(JoinOutcome::error(ErrorCode::FencedInstanceId, old));
        }
        if let Some(w) = m.sync_waiter.take() {
            let _ = w.send(SyncOutcome::error(ErrorCode::FencedInstanceId));
        }
        let unchanged = m.same_protocols(&p.protocols);
        m.protocols = p.protocols.clone();
        m.client_id = p.client_id.clone();
        m.client_host = p.client_host.clone();
        m.session_timeout = session_timeout(p.session_timeout_ms);
        m.rebalance_timeout = rebalance_timeout(p.rebalance_timeout_ms);
        m.heartbeat_deadline = now + m.session_timeout;
        if self.pending_sync.remove(old) {
            self.pending_sync.insert(new.clone());
        }
        if self.leader.as_deref() == Some(old) {
            self.leader = Some(new.clone());
        }
        if let Some(instance) = &p.group_instance_id {
            self.static_members.insert(instance.clone(), new.clone());
        }
        self.members.insert(new.clone(), m);
        tracing::debug!(%old, %new, "static member replaced");
        match self.state {
            GroupState::Stable if unchanged => {
                self.dirty = true;
                let mut answer = self.current_join(&new);
                // The group keeps its assignment: a leader must not compute another.
                answer.skip_assignment = answer.leader == new;
                Some(answer)
            }
            _ => {
                if let Some(m) = self.members.get_mut(&new) {
                    m.join_waiter = Some(waiter);
                }
                if self.state != GroupState::PreparingRebalance {
                    self.prepare_rebalance(now);
                }
                self.try_complete_join(now);
                None
            }
        }
    }

    /// The current generation's answer to a member's join (rejoin without changes).
    fn current_join(&self, id: &str) -> JoinOutcome {
        let protocol = self.protocol.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let members = if id == leader {
            let mut ordered: Vec<(&String, &Member)> = self.members.iter().collect();
            ordered.sort_by_key(|(_, m)| m.seq);
            ordered
                .into_iter()
                .map(|(mid, m)| JoinedMember {
                    member_id: mid.clone(),
                    group_instance_id: m.instance_id.clone(),
                    metadata: m.metadata_for(&protocol),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinOutcome {
            error: ErrorCode::None,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: Some(protocol),
            leader,
            member_id: id.to_owned(),
            members,
            skip_assignment: false,
        }
    }

    fn drop_waiters(&mut self, error: ErrorCode) {
        for (id, m) in self.members.iter_mut() {
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinOutcome::error(error, id));
            }
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncOutcome::error(error));
            }
        }
    }

    /// Expires sessions, pending member ids and pending syncs; completes a due join.
    fn tick(&mut self, now: Instant) {
        let before = self.pending.len();
        self.pending.retain(|_, deadline| *deadline > now);
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| {
                m.join_waiter.is_none() && m.sync_waiter.is_none() && m.heartbeat_deadline <= now
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            tracing::debug!(member = %id, "consumer group member session expired");
            self.remove_member(&id, now);
        }
        if self.sync_deadline.is_some_and(|d| d <= now) {
            self.sync_deadline = None;
            let late: Vec<String> = self.pending_sync.drain().collect();
            for id in late {
                tracing::debug!(member = %id, "consumer group member did not sync in time");
                self.remove_member(&id, now);
            }
        }
        if before != self.pending.len() || self.join_deadline.is_some_and(|d| d <= now) {
            self.try_complete_join(now);
        }
    }

    fn is_removable(&self) -> bool {
        self.state == GroupState::Empty && self.members.is_empty() && self.pending.is_empty()
    }

    /// The earliest instant [`Group::tick`] may change something (a session expiring, a member
    /// id handed out expiring, the sync or join deadline); `now` when the group can be removed;
    /// None when nothing is due until a request comes. Members waiting in JoinGroup or SyncGroup
    /// are not expired (as in [`Group::tick`]); their deadline counts again once their waiter is
    /// answered, which happens in a request or a tick, after which the group is rescheduled.
    fn next_deadline(&self, now: Instant) -> Option<Instant> {
        if self.is_removable() {
            return Some(now);
        }
        self.members
            .values()
            .filter(|m| m.join_waiter.is_none() && m.sync_waiter.is_none())
            .map(|m| m.heartbeat_deadline)
            .chain(self.pending.values().copied())
            .chain(self.sync_deadline)
            .chain(self.join_deadline)
            .min()
    }
}

fn session_timeout(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        .clamp(MIN_SESSION_TIMEOUT, MAX_SESSION_TIMEOUT)
}

fn rebalance_timeout(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        .clamp(Duration::from_millis(1), MAX_REBALANCE_TIMEOUT)
}

/// The metadata term the coordinator's state belongs to.
struct TermState {
    /// The term (0: none).
    term: u64,
    /// This node coordinates in `term` (false once it stopped leading in it).
    active: bool,
}

/// What every group's requests share (taken briefly, after the group's own lock, never the
/// other way round): the records waiting for the metadata and the groups' deadlines.
struct Shared {
    /// Membership records for the metadata, newest per group (None: the group became empty),
    /// with their sequence numbers, taken by the persisting task
    /// ([`Coordinator::take_records`]). At most one per group.
    outbox: HashMap<String, (u64, Option<GroupRecord>)>,
    /// The last record sequence number handed out.
    record_seq: u64,
    /// When each group next needs a tick.
    deadlines: Deadlines,
}

impl Shared {
    /// Queues group `id`'s record for the metadata when it needs one; true when queued.
    fn note(&mut self, id: &str, g: &mut Group) -> bool {
        if !g.needs_store() {
            return false;
        }
        g.dirty = false;
        let record = if g.members.is_empty() {
            g.stored = false;
            None
        } else {
            g.stored = true;
            Some(g.record())
        };
        self.record_seq += 1;
        g.record_seq = self.record_seq;
        self.outbox.insert(id.to_owned(), (self.record_seq, record));
        true
    }
}

/// One group's state, locked on its own.
type GroupRef = Arc<Mutex<Group>>;

/// Shards of the group map (a group id's hash picks one).
const SHARDS: usize = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One node's group coordinator: every group's membership state, while this node leads the
/// metadata group.
///
/// Locking: every request holds the term lock shared while it works (a term change takes it
/// exclusively to drop every group, so no request works on a group of a term being dropped);
/// a request for a group locks that group alone (found in one of [`SHARDS`] maps, whose lock is
/// held only to look up, insert or remove); [`Shared`] is locked after a group's lock, briefly.
/// Heartbeats of different groups therefore never wait for each other.
pub struct Coordinator {
    term: RwLock<TermState>,
    shards: Vec<Mutex<HashMap<String, GroupRef>>>,
    /// Groups in the shards (bounded by [`MAX_GROUPS`]).
    group_count: AtomicUsize,
    shared: Mutex<Shared>,
    ticker: AtomicBool,
    ids: AtomicU64,
    /// Signalled when records wait in the outbox.
    records_waiting: Arc<Notify>,
    /// The highest record sequence number written (or given up) by the persisting task.
    stored_seq: watch::Sender<u64>,
}

impl Default for Coordinator {
    fn default() -> Coordinator {
        Coordinator::new()
    }
}

impl Coordinator {
    /// A coordinator without groups.
    pub fn new() -> Coordinator {
        Coordinator {
            term: RwLock::new(TermState {
                term: 0,
                active: false,
            }),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            group_count: AtomicUsize::new(0),
            shared: Mutex::new(Shared {
                outbox: HashMap::new(),
                record_seq: 0,
                deadlines: Deadlines::new(),
            }),
            ticker: AtomicBool::new(false),
            ids: AtomicU64::new(0),
            records_waiting: Arc::new(Notify::new()),
            stored_seq: watch::Sender::new(0),
        }
    }

    fn shard(&self, id: &str) -> &Mutex<HashMap<String, GroupRef>> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut h);
        let i = (h.finish() % SHARDS as u64) as usize;
        self.shards
            .get(i)
            .unwrap_or_else(|| unreachable!("a hash mod SHARDS is a shard"))
    }

    /// Group `id`'s state, created when `create` (bounded by [`MAX_GROUPS`]: the error then)
    /// and it has none.
    fn find(&self, id: &str, create: bool) -> Result<Option<GroupRef>, ErrorCode> {
        let mut shard = lock(self.shard(id));
        if let Some(g) = shard.get(id) {
            return Ok(Some(g.clone()));
        }
        if !create {
            return Ok(None);
        }
        if self
            .group_count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_GROUPS).then_some(n + 1)
            })
            .is_err()
        {
            // Kafka has no such limit, so no error says it; COORDINATOR_NOT_AVAILABLE is one
            // every client retries (GROUP_MAX_SIZE_REACHED is fatal to Java's).
            tracing::warn!(group = %id, "too many consumer groups; join refused");
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        let g = Arc::new(Mutex::new(Group::new()));
        shard.insert(id.to_owned(), g.clone());
        Ok(Some(g))
    }

    /// Runs `f` on group `id` under its lock; None when the group has no state here.
    fn with_group<R>(&self, id: &str, f: impl FnOnce(&GroupRef, &mut Group) -> R) -> Option<R> {
        loop {
            let g = self.find(id, false).ok().flatten()?;
            let mut guard = lock(&g);
            if guard.removed {
                // Removed between the lookup and the lock: look again.
                continue;
            }
            return Some(f(&g, &mut guard));
        }
    }

    /// After a request or a tick changed group `id` (locked by the caller): queues its record
    /// if it needs one and schedules its next deadline.
    fn settle(&self, id: &str, g: &mut Group, now: Instant) {
        let mut shared = lock(&self.shared);
        if shared.note(id, g) {
            self.records_waiting.notify_one();
        }
        match g.next_deadline(now) {
            Some(at) => shared.deadlines.schedule(id, at),
            None => shared.deadlines.cancel(id),
        }
    }

    /// Takes group `id` (`arc`, locked by the caller as `g`) out of the map.
    fn remove(&self, id: &str, arc: &GroupRef, g: &mut Group) {
        // The deadline first: a group created under the same id after the map removal below
        // schedules its own.
        lock(&self.shared).deadlines.cancel(id);
        let mut shard = lock(self.shard(id));
        if shard.get(id).is_some_and(|cur| Arc::ptr_eq(cur, arc)) {
            shard.remove(id);
            self.group_count.fetch_sub(1, Ordering::AcqRel);
        }
        g.removed = true;
    }

    /// Drops every group (their waiting requests get NOT_COORDINATOR) and every queued record;
    /// the caller holds the term lock exclusively.
    fn unload(&self, _term: &mut TermState) {
        let mut dropped = 0usize;
        for shard in &self.shards {
            let groups: Vec<GroupRef> = lock(shard).drain().map(|(_, g)| g).collect();
            for g in groups {
                let mut g = lock(&g);
                g.drop_waiters(ErrorCode::NotCoordinator);
                g.removed = true;
                dropped += 1;
            }
        }
        self.group_count.store(0, Ordering::Release);
        if dropped > 0 {
            tracing::info!(
                groups = dropped,
                "no longer the group coordinator of this term; dropping group membership"
            );
        }
        let mut shared = lock(&self.shared);
        shared.deadlines.clear();
        // Records of a term this node no longer coordinates in are not written: the next
        // coordinator loads what was stored.
        shared.outbox.clear();
    }

    /// Takes over as coordinator in metadata term `term` (once per term; later calls and older
    /// terms do nothing): the previous state is dropped and the groups stored in the metadata
    /// (`records`, read only when loading) are loaded as Stable groups of their stored
    /// generation, every session starting at `now`. Call it before the term's first request, once
    /// the metadata is applied through the term's start (the metadata leader is ready).
    pub fn load(
        &self,
        term: u64,
        records: impl FnOnce() -> Vec<(String, GroupRecord)>,
        now: Instant,
    ) {
        let mut t = self.term.write().unwrap_or_else(|e| e.into_inner());
        if term < t.term || (term == t.term && t.active) {
            return;
        }
        self.unload(&mut t);
        t.term = term;
        t.active = true;
        let mut loaded = 0usize;
        for (id, r) in records() {
            if !r.members.is_empty() {
                let group = Group::from_record(r, now);
                if let Some(at) = group.next_deadline(now) {
                    lock(&self.shared).deadlines.schedule(&id, at);
                }
                if lock(self.shard(&id))
                    .insert(id, Arc::new(Mutex::new(group)))
                    .is_none()
                {
                    loaded += 1;
                }
            }
        }
        self.group_count.store(loaded, Ordering::Release);
        if loaded > 0 {
            tracing::info!(
                term,
                groups = loaded,
                "group coordinator loaded the stored groups"
            );
        }
    }

    /// The signal that records wait for [`Coordinator::take_records`].
    pub fn records_waiting(&self) -> Arc<Notify> {
        self.records_waiting.clone()
    }

    /// The membership records waiting for the metadata, oldest first, with the term they
    /// belong to (write them with [`crate::node::Node::propose_metadata_in_term`] in that term;
    /// at most one per group) and the sequence number to pass to
    /// [`Coordinator::records_stored`] once written. None when there are none.
    pub fn take_records(&self) -> Option<(u64, u64, Vec<StoredRecord>)> {
        let t = self.term.read().unwrap_or_else(|e| e.into_inner());
        let mut shared = lock(&self.shared);
        if shared.outbox.is_empty() || !t.active {
            return None;
        }
        let mut records: Vec<(u64, StoredRecord)> = shared
            .outbox
            .drain()
            .map(|(group, (seq, record))| (seq, (group, record)))
            .collect();
        records.sort_by_key(|(seq, _)| *seq);
        let last = records.last().map_or(0, |(seq, _)| *seq);
        Some((t.term, last, records.into_iter().map(|(_, r)| r).collect()))
    }

    /// The records taken up to sequence number `seq` are written (or given up on): requests
    /// waiting for them ([`Coordinator::unstored`]) go on.
    pub fn records_stored(&self, seq: u64) {
        self.stored_seq.send_if_modified(|s| {
            let advance = seq > *s;
            *s = (*s).max(seq);
            advance
        });
    }

    /// When group `group_id`'s last record (while coordinating in `term`) is not written yet:
    /// its sequence number and a receiver of the written sequence numbers, to wait until it is
    /// (Kafka answers SyncGroup once the group's record is written).
    pub fn unstored(&self, term: u64, group_id: &str) -> Option<(u64, watch::Receiver<u64>)> {
        let _term = self.state(term)?;
        let seq = self.with_group(group_id, |_, g| g.record_seq)?;
        (seq > *self.stored_seq.borrow()).then(|| (seq, self.stored_seq.subscribe()))
    }

    /// True exactly once: the caller starts the tick task.
    pub fn claim_ticker(&self) -> bool {
        !self.ticker.swap(true, Ordering::AcqRel)
    }

    /// The state for metadata term `term`; state of an older term is dropped first (its waiting
    /// requests answered NOT_COORDINATOR). None for a request carrying a term older than the
    /// state's (it was read before this node led again): such a request is answered
    /// NOT_COORDINATOR and leaves the newer state alone.
    ///
    /// The guard is the term lock held shared: hold it while working on a group.
    fn state(&self, term: u64) -> Option<RwLockReadGuard<'_, TermState>> {
        loop {
            let t = self.term.read().unwrap_or_else(|e| e.into_inner());
            if term < t.term || (term == t.term && !t.active && term != 0) {
                return None;
            }
            if t.term == term {
                return Some(t);
            }
            drop(t);
            let mut t = self.term.write().unwrap_or_else(|e| e.into_inner());
            // Another request may have moved to this term (or a later one) meanwhile.
            if t.term < term {
                self.unload(&mut t);
                t.term = term;
                t.active = true;
            }
        }
    }

    fn new_member_id(&self, client_id: &str) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let a = splitmix(t ^ n.rotate_left(32));
        let b = splitmix(a ^ n);
        format!(
            "{client_id}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }

    /// Handles a JoinGroup while leading in metadata term `term`.
    pub fn join(&self, term: u64, p: JoinParams, now: Instant) -> Pending<JoinOutcome> {
        let group_id = p.group_id.clone();
        let Some(_term) = self.state(term) else {
            return Pending::Now(JoinOutcome::error(ErrorCode::NotCoordinator, &p.member_id));
        };
        if let Err(e) = Self::join_checks(&p) {
            return Pending::Now(JoinOutcome::error(e, &p.member_id));
        }
        loop {
            // Only a new member (no member id) creates a group.
            let arc = match self.find(&group_id, p.member_id.is_empty()) {
                Ok(Some(arc)) => arc,
                Ok(None) => {
                    return Pending::Now(JoinOutcome::error(
                        ErrorCode::UnknownMemberId,
                        &p.member_id,
                    ))
                }
                Err(e) => return Pending::Now(JoinOutcome::error(e, &p.member_id)),
            };
            let mut group = lock(&arc);
            if group.removed {
                continue;
            }
            let answer = self.join_in(&mut group, p, now);
            self.settle(&group_id, &mut group, now);
            return answer;
        }
    }

    /// A JoinGroup's checks that need no group.
    fn join_checks(p: &JoinParams) -> Result<(), ErrorCode> {
        if p.group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        let session = Duration::from_millis(u64::try_from(p.session_timeout_ms).unwrap_or(0));
        if !(MIN_SESSION_TIMEOUT..=MAX_SESSION_TIMEOUT).contains(&session) {
            return Err(ErrorCode::InvalidSessionTimeout);
        }
        if p.protocol_type.is_empty() || p.protocols.is_empty() {
            return Err(ErrorCode::InconsistentGroupProtocol);
        }
        Ok(())
    }

    /// A JoinGroup on `group` (locked), after [`Coordinator::join_checks`].
    fn join_in(&self, group: &mut Group, p: JoinParams, now: Instant) -> Pending<JoinOutcome> {
        let err = |e: ErrorCode| Pending::Now(JoinOutcome::error(e, &p.member_id));
        if group.state == GroupState::Dead {
            return err(ErrorCode::CoordinatorNotAvailable);
        }
        if !group.supports(&p.protocol_type, &p.protocols) {
            return err(ErrorCode::InconsistentGroupProtocol);
        }
        let wait = rebalance_timeout(p.rebalance_timeout_ms) + Duration::from_secs(5);
        if let Some(instance) = p.group_instance_id.as_deref() {
            let holder = group.static_members.get(instance).cloned();
            match holder {
                Some(old) if p.member_id.is_empty() => {
                    let new = self.new_member_id(&p.client_id);
                    let (tx, rx) = oneshot::channel();
                    return match group.replace_static_member(&old, new, &p, tx, now) {
                        Some(answer) => Pending::Now(answer),
                        None => Pending::Wait(rx, wait),
                    };
                }
                Some(old) if old != p.member_id => return err(ErrorCode::FencedInstanceId),
                None if p.member_id.is_empty() => {
                    // A new static member needs no MEMBER_ID_REQUIRED round trip: its instance
                    // id identifies it (as in Kafka).
                    if group.members.len() + group.pending.len() >= MAX_MEMBERS {
                        return err(ErrorCode::GroupMaxSizeReached);
                    }
                    let id = self.new_member_id(&p.client_id);
                    let (tx, rx) = oneshot::channel();
                    group.add_member(id, &p, tx, now);
                    return Pending::Wait(rx, wait);
                }
                _ => {}
            }
        }
        if p.member_id.is_empty() {
            if group.members.len() + group.pending.len() >= MAX_MEMBERS {
                return err(ErrorCode::GroupMaxSizeReached);
            }
            let id = self.new_member_id(&p.client_id);
            if p.require_known_member_id {
                group
                    .pending
                    .insert(id.clone(), now + session_timeout(p.session_timeout_ms));
                return Pending::Now(JoinOutcome::error(ErrorCode::MemberIdRequired, &id));
            }
            let (tx, rx) = oneshot::channel();
            group.add_member(id, &p, tx, now);
            return Pending::Wait(rx, wait);
        }
        let id = p.member_id.clone();
        if group.pending.remove(&id).is_some() {
            let (tx, rx) = oneshot::channel();
            group.add_member(id, &p, tx, now);
            return Pending::Wait(rx, wait);
        }
        let Some(member) = group.members.get(&id) else {
            return err(ErrorCode::UnknownMemberId);
        };
        let unchanged = member.same_protocols(&p.protocols);
        let (tx, rx) = oneshot::channel();
        match group.state {
            GroupState::PreparingRebalance => {
                group.update_member(&id, &p, tx, now);
                group.try_complete_join(now);
            }
            GroupState::CompletingRebalance if unchanged => {
                return Pending::Now(group.current_join(&id));
            }
            GroupState::Stable if unchanged && group.leader.as_deref() != Some(id.as_str()) => {
                if let Some(m) = group.members.get_mut(&id) {
                    m.heartbeat_deadline = now + m.session_timeout;
                }
                return Pending::Now(group.current_join(&id));
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                group.update_member(&id, &p, tx, now);
                group.prepare_rebalance(now);
                group.try_complete_join(now);
            }
            GroupState::Empty | GroupState::Dead => return err(ErrorCode::UnknownMemberId),
        }
        Pending::Wait(rx, wait)
    }

    /// Handles a SyncGroup while leading in metadata term `term`.
    pub fn sync(&self, term: u64, p: SyncParams, now: Instant) -> Pending<SyncOutcome> {
        let group_id = p.group_id.clone();
        let Some(_term) = self.state(term) else {
            return Pending::Now(SyncOutcome::error(ErrorCode::NotCoordinator));
        };
        self.with_group(&group_id, |_, group| {
            let answer = Self::sync_in(group, p, now);
            self.settle(&group_id, group, now);
            answer
        })
        .unwrap_or_else(|| Pending::Now(SyncOutcome::error(ErrorCode::UnknownMemberId)))
    }

    /// A SyncGroup on `group` (locked).
    fn sync_in(group: &mut Group, p: SyncParams, now: Instant) -> Pending<SyncOutcome> {
        let err = |e: ErrorCode| Pending::Now(SyncOutcome::error(e));
        if group.fenced(&p.member_id, p.group_instance_id.as_deref()) {
            return err(ErrorCode::FencedInstanceId);
        }
        if !group.members.contains_key(&p.member_id) {
            return err(ErrorCode::UnknownMemberId);
        }
        if p.generation_id != group.generation {
            return err(ErrorCode::IllegalGeneration);
        }
        if p.protocol_type
            .as_ref()
            .is_some_and(|t| Some(t) != group.protocol_type.as_ref())
            || p.protocol_name
                .as_ref()
                .is_some_and(|n| Some(n) != group.protocol.as_ref())
        {
            return err(ErrorCode::InconsistentGroupProtocol);
        }
        match group.state {
            GroupState::Empty => err(ErrorCode::UnknownMemberId),
            GroupState::Dead => err(ErrorCode::CoordinatorNotAvailable),
            GroupState::PreparingRebalance => err(ErrorCode::RebalanceInProgress),
            GroupState::Stable => {
                group.pending_sync.remove(&p.member_id);
                let m = group.members.get_mut(&p.member_id).expect("checked above");
                m.heartbeat_deadline = now + m.session_timeout;
                Pending::Now(SyncOutcome {
                    error: ErrorCode::None,
                    protocol_type: group.protocol_type.clone(),
                    protocol_name: group.protocol.clone(),
                    assignment: m.assignment.clone(),
                })
            }
            GroupState::CompletingRebalance => {
                group.pending_sync.remove(&p.member_id);
                let (tx, rx) = oneshot::channel();
                let wait = {
                    let m = group.members.get_mut(&p.member_id).expect("checked above");
                    m.heartbeat_deadline = now + m.session_timeout;
                    if let Some(old) = m.sync_waiter.replace(tx) {
                        let _ = old.send(SyncOutcome::error(ErrorCode::RebalanceInProgress));
                    }
                    m.rebalance_timeout + Duration::from_secs(5)
                };
                if group.leader.as_deref() == Some(p.member_id.as_str()) {
                    let mut assigned: HashMap<String, Bytes> = p.assignments.into_iter().collect();
                    group.state = GroupState::Stable;
                    group.dirty = true;
                    for m in group.members.iter_mut() {
                        let (id, m) = m;
                        m.assignment = assigned.remove(id).unwrap_or_default();
                        // Delivering the assignment renews every session (as Kafka does): a
                        // follower that waited longer than its session timeout for a slow
                        // leader is not expired right after.
                        m.heartbeat_deadline = now + m.session_timeout;
                        if let Some(w) = m.sync_waiter.take() {
                            let _ = w.send(SyncOutcome {
                                error: ErrorCode::None,
                                protocol_type: group.protocol_type.clone(),
                                protocol_name: group.protocol.clone(),
                                assignment: m.assignment.clone(),
                            });
                        }
                    }
                }
                Pending::Wait(rx, wait)
            }
        }
    }

    /// Handles a Heartbeat while leading in metadata term `term`.
    pub fn heartbeat(
        &self,
        term: u64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        instance_id: Option<&str>,
        now: Instant,
    ) -> ErrorCode {
        let Some(_term) = self.state(term) else {
            return ErrorCode::NotCoordinator;
        };
        self.with_group(group_id, |_, group| {
            Self::heartbeat_in(group, generation_id, member_id, instance_id, now)
        })
        .unwrap_or(ErrorCode::UnknownMemberId)
    }

    /// A Heartbeat on `group` (locked).
    fn heartbeat_in(
        group: &mut Group,
        generation_id: i32,
        member_id: &str,
        instance_id: Option<&str>,
        now: Instant,
    ) -> ErrorCode {
        if group.fenced(member_id, instance_id) {
            return ErrorCode::FencedInstanceId;
        }
        let state = group.state;
        let generation = group.generation;
        let Some(m) = group.members.get_mut(member_id) else {
            return ErrorCode::UnknownMemberId;
        };
        if generation_id != generation {
            return ErrorCode::IllegalGeneration;
        }
        match state {
            GroupState::Empty => ErrorCode::UnknownMemberId,
            GroupState::Dead => ErrorCode::CoordinatorNotAvailable,
            GroupState::CompletingRebalance | GroupState::Stable => {
                m.heartbeat_deadline = now + m.session_timeout;
                ErrorCode::None
            }
            GroupState::PreparingRebalance => {
                m.heartbeat_deadline = now + m.session_timeout;
                ErrorCode::RebalanceInProgress
            }
        }
    }

    /// Handles a LeaveGroup of `members` (member id, static instance id) while leading in
    /// metadata term `term`: one error per member. A member named by instance id (v3+, e.g.
    /// `Admin.removeMembersFromConsumerGroup`, member id empty) is whichever member holds it;
    /// FENCED_INSTANCE_ID when a member id is given too and another member holds it.
    pub fn leave(
        &self,
        term: u64,
        group_id: &str,
        members: &[(String, Option<String>)],
        now: Instant,
    ) -> Vec<ErrorCode> {
        let Some(_term) = self.state(term) else {
            return vec![ErrorCode::NotCoordinator; members.len()];
        };
        self.with_group(group_id, |arc, group| {
            let errors = Self::leave_in(group, members, now);
            self.settle(group_id, group, now);
            if group.is_removable() {
                self.remove(group_id, arc, group);
            }
            errors
        })
        .unwrap_or_else(|| vec![ErrorCode::UnknownMemberId; members.len()])
    }

    /// A LeaveGroup on `group` (locked).
    fn leave_in(
        group: &mut Group,
        members: &[(String, Option<String>)],
        now: Instant,
    ) -> Vec<ErrorCode> {
        members
            .iter()
            .map(|(id, instance)| {
                if let Some(instance) = instance {
                    return match group.static_members.get(instance).cloned() {
                        None => ErrorCode::UnknownMemberId,
                        Some(holder) if !id.is_empty() && holder != *id => {
                            ErrorCode::FencedInstanceId
                        }
                        Some(holder) => {
                            group.remove_member(&holder, now);
                            ErrorCode::None
                        }
                    };
                }
                if group.members.contains_key(id) {
                    group.remove_member(id, now);
                    ErrorCode::None
                } else if group.pending.remove(id).is_some() {
                    group.try_complete_join(now);
                    ErrorCode::None
                } else {
                    ErrorCode::UnknownMemberId
                }
            })
            .collect()
    }

    /// Checks an OffsetCommit against the group's membership (Kafka's `validateOffsetCommit`):
    /// a commit with generation -1 and no member id is a standalone commit, allowed unless the
    /// group has members; otherwise the member must belong to the current generation.
    pub fn validate_commit(
        &self,
        term: u64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        instance_id: Option<&str>,
        now: Instant,
    ) -> ErrorCode {
        let Some(_term) = self.state(term) else {
            return ErrorCode::NotCoordinator;
        };
        self.with_group(group_id, |_, group| {
            Self::commit_in(group, generation_id, member_id, instance_id, now)
        })
        .unwrap_or({
            // No membership: only a standalone commit (no generation, no member) is valid; a
            // member id names a member this coordinator does not know.
            if generation_id >= 0 {
                ErrorCode::IllegalGeneration
            } else if !member_id.is_empty() {
                ErrorCode::UnknownMemberId
            } else {
                ErrorCode::None
            }
        })
    }

    /// An OffsetCommit's membership check on `group` (locked).
    fn commit_in(
        group: &mut Group,
        generation_id: i32,
        member_id: &str,
        instance_id: Option<&str>,
        now: Instant,
    ) -> ErrorCode {
        if group.fenced(member_id, instance_id) {
            return ErrorCode::FencedInstanceId;
        }
        if generation_id >= 0 || !member_id.is_empty() || instance_id.is_some() {
            let state = group.state;
            let generation = group.generation;
            let Some(m) = group.members.get_mut(member_id) else {
                return ErrorCode::UnknownMemberId;
            };
            if generation_id != generation {
                return ErrorCode::IllegalGeneration;
            }
            if state == GroupState::CompletingRebalance {
                return ErrorCode::RebalanceInProgress;
            }
            m.heartbeat_deadline = now + m.session_timeout;
            ErrorCode::None
        } else if group.state != GroupState::Empty {
            ErrorCode::UnknownMemberId
        } else {
            ErrorCode::None
        }
    }

    /// Groups with members (or member ids handed out), while leading in metadata term `term`.
    pub fn list(&self, term: u64) -> Result<Vec<GroupListing>, ErrorCode> {
        let _term = self.state(term).ok_or(ErrorCode::NotCoordinator)?;
        let all: Vec<(String, GroupRef)> = self
            .shards
            .iter()
            .flat_map(|shard| {
                lock(shard)
                    .iter()
                    .map(|(id, g)| (id.clone(), g.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut out: Vec<GroupListing> = all
            .into_iter()
            .filter_map(|(id, g)| {
                let g = lock(&g);
                (!g.removed).then(|| GroupListing {
                    group_id: id,
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    state: g.state,
                })
            })
            .collect();
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }

    /// Removes group `group_id`'s membership state (DeleteGroups), while leading in metadata
    /// term `term`: `Ok(true)` when there was state and it had no members, `Ok(false)` when
    /// there was none, NON_EMPTY_GROUP while members remain (nothing removed then).
    pub fn remove_empty(&self, term: u64, group_id: &str) -> Result<bool, ErrorCode> {
        let _term = self.state(term).ok_or(ErrorCode::NotCoordinator)?;
        self.with_group(group_id, |arc, g| {
            if !g.members.is_empty() || !g.pending.is_empty() {
                return Err(ErrorCode::NonEmptyGroup);
            }
            self.remove(group_id, arc, g);
            Ok(true)
        })
        .unwrap_or(Ok(false))
    }

    /// For a group with members (while leading in `term`): its protocol type and the topics
    /// its members subscribe to (read from their `consumer` protocol subscriptions; empty for
    /// other protocol types). None when the group has no members here.
    pub fn subscriptions(&self, term: u64, group_id: &str) -> Option<(String, HashSet<String>)> {
        let _term = self.state(term)?;
        self.with_group(group_id, |_, g| {
            if g.members.is_empty() {
                return None;
            }
            let protocol_type = g.protocol_type.clone().unwrap_or_default();
            let mut topics = HashSet::new();
            if protocol_type == "consumer" {
                let protocol = g.protocol.clone().unwrap_or_default();
                for m in g.members.values() {
                    topics.extend(subscribed_topics(&m.metadata_for(&protocol)));
                }
            }
            Some((protocol_type, topics))
        })
        .flatten()
    }

    /// A group's state and members, while leading in metadata term `term`; None when the group
    /// has no membership state here.
    pub fn describe(&self, term: u64, group_id: &str) -> Option<GroupDescription> {
        let _term = self.state(term)?;
        self.with_group(group_id, |_, g| {
            let g = &*g;
            let stable = g.state == GroupState::Stable;
            let protocol = g.protocol.clone().unwrap_or_default();
            let mut ordered: Vec<(&String, &Member)> = g.members.iter().collect();
            ordered.sort_by_key(|(_, m)| m.seq);
            Some(GroupDescription {
                state: g.state,
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                protocol: if stable {
                    protocol.clone()
                } else {
                    String::new()
                },
                members: ordered
                    .into_iter()
                    .map(|(id, m)| MemberDescription {
                        member_id: id.clone(),
                        group_instance_id: m.instance_id.clone(),
                        client_id: m.client_id.clone(),
                        client_host: m.client_host.clone(),
                        metadata: if stable {
                            m.metadata_for(&protocol)
                        } else {
                            Bytes::new()
                        },
                        assignment: if stable {
                            m.assignment.clone()
                        } else {
                            Bytes::new()
                        },
                    })
                    .collect(),
            })
        })
        .flatten()
    }

    /// Enforces deadlines. `term` is the metadata term this node leads in, None when it does not
    /// lead (then every group is dropped and waiting requests get NOT_COORDINATOR).
    pub fn tick(&self, term: Option<u64>, now: Instant) {
        let Some(term) = term else {
            let mut t = self.term.write().unwrap_or_else(|e| e.into_inner());
            if t.active || self.group_count.load(Ordering::Acquire) > 0 {
                self.unload(&mut t);
                t.active = false;
            }
            return;
        };
        let Some(_term) = self.state(term) else {
            return;
        };
        // Only the groups with a deadline due: a heartbeat moves no entry (a session's entry
        // fires, finds the session renewed, and is scheduled again at the renewed deadline).
        let due = lock(&self.shared).deadlines.take_due(now);
        for id in due {
            self.with_group(&id, |arc, g| {
                g.tick(now);
                self.settle(&id, g, now);
                if g.is_removable() {
                    self.remove(&id, arc, g);
                }
            });
        }
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The topics of a `consumer` protocol subscription (Kafka's ConsumerProtocolSubscription,
/// any version: an INT16 version, then an array of STRING topics). Bounds-checked; what does
/// not parse yields the topics read so far.
pub fn subscribed_topics(metadata: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let Some(count) = metadata.get(2..6) else {
        return out;
    };
    let count = i32::from_be_bytes([count[0], count[1], count[2], count[3]]);
    let mut at = 6usize;
    for _ in 0..count.max(0) {
        let Some(len) = metadata.get(at..at + 2) else {
            break;
        };
        let len = i16::from_be_bytes([len[0], len[1]]);
        let Ok(len) = usize::try_from(len) else {
            break;
        };
        let Some(name) = metadata.get(at + 2..at + 2 + len) else {
            break;
        };
        out.push(String::from_utf8_lossy(name).into_owned());
        at += 2 + len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(member: &str, protocols: &[(&str, &[u8])]) -> JoinParams {
        JoinParams {
            group_id: "g".into(),
            member_id: member.into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 5_000,
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|(n, m)| (n.to_string(), Bytes::copy_from_slice(m)))
                .collect(),
            require_known_member_id: true,
        }
    }

    fn now_outcome<T>(p: Pending<T>) -> T {
        match p {
            Pending::Now(o) => o,
            Pending::Wait(..) => panic!("expected an immediate answer"),
        }
    }

    fn waiting<T>(p: Pending<T>) -> oneshot::Receiver<T> {
        match p {
            Pending::Wait(rx, _) => rx,
            Pending::Now(_) => panic!("expected to wait"),
        }
    }

    /// Joins a new member (MEMBER_ID_REQUIRED round trip); returns its id and join receiver.
    fn join_new(
        c: &Coordinator,
        protocols: &[(&str, &[u8])],
        now: Instant,
    ) -> (String, oneshot::Receiver<JoinOutcome>) {
        let first = now_outcome(c.join(1, params("", protocols), now));
        assert_eq!(first.error, ErrorCode::MemberIdRequired);
        let id = first.member_id;
        let rx = waiting(c.join(1, params(&id, protocols), now));
        (id, rx)
    }

    #[test]
    fn two_members_join_sync_and_rebalance_on_leave() {
        let c = Coordinator::new();
        let t0 = Instant::now();
        let (a, mut ja) = join_new(&c, &[("range", b"a-range"), ("rr", b"a-rr")], t0);
        let (b, mut jb) = join_new(&c, &[("rr", b"b-rr"), ("range", b"b-range")], t0);
        // The initial delay holds the join.
        c.tick(Some(1), t0 + Duration::from_millis(50));
        assert!(ja.try_recv().is_err());
        c.tick(Some(1), t0 + INITIAL_REBALANCE_DELAY + TICK);
        let oa = ja.try_recv().unwrap();
        let ob = jb.try_recv().unwrap();
        assert_eq!(oa.error, ErrorCode::None);
        assert_eq!(oa.generation_id, 1);
        assert_eq!(oa.leader, a);
        assert_eq!(oa.members.len(), 2);
        // One vote each: the tie goes to the leader's first choice.
        assert_eq!(oa.protocol_name.as_deref(), Some("range"));
        assert_eq!(oa.members[1].metadata, Bytes::from_static(b"b-range"));
        assert!(ob.members.is_empty());
        assert_eq!(c.heartbeat(1, "g", 1, &b, None, t0), ErrorCode::None);
        assert_eq!(
            c.heartbeat(1, "g", 0, &b, None, t0),
            ErrorCode::IllegalGeneration
        );
        assert_eq!(
            c.heartbeat(1, "g", 1, "nobody", None, t0),
            ErrorCode::UnknownMemberId
        );

        // The follower's sync waits for the leader's.
        let sync = |id: &str, assignments: Vec<(String, Bytes)>| SyncParams {
            group_id: "g".into(),
            generation_id: 1,
            member_id: id.into(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments,
        };
        let mut sb = waiting(c.sync(1, sync(&b, vec![]), t0));
        assert!(sb.try_recv().is_err());
        let mut sa = waiting(c.sync(
            1,
            sync(
                &a,
                vec![
                    (a.clone(), Bytes::from_static(b"to-a")),
                    (b.clone(), Bytes::from_static(b"to-b")),
                ],
            ),
            t0,
        ));
        assert_eq!(
            sa.try_recv().unwrap().assignment,
            Bytes::from_static(b"to-a")
        );
        assert_eq!(
            sb.try_recv().unwrap().assignment,
            Bytes::from_static(b"to-b")
        );
        assert_eq!(c.describe(1, "g").unwrap().state, GroupState::Stable);
        assert_eq!(c.validate_commit(1, "g", 1, &a, None, t0), ErrorCode::None);
        assert_eq!(
            c.validate_commit(1, "g", -1, "", None, t0),
            ErrorCode::UnknownMemberId
        );

        // b leaves: a learns of the rebalance from its heartbeat and rejoins alone.
        assert_eq!(
            c.leave(1, "g", &[(b.clone(), None)], t0),
            vec![ErrorCode::None]
        );
        assert_eq!(
            c.heartbeat(1, "g", 1, &a, None, t0),
            ErrorCode::RebalanceInProgress
        );
        let mut ja = waiting(c.join(1, params(&a, &[("range", b"a-range")]), t0));
        let oa = ja.try_recv().unwrap();
        assert_eq!(oa.generation_id, 2);
        assert_eq!(oa.members.len(), 1);
    }

    #[test]
    fn sessions_expire_and_a_new_term_drops_state() {
        let c = Coordinator::new();
        let t0 = Instant::now();
        let (a, _ja) = join_new(&c, &[("range", b"")], t0);
        let (_b, _jb) = join_new(&c, &[("range", b"")], t0);
        c.tick(Some(1), t0 + Duration::from_secs(1));
        assert_eq!(
            c.describe(1, "g").unwrap().state,
            GroupState::CompletingRebalance
        );
        // Neither syncs: after the rebalance timeout both are removed and the group empties.
        c.tick(Some(1), t0 + Duration::from_secs(7));
        assert!(c.describe(1, "g").is_none());
        assert_eq!(
            c.heartbeat(1, "g", 1, &a, None, t0),
            ErrorCode::UnknownMemberId
        );

        // A member waiting in a join is answered NOT_COORDINATOR when the term ends.
        let (_c1, mut j) = join_new(&c, &[("range", b"")], t0);
        c.tick(None, t0);
        assert_eq!(j.try_recv().unwrap().error, ErrorCode::NotCoordinator);
        assert!(c.list(2).unwrap().is_empty());
    }

    /// The deadline heap: a heartbeat moves no entry, so the session's first entry fires at the
    /// old deadline, finds the session renewed, and the member expires only at the renewed
    /// deadline; the group is removed once empty.
    #[test]
    fn renewed_sessions_expire_at_the_renewed_deadline() {
        let c = Coordinator::new();
        let t0 = Instant::now();
        let mut p = params("", &[("range", b"")]);
        p.require_known_member_id = false;
        let mut rx = waiting(c.join(1, p, t0));
        c.tick(Some(1), t0 + INITIAL_REBALANCE_DELAY);
        let o = rx.try_recv().expect("joined after the initial delay");
        let (id, generation) = (o.member_id, o.generation_id);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let leader_sync = sync_params(&id, vec![(id.clone(), Bytes::from_static(b"a"))]);
        let mut synced = waiting(c.sync(1, leader_sync, at(300)));
        assert_eq!(synced.try_recv().unwrap().error, ErrorCode::None);
        // Session 10 s from the sync at 0.3 s; renewed at 8 s to 18 s.
        assert_eq!(
            c.heartbeat(1, "g", generation, &id, None, at(8_000)),
            ErrorCode::None
        );
        c.tick(Some(1), at(10_400));
        assert_eq!(c.describe(1, "g").unwrap().members.len(), 1);
        c.tick(Some(1), at(17_900));
        assert_eq!(c.describe(1, "g").unwrap().members.len(), 1);
        c.tick(Some(1), at(18_000));
        assert!(c.describe(1, "g").is_none(), "expired and removed");
        assert_eq!(
            c.heartbeat(1, "g", generation, &id, None, at(18_000)),
            ErrorCode::UnknownMemberId
        );
    }

    #[test]
    fn old_clients_join_without_member_id_required_and_rejoin_unchanged() {
        let c = Coordinator::new();
        let t0 = Instant::now();
        let mut p = params("", &[("range", b"m")]);
        p.require_known_member_id = false;
        let mut j = waiting(c.join(1, p.clone(), t0));
        c.tick(Some(1), t0 + INITIAL_REBALANCE_DELAY);
        let o = j.try_recv().unwrap();
        assert_eq!((o.error, o.generation_id), (ErrorCode::None, 1));
        let id = o.member_id.clone();
        assert_eq!(o.leader, id);
        let mut s = waiting(c.sync(
            1,
            SyncParams {
                group_id: "g".into(),
                generation_id: 1,
                member_id: id.clone(),
                group_instance_id: None,
                protocol_type: None,
                protocol_name: None,
                assignments: vec![(id.clone(), Bytes::from_static(b"a"))],
            },
            t0,
        ));
        assert_eq!(s.try_recv().unwrap().assignment, Bytes::from_static(b"a"));
        // The leader rejoining starts a new generation; a lone member completes it at once.
        p.member_id = id.clone();
        let mut j = waiting(c.join(1, p, t0));
        assert_eq!(j.try_recv().unwrap().generation_id, 2);
        assert_eq!(
            c.list(1).unwrap(),
            vec![GroupListing {
                group_id: "g".into(),
                protocol_type: "consumer".into(),
                state: GroupState::CompletingRebalance,
            }]
        );
    }

    #[test]
    fn inconsistent_protocols_and_bad_requests_are_refused() {
        let c = Coordinator::new();
        let t0 = Instant::now();
        let (_a, _ja) = join_new(&c, &[("range", b"")], t0);
        let o = now_outcome(c.join(1, params("", &[("sticky", b"")]), t0));
        assert_eq!(o.error, ErrorCode::InconsistentGroupProtocol);
        let mut p = params("", &[("range", b"")]);
        p.protocol_type = "connect".into();
        assert_eq!(
            now_outcome(c.join(1, p, t0)).error,
            ErrorCode::InconsistentGroupProtocol
        );
        let mut p = params("", &[("range", b"")]);
        p.session_timeout_ms = 10;
        assert_eq!(
            now_outcome(c.join(1, p, t0)).error,
            ErrorCode::InvalidSessionTimeout
        );
        let o = now_outcome(c.join(1, params("made-up", &[("range", b"")]), t0));
        assert_eq!(o.error, ErrorCode::UnknownMemberId);
        assert_eq!(
            c.validate_commit(1, "other", 3, "m", None, t0),
            ErrorCode::IllegalGeneration
        );
        assert_eq!(
            c.validate_commit(1, "other", -1, "", None, t0),
            ErrorCode::None
        );
        // Item 6 of issue 20: a member id this coordinator does not know is refused even
        // without a generation (an admin reset cannot race live members unseen).
        assert_eq!(
            c.validate_commit(1, "other", -1, "m", None, t0),
            ErrorCode::UnknownMemberId
        );
    }

    fn sync_params(member: &str, assignments: Vec<(String, Bytes)>) -> SyncParams {
        SyncParams {
            group_id: "g".into(),
            generation_id: 1,
            member_id: member.into(),
            group_instance_id: None,
            protocol_type: None,
            protocol_name: None,
            assignments,
        }
    }

    /// Item 3 of issue 20: a follower that waited in SyncGroup longer than its session timeout
    /// for a slow leader keeps its membership once the assignment arrives (its session starts
    /// again then, as in Kafka).
    #[test]
    fn delivering_the_assignment_renews_the_followers_session() {
        let c = Coordinator::new();
        let t0 = Instant::now();
        let slow = |member: &str| {
            let mut p = params(member, &[("range", b"")]);
            p.session_timeout_ms = 10_000;
            p.rebalance_timeout_ms = 60_000;
            p
        };
        let join = |c: &Coordinator| {
            let first = now_outcome(c.join(1, slow(""), t0));
            let id = first.member_id;
            (id.clone(), waiting(c.join(1, slow(&id), t0)))
        };
        let (a, mut ja) = join(&c);
        let (b, _jb) = join(&c);
        let t1 = t0 + INITIAL_REBALANCE_DELAY;
        c.tick(Some(1), t1);
        assert_eq!(ja.try_recv().unwrap().leader, a);
        let mut sb = waiting(c.sync(1, sync_params(&b, vec![]), t1));
        c.tick(Some(1), t1 + Duration::from_secs(5));
        // The leader takes 30 s to assign: three times b's session timeout.
        let t2 = t1 + Duration::from_secs(30);
        let _sa = waiting(c.sync(
            1,
            sync_params(&a, vec![(b.clone(), Bytes::from_static(b"to-b"))]),
            t2,
        ));
        assert_eq!(
            sb.try_recv().unwrap().assignment,
            Bytes::from_static(b"to-b")
        );
        let t3 = t2 + TICK;
        c.tick(Some(1), t3);
        assert_eq!(c.describe(1, "g").unwrap().state, GroupState::Stable);
        assert_eq!(c.heartbeat(1, "g", 1, &b, None, t3), ErrorCode::None);
    }

    /// Item 6 of issue 20: a request carrying an older metadata term than the state's is
    /// answered NOT_COORDINATOR and leaves the newer term's state alone.
    #[test]
    fn an_older_terms_request_does_not_clear_the_newer_state() {
        let c = Coordinator::new();
        let t0 = Instant::now();
        let first = now_outcome(c.join(2, params("", &[("range", b"")]), t0));
        assert_eq!(first.error, ErrorCode::MemberIdRequired);
        let _j = waiting(c.join(2, params(&first.member_id, &[("range", b"")]), t0));
        assert_eq!(
            c.heartbeat(1, "g", 1, &first.member_id, None, t0),
            ErrorCode::NotCoordinator
        );
        assert_eq!(
            now_outcome(c.join(1, params("", &[("range", b"")]), t0)).error,
            ErrorCode::NotCoordinator
        );
        c.tick(Some(1), t0);
        assert_eq!(c.list(1), Err(ErrorCode::NotCoordinator));
        assert_eq!(c.list(2).unwrap().len(), 1, "the term-2 group stays");
    }

    /// Item 6 of issue 20: rebalance timeouts beyond 5 minutes (stream processors' large
    /// `max.poll.interval.ms`) are honoured, bounded by a day; too many groups is a retriable
    /// COORDINATOR_NOT_AVAILABLE, not the fatal GROUP_MAX_SIZE_REACHED.
    #[test]
    fn long_rebalance_timeouts_and_the_group_count_limit() {
        assert_eq!(rebalance_timeout(600_000), Duration::from_secs(600));
        assert_eq!(rebalance_timeout(i32::MAX), MAX_REBALANCE_TIMEOUT);
        let c = Coordinator::new();
        let t0 = Instant::now();
        let mut p = params("", &[("range", b"")]);
        p.rebalance_timeout_ms = 3_600_000;
        p.require_known_member_id = false;
        match c.join(1, p, t0) {
            Pending::Wait(_, wait) => assert!(wait > Duration::from_secs(3_600), "{wait:?}"),
            Pending::Now(o) => panic!("{o:?}"),
        }
        for i in 1..MAX_GROUPS {
            let mut p = params("", &[("range", b"")]);
            p.group_id = format!("g{i}");
            assert_eq!(
                now_outcome(c.join(1, p, t0)).error,
                ErrorCode::MemberIdRequired
            );
        }
        let mut p = params("", &[("range", b"")]);
        p.group_id = "one-too-many".into();
        assert_eq!(
            now_outcome(c.join(1, p, t0)).error,
            ErrorCode::CoordinatorNotAvailable
        );
    }

    /// Lock per group: threads working on different groups at once (joins, heartbeats, leaves,
    /// ticks) leave each group consistent; the group-count limit holds exactly under
    /// concurrent creation; a term change in the middle drops everything.
    #[test]
    fn concurrent_requests_on_many_groups() {
        let c = Arc::new(Coordinator::new());
        let t0 = Instant::now();
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (c, barrier) = (c.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut joined = Vec::new();
                    for i in 0..200 {
                        let mut p = params("", &[("range", b"")]);
                        p.group_id = format!("t{t}-g{i}");
                        p.require_known_member_id = false;
                        let rx = waiting(c.join(1, p, t0));
                        joined.push((format!("t{t}-g{i}"), rx));
                    }
                    // Every group's initial delay is over: the ticks complete the joins (a
                    // tick may complete another thread's groups: wait for every tick).
                    barrier.wait();
                    c.tick(Some(1), t0 + INITIAL_REBALANCE_DELAY + TICK);
                    barrier.wait();
                    let mut members = Vec::new();
                    for (group, mut rx) in joined {
                        let o = rx.try_recv().expect("the join completed");
                        assert_eq!(o.error, ErrorCode::None);
                        assert_eq!(o.generation_id, 1);
                        members.push((group, o.member_id));
                    }
                    for round in 0..5 {
                        for (group, member) in &members {
                            assert_eq!(
                                c.heartbeat(1, group, 1, member, None, t0),
                                ErrorCode::None,
                                "round {round}"
                            );
                        }
                        c.tick(Some(1), t0 + INITIAL_REBALANCE_DELAY + TICK);
                    }
                    for (group, member) in members.iter().step_by(2) {
                        let errors = c.leave(1, group, &[(member.clone(), None)], t0);
                        assert_eq!(errors, vec![ErrorCode::None]);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no thread panicked");
        }
        let listed = c.list(1).expect("coordinating");
        // Half the groups lost their only member: they are removed (at once, by the leave).
        assert_eq!(listed.len(), 400, "{}", listed.len());
        assert!(listed
            .iter()
            .all(|g| g.state == GroupState::CompletingRebalance));
        // The limit holds exactly while threads create groups at once.
        let refused = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (c, refused) = (c.clone(), refused.clone());
                std::thread::spawn(move || {
                    for i in 0..MAX_GROUPS / 2 {
                        let mut p = params("", &[("range", b"")]);
                        p.group_id = format!("limit-{t}-{i}");
                        let o = now_outcome(c.join(1, p, t0));
                        if o.error == ErrorCode::CoordinatorNotAvailable {
                            refused.fetch_add(1, Ordering::Relaxed);
                        } else {
                            assert_eq!(o.error, ErrorCode::MemberIdRequired);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no thread panicked");
        }
        assert_eq!(c.list(1).expect("coordinating").len(), MAX_GROUPS);
        assert_eq!(
            refused.load(Ordering::Relaxed),
            4 * (MAX_GROUPS / 2) + 400 - MAX_GROUPS
        );
        // A newer term drops every group; the older term is refused from then on.
        assert_eq!(c.list(2).expect("coordinating").len(), 0);
        assert_eq!(c.list(1), Err(ErrorCode::NotCoordinator));
    }

    /// Item 2 of issue 20 (KIP-345): a restarted static member takes its old member's place
    /// (assignment, leadership) without a rebalance; the old process is fenced; members are
    /// removed by instance id; changed protocols rebalance.
    #[test]
    fn static_members_are_replaced_fenced_and_removed_by_instance_id() {
        let c = Coordinator::new();
        let t0 = Instant::now();
        let stat = |member: &str, instance: &str, meta: &'static [u8]| {
            let mut p = params(member, &[("range", meta)]);
            p.group_instance_id = Some(instance.into());
            p
        };
        // No MEMBER_ID_REQUIRED round trip for static members.
        let mut ja = waiting(c.join(1, stat("", "i-a", b"m"), t0));
        let mut jb = waiting(c.join(1, stat("", "i-b", b"m"), t0));
        let t1 = t0 + INITIAL_REBALANCE_DELAY;
        c.tick(Some(1), t1);
        let oa = ja.try_recv().unwrap();
        let ob = jb.try_recv().unwrap();
        let (a, b) = (oa.member_id.clone(), ob.member_id.clone());
        assert_eq!((oa.generation_id, oa.leader.as_str()), (1, a.as_str()));
        assert_eq!(oa.members[0].group_instance_id.as_deref(), Some("i-a"));
        let _sb = waiting(c.sync(1, sync_params(&b, vec![]), t1));
        let mut sa = waiting(c.sync(
            1,
            sync_params(
                &a,
                vec![
                    (a.clone(), Bytes::from_static(b"to-a")),
                    (b.clone(), Bytes::from_static(b"to-b")),
                ],
            ),
            t1,
        ));
        assert_eq!(sa.try_recv().unwrap().error, ErrorCode::None);

        // The leader's process restarts: same instance id, unknown member id, same protocols.
        let o = now_outcome(c.join(1, stat("", "i-a", b"m"), t1));
        assert_eq!(o.error, ErrorCode::None);
        assert_eq!(o.generation_id, 1, "no rebalance");
        let a2 = o.member_id.clone();
        assert_ne!(a2, a);
        assert_eq!(o.leader, a2, "it keeps the leadership");
        assert!(o.skip_assignment, "the group keeps its assignment");
        let mut p = sync_params(&a2, vec![]);
        p.group_instance_id = Some("i-a".into());
        let s = now_outcome(c.sync(1, p, t1));
        assert_eq!(
            (s.error, s.assignment),
            (ErrorCode::None, Bytes::from_static(b"to-a"))
        );
        assert_eq!(c.describe(1, "g").unwrap().state, GroupState::Stable);
        assert_eq!(c.heartbeat(1, "g", 1, &b, None, t1), ErrorCode::None);
        // The old process is fenced wherever it shows up.
        assert_eq!(
            c.heartbeat(1, "g", 1, &a, Some("i-a"), t1),
            ErrorCode::FencedInstanceId
        );
        assert_eq!(
            c.validate_commit(1, "g", 1, &a, Some("i-a"), t1),
            ErrorCode::FencedInstanceId
        );
        assert_eq!(
            now_outcome(c.join(1, stat(&a, "i-a", b"m"), t1)).error,
            ErrorCode::FencedInstanceId
        );
        assert_eq!(
            c.heartbeat(1, "g", 1, &a2, Some("i-a"), t1),
            ErrorCode::None
        );

        // Removal by instance id (Admin.removeMembersFromConsumerGroup: no member id).
        assert_eq!(
            c.leave(
                1,
                "g",
                &[
                    (String::new(), Some("nobody".into())),
                    ("wrong-id".into(), Some("i-a".into())),
                    (String::new(), Some("i-b".into())),
                ],
                t1
            ),
            vec![
                ErrorCode::UnknownMemberId,
                ErrorCode::FencedInstanceId,
                ErrorCode::None
            ]
        );
        assert_eq!(
            c.heartbeat(1, "g", 1, &a2, Some("i-a"), t1),
            ErrorCode::RebalanceInProgress
        );
        // A static member rejoining with other protocols during the rebalance waits in it.
        let mut j = waiting(c.join(1, stat("", "i-a", b"changed"), t1));
        let o = j.try_recv().unwrap();
        assert_eq!((o.error, o.generation_id), (ErrorCode::None, 2));
        assert_eq!(o.members.len(), 1);
        assert_eq!(o.members[0].metadata, Bytes::from_static(b"changed"));
    }

    /// Item 1 of issue 20: a completed rebalance yields the group's record for the metadata; a
    /// coordinator of a later term loads it and resumes the same generation (members,
    /// assignments, leader, static ids), every session starting at the load; an emptied group
    /// yields a record that forgets it.
    #[test]
    fn stored_groups_are_loaded_by_the_next_coordinator() {
        let c = Coordinator::new();
        let t0 = Instant::now();
        let (a, mut ja) = join_new(&c, &[("range", b"ma")], t0);
        let mut p = params("", &[("range", b"mb")]);
        p.group_instance_id = Some("i-b".into());
        let mut jb = waiting(c.join(1, p, t0));
        let t1 = t0 + INITIAL_REBALANCE_DELAY;
        c.tick(Some(1), t1);
        assert_eq!(ja.try_recv().unwrap().leader, a);
        let b = jb.try_recv().unwrap().member_id;
        assert!(c.take_records().is_none(), "nothing stored before the sync");
        let _sb = waiting(c.sync(1, sync_params(&b, vec![]), t1));
        let _sa = waiting(c.sync(
            1,
            sync_params(
                &a,
                vec![
                    (a.clone(), Bytes::from_static(b"to-a")),
                    (b.clone(), Bytes::from_static(b"to-b")),
                ],
            ),
            t1,
        ));
        // Members wait for the record to be written before their SyncGroup is answered.
        let (seq, _) = c.unstored(1, "g").expect("the record is not written yet");
        let (term, taken, records) = c.take_records().expect("the completed rebalance's record");
        assert_eq!((term, taken), (1, seq));
        assert!(c.unstored(1, "g").is_some());
        c.records_stored(taken);
        assert!(c.unstored(1, "g").is_none());
        let [(group, Some(record))] = records.as_slice() else {
            panic!("{records:?}")
        };
        assert_eq!(group, "g");
        assert_eq!((record.generation, record.leader.as_str()), (1, a.as_str()));
        assert_eq!(record.members.len(), 2);
        assert_eq!(record.members[0].member_id, a, "join order");
        assert_eq!(record.members[1].assignment, b"to-b");

        // Another node takes over in term 2, 20 s later (longer than the 10 s sessions).
        let next = Coordinator::new();
        let t2 = t1 + Duration::from_secs(20);
        let stored = vec![(group.clone(), record.clone())];
        next.load(2, || stored, t2);
        next.load(2, || panic!("loaded once per term"), t2);
        next.tick(Some(2), t2 + Duration::from_secs(9));
        let t3 = t2 + Duration::from_secs(9);
        assert_eq!(next.heartbeat(2, "g", 1, &a, None, t3), ErrorCode::None);
        assert_eq!(
            next.heartbeat(2, "g", 1, &b, Some("i-b"), t3),
            ErrorCode::None
        );
        let d = next.describe(2, "g").unwrap();
        assert_eq!(d.state, GroupState::Stable);
        assert_eq!(d.protocol, "range");
        assert_eq!(d.members[1].assignment, Bytes::from_static(b"to-b"));
        assert_eq!(
            next.validate_commit(2, "g", 1, &a, None, t3),
            ErrorCode::None
        );
        // A member that syncs again (after a lost response) gets its assignment.
        let s = now_outcome(next.sync(2, sync_params(&a, vec![]), t3));
        assert_eq!(s.assignment, Bytes::from_static(b"to-a"));
        // The static member restarting is recognised by its instance id.
        let mut p = params("", &[("range", b"mb")]);
        p.group_instance_id = Some("i-b".into());
        let o = now_outcome(next.join(2, p, t3));
        assert_eq!((o.error, o.generation_id), (ErrorCode::None, 1));
        let (_, _, records) = next.take_records().expect("the replaced member is stored");
        assert_eq!(
            records[0].1.as_ref().unwrap().members[1].member_id,
            o.member_id
        );
        // Both leave: the group's record goes.
        let left = next.leave(
            2,
            "g",
            &[(a.clone(), None), (String::new(), Some("i-b".into()))],
            t3,
        );
        assert_eq!(left, vec![ErrorCode::None, ErrorCode::None]);
        let (_, _, records) = next.take_records().unwrap();
        assert_eq!(records, vec![("g".to_string(), None)]);
        // Stopping to lead drops what is not written yet.
        next.tick(None, t3);
        assert!(next.take_records().is_none());
    }
}
