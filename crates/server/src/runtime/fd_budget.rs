//! The process's file descriptor budget: raise the soft limit to the hard one at start (as the
//! Go runtime does), and split what there is between client connections and storage, so that
//! clients can never take the descriptors the log stores need (a failed write of a Raft hard
//! state stops the node on purpose; running out of descriptors must never be how it gets
//! there).

/// Descriptors kept for everything but client connections (log segments and their indexes,
/// hard-state writes, peer connections, the admin API, logs), at least.
pub const MIN_STORAGE_RESERVE: u64 = 512;

/// The soft and hard `RLIMIT_NOFILE` of this process.
pub fn nofile_limits() -> std::io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Raises the soft open-file limit to the hard limit; returns the soft limit in force after.
pub fn raise_nofile_limit() -> std::io::Result<u64> {
    let (soft, hard) = nofile_limits()?;
    if soft >= hard {
        return Ok(soft);
    }
    let lim = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(hard)
}

/// Descriptors one hosted partition may hold at once: its active segment, a hard-state or
/// configuration write, and its zero reserve while it is written.
pub const DESCRIPTORS_PER_PARTITION: u64 = 3;

/// Descriptors kept for what is neither a client connection nor a partition: peer
/// connections, the admin API, the metadata log, standard streams.
pub const OTHER_DESCRIPTORS: u64 = 64;

/// How many partitions a node can host with `nofile` descriptors: what is left after the
/// client connections' share ([`client_connection_limit`] of `max_connections`) and
/// [`OTHER_DESCRIPTORS`], [`DESCRIPTORS_PER_PARTITION`] each.
pub fn partition_capacity(nofile: u64, max_connections: usize) -> u64 {
    let clients = client_connection_limit(max_connections, nofile) as u64;
    nofile
        .saturating_sub(clients)
        .saturating_sub(OTHER_DESCRIPTORS)
        / DESCRIPTORS_PER_PARTITION
}

/// How many client connections may be open at once with `nofile` descriptors: the configured
/// limit, but never more than what is left after the storage reserve (half the descriptors, at
/// least [`MIN_STORAGE_RESERVE`]). At least one connection is always allowed.
pub fn client_connection_limit(configured: usize, nofile: u64) -> usize {
    let reserve = (nofile / 2).max(MIN_STORAGE_RESERVE);
    let budget = nofile.saturating_sub(reserve).max(1);
    configured
        .min(usize::try_from(budget).unwrap_or(usize::MAX))
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_get_what_clients_and_the_reserve_leave() {
        // 20,000 descriptors: clients may take 10,000, 64 are kept, 3 per partition.
        assert_eq!(partition_capacity(20_000, 10_000), 3_312);
        assert_eq!(partition_capacity(20_000, 1_000), 6_312);
        assert_eq!(partition_capacity(1_048_576, 10_000), 346_170);
        // A 1,024 limit: clients get half.
        assert_eq!(partition_capacity(1_024, 10_000), 149);
        assert_eq!(partition_capacity(64, 10), 0);
    }

    #[test]
    fn clients_get_at_most_half_and_storage_keeps_a_reserve() {
        assert_eq!(client_connection_limit(10_000, 1024), 512);
        assert_eq!(client_connection_limit(10_000, 600), 88);
        assert_eq!(client_connection_limit(10_000, 100), 1);
        assert_eq!(client_connection_limit(10_000, 1 << 20), 10_000);
        assert_eq!(client_connection_limit(300, 1024), 300);
    }

    #[test]
    fn raising_never_lowers_the_limit() {
        let (soft, _) = nofile_limits().unwrap();
        let after = raise_nofile_limit().unwrap();
        assert!(after >= soft);
        assert_eq!(nofile_limits().unwrap().0, after);
    }
}
