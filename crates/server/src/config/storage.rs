//! The `[storage]` section: segment files, caching, durability, retention and scrubbing.

use std::time::Duration;

use serde::Deserialize;

use super::values::{invalid, positive_ms};
use super::ConfigError;

/// When appended entries are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// fdatasync before an entry is acknowledged to Raft (the default: no acknowledged write is
    /// ever lost).
    Always,
    /// fdatasync at most this often; a crash can lose the last interval on this node.
    Interval(Duration),
    /// Never fdatasync (benchmarks only).
    Never,
}

/// Storage settings: per log stream, except the node-wide `cache_bytes`,
/// `max_open_segment_files` and `max_open_active_files`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageSettings {
    /// Segment file size at which a new segment is started.
    pub segment_bytes: u64,
    /// Bytes of newest entries kept in memory by all streams of the node together (one
    /// budget shared by their tail caches; `logstore::CacheBudget`).
    pub cache_bytes: u64,
    /// Most sealed segment files kept open (memory-mapped) by the node at once, all streams
    /// together; others are opened on demand (`logstore::OpenSegments`).
    pub max_open_segment_files: usize,
    /// Most active segments' descriptors the node keeps open at once, all streams together,
    /// while their stores have nothing unsynced (`logstore::ActiveFiles`); an idle partition's
    /// is closed when the set is full and reopened on its next read or write.
    pub max_open_active_files: usize,
    /// Durability policy.
    pub sync: SyncMode,
    /// Whether retention may delete segments (VDL's delete permission).
    pub deletion_allowed: bool,
    /// Whether operators may delete a partition's old segments by hand (`vdlctl segment
    /// delete`, the admin API); off by default.
    pub operator_delete_allowed: bool,
    /// Keep at most this many bytes per stream (older whole segments are deleted).
    pub retention_bytes: Option<u64>,
    /// Delete segments whose newest entry is older than this.
    pub retention_age: Option<Duration>,
    /// How often each stream applies the retention rules.
    pub retention_check_interval: Duration,
    /// How long a leader's retention keeps entries for a replica it has not heard from
    /// (a node that is down): after this, retention deletes what the rules say and the replica
    /// catches up from a snapshot when it returns (`storage.retention_down_replica_wait_ms`).
    pub retention_down_replica_wait: Duration,
    /// Most bytes of old segments a leader's retention keeps for a live replica that is still
    /// catching up (`storage.retention_lagging_replica_max_bytes`); older ones go and the
    /// replica catches up from a snapshot.
    pub retention_lagging_replica_max_bytes: u64,
    /// Zeroed bytes kept written ahead of each stream's active segment so that syncing an
    /// append flushes data only, not file-system metadata (0 disables).
    pub preallocate_bytes: u64,
    /// Rate at which the background scrubber reads and CRC-checks sealed segments, in bytes
    /// per second, all streams together (0: no scrubber).
    pub scrub_bytes_per_second: u64,
    /// Pause between two passes of the scrubber over every sealed segment.
    pub scrub_pass_pause: Duration,
    /// Memory of the log cleaner's key map (one pass at a time, node-wide), bytes
    /// (`storage.cleaner_dedupe_buffer_bytes`; Kafka's `log.cleaner.dedupe.buffer.size`).
    pub cleaner_dedupe_buffer_bytes: usize,
    /// Bytes per second the log cleaner reads and writes, all partitions together (`None`:
    /// unlimited, Kafka's default; `storage.cleaner_io_max_bytes_per_s`).
    pub cleaner_io_bytes_per_second: Option<u64>,
    /// Pause between two rounds of the log cleaner over the compacted partitions
    /// (`storage.cleaner_backoff_ms`; Kafka's `log.cleaner.backoff.ms`).
    pub cleaner_backoff: Duration,
    /// Tests only: the control file of a fault-injecting file system
    /// (`logstore::FaultInjectingFs`) installed at start; `None`: the real file system.
    pub fault_injection_file: Option<std::path::PathBuf>,
}

/// Default of `storage.retention_down_replica_wait_ms`: a minute (a restart or a short outage
/// finds its entries still there; a node down for longer catches up from a snapshot).
pub const DEFAULT_RETENTION_DOWN_REPLICA_WAIT: Duration = Duration::from_secs(60);

