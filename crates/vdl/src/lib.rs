//! vdl embedded: a replicated, durable change-data log linked into a Rust program.
//!
//! The program writes its changes (row images, events, commands) to a [`Log`] in-process;
//! other parts of the program tail it ([`Stream::tail`]), and other programs read the same
//! data over the Kafka protocol ([`Log::serve_kafka`]): every append is an ordinary Kafka record
//! batch (magic 2, CRC-32C, timestamps) in a topic named after the stream.
//!
//! - [`Log::open_single`]: one node, no network; an append is durable after this node's fsync.
//! - [`Log::join`]: a member of a cluster (e.g. three nodes; the others may be `vdl` processes,
//!   other embedding processes, or nodes in this process); an append is acknowledged after it
//!   is fsynced on a majority.
//! - [`Log::in_process_cluster`]: several nodes in this process, for tests.
//!
//! A [`Stream`] has partitions, each its own Raft group; records are routed by key as Kafka's
//! default partitioner does, so a Kafka producer and this API put a key in the same partition.
//! Everything runs on the caller's tokio runtime (multi-threaded) plus each node's own small
//! pool of Raft worker threads; see `docs/embedding.md` for guarantees, threads and sizing.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> vdl::Result<()> {
//! use futures::StreamExt;
//! let dir = tempfile::tempdir().unwrap();
//! let log = vdl::Log::open_single(dir.path()).await?;
//! let users = log.stream("users").await?;
//! users.append(vdl::Record::keyed("u1", "alice")).await?;
//! let mut changes = users.tail(vdl::Offset::start(0));
//! let first = changes.next().await.unwrap()?;
//! assert_eq!(first.key.as_deref(), Some(&b"u1"[..]));
//! users.commit("indexer", first.offset.next()).await?;
//! assert_eq!(users.position("indexer", 0), Some(vdl::Offset::new(0, 1)));
//! log.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod error;
mod log;
pub mod partitioner;
mod record;
mod stream;
mod tail;

pub use error::{Error, Result};
pub use log::{Log, LogOptions, OPEN_TIMEOUT};
pub use record::{CommittedRecord, Offset, Record};
pub use stream::{PartitionStatus, Stream, StreamOptions, READ_RANGE_MAX_RECORDS};
pub use tail::Tail;
/// The node configuration [`Log::join`] takes (the `vdl` binary's, from `vdl-server`).
pub use vdl_server::config::NodeConfig;
