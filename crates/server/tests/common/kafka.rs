//! A small blocking Kafka client on `kafka-proto` for tests that must check exact error codes
//! and offsets: produce, fetch, list offsets, metadata, create/delete topics, standalone offset
//! commits. Every call is bounded by socket timeouts.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_proto::api::ApiKey;
use kafka_proto::frame::{decode_response, encode_request, Request, Response};
use kafka_proto::header::RequestHeader;
use kafka_proto::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_proto::messages::delete_topics_request::DeleteTopicsRequest;
use kafka_proto::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_proto::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_proto::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_proto::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestTopic};
use kafka_proto::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_proto::RecordChunks;

/// Kafka error codes the tests look for.
pub const NONE: i16 = 0;
/// UNKNOWN_TOPIC_OR_PARTITION.
pub const UNKNOWN_TOPIC: i16 = 3;
/// NOT_LEADER_OR_FOLLOWER.
pub const NOT_LEADER: i16 = 6;

/// A partition as Metadata reports it: (partition index, leader id, error code).
pub type PartitionLeader = (i32, i32, i16);

/// A partition as Metadata v12 reports it, in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition index.
    pub index: i32,
    /// Leader id (-1: none).
    pub leader: i32,
    /// The partition's error code.
    pub error: i16,
    /// Replica ids, preferred leader first.
    pub replicas: Vec<i32>,
    /// In-sync replica ids.
    pub isr: Vec<i32>,
}

/// One connection to one broker.
pub struct KafkaConn {
    sock: TcpStream,
    next_cid: i32,
}

impl KafkaConn {
    /// Connects (2 s deadline); reads and writes time out after 15 s.
    pub fn connect(addr: SocketAddr) -> std::io::Result<KafkaConn> {
        let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        sock.set_read_timeout(Some(Duration::from_secs(15)))?;
        sock.set_write_timeout(Some(Duration::from_secs(15)))?;
        sock.set_nodelay(true)?;
        Ok(KafkaConn { sock, next_cid: 1 })
    }

    /// Wraps a connected socket.
    pub fn from_stream(sock: TcpStream) -> std::io::Result<KafkaConn> {
        sock.set_read_timeout(Some(Duration::from_secs(15)))?;
        sock.set_write_timeout(Some(Duration::from_secs(15)))?;
        Ok(KafkaConn { sock, next_cid: 1 })
    }

    /// Sends one request and reads its response.
    pub fn call(&mut self, api: ApiKey, version: i16, req: &Request) -> std::io::Result<Response> {
        let cid = self.next_cid;
        self.next_cid += 1;
        let header = RequestHeader {
            api_key: api as i16,
            api_version: version,
            correlation_id: cid,
            client_id: Some("vdl-test".into()),
            ..Default::default()
        };
        let frame = encode_request(&header, req).map_err(std::io::Error::other)?;
        for seg in frame {
            self.sock.write_all(&seg)?;
        }
        let mut len = [0u8; 4];
        self.sock.read_exact(&mut len)?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        self.sock.read_exact(&mut body)?;
        let (_, resp) = decode_response(api, version, Bytes::from(body))
            .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        Ok(resp)
    }

    /// Produce v9 with acks=all of `records` to partition 0: (error code, base offset).
    pub fn produce(&mut self, topic: &str, records: Bytes) -> std::io::Result<(i16, i64)> {
        self.produce_to(topic, 0, records)
    }

