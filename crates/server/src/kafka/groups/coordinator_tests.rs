//! The coordinator's tests: membership, rebalances, sessions, terms, static members, the
//! group-count limit under concurrency, and loading the groups a previous coordinator stored.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use tokio::sync::oneshot;

use super::coordinator::Coordinator;
use super::limits::{
    rebalance_timeout, INITIAL_REBALANCE_DELAY, MAX_GROUPS, MAX_REBALANCE_TIMEOUT, TICK,
};
use super::types::{
    GroupListing, GroupState, GroupStore, JoinOutcome, JoinParams, Pending, SyncParams,
};

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
    let [(group, GroupStore::Classic(Some(record)))] = records.as_slice() else {
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
    next.load(2, || (stored, Vec::new()), Duration::from_secs(45), t2);
    next.load(
        2,
        || panic!("loaded once per term"),
        Duration::from_secs(45),
        t2,
    );
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
    let GroupStore::Classic(Some(replaced)) = &records[0].1 else {
        panic!("{records:?}")
    };
    assert_eq!(replaced.members[1].member_id, o.member_id);
    // Both leave: the group's record goes.
    let left = next.leave(
        2,
        "g",
        &[(a.clone(), None), (String::new(), Some("i-b".into()))],
        t3,
    );
    assert_eq!(left, vec![ErrorCode::None, ErrorCode::None]);
    let (_, _, records) = next.take_records().unwrap();
    assert_eq!(records, vec![("g".to_string(), GroupStore::Classic(None))]);
    // Stopping to lead drops what is not written yet.
    next.tick(None, t3);
    assert!(next.take_records().is_none());
}
