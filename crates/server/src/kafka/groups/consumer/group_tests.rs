//! The consumer group state machine: joins, reconciliation (revoke before the new epoch,
//! unreleased partitions), epochs and fencing, leaving, static members, timeouts, regexes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_proto::error_code::ErrorCode;
use kafka_proto::Uuid;

use super::assignors::{Assignment, Assignor, GroupAssignment, GroupSpec};
use super::group::{validate, ConsumerGroup, ConsumerGroupState};
use super::member::MemberState;
use super::types::{Context, HeartbeatOutcome, HeartbeatParams, Settings, TopicView};

/// Round robin over (topic, partition) in order, members in id order (tests only).
struct RoundRobin;

impl Assignor for RoundRobin {
    fn name(&self) -> &'static str {
        "uniform"
    }
    fn assign(&self, group: &GroupSpec) -> GroupAssignment {
        let mut out: GroupAssignment = group
            .members
            .keys()
            .map(|id| (id.clone(), Assignment::new()))
            .collect();
        for (t, count) in &group.partitions_by_topic {
            let subs: Vec<&String> = group
                .members
                .iter()
                .filter(|(_, m)| m.subscribed.contains(t))
                .map(|(id, _)| id)
                .collect();
            if subs.is_empty() {
                continue;
            }
            for p in 0..*count {
                let id = subs[p as usize % subs.len()];
                out.entry(id.clone())
                    .or_default()
                    .entry(*t)
                    .or_default()
                    .insert(p as i32);
            }
        }
        out
    }
}

static RR: RoundRobin = RoundRobin;

fn assignor(name: Option<&str>) -> Option<&'static dyn Assignor> {
    match name {
        None | Some("uniform") => Some(&RR),
        _ => None,
    }
}

struct Topics(BTreeMap<String, (Uuid, u32)>);

impl TopicView for Topics {
    fn topic(&self, name: &str) -> Option<(Uuid, u32)> {
        self.0.get(name).copied()
    }
    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}

fn tid(n: u8) -> Uuid {
    Uuid([n; 16])
}

fn topics(list: &[(&str, u8, u32)]) -> Topics {
    Topics(
        list.iter()
            .map(|(n, id, c)| (n.to_string(), (tid(*id), *c)))
            .collect(),
    )
}

struct Fixture {
    g: ConsumerGroup,
    topics: Topics,
    settings: Settings,
    now: Instant,
}

impl Fixture {
    fn new(t: Topics) -> Fixture {
        Fixture {
            g: ConsumerGroup::default(),
            topics: t,
            settings: Settings {
                session_timeout: Duration::from_secs(45),
                heartbeat_interval_ms: 5000,
                max_size: 3,
                ..Settings::default()
            },
            now: Instant::now(),
        }
    }

    fn beat(&mut self, p: HeartbeatParams) -> HeartbeatOutcome {
        if let Err((e, m)) = validate(&p, 1) {
            return HeartbeatOutcome::error(e, m, &p.member_id);
        }
        let ctx = Context {
            topics: &self.topics,
            settings: &self.settings,
            assignor: &assignor,
        };
        self.g.heartbeat(&p, &ctx, self.now)
    }

    fn join(&mut self, id: &str, topics: &[&str]) -> HeartbeatOutcome {
        self.beat(join(id, topics))
    }

    /// A heartbeat at `epoch` reporting `owned`.
    fn ack(&mut self, id: &str, epoch: i32, owned: &Assignment) -> HeartbeatOutcome {
        self.beat(HeartbeatParams {
            member_id: id.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: -1,
            owned: Some(owned.clone()),
            ..Default::default()
        })
    }
}

fn join(id: &str, topics: &[&str]) -> HeartbeatParams {
    HeartbeatParams {
        member_id: id.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 10_000,
        subscribed_names: Some(topics.iter().map(|s| s.to_string()).collect()),
        owned: Some(Assignment::new()),
        ..Default::default()
    }
}

fn parts(a: &Assignment) -> BTreeSet<(Uuid, i32)> {
    a.iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
        .collect()
}

#[test]
fn first_member_gets_every_partition_at_epoch_one() {
    let mut f = Fixture::new(topics(&[("t", 1, 4)]));
    let o = f.join("a", &["t"]);
    assert_eq!(o.error, ErrorCode::None);
    assert_eq!(o.member_epoch, 1);
    assert_eq!(o.heartbeat_interval_ms, 5000);
    assert_eq!(parts(o.assignment.as_ref().unwrap()).len(), 4);
    assert_eq!(f.g.state(), ConsumerGroupState::Stable);
    assert!(f.g.dirty);
    // An idle heartbeat changes nothing and sends no assignment.
    f.g.dirty = false;
    let a = o.assignment.unwrap();
    let o = f.ack("a", 1, &a);
    assert_eq!(
        (o.error, o.member_epoch, o.assignment),
        (ErrorCode::None, 1, None)
    );
    assert!(!f.g.dirty, "an idle heartbeat writes nothing");
}