    /// Produce v9 with acks=all of `records` to `partition`: (error code, base offset).
    pub fn produce_to(
        &mut self,
        topic: &str,
        partition: i32,
        records: Bytes,
    ) -> std::io::Result<(i16, i64)> {
        let req = Request::Produce(ProduceRequest {
            acks: -1,
            timeout_ms: 10_000,
            topic_data: vec![TopicProduceData {
                name: topic.into(),
                partition_data: vec![PartitionProduceData {
                    index: partition,
                    records: Some(RecordChunks::from(records)),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        match self.call(ApiKey::Produce, 9, &req)? {
            Response::Produce(r) => {
                let p = &r.responses[0].partition_responses[0];
                Ok((p.error_code, p.base_offset))
            }
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// InitProducerId v4 without a transactional id: (error code, producer id).
    pub fn init_producer_id(&mut self) -> std::io::Result<(i16, i64)> {
        let req = Request::InitProducerId(
            kafka_proto::messages::init_producer_id_request::InitProducerIdRequest {
                transactional_id: None,
                transaction_timeout_ms: 60_000,
                producer_id: -1,
                producer_epoch: -1,
                ..Default::default()
            },
        );
        match self.call(ApiKey::InitProducerId, 4, &req)? {
            Response::InitProducerId(r) => Ok((r.error_code, r.producer_id)),
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// ListOffsets v7 of partition 0 at `timestamp` (-2 earliest, -1 latest): (error code,
    /// offset).
    pub fn list_offset(&mut self, topic: &str, timestamp: i64) -> std::io::Result<(i16, i64)> {
        self.list_offset_of(topic, 0, timestamp)
    }

    /// ListOffsets v7 of `partition` at `timestamp`: (error code, offset).
    pub fn list_offset_of(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> std::io::Result<(i16, i64)> {
        let req = Request::ListOffsets(ListOffsetsRequest {
            replica_id: -1,
            topics: vec![ListOffsetsTopic {
                name: topic.into(),
                partitions: vec![ListOffsetsPartition {
                    partition_index: partition,
                    current_leader_epoch: -1,
                    timestamp,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        match self.call(ApiKey::ListOffsets, 7, &req)? {
            Response::ListOffsets(r) => {
                let p = &r.topics[0].partitions[0];
                Ok((p.error_code, p.offset))
            }
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// Fetch v12 of partition 0 from `offset` (no wait): (error code, high watermark, log
    /// start offset, record bytes).
    pub fn fetch(&mut self, topic: &str, offset: i64) -> std::io::Result<(i16, i64, i64, Bytes)> {
        self.fetch_v12(topic, 0, offset, 4 << 20, 1 << 20)
    }

    /// One Fetch v12 of one partition (no wait, at most `max_bytes` in all and
    /// `partition_max_bytes` of the partition): (error code, high watermark, log start offset,
    /// record bytes).
    fn fetch_v12(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
        partition_max_bytes: i32,
    ) -> std::io::Result<(i16, i64, i64, Bytes)> {
        let mut fetch = super::requests::fetch_one(topic, partition, offset, max_bytes);
        fetch.topics[0].partitions[0].partition_max_bytes = partition_max_bytes;
        let req = Request::Fetch(fetch);
        match self.call(ApiKey::Fetch, 12, &req)? {
            Response::Fetch(r) => {
                let p = &r.responses[0].partitions[0];
                let records = p
                    .records
                    .as_ref()
                    .map(|c| c.to_contiguous())
                    .unwrap_or_default();
                Ok((p.error_code, p.high_watermark, p.log_start_offset, records))
            }
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// Metadata v12 for `topic` (no auto-creation): the topic's error and (partition index,
    /// leader id, partition error) per partition, in the order answered.
    pub fn partition_leaders(
        &mut self,
        topic: &str,
    ) -> std::io::Result<(i16, Vec<PartitionLeader>)> {
        let req = Request::Metadata(MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                name: Some(topic.into()),
                ..Default::default()
            }]),
            allow_auto_topic_creation: false,
            ..Default::default()
        });
        match self.call(ApiKey::Metadata, 12, &req)? {
            Response::Metadata(r) => {
                let t = &r.topics[0];
                let parts = t
                    .partitions
                    .iter()
                    .map(|p| (p.partition_index, p.leader_id, p.error_code))
                    .collect();
                Ok((t.error_code, parts))
            }
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// Metadata v12 for `topic` (no auto-creation): the topic's error code and every partition
    /// in full, sorted by index.
    pub fn partition_infos(&mut self, topic: &str) -> std::io::Result<(i16, Vec<PartitionInfo>)> {
        let req = Request::Metadata(MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                name: Some(topic.into()),
                ..Default::default()
            }]),
            allow_auto_topic_creation: false,
            ..Default::default()
        });
        match self.call(ApiKey::Metadata, 12, &req)? {
            Response::Metadata(r) => {
                let t = &r.topics[0];
                let mut parts: Vec<PartitionInfo> = t
                    .partitions
                    .iter()
                    .map(|p| PartitionInfo {
                        index: p.partition_index,
                        leader: p.leader_id,
                        error: p.error_code,
                        replicas: p.replica_nodes.clone(),
                        isr: p.isr_nodes.clone(),
                    })
                    .collect();
                parts.sort_by_key(|p| p.index);
                Ok((t.error_code, parts))
            }
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// CreateTopics v7 with `partitions` partitions and `replication_factor` replicas each (-1:
    /// the broker's defaults): (error code, partitions answered, replication factor answered).
    pub fn create_topic_replicated(
        &mut self,
        topic: &str,
        partitions: i32,
        replication_factor: i16,
    ) -> std::io::Result<(i16, i32, i16)> {
        let req = Request::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: topic.into(),
                num_partitions: partitions,
                replication_factor,
                ..Default::default()
            }],
            timeout_ms: 15_000,
            ..Default::default()
        });
        match self.call(ApiKey::CreateTopics, 7, &req)? {
            Response::CreateTopics(r) => {
                let t = &r.topics[0];
                Ok((t.error_code, t.num_partitions, t.replication_factor))
            }
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// Fetch v12 of `partition` from `offset` (no wait): (error code, high watermark, record
    /// bytes).
    pub fn fetch_partition(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> std::io::Result<(i16, i64, Bytes)> {
        self.fetch_v12(topic, partition, offset, 16 << 20, 8 << 20)
            .map(|(error, hw, _, records)| (error, hw, records))
    }

    /// CreateTopics v7 of `topic`, one partition on three replicas, with `configs` (name,
    /// value): the topic's error code and error message.
    pub fn create_topic_configured(
        &mut self,
        topic: &str,
        configs: &[(&str, &str)],
    ) -> std::io::Result<(i16, Option<String>)> {
        let req = Request::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: topic.into(),
                num_partitions: 1,
                replication_factor: 3,
                configs: configs
                    .iter()
                    .map(|(k, v)| CreatableTopicConfig {
                        name: k.to_string(),
                        value: Some(v.to_string()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            timeout_ms: 15_000,
            ..Default::default()
        });
        match self.call(ApiKey::CreateTopics, 7, &req)? {
            Response::CreateTopics(r) => {
                Ok((r.topics[0].error_code, r.topics[0].error_message.clone()))
            }
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// CreateTopics v7 with `partitions` partitions (-1: the broker's default): the topic's
    /// error code and the partition count answered.
    pub fn create_topic_with(
        &mut self,
        topic: &str,
        partitions: i32,
    ) -> std::io::Result<(i16, i32)> {
        let req = Request::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: topic.into(),
                num_partitions: partitions,
                replication_factor: -1,
                ..Default::default()
            }],
            timeout_ms: 15_000,
            ..Default::default()
        });
        match self.call(ApiKey::CreateTopics, 7, &req)? {
            Response::CreateTopics(r) => Ok((r.topics[0].error_code, r.topics[0].num_partitions)),
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// CreatePartitions v3 growing `topic` to `count`: (error code, error message).
    pub fn create_partitions(
        &mut self,
        topic: &str,
        count: i32,
        validate_only: bool,
    ) -> std::io::Result<(i16, Option<String>)> {
        use kafka_proto::messages::create_partitions_request::{
            CreatePartitionsRequest, CreatePartitionsTopic,
        };
        let req = Request::CreatePartitions(CreatePartitionsRequest {
            topics: vec![CreatePartitionsTopic {
                name: topic.into(),
                count,
                assignments: None,
                ..Default::default()
            }],
            timeout_ms: 15_000,
            validate_only,
            ..Default::default()
        });
        match self.call(ApiKey::CreatePartitions, 3, &req)? {
            Response::CreatePartitions(r) => {
                Ok((r.results[0].error_code, r.results[0].error_message.clone()))
            }
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// Metadata v12 for `topic` (no auto-creation): (topic error, leader id, broker count).
    pub fn metadata(&mut self, topic: &str) -> std::io::Result<(i16, i32, usize)> {
        let req = Request::Metadata(MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                name: Some(topic.into()),
                ..Default::default()
            }]),
            allow_auto_topic_creation: false,
            ..Default::default()
        });
        match self.call(ApiKey::Metadata, 12, &req)? {
            Response::Metadata(r) => {
                let t = &r.topics[0];
                let leader = t.partitions.first().map(|p| p.leader_id).unwrap_or(-1);
                Ok((t.error_code, leader, r.brokers.len()))
            }
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// CreateTopics v7, one partition: the topic's error code.
    pub fn create_topic(&mut self, topic: &str) -> std::io::Result<i16> {
        let req = Request::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: topic.into(),
                num_partitions: 1,
                replication_factor: -1,
                ..Default::default()
            }],
            timeout_ms: 15_000,
            ..Default::default()
        });
        match self.call(ApiKey::CreateTopics, 7, &req)? {
            Response::CreateTopics(r) => Ok(r.topics[0].error_code),
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// DeleteTopics v5 by name: the topic's error code.
    pub fn delete_topic(&mut self, topic: &str) -> std::io::Result<i16> {
        let req = Request::DeleteTopics(DeleteTopicsRequest {
            topic_names: vec![topic.into()],
            timeout_ms: 15_000,
            ..Default::default()
        });
        match self.call(ApiKey::DeleteTopics, 5, &req)? {
            Response::DeleteTopics(r) => Ok(r.responses[0].error_code),
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// A standalone OffsetCommit v8 (no member, generation -1) of partition 0: its error code.
    pub fn commit_offset(&mut self, group: &str, topic: &str, offset: i64) -> std::io::Result<i16> {
        self.commit_offset_of(group, topic, 0, offset)
    }

    /// A standalone OffsetCommit v8 of `partition`: its error code.
    pub fn commit_offset_of(
        &mut self,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> std::io::Result<i16> {
        let req = Request::OffsetCommit(OffsetCommitRequest {
            group_id: group.into(),
            generation_id_or_member_epoch: -1,
            member_id: String::new(),
            retention_time_ms: -1,
            topics: vec![OffsetCommitRequestTopic {
                name: topic.into(),
                partitions: vec![OffsetCommitRequestPartition {
                    partition_index: partition,
                    committed_offset: offset,
                    committed_leader_epoch: -1,
                    commit_timestamp: -1,
                    committed_metadata: None,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        match self.call(ApiKey::OffsetCommit, 8, &req)? {
            Response::OffsetCommit(r) => Ok(r.topics[0].partitions[0].error_code),
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }

    /// OffsetFetch v7 of partition 0: (error code, committed offset or -1).
    pub fn fetch_offset(&mut self, group: &str, topic: &str) -> std::io::Result<(i16, i64)> {
        let req = Request::OffsetFetch(OffsetFetchRequest {
            group_id: group.into(),
            topics: Some(vec![OffsetFetchRequestTopic {
                name: topic.into(),
                partition_indexes: vec![0],
                ..Default::default()
            }]),
            ..Default::default()
        });
        match self.call(ApiKey::OffsetFetch, 7, &req)? {
            Response::OffsetFetch(r) => {
                if r.error_code != 0 {
                    return Ok((r.error_code, -1));
                }
                let p = &r.topics[0].partitions[0];
                Ok((p.error_code, p.committed_offset))
            }
            other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
        }
    }
}

/// Calls `f` on each broker in turn until one answers with error 0, for up to `timeout`;
/// returns that answer, or panics with each broker's last answer.
pub fn on_any<T: std::fmt::Debug>(
    brokers: &[SocketAddr],
    timeout: Duration,
    what: &str,
    mut f: impl FnMut(&mut KafkaConn) -> std::io::Result<(i16, T)>,
) -> T {
    let deadline = Instant::now() + timeout;
    let mut last = std::collections::BTreeMap::new();
    while Instant::now() < deadline {
        for addr in brokers {
            let answer = match KafkaConn::connect(*addr).and_then(|mut c| f(&mut c)) {
                Ok((0, v)) => return v,
                Ok((code, v)) => format!("error {code} ({v:?})"),
                Err(e) => e.to_string(),
            };
            last.insert(*addr, answer);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: no broker answered without error within {timeout:?}; last answers: {last:?}");
}
