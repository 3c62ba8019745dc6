//! The coordinator's membership requests: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
//! membership check of an OffsetCommit, each on its group under the group's lock.
//!
//! Static membership (`group.instance.id`, KIP-345): a member joining with an unknown member id
//! and an instance id the group knows takes the old member's place (its assignment and
//! leadership) under a new member id, without a rebalance when the group is Stable and its
//! protocols are unchanged; a process still using the old member id is fenced
//! (FENCED_INSTANCE_ID on every request); LeaveGroup can name members by instance id.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use tokio::sync::oneshot;

use super::coordinator::{lock, Coordinator};
use super::group::Group;
use super::limits::{
    rebalance_timeout, session_timeout, MAX_MEMBERS, MAX_SESSION_TIMEOUT, MIN_SESSION_TIMEOUT,
};
use super::types::{GroupState, JoinOutcome, JoinParams, Pending, SyncOutcome, SyncParams};

impl Coordinator {
    /// Handles a JoinGroup while leading in metadata term `term`.
    pub(super) fn join(&self, term: u64, p: JoinParams, now: Instant) -> Pending<JoinOutcome> {
        let group_id = p.group_id.clone();
        let Some(_term) = self.state(term) else {
            return Pending::Now(JoinOutcome::error(ErrorCode::NotCoordinator, &p.member_id));
        };
        if let Err(e) = Self::join_checks(&p) {
            return Pending::Now(JoinOutcome::error(e, &p.member_id));
        }
        // A consumer-protocol group of that id: converted when empty, refused otherwise.
        if let Err(e) = self.classic_join_allowed(&group_id) {
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
    pub(super) fn join_checks(p: &JoinParams) -> Result<(), ErrorCode> {
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
    pub(super) fn sync(&self, term: u64, p: SyncParams, now: Instant) -> Pending<SyncOutcome> {
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
    pub(super) fn heartbeat(
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
    pub(super) fn leave(
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
    pub(super) fn validate_commit(
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

    /// A TxnOffsetCommit's membership check while leading in metadata term `term`, as Kafka's
    /// (`validateOffsetCommit` with `isTransactional`): without member fields (v0-2, or a
    /// producer outside the group) any group is accepted; with them the member must exist, not
    /// be fenced and be in the group's generation. Unlike OffsetCommit a rebalance in progress
    /// or a group with members does not refuse it, and no heartbeat is recorded.
    pub(super) fn validate_txn_commit(
        &self,
        term: u64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> ErrorCode {
        let Some(_term) = self.state(term) else {
            return ErrorCode::NotCoordinator;
        };
        if generation_id < 0 && member_id.is_empty() && instance_id.is_none() {
            return ErrorCode::None;
        }
        self.with_group(group_id, |_, group| {
            if group.fenced(member_id, instance_id) {
                ErrorCode::FencedInstanceId
            } else if !group.members.contains_key(member_id) {
                ErrorCode::UnknownMemberId
            } else if generation_id != group.generation {
                ErrorCode::IllegalGeneration
            } else {
                ErrorCode::None
            }
        })
        // No membership: no member of that id.
        .unwrap_or(ErrorCode::UnknownMemberId)
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
}
