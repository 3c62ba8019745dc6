//! One member of a consumer-protocol group and its reconciliation towards the group's target
//! assignment (KIP-848's member state machine): a member first revokes what its target no
//! longer holds, then gets the target epoch, and is given partitions only once no other member
//! still owns them.

use std::collections::BTreeSet;
use std::time::Instant;

use super::assignors::Assignment;

/// Where a member is in its reconciliation (Kafka's `MemberState` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemberState {
    /// The member owns its whole target assignment at the target epoch.
    Stable,
    /// The member must first revoke partitions (`pending_revocation`) before its epoch moves.
    UnrevokedPartitions,
    /// The member has the target epoch but waits for partitions other members still own.
    UnreleasedPartitions,
}

impl MemberState {
    /// The number the metadata stores.
    pub(crate) fn code(self) -> i32 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
        }
    }

    /// The state stored as `code` (an unknown code: Stable; the next heartbeat reconciles).
    pub(crate) fn from_code(code: i32) -> MemberState {
        match code {
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Stable,
        }
    }
}

/// A member's epoch after a static member left (epoch -2): it keeps its assignment until its
/// session expires or its instance rejoins.
pub(crate) const LEFT_STATIC_EPOCH: i32 = -2;

/// What a member using the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)
/// inside a consumer-protocol group joined with (Kafka's `ClassicMemberMetadata`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClassicMember {
    /// Its JoinGroup's session timeout (used instead of the group's).
    pub(crate) session_timeout_ms: i32,
    /// Its protocols (name, ConsumerProtocolSubscription), in its order of preference.
    pub(crate) protocols: Vec<(String, Vec<u8>)>,
}

impl ClassicMember {
    /// The protocol name its JoinGroup and SyncGroup responses carry (its first).
    pub(crate) fn protocol_name(&self) -> &str {
        self.protocols.first().map_or("", |(n, _)| n.as_str())
    }

    /// The version of its subscription (its assignment is encoded at the same version).
    pub(crate) fn subscription_version(&self) -> i16 {
        self.protocols
            .first()
            .and_then(|(_, m)| m.get(0..2))
            .map_or(0, |b| i16::from_be_bytes([b[0], b[1]]))
    }
}

/// One member of a consumer-protocol group.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Member {
    /// Static instance id (`group.instance.id`).
    pub(crate) instance_id: Option<String>,
    /// Rack (`client.rack`).
    pub(crate) rack: Option<String>,
    /// The client's `client.id`.
    pub(crate) client_id: String,
    /// The client's address.
    pub(crate) client_host: String,
    /// Topic names it subscribes to.
    pub(crate) subscribed_names: BTreeSet<String>,
    /// The regex it subscribes to (RE2J syntax), if any.
    pub(crate) subscribed_regex: Option<String>,
    /// The server assignor it asked for (`group.remote.assignor`).
    pub(crate) server_assignor: Option<String>,
    /// How long it may take to revoke partitions (`max.poll.interval.ms`).
    pub(crate) rebalance_timeout_ms: i32,
    /// Its current epoch ([`LEFT_STATIC_EPOCH`] for a static member that left).
    pub(crate) epoch: i32,
    /// Its epoch before the last bump (accepted from a member whose response was lost).
    pub(crate) previous_epoch: i32,
    /// Its reconciliation state.
    pub(crate) state: MemberState,
    /// The partitions it owns now.
    pub(crate) assigned: Assignment,
    /// The partitions it must revoke before its epoch moves.
    pub(crate) pending_revocation: Assignment,
    /// When its session expires (not stored: every session restarts on a new coordinator).
    pub(crate) session_deadline: Instant,
    /// When it is fenced for not revoking in time (state UnrevokedPartitions only).
    pub(crate) revoke_deadline: Option<Instant>,
    /// Set for a member that uses the classic protocol.
    pub(crate) classic: Option<ClassicMember>,
}

impl Member {
    /// A member joining now, without partitions, at epoch 0.
    pub(crate) fn new(now: Instant) -> Member {
        Member {
            instance_id: None,
            rack: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_names: BTreeSet::new(),
            subscribed_regex: None,
            server_assignor: None,
            rebalance_timeout_ms: 300_000,
            epoch: 0,
            previous_epoch: 0,
            state: MemberState::Stable,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
            session_deadline: now,
            revoke_deadline: None,
            classic: None,
        }
    }

    /// Its session timeout: its JoinGroup's for a classic member, `group` otherwise.
    pub(crate) fn session_timeout(&self, group: std::time::Duration) -> std::time::Duration {
        match &self.classic {
            Some(c) => {
                std::time::Duration::from_millis(u64::try_from(c.session_timeout_ms).unwrap_or(0))
            }
            None => group,
        }
    }