/// Default of `storage.retention_lagging_replica_max_bytes`: 1 GiB per partition.
pub const DEFAULT_RETENTION_LAGGING_REPLICA_MAX_BYTES: u64 = 1 << 30;

/// Default of `storage.cleaner_dedupe_buffer_bytes`: 128 MiB, Kafka's
/// `log.cleaner.dedupe.buffer.size` (about 5 million keys per pass at 24 bytes a slot).
pub const DEFAULT_CLEANER_DEDUPE_BUFFER_BYTES: usize = 128 << 20;

/// Default of `storage.cleaner_backoff_ms`: 15 s, Kafka's `log.cleaner.backoff.ms`.
pub const DEFAULT_CLEANER_BACKOFF: Duration = Duration::from_secs(15);

/// Default scrubber rate: 4 MB/s (about 1% of a core for CRC-32C and page-cache reads, far
/// below the disk's bandwidth; see docs/reliability.md for the measured cost).
pub const DEFAULT_SCRUB_BYTES_PER_SECOND: u64 = 4_000_000;

impl Default for StorageSettings {
    fn default() -> StorageSettings {
        StorageSettings {
            segment_bytes: 256 << 20,
            cache_bytes: DEFAULT_CACHE_BYTES,
            max_open_segment_files: logstore::DEFAULT_MAX_OPEN_SEGMENT_FILES,
            max_open_active_files: logstore::DEFAULT_MAX_OPEN_ACTIVE_FILES,
            sync: SyncMode::Always,
            deletion_allowed: true,
            operator_delete_allowed: false,
            retention_bytes: None,
            retention_age: Some(Duration::from_secs(7 * 24 * 3600)),
            retention_check_interval: Duration::from_secs(10),
            retention_down_replica_wait: DEFAULT_RETENTION_DOWN_REPLICA_WAIT,
            retention_lagging_replica_max_bytes: DEFAULT_RETENTION_LAGGING_REPLICA_MAX_BYTES,
            preallocate_bytes: 16 << 20,
            scrub_bytes_per_second: DEFAULT_SCRUB_BYTES_PER_SECOND,
            scrub_pass_pause: Duration::from_secs(60),
            cleaner_dedupe_buffer_bytes: DEFAULT_CLEANER_DEDUPE_BUFFER_BYTES,
            // Unlimited, as Kafka's log.cleaner.io.max.bytes.per.second: a pass's I/O is
            // sequential and bounded by the key map; an operator who shares the disk with
            // latency-sensitive work sets a rate.
            cleaner_io_bytes_per_second: None,
            cleaner_backoff: DEFAULT_CLEANER_BACKOFF,
            fault_injection_file: None,
        }
    }
}

/// Default of `storage.cache_bytes`: the tail-cache budget of a node, all streams together
/// (it was 64 MiB per stream, unbounded per node). 128 MiB lets one busy partition cache twice
/// what it could before, and even fully used by partitions that went idle it keeps a node of
/// 1,000 partitions well under its 300 MB memory target.
pub const DEFAULT_CACHE_BYTES: u64 = 128 << 20;

/// `[storage]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileStorage {
    segment_bytes: Option<u64>,
    cache_bytes: Option<u64>,
    max_open_segment_files: Option<usize>,
    max_open_active_files: Option<usize>,
    sync: Option<String>,
    deletion_allowed: Option<bool>,
    operator_delete_allowed: Option<bool>,
    retention_bytes: Option<u64>,
    retention_hours: Option<u64>,
    retention_check_ms: Option<u64>,
    retention_down_replica_wait_ms: Option<u64>,
    retention_lagging_replica_max_bytes: Option<u64>,
    preallocate_bytes: Option<u64>,
    scrub_rate_mb_per_s: Option<f64>,
    scrub_pause_ms: Option<u64>,
    cleaner_dedupe_buffer_bytes: Option<u64>,
    cleaner_io_max_bytes_per_s: Option<u64>,
    cleaner_backoff_ms: Option<u64>,
    fault_injection_file: Option<std::path::PathBuf>,
}

