//! [`Stream`]: appending to, reading and tailing one stream (a Kafka topic), and consumer
//! positions.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_proto::records::{validate_produce_records, ProduceValidationError, RecordBatch};
use vdl_server::metadata::{wall_clock_ms, CommittedOffset, MetaCommand};
use vdl_server::topic_config::{TimestampType, TopicSettings};
use vdl_server::{AppendError, LogStream};

use crate::error::{Error, Result};
use crate::log::Inner;
use crate::partitioner::partition_for_key;
use crate::record::{decode_batches, encode_batch, CommittedRecord, Offset, Record};

/// Bytes read from the store per step of a tail or a range read.
const READ_CHUNK_BYTES: u64 = 1 << 20;

/// Most records one [`Stream::read_range`] returns (continue from the last one's next offset).
pub const READ_RANGE_MAX_RECORDS: usize = 100_000;

/// How long a tail waits on one long poll before it checks that the log is still open.
const TAIL_POLL: Duration = Duration::from_secs(1);

/// The Produce version whose rules appends are validated by (the newest vdl serves).
const PRODUCE_VERSION: i16 = 11;

/// How a stream is created: partition count, replication, retention and other Kafka topic
/// configs. Defaults: one partition, min(3, members) replicas, the node's retention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOptions {
    /// Partitions, each its own Raft group with its own leader and offsets (at least 1).
    pub partitions: u32,
    /// Replicas per partition (1..=members; `None`: min(3, members)).
    pub replication_factor: Option<usize>,
    /// Delete records older than this (Kafka's `retention.ms`; `None`: the node's setting).
    pub retention: Option<Duration>,
    /// Keep at most this many bytes per partition (Kafka's `retention.bytes`).
    pub retention_bytes: Option<u64>,
    /// Any other topic config vdl acts on, by its Kafka name (`max.message.bytes`,
    /// `message.timestamp.type`, `segment.bytes`, `min.insync.replicas`, ...).
    pub configs: BTreeMap<String, String>,
}

impl Default for StreamOptions {
    fn default() -> StreamOptions {
        StreamOptions {
            partitions: 1,
            replication_factor: None,
            retention: None,
            retention_bytes: None,
            configs: BTreeMap::new(),
        }
    }
}

impl StreamOptions {
    /// Default options with `partitions` partitions.
    pub fn partitions(partitions: u32) -> StreamOptions {
        StreamOptions {
            partitions,
            ..StreamOptions::default()
        }
    }

    /// The Kafka topic configs these options amount to.
    pub(crate) fn topic_configs(&self) -> BTreeMap<String, String> {
        let mut configs = self.configs.clone();
        if let Some(r) = self.retention {
            configs.insert("retention.ms".into(), r.as_millis().to_string());
        }
        if let Some(b) = self.retention_bytes {
            configs.insert("retention.bytes".into(), b.to_string());
        }
        configs
    }
}

/// What this node knows of one partition now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionStatus {
    /// The leader's node id, when one is known.
    pub leader: Option<u64>,
    /// This node leads and has committed an entry of its own term: every record committed
    /// under earlier leaders is below its high watermark, and a record appended under an
    /// earlier leader that is not there never will be.
    pub leader_ready: bool,
    /// The offset after the last committed record.
    pub high_watermark: u64,
    /// The first offset still stored (retention raises it).
    pub log_start_offset: u64,
}

/// A handle on one stream: append records, read and tail committed ones, keep consumer
/// positions. Cheap to clone. Every call works on this node's replicas: appends need this node
/// to lead the partition ([`Error::NotLeader`] says who does), reads are served from the local
/// replica up to its committed high watermark, on a follower as on the leader.
#[derive(Clone)]
pub struct Stream {
    log: Arc<Inner>,
    name: Arc<str>,
    /// Partition of the next record without key or partition (round robin).
    next_unkeyed: Arc<AtomicU32>,
}

impl Stream {
    pub(crate) fn new(log: Arc<Inner>, name: &str) -> Stream {
        Stream {
            log,
            name: name.into(),
            next_unkeyed: Arc::new(AtomicU32::new(0)),
        }
    }

    /// The stream's name (its Kafka topic name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its number of partitions now.
    pub fn partitions(&self) -> u32 {
        let node = &self.log.node;
        if let Some(topic) = node.metadata().topics.get(&*self.name) {
            return topic.partitions;
        }
        // A stream configured at start (`[streams] initial`): one partition.
        node.topic_layout(&self.name)
            .map_or(0, |l| l.replicas.len() as u32)
    }

