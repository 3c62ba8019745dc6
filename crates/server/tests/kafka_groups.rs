//! Consumer groups over the Kafka protocol against an in-process 3-node cluster: a raw-protocol
//! client runs the classic group protocol (FindCoordinator, JoinGroup with MEMBER_ID_REQUIRED,
//! SyncGroup, Heartbeat, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, LeaveGroup) with
//! two members and rebalances; membership (same generation, no rebalance) and committed offsets
//! survive the coordinator's shutdown; a deposed coordinator's commit is not forwarded; kcat's
//! balanced consumer (`-G`) resumes after the offsets its group committed.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{cluster_configs, kcat, run_with_deadline as run};
use kafka_proto::frame::{decode_response, encode_request, Request, Response};
use kafka_proto::header::RequestHeader;
use kafka_proto::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_proto::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_proto::messages::heartbeat_request::HeartbeatRequest;
use kafka_proto::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use kafka_proto::messages::join_group_response::JoinGroupResponse;
use kafka_proto::messages::leave_group_request::{LeaveGroupRequest, MemberIdentity};
use kafka_proto::messages::list_groups_request::ListGroupsRequest;
use kafka_proto::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_proto::messages::offset_fetch_request::{
    OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_proto::messages::sync_group_request::{SyncGroupRequest, SyncGroupRequestAssignment};
use vdl_server::Node;

const TOPIC: &str = "groups-topic";
const GROUP: &str = "g1";

// Error codes.
const NONE: i16 = 0;
const NOT_COORDINATOR: i16 = 16;
const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;

/// A blocking raw-protocol client on one connection.
struct Client {
    s: TcpStream,
    cid: i32,
}

impl Client {
    fn connect(addr: &str) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client { s, cid: 0 }
    }

    fn call(&mut self, version: i16, request: Request) -> Response {
        let api = request.api_key();
        self.cid += 1;
        let header = RequestHeader {
            api_key: api.as_i16(),
            api_version: version,
            correlation_id: self.cid,
            client_id: Some("groups-test".into()),
            ..Default::default()
        };
        for seg in encode_request(&header, &request).unwrap() {
            self.s.write_all(&seg).unwrap();
        }
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len).expect("a response");
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        self.s.read_exact(&mut body).unwrap();
        let (header, response) = decode_response(api, version, Bytes::from(body)).unwrap();
        assert_eq!(header.correlation_id, self.cid);
        response
    }

    /// FindCoordinator v4 (batched keys): the coordinator's address.
    fn find_coordinator(&mut self, group: &str) -> (i32, String) {
        let Response::FindCoordinator(r) = self.call(
            4,
            Request::FindCoordinator(FindCoordinatorRequest {
                key_type: 0,
                coordinator_keys: vec![group.into()],
                ..Default::default()
            }),
        ) else {
            panic!("not a FindCoordinator response")
        };
        let c = &r.coordinators[0];
        assert_eq!(c.error_code, NONE, "{c:?}");
        assert_eq!(c.key, group);
        (c.node_id, format!("{}:{}", c.host, c.port))
    }

    fn join(&mut self, member_id: &str) -> JoinGroupResponse {
        let Response::JoinGroup(r) = self.call(
            9,
            Request::JoinGroup(JoinGroupRequest {
                group_id: GROUP.into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 5_000,
                member_id: member_id.into(),
                protocol_type: "consumer".into(),
                protocols: vec![JoinGroupRequestProtocol {
                    name: "range".into(),
                    metadata: Bytes::from(format!("meta-{member_id}")),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        ) else {
            panic!("not a JoinGroup response")
        };
        r
    }

    /// A new member: MEMBER_ID_REQUIRED first, then the join with the id it got.
    fn join_new(&mut self) -> JoinGroupResponse {
        let first = self.join("");
        assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
        assert!(first.member_id.starts_with("groups-test-"));
        let r = self.join(&first.member_id);
        assert_eq!(r.member_id, first.member_id);
        r
    }

    fn sync(
        &mut self,
        generation: i32,
        member: &str,
        assignments: &[(&str, &str)],
    ) -> (i16, Bytes) {
        let Response::SyncGroup(r) = self.call(
            5,
            Request::SyncGroup(SyncGroupRequest {
                group_id: GROUP.into(),
                generation_id: generation,
                member_id: member.into(),
                protocol_type: Some("consumer".into()),
                protocol_name: Some("range".into()),
                assignments: assignments
                    .iter()
                    .map(|(m, a)| SyncGroupRequestAssignment {
                        member_id: m.to_string(),
                        assignment: Bytes::from(a.to_string()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
        ) else {
            panic!("not a SyncGroup response")
        };
        (r.error_code, r.assignment)
    }

    fn heartbeat(&mut self, generation: i32, member: &str) -> i16 {
        let Response::Heartbeat(r) = self.call(
            4,
            Request::Heartbeat(HeartbeatRequest {
                group_id: GROUP.into(),
                generation_id: generation,
                member_id: member.into(),
                ..Default::default()
            }),
        ) else {
            panic!("not a Heartbeat response")
        };
        r.error_code
    }

    fn commit(&mut self, generation: i32, member: &str, offset: i64) -> i16 {
        let Response::OffsetCommit(r) = self.call(
            9,
            Request::OffsetCommit(OffsetCommitRequest {
                group_id: GROUP.into(),
                generation_id_or_member_epoch: generation,
                member_id: member.into(),
                topics: vec![OffsetCommitRequestTopic {
                    name: TOPIC.into(),
                    partitions: vec![OffsetCommitRequestPartition {
                        partition_index: 0,
                        committed_offset: offset,
                        committed_metadata: Some(format!("at {offset}")),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }),
        ) else {
            panic!("not an OffsetCommit response")
        };
        r.topics[0].partitions[0].error_code
    }

    /// OffsetFetch v8 (batched groups) of partitions 0 and 1: (error, offsets).
    fn fetch_offsets(&mut self) -> (i16, Vec<(i32, i64)>) {
        let Response::OffsetFetch(r) = self.call(
            8,
            Request::OffsetFetch(OffsetFetchRequest {
                groups: vec![OffsetFetchRequestGroup {
                    group_id: GROUP.into(),
                    topics: Some(vec![OffsetFetchRequestTopics {
                        name: TOPIC.into(),
                        partition_indexes: vec![0, 1],
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        ) else {
            panic!("not an OffsetFetch response")
        };
        let g = &r.groups[0];
        let offsets = g
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (p.partition_index, p.committed_offset))
            })
            .collect();
        (g.error_code, offsets)
    }

    fn leave(&mut self, members: &[&str]) -> Vec<i16> {
        let Response::LeaveGroup(r) = self.call(
            5,
            Request::LeaveGroup(LeaveGroupRequest {
                group_id: GROUP.into(),
                members: members
                    .iter()
                    .map(|m| MemberIdentity {
                        member_id: m.to_string(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
        ) else {
            panic!("not a LeaveGroup response")
        };
        assert_eq!(r.error_code, NONE);
        r.members.iter().map(|m| m.error_code).collect()
    }

    /// DescribeGroups v5: (state, member ids).
    fn describe(&mut self) -> (String, Vec<String>) {
        let Response::DescribeGroups(r) = self.call(
            5,
            Request::DescribeGroups(DescribeGroupsRequest {
                groups: vec![GROUP.into()],
                ..Default::default()
            }),
        ) else {
            panic!("not a DescribeGroups response")
        };
        let g = &r.groups[0];
        assert_eq!(g.error_code, NONE);
        for m in &g.members {
            // The peer address, as Kafka reports it.
            assert_eq!(m.client_host, "/127.0.0.1", "{m:?}");
        }
        (
            g.group_state.clone(),
            g.members.iter().map(|m| m.member_id.clone()).collect(),
        )
    }
}

async fn cluster(dir: &std::path::Path) -> Vec<Arc<Node>> {
    cluster_with(dir, |_| {}).await
}

async fn cluster_with(
    dir: &std::path::Path,
    adjust: impl Fn(&mut vdl_server::config::NodeConfig),
) -> Vec<Arc<Node>> {
    let mut nodes = Vec::new();
    for mut c in cluster_configs(3, dir, &[TOPIC]) {
        adjust(&mut c);
        let n = Node::start(c).await.unwrap();
        n.serve_kafka().await.unwrap();
        nodes.push(n);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // The coordinator serves groups once it has applied the metadata through its term's
        // start (NOT_COORDINATOR before).
        let coordinator_ready = common::metadata_leader(&nodes)
            .is_some_and(|l| nodes[l].metadata_group().unwrap().visible().leader_ready);
        // Every node commits one metadata barrier after its start (`metadata_current`): wait
        // for them, so a test that counts metadata entries sees none of them.
        let ready = coordinator_ready
            && nodes.iter().all(|n| {
                n.metadata_current()
                    && n.metadata_group().unwrap().visible().leader != 0
                    && n.stream(TOPIC).unwrap().visible().leader != 0
                    && n.live_brokers().len() == 3
            });
        if ready {
            return nodes;
        }
        assert!(Instant::now() < deadline, "cluster not ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_join_sync_commit_fetch_and_rebalance() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(dir.path()).await;
    let leader = common::metadata_leader(&nodes).expect("a metadata leader");
    let follower = nodes[(leader + 1) % 3].config().kafka_advertised.clone();
    let expected_id = nodes[leader].config().id as i32;

    let result = tokio::task::spawn_blocking(move || {
        // Any node names the metadata leader as the coordinator (v0 and batched v4).
        let mut f = Client::connect(&follower);
        let Response::FindCoordinator(r) = f.call(
            0,
            Request::FindCoordinator(FindCoordinatorRequest {
                key: GROUP.into(),
                ..Default::default()
            }),
        ) else {
            panic!()
        };
        assert_eq!((r.error_code, r.node_id), (NONE, expected_id));
        let (id, coordinator) = f.find_coordinator(GROUP);
        assert_eq!(id, expected_id);
        // A transactional id has the same coordinator (the metadata leader).
        let Response::FindCoordinator(r) = f.call(
            4,
            Request::FindCoordinator(FindCoordinatorRequest {
                key_type: 1,
                coordinator_keys: vec!["tx".into()],
                ..Default::default()
            }),
        ) else {
            panic!()
        };
        assert_eq!(
            (r.coordinators[0].error_code, r.coordinators[0].node_id),
            (NONE, expected_id),
            "{r:?}"
        );
        // A group request at a node that does not coordinate: NOT_COORDINATOR.
        assert_eq!(f.join("").error_code, NOT_COORDINATOR);
        assert_eq!(f.heartbeat(1, "x"), NOT_COORDINATOR);

        // Member A alone: generation 1, A leads and gets its own metadata.
        let mut a = Client::connect(&coordinator);
        let ja = a.join_new();
        assert_eq!(ja.error_code, NONE);
        let gen1 = ja.generation_id;
        let am = ja.member_id.clone();
        assert_eq!(ja.leader, am);
        assert_eq!(ja.protocol_name.as_deref(), Some("range"));
        assert_eq!(ja.members.len(), 1);
        assert_eq!(
            a.sync(gen1, &am, &[(&am, "all-to-a")]),
            (NONE, Bytes::from("all-to-a"))
        );
        assert_eq!(a.heartbeat(gen1, &am), NONE);
        assert_eq!(a.commit(gen1, &am, 5), NONE);
        assert_eq!(a.fetch_offsets(), (NONE, vec![(0, 5), (1, -1)]));
        // A standalone commit (no generation) is refused while the group has members.
        assert_eq!(a.commit(-1, "", 6), UNKNOWN_MEMBER_ID);

        // Member B joins: its join waits for A to rejoin (A learns from its heartbeat).
        let coord_b = coordinator.clone();
        let b_thread = std::thread::spawn(move || {
            let mut b = Client::connect(&coord_b);
            let jb = b.join_new();
            (b, jb)
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let e = a.heartbeat(gen1, &am);
            if e == REBALANCE_IN_PROGRESS {
                break;
            }
            assert_eq!(e, NONE);
            assert!(Instant::now() < deadline, "no rebalance");
            std::thread::sleep(Duration::from_millis(20));
        }
        let ja = a.join(&am);
        let (mut b, jb) = b_thread.join().unwrap();
        assert_eq!(ja.error_code, NONE);
        assert_eq!(jb.error_code, NONE);
        let gen2 = ja.generation_id;
        let bm = jb.member_id.clone();
        assert_eq!(gen2, gen1 + 1);
        assert_eq!(jb.generation_id, gen2);
        assert_eq!(jb.leader, am);
        assert!(jb.members.is_empty(), "only the leader gets the members");
        let mut ids: Vec<&str> = ja.members.iter().map(|m| m.member_id.as_str()).collect();
        ids.sort();
        let mut want = vec![am.as_str(), bm.as_str()];
        want.sort();
        assert_eq!(ids, want);
        let b_meta = ja.members.iter().find(|m| m.member_id == bm).unwrap();
        assert_eq!(b_meta.metadata, Bytes::from(format!("meta-{bm}")));
        // The old generation can no longer commit.
        assert_eq!(a.commit(gen1, &am, 6), ILLEGAL_GENERATION);

        // B's sync waits for the leader's assignment.
        let bm2 = bm.clone();
        let b_sync = std::thread::spawn(move || {
            let r = b.sync(gen2, &bm2, &[]);
            (b, r)
        });
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            a.sync(gen2, &am, &[(&am, "p0-to-a"), (&bm, "nothing-for-b")]),
            (NONE, Bytes::from("p0-to-a"))
        );
        let (mut b, rb) = b_sync.join().unwrap();
        assert_eq!(rb, (NONE, Bytes::from("nothing-for-b")));
        assert_eq!(b.heartbeat(gen2, &bm), NONE);
        assert_eq!(b.heartbeat(gen2, "stranger"), UNKNOWN_MEMBER_ID);
        assert_eq!(b.heartbeat(gen1, &bm), ILLEGAL_GENERATION);

        // Commit in the new generation; every reader sees it.
        assert_eq!(a.commit(gen2, &am, 7), NONE);
        assert_eq!(b.fetch_offsets(), (NONE, vec![(0, 7), (1, -1)]));
        // Older OffsetFetch versions: v1 (one group, per-partition answers), v7 with null
        // topics (all of the group's).
        let Response::OffsetFetch(r) = b.call(
            1,
            Request::OffsetFetch(OffsetFetchRequest {
                group_id: GROUP.into(),
                topics: Some(vec![OffsetFetchRequestTopic {
                    name: TOPIC.into(),
                    partition_indexes: vec![0],
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        ) else {
            panic!()
        };
        assert_eq!(r.topics[0].partitions[0].committed_offset, 7);
        assert_eq!(r.topics[0].partitions[0].metadata.as_deref(), Some("at 7"));
        let Response::OffsetFetch(r) = b.call(
            7,
            Request::OffsetFetch(OffsetFetchRequest {
                group_id: GROUP.into(),
                topics: None,
                ..Default::default()
            }),
        ) else {
            panic!()
        };
        assert_eq!(r.error_code, NONE);
        assert_eq!(r.topics.len(), 1);
        assert_eq!(r.topics[0].name, TOPIC);
        assert_eq!(r.topics[0].partitions[0].committed_offset, 7);

        // Describe and list.
        let (state, mut members) = a.describe();
        members.sort();
        assert_eq!(state, "Stable");
        assert_eq!(members, want);
        let Response::ListGroups(r) = a.call(
            5,
            Request::ListGroups(ListGroupsRequest {
                states_filter: vec!["stable".into()],
                ..Default::default()
            }),
        ) else {
            panic!()
        };
        assert!(
            r.groups
                .iter()
                .any(|g| g.group_id == GROUP && g.protocol_type == "consumer"),
            "{r:?}"
        );

        // B leaves; A rebalances alone into the next generation.
        assert_eq!(b.leave(&[&bm, "stranger"]), vec![NONE, UNKNOWN_MEMBER_ID]);
        assert_eq!(a.heartbeat(gen2, &am), REBALANCE_IN_PROGRESS);
        let ja = a.join(&am);
        assert_eq!(ja.error_code, NONE);
        assert_eq!(ja.generation_id, gen2 + 1);
        assert_eq!(ja.members.len(), 1);
        assert_eq!(a.sync(gen2 + 1, &am, &[(&am, "x")]).0, NONE);
        assert_eq!(a.leave(&[&am]), vec![NONE]);
        // Without members the group is Empty (it has committed offsets), and standalone
        // commits are allowed.
        assert_eq!(a.describe(), ("Empty".to_string(), vec![]));
        assert_eq!(a.commit(-1, "", 8), NONE);
        assert_eq!(a.fetch_offsets(), (NONE, vec![(0, 8), (1, -1)]));
    })
    .await;
    for n in &nodes {
        n.shutdown();
    }
    result.unwrap();
}

/// Issue 20 item 1: when the coordinator (the metadata leader) goes, the new one loads the
/// groups' membership from the metadata: both members' next heartbeats there succeed in the same
/// generation (no rebalance), the group is Stable with the same members, and commits of that
/// generation are accepted; committed offsets are there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_and_offsets_survive_the_coordinators_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(dir.path()).await;
    let leader = common::metadata_leader(&nodes).expect("a metadata leader");
    let survivor = nodes[(leader + 1) % 3].config().kafka_advertised.clone();
    let old_id = nodes[leader].config().id as i32;

    let (am, bm, generation) = {
        let survivor = survivor.clone();
        tokio::task::spawn_blocking(move || {
            let mut f = Client::connect(&survivor);
            let (_, coordinator) = f.find_coordinator(GROUP);
            let coord_b = coordinator.clone();
            let b_thread = std::thread::spawn(move || {
                let mut b = Client::connect(&coord_b);
                let jb = b.join_new();
                (b, jb)
            });
            let mut a = Client::connect(&coordinator);
            let ja = a.join_new();
            let (b, jb) = b_thread.join().unwrap();
            assert_eq!((ja.error_code, jb.error_code), (NONE, NONE));
            assert_eq!(ja.generation_id, jb.generation_id);
            let generation = ja.generation_id;
            let (leader, follower) = if ja.leader == ja.member_id {
                ((a, ja.member_id), (b, jb.member_id))
            } else {
                ((b, jb.member_id), (a, ja.member_id))
            };
            let ((mut l, lm), (mut fo, fm)) = (leader, follower);
            let fm2 = fm.clone();
            let f_sync = std::thread::spawn(move || {
                let r = fo.sync(generation, &fm2, &[]);
                (fo, r)
            });
            assert_eq!(
                l.sync(generation, &lm, &[(&lm, "p0"), (&fm, "p1")]),
                (NONE, Bytes::from("p0"))
            );
            let (_fo, r) = f_sync.join().unwrap();
            assert_eq!(r, (NONE, Bytes::from("p1")));
            assert_eq!(l.commit(generation, &lm, 42), NONE);
            (lm, fm, generation)
        })
        .await
        .unwrap()
    };
    // SyncGroup is answered once the group's record is written (as in Kafka): the coordinator
    // has applied it; then it reaches every node.
    assert!(nodes[leader]
        .metadata()
        .groups
        .get(GROUP)
        .is_some_and(|r| r.generation == generation && r.members.len() == 2));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !nodes.iter().all(|n| {
        n.metadata()
            .groups
            .get(GROUP)
            .is_some_and(|r| r.generation == generation && r.members.len() == 2)
    }) {
        assert!(
            Instant::now() < deadline,
            "the group's membership was not stored"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The coordinator dies; a new metadata leader takes over as coordinator.
    common::kill_metadata_leader(&nodes, leader).await;

    let result = tokio::task::spawn_blocking(move || {
        let mut f = Client::connect(&survivor);
        // Until the survivor stops naming the dead node (its peer connection closed).
        let deadline = Instant::now() + Duration::from_secs(10);
        let (new_id, coordinator) = loop {
            let Response::FindCoordinator(r) = f.call(
                4,
                Request::FindCoordinator(FindCoordinatorRequest {
                    coordinator_keys: vec![GROUP.into()],
                    ..Default::default()
                }),
            ) else {
                panic!()
            };
            let c = &r.coordinators[0];
            if c.error_code == NONE && c.node_id != old_id {
                break (c.node_id, format!("{}:{}", c.host, c.port));
            }
            assert!(Instant::now() < deadline, "no new coordinator: {c:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_ne!(new_id, old_id);
        let mut a = Client::connect(&coordinator);
        let first = common::until_coordinator_serves(|| a.heartbeat(generation, &am));
        // Both members are recognised in the same generation: no rebalance.
        assert_eq!(first, NONE);
        assert_eq!(a.heartbeat(generation, &bm), NONE);
        let (state, mut members) = a.describe();
        members.sort();
        let mut want = vec![am.clone(), bm.clone()];
        want.sort();
        assert_eq!((state.as_str(), members), ("Stable", want));
        // The committed offset is there, and the generation commits.
        assert_eq!(a.fetch_offsets(), (NONE, vec![(0, 42), (1, -1)]));
        assert_eq!(a.commit(generation, &am, 43), NONE);
        assert_eq!(a.heartbeat(generation, &am), NONE);
    })
    .await;
    for n in &nodes {
        n.shutdown();
    }
    result.unwrap();
}

/// Item 4 of issue 20: an offset commit validated by a coordinator is written only while that
/// node still leads the metadata group in the term it validated in: a follower or a stale term
/// gets NOT_LEADER at once (the handler answers NOT_COORDINATOR), never a commit forwarded to
/// or retried through another leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_coordinators_commit_is_not_forwarded() {
    use vdl_server::metadata::{CommittedOffset, MetaCommand};
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(dir.path()).await;
    let leader = common::metadata_leader(&nodes).expect("a metadata leader");
    let term = nodes[leader].metadata_group().unwrap().visible().term;
    let commit = |offset| MetaCommand::CommitOffsets {
        group: "deposed".into(),
        offsets: vec![CommittedOffset {
            topic: TOPIC.into(),
            partition: 0,
            offset,
            leader_epoch: -1,
            metadata: None,
        }],
        commit_time_ms: 0,
    };
    let timeout = Duration::from_secs(10);
    let started = Instant::now();
    let follower = &nodes[(leader + 1) % 3];
    let r = follower
        .metadata_proposer()
        .propose_in_term(&commit(5), term, timeout)
        .await;
    assert!(
        matches!(
            r,
            Err(vdl_server::replication::group::AppendError::NotLeader { .. })
        ),
        "{r:?}"
    );
    let r = nodes[leader]
        .metadata_proposer()
        .propose_in_term(&commit(6), term - 1, timeout)
        .await;
    assert!(
        matches!(
            r,
            Err(vdl_server::replication::group::AppendError::NotLeader { .. })
        ),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2), "not retried");
    // In its own term the leader commits.
    nodes[leader]
        .metadata_proposer()
        .propose_in_term(&commit(7), term, timeout)
        .await
        .unwrap();
    for n in &nodes {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let got = n
                .metadata()
                .offsets
                .get("deposed")
                .and_then(|g| g.get(&(TOPIC.to_string(), 0)))
                .map(|o| o.offset);
            if got == Some(7) {
                break;
            }
            assert!(Instant::now() < deadline, "{got:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for n in &nodes {
        n.shutdown();
    }
}

/// Issue 20 item 5: OffsetFetch takes its read barrier with Raft's ReadIndex: many fetches
/// append no metadata entry and still read the latest commit; a follower's barrier fails
/// NOT_LEADER at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_fetch_appends_no_metadata_entry() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(dir.path()).await;
    let leader = common::metadata_leader(&nodes).expect("a metadata leader");
    let follower = nodes[(leader + 1) % 3].metadata_group().unwrap();
    let r = follower.read_index(Duration::from_secs(5)).await;
    assert!(
        matches!(
            r,
            Err(vdl_server::replication::group::AppendError::NotLeader { .. })
        ),
        "{r:?}"
    );
    let meta = nodes[leader].metadata_group().unwrap();
    let coordinator = nodes[leader].config().kafka_advertised.clone();
    let (before, after) = tokio::task::spawn_blocking(move || {
        let mut a = Client::connect(&coordinator);
        assert_eq!(a.commit(-1, "", 9), NONE);
        let before = meta.visible().applied_index;
        for _ in 0..20 {
            assert_eq!(a.fetch_offsets(), (NONE, vec![(0, 9), (1, -1)]));
        }
        (before, meta.visible().applied_index)
    })
    .await
    .unwrap();
    assert_eq!(before, after, "OffsetFetch appended metadata entries");
    for n in &nodes {
        n.shutdown();
    }
}

/// Issue 20 item 5: the committed offsets of a group without members expire once idle for
/// `kafka.offsets_retention_ms` (1.5 s here), on every node; a group with a member keeps its
/// offsets however old they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_groups_offsets_expire_after_the_retention() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster_with(dir.path(), |c| {
        c.kafka.offsets_retention = Duration::from_millis(1_500);
        c.kafka.offsets_retention_check_interval = Duration::from_millis(200);
    })
    .await;
    let leader = common::metadata_leader(&nodes).expect("a metadata leader");
    let coordinator = nodes[leader].config().kafka_advertised.clone();
    let (am, generation, mut a) = tokio::task::spawn_blocking(move || {
        let mut a = Client::connect(&coordinator);
        // A member of GROUP commits; a standalone commit goes to another group.
        let ja = a.join_new();
        let (am, generation) = (ja.member_id.clone(), ja.generation_id);
        assert_eq!(a.sync(generation, &am, &[(&am, "all")]).0, NONE);
        assert_eq!(a.commit(generation, &am, 11), NONE);
        let Response::OffsetCommit(r) = a.call(
            2,
            Request::OffsetCommit(OffsetCommitRequest {
                group_id: "idle-group".into(),
                generation_id_or_member_epoch: -1,
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
            }),
        ) else {
            panic!()
        };
        assert_eq!(r.topics[0].partitions[0].error_code, NONE);
        (am, generation, a)
    })
    .await
    .unwrap();
    let has = |n: &Node, group: &str| n.metadata().offsets.contains_key(group);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(5);
    // Every node applies both commits (the leader has already).
    while !nodes.iter().all(|n| has(n, "idle-group") && has(n, GROUP)) {
        assert!(
            Instant::now() < deadline,
            "the commits did not reach every node"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let deadline = started + Duration::from_secs(10);
    while nodes.iter().any(|n| has(n, "idle-group")) {
        assert!(
            Instant::now() < deadline,
            "the idle group's offsets never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The member keeps its session.
        let (am, gen) = (am.clone(), generation);
        a = tokio::task::spawn_blocking(move || {
            assert_eq!(a.heartbeat(gen, &am), NONE);
            a
        })
        .await
        .unwrap();
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1_000),
        "expired before the retention"
    );
    assert!(
        nodes.iter().all(|n| has(n, GROUP)),
        "the group with a member keeps its offsets"
    );
    for n in &nodes {
        n.shutdown();
    }
}

fn kcat_produce(bootstrap: &str, lines: &[String]) {
    let mut cmd = kcat();
    cmd.args(["-b", bootstrap, "-t", TOPIC, "-P", "-X", "acks=all"]);
    let (ok, _, err) = run(
        cmd,
        (lines.join("\n") + "\n").as_bytes(),
        Duration::from_secs(20),
    );
    assert!(ok, "kcat produce failed: {err}");
}

/// One run of kcat's balanced consumer in group `group`, to the end of the topic.
fn kcat_group_consume(bootstrap: &str, group: &str) -> Vec<(u64, String)> {
    let mut cmd = kcat();
    cmd.args([
        "-b",
        bootstrap,
        "-G",
        group,
        "-X",
        "auto.offset.reset=earliest",
        "-X",
        "enable.auto.commit=true",
        "-X",
        "auto.commit.interval.ms=100",
        "-e",
        "-f",
        "%o %s\n",
        TOPIC,
    ]);
    let (ok, out, err) = run(cmd, b"", Duration::from_secs(40));
    assert!(ok, "kcat -G failed: {err}");
    out.lines()
        .map(|l| {
            let (o, v) = l.split_once(' ').unwrap();
            (o.parse().unwrap(), v.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_balanced_consumer_resumes_after_committed_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster(dir.path()).await;
    let leader = common::metadata_leader(&nodes).expect("a metadata leader");
    // Bootstrap at a node that is not the coordinator: the client must find it.
    let bootstrap = nodes[(leader + 1) % 3].config().kafka_advertised.clone();

    let result = tokio::task::spawn_blocking(move || {
        let first: Vec<String> = (0..10).map(|i| format!("first-{i}")).collect();
        kcat_produce(&bootstrap, &first);
        let got = kcat_group_consume(&bootstrap, "kcat-group");
        let values: Vec<&str> = got.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(values, first.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(got.first().map(|g| g.0), Some(0));

        // The group committed the end of what it read.
        let mut f = Client::connect(&bootstrap);
        let (_, coordinator) = f.find_coordinator("kcat-group");
        let mut c = Client::connect(&coordinator);
        let Response::OffsetFetch(r) = c.call(
            8,
            Request::OffsetFetch(OffsetFetchRequest {
                groups: vec![OffsetFetchRequestGroup {
                    group_id: "kcat-group".into(),
                    topics: None,
                    ..Default::default()
                }],
                ..Default::default()
            }),
        ) else {
            panic!()
        };
        assert_eq!(
            r.groups[0].topics[0].partitions[0].committed_offset, 10,
            "{r:?}"
        );

        // A second run of the same group reads only what came after.
        let second: Vec<String> = (0..5).map(|i| format!("second-{i}")).collect();
        kcat_produce(&bootstrap, &second);
        let got = kcat_group_consume(&bootstrap, "kcat-group");
        let values: Vec<&str> = got.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(
            values,
            second.iter().map(String::as_str).collect::<Vec<_>>()
        );
        assert_eq!(got.first().map(|g| g.0), Some(10));
    })
    .await;
    for n in &nodes {
        n.shutdown();
    }
    result.unwrap();
}
