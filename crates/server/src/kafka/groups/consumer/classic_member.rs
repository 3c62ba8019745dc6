//! Classic-protocol members inside a consumer-protocol group (as Kafka 4.1): a classic
//! JoinGroup whose `consumer` protocol metadata (a ConsumerProtocolSubscription) gives its
//! subscribed topics and owned partitions joins as a member of type classic; the group's
//! server-side assignor assigns it like any member; its JoinGroup answers its member epoch as
//! the generation, its SyncGroup its current assignment (a ConsumerProtocolAssignment); its
//! Heartbeat gets REBALANCE_IN_PROGRESS while it must rejoin to move towards its target
//! (the group epoch moved past its epoch, it must revoke partitions, or partitions it waits
//! for were released); its session timeout is its JoinGroup's. Pure: the caller passes `now`
//! and the [`Context`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use kafka_proto::error_code::ErrorCode;

use super::assignors::Assignment;
use super::classic_protocol::{decode_subscription, encode_assignment, CONSUMER_PROTOCOL_TYPE};
use super::group::ConsumerGroup;
use super::member::{minus, ClassicMember, MemberState};
use super::types::{Context, HeartbeatParams, TopicView};

/// A classic JoinGroup on a consumer group (the member id already resolved: a new member
/// has been given one).
#[derive(Debug, Clone)]
pub(crate) struct ClassicJoin {
    /// The member id.
    pub(crate) member_id: String,
    /// Whether the member is new (its id was just generated).
    pub(crate) new_member: bool,
    /// Static instance id.
    pub(crate) instance_id: Option<String>,
    /// The client's `client.id`.
    pub(crate) client_id: String,
    /// The client's address.
    pub(crate) client_host: String,
    /// Its session timeout.
    pub(crate) session_timeout_ms: i32,
    /// Its rebalance timeout.
    pub(crate) rebalance_timeout_ms: i32,
    /// Its protocol type (must be `consumer`).
    pub(crate) protocol_type: String,
    /// Its protocols (name, metadata).
    pub(crate) protocols: Vec<(String, Vec<u8>)>,
}

/// What a classic member's JoinGroup is answered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClassicJoined {
    /// Its member epoch (the generation it syncs and heartbeats with).
    pub(crate) generation: i32,
    /// The protocol name (its first).
    pub(crate) protocol_name: String,
}

/// `a` by topic name (topics no longer in the cluster are left out).
pub(crate) fn by_name(a: &Assignment, topics: &dyn TopicView) -> BTreeMap<String, Vec<i32>> {
    let mut out = BTreeMap::new();
    if a.is_empty() {
        return out;
    }
    for name in topics.names() {
        if let Some((id, _)) = topics.topic(&name) {
            if let Some(ps) = a.get(&id) {
                out.insert(name, ps.iter().copied().collect());
            }
        }
    }
    out
}

/// Partitions by topic name to partitions by topic id (unknown topics left out).
pub(crate) fn by_id(a: &BTreeMap<String, Vec<i32>>, topics: &dyn TopicView) -> Assignment {
    let mut out = Assignment::new();
    for (name, ps) in a {
        if let Some((id, _)) = topics.topic(name) {
            let set: BTreeSet<i32> = ps.iter().copied().collect();
            if !set.is_empty() {
                out.entry(id).or_default().extend(set);
            }
        }
    }
    out
}

impl ConsumerGroup {
    /// Whether a member with `protocols` may join next to the classic members other than
    /// `member_id` (Kafka's `supportsClassicProtocols`): one protocol name they all support.
    fn supports_classic(&self, member_id: &str, protocols: &[(String, Vec<u8>)]) -> bool {
        let others: Vec<&ClassicMember> = self
            .members
            .iter()
            .filter(|(id, _)| id.as_str() != member_id)
            .filter_map(|(_, m)| m.classic.as_ref())
            .collect();
        others.is_empty()
            || protocols.iter().any(|(name, _)| {
                others
                    .iter()
                    .all(|c| c.protocols.iter().any(|(n, _)| n == name))
            })
    }

