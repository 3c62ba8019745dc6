//! Consumer groups of the consumer group protocol (KIP-848) against an in-process 3-node
//! cluster, with raw ConsumerGroupHeartbeat requests: three members converge to a balanced
//! assignment with only the moved partitions revoked (each revoked before it is given to the
//! newcomer); fencing; describe, list and delete; offsets with member epochs; a leave and a
//! session timeout reassign; a coordinator kill keeps every member's epoch and assignment; a
//! static member's instance comes back with its epoch and partitions; a regex subscription
//! follows a created topic; bad requests get Kafka 4.1's errors.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster_configs;
use common::kafka::KafkaConn;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::consumer_group_describe_request::ConsumerGroupDescribeRequest;
use kafka_proto::messages::consumer_group_describe_response::DescribedGroup;
use kafka_proto::messages::consumer_group_heartbeat_request::{
    ConsumerGroupHeartbeatRequest, TopicPartitions,
};
use kafka_proto::messages::consumer_group_heartbeat_response::ConsumerGroupHeartbeatResponse;
use kafka_proto::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_proto::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_proto::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use kafka_proto::messages::list_groups_request::ListGroupsRequest;
use kafka_proto::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_proto::messages::offset_fetch_request::{
    OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_proto::Uuid;
use vdl_server::Node;

const TOPIC: &str = "cg-topic";
const GROUP: &str = "cg";

// Error codes.
const NONE: i16 = 0;
const UNKNOWN_MEMBER_ID: i16 = 25;
const MEMBER_ID_REQUIRED: i16 = 79;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;
const FENCED_MEMBER_EPOCH: i16 = 110;
const STALE_MEMBER_EPOCH: i16 = 113;

type Partitions = BTreeSet<(Uuid, i32)>;

/// A consumer as the protocol sees it: its id, epoch and what it owns (it revokes and takes
/// what each response says at once, and reports it in its next heartbeat).
struct Member {
    id: String,
    epoch: i32,
    owned: Partitions,
    /// Every partition it ever had taken away.
    revoked: Partitions,
}

fn owned_wire(p: &Partitions) -> Vec<TopicPartitions> {
    let mut by: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
    for (t, i) in p {
        by.entry(*t).or_default().push(*i);
    }
    by.into_iter()
        .map(|(topic_id, partitions)| TopicPartitions {
            topic_id,
            partitions,
            ..Default::default()
        })
        .collect()
}

fn heartbeat(
    c: &mut KafkaConn,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    match c
        .call(
            ApiKey::ConsumerGroupHeartbeat,
            1,
            &Request::ConsumerGroupHeartbeat(req),
        )
        .unwrap()
    {
        Response::ConsumerGroupHeartbeat(r) => r,
        other => panic!("{other:?}"),
    }
}

impl Member {
    fn join(c: &mut KafkaConn, id: &str) -> Member {
        let mut m = Member {
            id: id.into(),
            epoch: 0,
            owned: Partitions::new(),
            revoked: Partitions::new(),
        };
        let r = heartbeat(
            c,
            ConsumerGroupHeartbeatRequest {
                group_id: GROUP.into(),
                member_id: id.into(),
                member_epoch: 0,
                rebalance_timeout_ms: 10_000,
                subscribed_topic_names: Some(vec![TOPIC.into()]),
                topic_partitions: Some(Vec::new()),
                ..Default::default()
            },
        );
        assert_eq!(r.error_code, NONE, "{r:?}");
        m.apply(&r);
        m
    }

    fn apply(&mut self, r: &ConsumerGroupHeartbeatResponse) {
        assert_eq!(r.member_id.as_deref(), Some(self.id.as_str()));
        self.epoch = r.member_epoch;
        if let Some(a) = &r.assignment {
            let new: Partitions = a
                .topic_partitions
                .iter()
                .flat_map(|tp| tp.partitions.iter().map(move |p| (tp.topic_id, *p)))
                .collect();
            self.revoked.extend(self.owned.difference(&new).copied());
            self.owned = new;
        }
    }

    /// One heartbeat reporting what it owns; the response's error code.
    fn beat(&mut self, c: &mut KafkaConn) -> i16 {
        let r = heartbeat(
            c,
            ConsumerGroupHeartbeatRequest {
                group_id: GROUP.into(),
                member_id: self.id.clone(),
                member_epoch: self.epoch,
                topic_partitions: Some(owned_wire(&self.owned)),
                ..Default::default()
            },
        );
        if r.error_code == NONE {
            self.apply(&r);
        }
        r.error_code
    }
}

/// Heartbeats every member until they all own a disjoint cover of `partitions` at one epoch,
/// checking no partition is ever owned by two members at once.
fn converge(c: &mut KafkaConn, members: &mut [&mut Member], partitions: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for i in 0..members.len() {
            assert_eq!(members[i].beat(c), NONE);
            let mut seen = Partitions::new();
            for other in members.iter() {
                for p in &other.owned {
                    assert!(seen.insert(*p), "partition {p:?} owned twice");
                }
            }
        }
        let epoch = members[0].epoch;
        let total: usize = members.iter().map(|m| m.owned.len()).sum();
        if total == partitions && members.iter().all(|m| m.epoch == epoch) {
            return;
        }
        assert!(Instant::now() < deadline, "the group did not converge");
    }
}

