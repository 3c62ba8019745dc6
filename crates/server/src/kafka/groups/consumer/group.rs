//! One consumer-protocol group's state machine (KIP-848, after Kafka's consumer group
//! coordinator): members, the group epoch (bumped when members, subscriptions or the
//! subscribed topics' partition counts change), the target assignment computed by the group's
//! assignor at the assignment epoch, and each member's reconciliation towards its target
//! ([`super::member::reconcile`]).
//!
//! Nothing here blocks, awaits or reads a clock: the caller passes `now`, the cluster's topics
//! and the settings ([`Context`]). [`ConsumerGroup::dirty`] says the state the metadata stores
//! changed (the caller writes it before answering).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_proto::error_code::ErrorCode;
use kafka_proto::Uuid;

use super::assignors::{Assignment, GroupAssignment, GroupSpec, MemberSpec};
use super::member::{is_subset, reconcile, Member, MemberState, LEFT_STATIC_EPOCH};
use super::types::{Context, HeartbeatOutcome, HeartbeatParams, TopicView, MAX_REGEX_LEN};

/// How long a regex's resolution is reused before the topics are matched again (so topics
/// created or deleted are picked up).
pub(crate) const REGEX_REFRESH: Duration = Duration::from_secs(1);

/// A consumer-protocol group's state, as Kafka's ConsumerGroupDescribe names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConsumerGroupState {
    /// No members.
    Empty,
    /// The target assignment lags the group epoch.
    Assigning,
    /// Some member has not reached its target.
    Reconciling,
    /// Every member has its target.
    Stable,
}

impl ConsumerGroupState {
    /// Kafka's name (ConsumerGroupDescribe, ListGroups).
    pub(crate) fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// One consumer-protocol group.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConsumerGroup {
    /// Bumped on every change of members, subscriptions or subscribed partition counts.
    pub(crate) group_epoch: i32,
    /// The group epoch the target assignment was computed at.
    pub(crate) assignment_epoch: i32,
    /// The assignor of the last target assignment.
    pub(crate) assignor: String,
    /// Members by id.
    pub(crate) members: BTreeMap<String, Member>,
    /// Every member's target assignment.
    pub(crate) target: GroupAssignment,
    /// The partition counts of the subscribed topics at the group epoch.
    pub(crate) partition_counts: BTreeMap<Uuid, u32>,
    /// Regexes resolved to topic names, and when (not stored).
    pub(crate) regexes: BTreeMap<String, (Instant, BTreeSet<String>)>,
    /// The stored state changed since the caller last cleared it.
    pub(crate) dirty: bool,
}

/// Whether `a` and `b` agree on every field the metadata stores (not their deadlines).
fn same_stored(a: &Member, b: &Member) -> bool {
    let mut x = a.clone();
    x.session_deadline = b.session_deadline;
    x.revoke_deadline = b.revoke_deadline;
    x == *b
}

/// Checks a heartbeat's fields as Kafka does; the error and its message otherwise.
pub(crate) fn validate(p: &HeartbeatParams, version: i16) -> Result<(), (ErrorCode, String)> {
    let invalid = |m: &str| Err((ErrorCode::InvalidRequest, m.to_owned()));
    if p.member_id.is_empty() && (version >= 1 || p.member_epoch != 0) {
        return invalid("MemberId can't be empty.");
    }
    if p.instance_id.as_deref() == Some("") {
        return invalid("InstanceId can't be empty.");
    }
    if p.rack.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    match p.member_epoch {
        0 => {
            if p.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if p.owned.as_ref().is_none_or(|o| !o.is_empty()) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            if p.subscribed_names.is_none() && p.subscribed_regex.is_none() {
                return invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                );
            }
        }
        LEFT_STATIC_EPOCH if p.instance_id.is_none() => {
            return invalid("InstanceId can't be null.");
        }
        -1 => {}
        e if e < -2 => return invalid(&format!("MemberEpoch {e} is invalid.")),
        _ => {}
    }
    if let Some(r) = &p.subscribed_regex {
        if r.len() > MAX_REGEX_LEN {
            return Err((
                ErrorCode::InvalidRegularExpression,
                format!("SubscribedTopicRegex is longer than {MAX_REGEX_LEN} characters."),
            ));
        }
        if !r.is_empty() {
            if let Err(e) = compile(r) {
                return Err((
                    ErrorCode::InvalidRegularExpression,
                    format!("SubscribedTopicRegex `{r}` is not a valid regular expression: {e}."),
                ));
            }
        }
    }
    if p.subscribed_names
        .as_ref()
        .is_some_and(|n| n.len() > super::types::MAX_SUBSCRIBED_TOPICS)
    {
        return invalid("Too many SubscribedTopicNames.");
    }
    Ok(())
}

