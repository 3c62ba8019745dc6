//! A trivial Kafka server, to measure the ceiling of the client itself and to test it: it
//! acknowledges every Produce at once (offsets assigned, batches kept in memory), serves Fetch
//! from memory without copying, and answers ApiVersions, Metadata and ListOffsets. One broker
//! (node 0) leads every partition. Faults can be injected: skip an offset (a gap for consumers
//! to find) or answer the next Produce requests with NOT_LEADER_OR_FOLLOWER.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::{
    api_versions_response, decode_request, encode_response, read_frame_size, Request, Response,
    DEFAULT_MAX_FRAME_BYTES,
};
use kafka_proto::messages::fetch_response::{FetchResponse, FetchableTopicResponse, PartitionData};
use kafka_proto::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use kafka_proto::messages::metadata_response::{
    MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_proto::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_proto::messages::{FetchRequest, ListOffsetsRequest, MetadataRequest, ProduceRequest};
use kafka_proto::records::{set_base_offset, split_batches};
use kafka_proto::RecordChunks;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::client::conn::write_segments;

/// Faults to inject, changeable while the server runs.
#[derive(Debug)]
pub struct Faults {
    /// Once: leave one offset unused just before the batch that would contain this offset (a
    /// gap of one for consumers to find); -1: never.
    pub skip_offset: AtomicI64,
    /// Answer this many of the next Produce requests with NOT_LEADER_OR_FOLLOWER.
    pub not_leader_produces: AtomicU32,
    /// Wait this many microseconds before answering a Produce (0: answer at once), so a
    /// client's pipelining becomes visible in [`FakeServer::pipelined_produces`].
    pub produce_delay_us: AtomicU64,
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            skip_offset: AtomicI64::new(-1),
            not_leader_produces: AtomicU32::new(0),
            produce_delay_us: AtomicU64::new(0),
        }
    }
}

/// The log of one partition.
#[derive(Debug, Default)]
struct PartitionLog {
    /// Batches as (next offset after the batch, bytes with the base offset set).
    batches: Vec<(i64, Bytes)>,
    /// The next offset to assign (the high watermark).
    end: i64,
}

/// Shared server state.
#[derive(Debug)]
struct State {
    partitions: i32,
    host: String,
    port: i32,
    logs: Mutex<HashMap<(String, i32), PartitionLog>>,
    appended: Notify,
    faults: Faults,
    metadata_requests: AtomicU64,
    produce_requests: AtomicU64,
    pipelined_produces: AtomicU64,
}

