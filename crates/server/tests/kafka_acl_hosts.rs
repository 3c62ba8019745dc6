//! ACL host rules for IPv6 clients (issue 33, item 6): a client on `::1` is the host
//! `0:0:0:0:0:0:0:1`, as Kafka writes it (`InetAddress.getHostAddress()`), so a DENY written in
//! Kafka's form applies to it; a DENY written compressed (`::1`) applies too; neither applies to
//! the same principal on 127.0.0.1.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster_configs;
use common::kafka::KafkaConn;
use vdl_server::metadata::MetaCommand;
use vdl_server::security::acl::AclBinding;
use vdl_server::security::authorizer::AuthorizerMode;
use vdl_server::security::config::KafkaListenerConfig;
use vdl_server::Node;

const TOPIC: &str = "hosts";
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const WAIT: Duration = Duration::from_secs(20);

/// Kafka's codes: resource TOPIC 2, LITERAL 3, operations ALL 2, READ 3, WRITE 4, permissions
/// DENY 2, ALLOW 3.
fn binding(host: &str, operation: i8, permission: i8) -> AclBinding {
    AclBinding::from_kafka(2, TOPIC, 3, "User:ANONYMOUS", host, operation, permission).unwrap()
}

/// Runs `f` until it returns true (each node applies ACLs from the metadata log).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ipv6_client_hosts_match_kafka_form_and_compressed_rules() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster_configs(1, dir.path(), &[]).remove(0);
    c.security.authorizer = AuthorizerMode::Acl;
    // A second listener on the IPv6 loopback, next to the IPv4 one.
    let v6_port = common::free_ports(1)[0];
    let v6: SocketAddr = format!("[::1]:{v6_port}").parse().unwrap();
    let v4 = c.kafka_listen;
    let mut ipv6 = KafkaListenerConfig::plaintext(v6, v6.to_string());
    ipv6.name = "IPV6".into();
    c.listeners = vec![
        KafkaListenerConfig::plaintext(v4, c.kafka_advertised.clone()),
        ipv6,
    ];
    let node: Arc<Node> = rt.block_on(async {
        let n = Node::start(c).await.expect("node starts");
        n.serve_kafka().await.expect("kafka listeners");
        n.create_topic(TOPIC, 1, WAIT).await.expect("topic created");
        // Everyone may do everything on the topic, except: READ denied to the IPv6 loopback in
        // Kafka's form, WRITE denied to it written compressed.
        n.metadata_proposer()
            .propose(
                &MetaCommand::CreateAcls {
                    acls: vec![
                        binding("*", 2, 3),
                        binding("0:0:0:0:0:0:0:1", 3, 2),
                        binding("::1", 4, 2),
                    ],
                },
                WAIT,
            )
            .await
            .expect("ACLs committed");
        n
    });
    let records = common::batch(2, b"v");
    // From 127.0.0.1 nothing is denied.
    eventually("IPv4 client allowed", || {
        let mut k = KafkaConn::connect(v4).unwrap();
        k.produce(TOPIC, records.clone()).unwrap().0 == 0 && k.fetch(TOPIC, 0).unwrap().0 == 0
    });
    // From ::1 both DENYs apply.
    let mut k = KafkaConn::connect(v6).unwrap();
    assert_eq!(
        k.fetch(TOPIC, 0).unwrap().0,
        TOPIC_AUTHORIZATION_FAILED,
        "a DENY for host 0:0:0:0:0:0:0:1 did not apply to a client on ::1"
    );
    assert_eq!(
        k.produce(TOPIC, records.clone()).unwrap().0,
        TOPIC_AUTHORIZATION_FAILED,
        "a DENY for host ::1 did not apply to a client on ::1"
    );
    // DESCRIBE is not denied: the topic is still listed and its offsets readable.
    assert_eq!(k.list_offset(TOPIC, -1).unwrap().0, 0);
    node.shutdown();
}