/// `r` compiled to match whole topic names (RE2J's `matches`).
pub(crate) fn compile(r: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(&format!("^(?:{r})$"))
        .size_limit(1 << 20)
        .build()
}

impl ConsumerGroup {
    /// The group's state as Kafka names it.
    pub(crate) fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.group_epoch != self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self.members.values().any(|m| {
            (m.epoch != self.assignment_epoch && m.epoch != LEFT_STATIC_EPOCH)
                || m.state != MemberState::Stable
        }) {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// The member holding static instance `instance`.
    pub(crate) fn static_member(&self, instance: &str) -> Option<&String> {
        self.members
            .iter()
            .find(|(_, m)| m.instance_id.as_deref() == Some(instance))
            .map(|(id, _)| id)
    }

    fn bump(&mut self) {
        self.group_epoch = self.group_epoch.wrapping_add(1).max(1);
        self.dirty = true;
    }

    /// Removes member `id` (it left, its session expired or it was fenced); the group epoch
    /// moves so the others are reassigned.
    pub(crate) fn remove_member(&mut self, id: &str) {
        if self.members.remove(id).is_some() {
            self.target.remove(id);
            self.bump();
        }
    }

    /// Handles one heartbeat (already [`validate`]d) at `now`.
    pub(crate) fn heartbeat(
        &mut self,
        p: &HeartbeatParams,
        ctx: &Context<'_>,
        now: Instant,
    ) -> HeartbeatOutcome {
        let interval = ctx.settings.heartbeat_interval_ms;
        if let Some(name) = p.server_assignor.as_deref() {
            if (ctx.assignor)(Some(name)).is_none() {
                return HeartbeatOutcome::error(
                    ErrorCode::UnsupportedAssignor,
                    format!("ServerAssignor {name} is not supported."),
                    &p.member_id,
                );
            }
        }
        if p.member_epoch == -1 || p.member_epoch == LEFT_STATIC_EPOCH {
            return self.leave(p);
        }
        let members_before = self.members.len();
        let id = match self.member_for(p, ctx, now) {
            Ok(id) => id,
            Err((e, msg)) => return HeartbeatOutcome::error(e, msg, &p.member_id),
        };
        let created = self.members.len() > members_before;
        let before = self.members.get(&id).cloned().filter(|_| !created);
        let full = p.member_epoch == 0
            || (p.rebalance_timeout_ms != -1
                && (p.subscribed_names.is_some() || p.subscribed_regex.is_some())
                && p.owned.is_some());
        let subscription_changed = {
            let Some(m) = self.members.get_mut(&id) else {
                return HeartbeatOutcome::error(ErrorCode::UnknownMemberId, "", &p.member_id);
            };
            update_member(m, p, ctx, now)
        };
        // The subscribed topics' partition counts (a created, deleted or grown topic moves the
        // group epoch).
        let counts = self.subscribed_counts(ctx.topics, now);
        let counts_changed = counts != self.partition_counts;
        self.partition_counts = counts;
        // One bump for everything this heartbeat changed (a join, a subscription, topics).
        if created || subscription_changed || counts_changed {
            self.bump();
        }
        if self.group_epoch != self.assignment_epoch {
            self.compute_target(ctx);
        }
        let previously_assigned = self.members.get(&id).map(|m| m.assigned.clone());
        self.reconcile_member(&id, p.owned.as_ref(), now);
        let Some(m) = self.members.get(&id) else {
            return HeartbeatOutcome::error(ErrorCode::UnknownMemberId, "", &p.member_id);
        };
        if !before.as_ref().is_some_and(|b| same_stored(b, m)) {
            self.dirty = true;
        }
        let changed = previously_assigned.as_ref() != Some(&m.assigned);
        HeartbeatOutcome {
            error: ErrorCode::None,
            message: None,
            member_id: id.clone(),
            member_epoch: m.epoch,
            heartbeat_interval_ms: interval,
            assignment: (full || changed || before.is_none()).then(|| m.assigned.clone()),
        }
    }

    /// Epoch -1 (leave) or -2 (static leave).
    fn leave(&mut self, p: &HeartbeatParams) -> HeartbeatOutcome {
        let id = if let Some(instance) = &p.instance_id {
            match self.static_member(instance) {
                None => {
                    return HeartbeatOutcome::error(
                        ErrorCode::UnknownMemberId,
                        format!("Instance id {instance} is unknown."),
                        &p.member_id,
                    )
                }
                Some(holder) if *holder != p.member_id => {
                    return HeartbeatOutcome::error(
                        ErrorCode::FencedInstanceId,
                        format!("Instance id {instance} is held by another member."),
                        &p.member_id,
                    )
                }
                Some(holder) => holder.clone(),
            }
        } else {
            if !self.members.contains_key(&p.member_id) {
                return HeartbeatOutcome::error(
                    ErrorCode::UnknownMemberId,
                    format!("Member {} is not a member of the group.", p.member_id),
                    &p.member_id,
                );
            }
            p.member_id.clone()
        };
        if p.member_epoch == LEFT_STATIC_EPOCH {
            // A static member that leaves keeps its assignment for its session timeout, so the
            // same instance rejoining gets it back without a rebalance.
            if let Some(m) = self.members.get_mut(&id) {
                if m.epoch != LEFT_STATIC_EPOCH {
                    // Its epoch is kept (as its previous one) for its instance's return.
                    m.previous_epoch = m.epoch;
                    m.epoch = LEFT_STATIC_EPOCH;
                    self.dirty = true;
                }
            }
        } else {
            self.remove_member(&id);
        }
        HeartbeatOutcome {
            error: ErrorCode::None,
            message: None,
            member_id: p.member_id.clone(),
            member_epoch: p.member_epoch,
            heartbeat_interval_ms: 0,
            assignment: None,
        }
    }

    /// The member a heartbeat is for: an existing one (epochs and instances checked) or one
    /// joining (created, or a static member that left replaced by its instance's new member).
    fn member_for(
        &mut self,
        p: &HeartbeatParams,
        ctx: &Context<'_>,
        now: Instant,
    ) -> Result<String, (ErrorCode, String)> {
        if p.member_epoch == 0 {
            if let Some(instance) = &p.instance_id {
                if let Some(holder) = self.static_member(instance).cloned() {
                    if holder == p.member_id {
                        return Ok(holder);
                    }
                    let old_epoch = self.members.get(&holder).map_or(0, |m| m.epoch);
                    if old_epoch != LEFT_STATIC_EPOCH {
                        return Err((
                            ErrorCode::UnreleasedInstanceId,
                            format!(
                                "Static member {holder} with instance id {instance} is still \
                                 in the group."
                            ),
                        ));
                    }
                    // The instance rejoins: the new member takes the old one's place, epoch
                    // and assignment.
                    if let Some(mut m) = self.members.remove(&holder) {
                        m.epoch = m.previous_epoch.max(0);
                        if let Some(t) = self.target.remove(&holder) {
                            self.target.insert(p.member_id.clone(), t);
                        }
                        self.members.insert(p.member_id.clone(), m);
                        self.dirty = true;
                    }
                    return Ok(p.member_id.clone());
                }
            }
            if self.members.contains_key(&p.member_id) {
                return Ok(p.member_id.clone());
            }
            if self.members.len() >= ctx.settings.max_size {
                return Err((
                    ErrorCode::GroupMaxSizeReached,
                    format!(
                        "The consumer group has reached its maximum capacity of {} members.",
                        ctx.settings.max_size
                    ),
                ));
            }
            let mut m = Member::new(now);
            m.instance_id = p.instance_id.clone();
            self.members.insert(p.member_id.clone(), m);
            self.target.insert(p.member_id.clone(), Assignment::new());
            // The group epoch moves once the heartbeat is applied (see `heartbeat`).
            self.dirty = true;
            return Ok(p.member_id.clone());
        }
        let Some(m) = self.members.get(&p.member_id) else {
            return Err((
                ErrorCode::UnknownMemberId,
                format!("Member {} is not a member of the group.", p.member_id),
            ));
        };
        if let Some(instance) = &p.instance_id {
            if self.static_member(instance) != Some(&p.member_id) {
                return Err((
                    ErrorCode::FencedInstanceId,
                    format!("Instance id {instance} is held by another member."),
                ));
            }
        }
        if p.member_epoch > m.epoch {
            return Err((
                ErrorCode::FencedMemberEpoch,
                format!(
                    "The consumer group member has a greater member epoch ({}) than the one \
                     known by the group coordinator ({}). The member must abandon all its \
                     partitions and rejoin.",
                    p.member_epoch, m.epoch
                ),
            ));
        }
        if p.member_epoch < m.epoch {
            // Its last response (with the bumped epoch) may have been lost: the previous epoch
            // is accepted when it owns no more than it is assigned.
            let lost_response = p.member_epoch == m.previous_epoch
                && p.owned.as_ref().is_some_and(|o| is_subset(o, &m.assigned));
            if !lost_response {
                return Err((
                    ErrorCode::FencedMemberEpoch,
                    format!(
                        "The consumer group member has a smaller member epoch ({}) than the one \
                         known by the group coordinator ({}). The member must abandon all its \
                         partitions and rejoin.",
                        p.member_epoch, m.epoch
                    ),
                ));
            }
        }
        Ok(p.member_id.clone())
    }

    /// The partition counts of every topic some member subscribes to (names, and regexes
    /// resolved at most [`REGEX_REFRESH`] ago) that exists.
    pub(crate) fn subscribed_counts(
        &mut self,
        topics: &dyn TopicView,
        now: Instant,
    ) -> BTreeMap<Uuid, u32> {
        let mut names: BTreeSet<String> = BTreeSet::new();
        let mut regexes: BTreeSet<String> = BTreeSet::new();
        for m in self.members.values() {
            names.extend(m.subscribed_names.iter().cloned());
            if let Some(r) = &m.subscribed_regex {
                regexes.insert(r.clone());
            }
        }
        self.regexes.retain(|r, _| regexes.contains(r));
        for r in regexes {
            let fresh = self
                .regexes
                .get(&r)
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) < REGEX_REFRESH);
            if !fresh {
                let matched = resolve(&r, topics);
                self.regexes.insert(r.clone(), (now, matched));
            }
            if let Some((_, matched)) = self.regexes.get(&r) {
                names.extend(matched.iter().cloned());
            }
        }
        names
            .iter()
            .filter_map(|n| topics.topic(n))
            .filter(|(_, count)| *count > 0)
            .collect()
    }

    /// The topic ids member `m` subscribes to, among `partition_counts`.
    fn member_topics(&self, m: &Member, topics: &dyn TopicView) -> BTreeSet<Uuid> {
        let mut out = BTreeSet::new();
        let regex = m
            .subscribed_regex
            .as_ref()
            .and_then(|r| self.regexes.get(r))
            .map(|(_, names)| names);
        for name in m.subscribed_names.iter().chain(regex.into_iter().flatten()) {
            if let Some((id, _)) = topics.topic(name) {
                if self.partition_counts.contains_key(&id) {
                    out.insert(id);
                }
            }
        }
        out
    }

    /// The assignor the group uses: the one most members name, the default when none names
    /// one ([`super::assignors::select`]).
    pub(crate) fn assignor_name(&self) -> &'static str {
        super::assignors::select(self.members.values().map(|m| m.server_assignor.as_deref()))
    }

    /// Recomputes the target assignment at the group epoch.
    fn compute_target(&mut self, ctx: &Context<'_>) {
        let name = self.assignor_name();
        let Some(assignor) = (ctx.assignor)(Some(name)).or_else(|| (ctx.assignor)(None)) else {
            return;
        };
        let mut spec = GroupSpec {
            partitions_by_topic: self.partition_counts.clone(),
            ..GroupSpec::default()
        };
        for (id, m) in &self.members {
            spec.members.insert(
                id.clone(),
                MemberSpec {
                    subscribed: self.member_topics(m, ctx.topics),
                    instance_id: m.instance_id.clone(),
                    rack: m.rack.clone(),
                    current: self.target.get(id).cloned().unwrap_or_default(),
                },
            );
        }
        let mut target = assignor.assign(&spec);
        for id in self.members.keys() {
            target.entry(id.clone()).or_default();
        }
        self.target = target;
        self.assignor = assignor.name().to_owned();
        self.assignment_epoch = self.group_epoch;
        self.dirty = true;
    }

    /// Moves member `id` one step towards its target (`owned`: what it says it owns).
    fn reconcile_member(&mut self, id: &str, owned: Option<&Assignment>, now: Instant) {
        let Some(m) = self.members.get(id) else {
            return;
        };
        let target = self.target.get(id).cloned().unwrap_or_default();
        let others = &self.members;
        let owned_by_other = |t: &Uuid, p: i32| {
            others
                .iter()
                .any(|(other, om)| other != id && om.owns(t, p))
        };
        let next = reconcile(m, self.assignment_epoch, &target, owned, &owned_by_other);
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        if next.state == MemberState::UnrevokedPartitions
            && m.state != MemberState::UnrevokedPartitions
        {
            let timeout = Duration::from_millis(u64::try_from(m.rebalance_timeout_ms).unwrap_or(0));
            m.revoke_deadline = Some(now + timeout);
        } else if next.state != MemberState::UnrevokedPartitions {
            m.revoke_deadline = None;
        }
        m.epoch = next.epoch;
        m.previous_epoch = next.previous_epoch;
        m.state = next.state;
        m.assigned = next.assigned;
        m.pending_revocation = next.pending_revocation;
    }

    /// Expires sessions and fences members that did not revoke in time (both leave the
    /// group); true when something changed.
    pub(crate) fn tick(&mut self, now: Instant) -> bool {
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| {
                m.session_deadline <= now || m.revoke_deadline.is_some_and(|d| d <= now)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            tracing::debug!(member = %id, "consumer group member expired or fenced");
            self.remove_member(id);
        }
        !gone.is_empty()
    }

    /// The earliest instant [`ConsumerGroup::tick`] may change something.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.members
            .values()
            .flat_map(|m| std::iter::once(m.session_deadline).chain(m.revoke_deadline))
            .min()
    }
}

