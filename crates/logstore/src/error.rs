//! Error types of the store.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in the store, as data the caller can match on.
///
/// Corruption errors always name the file and the byte offset inside it, so an operator can
/// look at the exact spot. I/O errors name the file the operation was working on.
#[derive(Debug, thiserror::Error)]
pub enum LogStoreError {
    /// An operating-system call failed on `path`.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory the failed call was working on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Data that should be intact is not: a bad CRC inside a sealed segment, an impossible
    /// frame length, a header that does not parse. The store never skips or truncates such
    /// data silently.
    #[error("corruption in {path} at byte {offset}: {reason}")]
    Corruption {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset inside the file where the damage was found.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// A file was written by a newer version of this format.
    #[error(
        "{path}: format version {found} is newer than the newest this build reads ({supported})"
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version stored in the file.
        found: u16,
        /// The newest version this build understands.
        supported: u16,
    },
    /// A segment file's name does not match the first Raft index stored in its header.
    #[error("segment {path}: file name says first index {name_index}, header says {header_index}")]
    SegmentNameMismatch {
        /// The segment file.
        path: PathBuf,
        /// First index according to the file name.
        name_index: u64,
        /// First index according to the header.
        header_index: u64,
    },
    /// The requested Raft index was removed by a prefix deletion or a snapshot.
    #[error("index {index} is compacted (first index is {first_index})")]
    Compacted {
        /// The requested index.
        index: u64,
        /// The first index still stored.
        first_index: u64,
    },
    /// The requested Raft index is past the end of the log.
    #[error("index {index} is unavailable (last index is {last_index})")]
    Unavailable {
        /// The requested index.
        index: u64,
        /// The last index stored.
        last_index: u64,
    },
    /// An append did not continue the log: indexes must be `last_index() + 1, +2, ...`.
    #[error("non-contiguous append: expected index {expected}, got {got}")]
    NonContiguous {
        /// The index the store expected next.
        expected: u64,
        /// The index that was given.
        got: u64,
    },
    /// The caller's [`crate::RecordCompactor`] failed on a stored batch, or returned a batch
    /// that does not keep the original's offsets: the segment was not rewritten.
    #[error("compaction of {path} at byte {offset}: {reason}")]
    Compaction {
        /// The segment being compacted.
        path: PathBuf,
        /// Byte offset of the batch inside the segment.
        offset: u64,
        /// What the codec said, or what was wrong with its result.
        reason: String,
    },
    /// A Kafka offset outside `[log_start_offset, next_offset]`.
    #[error("offset {offset} is out of range [{log_start_offset}, {next_offset}]")]
    OffsetOutOfRange {
        /// The requested offset.
        offset: u64,
        /// The first offset still stored.
        log_start_offset: u64,
        /// The offset the next record will get.
        next_offset: u64,
    },
    /// The payload of a `Records` entry is not a whole number of magic-2 Kafka record batches.
    #[error("entry {index}: invalid record batches at payload byte {at}: {reason}")]
    InvalidRecords {
        /// Raft index of the offending entry.
        index: u64,
        /// Byte position inside the payload.
        at: usize,
        /// What was wrong.
        reason: String,
    },
    /// An entry (payload + context) is larger than `StoreConfig::max_entry_bytes`.
    #[error("entry {index} is {size} bytes, the limit is {limit}")]
    EntryTooLarge {
        /// Raft index of the offending entry.
        index: u64,
        /// Its size in bytes.
        size: u64,
        /// The configured limit.
        limit: u64,
    },
    /// An append batch is larger than `StoreConfig::max_batch_bytes` or
    /// `StoreConfig::max_batch_entries`.
    #[error("append batch of {entries} entries / {bytes} bytes exceeds the limit")]
    BatchTooLarge {
        /// Number of entries in the batch.
        entries: usize,
        /// Encoded size of the batch.
        bytes: u64,
    },
    /// An entry's term is lower than the term of the entry before it.
    #[error("entry {index} has term {term}, lower than the previous term {prev_term}")]
    TermRegression {
        /// Raft index of the offending entry.
        index: u64,
        /// Its term.
        term: u64,
        /// Term of the entry before it.
        prev_term: u64,
    },
    /// Deletion was requested but the store was configured with `deletion_allowed = false`.
    #[error("deletion is not allowed on this log")]
    DeletionForbidden,
    /// Another `LogStore` (in this or another process) holds the directory's lock, or a
    /// node's [`crate::RootLock`] holds a directory above it (or, from
    /// [`crate::RootLock::acquire`], the root itself).
    #[error("log directory {path} is locked by another store or node")]
    Locked {
        /// The directory.
        path: PathBuf,
    },
    /// An argument was outside what the operation accepts.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, LogStoreError>;

/// Wraps an `io::Error` with the path it happened on.
pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> LogStoreError {
    let path = path.into();
    move |source| LogStoreError::Io { path, source }
}

/// Builds a corruption error.
pub(crate) fn corruption(
    path: impl Into<PathBuf>,
    offset: u64,
    reason: impl Into<String>,
) -> LogStoreError {
    LogStoreError::Corruption {
        path: path.into(),
        offset,
        reason: reason.into(),
    }
}
