//! Helpers shared by the server's integration tests: free ports, cluster configs, and minimal
//! record batches.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use vdl_server::config::{Member, NodeConfig, RaftTiming};

/// Reserves `n` distinct free TCP ports on 127.0.0.1 (bound and released at once).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

/// Raft timing for tests: fast elections so tests finish quickly.
pub fn fast_timing() -> RaftTiming {
    RaftTiming {
        tick: Duration::from_millis(10),
        heartbeat: Duration::from_millis(30),
        election_timeout: Duration::from_millis(300),
        ..RaftTiming::default()
    }
}

/// Configs for an `n`-node cluster on 127.0.0.1 with data under `root`, serving `streams`.
pub fn cluster_configs(n: usize, root: &Path, streams: &[&str]) -> Vec<NodeConfig> {
    let ports = free_ports(2 * n);
    let members: Vec<Member> = (0..n)
        .map(|i| Member {
            name: format!("vdl{}", i + 1),
            id: i as u64 + 1,
            peer_addr: SocketAddr::from(([127, 0, 0, 1], ports[i])),
        })
        .collect();
    (0..n)
        .map(|i| {
            let mut c = NodeConfig::single_node_default();
            c.id = i as u64 + 1;
            c.name = format!("vdl{}", i + 1);
            c.data_dir = root.join(format!("node{}", i + 1));
            c.peer_listen = members[i].peer_addr;
            c.kafka_listen = SocketAddr::from(([127, 0, 0, 1], ports[n + i]));
            c.kafka_advertised = c.kafka_listen.to_string();
            c.members = members.clone();
            c.raft = fast_timing();
            c.initial_streams = streams.iter().map(|s| s.to_string()).collect();
            c
        })
        .collect()
}

/// A minimal valid-shaped Kafka record batch (magic 2) holding `count` records, whose record
/// section is `tag` repeated; enough for the store, which reads only the header. The CRC is
/// computed so that real decoders accept the header.
pub fn batch(count: u32, tag: &[u8]) -> Bytes {
    assert!(count > 0);
    let records = tag.to_vec();
    let batch_len = 49 + records.len();
    let mut b = BytesMut::with_capacity(12 + batch_len);
    b.put_i64(0); // base offset, assigned by the store
    b.put_i32(batch_len as i32);
    b.put_i32(-1); // partition leader epoch
    b.put_i8(2); // magic
    b.put_u32(0); // crc placeholder
    b.put_i16(0); // attributes
    b.put_i32(count as i32 - 1); // last offset delta
    b.put_i64(1_700_000_000_000); // base timestamp
    b.put_i64(1_700_000_000_000); // max timestamp
    b.put_i64(-1); // producer id
    b.put_i16(-1); // producer epoch
    b.put_i32(-1); // base sequence
    b.put_i32(count as i32);
    b.put_slice(&records);
    let crc = crc32c_of(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// Bitwise CRC-32C, enough for test data.
fn crc32c_of(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Splits concatenated record batches into (base offset, record count, record-section bytes).
pub fn split_batches(data: &[u8]) -> Vec<(u64, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 61 <= data.len() {
        let base = u64::from_be_bytes(data[at..at + 8].try_into().unwrap());
        let len = i32::from_be_bytes(data[at + 8..at + 12].try_into().unwrap()) as usize;
        let end = at + 12 + len;
        assert!(end <= data.len(), "batch runs past the data");
        let count = i32::from_be_bytes(data[at + 57..at + 61].try_into().unwrap()) as u32;
        out.push((base, count, data[at + 61..end].to_vec()));
        at = end;
    }
    out
}
