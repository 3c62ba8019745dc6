//! Classic-protocol members in consumer-protocol groups and the online conversions between the
//! two kinds (Kafka 4.1's `group.consumer.migration.policy`), with raw requests against an
//! in-process node: a classic member (JoinGroup/SyncGroup/Heartbeat) and a consumer-protocol
//! member converge to a balanced assignment and the classic one's leave hands everything to
//! the other; a running classic group of two members is upgraded when a consumer-protocol
//! member joins (the classic members keep their partitions until they must give some up, no
//! partition is owned twice) and downgraded back to a classic group when that member leaves;
//! the same downgrade when the consumer-protocol member's session expires instead; with the
//! policy `disabled` the join gets Kafka's error; a coordinator kill keeps the classic
//! member's generation and partitions (it is stored in the group's record).

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
use kafka_proto::messages::consumer_group_heartbeat_request::{
    ConsumerGroupHeartbeatRequest, TopicPartitions,
};
use kafka_proto::messages::consumer_group_heartbeat_response::ConsumerGroupHeartbeatResponse;
use kafka_proto::messages::heartbeat_request::HeartbeatRequest;
use kafka_proto::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use kafka_proto::messages::join_group_response::JoinGroupResponse;
use kafka_proto::messages::leave_group_request::{LeaveGroupRequest, MemberIdentity};
use kafka_proto::messages::list_groups_request::ListGroupsRequest;
use kafka_proto::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_proto::messages::sync_group_request::{SyncGroupRequest, SyncGroupRequestAssignment};
use vdl_server::config::MigrationPolicy;
use vdl_server::Node;

const TOPIC: &str = "cgc-topic";
const GROUP: &str = "cgc";

const NONE: i16 = 0;
const ILLEGAL_GENERATION: i16 = 22;
const REBALANCE_IN_PROGRESS: i16 = 27;
const GROUP_ID_NOT_FOUND: i16 = 69;
const MEMBER_ID_REQUIRED: i16 = 79;

type Owned = BTreeSet<i32>;

/// A ConsumerProtocolSubscription v1 of [`TOPIC`] owning `owned`.
fn subscription(owned: &Owned) -> Vec<u8> {
    let mut out = vec![0, 1];
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&(TOPIC.len() as i16).to_be_bytes());
    out.extend_from_slice(TOPIC.as_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out.extend_from_slice(&topic_partitions(owned));
    out
}

/// An array of one (topic, partitions) entry of [`TOPIC`] (empty when `ps` is).
fn topic_partitions(ps: &Owned) -> Vec<u8> {
    let mut out = Vec::new();
    if ps.is_empty() {
        out.extend_from_slice(&0i32.to_be_bytes());
        return out;
    }
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&(TOPIC.len() as i16).to_be_bytes());
    out.extend_from_slice(TOPIC.as_bytes());
    out.extend_from_slice(&(ps.len() as i32).to_be_bytes());
    for p in ps {
        out.extend_from_slice(&p.to_be_bytes());
    }
    out
}

/// A ConsumerProtocolAssignment v1 of `ps`.
fn assignment(ps: &Owned) -> Vec<u8> {
    let mut out = vec![0, 1];
    out.extend_from_slice(&topic_partitions(ps));
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out
}

/// The partitions of [`TOPIC`] in a ConsumerProtocolAssignment.
fn decode_assignment(b: &[u8]) -> Owned {
    let i32_at = |at: usize| i32::from_be_bytes(b[at..at + 4].try_into().unwrap());
    let mut out = Owned::new();
    if b.is_empty() {
        return out;
    }
    let topics = i32_at(2);
    let mut at = 6;
    for _ in 0..topics {
        let len = i16::from_be_bytes([b[at], b[at + 1]]) as usize;
        let name = std::str::from_utf8(&b[at + 2..at + 2 + len])
            .unwrap()
            .to_owned();
        at += 2 + len;
        let n = i32_at(at);
        at += 4;
        for _ in 0..n {
            assert_eq!(name, TOPIC);
            out.insert(i32_at(at));
            at += 4;
        }
    }
    out
}

fn call(c: &mut KafkaConn, api: ApiKey, version: i16, req: Request) -> Response {
    c.call(api, version, &req).unwrap()
}

/// A classic consumer: its member id, generation and partitions.
#[derive(Debug, Clone, Default)]
struct Classic {
    id: String,
    generation: i32,
    owned: Owned,
}

