//! Peers prove their identity (issue 33, item 2), against three real `vdl` processes with
//! mutual TLS between nodes, in the worst configuration: ONE CA signs the node peer
//! certificates and a Kafka client certificate (what `deploy/local-cluster.sh` did before the
//! peer CA was separate). Everything is on 127.0.0.1, so the source-IP check admits every
//! connection: only the certificates tell nodes apart.
//!
//! - (a) a TLS connection with node 3's valid peer certificate whose hello claims node 2, then a
//!   forged metadata proposal (CreateTopic) "from node 2": refused, nothing committed;
//! - (b) the Kafka client certificate on the peer port, claiming node 2, with the same forged
//!   proposal: refused, nothing committed;
//! - (c) a node 4 started with `join = true` and node 3's peer certificate (no credential
//!   issued for node 4), added with `POST /members`: the peers refuse it both ways (it never
//!   becomes a voter) and the cluster keeps committing, before and after it is killed.
//!
//! The binary under test is `VDL_PEER_TEST_BIN` when set (to run these attacks against another
//! build), else this crate's `vdl`.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::kafka::{on_any, KafkaConn};
use common::peer::{frame, hello, msg};
use common::{batch, free_ports};
use raft::prelude::{Entry, MessageType};
use vdl_server::metadata::{MetaCommand, MetaEntry, RequestId};

const WAIT: Duration = Duration::from_secs(30);
const TOPIC: &str = "identity";
/// Kafka's UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC: i16 = 3;

fn binary() -> PathBuf {
    std::env::var_os("VDL_PEER_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_vdl")))
}

/// PEM files of one CA: `ca.pem`, `node<i>.pem/.key` naming `vdl-node://<i>` (server and
/// client use, valid for 127.0.0.1) for i in 1..=4, and `alice.pem/.key`, a Kafka client
/// certificate (client use, no node name). Returns the CA and its key (to sign CRLs).
fn one_ca_for_everything(dir: &Path) -> (rcgen::Certificate, rcgen::KeyPair) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        SanType,
    };
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
    let mut ca_params = CertificateParams::default();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "one CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    write("ca.pem", ca.pem());
    for i in 1..=4u64 {
        let mut p = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        p.distinguished_name
            .push(DnType::CommonName, format!("vdl{i}"));
        p.subject_alt_names.push(SanType::URI(
            format!("vdl-node://{i}").as_str().try_into().unwrap(),
        ));
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        write(
            &format!("node{i}.pem"),
            p.signed_by(&key, &ca, &ca_key).unwrap().pem(),
        );
        write(&format!("node{i}.key"), key.serialize_pem());
    }
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, "alice");
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    write("alice.pem", p.signed_by(&key, &ca, &ca_key).unwrap().pem());
    write("alice.key", key.serialize_pem());
    (ca, ca_key)
}

/// Writes `<tls>/crl.pem` (through a rename, as an operator would): a CRL of `ca` revoking
/// the certificates `revoked` (names of PEM files in `tls`).
fn write_crl(tls: &Path, ca: &rcgen::Certificate, ca_key: &rcgen::KeyPair, revoked: &[&str]) {
    use rustls::pki_types::pem::PemObject;
    let now = time::OffsetDateTime::now_utc();
    let revoked_certs = revoked
        .iter()
        .map(|name| {
            let der =
                rustls::pki_types::CertificateDer::from_pem_file(tls.join(format!("{name}.pem")))
                    .unwrap();
            let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
            rcgen::RevokedCertParams {
                serial_number: rcgen::SerialNumber::from_slice(cert.raw_serial()),
                revocation_time: now,
                reason_code: None,
                invalidity_date: None,
            }
        })
        .collect();
    let crl = rcgen::CertificateRevocationListParams {
        this_update: now - time::Duration::minutes(1),
        next_update: now + time::Duration::days(1),
        crl_number: rcgen::SerialNumber::from(revoked.len() as u64 + 1),
        issuing_distribution_point: None,
        revoked_certs,
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    }
    .signed_by(ca, ca_key)
    .unwrap();
    std::fs::write(tls.join("crl.pem.new"), crl.pem().unwrap()).unwrap();
    std::fs::rename(tls.join("crl.pem.new"), tls.join("crl.pem")).unwrap();
}

/// A `vdl` process, killed on drop; logs to `<dir>/vdl<id>.log`.
struct Proc {
    child: Child,
}