#[test]
fn a_joining_member_waits_for_revocation_then_gets_the_released_partitions() {
    let mut f = Fixture::new(topics(&[("t", 1, 4)]));
    let a_all = f.join("a", &["t"]).assignment.unwrap();
    // b joins: the target moves two partitions to b; b gets the epoch but must wait for them.
    let o = f.join("b", &["t"]);
    assert_eq!(o.member_epoch, 2);
    assert!(parts(o.assignment.as_ref().unwrap()).is_empty());
    assert_eq!(f.g.members["b"].state, MemberState::UnreleasedPartitions);
    // a must revoke first: it keeps its epoch and is told its smaller assignment.
    let o = f.ack("a", 1, &a_all);
    assert_eq!(o.member_epoch, 1);
    let a_kept = o.assignment.unwrap();
    assert_eq!(parts(&a_kept).len(), 2);
    assert_eq!(f.g.members["a"].state, MemberState::UnrevokedPartitions);
    assert_eq!(f.g.state(), ConsumerGroupState::Reconciling);
    // Still owning them: nothing moves.
    assert_eq!(f.ack("a", 1, &a_all).member_epoch, 1);
    assert!(f.ack("b", 2, &Assignment::new()).assignment.is_none());
    // a reports the revocation: it gets the new epoch.
    let o = f.ack("a", 1, &a_kept);
    assert_eq!(o.member_epoch, 2);
    // b now gets the released partitions.
    let o = f.ack("b", 2, &Assignment::new());
    let b = o.assignment.unwrap();
    assert_eq!(parts(&b).len(), 2);
    assert!(parts(&b).is_disjoint(&parts(&a_kept)));
    assert_eq!(f.g.state(), ConsumerGroupState::Stable);
}

#[test]
fn epochs_are_fenced_as_kafka_does_with_a_lost_response_tolerated() {
    let mut f = Fixture::new(topics(&[("t", 1, 2)]));
    let a = f.join("a", &["t"]).assignment.unwrap();
    assert_eq!(f.ack("a", 2, &a).error, ErrorCode::FencedMemberEpoch);
    assert_eq!(f.ack("zz", 1, &a).error, ErrorCode::UnknownMemberId);
    // b joins; a revokes one partition and moves to epoch 2.
    f.join("b", &["t"]);
    let kept = f.ack("a", 1, &a).assignment.unwrap();
    assert_eq!(f.ack("a", 1, &kept).member_epoch, 2);
    // The epoch-2 answer was lost: a heartbeats at 1 with a subset of its assignment.
    let o = f.ack("a", 1, &kept);
    assert_eq!((o.error, o.member_epoch), (ErrorCode::None, 2));
    // At epoch 1 owning more than assigned, it is fenced.
    assert_eq!(f.ack("a", 1, &a).error, ErrorCode::FencedMemberEpoch);
    // A rejoin (epoch 0) reporting partitions is invalid.
    assert_eq!(
        f.ack("a", 0, &kept).error,
        ErrorCode::InvalidRequest,
        "a rejoin owns nothing"
    );
}

#[test]
fn leaving_reassigns_to_the_others() {
    let mut f = Fixture::new(topics(&[("t", 1, 4)]));
    f.join("a", &["t"]);
    f.join("b", &["t"]);
    let o = f.beat(HeartbeatParams {
        member_id: "a".into(),
        member_epoch: -1,
        ..Default::default()
    });
    assert_eq!((o.error, o.member_epoch), (ErrorCode::None, -1));
    assert!(!f.g.members.contains_key("a"));
    let o = f.ack("b", 2, &Assignment::new());
    assert_eq!(o.member_epoch, 3);
    assert_eq!(parts(&o.assignment.unwrap()).len(), 4);
    // Leaving again: unknown.
    let o = f.beat(HeartbeatParams {
        member_id: "a".into(),
        member_epoch: -1,
        ..Default::default()
    });
    assert_eq!(o.error, ErrorCode::UnknownMemberId);
}

#[test]
fn sessions_expire_and_slow_revokers_are_fenced() {
    let mut f = Fixture::new(topics(&[("t", 1, 4)]));
    let a = f.join("a", &["t"]).assignment.unwrap();
    f.now += Duration::from_secs(30);
    f.join("b", &["t"]);
    f.ack("a", 1, &a);
    assert!(f.g.members["a"].revoke_deadline.is_some());
    // a does not revoke within its 10 s rebalance timeout: fenced.
    let due = f.g.next_deadline().unwrap();
    assert!(due <= f.now + Duration::from_secs(10));
    assert!(f.g.tick(f.now + Duration::from_secs(11)));
    assert!(!f.g.members.contains_key("a"));
    // b's session (renewed at its join) expires 45 s after it.
    assert!(!f.g.tick(f.now + Duration::from_secs(44)));
    assert!(f.g.tick(f.now + Duration::from_secs(46)));
    assert!(f.g.members.is_empty());
    assert_eq!(f.g.state(), ConsumerGroupState::Empty);
}