fn describe(c: &mut KafkaConn) -> DescribedGroup {
    match c
        .call(
            ApiKey::ConsumerGroupDescribe,
            1,
            &Request::ConsumerGroupDescribe(ConsumerGroupDescribeRequest {
                group_ids: vec![GROUP.into()],
                ..Default::default()
            }),
        )
        .unwrap()
    {
        Response::ConsumerGroupDescribe(mut r) => r.groups.remove(0),
        other => panic!("{other:?}"),
    }
}

fn commit(c: &mut KafkaConn, member: &str, epoch: i32, offset: i64) -> i16 {
    let req = Request::OffsetCommit(OffsetCommitRequest {
        group_id: GROUP.into(),
        generation_id_or_member_epoch: epoch,
        member_id: member.into(),
        topics: vec![OffsetCommitRequestTopic {
            name: TOPIC.into(),
            partitions: vec![OffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: offset,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    match c.call(ApiKey::OffsetCommit, 9, &req).unwrap() {
        Response::OffsetCommit(r) => r.topics[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// OffsetFetch v9 of partition 0 as `member` at `epoch`: (group error, offset).
fn fetch(c: &mut KafkaConn, member: Option<&str>, epoch: i32) -> (i16, i64) {
    let req = Request::OffsetFetch(OffsetFetchRequest {
        groups: vec![OffsetFetchRequestGroup {
            group_id: GROUP.into(),
            member_id: member.map(str::to_owned),
            member_epoch: epoch,
            topics: Some(vec![OffsetFetchRequestTopics {
                name: TOPIC.into(),
                partition_indexes: vec![0],
                ..Default::default()
            }]),
            ..Default::default()
        }],
        ..Default::default()
    });
    match c.call(ApiKey::OffsetFetch, 9, &req).unwrap() {
        Response::OffsetFetch(r) => {
            let g = &r.groups[0];
            let offset = g
                .topics
                .first()
                .map_or(-1, |t| t.partitions[0].committed_offset);
            (g.error_code, offset)
        }
        other => panic!("{other:?}"),
    }
}

/// ListGroups v5 with a type filter: (group id, type, state).
fn list(c: &mut KafkaConn, types: &[&str]) -> Vec<(String, String, String)> {
    let req = Request::ListGroups(ListGroupsRequest {
        types_filter: types.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    });
    match c.call(ApiKey::ListGroups, 5, &req).unwrap() {
        Response::ListGroups(r) => r
            .groups
            .into_iter()
            .map(|g| (g.group_id, g.group_type, g.group_state))
            .collect(),
        other => panic!("{other:?}"),
    }
}

fn delete(c: &mut KafkaConn) -> i16 {
    let req = Request::DeleteGroups(DeleteGroupsRequest {
        groups_names: vec![GROUP.into()],
        ..Default::default()
    });
    match c.call(ApiKey::DeleteGroups, 2, &req).unwrap() {
        Response::DeleteGroups(r) => r.results[0].error_code,
        other => panic!("{other:?}"),
    }
}

async fn cluster(dir: &std::path::Path, session_timeout: Duration) -> Vec<Arc<Node>> {
    let mut nodes = Vec::new();
    for mut c in cluster_configs(3, dir, &[]) {
        c.kafka.consumer_group_session_timeout = session_timeout;
        c.kafka.consumer_group_heartbeat_interval = Duration::from_millis(200);
        let n = Node::start(c).await.unwrap();
        n.serve_kafka().await.unwrap();
        nodes.push(n);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ready = common::metadata_leader(&nodes)
            .is_some_and(|l| nodes[l].metadata_group().unwrap().visible().leader_ready)
            && nodes.iter().all(|n| n.live_brokers().len() == 3);
        if ready {
            return nodes;
        }
        assert!(Instant::now() < deadline, "cluster not ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Connects to the coordinator (the metadata leader) and creates the 6-partition topic.
fn setup(coordinator: SocketAddr) -> KafkaConn {
    let mut c = KafkaConn::connect(coordinator).unwrap();
    assert_eq!(c.create_topic_with(TOPIC, 6).unwrap(), (NONE, 6));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_converge_fence_commit_describe_leave_expire_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(dir.path(), Duration::from_secs(3)).await;
    let leader = common::metadata_leader(&nodes).unwrap();
    let coordinator = common::kafka_addr(&nodes[leader]);
    let result = tokio::task::spawn_blocking(move || {
        let mut c = setup(coordinator);
        // The first member gets every partition at epoch 1.
        let mut a = Member::join(&mut c, "member-a");
        assert_eq!((a.epoch, a.owned.len()), (1, 6));
        // A second and a third member: only the partitions they get move, each revoked by its
        // owner before the newcomer gets it.
        let mut b = Member::join(&mut c, "member-b");
        converge(&mut c, &mut [&mut a, &mut b], 6);
        assert_eq!((a.owned.len(), b.owned.len()), (3, 3));
        assert_eq!(a.revoked, b.owned, "a gave up exactly what b got");
        let (a_before, b_before) = (a.owned.clone(), b.owned.clone());
        let mut m3 = Member::join(&mut c, "member-c");
        converge(&mut c, &mut [&mut a, &mut b, &mut m3], 6);
        assert_eq!(
            (a.owned.len(), b.owned.len(), m3.owned.len()),
            (2, 2, 2),
            "balanced"
        );
        assert!(a.owned.is_subset(&a_before) && b.owned.is_subset(&b_before));
        let moved: Partitions = a_before
            .difference(&a.owned)
            .chain(b_before.difference(&b.owned))
            .copied()
            .collect();
        assert_eq!(moved, m3.owned, "only the partitions c got were revoked");
        let epoch = a.epoch;
        assert_eq!(epoch, 3);

        // Fencing: an epoch the coordinator never gave, and an unknown member.
        let mut ahead = Member {
            id: a.id.clone(),
            epoch: epoch + 1,
            owned: a.owned.clone(),
            revoked: Partitions::new(),
        };
        assert_eq!(ahead.beat(&mut c), FENCED_MEMBER_EPOCH);
        let mut stranger = Member {
            id: "nobody".into(),
            epoch,
            owned: Partitions::new(),
            revoked: Partitions::new(),
        };
        assert_eq!(stranger.beat(&mut c), UNKNOWN_MEMBER_ID);

        // ConsumerGroupDescribe.
        let d = describe(&mut c);
        assert_eq!(d.error_code, NONE, "{d:?}");
        assert_eq!(
            (d.group_state.as_str(), d.group_epoch, d.assignment_epoch),
            ("Stable", 3, 3)
        );
        assert_eq!(d.assignor_name, "uniform");
        assert_eq!(d.members.len(), 3);
        for m in &d.members {
            assert_eq!(m.member_epoch, 3);
            assert_eq!(m.member_type, 1);
            assert_eq!(m.subscribed_topic_names, vec![TOPIC.to_string()]);
            let n: usize = m
                .assignment
                .topic_partitions
                .iter()
                .map(|t| t.partitions.len())
                .sum();
            assert_eq!(n, 2);
            assert!(m
                .assignment
                .topic_partitions
                .iter()
                .all(|t| t.topic_name == TOPIC));
        }
        // ListGroups by type, DescribeGroups (not a classic group), a classic join.
        let consumer = list(&mut c, &["consumer"]);
        assert_eq!(
            consumer,
            vec![(
                GROUP.to_string(),
                "consumer".to_string(),
                "Stable".to_string()
            )]
        );
        assert!(list(&mut c, &["classic"])
            .iter()
            .all(|(g, _, _)| g != GROUP));
        for (version, error, state) in [(5, NONE, "Dead"), (6, GROUP_ID_NOT_FOUND, "Dead")] {
            let req = Request::DescribeGroups(DescribeGroupsRequest {
                groups: vec![GROUP.into()],
                ..Default::default()
            });
            let Response::DescribeGroups(r) =
                c.call(ApiKey::DescribeGroups, version, &req).unwrap()
            else {
                panic!()
            };
            assert_eq!(
                (r.groups[0].error_code, r.groups[0].group_state.as_str()),
                (error, state)
            );
        }
        let join = Request::JoinGroup(JoinGroupRequest {
            group_id: GROUP.into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![JoinGroupRequestProtocol {
                name: "range".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let Response::JoinGroup(j) = c.call(ApiKey::JoinGroup, 9, &join).unwrap() else {
            panic!()
        };
        // A classic member may join a consumer group with members (as in Kafka 4.1; see
        // kafka_consumer_groups_classic.rs): a new one is first given its member id.
        assert_eq!(j.error_code, MEMBER_ID_REQUIRED);
        assert_eq!(delete(&mut c), NON_EMPTY_GROUP);

        // Offsets with member epochs.
        assert_eq!(commit(&mut c, &a.id, epoch, 42), NONE);
        assert_eq!(commit(&mut c, &a.id, epoch - 1, 43), STALE_MEMBER_EPOCH);
        assert_eq!(commit(&mut c, "nobody", epoch, 43), UNKNOWN_MEMBER_ID);
        assert_eq!(
            commit(&mut c, "", -1, 43),
            UNKNOWN_MEMBER_ID,
            "the group has members"
        );
        assert_eq!(fetch(&mut c, Some(&a.id), epoch), (NONE, 42));
        assert_eq!(fetch(&mut c, Some(&a.id), epoch - 1).0, STALE_MEMBER_EPOCH);
        assert_eq!(fetch(&mut c, None, -1), (NONE, 42), "an admin's fetch");

        // c leaves: a and b share its partitions.
        let r = heartbeat(
            &mut c,
            ConsumerGroupHeartbeatRequest {
                group_id: GROUP.into(),
                member_id: m3.id.clone(),
                member_epoch: -1,
                ..Default::default()
            },
        );
        assert_eq!((r.error_code, r.member_epoch), (NONE, -1));
        converge(&mut c, &mut [&mut a, &mut b], 6);
        assert_eq!((a.owned.len(), b.owned.len()), (3, 3));
        assert!(a.epoch > epoch);

        // b stops heartbeating: its session (3 s) expires and a gets everything.
        let deadline = Instant::now() + Duration::from_secs(15);
        while a.owned.len() < 6 {
            assert_eq!(a.beat(&mut c), NONE);
            assert!(Instant::now() < deadline, "b's session never expired");
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(b.beat(&mut c), UNKNOWN_MEMBER_ID);

        // a leaves: the group is empty, then deleted.
        let r = heartbeat(
            &mut c,
            ConsumerGroupHeartbeatRequest {
                group_id: GROUP.into(),
                member_id: a.id.clone(),
                member_epoch: -1,
                ..Default::default()
            },
        );
        assert_eq!(r.error_code, NONE);
        assert_eq!(describe(&mut c).group_state, "Empty");
        assert_eq!(
            commit(&mut c, "", -1, 44),
            NONE,
            "a standalone commit to an empty group"
        );
        assert_eq!(delete(&mut c), NONE);
        assert_eq!(describe(&mut c).error_code, GROUP_ID_NOT_FOUND);
        assert!(list(&mut c, &[]).iter().all(|(g, _, _)| g != GROUP));
        // A heartbeat for a group that is gone: GROUP_ID_NOT_FOUND, as Kafka 4.1.
        assert_eq!(a.beat(&mut c), GROUP_ID_NOT_FOUND);
    })
    .await;
    for n in &nodes {
        n.shutdown();
    }
    result.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_kill_keeps_every_members_epoch_and_assignment() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(dir.path(), Duration::from_secs(45)).await;
    let leader = common::metadata_leader(&nodes).unwrap();
    let coordinator = common::kafka_addr(&nodes[leader]);
    let meta = nodes[leader].metadata_group().unwrap();
    let (a, b) = tokio::task::spawn_blocking(move || {
        let mut c = setup(coordinator);
        let mut a = Member::join(&mut c, "member-a");
        let mut b = Member::join(&mut c, "member-b");
        converge(&mut c, &mut [&mut a, &mut b], 6);
        // Heartbeats that change nothing write nothing.
        let before = meta.visible().applied_index;
        for _ in 0..20 {
            assert_eq!((a.beat(&mut c), b.beat(&mut c)), (NONE, NONE));
        }
        assert_eq!(
            meta.visible().applied_index,
            before,
            "idle heartbeats appended metadata entries"
        );
        (a, b)
    })
    .await
    .unwrap();
    // Every answer waited for the group's record: every node has it (or gets it).
    let deadline = Instant::now() + Duration::from_secs(5);
    while !nodes.iter().all(|n| {
        n.metadata()
            .consumer_groups
            .get(GROUP)
            .is_some_and(|r| r.members.iter().all(|m| m.epoch == a.epoch))
    }) {
        assert!(
            Instant::now() < deadline,
            "the group was not stored everywhere"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The coordinator dies.
    let (rest, new_leader) = common::kill_metadata_leader(&nodes, leader).await;
    let coordinator = common::kafka_addr(&rest[new_leader]);
    let result = tokio::task::spawn_blocking(move || {
        let (mut a, mut b) = (a, b);
        let (epoch, a_owned, b_owned) = (a.epoch, a.owned.clone(), b.owned.clone());
        let mut c = KafkaConn::connect(coordinator).unwrap();
        let first = common::until_coordinator_serves(|| a.beat(&mut c));
        // Both members heartbeat on at the same epoch with the same partitions: no
        // reassignment, no rejoin.
        assert_eq!(first, NONE);
        assert_eq!(b.beat(&mut c), NONE);
        assert_eq!((a.epoch, b.epoch), (epoch, epoch));
        assert_eq!((&a.owned, &b.owned), (&a_owned, &b_owned));
        assert!(a.revoked.is_empty() || a.revoked.is_disjoint(&a_owned));
        let d = describe(&mut c);
        assert_eq!((d.group_state.as_str(), d.group_epoch), ("Stable", epoch));
    })
    .await;
    for n in &nodes {
        n.shutdown();
    }
    result.unwrap();
}

/// A join of group `group` with `extra` applied to the request; the response.
fn join_with(
    c: &mut KafkaConn,
    version: i16,
    group: &str,
    member: &str,
    extra: impl FnOnce(&mut ConsumerGroupHeartbeatRequest),
) -> ConsumerGroupHeartbeatResponse {
    let mut req = ConsumerGroupHeartbeatRequest {
        group_id: group.into(),
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 10_000,
        subscribed_topic_names: Some(vec![TOPIC.into()]),
        topic_partitions: Some(Vec::new()),
        ..Default::default()
    };
    extra(&mut req);
    match c
        .call(
            ApiKey::ConsumerGroupHeartbeat,
            version,
            &Request::ConsumerGroupHeartbeat(req),
        )
        .unwrap()
    {
        Response::ConsumerGroupHeartbeat(r) => r,
        other => panic!("{other:?}"),
    }
}

fn count(r: &ConsumerGroupHeartbeatResponse) -> usize {
    r.assignment.as_ref().map_or(0, |a| {
        a.topic_partitions.iter().map(|t| t.partitions.len()).sum()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_members_regexes_and_request_checks() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(dir.path(), Duration::from_secs(45)).await;
    let leader = common::metadata_leader(&nodes).unwrap();
    let coordinator = common::kafka_addr(&nodes[leader]);
    let result = tokio::task::spawn_blocking(move || {
        let mut c = setup(coordinator);
        // Request checks, as Kafka 4.1 answers them.
        assert_eq!(
            join_with(&mut c, 1, "checks", "", |_| {}).error_code,
            42,
            "v1 needs a member id"
        );
        let r = join_with(&mut c, 0, "checks", "", |_| {});
        assert_eq!(
            r.error_code, NONE,
            "v0: the coordinator makes the member id"
        );
        assert!(r.member_id.is_some_and(|id| id.len() == 22));
        let r = join_with(&mut c, 1, "checks", "m2", |r| {
            r.server_assignor = Some("nope".into())
        });
        assert_eq!(r.error_code, 112, "UNSUPPORTED_ASSIGNOR");
        let r = join_with(&mut c, 1, "checks", "m3", |r| {
            r.subscribed_topic_names = None;
            r.subscribed_topic_regex = Some("rx-(".into());
        });
        assert_eq!(r.error_code, 128, "INVALID_REGULAR_EXPRESSION");

        // A regex subscription follows created topics.
        assert_eq!(c.create_topic_with("rx-1", 2).unwrap(), (NONE, 2));
        let r = join_with(&mut c, 1, GROUP, "rx-member", |r| {
            r.subscribed_topic_names = None;
            r.subscribed_topic_regex = Some("rx-.*".into());
        });
        assert_eq!((r.error_code, count(&r)), (NONE, 2));
        assert_eq!(c.create_topic_with("rx-2", 1).unwrap(), (NONE, 1));
        let mut m = Member {
            id: "rx-member".into(),
            epoch: r.member_epoch,
            owned: Partitions::new(),
            revoked: Partitions::new(),
        };
        m.apply(&r);
        let deadline = Instant::now() + Duration::from_secs(10);
        while m.owned.len() < 3 {
            assert_eq!(m.beat(&mut c), NONE);
            assert!(
                Instant::now() < deadline,
                "the new topic was never assigned"
            );
            std::thread::sleep(Duration::from_millis(100));
        }

        // A static member leaves (epoch -2) and its instance comes back under a new member id
        // with the same epoch and partitions, without a rebalance.
        let r = join_with(&mut c, 1, "static", "s1", |r| {
            r.instance_id = Some("i1".into())
        });
        assert_eq!((r.error_code, count(&r)), (NONE, 6));
        let epoch = r.member_epoch;
        let busy = join_with(&mut c, 1, "static", "s2", |r| {
            r.instance_id = Some("i1".into())
        });
        assert_eq!(busy.error_code, 111, "UNRELEASED_INSTANCE_ID");
        let left = heartbeat(
            &mut c,
            ConsumerGroupHeartbeatRequest {
                group_id: "static".into(),
                member_id: "s1".into(),
                member_epoch: -2,
                instance_id: Some("i1".into()),
                ..Default::default()
            },
        );
        assert_eq!((left.error_code, left.member_epoch), (NONE, -2));
        let back = join_with(&mut c, 1, "static", "s2", |r| {
            r.instance_id = Some("i1".into())
        });
        assert_eq!(
            (back.error_code, back.member_epoch, count(&back)),
            (NONE, epoch, 6)
        );
        let d = match c
            .call(
                ApiKey::ConsumerGroupDescribe,
                1,
                &Request::ConsumerGroupDescribe(ConsumerGroupDescribeRequest {
                    group_ids: vec!["static".into()],
                    ..Default::default()
                }),
            )
            .unwrap()
        {
            Response::ConsumerGroupDescribe(mut r) => r.groups.remove(0),
            other => panic!("{other:?}"),
        };
        assert_eq!(d.group_epoch, epoch, "no rebalance");
        assert_eq!(d.members.len(), 1);
        assert_eq!(d.members[0].member_id, "s2");
        assert_eq!(d.members[0].instance_id.as_deref(), Some("i1"));
    })
    .await;
    for n in &nodes {
        n.shutdown();
    }
    result.unwrap();
}