    /// Whether it owns (assigned or pending revocation) partition `p` of topic `t`.
    pub(crate) fn owns(&self, t: &kafka_proto::Uuid, p: i32) -> bool {
        contains(&self.assigned, t, p) || contains(&self.pending_revocation, t, p)
    }
}

/// Whether `a` holds partition `p` of topic `t`.
pub(crate) fn contains(a: &Assignment, t: &kafka_proto::Uuid, p: i32) -> bool {
    a.get(t).is_some_and(|ps| ps.contains(&p))
}

/// Partitions of `a` that are not in `b`.
pub(crate) fn minus(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in a {
        let rest: BTreeSet<i32> = ps.iter().copied().filter(|p| !contains(b, t, *p)).collect();
        if !rest.is_empty() {
            out.insert(*t, rest);
        }
    }
    out
}

/// Partitions in both `a` and `b`.
pub(crate) fn intersect(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in a {
        let both: BTreeSet<i32> = ps.iter().copied().filter(|p| contains(b, t, *p)).collect();
        if !both.is_empty() {
            out.insert(*t, both);
        }
    }
    out
}

/// `a` with the partitions of `b` added.
pub(crate) fn union(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = a.clone();
    for (t, ps) in b {
        out.entry(*t).or_default().extend(ps.iter().copied());
    }
    out
}

/// Whether every partition of `a` is in `b`.
pub(crate) fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    a.iter()
        .all(|(t, ps)| ps.iter().all(|p| contains(b, t, *p)))
}

/// Where one reconciliation step leaves a member.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reconciled {
    /// Its epoch.
    pub(crate) epoch: i32,
    /// Its previous epoch.
    pub(crate) previous_epoch: i32,
    /// Its state.
    pub(crate) state: MemberState,
    /// What it owns.
    pub(crate) assigned: Assignment,
    /// What it must revoke.
    pub(crate) pending_revocation: Assignment,
}

/// One reconciliation step of `m` towards `target` at `target_epoch` (Kafka's current
/// assignment builder). `owned`: the partitions the member says it owns (None: it did not
/// say); `owned_by_other(t, p)`: another member still owns the partition.
pub(crate) fn reconcile(
    m: &Member,
    target_epoch: i32,
    target: &Assignment,
    owned: Option<&Assignment>,
    owned_by_other: &dyn Fn(&kafka_proto::Uuid, i32) -> bool,
) -> Reconciled {
    let unchanged = Reconciled {
        epoch: m.epoch,
        previous_epoch: m.previous_epoch,
        state: m.state,
        assigned: m.assigned.clone(),
        pending_revocation: m.pending_revocation.clone(),
    };
    match m.state {
        MemberState::UnrevokedPartitions => {
            // It moves on once it no longer reports owning what it must revoke.
            let revoked = owned.is_some_and(|o| intersect(o, &m.pending_revocation).is_empty());
            if !revoked {
                return unchanged;
            }
            advance(m, &m.assigned, target_epoch, target, owned_by_other)
        }
        MemberState::Stable | MemberState::UnreleasedPartitions => {
            if m.epoch == target_epoch && m.state == MemberState::Stable {
                return unchanged;
            }
            advance(m, &m.assigned, target_epoch, target, owned_by_other)
        }
    }
}

/// From `assigned` (nothing pending revocation) towards `target`.
fn advance(
    m: &Member,
    assigned: &Assignment,
    target_epoch: i32,
    target: &Assignment,
    owned_by_other: &dyn Fn(&kafka_proto::Uuid, i32) -> bool,
) -> Reconciled {
    let keep = intersect(assigned, target);
    let revoke = minus(assigned, target);
    if !revoke.is_empty() {
        return Reconciled {
            epoch: m.epoch,
            previous_epoch: m.previous_epoch,
            state: MemberState::UnrevokedPartitions,
            assigned: keep,
            pending_revocation: revoke,
        };
    }
    let wanted = minus(target, &keep);
    let mut free = Assignment::new();
    let mut unreleased = false;
    for (t, ps) in &wanted {
        for p in ps {
            if owned_by_other(t, *p) {
                unreleased = true;
            } else {
                free.entry(*t).or_default().insert(*p);
            }
        }
    }
    let (epoch, previous_epoch) = if m.epoch == target_epoch {
        (m.epoch, m.previous_epoch)
    } else {
        (target_epoch, m.epoch)
    };
    Reconciled {
        epoch,
        previous_epoch,
        state: if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        },
        assigned: union(&keep, &free),
        pending_revocation: Assignment::new(),
    }
}