/// A running fake server; stopped when dropped.
#[derive(Debug)]
pub struct FakeServer {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl FakeServer {
    /// Listens on `addr` (e.g. `127.0.0.1:0`); every topic has `partitions` partitions.
    pub async fn start(addr: &str, partitions: i32) -> std::io::Result<FakeServer> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let state = Arc::new(State {
            partitions: partitions.max(1),
            host: local.ip().to_string(),
            port: i32::from(local.port()),
            logs: Mutex::default(),
            appended: Notify::new(),
            faults: Faults::default(),
            metadata_requests: AtomicU64::new(0),
            produce_requests: AtomicU64::new(0),
            pipelined_produces: AtomicU64::new(0),
        });
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, st).await;
                });
            }
        });
        Ok(FakeServer {
            addr: local,
            state,
            task,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The fault switches.
    pub fn faults(&self) -> &Faults {
        &self.state.faults
    }

    /// Metadata requests answered so far.
    pub fn metadata_requests(&self) -> u64 {
        self.state.metadata_requests.load(Ordering::Relaxed)
    }

    /// Produce requests answered while the client had already sent another request (only
    /// counted when `produce_delay_us` is set).
    pub fn pipelined_produces(&self) -> u64 {
        self.state.pipelined_produces.load(Ordering::Relaxed)
    }

    /// Produce requests received so far.
    pub fn produce_requests(&self) -> u64 {
        self.state.produce_requests.load(Ordering::Relaxed)
    }

    /// The high watermark of a partition (0 if nothing was written).
    pub fn end_offset(&self, topic: &str, partition: i32) -> i64 {
        let logs = self.state.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.get(&(topic.to_string(), partition))
            .map_or(0, |l| l.end)
    }

    /// Stops accepting connections (open ones end when their clients close them).
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one connection: requests are answered in order.
async fn serve(stream: TcpStream, state: Arc<State>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::with_capacity(256 << 10, r);
    loop {
        let mut prefix = [0u8; 4];
        r.read_exact(&mut prefix).await?;
        let size = read_frame_size(prefix, DEFAULT_MAX_FRAME_BYTES).map_err(invalid)?;
        let mut buf = BytesMut::zeroed(size);
        r.read_exact(&mut buf).await?;
        let (header, request) = decode_request(buf.freeze()).map_err(invalid)?;
        let version = header.api_version;
        let response = match request {
            Request::ApiVersions(_) => Response::ApiVersions(api_versions_response()),
            Request::Metadata(m) => Response::Metadata(metadata(&state, &m)),
            Request::Produce(p) => {
                let acks = p.acks;
                let delay = state.faults.produce_delay_us.load(Ordering::Relaxed);
                if delay > 0 {
                    tokio::time::sleep(std::time::Duration::from_micros(delay)).await;
                    // Bytes of a next request already here while this one is unanswered: the
                    // client had more than one request in flight.
                    let waiting =
                        tokio::time::timeout(std::time::Duration::from_millis(1), r.fill_buf())
                            .await;
                    if matches!(waiting, Ok(Ok(buf)) if !buf.is_empty()) {
                        state.pipelined_produces.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let resp = produce(&state, p);
                if acks == 0 {
                    continue;
                }
                Response::Produce(resp)
            }
            Request::Fetch(f) => Response::Fetch(fetch(&state, &f).await),
            Request::ListOffsets(l) => Response::ListOffsets(list_offsets(&state, &l)),
            Request::CreateTopics(c) => Response::CreateTopics(create_topics(&state, &c)),
            other => {
                return Err(invalid(format!(
                    "fake server does not serve {}",
                    other.api_key().name()
                )))
            }
        };
        let segments =
            encode_response(header.correlation_id, version, &response).map_err(invalid)?;
        write_segments(&mut w, &segments).await?;
    }
}

fn invalid(e: impl ToString) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

fn metadata(state: &State, m: &MetadataRequest) -> MetadataResponse {
    state.metadata_requests.fetch_add(1, Ordering::Relaxed);
    let names: Vec<String> = match &m.topics {
        Some(ts) => ts.iter().filter_map(|t| t.name.clone()).collect(),
        None => {
            let logs = state.logs.lock().unwrap_or_else(|p| p.into_inner());
            let mut n: Vec<String> = logs.keys().map(|(t, _)| t.clone()).collect();
            n.sort();
            n.dedup();
            n
        }
    };
    MetadataResponse {
        brokers: vec![MetadataResponseBroker {
            node_id: 0,
            host: state.host.clone(),
            port: state.port,
            ..Default::default()
        }],
        cluster_id: Some("vdl-perf-fake".into()),
        controller_id: 0,
        topics: names
            .into_iter()
            .map(|name| MetadataResponseTopic {
                name: Some(name),
                partitions: (0..state.partitions)
                    .map(|i| MetadataResponsePartition {
                        partition_index: i,
                        leader_id: 0,
                        leader_epoch: 0,
                        replica_nodes: vec![0],
                        isr_nodes: vec![0],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn produce(state: &State, p: ProduceRequest) -> ProduceResponse {
    state.produce_requests.fetch_add(1, Ordering::Relaxed);
    let not_leader = state
        .faults
        .not_leader_produces
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok();
    let mut responses = Vec::new();
    for t in p.topic_data {
        let mut partition_responses = Vec::new();
        for part in t.partition_data {
            let (error, base) = if not_leader {
                (ErrorCode::NotLeaderOrFollower, -1)
            } else if part.index < 0 || part.index >= state.partitions {
                (ErrorCode::UnknownTopicOrPartition, -1)
            } else {
                let data = part
                    .records
                    .as_ref()
                    .map(RecordChunks::to_contiguous)
                    .unwrap_or_default();
                append(state, &t.name, part.index, data)
            };
            partition_responses.push(PartitionProduceResponse {
                index: part.index,
                error_code: error.code(),
                base_offset: base,
                ..Default::default()
            });
        }
        responses.push(TopicProduceResponse {
            name: t.name,
            partition_responses,
            ..Default::default()
        });
    }
    state.appended.notify_waiters();
    ProduceResponse {
        responses,
        ..Default::default()
    }
}

/// Appends the batches of one partition's produce data; returns the error and base offset.
fn append(state: &State, topic: &str, partition: i32, data: Bytes) -> (ErrorCode, i64) {
    let mut batches = Vec::new();
    for b in split_batches(data) {
        match b {
            Ok(b) => batches.push(b),
            Err(_) => return (ErrorCode::CorruptMessage, -1),
        }
    }
    let mut logs = state.logs.lock().unwrap_or_else(|p| p.into_inner());
    let log = logs.entry((topic.to_string(), partition)).or_default();
    let skip = state.faults.skip_offset.load(Ordering::Relaxed);
    let mut first = None;
    for b in batches {
        let count = i64::from(b.last_offset_delta()) + 1;
        if skip >= log.end && skip < log.end + count {
            // Leave one offset unused before the batch that would have contained `skip`.
            log.end += 1;
            state.faults.skip_offset.store(-1, Ordering::Relaxed);
        }
        let mut owned = BytesMut::from(b.as_bytes().as_ref());
        if set_base_offset(&mut owned, log.end).is_err() {
            return (ErrorCode::CorruptMessage, -1);
        }
        first.get_or_insert(log.end);
        log.end += count;
        log.batches.push((log.end, owned.freeze()));
    }
    (ErrorCode::None, first.unwrap_or(log.end))
}

/// The batches from `offset` on, up to about `max_bytes` (at least one batch), and the end.
fn read(state: &State, topic: &str, partition: i32, offset: i64, max_bytes: usize) -> Read {
    let logs = state.logs.lock().unwrap_or_else(|p| p.into_inner());
    let Some(log) = logs.get(&(topic.to_string(), partition)) else {
        return if offset == 0 {
            Read::Data(Vec::new(), 0)
        } else {
            Read::OutOfRange
        };
    };
    if offset < 0 || offset > log.end {
        return Read::OutOfRange;
    }
    let from = log.batches.partition_point(|(next, _)| *next <= offset);
    let mut chunks = Vec::new();
    let mut size = 0;
    for (_, b) in log.batches.iter().skip(from) {
        if !chunks.is_empty() && size + b.len() > max_bytes {
            break;
        }
        size += b.len();
        chunks.push(b.clone());
    }
    Read::Data(chunks, log.end)
}

enum Read {
    Data(Vec<Bytes>, i64),
    OutOfRange,
}

async fn fetch(state: &State, f: &FetchRequest) -> FetchResponse {
    let wait = Duration::from_millis(u64::try_from(f.max_wait_ms).unwrap_or(0).min(1000));
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Register for appends before reading, so none is missed between the two.
        let appended = state.appended.notified();
        let mut any = false;
        let responses = f
            .topics
            .iter()
            .map(|t| FetchableTopicResponse {
                topic: t.topic.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let max = usize::try_from(p.partition_max_bytes).unwrap_or(0);
                        match read(state, &t.topic, p.partition, p.fetch_offset, max) {
                            Read::Data(chunks, end) => {
                                any |= !chunks.is_empty();
                                PartitionData {
                                    partition_index: p.partition,
                                    high_watermark: end,
                                    last_stable_offset: end,
                                    log_start_offset: 0,
                                    records: Some(RecordChunks::from_chunks(chunks)),
                                    ..Default::default()
                                }
                            }
                            Read::OutOfRange => PartitionData {
                                partition_index: p.partition,
                                error_code: ErrorCode::OffsetOutOfRange.code(),
                                high_watermark: -1,
                                records: Some(RecordChunks::default()),
                                ..Default::default()
                            },
                        }
                    })
                    .collect(),
                ..Default::default()
            })
            .collect();
        if any || tokio::time::Instant::now() >= deadline {
            return FetchResponse {
                responses,
                ..Default::default()
            };
        }
        let _ = tokio::time::timeout_at(deadline, appended).await;
    }
}

fn list_offsets(state: &State, l: &ListOffsetsRequest) -> ListOffsetsResponse {
    let logs = state.logs.lock().unwrap_or_else(|p| p.into_inner());
    ListOffsetsResponse {
        topics: l
            .topics
            .iter()
            .map(|t| ListOffsetsTopicResponse {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let end = logs
                            .get(&(t.name.clone(), p.partition_index))
                            .map_or(0, |l| l.end);
                        ListOffsetsPartitionResponse {
                            partition_index: p.partition_index,
                            timestamp: -1,
                            offset: if p.timestamp == -1 { end } else { 0 },
                            leader_epoch: 0,
                            ..Default::default()
                        }
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Every topic exists already with the server's partition count: a request for that count is
/// answered as created, any other count TOPIC_ALREADY_EXISTS (as Kafka answers for a topic
/// that exists).
fn create_topics(
    state: &State,
    c: &kafka_proto::messages::create_topics_request::CreateTopicsRequest,
) -> kafka_proto::messages::create_topics_response::CreateTopicsResponse {
    use kafka_proto::messages::create_topics_response::{
        CreatableTopicResult, CreateTopicsResponse,
    };
    CreateTopicsResponse {
        topics: c
            .topics
            .iter()
            .map(|t| CreatableTopicResult {
                name: t.name.clone(),
                error_code: if t.num_partitions == state.partitions {
                    0
                } else {
                    ErrorCode::TopicAlreadyExists.code()
                },
                num_partitions: state.partitions,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}