/// The topic names regex `r` matches (none when it does not compile).
fn resolve(r: &str, topics: &dyn TopicView) -> BTreeSet<String> {
    let Ok(re) = compile(r) else {
        return BTreeSet::new();
    };
    topics
        .names()
        .into_iter()
        .filter(|n| re.is_match(n))
        .collect()
}

/// Applies a heartbeat's fields to member `m` and renews its session; true when its
/// subscription (topics, regex, assignor) changed.
fn update_member(m: &mut Member, p: &HeartbeatParams, ctx: &Context<'_>, now: Instant) -> bool {
    let mut changed = false;
    if let Some(names) = &p.subscribed_names {
        let names: BTreeSet<String> = names.iter().cloned().collect();
        if names != m.subscribed_names {
            m.subscribed_names = names;
            changed = true;
        }
    }
    if let Some(r) = &p.subscribed_regex {
        let r = (!r.is_empty()).then(|| r.clone());
        if r != m.subscribed_regex {
            m.subscribed_regex = r;
            changed = true;
        }
    }
    if let Some(a) = &p.server_assignor {
        if m.server_assignor.as_deref() != Some(a) {
            m.server_assignor = Some(a.clone());
            changed = true;
        }
    }
    if p.rebalance_timeout_ms != -1 {
        m.rebalance_timeout_ms = p.rebalance_timeout_ms.max(0);
    }
    if p.rack.is_some() && p.rack != m.rack {
        m.rack = p.rack.clone();
        changed = true;
    }
    if p.instance_id.is_some() {
        m.instance_id = p.instance_id.clone();
    }
    if !p.client_id.is_empty() {
        m.client_id = p.client_id.clone();
    }
    if !p.client_host.is_empty() {
        m.client_host = p.client_host.clone();
    }
    if m.epoch == LEFT_STATIC_EPOCH {
        m.epoch = m.previous_epoch.max(0);
    }
    if p.classic.is_some() {
        m.classic = p.classic.clone();
    }
    m.session_deadline = now + m.session_timeout(ctx.settings.session_timeout);
    changed
}
