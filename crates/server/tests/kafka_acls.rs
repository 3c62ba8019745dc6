//! Authorization and users over the Kafka protocol, on a three-node cluster with
//! `authorizer = "acl"`: with no ACLs the anonymous principal is refused with Kafka's errors and
//! sees no topic; ACLs created through one node (CreateAcls) apply on every node, a DENY wins
//! over an ALLOW and DeleteAcls removes it again; SCRAM credentials altered through one node
//! (AlterUserScramCredentials) are stored as derived keys on every node, with Kafka's errors for
//! bad alterations; and a started node refuses everyone (but super users) until its ACLs are
//! current.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::cluster_configs;
use common::kafka::{on_any, KafkaConn};
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::alter_user_scram_credentials_request::{
    AlterUserScramCredentialsRequest, ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_proto::messages::create_acls_request::{AclCreation, CreateAclsRequest};
use kafka_proto::messages::delete_acls_request::{DeleteAclsFilter, DeleteAclsRequest};
use kafka_proto::messages::describe_acls_request::DescribeAclsRequest;
use kafka_proto::messages::describe_user_scram_credentials_request::DescribeUserScramCredentialsRequest;
use kafka_proto::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_proto::messages::metadata_request::MetadataRequest;
use kafka_proto::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use vdl_server::config::NodeConfig;
use vdl_server::metadata::MetaCommand;
use vdl_server::security::acl::{AclBinding, AclOperation, AclPermission, PatternType};
use vdl_server::security::authorizer::AuthorizerMode;
use vdl_server::security::scram::{ScramCredential, ScramMechanism};
use vdl_server::Node;

const TOPIC: &str = "secret";
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const GROUP_AUTHORIZATION_FAILED: i16 = 30;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
const WAIT: Duration = Duration::from_secs(20);

fn call(addr: SocketAddr, api: ApiKey, version: i16, req: &Request) -> Response {
    KafkaConn::connect(addr)
        .and_then(|mut c| c.call(api, version, req))
        .expect("a response")
}

/// DescribeAcls v3 of every binding (filters ANY): the response.
fn describe_every_acl(addr: SocketAddr) -> Response {
    let req = Request::DescribeAcls(DescribeAclsRequest {
        resource_type_filter: 1,
        resource_name_filter: None,
        principal_filter: None,
        host_filter: None,
        pattern_type_filter: 1,
        operation: 1,
        permission_type: 1,
        ..Default::default()
    });
    call(addr, ApiKey::DescribeAcls, 3, &req)
}

/// Every topic an all-topics Metadata request lists.
fn listed_topics(addr: SocketAddr) -> Vec<String> {
    let req = Request::Metadata(MetadataRequest {
        topics: None,
        ..Default::default()
    });
    match call(addr, ApiKey::Metadata, 12, &req) {
        Response::Metadata(r) => r.topics.into_iter().filter_map(|t| t.name).collect(),
        other => panic!("{other:?}"),
    }
}

/// Waits up to [`WAIT`] for `done` (a change committed through one node reaches the others
/// when they apply it).
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn acl(
    op: AclOperation,
    permission: AclPermission,
    pattern: PatternType,
    name: &str,
) -> AclBinding {
    AclBinding {
        resource_type: vdl_server::security::acl::ResourceType::Topic,
        resource_name: name.into(),
        pattern_type: pattern,
        principal: "User:ANONYMOUS".into(),
        host: "*".into(),
        operation: op,
        permission,
    }
}

fn create_acl(addr: SocketAddr, b: &AclBinding) -> i16 {
    let req = Request::CreateAcls(CreateAclsRequest {
        creations: vec![AclCreation {
            resource_type: b.resource_type.code(),
            resource_name: b.resource_name.clone(),
            resource_pattern_type: b.pattern_type.code(),
            principal: b.principal.clone(),
            host: b.host.clone(),
            operation: b.operation.code(),
            permission_type: b.permission.code(),
            ..Default::default()
        }],
        ..Default::default()
    });
    match call(addr, ApiKey::CreateAcls, 3, &req) {
        Response::CreateAcls(r) => r.results[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// CreateAcls through `addr` once that node has applied the ALTER on the cluster given through
/// another node (and its ACLs are current after its start): CLUSTER_AUTHORIZATION_FAILED until
/// then. Creating an ACL twice is no error, so retrying is safe.
fn create_acl_when_allowed(addr: SocketAddr, b: &AclBinding) {
    let mut code = CLUSTER_AUTHORIZATION_FAILED;
    eventually("CreateAcls allowed", || {
        code = create_acl(addr, b);
        code != CLUSTER_AUTHORIZATION_FAILED
    });
    assert_eq!(code, 0);
}

fn configs(root: &std::path::Path) -> Vec<NodeConfig> {
    let mut configs = cluster_configs(3, root, &[]);
    for c in &mut configs {
        c.security.authorizer = AuthorizerMode::Acl;
        c.security.super_users = vec!["User:admin".into()];
    }
    configs
}

#[test]
fn acls_decide_what_the_anonymous_principal_may_do_on_every_node() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let configs = configs(dir.path());
    let nodes: Vec<Arc<Node>> = rt.block_on(async {
        let mut nodes = Vec::new();
        for c in &configs {
            let n = Node::start(c.clone()).await.expect("node starts");
            n.serve_kafka().await.expect("kafka listener");
            nodes.push(n);
        }
        // Created through the node, not through Kafka (no principal may create it yet).
        nodes[0]
            .create_topic(TOPIC, 1, WAIT)
            .await
            .expect("topic created");
        nodes
    });
    let brokers: Vec<SocketAddr> = configs.iter().map(|c| c.kafka_listen).collect();
    let records = common::batch(3, b"v");

    // No ACLs: everything the anonymous principal tries is refused with Kafka's errors.
    for addr in &brokers {
        let mut c = KafkaConn::connect(*addr).unwrap();
        assert_eq!(
            c.produce(TOPIC, records.clone()).unwrap().0,
            TOPIC_AUTHORIZATION_FAILED
        );
        assert_eq!(c.fetch(TOPIC, 0).unwrap().0, TOPIC_AUTHORIZATION_FAILED);
        assert_eq!(c.metadata(TOPIC).unwrap().0, TOPIC_AUTHORIZATION_FAILED);
        assert_eq!(
            c.list_offset(TOPIC, -1).unwrap().0,
            TOPIC_AUTHORIZATION_FAILED
        );
        assert_eq!(
            c.create_topic("another").unwrap(),
            TOPIC_AUTHORIZATION_FAILED
        );
        assert!(!listed_topics(*addr).contains(&TOPIC.to_string()));
    }
    match call(
        brokers[1],
        ApiKey::InitProducerId,
        4,
        &Request::InitProducerId(InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: -1,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        }),
    ) {
        Response::InitProducerId(r) => assert_eq!(r.error_code, CLUSTER_AUTHORIZATION_FAILED),
        other => panic!("{other:?}"),
    }
    match describe_every_acl(brokers[2]) {
        Response::DescribeAcls(r) => assert_eq!(r.error_code, CLUSTER_AUTHORIZATION_FAILED),
        other => panic!("{other:?}"),
    }
    // WriteTxnMarkers needs CLUSTER_ACTION (brokers and super users): refused per partition,
    // and nothing is written.
    let markers = common::requests::txn_markers(TOPIC, &[(7, 0, false)]);
    for addr in &brokers {
        match call(*addr, ApiKey::WriteTxnMarkers, 1, &markers) {
            Response::WriteTxnMarkers(r) => assert_eq!(
                r.markers[0].topics[0].partitions[0].error_code,
                CLUSTER_AUTHORIZATION_FAILED
            ),
            other => panic!("{other:?}"),
        }
    }
    let written = nodes
        .iter()
        .find_map(|n| n.stream(TOPIC))
        .map(|s| s.visible().high_watermark);
    assert_eq!(written, Some(0), "a refused marker wrote nothing");
    assert_eq!(
        create_acl(
            brokers[0],
            &acl(
                AclOperation::Write,
                AclPermission::Allow,
                PatternType::Literal,
                TOPIC
            )
        ),
        CLUSTER_AUTHORIZATION_FAILED
    );

    // An administrator (here: the node itself) lets the anonymous principal manage ACLs.
    rt.block_on(nodes[0].metadata_proposer().propose(
        &MetaCommand::CreateAcls {
            acls: vec![
                AclBinding::from_kafka(4, "kafka-cluster", 3, "User:ANONYMOUS", "*", 7, 3).unwrap(),
            ],
        },
        WAIT,
    ))
    .unwrap();

    // ACLs created through node 3 apply on every node: WRITE on the topic, READ by prefix.
    create_acl_when_allowed(
        brokers[2],
        &acl(
            AclOperation::Write,
            AclPermission::Allow,
            PatternType::Literal,
            TOPIC,
        ),
    );
    create_acl_when_allowed(
        brokers[2],
        &acl(
            AclOperation::Read,
            AclPermission::Allow,
            PatternType::Prefixed,
            "sec",
        ),
    );
    let offset = on_any(&brokers, WAIT, "authorized produce", |c| {
        c.produce(TOPIC, records.clone())
    });
    assert_eq!(offset, 0);
    let (_, hw, _, bytes) = on_any(&brokers, WAIT, "authorized fetch", |c| {
        c.fetch(TOPIC, 0)
            .map(|(e, hw, lso, b)| (e, (e, hw, lso, b)))
    });
    assert_eq!(hw, 3);
    assert!(!bytes.is_empty());
    for addr in &brokers {
        // READ implies DESCRIBE: the topic is listed everywhere now.
        let deadline = std::time::Instant::now() + WAIT;
        while !listed_topics(*addr).contains(&TOPIC.to_string()) {
            assert!(
                std::time::Instant::now() < deadline,
                "{addr} still hides {TOPIC}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // A DENY wins over the ALLOW.
    let deny = acl(
        AclOperation::Write,
        AclPermission::Deny,
        PatternType::Literal,
        TOPIC,
    );
    create_acl_when_allowed(brokers[1], &deny);
    // Every node refuses once it has applied the deny (node 2 had when CreateAcls answered;
    // the partition's leader may take a moment longer, as a Kafka broker does).
    for addr in &brokers {
        eventually("the deny applied on every node", || {
            let mut c = KafkaConn::connect(*addr).unwrap();
            c.produce(TOPIC, records.clone()).unwrap().0 == TOPIC_AUTHORIZATION_FAILED
        });
    }
    // DescribeAcls lists the four bindings; DeleteAcls of the deny removes exactly it.
    match describe_every_acl(brokers[0]) {
        Response::DescribeAcls(r) => {
            assert_eq!((r.error_code, r.error_message.as_deref()), (0, None));
            let count: usize = r.resources.iter().map(|r| r.acls.len()).sum();
            assert_eq!(count, 4, "{r:?}");
        }
        other => panic!("{other:?}"),
    }
    match call(
        brokers[0],
        ApiKey::DeleteAcls,
        3,
        &Request::DeleteAcls(DeleteAclsRequest {
            filters: vec![DeleteAclsFilter {
                resource_type_filter: 2,
                resource_name_filter: Some(TOPIC.into()),
                pattern_type_filter: 1,
                principal_filter: None,
                host_filter: None,
                operation: 1,
                permission_type: AclPermission::Deny.code(),
                ..Default::default()
            }],
            ..Default::default()
        }),
    ) {
        Response::DeleteAcls(r) => {
            assert_eq!(r.filter_results[0].error_code, 0);
            assert_eq!(r.filter_results[0].matching_acls.len(), 1);
        }
        other => panic!("{other:?}"),
    }
    let offset = on_any(&brokers, WAIT, "produce after the deny went", |c| {
        c.produce(TOPIC, records.clone())
    });
    // After the first batch (and any a lagging leader took before it applied the deny).
    assert!(offset >= 3 && offset % 3 == 0, "{offset}");

    // SCRAM credentials: stored as derived keys on every node.
    let salted = ScramMechanism::Sha512.salted_password(b"alice-secret", b"NaCl", 8192);
    let upsert = |name: &str, mechanism: i8, iterations: i32| ScramCredentialUpsertion {
        name: name.into(),
        mechanism,
        iterations,
        salt: bytes::Bytes::from_static(b"NaCl"),
        salted_password: bytes::Bytes::from(salted.clone()),
        ..Default::default()
    };
    let alter = |req: AlterUserScramCredentialsRequest| -> Vec<(String, i16)> {
        match call(
            brokers[1],
            ApiKey::AlterUserScramCredentials,
            0,
            &Request::AlterUserScramCredentials(req),
        ) {
            Response::AlterUserScramCredentials(r) => r
                .results
                .into_iter()
                .map(|r| (r.user, r.error_code))
                .collect(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        alter(AlterUserScramCredentialsRequest {
            upsertions: vec![upsert("alice", 2, 8192)],
            ..Default::default()
        }),
        vec![("alice".to_string(), 0)]
    );
    let expected = ScramCredential::from_salted_password(
        ScramMechanism::Sha512,
        b"NaCl".to_vec(),
        8192,
        &salted,
    );
    for n in &nodes {
        eventually("alice's credential on every node", || {
            n.replicated_scram_credential("alice", ScramMechanism::Sha512) == Some(expected.clone())
        });
        assert_eq!(
            n.replicated_scram_credential("alice", ScramMechanism::Sha256),
            None
        );
    }
    // Kafka's errors: too few iterations, the same user and mechanism twice, deleting what
    // does not exist, an unknown mechanism; an empty user name.
    assert_eq!(
        alter(AlterUserScramCredentialsRequest {
            deletions: vec![
                ScramCredentialDeletion {
                    name: "bob".into(),
                    mechanism: 1,
                    ..Default::default()
                },
                ScramCredentialDeletion {
                    name: "dup".into(),
                    mechanism: 2,
                    ..Default::default()
                },
            ],
            upsertions: vec![
                upsert("carol", 2, 1000),
                upsert("dup", 2, 8192),
                upsert("dave", 7, 8192),
                upsert("", 2, 8192),
                // Two mechanisms of one user: still altered twice (as Kafka 3.9 answers).
                upsert("erin", 1, 8192),
                upsert("erin", 2, 8192),
            ],
            ..Default::default()
        }),
        vec![
            ("bob".to_string(), 91),
            ("dup".to_string(), 92),
            ("carol".to_string(), 93),
            ("dave".to_string(), 33),
            (String::new(), 93),
            ("erin".to_string(), 92),
        ]
    );
    // Asked of the node that altered (it applied the change before answering).
    match call(
        brokers[1],
        ApiKey::DescribeUserScramCredentials,
        0,
        &Request::DescribeUserScramCredentials(DescribeUserScramCredentialsRequest {
            users: None,
            ..Default::default()
        }),
    ) {
        Response::DescribeUserScramCredentials(r) => {
            assert_eq!(r.error_code, 0);
            assert_eq!(r.results.len(), 1, "{r:?}");
            assert_eq!(r.results[0].user, "alice");
            assert_eq!(r.results[0].credential_infos[0].mechanism, 2);
            assert_eq!(r.results[0].credential_infos[0].iterations, 8192);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        alter(AlterUserScramCredentialsRequest {
            deletions: vec![ScramCredentialDeletion {
                name: "alice".into(),
                mechanism: 2,
                ..Default::default()
            }],
            ..Default::default()
        }),
        vec![("alice".to_string(), 0)]
    );
    for n in &nodes {
        eventually("alice's credential gone on every node", || {
            n.replicated_scram_credential("alice", ScramMechanism::Sha512)
                .is_none()
        });
    }

    // TxnOffsetCommit, checked as Kafka's: WRITE on the transactional id first
    // (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group
    // (GROUP_AUTHORIZATION_FAILED), on any node, coordinator or not.
    let txn_offset_commit = |addr| {
        let req = Request::TxnOffsetCommit(TxnOffsetCommitRequest {
            transactional_id: "app".into(),
            group_id: "app-group".into(),
            producer_id: 7,
            topics: vec![TxnOffsetCommitRequestTopic {
                name: TOPIC.into(),
                partitions: vec![TxnOffsetCommitRequestPartition {
                    committed_offset: 1,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        match call(addr, ApiKey::TxnOffsetCommit, 3, &req) {
            Response::TxnOffsetCommit(r) => r.topics[0].partitions[0].error_code,
            other => panic!("{other:?}"),
        }
    };
    for addr in &brokers {
        assert_eq!(
            txn_offset_commit(*addr),
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        );
    }
    rt.block_on(nodes[0].metadata_proposer().propose(
        &MetaCommand::CreateAcls {
            acls: vec![AclBinding::from_kafka(5, "app", 3, "User:ANONYMOUS", "*", 4, 3).unwrap()],
        },
        WAIT,
    ))
    .unwrap();
    for addr in &brokers {
        eventually("WRITE on the transactional id applied", || {
            txn_offset_commit(*addr) == GROUP_AUTHORIZATION_FAILED
        });
    }
    for n in &nodes {
        n.shutdown();
    }
}

/// A started node decides nothing until its ACLs are current: with
/// `allow_everyone_if_no_acl_found` (every resource open while no ACL exists), a node alone in
/// its three-node cluster (no metadata majority, so no barrier can commit) still refuses; once
/// the other nodes are up it allows.
#[test]
fn a_node_refuses_until_its_acls_are_current() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut configs = configs(dir.path());
    for c in &mut configs {
        c.security.allow_everyone_if_no_acl_found = true;
    }
    let first = rt.block_on(async {
        let n = Node::start(configs[0].clone()).await.expect("node starts");
        n.serve_kafka().await.expect("kafka listener");
        n
    });
    let addr = configs[0].kafka_listen;
    let describe_acls = || match describe_every_acl(addr) {
        Response::DescribeAcls(r) => r.error_code,
        other => panic!("{other:?}"),
    };
    // Alone: no majority, nothing current, refused although no ACL exists.
    std::thread::sleep(Duration::from_secs(1));
    assert!(!first.acls_current());
    assert_eq!(describe_acls(), CLUSTER_AUTHORIZATION_FAILED);
    // With the others up, the barrier commits and the open cluster resource is allowed.
    let others: Vec<Arc<Node>> = rt.block_on(async {
        let mut nodes = Vec::new();
        for c in &configs[1..] {
            nodes.push(Node::start(c.clone()).await.expect("node starts"));
        }
        nodes
    });
    eventually("the first node's ACLs current", || first.acls_current());
    assert_eq!(describe_acls(), 0);
    first.shutdown();
    for n in &others {
        n.shutdown();
    }
}