#[test]
fn static_member_keeps_its_assignment_across_a_static_leave() {
    let mut f = Fixture::new(topics(&[("t", 1, 4)]));
    let mut p = join("a1", &["t"]);
    p.instance_id = Some("i".into());
    let a = f.beat(p.clone()).assignment.unwrap();
    f.join("b", &["t"]);
    let kept = f.ack("a1", 1, &a).assignment.unwrap();
    f.ack("a1", 1, &kept);
    let epoch_before = f.g.members["a1"].epoch;
    let group_epoch = f.g.group_epoch;
    // Another member cannot take the instance while a1 holds it.
    let mut other = p.clone();
    other.member_id = "a2".into();
    assert_eq!(f.beat(other.clone()).error, ErrorCode::UnreleasedInstanceId);
    // Static leave with the wrong member id: fenced.
    let mut leave = HeartbeatParams {
        member_id: "a2".into(),
        member_epoch: -2,
        instance_id: Some("i".into()),
        ..Default::default()
    };
    assert_eq!(f.beat(leave.clone()).error, ErrorCode::FencedInstanceId);
    leave.member_id = "a1".into();
    assert_eq!(f.beat(leave).member_epoch, -2);
    assert_eq!(
        f.g.group_epoch, group_epoch,
        "a static leave does not rebalance"
    );
    // The instance rejoins under a new member id: same epoch, same assignment.
    let o = f.beat(other);
    assert_eq!(o.error, ErrorCode::None);
    assert_eq!(o.member_epoch, epoch_before);
    assert_eq!(o.assignment.unwrap(), kept);
    assert!(!f.g.members.contains_key("a1"));
    assert_eq!(f.g.group_epoch, group_epoch);
    // The old member id is fenced for the instance.
    let mut stale = join("a1", &["t"]);
    stale.member_epoch = epoch_before;
    stale.instance_id = Some("i".into());
    stale.owned = Some(kept.clone());
    assert_eq!(f.beat(stale).error, ErrorCode::UnknownMemberId);
}

#[test]
fn validation_and_limits() {
    let mut f = Fixture::new(topics(&[("t", 1, 4)]));
    assert_eq!(f.join("", &["t"]).error, ErrorCode::InvalidRequest);
    let mut p = join("a", &["t"]);
    p.owned = None;
    assert_eq!(f.beat(p).error, ErrorCode::InvalidRequest);
    let mut p = join("a", &["t"]);
    p.server_assignor = Some("nope".into());
    assert_eq!(f.beat(p).error, ErrorCode::UnsupportedAssignor);
    let mut p = join("a", &[]);
    p.subscribed_names = None;
    p.subscribed_regex = Some("(".into());
    assert_eq!(f.beat(p).error, ErrorCode::InvalidRegularExpression);
    f.join("a", &["t"]);
    f.join("b", &["t"]);
    f.join("c", &["t"]);
    assert_eq!(f.join("d", &["t"]).error, ErrorCode::GroupMaxSizeReached);
    // v0: an empty member id on a join is the coordinator's to fill in.
    assert!(validate(&join("", &["t"]), 0).is_ok());
}

#[test]
fn regex_subscriptions_follow_created_topics() {
    let mut f = Fixture::new(topics(&[("orders-1", 1, 2), ("other", 2, 2)]));
    let mut p = join("a", &[]);
    p.subscribed_names = None;
    p.subscribed_regex = Some("orders-.*".into());
    let o = f.beat(p);
    let a = o.assignment.unwrap();
    assert_eq!(a.keys().copied().collect::<Vec<_>>(), vec![tid(1)]);
    // A matching topic is created: picked up once the resolution is refreshed.
    f.topics.0.insert("orders-2".into(), (tid(3), 1));
    f.now += Duration::from_secs(2);
    let o = f.ack("a", 1, &a);
    assert_eq!(o.member_epoch, 2);
    assert_eq!(parts(&o.assignment.unwrap()).len(), 3);
}

#[test]
fn growing_a_topic_moves_the_group_epoch() {
    let mut f = Fixture::new(topics(&[("t", 1, 2)]));
    let a = f.join("a", &["t"]).assignment.unwrap();
    f.topics.0.insert("t".into(), (tid(1), 3));
    let o = f.ack("a", 1, &a);
    assert_eq!(o.member_epoch, 2);
    assert_eq!(parts(&o.assignment.unwrap()).len(), 3);
}

#[test]
fn the_stored_record_restores_epochs_and_assignments() {
    let mut f = Fixture::new(topics(&[("t", 1, 4)]));
    let a = f.join("a", &["t"]).assignment.unwrap();
    f.join("b", &["t"]);
    f.ack("a", 1, &a);
    let r = f.g.record();
    let later = f.now + Duration::from_secs(100);
    let g = ConsumerGroup::from_record(&r, later, Duration::from_secs(45));
    assert_eq!(g.record(), r);
    assert_eq!(g.members["a"].state, MemberState::UnrevokedPartitions);
    assert_eq!(
        g.members["a"].session_deadline,
        later + Duration::from_secs(45)
    );
    assert_eq!(g.target, f.g.target);
    assert_eq!((g.group_epoch, g.assignment_epoch), (2, 2));
}
