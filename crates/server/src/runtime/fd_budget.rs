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

/// Descriptors a hosted partition may hold of its own while it is written: 1 when appends
/// may stay unsynced (`storage.sync` is not `"always"`), else none. An idle partition holds
/// none: its stores' lock is the node's one root lock (a `logstore::RootLock` on the data
/// directory, in [`OTHER_DESCRIPTORS`]), its active segment's descriptor lives in the
/// node-wide set of at most `storage.max_open_active_files`, its zero reserve's handle (from
/// its first appends until idle for `preallocate_idle_release`) in the process-wide set of at
/// most [`logstore::MAX_OPEN_RESERVE_HANDLES`] (both counted once, by
/// [`partition_capacity`]), sealed segments hold none between reads
/// (`storage.max_open_segment_files` maps, no descriptor), and a hard-state or configuration
/// write holds its file only while it writes (one per worker at most, in the reserve). What a
/// partition being written may hold beyond those sets: its active segment's descriptor while
/// it holds appends not yet synced (a dirty descriptor is never closed), under another sync
/// mode than `"always"`, for every partition written within a sync interval.
pub fn descriptors_per_partition(sync_always: bool) -> u64 {
    u64::from(!sync_always)
}

/// Descriptors kept for what is neither a client connection nor a partition: peer
/// connections, the admin API, the data directory's root lock, the metadata log's transient
/// writes, standard streams.
pub const OTHER_DESCRIPTORS: u64 = 64;

/// How many partitions a node can host with `nofile` descriptors, all of them written at once:
/// what is left after the client connections' share ([`client_connection_limit`] of
/// `max_connections`) and [`OTHER_DESCRIPTORS`], each partition taking `each`
/// ([`descriptors_per_partition`]) plus, while the sets have room, its active segment's
/// descriptor (a set of `max_open_active_files`) and its zero reserve's handle (a set of
/// `reserve_handles`: [`logstore::MAX_OPEN_RESERVE_HANDLES`], or 0 without preallocation).
/// That is, the largest `p` with `min(p, active set) + min(p, reserve set) + p x each` within
/// what is left. Unbounded (`u64::MAX`) when a partition holds nothing of its own (`each` 0)
/// and both sets fit: then descriptors do not limit the partition count.
pub fn partition_capacity(
    nofile: u64,
    max_connections: usize,
    max_open_active_files: usize,
    reserve_handles: usize,
    each: u64,
) -> u64 {
    let clients = client_connection_limit(max_connections, nofile) as u64;
    let left = nofile
        .saturating_sub(clients)
        .saturating_sub(OTHER_DESCRIPTORS);
    let (active, reserve) = (max_open_active_files as u64, reserve_handles as u64);
    let needs = |p: u64| {
        p.min(active)
            .saturating_add(p.min(reserve))
            .saturating_add(p.saturating_mul(each))
    };
    if each == 0 && needs(active.max(reserve)) <= left {
        return u64::MAX;
    }
    // `needs` grows with `p` and exceeds `left` at `left + 1` (each partition needs at least
    // one descriptor until the sets are full, and `each` after): the largest fitting `p` by
    // bisection.
    let (mut fits, mut too_many) = (0u64, left.saturating_add(1));
    if each == 0 {
        too_many = active.max(reserve).saturating_add(1);
    }
    while too_many - fits > 1 {
        let mid = fits + (too_many - fits) / 2;
        if needs(mid) <= left {
            fits = mid;
        } else {
            too_many = mid;
        }
    }
    fits
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

    /// `partition_capacity` with `active` descriptors in the active set, the process's
    /// reserve set when preallocating, and these settings.
    fn capacity(
        nofile: u64,
        connections: usize,
        active: usize,
        prealloc: bool,
        sync_always: bool,
    ) -> u64 {
        let reserve = if prealloc {
            logstore::MAX_OPEN_RESERVE_HANDLES
        } else {
            0
        };
        partition_capacity(
            nofile,
            connections,
            active,
            reserve,
            descriptors_per_partition(sync_always),
        )
    }

    #[test]
    fn an_idle_partition_costs_no_descriptor_of_its_own() {
        // Under sync = "always" (the default) a partition holds nothing outside the sets;
        // otherwise its unsynced active descriptor.
        assert_eq!(descriptors_per_partition(true), 0);
        assert_eq!(descriptors_per_partition(false), 1);
    }

    #[test]
    fn partitions_get_what_clients_the_reserve_and_the_sets_leave() {
        // The defaults: 1,024 active descriptors, 1,024 reserve handles, sync = "always".
        let defaults = |nofile, connections| capacity(nofile, connections, 1_024, true, true);
        // 20,000 descriptors: clients may take 10,000, 64 are kept, the two sets 2,048: no
        // bound from descriptors (a partition holds nothing of its own).
        assert_eq!(defaults(20_000, 10_000), u64::MAX);
        assert_eq!(defaults(20_000, 1_000), u64::MAX);
        assert_eq!(defaults(1_048_576, 10_000), u64::MAX);
        // A 4,096 limit: clients get half, 1,984 are left: 992 partitions at 2 each (neither
        // set fills).
        assert_eq!(defaults(4_096, 10_000), 992);
        // A 1,024 limit: 448 left, 2 each.
        assert_eq!(defaults(1_024, 10_000), 224);
        // An active set of 32: full at 32, then the reserve handle only: 32 + 416 = 448.
        assert_eq!(capacity(1_024, 10_000, 32, true, true), 416);
        // Appends that may stay unsynced: one more each, beyond the sets.
        assert_eq!(capacity(20_000, 10_000, 1_024, true, false), 7_888);
        assert_eq!(capacity(20_000, 10_000, 1_024, false, false), 8_912);
        // Without preallocation only the active set.
        assert_eq!(capacity(20_000, 10_000, 1_024, false, true), u64::MAX);
        assert_eq!(capacity(1_024, 10_000, 1_024, false, true), 448);
        // Fixed shares that take everything.
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
