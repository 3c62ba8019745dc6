//! Request builders and response readers for Produce, Fetch, ListOffsets, Metadata,
//! CreateTopics and ApiVersions, for one topic-partition (or one topic) at a time.

use bytes::Bytes;
use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::{Request, Response};
use kafka_proto::messages::api_versions_request::ApiVersionsRequest;
use kafka_proto::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_proto::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_proto::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_proto::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_proto::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_proto::RecordChunks;

use super::ClientError;

/// ListOffsets timestamp for the log start offset.
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// ListOffsets timestamp for the high watermark.
pub const LATEST_TIMESTAMP: i64 = -1;

/// A Produce request with one batch for one partition.
pub fn produce(topic: &str, partition: i32, acks: i16, timeout_ms: i32, batch: Bytes) -> Request {
    Request::Produce(ProduceRequest {
        acks,
        timeout_ms,
        topic_data: vec![TopicProduceData {
            name: topic.to_string(),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(RecordChunks::from(batch)),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// The partition's answer to a Produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceAck {
    /// The offset given to the batch's first record.
    pub base_offset: i64,
}

/// Reads the answer for `partition` from a Produce response; a partition error is
/// [`ClientError::Broker`].
pub fn produce_ack(response: Response, partition: i32) -> Result<ProduceAck, ClientError> {
    let Response::Produce(r) = response else {
        return Err(ClientError::Unexpected("not a Produce response".into()));
    };
    let p = r
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter())
        .find(|p| p.index == partition)
        .ok_or_else(|| ClientError::Unexpected("Produce response without our partition".into()))?;
    if p.error_code != 0 {
        return Err(ClientError::Broker {
            code: ErrorCode::from_code(p.error_code),
            what: "Produce",
        });
    }
    Ok(ProduceAck {
        base_offset: p.base_offset,
    })
}

/// What a Fetch request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchSpec {
    /// First offset wanted.
    pub offset: i64,
    /// `partition_max_bytes` (the consumer's `max.partition.fetch.bytes`, the old
    /// `fetch.message.max.bytes`).
    pub partition_max_bytes: i32,
    /// `max_wait_ms`: how long the broker may wait for `min_bytes`.
    pub max_wait_ms: i32,
    /// `min_bytes`.
    pub min_bytes: i32,
}

/// A full (sessionless) Fetch request for one partition.
pub fn fetch(topic: &str, partition: i32, spec: FetchSpec) -> Request {
    Request::Fetch(FetchRequest {
        replica_id: -1,
        max_wait_ms: spec.max_wait_ms,
        min_bytes: spec.min_bytes,
        max_bytes: spec.partition_max_bytes.max(1 << 20),
        isolation_level: 0,
        session_id: 0,
        session_epoch: -1,
        topics: vec![FetchTopic {
            topic: topic.to_string(),
            partitions: vec![FetchPartition {
                partition,
                current_leader_epoch: -1,
                fetch_offset: spec.offset,
                log_start_offset: -1,
                partition_max_bytes: spec.partition_max_bytes,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// The partition's part of a Fetch response.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchedData {
    /// The partition's high watermark.
    pub high_watermark: i64,
    /// The record batches (possibly ending in a partial batch), contiguous.
    pub records: Bytes,
}

/// Reads the data for `partition` from a Fetch response; a top-level or partition error is
/// [`ClientError::Broker`].
pub fn fetched(response: Response, partition: i32) -> Result<FetchedData, ClientError> {
    let Response::Fetch(r) = response else {
        return Err(ClientError::Unexpected("not a Fetch response".into()));
    };
    if r.error_code != 0 {
        return Err(ClientError::Broker {
            code: ErrorCode::from_code(r.error_code),
            what: "Fetch",
        });
    }
    let p = r
        .responses
        .into_iter()
        .flat_map(|t| t.partitions.into_iter())
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| ClientError::Unexpected("Fetch response without our partition".into()))?;
    if p.error_code != 0 {
        return Err(ClientError::Broker {
            code: ErrorCode::from_code(p.error_code),
            what: "Fetch",
        });
    }
    Ok(FetchedData {
        high_watermark: p.high_watermark,
        records: p.records.map(|r| r.to_contiguous()).unwrap_or_default(),
    })
}

/// A ListOffsets request for one partition at `timestamp` ([`EARLIEST_TIMESTAMP`],
/// [`LATEST_TIMESTAMP`]).
pub fn list_offsets(topic: &str, partition: i32, timestamp: i64) -> Request {
    Request::ListOffsets(ListOffsetsRequest {
        replica_id: -1,
        isolation_level: 0,
        topics: vec![ListOffsetsTopic {
            name: topic.to_string(),
            partitions: vec![ListOffsetsPartition {
                partition_index: partition,
                current_leader_epoch: -1,
                timestamp,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// Reads the offset for `partition` from a ListOffsets response.
pub fn listed_offset(response: Response, partition: i32) -> Result<i64, ClientError> {
    let Response::ListOffsets(r) = response else {
        return Err(ClientError::Unexpected("not a ListOffsets response".into()));
    };
    let p = r
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| {
            ClientError::Unexpected("ListOffsets response without our partition".into())
        })?;
    if p.error_code != 0 {
        return Err(ClientError::Broker {
            code: ErrorCode::from_code(p.error_code),
            what: "ListOffsets",
        });
    }
    Ok(p.offset)
}

/// A Metadata request for one topic (auto-creation allowed, as Kafka's clients ask).
pub fn metadata(topic: &str) -> Request {
    Request::Metadata(MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            name: Some(topic.to_string()),
            ..Default::default()
        }]),
        allow_auto_topic_creation: true,
        ..Default::default()
    })
}

/// A CreateTopics request for one topic of `partitions` partitions with the server's default
/// replication factor (-1, KIP-464) and the topic configs `configs` (name, value).
pub fn create_topic(
    topic: &str,
    partitions: i32,
    configs: &[(String, String)],
    timeout_ms: i32,
) -> Request {
    Request::CreateTopics(CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: topic.to_string(),
            num_partitions: partitions,
            replication_factor: -1,
            configs: configs
                .iter()
                .map(|(name, value)| CreatableTopicConfig {
                    name: name.clone(),
                    value: Some(value.clone()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        timeout_ms,
        ..Default::default()
    })
}

/// The outcome of [`create_topic`]: `Ok(true)` created, `Ok(false)` it existed already.
pub fn created(response: Response, topic: &str) -> Result<bool, ClientError> {
    let Response::CreateTopics(r) = response else {
        return Err(ClientError::Unexpected(
            "not a CreateTopics response".into(),
        ));
    };
    let t = r.topics.iter().find(|t| t.name == topic).ok_or_else(|| {
        ClientError::Unexpected(format!("CreateTopics did not answer for {topic}"))
    })?;
    match ErrorCode::from_code(t.error_code) {
        ErrorCode::None => Ok(true),
        ErrorCode::TopicAlreadyExists => Ok(false),
        code => Err(ClientError::Broker {
            code,
            what: "CreateTopics",
        }),
    }
}

/// An ApiVersions request (the cheapest request there is; used to measure the round trip).
pub fn api_versions() -> Request {
    Request::ApiVersions(ApiVersionsRequest {
        client_software_name: "vdl-perf".into(),
        client_software_version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_topic_carries_the_topic_configs() {
        let configs = [("cleanup.policy".to_string(), "compact".to_string())];
        let Request::CreateTopics(r) = create_topic("C", 1, &configs, 5000) else {
            panic!("not CreateTopics")
        };
        let t = &r.topics[0];
        assert_eq!(
            (t.name.as_str(), t.num_partitions, t.replication_factor),
            ("C", 1, -1)
        );
        assert_eq!(t.configs.len(), 1);
        assert_eq!(t.configs[0].name, "cleanup.policy");
        assert_eq!(t.configs[0].value.as_deref(), Some("compact"));
        let Request::CreateTopics(r) = create_topic("D", 8, &[], 5000) else {
            panic!("not CreateTopics")
        };
        assert!(r.topics[0].configs.is_empty());
    }
}