/// Validates `[storage]` over the defaults.
pub(super) fn parse_storage(s: FileStorage) -> Result<StorageSettings, ConfigError> {
    let mut storage = StorageSettings::default();
    if let Some(v) = s.segment_bytes {
        if v < 1 << 20 {
            return invalid("storage.segment_bytes", "must be at least 1048576 (1 MiB)");
        }
        storage.segment_bytes = v;
    }
    if let Some(v) = s.cache_bytes {
        storage.cache_bytes = v;
    }
    if let Some(v) = s.max_open_segment_files {
        if v == 0 {
            return invalid("storage.max_open_segment_files", "must be at least 1");
        }
        storage.max_open_segment_files = v;
    }
    if let Some(v) = s.max_open_active_files {
        if v == 0 {
            return invalid("storage.max_open_active_files", "must be at least 1");
        }
        storage.max_open_active_files = v;
    }
    storage.preallocate_bytes = s.preallocate_bytes.unwrap_or(storage.preallocate_bytes);
    if let Some(v) = s.sync {
        storage.sync = parse_sync(&v)?;
    }
    storage.deletion_allowed = s.deletion_allowed.unwrap_or(storage.deletion_allowed);
    storage.operator_delete_allowed = s
        .operator_delete_allowed
        .unwrap_or(storage.operator_delete_allowed);
    storage.retention_bytes = s.retention_bytes.or(storage.retention_bytes);
    if let Some(ms) = s.retention_check_ms {
        storage.retention_check_interval = positive_ms("storage.retention_check_ms", ms)?;
    }
    if let Some(ms) = s.retention_down_replica_wait_ms {
        storage.retention_down_replica_wait = Duration::from_millis(ms);
    }
    storage.retention_lagging_replica_max_bytes = s
        .retention_lagging_replica_max_bytes
        .unwrap_or(storage.retention_lagging_replica_max_bytes);
    if let Some(h) = s.retention_hours {
        storage.retention_age = Some(Duration::from_secs(h.saturating_mul(3600)));
    }
    if let Some(mb) = s.scrub_rate_mb_per_s {
        if !(0.0..=100_000.0).contains(&mb) {
            return invalid(
                "storage.scrub_rate_mb_per_s",
                "must be between 0 and 100000",
            );
        }
        storage.scrub_bytes_per_second = (mb * 1e6) as u64;
    }
    if let Some(ms) = s.scrub_pause_ms {
        storage.scrub_pass_pause = Duration::from_millis(ms);
    }
    if let Some(b) = s.cleaner_dedupe_buffer_bytes {
        // At least one key map slot of each kind of use; at most what a usize holds.
        if !(1024..=(1u64 << 40)).contains(&b) {
            return invalid(
                "storage.cleaner_dedupe_buffer_bytes",
                "must be between 1024 and 1 TiB",
            );
        }
        storage.cleaner_dedupe_buffer_bytes = usize::try_from(b).unwrap_or(usize::MAX);
    }
    if let Some(rate) = s.cleaner_io_max_bytes_per_s {
        if rate == 0 {
            return invalid(
                "storage.cleaner_io_max_bytes_per_s",
                "must be positive (leave it out for no limit)",
            );
        }
        storage.cleaner_io_bytes_per_second = Some(rate);
    }
    if let Some(ms) = s.cleaner_backoff_ms {
        storage.cleaner_backoff = positive_ms("storage.cleaner_backoff_ms", ms)?;
    }
    storage.fault_injection_file = s.fault_injection_file;
    Ok(storage)
}

/// Parses `always`, `never` or `interval:MS`.
fn parse_sync(v: &str) -> Result<SyncMode, ConfigError> {
    match v {
        "always" => Ok(SyncMode::Always),
        "never" => Ok(SyncMode::Never),
        other => match other.strip_prefix("interval:").map(str::parse::<u64>) {
            Some(Ok(ms)) if ms > 0 => Ok(SyncMode::Interval(Duration::from_millis(ms))),
            _ => invalid(
                "storage.sync",
                &format!("`{v}`: expected always, never or interval:MILLISECONDS"),
            ),
        },
    }
}