impl Proc {
    fn start(dir: &Path, id: u64) -> Proc {
        let log = std::fs::File::create(dir.join(format!("vdl{id}.log"))).unwrap();
        let child = Command::new(binary())
            .arg("start")
            .arg("--config")
            .arg(dir.join(format!("vdl{id}.toml")))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn vdl");
        Proc { child }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Addresses of nodes 1..=4 (node 4: the rogue).
struct Layout {
    peer: Vec<SocketAddr>,
    kafka: Vec<SocketAddr>,
    admin: Vec<SocketAddr>,
}

/// Writes `vdl<id>.toml` for node `id`: members 1..=3 (plus 4 when `join`), peer TLS with
/// `cert` / `key` from `tls` (and `tls/crl.pem` when `crl`).
fn write_config(dir: &Path, tls: &Path, l: &Layout, id: u64, cert: &str, join: bool, crl: bool) {
    let n = if join { 4 } else { 3 };
    let members: Vec<String> = (1..=n)
        .map(|j| format!("\"vdl{j}={j}@{}\"", l.peer[j - 1]))
        .collect();
    let i = id as usize - 1;
    let cfg = format!(
        "initial_cluster = [{members}]\n\
         [node]\nid = {id}\nname = \"vdl{id}\"\ndata_dir = \"{data}\"\njoin = {join}\n\
         [listeners]\npeer = \"{peer}\"\nkafka = \"{kafka}\"\nadmin = \"{admin}\"\n\
         [raft]\ntick_ms = 20\nheartbeat_ms = 60\nelection_timeout_ms = 600\n\
         [streams]\ninitial = []\n\
         [admin]\nrequire_auth = false\n\
         [peer_tls]\ncert = \"{cert}\"\nkey = \"{key}\"\nca = \"{ca}\"\n",
        members = members.join(", "),
        data = dir.join(format!("node{id}")).display(),
        peer = l.peer[i],
        kafka = l.kafka[i],
        admin = l.admin[i],
        cert = tls.join(format!("{cert}.pem")).display(),
        key = tls.join(format!("{cert}.key")).display(),
        ca = tls.join("ca.pem").display(),
    );
    let crl = if crl {
        format!("crl = \"{}\"\n", tls.join("crl.pem").display())
    } else {
        String::new()
    };
    std::fs::write(dir.join(format!("vdl{id}.toml")), cfg + &crl).unwrap();
}

/// A forged metadata proposal "from" `claimed` to node `to`: CreateTopic `topic`.
fn forged_create_topic(claimed: u64, to: u64, topic: &str) -> Vec<u8> {
    let data = MetaEntry {
        request: RequestId {
            node: claimed,
            boot: 0x5eed,
            seq: to,
        },
        command: MetaCommand::CreateTopic {
            name: topic.into(),
            partitions: 1,
            replicas: Vec::new(),
            configs: Default::default(),
        },
    }
    .encode();
    let mut context = vec![2u8]; // CTX_META
    context.extend_from_slice(&claimed.to_be_bytes());
    context.extend_from_slice(&7u64.to_be_bytes());
    let mut m = msg(MessageType::MsgPropose, claimed, to, 0);
    m.entries = vec![Entry {
        data: Bytes::from(data),
        context: Bytes::from(context),
        ..Default::default()
    }]
    .into();
    frame(&[(1, m)])
}

/// A rustls client presenting `cert` (from `tls`) and trusting the CA.
fn tls_client(tls: &Path, cert: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(tls.join("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let chain: Vec<_> = CertificateDer::pem_file_iter(tls.join(format!("{cert}.pem")))
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(tls.join(format!("{cert}.key"))).unwrap();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap(),
    )
}

/// Opens a TLS connection to `peer` with `config`, writes `bytes` and says whether the node
/// closed it within 3 s (`true`) or kept it open (`false`: it admitted the hello).
fn send_over_tls(config: &Arc<rustls::ClientConfig>, peer: SocketAddr, bytes: &[u8]) -> bool {
    let tcp = TcpStream::connect_timeout(&peer, Duration::from_secs(2)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(peer.ip().into());
    let conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    if tls.write_all(bytes).and_then(|()| tls.flush()).is_err() {
        return true;
    }
    let mut buf = [0u8; 64];
    // The acceptor never writes: end of stream or an error (an alert) is the node closing.
    match tls.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// Whether `topic` exists, asked of every node (none must know it).
fn topic_exists(kafka: &[SocketAddr], topic: &str) -> bool {
    kafka.iter().any(|k| {
        KafkaConn::connect(*k)
            .and_then(|mut c| c.metadata(topic))
            .is_ok_and(|(code, _, _)| code != UNKNOWN_TOPIC)
    })
}

fn produce_ok(kafka: &[SocketAddr], what: &str) {
    on_any(kafka, WAIT, what, |k| k.produce(TOPIC, batch(5, b"ok")));
}

fn admin_call(admin: SocketAddr, method: &str, path: &str, body: Option<String>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("http://{admin}{path}");
    let response = match (method, body) {
        ("GET", _) => agent.get(&url).call(),
        (_, Some(b)) => agent
            .post(&url)
            .header("content-type", "application/json")
            .send(b),
        (_, None) => agent.post(&url).send_empty(),
    };
    match response {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.into_body().read_to_string().unwrap_or_default())
        }
        Err(e) => (0, e.to_string()),
    }
}

/// Node 4's state as node `admin` lists it (`GET /members`), or "" when not listed.
fn member_state(admin: SocketAddr, id: u64) -> String {
    let (status, body) = admin_call(admin, "GET", "/members", None);
    if status != 200 {
        return format!("GET /members: {status} {body}");
    }
    let members: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    members
        .as_array()
        .into_iter()
        .flatten()
        .chain(members["members"].as_array().into_iter().flatten())
        .find(|m| m["id"] == id)
        .and_then(|m| m["state"].as_str().map(str::to_string))
        .unwrap_or_default()
}

fn layout() -> Layout {
    let ports = free_ports(12);
    let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    Layout {
        peer: ports[0..4].iter().map(|p| addr(*p)).collect(),
        kafka: ports[4..8].iter().map(|p| addr(*p)).collect(),
        admin: ports[8..12].iter().map(|p| addr(*p)).collect(),
    }
}

fn logs(dir: &Path) -> String {
    (1..=4)
        .map(|i| {
            let log = std::fs::read_to_string(dir.join(format!("vdl{i}.log"))).unwrap_or_default();
            let start = log.len().saturating_sub(3000);
            let start = (start..log.len())
                .find(|&k| log.is_char_boundary(k))
                .unwrap_or(log.len());
            format!("--- vdl{i} ---\n{}\n", &log[start..])
        })
        .collect()
}

#[test]
fn peers_prove_their_identity_with_certificates_naming_their_node() {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    std::fs::create_dir_all(&tls).unwrap();
    one_ca_for_everything(&tls);
    let l = layout();
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        write_config(dir.path(), &tls, &l, id, &format!("node{id}"), false, false);
        nodes.push(Proc::start(dir.path(), id));
    }
    let kafka = &l.kafka[..3];
    on_any(kafka, WAIT, "create", |k| {
        k.create_topic(TOPIC)
            .map(|e| (if e == 36 { 0 } else { e }, ()))
    });
    produce_ok(kafka, "first produce");

    let mut failures = Vec::new();
    // (a) Node 3's certificate, a hello claiming node 2, a forged proposal "from node 2".
    let node3 = tls_client(&tls, "node3");
    for (i, peer) in l.peer[..3].iter().enumerate() {
        let to = i as u64 + 1;
        if to == 2 {
            continue;
        }
        let bytes = [
            hello(2, "127.0.0.1:9"),
            forged_create_topic(2, to, "forged-a"),
        ]
        .concat();
        if !send_over_tls(&node3, *peer, &bytes) {
            failures.push(format!(
                "(a) node {to} kept a connection whose hello claims node 2 with node 3's certificate"
            ));
        }
    }
    // (b) The Kafka client certificate (same CA) on the peer port, claiming node 2.
    let alice = tls_client(&tls, "alice");
    for (i, peer) in l.peer[..3].iter().enumerate() {
        let to = i as u64 + 1;
        let claimed = to % 3 + 1;
        let bytes = [
            hello(claimed, "127.0.0.1:9"),
            forged_create_topic(claimed, to, "forged-b"),
        ]
        .concat();
        if !send_over_tls(&alice, *peer, &bytes) {
            failures.push(format!(
                "(b) node {to} kept a peer connection with a Kafka client certificate"
            ));
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    for forged in ["forged-a", "forged-b"] {
        if topic_exists(kafka, forged) {
            failures.push(format!("a forged proposal committed topic {forged}"));
        }
    }
    produce_ok(kafka, "produce after the forged connections");

    // (c) A rogue node 4 with `join = true` whose peer certificate is a valid one of another
    // member (node 3's: the CA issued no credential for node 4).
    write_config(dir.path(), &tls, &l, 4, "node3", true, false);
    let mut rogue = Proc::start(dir.path(), 4);
    let body = format!(
        "{{\"id\": 4, \"peer\": \"{}\", \"kafka\": \"{}\"}}",
        l.peer[3], l.kafka[3]
    );
    let (status, answer) = admin_call(
        l.admin[0],
        "POST",
        "/members?timeout_ms=8000",
        Some(body.clone()),
    );
    // The admin API is open here (`require_auth = false`: the attack of the issue, an
    // unauthenticated POST /members), so only the peers' certificate check stands between the
    // rogue and a vote: node 4 must never become a voter.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        let state = member_state(l.admin[0], 4);
        assert!(
            !state.starts_with("GET /members:"),
            "the members list must be readable: {state}"
        );
        if state == "voter" {
            failures.push(format!(
                "(c) the rogue became a voter (POST /members: {status} {answer})"
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    produce_ok(kafka, "produce with the rogue running");
    rogue.kill();
    produce_ok(kafka, "produce after the rogue was killed");
    assert!(failures.is_empty(), "{failures:#?}\n{}", logs(dir.path()));
    for (i, n) in nodes.iter_mut().enumerate() {
        assert!(
            n.child.try_wait().unwrap().is_none(),
            "node {} exited\n{}",
            i + 1,
            logs(dir.path())
        );
    }
    let refusals = (1..=3)
        .map(|i| std::fs::read_to_string(dir.path().join(format!("vdl{i}.log"))).unwrap())
        .filter(|log| log.contains("peer connection refused"))
        .count();
    assert!(refusals > 0, "no node logged a refused peer connection");
}

/// A member certificate revoked while the cluster runs (`[peer_tls] crl` rewritten): the other
/// members reload the CRL within seconds, close the connections opened before and refuse the
/// revoked node's new ones both ways; it stops receiving the cluster's metadata while the other
/// two keep committing.
#[test]
fn a_revoked_member_certificate_is_cut_off_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    std::fs::create_dir_all(&tls).unwrap();
    let (ca, ca_key) = one_ca_for_everything(&tls);
    write_crl(&tls, &ca, &ca_key, &[]);
    let l = layout();
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        write_config(dir.path(), &tls, &l, id, &format!("node{id}"), false, true);
        nodes.push(Proc::start(dir.path(), id));
    }
    let kafka = &l.kafka[..3];
    on_any(kafka, WAIT, "create", |k| {
        k.create_topic(TOPIC)
            .map(|e| (if e == 36 { 0 } else { e }, ()))
    });
    produce_ok(kafka, "first produce");
    // Node 3 learns new topics while it is a member.
    on_any(kafka, WAIT, "create before", |k| {
        k.create_topic("before-revocation")
            .map(|e| (if e == 36 { 0 } else { e }, ()))
    });
    let until = Instant::now() + WAIT;
    while !topic_exists(&l.kafka[2..3], "before-revocation") {
        assert!(
            Instant::now() < until,
            "node 3 never learned the topic\n{}",
            logs(dir.path())
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    write_crl(&tls, &ca, &ca_key, &["node3"]);
    // Nodes 1 and 2 poll the files every 2 s; then node 3's connections are closed and refused.
    let until = Instant::now() + Duration::from_secs(20);
    let revoked_seen = || {
        (1..=2).all(|i| {
            std::fs::read_to_string(dir.path().join(format!("vdl{i}.log")))
                .unwrap_or_default()
                .to_lowercase()
                .contains("revoked")
        })
    };
    while !revoked_seen() {
        assert!(
            Instant::now() < until,
            "nodes 1 and 2 did not refuse the revoked certificate\n{}",
            logs(dir.path())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Nodes 1 and 2 go on: a new topic and records commit with the two of them.
    let kafka12 = &l.kafka[..2];
    on_any(kafka12, WAIT, "create after", |k| {
        k.create_topic("after-revocation")
            .map(|e| (if e == 36 { 0 } else { e }, ()))
    });
    produce_ok(kafka12, "produce after the revocation");
    // Node 3 hears nothing more: not over a new connection, nor an old one.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !topic_exists(&l.kafka[2..3], "after-revocation"),
        "the revoked node still receives the metadata\n{}",
        logs(dir.path())
    );
    for (i, n) in nodes.iter_mut().enumerate() {
        assert!(
            n.child.try_wait().unwrap().is_none(),
            "node {} exited\n{}",
            i + 1,
            logs(dir.path())
        );
    }
}