    /// A classic JoinGroup: the member joins (or rejoins) with the subscription and owned
    /// partitions of its first protocol's metadata and moves one step towards its target.
    pub(crate) fn classic_join(
        &mut self,
        j: &ClassicJoin,
        ctx: &Context<'_>,
        now: Instant,
    ) -> Result<ClassicJoined, (ErrorCode, String)> {
        let inconsistent = |m: &str| Err((ErrorCode::InconsistentGroupProtocol, m.to_owned()));
        if j.protocol_type != CONSUMER_PROTOCOL_TYPE || j.protocols.is_empty() {
            return inconsistent("The group uses the consumer protocol.");
        }
        if !self.supports_classic(&j.member_id, &j.protocols) {
            return inconsistent("The member's protocols are not supported by the group.");
        }
        let Some(sub) = j
            .protocols
            .first()
            .and_then(|(_, m)| decode_subscription(m))
        else {
            return inconsistent("The member's subscription does not parse.");
        };
        if !j.new_member {
            // A member id the group does not know joins (it was handed out with
            // MEMBER_ID_REQUIRED); one of a consumer-protocol member does not.
            match self.members.get(&j.member_id) {
                Some(m) if m.classic.is_some() => {}
                None => {}
                _ => {
                    return Err((
                        ErrorCode::UnknownMemberId,
                        format!("Member {} is not a member of the group.", j.member_id),
                    ))
                }
            }
        }
        let p = HeartbeatParams {
            member_id: j.member_id.clone(),
            member_epoch: 0,
            instance_id: j.instance_id.clone(),
            rack: sub.rack.clone().filter(|r| !r.is_empty()),
            rebalance_timeout_ms: j.rebalance_timeout_ms,
            subscribed_names: Some(sub.topics.clone()),
            subscribed_regex: None,
            server_assignor: None,
            owned: Some(by_id(&sub.owned, ctx.topics)),
            client_id: j.client_id.clone(),
            client_host: j.client_host.clone(),
            classic: Some(ClassicMember {
                session_timeout_ms: j.session_timeout_ms,
                protocols: j.protocols.clone(),
            }),
        };
        let o = self.heartbeat(&p, ctx, now);
        if o.error != ErrorCode::None {
            return Err((o.error, o.message.unwrap_or_default()));
        }
        Ok(ClassicJoined {
            generation: o.member_epoch,
            protocol_name: j
                .protocols
                .first()
                .map(|(n, _)| n.clone())
                .unwrap_or_default(),
        })
    }

    /// The classic member `member_id` (UNKNOWN_MEMBER_ID when there is none or it uses the
    /// consumer protocol; FENCED_INSTANCE_ID when `instance_id` is held by another member;
    /// ILLEGAL_GENERATION when `generation` is not its epoch); its session is renewed.
    fn classic_checked(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        ctx: &Context<'_>,
        now: Instant,
    ) -> Result<(), ErrorCode> {
        match self.members.get(member_id) {
            Some(m) if m.classic.is_some() => {}
            _ => return Err(ErrorCode::UnknownMemberId),
        }
        if let Some(instance) = instance_id {
            if self.static_member(instance).map(String::as_str) != Some(member_id) {
                return Err(ErrorCode::FencedInstanceId);
            }
        }
        let Some(m) = self.members.get_mut(member_id) else {
            return Err(ErrorCode::UnknownMemberId);
        };
        if generation != m.epoch {
            return Err(ErrorCode::IllegalGeneration);
        }
        m.session_deadline = now + m.session_timeout(ctx.settings.session_timeout);
        Ok(())
    }

