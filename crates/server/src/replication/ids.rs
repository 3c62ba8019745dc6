//! Ids every node derives alike without coordination: a stream's and a topic partition's Raft
//! group id (hashes of their names), and the boot nonce that keeps proposal and request ids of
//! two starts of a process apart.

/// Group id of a stream: FNV-1a 64 of its name, the same on every node without coordination.
/// Ids 0 and 1 are reserved (0: none, 1: the cluster metadata group).
pub fn group_id_for(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    if h <= 1 {
        h + 2
    } else {
        h
    }
}

/// Group id of one partition of a topic's incarnation: FNV-1a 64 of its name, a zero byte, the
/// incarnation (big-endian) and, for partitions above 0, the partition index (big-endian), so a
/// topic created again under the same name is a different set of Raft groups. Partition 0 keeps
/// the id single-partition topics had before partitions existed.
pub fn group_id_for_topic(name: &str, incarnation: u64, partition: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let tail = incarnation.to_be_bytes();
    let part = partition.to_be_bytes();
    let part: &[u8] = if partition == 0 { &[] } else { &part };
    for b in name
        .as_bytes()
        .iter()
        .chain(&[0u8])
        .chain(tail.iter())
        .chain(part.iter())
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    if h <= 1 {
        h + 2
    } else {
        h
    }
}

/// A number that differs between two starts of a process: the clock in nanoseconds mixed with
/// the process id.
pub fn boot_nonce() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 48)
}