impl Classic {
    fn join_request(&self) -> JoinGroupRequest {
        JoinGroupRequest {
            group_id: GROUP.into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            member_id: self.id.clone(),
            protocol_type: "consumer".into(),
            protocols: vec![JoinGroupRequestProtocol {
                name: "range".into(),
                metadata: subscription(&self.owned).into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// JoinGroup v9 (a new member first gets its id with MEMBER_ID_REQUIRED).
    fn join(&mut self, c: &mut KafkaConn) -> JoinGroupResponse {
        loop {
            let Response::JoinGroup(r) = call(
                c,
                ApiKey::JoinGroup,
                9,
                Request::JoinGroup(self.join_request()),
            ) else {
                panic!()
            };
            if r.error_code == MEMBER_ID_REQUIRED && self.id.is_empty() {
                self.id = r.member_id.clone();
                continue;
            }
            assert_eq!(r.error_code, NONE, "{r:?}");
            self.generation = r.generation_id;
            return r;
        }
    }

    /// SyncGroup v5 (`assignments` given by a leader); it takes what it is given.
    fn sync(&mut self, c: &mut KafkaConn, assignments: Vec<(String, Owned)>) {
        let req = SyncGroupRequest {
            group_id: GROUP.into(),
            generation_id: self.generation,
            member_id: self.id.clone(),
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: assignments
                .into_iter()
                .map(|(member_id, ps)| SyncGroupRequestAssignment {
                    member_id,
                    assignment: assignment(&ps).into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let Response::SyncGroup(r) = call(c, ApiKey::SyncGroup, 5, Request::SyncGroup(req)) else {
            panic!()
        };
        assert_eq!(r.error_code, NONE, "{r:?}");
        assert_eq!(r.protocol_name.as_deref(), Some("range"));
        self.owned = decode_assignment(&r.assignment);
    }

    fn heartbeat(&self, c: &mut KafkaConn) -> i16 {
        let req = HeartbeatRequest {
            group_id: GROUP.into(),
            generation_id: self.generation,
            member_id: self.id.clone(),
            ..Default::default()
        };
        let Response::Heartbeat(r) = call(c, ApiKey::Heartbeat, 4, Request::Heartbeat(req)) else {
            panic!()
        };
        r.error_code
    }

    /// One step in a consumer group: a heartbeat, and when told to rebalance, a rejoin (with
    /// what it owns) and a sync. The heartbeat's error.
    fn step(&mut self, c: &mut KafkaConn) -> i16 {
        let e = self.heartbeat(c);
        if e == REBALANCE_IN_PROGRESS {
            let r = self.join(c);
            assert_eq!(r.protocol_name.as_deref(), Some("range"));
            self.sync(c, Vec::new());
        } else {
            assert_eq!(e, NONE);
        }
        e
    }

    fn leave(&self, c: &mut KafkaConn) -> i16 {
        let req = LeaveGroupRequest {
            group_id: GROUP.into(),
            members: vec![MemberIdentity {
                member_id: self.id.clone(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let Response::LeaveGroup(r) = call(c, ApiKey::LeaveGroup, 5, Request::LeaveGroup(req))
        else {
            panic!()
        };
        assert_eq!(r.error_code, NONE);
        r.members[0].error_code
    }
}

/// A classic rebalance of `members` in a classic group, each on its own connection: all join
/// at once; the leader assigns the 6 partitions in order of member id, half each.
fn classic_round(addr: SocketAddr, members: Vec<Classic>) -> Vec<Classic> {
    let n = members.len();
    let handles: Vec<_> = members
        .into_iter()
        .map(|mut m| {
            std::thread::spawn(move || {
                let mut c = KafkaConn::connect(addr).unwrap();
                let r = m.join(&mut c);
                let plan = if r.leader == m.id {
                    let mut ids: Vec<String> =
                        r.members.iter().map(|x| x.member_id.clone()).collect();
                    ids.sort();
                    assert_eq!(ids.len(), n);
                    let per = 6 / n;
                    ids.into_iter()
                        .enumerate()
                        .map(|(i, id)| (id, ((i * per) as i32..((i + 1) * per) as i32).collect()))
                        .collect()
                } else {
                    Vec::new()
                };
                m.sync(&mut c, plan);
                m
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// A consumer-protocol member: its id, epoch and partitions.
struct Consumer {
    id: String,
    epoch: i32,
    owned: Owned,
}

fn consumer_heartbeat(
    c: &mut KafkaConn,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    match call(
        c,
        ApiKey::ConsumerGroupHeartbeat,
        1,
        Request::ConsumerGroupHeartbeat(req),
    ) {
        Response::ConsumerGroupHeartbeat(r) => r,
        other => panic!("{other:?}"),
    }
}

impl Consumer {
    fn join(c: &mut KafkaConn, id: &str) -> Result<Consumer, Box<ConsumerGroupHeartbeatResponse>> {
        let r = consumer_heartbeat(
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
        if r.error_code != NONE {
            return Err(Box::new(r));
        }
        let mut m = Consumer {
            id: id.into(),
            epoch: 0,
            owned: Owned::new(),
        };
        m.apply(&r);
        Ok(m)
    }

    fn apply(&mut self, r: &ConsumerGroupHeartbeatResponse) {
        self.epoch = r.member_epoch;
        if let Some(a) = &r.assignment {
            self.owned = a
                .topic_partitions
                .iter()
                .flat_map(|tp| tp.partitions.iter().copied())
                .collect();
        }
    }

    fn beat(&mut self, c: &mut KafkaConn, topic_id: kafka_proto::Uuid) {
        let r = consumer_heartbeat(
            c,
            ConsumerGroupHeartbeatRequest {
                group_id: GROUP.into(),
                member_id: self.id.clone(),
                member_epoch: self.epoch,
                topic_partitions: Some(if self.owned.is_empty() {
                    Vec::new()
                } else {
                    vec![TopicPartitions {
                        topic_id,
                        partitions: self.owned.iter().copied().collect(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
        );
        assert_eq!(r.error_code, NONE, "{r:?}");
        self.apply(&r);
    }

    fn leave(&self, c: &mut KafkaConn) {
        let r = consumer_heartbeat(
            c,
            ConsumerGroupHeartbeatRequest {
                group_id: GROUP.into(),
                member_id: self.id.clone(),
                member_epoch: -1,
                ..Default::default()
            },
        );
        assert_eq!(r.error_code, NONE, "{r:?}");
    }
}

/// Steps every member until the sizes of what they own are `sizes` (consumer members first)
/// and the classic ones' last heartbeat was quiet, checking no partition is ever owned twice.
fn converge(
    c: &mut KafkaConn,
    consumers: &mut [&mut Consumer],
    classics: &mut [&mut Classic],
    sizes: &[usize],
    topic_id: kafka_proto::Uuid,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for m in consumers.iter_mut() {
            m.beat(c, topic_id);
        }
        let mut quiet = true;
        for m in classics.iter_mut() {
            quiet &= m.step(c) == NONE;
        }
        let mut seen = Owned::new();
        for p in consumers
            .iter()
            .flat_map(|m| m.owned.iter())
            .chain(classics.iter().flat_map(|m| m.owned.iter()))
        {
            assert!(seen.insert(*p), "partition {p} owned twice");
        }
        let now: Vec<usize> = consumers
            .iter()
            .map(|m| m.owned.len())
            .chain(classics.iter().map(|m| m.owned.len()))
            .collect();
        if quiet && now == sizes {
            return;
        }
        assert!(Instant::now() < deadline, "no convergence: {now:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// ConsumerGroupDescribe v1: the member types by member id.
fn member_types(c: &mut KafkaConn) -> BTreeMap<String, i8> {
    let req = ConsumerGroupDescribeRequest {
        group_ids: vec![GROUP.into()],
        ..Default::default()
    };
    match call(
        c,
        ApiKey::ConsumerGroupDescribe,
        1,
        Request::ConsumerGroupDescribe(req),
    ) {
        Response::ConsumerGroupDescribe(r) => {
            assert_eq!(r.groups[0].error_code, NONE, "{r:?}");
            r.groups[0]
                .members
                .iter()
                .map(|m| (m.member_id.clone(), m.member_type))
                .collect()
        }
        other => panic!("{other:?}"),
    }
}

/// The group's type in ListGroups v5.
fn group_type(c: &mut KafkaConn) -> Option<String> {
    let req = ListGroupsRequest::default();
    match call(c, ApiKey::ListGroups, 5, Request::ListGroups(req)) {
        Response::ListGroups(r) => r
            .groups
            .into_iter()
            .find(|g| g.group_id == GROUP)
            .map(|g| g.group_type),
        other => panic!("{other:?}"),
    }
}

/// OffsetCommit v8 (classic) of partition 0 at generation `generation`.
fn commit(c: &mut KafkaConn, member: &str, generation: i32) -> i16 {
    let req = OffsetCommitRequest {
        group_id: GROUP.into(),
        generation_id_or_member_epoch: generation,
        member_id: member.into(),
        topics: vec![OffsetCommitRequestTopic {
            name: TOPIC.into(),
            partitions: vec![OffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: 7,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match call(c, ApiKey::OffsetCommit, 8, Request::OffsetCommit(req)) {
        Response::OffsetCommit(r) => r.topics[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// A one-node cluster with `policy`; its Kafka address.
async fn node(dir: &std::path::Path, policy: MigrationPolicy) -> (Arc<Node>, SocketAddr) {
    node_with(dir, policy, Duration::from_secs(45)).await
}

/// A one-node cluster with `policy` and consumer-protocol sessions of `session`.
async fn node_with(
    dir: &std::path::Path,
    policy: MigrationPolicy,
    session: Duration,
) -> (Arc<Node>, SocketAddr) {
    let mut c = cluster_configs(1, dir, &[]).remove(0);
    c.kafka.consumer_group_session_timeout = session;
    c.kafka.consumer_group_heartbeat_interval = Duration::from_millis(200);
    c.kafka.consumer_group_migration_policy = policy;
    let n = Node::start(c).await.unwrap();
    n.serve_kafka().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !n.metadata_group().is_some_and(|g| g.visible().leader_ready) {
        assert!(Instant::now() < deadline, "node not ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let addr = n.config().kafka_advertised.parse().unwrap();
    (n, addr)
}

/// The topic's id, from a consumer-protocol member's assignment.
fn topic_id_of(r: &ConsumerGroupHeartbeatResponse) -> kafka_proto::Uuid {
    r.assignment.as_ref().unwrap().topic_partitions[0].topic_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_and_a_consumer_member_share_a_group() {
    let dir = tempfile::tempdir().unwrap();
    let (node, addr) = node(dir.path(), MigrationPolicy::Bidirectional).await;
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(addr).unwrap();
        assert_eq!(c.create_topic_with(TOPIC, 6).unwrap(), (NONE, 6));
        // A consumer-protocol member gets all 6 partitions.
        let r = consumer_heartbeat(
            &mut c,
            ConsumerGroupHeartbeatRequest {
                group_id: GROUP.into(),
                member_id: "a".into(),
                member_epoch: 0,
                rebalance_timeout_ms: 10_000,
                subscribed_topic_names: Some(vec![TOPIC.into()]),
                topic_partitions: Some(Vec::new()),
                ..Default::default()
            },
        );
        assert_eq!(r.error_code, NONE);
        let topic_id = topic_id_of(&r);
        let mut a = Consumer {
            id: "a".into(),
            epoch: 0,
            owned: Owned::new(),
        };
        a.apply(&r);
        assert_eq!(a.owned.len(), 6);
        // A classic member joins the consumer group (JoinGroup, SyncGroup): they converge.
        let mut b = Classic::default();
        let j = b.join(&mut c);
        assert_eq!(j.protocol_type.as_deref(), Some("consumer"));
        assert!(j.members.is_empty() && j.leader != b.id);
        b.sync(&mut c, Vec::new());
        converge(&mut c, &mut [&mut a], &mut [&mut b], &[3, 3], topic_id);
        let types = member_types(&mut c);
        assert_eq!(types.get("a"), Some(&1));
        assert_eq!(types.get(&b.id), Some(&0), "classic member type");
        // The classic member commits with its generation.
        assert_eq!(commit(&mut c, &b.id, b.generation), NONE);
        assert_eq!(commit(&mut c, &b.id, b.generation + 1), ILLEGAL_GENERATION);
        // It leaves: the consumer-protocol member gets everything; the group stays a
        // consumer group.
        assert_eq!(b.leave(&mut c), NONE);
        converge(&mut c, &mut [&mut a], &mut [], &[6], topic_id);
        assert_eq!(group_type(&mut c).as_deref(), Some("consumer"));
    })
    .await
    .unwrap();
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_group_is_upgraded_online_and_downgraded_back() {
    let dir = tempfile::tempdir().unwrap();
    let (node, addr) = node(dir.path(), MigrationPolicy::Bidirectional).await;
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(addr).unwrap();
        assert_eq!(c.create_topic_with(TOPIC, 6).unwrap(), (NONE, 6));
        // A running classic group of two members, 3 partitions each.
        let mut members = classic_round(addr, vec![Classic::default(), Classic::default()]);
        members.sort_by(|x, y| x.id.cmp(&y.id));
        let (mut b, mut d) = (members[0].clone(), members[1].clone());
        assert_eq!((b.owned.len(), d.owned.len()), (3, 3));
        assert_eq!(b.heartbeat(&mut c), NONE);
        assert_eq!(group_type(&mut c).as_deref(), Some("classic"));
        let (b_before, d_before) = (b.owned.clone(), d.owned.clone());
        // A consumer-protocol member joins: the group is upgraded, the classic members keep
        // their partitions (it gets none yet).
        let mut a = Consumer::join(&mut c, "a").unwrap_or_else(|r| panic!("{r:?}"));
        assert!(a.owned.is_empty());
        assert_eq!(group_type(&mut c).as_deref(), Some("consumer"));
        let types = member_types(&mut c);
        assert_eq!(
            (types.get("a"), types.get(&b.id), types.get(&d.id)),
            (Some(&1), Some(&0), Some(&0))
        );
        // The topic id, from the describe of the classic members' assignments.
        let topic_id = {
            let req = ConsumerGroupDescribeRequest {
                group_ids: vec![GROUP.into()],
                ..Default::default()
            };
            let Response::ConsumerGroupDescribe(r) = call(
                &mut c,
                ApiKey::ConsumerGroupDescribe,
                1,
                Request::ConsumerGroupDescribe(req),
            ) else {
                panic!()
            };
            let m = r.groups[0]
                .members
                .iter()
                .find(|m| m.member_id == b.id)
                .unwrap();
            m.assignment.topic_partitions[0].topic_id
        };
        converge(
            &mut c,
            &mut [&mut a],
            &mut [&mut b, &mut d],
            &[2, 2, 2],
            topic_id,
        );
        assert!(b.owned.is_subset(&b_before), "b only gave partitions up");
        assert!(d.owned.is_subset(&d_before), "d only gave partitions up");
        // The consumer-protocol member leaves: the group is a classic group again, which
        // rebalances (the classic members rejoin classically).
        a.leave(&mut c);
        assert_eq!(group_type(&mut c).as_deref(), Some("classic"));
        assert_eq!(b.heartbeat(&mut c), REBALANCE_IN_PROGRESS);
        let generation = b.generation;
        let after = classic_round(addr, vec![b.clone(), d.clone()]);
        for m in &after {
            assert!(m.generation > generation);
            assert_eq!(m.owned.len(), 3);
        }
        assert_eq!(after[0].heartbeat(&mut c), NONE);
    })
    .await
    .unwrap();
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_migration_disabled_a_running_classic_group_is_not_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let (node, addr) = node(dir.path(), MigrationPolicy::Disabled).await;
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(addr).unwrap();
        assert_eq!(c.create_topic_with(TOPIC, 6).unwrap(), (NONE, 6));
        let members = classic_round(addr, vec![Classic::default()]);
        assert_eq!(members[0].owned.len(), 6);
        let r = Consumer::join(&mut c, "a").err().expect("refused");
        assert_eq!(r.error_code, GROUP_ID_NOT_FOUND);
        assert_eq!(
            r.error_message.as_deref(),
            Some("Cannot upgrade classic group cgc to consumer group because online upgrade is disabled.")
        );
        assert_eq!(members[0].heartbeat(&mut c), NONE);
        assert_eq!(group_type(&mut c).as_deref(), Some("classic"));
    })
    .await
    .unwrap();
    node.shutdown();
}

/// A 3-node cluster; the nodes and the index of the metadata leader (the coordinator).
async fn cluster(dir: &std::path::Path) -> (Vec<Arc<Node>>, usize) {
    let mut nodes = Vec::new();
    for mut c in cluster_configs(3, dir, &[]) {
        c.kafka.consumer_group_heartbeat_interval = Duration::from_millis(200);
        let n = Node::start(c).await.unwrap();
        n.serve_kafka().await.unwrap();
        nodes.push(n);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(l) = common::metadata_leader(&nodes) {
            if nodes[l].metadata_group().unwrap().visible().leader_ready
                && nodes.iter().all(|n| n.live_brokers().len() == 3)
            {
                return (nodes, l);
            }
        }
        assert!(Instant::now() < deadline, "cluster not ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_kill_keeps_the_classic_members_generation_and_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, leader) = cluster(dir.path()).await;
    let coordinator = common::kafka_addr(&nodes[leader]);
    let (a, b, topic_id) = tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(coordinator).unwrap();
        assert_eq!(c.create_topic_with(TOPIC, 6).unwrap(), (NONE, 6));
        let mut a = Consumer::join(&mut c, "a").unwrap_or_else(|r| panic!("{r:?}"));
        let mut b = Classic::default();
        b.join(&mut c);
        b.sync(&mut c, Vec::new());
        let topic_id = {
            let req = ConsumerGroupDescribeRequest {
                group_ids: vec![GROUP.into()],
                ..Default::default()
            };
            let Response::ConsumerGroupDescribe(r) = call(
                &mut c,
                ApiKey::ConsumerGroupDescribe,
                1,
                Request::ConsumerGroupDescribe(req),
            ) else {
                panic!()
            };
            let m = r.groups[0]
                .members
                .iter()
                .find(|m| m.member_id == "a")
                .unwrap();
            m.assignment.topic_partitions[0].topic_id
        };
        converge(&mut c, &mut [&mut a], &mut [&mut b], &[3, 3], topic_id);
        (a, b, topic_id)
    })
    .await
    .unwrap();
    // Every node has the group with its classic member at its generation.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !nodes.iter().all(|n| {
        n.metadata().consumer_groups.get(GROUP).is_some_and(|r| {
            r.members
                .iter()
                .any(|m| m.member_id == b.id && m.classic.is_some() && m.epoch == b.generation)
        })
    }) {
        assert!(
            Instant::now() < deadline,
            "the group was not stored everywhere"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (rest, new_leader) = common::kill_metadata_leader(&nodes, leader).await;
    let coordinator = common::kafka_addr(&rest[new_leader]);
    let result = tokio::task::spawn_blocking(move || {
        let (mut a, mut b) = (a, b);
        let (generation, epoch, b_owned, a_owned) =
            (b.generation, a.epoch, b.owned.clone(), a.owned.clone());
        let mut c = KafkaConn::connect(coordinator).unwrap();
        let first = common::until_coordinator_serves(|| b.heartbeat(&mut c));
        // No rebalance: the classic member heartbeats on at its generation and its SyncGroup
        // gives the same partitions; the consumer-protocol member keeps its epoch.
        assert_eq!(first, NONE);
        b.sync(&mut c, Vec::new());
        assert_eq!((b.generation, &b.owned), (generation, &b_owned));
        a.beat(&mut c, topic_id);
        assert_eq!((a.epoch, &a.owned), (epoch, &a_owned));
        assert_eq!(member_types(&mut c).get(&b.id), Some(&0));
    })
    .await;
    for n in &nodes {
        n.shutdown();
    }
    result.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_consumer_member_leaves_a_classic_group_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (node, addr) = node_with(
        dir.path(),
        MigrationPolicy::Bidirectional,
        Duration::from_secs(1),
    )
    .await;
    tokio::task::spawn_blocking(move || {
        let mut c = KafkaConn::connect(addr).unwrap();
        assert_eq!(c.create_topic_with(TOPIC, 6).unwrap(), (NONE, 6));
        let r = consumer_heartbeat(
            &mut c,
            ConsumerGroupHeartbeatRequest {
                group_id: GROUP.into(),
                member_id: "a".into(),
                member_epoch: 0,
                rebalance_timeout_ms: 10_000,
                subscribed_topic_names: Some(vec![TOPIC.into()]),
                topic_partitions: Some(Vec::new()),
                ..Default::default()
            },
        );
        let topic_id = topic_id_of(&r);
        let mut a = Consumer {
            id: "a".into(),
            epoch: 0,
            owned: Owned::new(),
        };
        a.apply(&r);
        let mut b = Classic::default();
        b.join(&mut c);
        b.sync(&mut c, Vec::new());
        converge(&mut c, &mut [&mut a], &mut [&mut b], &[3, 3], topic_id);
        // a stops heartbeating: its session (1 s) expires, and the group, left with its
        // classic member only, becomes a classic group that rebalances.
        let deadline = Instant::now() + Duration::from_secs(10);
        while group_type(&mut c).as_deref() != Some("classic") {
            assert!(Instant::now() < deadline, "not downgraded");
            assert_eq!(b.heartbeat(&mut c), NONE);
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(b.heartbeat(&mut c), REBALANCE_IN_PROGRESS);
        let after = classic_round(addr, vec![b]);
        assert_eq!(after[0].owned.len(), 6);
    })
    .await
    .unwrap();
    node.shutdown();
}