    /// A classic SyncGroup: the member's protocol name and its current assignment as a
    /// ConsumerProtocolAssignment (at its subscription's version).
    pub(crate) fn classic_sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol: (Option<&str>, Option<&str>),
        ctx: &Context<'_>,
        now: Instant,
    ) -> Result<(String, Vec<u8>), ErrorCode> {
        self.classic_checked(member_id, instance_id, generation, ctx, now)?;
        let Some(m) = self.members.get(member_id) else {
            return Err(ErrorCode::UnknownMemberId);
        };
        let Some(c) = &m.classic else {
            return Err(ErrorCode::UnknownMemberId);
        };
        let (protocol_type, protocol_name) = protocol;
        if protocol_type.is_some_and(|t| t != CONSUMER_PROTOCOL_TYPE)
            || protocol_name.is_some_and(|n| n != c.protocol_name())
        {
            return Err(ErrorCode::InconsistentGroupProtocol);
        }
        let assignment =
            encode_assignment(c.subscription_version(), &by_name(&m.assigned, ctx.topics));
        Ok((c.protocol_name().to_owned(), assignment))
    }

    /// A classic Heartbeat: NONE, or REBALANCE_IN_PROGRESS when the member must rejoin to
    /// move towards its target (as Kafka's `classicGroupHeartbeatToConsumerGroup`).
    pub(crate) fn classic_heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        ctx: &Context<'_>,
        now: Instant,
    ) -> ErrorCode {
        if let Err(e) = self.classic_checked(member_id, instance_id, generation, ctx, now) {
            return e;
        }
        let Some(m) = self.members.get(member_id) else {
            return ErrorCode::UnknownMemberId;
        };
        let released = m.state == MemberState::UnreleasedPartitions && {
            let target = self.target.get(member_id).cloned().unwrap_or_default();
            let wanted = minus(&target, &m.assigned);
            wanted.iter().any(|(t, ps)| {
                ps.iter().any(|p| {
                    !self
                        .members
                        .iter()
                        .any(|(id, om)| id != member_id && om.owns(t, *p))
                })
            })
        };
        if m.epoch < self.group_epoch || m.state == MemberState::UnrevokedPartitions || released {
            ErrorCode::RebalanceInProgress
        } else {
            ErrorCode::None
        }
    }

    /// A classic LeaveGroup of one member (by instance id when given): it leaves the group
    /// (the group epoch moves so the others are reassigned).
    pub(crate) fn classic_leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> ErrorCode {
        let id = match instance_id {
            Some(instance) => match self.static_member(instance).cloned() {
                None => return ErrorCode::UnknownMemberId,
                Some(holder) if !member_id.is_empty() && holder != member_id => {
                    return ErrorCode::FencedInstanceId
                }
                Some(holder) => holder,
            },
            None => member_id.to_owned(),
        };
        match self.members.get(&id) {
            Some(m) if m.classic.is_some() => {
                self.remove_member(&id);
                ErrorCode::None
            }
            _ => ErrorCode::UnknownMemberId,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kafka_proto::Uuid;

    use super::super::assignors::{by_name as assignor_by_name, Assignor, DEFAULT_ASSIGNOR};
    use super::super::classic_protocol::decode_assignment;
    use super::super::types::Settings;
    use super::*;

    struct OneTopic;

    impl TopicView for OneTopic {
        fn topic(&self, name: &str) -> Option<(Uuid, u32)> {
            (name == "t").then_some((Uuid([7; 16]), 4))
        }
        fn names(&self) -> Vec<String> {
            vec!["t".into()]
        }
    }

    fn assignor(name: Option<&str>) -> Option<&'static dyn Assignor> {
        assignor_by_name(name.unwrap_or(DEFAULT_ASSIGNOR))
    }

    /// A ConsumerProtocolSubscription v0 of topic `t`.
    fn subscription() -> Vec<u8> {
        let mut m = vec![0, 0, 0, 0, 0, 1, 0, 1, b't'];
        m.extend_from_slice(&(-1i32).to_be_bytes());
        m
    }

    fn join(id: &str) -> ClassicJoin {
        ClassicJoin {
            member_id: id.into(),
            new_member: true,
            instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 20_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), subscription())],
        }
    }

    #[test]
    fn classic_members_join_sync_heartbeat_and_are_stored() {
        let settings = Settings::default();
        let ctx = Context {
            topics: &OneTopic,
            settings: &settings,
            assignor: &assignor,
        };
        let now = Instant::now();
        let mut g = ConsumerGroup::default();
        let j = g.classic_join(&join("x"), &ctx, now).unwrap();
        assert_eq!((j.generation, j.protocol_name.as_str()), (1, "range"));
        let (name, bytes) = g
            .classic_sync("x", None, 1, (None, None), &ctx, now)
            .unwrap();
        assert_eq!(name, "range");
        assert_eq!(decode_assignment(&bytes).unwrap()["t"], vec![0, 1, 2, 3]);
        assert_eq!(
            g.classic_heartbeat("x", None, 1, &ctx, now),
            ErrorCode::None
        );
        assert_eq!(
            g.classic_heartbeat("x", None, 2, &ctx, now),
            ErrorCode::IllegalGeneration
        );
        // A second member: x must rejoin (and give up half).
        g.classic_join(&join("y"), &ctx, now).unwrap();
        assert_eq!(
            g.classic_heartbeat("x", None, 1, &ctx, now),
            ErrorCode::RebalanceInProgress
        );
        // Its own session timeout; the record keeps what it joined with.
        assert_eq!(
            g.members["x"].session_deadline,
            now + Duration::from_secs(10)
        );
        let r = g.record();
        let later = now + Duration::from_secs(100);
        let back = ConsumerGroup::from_record(&r, later, Duration::from_secs(45));
        assert_eq!(back.members["x"].classic, g.members["x"].classic);
        assert_eq!(
            back.members["x"].session_deadline,
            later + Duration::from_secs(10)
        );
        assert_eq!(back.record(), r);
        // A consumer-protocol member's id is not a classic member's.
        assert_eq!(g.classic_leave("nobody", None), ErrorCode::UnknownMemberId);
        assert_eq!(g.classic_leave("y", None), ErrorCode::None);
        assert!(!g.members.contains_key("y"));
    }
}
