//! One consumer group's state machine (the classic protocol, after Kafka's `GroupCoordinator`):
//! its members, rebalances, generations and assignments.
//!
//! A group moves through Kafka's states: `Empty` (no members) → `PreparingRebalance` (members
//! (re)join; JoinGroup requests wait) → `CompletingRebalance` (JoinGroup answered: the leader
//! computes the assignment; SyncGroup requests wait for it) → `Stable` (the leader's SyncGroup
//! delivered every member's assignment). A join, a leave, an expired session or a changed
//! subscription starts the next rebalance. `Dead` is only ever reported for unknown groups.
//!
//! Waiting requests are `oneshot` channels completed under the group's lock; nothing here blocks
//! or awaits. [`Group::tick`] enforces the group's deadlines (join completion, session expiry,
//! pending sync, member ids handed out but unused).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use tokio::sync::oneshot;

use super::limits::{rebalance_timeout, session_timeout, INITIAL_REBALANCE_DELAY};
use super::types::{GroupState, JoinOutcome, JoinParams, JoinedMember, SyncOutcome};

/// One member of a group: who it is, its timeouts and protocols, its assignment, and the
/// JoinGroup or SyncGroup it waits in.
pub(super) struct Member {
    pub(super) instance_id: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) session_timeout: Duration,
    pub(super) rebalance_timeout: Duration,
    pub(super) protocols: Vec<(String, Bytes)>,
    pub(super) assignment: Bytes,
    pub(super) heartbeat_deadline: Instant,
    pub(super) join_waiter: Option<oneshot::Sender<JoinOutcome>>,
    pub(super) sync_waiter: Option<oneshot::Sender<SyncOutcome>>,
    /// Join order: the first member becomes leader.
    pub(super) seq: u64,
}

impl Member {
    /// The member's metadata for `protocol` (empty if it does not support it).
    pub(super) fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    /// Whether the member supports exactly these protocols, with the same metadata.
    pub(super) fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }
}

/// One group's membership state, under its own lock (see [`super::coordinator`]).
pub(super) struct Group {
    pub(super) state: GroupState,
    pub(super) generation: i32,
    pub(super) protocol_type: Option<String>,
    pub(super) protocol: Option<String>,
    pub(super) leader: Option<String>,
    pub(super) members: HashMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with the time they must join by.
    pub(super) pending: HashMap<String, Instant>,
    /// Static members: instance id -> the member id that holds it now.
    pub(super) static_members: HashMap<String, String>,
    /// PreparingRebalance: when the join completes with whoever rejoined.
    pub(super) join_deadline: Option<Instant>,
    /// The rebalance is the initial one of an empty group: it waits its whole delay.
    pub(super) initial_delay: bool,
    /// Latest join_deadline an initial delay may be extended to.
    pub(super) initial_delay_limit: Option<Instant>,
    /// Members that joined the current generation but have not sent SyncGroup yet, and when they
    /// must have.
    pub(super) pending_sync: HashSet<String>,
    pub(super) sync_deadline: Option<Instant>,
    pub(super) next_seq: u64,
    /// The metadata holds a record of this group's membership (see
    /// [`Shared::note`](super::coordinator::Shared::note)).
    pub(super) stored: bool,
    /// The membership changed in a way the metadata must learn (a rebalance completed, a static
    /// member was replaced).
    pub(super) dirty: bool,
    /// The sequence number of this group's last queued record (0: none).
    pub(super) record_seq: u64,
    /// Taken out of the coordinator's map: a request that found it before must look again.
    pub(super) removed: bool,
}

impl Group {
    /// An Empty group.
    pub(super) fn new() -> Group {
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

    fn rebalance_timeout(&self) -> Duration {
        self.members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(INITIAL_REBALANCE_DELAY)
    }

    /// Whether a member with these protocols may join (Kafka's `supportsProtocols`).
    pub(super) fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
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

    /// Starts a rebalance: waiting syncs are answered REBALANCE_IN_PROGRESS, and members have
    /// until the join deadline (the initial delay for an empty group) to rejoin.
    pub(super) fn prepare_rebalance(&mut self, now: Instant) {
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
    pub(super) fn try_complete_join(&mut self, now: Instant) {
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

    /// Removes member `id` (what it waits for is answered UNKNOWN_MEMBER_ID); the group
    /// rebalances without it.
    pub(super) fn remove_member(&mut self, id: &str, now: Instant) {
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

    /// Adds member `id`, waiting in JoinGroup on `waiter`, and starts or extends a rebalance.
    pub(super) fn add_member(
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

    /// A known member rejoins: its protocols, timeouts and client are updated and its join
    /// waits on `waiter`.
    pub(super) fn update_member(
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
    pub(super) fn fenced(&self, member_id: &str, instance_id: Option<&str>) -> bool {
        instance_id
            .and_then(|i| self.static_members.get(i))
            .is_some_and(|holder| holder != member_id)
    }

    /// A static member joining with an unknown member id and the known instance id of member
    /// `old` (a restarted process): `new` takes `old`'s place (its assignment, its leadership,
    /// its join order), and whatever `old` waits for is answered FENCED_INSTANCE_ID. In a
    /// Stable group with unchanged protocols there is no rebalance: the answer (Some) is the
    /// current generation. Otherwise the join waits on `waiter` like any other.
    pub(super) fn replace_static_member(
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
    pub(super) fn current_join(&self, id: &str) -> JoinOutcome {
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

    /// Answers every waiting JoinGroup and SyncGroup with `error`.
    pub(super) fn drop_waiters(&mut self, error: ErrorCode) {
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
    pub(super) fn tick(&mut self, now: Instant) {
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

    /// Whether the group holds nothing: Empty, no members, no member ids handed out.
    pub(super) fn is_removable(&self) -> bool {
        self.state == GroupState::Empty && self.members.is_empty() && self.pending.is_empty()
    }

    /// The earliest instant [`Group::tick`] may change something (a session expiring, a member
    /// id handed out expiring, the sync or join deadline); `now` when the group can be removed;
    /// None when nothing is due until a request comes. Members waiting in JoinGroup or SyncGroup
    /// are not expired (as in [`Group::tick`]); their deadline counts again once their waiter is
    /// answered, which happens in a request or a tick, after which the group is rescheduled.
    pub(super) fn next_deadline(&self, now: Instant) -> Option<Instant> {
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