    /// The partition `record` goes to among `partitions`.
    fn route(&self, record: &Record, partitions: u32) -> Result<u32> {
        match (record.partition, &record.key) {
            (Some(p), _) if p < partitions => Ok(p),
            (Some(p), _) => Err(Error::InvalidRecord(format!(
                "partition {p} of a stream of {partitions} partitions"
            ))),
            (None, Some(key)) => Ok(partition_for_key(key, partitions)),
            (None, None) => Ok(self.next_unkeyed.fetch_add(1, Ordering::Relaxed) % partitions),
        }
    }

    /// Appends one record and returns where it is once committed: fsynced on a majority of the
    /// partition's replicas (on this node alone for a single-node log).
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> vdl::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let log = vdl::Log::open_single(dir.path()).await?;
    /// let s = log.stream("events").await?;
    /// let first = s.append(vdl::Record::new("a").with_header("type", "created")).await?;
    /// let second = s.append(vdl::Record::new("b")).await?;
    /// assert_eq!((first.offset, second.offset), (0, 1));
    /// # log.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn append(&self, record: Record) -> Result<Offset> {
        let mut at = self.append_batch(vec![record]).await?;
        Ok(at.remove(0))
    }

    /// Appends records, each to its partition (its own, or by key), and returns their offsets
    /// in the order given. The records of one partition go in one batch, so they commit
    /// together and in order; partitions commit independently, and on an error some
    /// partitions' records may be committed (use [`Stream::append_atomic`] for all or
    /// nothing). Every batch is checked before any is submitted: a bad record writes nothing.
    pub async fn append_batch(&self, records: Vec<Record>) -> Result<Vec<Offset>> {
        let partitions = self.live_partitions()?;
        let mut by_partition: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, r) in records.iter().enumerate() {
            by_partition
                .entry(self.route(r, partitions)?)
                .or_default()
                .push(i);
        }
        if by_partition.is_empty() {
            return Err(Error::InvalidRecord("no records to append".into()));
        }
        let mut prepared = Vec::with_capacity(by_partition.len());
        for (partition, indexes) in by_partition {
            let group: Vec<&Record> = indexes.iter().map(|i| &records[*i]).collect();
            let (stream, batch, span) = self.prepare(partition, &group).await?;
            prepared.push((partition, indexes, stream, batch, span));
        }
        // Submitted one after another from this task: each partition receives them in order.
        let pending: Vec<_> = prepared
            .into_iter()
            .map(|(partition, indexes, stream, batch, span)| {
                (partition, indexes, stream.submit_records(batch, span))
            })
            .collect();
        let mut out = vec![Offset::default(); records.len()];
        let timeout = self.log.options.append_timeout;
        let mut first_error = None;
        for (partition, indexes, pending) in pending {
            match pending.wait(timeout).await {
                Ok(appended) => {
                    debug_assert_eq!(appended.offset_count as usize, indexes.len());
                    for (k, i) in indexes.iter().enumerate() {
                        out[*i] = Offset::new(partition, appended.base_offset + k as u64);
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(self.append_error(partition, e));
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Appends `records` as one batch: all of them commit, at consecutive offsets of one
    /// partition, or none does. They must all go to the same partition (give it explicitly,
    /// or use keys that hash alike); otherwise [`Error::InvalidRecord`] and nothing is written.
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> vdl::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let log = vdl::Log::open_single(dir.path()).await?;
    /// let accounts = log.stream("accounts").await?;
    /// let transfer = vec![
    ///     vdl::Record::keyed("alice", "-10"),
    ///     vdl::Record::keyed("bob", "+10"),
    /// ];
    /// let at = accounts.append_atomic(transfer).await?;
    /// assert_eq!(at[1].offset, at[0].offset + 1);
    /// # log.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn append_atomic(&self, records: Vec<Record>) -> Result<Vec<Offset>> {
        let partitions = self.live_partitions()?;
        let mut partition = None;
        for r in &records {
            let p = match (r.partition, &r.key) {
                (None, None) => None,
                _ => Some(self.route(r, partitions)?),
            };
            match (partition, p) {
                (Some(a), Some(b)) if a != b => {
                    return Err(Error::InvalidRecord(format!(
                        "an atomic append's records map to partitions {a} and {b}"
                    )))
                }
                (None, Some(b)) => partition = Some(b),
                _ => {}
            }
        }
        let partition = match partition {
            Some(p) => p,
            None => self.next_unkeyed.fetch_add(1, Ordering::Relaxed) % partitions,
        };
        let refs: Vec<&Record> = records.iter().collect();
        let (stream, batch, span) = self.prepare(partition, &refs).await?;
        match stream
            .submit_records(batch, span)
            .wait(self.log.options.append_timeout)
            .await
        {
            Ok(a) => Ok((0..u64::from(span))
                .map(|k| Offset::new(partition, a.base_offset + k))
                .collect()),
            Err(e) => Err(self.append_error(partition, e)),
        }
    }

    /// The partition count, or why nothing can be appended.
    fn live_partitions(&self) -> Result<u32> {
        if self.log.is_closed() {
            return Err(Error::Closed);
        }
        match self.partitions() {
            0 => Err(Error::InvalidStream(format!("no stream {}", self.name))),
            n => Ok(n),
        }
    }

    /// Checks that this node leads `partition` (waiting while no leader is known), encodes
    /// `records` as one batch and validates it as a Kafka produce would be (size limit,
    /// timestamps), stamping the append time on a `LogAppendTime` stream.
    async fn prepare(
        &self,
        partition: u32,
        records: &[&Record],
    ) -> Result<(LogStream, Bytes, u32)> {
        let stream = self.leader_handle(partition).await?;
        let node = &self.log.node;
        let settings: TopicSettings = node.topic_settings(&self.name);
        let now = vdl_server::metadata::wall_clock_ms();
        let kafka = vdl_server::config::KafkaSettings {
            message_max_bytes: settings.max_message_bytes,
            ..node.config().kafka
        };
        let mut limits = kafka.produce_limits(now);
        if settings.timestamp_type == TimestampType::LogAppendTime {
            limits = limits.with_timestamp_after_max_ms(i64::MAX);
        }
        let batch = encode_batch(records, now)?;
        let (batch, span) =
            validate_produce_records(batch, PRODUCE_VERSION, &limits).map_err(|e| match e {
                ProduceValidationError::TooLarge { size, max } => Error::TooLarge { size, max },
                other => Error::InvalidRecord(other.to_string()),
            })?;
        let batch: RecordBatch = match settings.timestamp_type {
            TimestampType::CreateTime => batch,
            TimestampType::LogAppendTime => batch.with_log_append_time(now),
        };
        let replicas = node.replicas_of(&stream).len();
        if let Some(required) = settings.in_sync_required_beyond_majority(replicas) {
            let in_sync = stream
                .visible()
                .in_sync
                .iter()
                .filter(|id| **id != 0)
                .count();
            if in_sync < required {
                return Err(Error::NotEnoughReplicas { in_sync, required });
            }
        }
        Ok((stream, batch.into_bytes(), span))
    }

    /// This node's replica of `partition` when it leads it; waits up to the append timeout
    /// while no leader is known (an election).
    async fn leader_handle(&self, partition: u32) -> Result<LogStream> {
        let node = &self.log.node;
        let me = node.config().id;
        let deadline = tokio::time::Instant::now() + self.log.options.append_timeout;
        loop {
            if self.log.is_closed() {
                return Err(Error::Closed);
            }
            let local = node.partition(&self.name, partition);
            let leader = match &local {
                Some(s) => s.visible().leader,
                None => self.reported_leader(partition).unwrap_or(0),
            };
            match (local, leader) {
                (Some(s), l) if l == me => return Ok(s),
                (_, 0) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                (_, l) => return Err(self.not_leader(partition, (l != 0).then_some(l))),
            }
        }
    }

    fn reported_leader(&self, partition: u32) -> Option<u64> {
        let node = &self.log.node;
        let incarnation = node.topic_incarnation(&self.name)?;
        node.reported_leader(&self.name, incarnation, partition)
            .map(|(leader, _)| leader)
    }

    fn not_leader(&self, partition: u32, leader: Option<u64>) -> Error {
        let kafka_address = leader.and_then(|l| {
            self.log
                .node
                .live_brokers()
                .into_iter()
                .find(|(id, _)| *id == l)
                .map(|(_, addr)| addr)
        });
        Error::NotLeader {
            node: self.log.node.config().id,
            stream: self.name.to_string(),
            partition,
            leader,
            kafka_address,
        }
    }

    /// The typed error of an append that was submitted and not acknowledged.
    fn append_error(&self, partition: u32, e: AppendError) -> Error {
        match e {
            AppendError::NotLeader { leader } => Error::LeaderChanged { leader },
            // Overwritten by another leader's entry: it is not in the log.
            AppendError::Lost => {
                let leader = self
                    .log
                    .node
                    .partition(&self.name, partition)
                    .map(|s| s.visible().leader)
                    .filter(|l| *l != 0);
                self.not_leader(partition, leader)
            }
            AppendError::Timeout => Error::Timeout(self.log.options.append_timeout),
            AppendError::Busy => Error::Busy,
            AppendError::Stopped => Error::Closed,
            AppendError::Invalid(m) => Error::InvalidRecord(m),
            AppendError::Sequence(s) => Error::InvalidRecord(format!("{s:?}")),
            // The replica could not write it (a full disk): nothing of it is in its log.
            AppendError::Storage(m) => Error::Storage(m),
            // The embedded API never asks for more copies than a majority.
            e @ AppendError::TooFewInSync { .. } => Error::InvalidRecord(e.to_string()),
        }
    }

    /// This node's replica of `partition`, for reading.
    fn replica(&self, partition: u32) -> Result<LogStream> {
        if self.log.is_closed() {
            return Err(Error::Closed);
        }
        self.log
            .node
            .partition(&self.name, partition)
            .ok_or_else(|| Error::NotHosted {
                node: self.log.node.config().id,
                stream: self.name.to_string(),
                partition,
            })
    }

    /// What this node knows of `partition` now (its replica must be here).
    pub fn status(&self, partition: u32) -> Result<PartitionStatus> {
        let v = self.replica(partition)?.visible();
        Ok(PartitionStatus {
            leader: (v.leader != 0).then_some(v.leader),
            leader_ready: v.leader == self.log.node.config().id && v.leader_ready,
            high_watermark: v.high_watermark,
            log_start_offset: v.log_start_offset,
        })
    }

    /// The committed records of `from.partition` from `from.offset` up to `until` (exclusive;
    /// at most the high watermark), read from this node's replica: at most
    /// [`READ_RANGE_MAX_RECORDS`] of them (continue from the last one's next offset).
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> vdl::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let log = vdl::Log::open_single(dir.path()).await?;
    /// let s = log.stream("audit").await?;
    /// s.append_batch((0..5).map(|i| vdl::Record::new(format!("e{i}"))).collect()).await?;
    /// let middle = s.read_range(vdl::Offset::new(0, 1), 4).await?;
    /// let offsets: Vec<u64> = middle.iter().map(|r| r.offset.offset).collect();
    /// assert_eq!(offsets, [1, 2, 3]);
    /// # log.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read_range(&self, from: Offset, until: u64) -> Result<Vec<CommittedRecord>> {
        let replica = self.replica(from.partition)?;
        let v = replica.visible();
        let until = until.min(v.high_watermark);
        check_range(from.offset, v.log_start_offset, v.high_watermark)?;
        let mut out = Vec::new();
        let mut next = from.offset;
        while next < until && out.len() < READ_RANGE_MAX_RECORDS {
            let read = replica
                .read(next, READ_CHUNK_BYTES)
                .map_err(|e| read_error(e, next, &replica))?;
            if read.next_offset <= next {
                break;
            }
            decode_batches(from.partition, &read.chunks, next, until, &mut out)?;
            next = read.next_offset;
        }
        out.truncate(READ_RANGE_MAX_RECORDS);
        Ok(out)
    }

    /// The committed records of `from.partition` from `from.offset` on, as an async stream
    /// that waits at the end for new commits (a long poll on the replica's high watermark, no
    /// busy loop). It reads this node's replica, which needs no leader: it goes on through
    /// leader changes, and ends only with an error ([`Error::Closed`] at shutdown,
    /// [`Error::OffsetOutOfRange`] when retention passed it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> vdl::Result<()> {
    /// use futures::StreamExt;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let log = vdl::Log::open_single(dir.path()).await?;
    /// let s = log.stream("changes").await?;
    /// let mut tail = s.tail(vdl::Offset::start(0));
    /// s.append(vdl::Record::new("x")).await?;
    /// let r = tail.next().await.unwrap()?;
    /// assert_eq!(r.value.as_deref(), Some(&b"x"[..]));
    /// # log.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn tail(&self, from: Offset) -> crate::tail::Tail {
        crate::tail::Tail::new(self.clone(), from)
    }

    /// One step of a tail: the next committed records at `next` (waiting up to a poll period
    /// for them); empty when none came. Returns the offset after what was read.
    pub(crate) async fn poll_records(
        &self,
        partition: u32,
        next: u64,
        out: &mut VecDeque<CommittedRecord>,
    ) -> Result<u64> {
        let replica = self.replica(partition)?;
        let v = replica.visible();
        if next >= v.high_watermark {
            check_range(next, v.log_start_offset, v.high_watermark)?;
            let mut closed = self.log.closed.subscribe();
            let started = tokio::time::Instant::now();
            let progressed = tokio::select! {
                v2 = replica.wait_for_high_watermark_above(next, TAIL_POLL) => {
                    v2.high_watermark > next
                }
                closed = closed.wait_for(|c| *c) => {
                    drop(closed);
                    return Err(Error::Closed);
                }
            };
            // A stopped group's watch closes: the wait returns at once without progress.
            // Pause instead of spinning; the next step sees whether the replica is gone.
            if !progressed && started.elapsed() < TAIL_POLL / 2 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            return Ok(next);
        }
        let read = replica
            .read(next, READ_CHUNK_BYTES)
            .map_err(|e| read_error(e, next, &replica))?;
        let mut records = Vec::new();
        decode_batches(
            partition,
            &read.chunks,
            next,
            v.high_watermark,
            &mut records,
        )?;
        out.extend(records);
        Ok(read.next_offset.max(next))
    }

    /// Records `consumer`'s position: `next` is the next record it will read (Kafka's
    /// committed offset). Replicated through the cluster metadata as a Kafka consumer group's
    /// committed offset, so `kafka-consumer-groups --group <consumer>` and a Kafka consumer
    /// of that group see it. Returns once this node has applied it.
    pub async fn commit(&self, consumer: &str, next: Offset) -> Result<()> {
        if self.log.is_closed() {
            return Err(Error::Closed);
        }
        let offset = i64::try_from(next.offset)
            .map_err(|_| Error::InvalidRecord(format!("offset {} out of range", next.offset)))?;
        let partition = i32::try_from(next.partition).map_err(|_| {
            Error::InvalidRecord(format!("partition {} out of range", next.partition))
        })?;
        if consumer.is_empty() {
            return Err(Error::InvalidStream("an empty consumer name".into()));
        }
        let command = MetaCommand::CommitOffsets {
            group: consumer.to_owned(),
            offsets: vec![CommittedOffset {
                topic: self.name.to_string(),
                partition,
                offset,
                leader_epoch: -1,
                metadata: None,
            }],
            commit_time_ms: wall_clock_ms(),
        };
        self.log
            .node
            .metadata_proposer()
            .propose(&command, self.log.options.metadata_timeout)
            .await
            .map(|_| ())
            .map_err(|e| match e {
                AppendError::Timeout => Error::Timeout(self.log.options.metadata_timeout),
                AppendError::Stopped => Error::Closed,
                other => Error::Metadata(other.to_string()),
            })
    }

    /// `consumer`'s committed position in `partition` (the next record to read), as this node
    /// has applied the metadata; `None` when it never committed one. Kafka consumers' commits
    /// to the group of the same name show here too.
    pub fn position(&self, consumer: &str, partition: u32) -> Option<Offset> {
        let meta = self.log.node.metadata();
        let committed = meta
            .offsets
            .get(consumer)?
            .get(&(self.name.to_string(), i32::try_from(partition).ok()?))?;
        u64::try_from(committed.offset)
            .ok()
            .map(|o| Offset::new(partition, o))
    }
}

fn check_range(offset: u64, log_start: u64, high_watermark: u64) -> Result<()> {
    if offset < log_start || offset > high_watermark {
        return Err(Error::OffsetOutOfRange {
            offset,
            log_start,
            high_watermark,
        });
    }
    Ok(())
}

fn read_error(e: logstore::LogStoreError, offset: u64, replica: &LogStream) -> Error {
    let v = replica.visible();
    match e {
        logstore::LogStoreError::OffsetOutOfRange { .. } => Error::OffsetOutOfRange {
            offset,
            log_start: v.log_start_offset,
            high_watermark: v.high_watermark,
        },
        other => Error::Storage(other.to_string()),
    }
}
