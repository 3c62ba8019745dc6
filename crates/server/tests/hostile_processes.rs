//! Single hostile requests against three real `vdl` processes (items 3, 4 and 5 of the
//! lifecycle issue, as they were reproduced): a Produce of 68 batches of about 1 MB for one
//! partition, batches whose header lies about their records, and the 36-byte hello + empty
//! MsgPropose on every node's peer port. Each gets an error code or a closed connection; every
//! node keeps running, the cluster keeps committing, and kcat (librdkafka) still consumes the
//! topic from the beginning.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::kafka::on_any;
use common::procs::ProcCluster;
use common::{batch, kcat, raw_batch, run_with_deadline};
use kafka_proto::records::Compression;
use protobuf::Message as _;
use raft::prelude::{Message, MessageType};

const WAIT: Duration = Duration::from_secs(30);
const TOPIC: &str = "hostile";

/// The reproduced 36-byte attack: a hello claiming `claimed` with no advertised address, then
/// one frame holding an empty MsgPropose for the metadata group (id 1).
fn empty_propose_bytes(claimed: u64, to: u64) -> Vec<u8> {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgPropose);
    m.to = to;
    let raw = m.write_to_bytes().unwrap();
    let mut out = b"VDLP".to_vec();
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&claimed.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    let body_len = 8 + 4 + raw.len();
    out.extend_from_slice(&(body_len as u32).to_be_bytes());
    out.extend_from_slice(&1u64.to_be_bytes());
    out.extend_from_slice(&(raw.len() as u32).to_be_bytes());
    out.extend_from_slice(&raw);
    out
}

#[test]
fn single_hostile_requests_bring_no_node_down() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ProcCluster::start(dir.path(), 3, "");
    let brokers = c.kafka.clone();
    on_any(&brokers, WAIT, "create", |k| {
        k.create_topic(TOPIC)
            .map(|e| (if e == 36 { 0 } else { e }, ()))
    });
    let mut produced = 0u64;
    on_any(&brokers, WAIT, "first produce", |k| {
        k.produce(TOPIC, batch(10, b"good"))
    });
    produced += 10;

    // Item 5: the 36 bytes (and the same with a valid advertised address) on every peer port.
    for (i, peer) in c.peer.iter().enumerate() {
        let me = i as u64 + 1;
        let claimed = me % 3 + 1;
        let attack = empty_propose_bytes(claimed, me);
        assert_eq!(attack.len(), 36, "the reproduced attack is 36 bytes");
        for bytes in [attack, {
            let mut v = empty_propose_bytes(claimed, me);
            // Same frame after a hello with an advertised address.
            v.splice(14..16, [0u8, 14]);
            v.splice(16..16, b"127.0.0.1:9999".iter().copied());
            v
        }] {
            if let Ok(mut s) = TcpStream::connect_timeout(peer, Duration::from_secs(2)) {
                let _ = s.write_all(&bytes);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    // Item 3: 68 batches of about 1 MB for one partition in one Produce v9 (over 64 MiB).
    let one = batch(1, &vec![b'x'; 1_000_000]);
    let mut big = Vec::with_capacity(68 * one.len());
    for _ in 0..68 {
        big.extend_from_slice(&one);
    }
    let big = Bytes::from(big);
    assert!(big.len() > 64 << 20);
    let code = on_any(&brokers, WAIT, "68 MB produce", |k| {
        k.produce(TOPIC, big.clone()).map(|(e, _)| match e {
            6 => (6, e), // not the leader: try the next node
            other => (0, other),
        })
    });
    assert_eq!(code, 87, "68 batches in one partition: INVALID_RECORD");

    // Item 4: a gzip batch claiming 2^31-1 records with nothing inside, and one record of
    // seven 0xFF bytes: refused, and the log end does not move.
    for hostile in [
        raw_batch(Compression::Gzip.id() as i16, i32::MAX, &[]),
        raw_batch(0, 1, &[0xff; 7]),
    ] {
        let code = on_any(&brokers, WAIT, "hostile batch", |k| {
            k.produce(TOPIC, hostile.clone()).map(|(e, _)| match e {
                6 => (6, e),
                other => (0, other),
            })
        });
        assert_ne!(code, 0, "a hostile batch was accepted");
    }
    let end = on_any(&brokers, WAIT, "log end", |k| k.list_offset(TOPIC, -1));
    assert_eq!(end as u64, produced, "the log end moved");

    // Every node is alive, the cluster commits, and a real client reads the topic.
    std::thread::sleep(Duration::from_secs(1));
    c.assert_all_running();
    on_any(&brokers, WAIT, "produce after", |k| {
        k.produce(TOPIC, batch(5, b"after"))
    });
    produced += 5;
    let bootstrap = brokers
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let deadline = Instant::now() + WAIT;
    let mut cmd = kcat();
    cmd.args([
        "-b",
        &bootstrap,
        "-t",
        TOPIC,
        "-C",
        "-o",
        "beginning",
        "-e",
        "-q",
    ]);
    let (ok, out, err) = run_with_deadline(cmd, b"", deadline - Instant::now());
    assert!(ok, "kcat failed: {err}");
    assert_eq!(out.lines().count() as u64, produced, "kcat read {out:?}");
    c.assert_all_running();
}
