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

/// Descriptors a hosted partition may hold that grow with the number of partitions (at most
/// 2), with `preallocating` (`storage.preallocate_bytes` is not 0) and `sync_always`
/// (`storage.sync = "always"`). An idle partition holds none: its stores' lock is the node's one
/// root lock (a `logstore::RootLock` on the data directory, in [`OTHER_DESCRIPTORS`]), its
/// active segment's descriptor lives in the node-wide set of at most
/// `storage.max_open_active_files` (counted once, by [`partition_capacity`]), sealed
/// segments hold none between reads (`storage.max_open_segment_files` maps, no descriptor),
/// and a hard-state or configuration write holds its file only while it writes (one per
/// group thread at most, in the reserve). What a partition being written still holds:
/// * its zero reserve's handle, from its first append until it is idle for
///   `preallocate_idle_release` (10 s), when `storage.preallocate_bytes` is not 0;
/// * its active segment's descriptor beyond the set's capacity while it holds appends not
///   yet synced (a dirty descriptor is never closed): under `sync = "always"` only while an
///   append is in flight (bounded by the group threads, not the partitions); under another
///   sync mode, for every partition written within a sync interval.
pub fn descriptors_per_partition(preallocating: bool, sync_always: bool) -> u64 {
    u64::from(preallocating) + u64::from(!sync_always)
}

/// Descriptors kept for what is neither a client connection nor a partition: peer
/// connections, the admin API, the data directory's root lock, the metadata log's transient
/// writes, standard streams.
pub const OTHER_DESCRIPTORS: u64 = 64;

/// How many partitions a node can host with `nofile` descriptors, all of them written at once:
/// what is left after the client connections' share ([`client_connection_limit`] of
/// `max_connections`) and [`OTHER_DESCRIPTORS`], each partition taking
/// `each` ([`descriptors_per_partition`]) plus its active segment's descriptor while the
/// node-wide set of `max_open_active_files` (`storage.max_open_active_files`) has room: `min(partitions, set) + partitions x each`
/// must fit. Unbounded (`u64::MAX`) once the set is paid for when a partition holds nothing of
/// its own (no preallocation, `sync = "always"`).
pub fn partition_capacity(
    nofile: u64,
    max_connections: usize,
    max_open_active_files: usize,
    each: u64,
) -> u64 {
    let clients = client_connection_limit(max_connections, nofile) as u64;
    let left = nofile
        .saturating_sub(clients)
        .saturating_sub(OTHER_DESCRIPTORS);
    let set = max_open_active_files as u64;
    // Fewer partitions than the set holds: each has its active descriptor open.
    let within_set = left / (1 + each);
    if within_set < set {
        return within_set;
    }
    // More: the set is full (`set` descriptors), and each partition adds its own.
    match each {
        0 => u64::MAX,
        each => (left - set) / each,
    }
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

    /// `partition_capacity` with `active` descriptors in the set and these settings.
    fn capacity(
        nofile: u64,
        connections: usize,
        active: usize,
        prealloc: bool,
        sync_always: bool,
    ) -> u64 {
        partition_capacity(
            nofile,
            connections,
            active,
            descriptors_per_partition(prealloc, sync_always),
        )
    }

    #[test]
    fn an_idle_partition_costs_no_descriptor_of_its_own() {
        // The defaults: preallocation on, sync = "always": the zero reserve's handle only.
        assert_eq!(descriptors_per_partition(true, true), 1);
        assert_eq!(descriptors_per_partition(false, true), 0);
        assert_eq!(descriptors_per_partition(true, false), 2);
        assert_eq!(descriptors_per_partition(false, false), 1);
    }

    #[test]
    fn partitions_get_what_clients_the_reserve_and_the_active_set_leave() {
        // The defaults: 1,024 active descriptors, preallocation, sync = "always".
        let defaults = |nofile, connections| capacity(nofile, connections, 1_024, true, true);
        // 20,000 descriptors: clients may take 10,000, 64 are kept, 1,024 for the full active
        // segments' set, 1 per partition.
        assert_eq!(defaults(20_000, 10_000), 8_912);
        assert_eq!(defaults(20_000, 1_000), 17_912);
        assert_eq!(defaults(1_048_576, 10_000), 1_037_488);
        // A 4,096 limit: clients get half, 1,984 are left: 992 partitions at 2 each (the set
        // never fills).
        assert_eq!(defaults(4_096, 10_000), 992);
        // A 1,024 limit: 448 left, fewer partitions than the set holds, 2 each.
        assert_eq!(defaults(1_024, 10_000), 224);
        // A set of 32: full, then 1 each.
        assert_eq!(capacity(1_024, 10_000, 32, true, true), 416);
        // Two each when appends may stay unsynced.
        assert_eq!(capacity(20_000, 10_000, 1_024, true, false), 4_456);
        // Nothing per partition: no bound from descriptors, unless the fixed shares take all.
        assert_eq!(capacity(20_000, 10_000, 1_024, false, true), u64::MAX);
        assert_eq!(capacity(1_024, 10_000, 1_024, false, true), 448);
        assert_eq!(capacity(64, 10, 1_024, false, true), 0);
        assert_eq!(defaults(64, 10), 0);
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
