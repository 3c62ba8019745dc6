//! The admin API's authentication and authorization in-process (issue 33; against real
//! processes over HTTPS: tests/clients/test_admin_auth.py): anonymous calls and Basic over
//! plain HTTP refused, a user without ACLs forbidden and a super user allowed once Basic is
//! allowed without TLS, and `/cluster/status` refusing to file one node's answer under another
//! node's id.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::HeaderValue;
use base64::Engine;
use common::{cluster_configs, free_ports};
use vdl_server::config::{AdminSettings, NodeConfig};
use vdl_server::security::authorizer::AuthorizerMode;
use vdl_server::security::config::ScramUser;
use vdl_server::security::scram::{ScramCredential, ScramMechanism};
use vdl_server::Node;

const T: Duration = Duration::from_secs(30);

fn user(name: &str, password: &str) -> Vec<ScramUser> {
    ScramMechanism::ALL
        .into_iter()
        .map(|m| ScramUser {
            name: name.into(),
            credential: ScramCredential::generate(m, password, 4096),
        })
        .collect()
}

fn basic(user: &str, password: &str) -> HeaderValue {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    HeaderValue::from_str(&format!("Basic {token}")).unwrap()
}

/// Starts `config`'s node with its Kafka listener and its admin listener on a free port: (node, admin address).
async fn start(mut config: NodeConfig) -> (Arc<Node>, String) {
    let port = free_ports(1)[0];
    config.admin_listen = Some(([127, 0, 0, 1], port).into());
    let node = Node::start(config).await.expect("node starts");
    // As `vdl start` does (the ACLs become current once the Kafka listeners run).
    node.serve_kafka().await.expect("Kafka listeners");
    let addr = format!("127.0.0.1:{port}");
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
    tokio::spawn(vdl_server::admin::serve(listener, node.clone()));
    (node, addr)
}

async fn call(addr: &str, auth: Option<HeaderValue>, path: &str) -> u16 {
    let plain = AdminSettings::default();
    vdl_server::admin::peer_client::call_peer_as(&plain, auth.as_ref(), addr, "GET", path, T)
        .await
        .expect("admin answers")
        .0
}

fn secured(config: &mut NodeConfig) {
    config.security.authorizer = AuthorizerMode::Acl;
    config.security.super_users = vec!["User:root".into()];
    config.security.scram_users = [user("root", "root-pw"), user("ops", "ops-pw")].concat();
    config.admin.require_auth = true;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn anonymous_calls_and_basic_over_plain_http_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = cluster_configs(1, dir.path(), &["s"]).remove(0);
    secured(&mut config);
    let (_node, addr) = start(config).await;
    for path in [
        "/status",
        "/metrics",
        "/members",
        "/cluster/status",
        "/streams/s/records?offset=0",
    ] {
        assert_eq!(call(&addr, None, path).await, 401, "{path} anonymous");
        // The right password, but over plain HTTP: refused, never checked.
        assert_eq!(
            call(&addr, Some(basic("root", "root-pw")), path).await,
            401,
            "{path} Basic without TLS"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn basic_users_are_authorized_by_the_acls() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = cluster_configs(1, dir.path(), &["s"]).remove(0);
    secured(&mut config);
    config.admin.allow_basic_without_tls = true;
    let (node, addr) = start(config).await;
    let deadline = Instant::now() + T;
    while !node.acls_current() {
        assert!(Instant::now() < deadline, "ACLs never current");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(call(&addr, None, "/status").await, 401);
    assert_eq!(
        call(&addr, Some(basic("ops", "wrong")), "/status").await,
        401
    );
    assert_eq!(
        call(&addr, Some(basic("nobody", "x")), "/status").await,
        401
    );
    // Operators see refusals in /status: three 401s so far.
    assert_eq!(
        node.security_stats()
            .snapshot()
            .admin_authentication_failures,
        3
    );
    assert_eq!(node.security_stats().snapshot().admin_calls_denied, 0);
    for path in [
        "/status",
        "/metrics",
        "/rates",
        "/streams/s/records?offset=0",
    ] {
        assert_eq!(
            call(&addr, Some(basic("ops", "ops-pw")), path).await,
            403,
            "{path} ops"
        );
        assert_eq!(
            call(&addr, Some(basic("root", "root-pw")), path).await,
            200,
            "{path} root"
        );
    }
    assert_eq!(node.security_stats().snapshot().admin_calls_denied, 4);
    assert_eq!(
        node.security_stats()
            .snapshot()
            .admin_authentication_failures,
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_status_never_files_an_answer_under_another_nodes_id() {
    let dir = tempfile::tempdir().unwrap();
    let configs = cluster_configs(2, dir.path(), &["s"]);
    let mut nodes = Vec::new();
    let mut addrs = Vec::new();
    for c in configs {
        let (node, addr) = start(c).await;
        nodes.push(node);
        addrs.push(addr);
    }
    // Node 2 announces node 1's address (as two nodes announcing the same loopback bind would).
    vdl_server::admin::operator::announce_admin_address(
        &nodes[0],
        addrs[0].clone(),
        Duration::from_secs(300),
    );
    vdl_server::admin::operator::announce_admin_address(
        &nodes[1],
        addrs[0].clone(),
        Duration::from_secs(300),
    );
    let deadline = Instant::now() + T;
    while nodes[0].admin_addresses().len() < 2 {
        assert!(Instant::now() < deadline, "admin addresses not announced");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = vdl_server::admin::operator::gather_cluster_status(&nodes[0]).await;
    let two = status
        .nodes
        .iter()
        .find(|n| n.id == 2)
        .expect("node 2 listed");
    assert!(!two.reachable, "{status:?}");
    assert!(
        status
            .problems
            .iter()
            .any(|p| p.contains("node 2") && p.contains("answered as node 1")),
        "{:?}",
        status.problems
    );
}
