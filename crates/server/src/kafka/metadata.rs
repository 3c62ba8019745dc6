//! Metadata and ListOffsets: where each topic lives, and its offsets.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kafka_proto::frame::Response;

use crate::config::valid_stream_name;
use crate::kafka::access::{
    Access, CLUSTER_OPERATIONS, OPERATIONS_NOT_REQUESTED, TOPIC_OPERATIONS,
};
use crate::kafka::fields::split_host_port;
use crate::kafka::host::{MetadataApiHost, NodeView};
use crate::kafka::reply::{self, Reply};
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_RESOURCE_NAME};

use kafka_proto::error_code::ErrorCode;
use kafka_proto::messages::list_offsets_request::ListOffsetsRequest;
use kafka_proto::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use kafka_proto::messages::metadata_request::MetadataRequest;
use kafka_proto::messages::metadata_response::{
    MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_proto::Uuid;

use crate::replication::stream::LogStream;

pub use crate::metadata::topic_ids::topic_id;

/// The id of the topic served as `stream`.
pub fn stream_topic_id(stream: &LogStream) -> Uuid {
    topic_id(stream.name(), stream.incarnation())
}

/// The id of topic `name` as the cluster knows it now (the zero UUID when it is not a topic).
pub fn topic_id_of<N: NodeView + ?Sized>(node: &N, name: &str) -> Uuid {
    node.topic_incarnation(name)
        .map(|i| topic_id(name, i))
        .unwrap_or(Uuid::ZERO)
}

/// Where a partition a Kafka request names lives, as this node sees it.
pub enum PartitionHome {
    /// This node is one of its replicas: its stream.
    Here(LogStream),
    /// The partition exists but this node holds no replica of it: requests that need the
    /// leader get NOT_LEADER_OR_FOLLOWER (the client refreshes its metadata).
    Elsewhere,
    /// No such topic or partition.
    Unknown,
}

/// Partition `index` (as a Kafka request names it) of topic `name`.
pub fn locate_partition<N: NodeView + ?Sized>(node: &N, name: &str, index: i32) -> PartitionHome {
    let Ok(partition) = u32::try_from(index) else {
        return PartitionHome::Unknown;
    };
    if let Some(stream) = node.partition(name, partition) {
        return PartitionHome::Here(stream);
    }
    match node.topic_layout(name) {
        Some(l) if (partition as usize) < l.replicas.len() => PartitionHome::Elsewhere,
        _ => PartitionHome::Unknown,
    }
}

/// The name of the topic with id `id`, if it exists ([`NodeView::topic_name_by_id`]: one
/// hash look-up on a node).
pub fn topic_name_by_id<N: NodeView + ?Sized>(node: &N, id: Uuid) -> Option<String> {
    if id.is_zero() {
        return None;
    }
    node.topic_name_by_id(id)
}

/// The cluster id Metadata reports: stable for a given set of members.
pub fn cluster_id(config: &crate::config::NodeConfig) -> String {
    let ids: Vec<String> = config.member_ids().iter().map(u64::to_string).collect();
    format!("vdl-{}", ids.join("-"))
}

fn as_i32(id: u64) -> i32 {
    i32::try_from(id).unwrap_or(-1)
}

/// A topic's partitions with their leader, replicas and in-sync replicas: every partition,
/// whether this node hosts it or not.
fn topic_metadata<N: NodeView + ?Sized>(node: &N, name: &str) -> MetadataResponseTopic {
    let Some(layout) = node.topic_layout(name) else {
        return MetadataResponseTopic {
            error_code: ErrorCode::UnknownTopicOrPartition.code(),
            name: Some(name.to_owned()),
            ..Default::default()
        };
    };
    let live: Vec<i32> = node
        .live_brokers()
        .into_iter()
        .map(|(id, _)| as_i32(id))
        .collect();
    MetadataResponseTopic {
        error_code: 0,
        name: Some(name.to_owned()),
        topic_id: topic_id(name, layout.incarnation),
        is_internal: false,
        partitions: (0u32..)
            .zip(&layout.replicas)
            .map(|(p, replicas)| {
                let replicas: Vec<i32> = replicas.iter().copied().map(as_i32).collect();
                match node
                    .partition(name, p)
                    .filter(|s| s.incarnation() == layout.incarnation)
                {
                    Some(stream) => partition_metadata(node, &stream, &replicas, &live),
                    None => remote_partition_metadata(
                        node,
                        name,
                        layout.incarnation,
                        p,
                        &replicas,
                        &live,
                    ),
                }
            })
            .collect(),
        ..Default::default()
    }
}

/// A partition this node holds no replica of: its leader as the leaders report it (see
/// [`crate::replication::leaders`]), if that node is connected now; the live replicas as in-sync
/// replicas.
fn remote_partition_metadata<N: NodeView + ?Sized>(
    node: &N,
    name: &str,
    incarnation: u64,
    partition: u32,
    replicas: &[i32],
    live: &[i32],
) -> MetadataResponsePartition {
    let reported = node
        .reported_leader(name, incarnation, partition)
        .filter(|(leader, _)| live.contains(&as_i32(*leader)));
    let (error, leader, epoch) = match reported {
        Some((leader, term)) => (
            ErrorCode::None,
            as_i32(leader),
            i32::try_from(term).unwrap_or(i32::MAX),
        ),
        None => (ErrorCode::LeaderNotAvailable, -1, -1),
    };
    MetadataResponsePartition {
        error_code: error.code(),
        partition_index: i32::try_from(partition).unwrap_or(i32::MAX),
        leader_id: leader,
        leader_epoch: epoch,
        replica_nodes: replicas.to_vec(),
        isr_nodes: live_replicas(replicas, live, true),
        offline_replicas: live_replicas(replicas, live, false),
        ..Default::default()
    }
}

/// The replicas that are (`live` true) or are not (false) among the `live` brokers, in order.
fn live_replicas(replicas: &[i32], live: &[i32], is_live: bool) -> Vec<i32> {
    replicas
        .iter()
        .copied()
        .filter(|r| live.contains(r) == is_live)
        .collect()
}

/// The leader Metadata names for a partition this node is a replica of: the one its replica
/// follows; while an election or a leader transfer is under way (no leader known), the last
/// one it followed; on a replica that has followed none yet (just started), the one the
/// leaders' reports name. As in Kafka, whose metadata names a partition's leader until the
/// next one replaces it and never "none" in between: clients find out from the old leader
/// (NOT_LEADER_OR_FOLLOWER) and ask again, whereas librdkafka keeps a partition answered
/// without a leader as it is until its metadata expires (its watermark query fails with
/// "Unknown partition" meanwhile). A leader this node is not connected to (killed, until the
/// election notices) is not named: clients retry instead of connecting to a dead node.
fn named_leader<N: NodeView + ?Sized>(
    node: &N,
    stream: &LogStream,
    v: &crate::Visible,
    live: &[i32],
) -> Option<i32> {
    let known = [v.leader, v.last_leader]
        .into_iter()
        .find(|id| *id != 0)
        .or_else(|| {
            node.reported_leader(stream.name(), stream.incarnation(), stream.partition())
                .map(|(leader, _)| leader)
        })?;
    Some(as_i32(known)).filter(|id| live.contains(id))
}

/// One partition's leader, replicas and in-sync replicas as this node, one of its replicas,
/// sees them.
fn partition_metadata<N: NodeView + ?Sized>(
    node: &N,
    stream: &LogStream,
    replicas: &[i32],
    live: &[i32],
) -> MetadataResponsePartition {
    let v = stream.visible();
    let (error, leader) = match named_leader(node, stream, &v, live) {
        Some(leader) => (ErrorCode::None, leader),
        None => (ErrorCode::LeaderNotAvailable, -1),
    };
    MetadataResponsePartition {
        error_code: error.code(),
        partition_index: i32::try_from(stream.partition()).unwrap_or(i32::MAX),
        leader_id: leader,
        leader_epoch: i32::try_from(v.term).unwrap_or(i32::MAX),
        replica_nodes: replicas.to_vec(),
        // The leader knows which voters are caught up; elsewhere, the live replicas.
        isr_nodes: if v.leader == node.config().id {
            v.in_sync
                .iter()
                .filter(|id| **id != 0)
                .map(|id| as_i32(*id))
                .collect()
        } else {
            live_replicas(replicas, live, true)
        },
        offline_replicas: live_replicas(replicas, live, false),
        ..Default::default()
    }
}

/// Handles Metadata: once this node has caught up with the cluster (see [`catch_up_then`]),
/// creates the unknown topics asked for first when both the client and the server allow it
/// (`auto_create_topics`), then answers with the brokers' addresses on the listener `listener`
/// (the one the client connected to).
pub fn handle<H: MetadataApiHost>(
    node: &Arc<H>,
    access: &Access,
    req: MetadataRequest,
    version: i16,
    correlation_id: i32,
    listener: &str,
) -> Reply {
    if node.caught_up() {
        let (refused, to_create) = plan(node.as_ref(), access, &req);
        if to_create.is_empty() {
            return reply::now(
                correlation_id,
                version,
                Response::Metadata(metadata(
                    node.as_ref(),
                    access,
                    &req,
                    version,
                    &refused,
                    listener,
                )),
            );
        }
    }
    let node = node.clone();
    let access = access.clone();
    let listener = listener.to_string();
    reply::later(correlation_id, version, async move {
        catch_up_then(node.as_ref()).await;
        let (refused, to_create) = plan(node.as_ref(), &access, &req);
        for name in to_create {
            let partitions = node.config().kafka.num_partitions;
            if let Err(e) = node
                .create_topic(&name, partitions, AUTO_CREATE_TIMEOUT)
                .await
            {
                tracing::warn!(topic = %name, "auto-creating a topic failed: {e}");
            }
        }
        Response::Metadata(metadata(
            node.as_ref(),
            &access,
            &req,
            version,
            &refused,
            &listener,
        ))
    })
}

/// Waits, at most [`CATCH_UP_WAIT`], until this node has caught up with the cluster
/// ([`MetadataApiHost::caught_up`]): after a start, a node has replayed its own metadata log but may not
/// have applied everything the cluster had committed, and would answer a topic unknown, or
/// without the partitions a later change added, that the cluster has; and a replica here that
/// has not heard from its leader yet has no leader to name until the leaders' reports are in.
/// librdkafka keeps such an answer until its metadata expires. A Kafka broker does not serve
/// clients until it has caught up on the metadata log. Past the wait (no quorum reachable,
/// say) the node answers with what it has.
async fn catch_up_then<H: MetadataApiHost>(node: &H) {
    if !node.wait_for_catch_up(CATCH_UP_WAIT).await {
        tracing::warn!(
            "answering Metadata before this node caught up with the cluster (not within {CATCH_UP_WAIT:?})"
        );
    }
}

/// Longest a Metadata request waits for this node to catch up with the cluster.
const CATCH_UP_WAIT: Duration = Duration::from_secs(5);

/// Which topics named in `req` are refused, and which unknown ones to auto-create first.
/// Kafka's rules: a topic named in the request that the principal may not DESCRIBE is answered
/// TOPIC_AUTHORIZATION_FAILED (and not created); auto-creating one needs CREATE on the cluster
/// or on the topic (else TOPIC_AUTHORIZATION_FAILED).
fn plan<N: NodeView + ?Sized>(
    node: &N,
    access: &Access,
    req: &MetadataRequest,
) -> (HashSet<String>, Vec<String>) {
    let mut refused: HashSet<String> = HashSet::new();
    let mut to_create: Vec<String> = Vec::new();
    let auto_create = req.allow_auto_topic_creation && node.config().kafka.auto_create_topics;
    if let Some(list) = &req.topics {
        let may_create_any = || access.cluster(AclOperation::Create);
        for name in list.iter().filter_map(|t| t.name.clone()) {
            if !access.topic(AclOperation::Describe, &name) {
                refused.insert(name);
                continue;
            }
            if !auto_create || node.is_topic(&name) {
                continue;
            }
            if !valid_stream_name(&name) || name.starts_with("__") {
                continue;
            }
            if may_create_any() || access.topic(AclOperation::Create, &name) {
                to_create.push(name);
            } else {
                refused.insert(name);
            }
        }
    }
    (refused, to_create)
}

/// How long a Metadata request waits for the topics it auto-creates.
const AUTO_CREATE_TIMEOUT: Duration = Duration::from_secs(5);

/// Answers Metadata: every live broker with its address on listener `listener`, and the
/// requested topics (all when the list is null) with their leader, replicas and in-sync
/// replicas. Topics in `refused` answer TOPIC_AUTHORIZATION_FAILED; of all topics, only those
/// the principal may DESCRIBE are listed (Kafka leaves the others out).
pub fn metadata<N: NodeView + ?Sized>(
    node: &N,
    access: &Access,
    req: &MetadataRequest,
    _version: i16,
    refused: &HashSet<String>,
    listener: &str,
) -> MetadataResponse {
    let brokers = node
        .live_brokers_on(listener)
        .into_iter()
        .map(|(id, addr)| {
            let (host, port) = split_host_port(&addr);
            MetadataResponseBroker {
                node_id: as_i32(id),
                host,
                port,
                rack: None,
                ..Default::default()
            }
        })
        .collect();
    let mut topics: Vec<MetadataResponseTopic> = match &req.topics {
        None => node
            .topic_names()
            .into_iter()
            .filter(|n| access.topic(AclOperation::Describe, n))
            .map(|n| topic_metadata(node, &n))
            .collect(),
        Some(list) => list
            .iter()
            .map(|t| {
                let name = match &t.name {
                    Some(n) => n.clone(),
                    None => topic_name_by_id(node, t.topic_id).unwrap_or_default(),
                };
                if refused.contains(&name)
                    || (t.name.is_none() && !access.topic(AclOperation::Describe, &name))
                {
                    return MetadataResponseTopic {
                        error_code: ErrorCode::TopicAuthorizationFailed.code(),
                        name: t.name.clone(),
                        topic_id: t.topic_id,
                        ..Default::default()
                    };
                }
                let mut m = topic_metadata(node, &name);
                m.topic_id = if m.error_code == 0 {
                    topic_id_of(node, &name)
                } else {
                    t.topic_id
                };
                m
            })
            .collect(),
    };
    if req.include_topic_authorized_operations {
        for t in topics.iter_mut().filter(|t| t.error_code == 0) {
            if let Some(name) = &t.name {
                t.topic_authorized_operations =
                    access.operations(ResourceType::Topic, name, TOPIC_OPERATIONS);
            }
        }
    }
    let cluster_authorized_operations = if req.include_cluster_authorized_operations {
        access.operations(
            ResourceType::Cluster,
            CLUSTER_RESOURCE_NAME,
            CLUSTER_OPERATIONS,
        )
    } else {
        OPERATIONS_NOT_REQUESTED
    };
    MetadataResponse {
        brokers,
        cluster_id: Some(cluster_id(node.config())),
        controller_id: as_i32(node.config().member_ids().first().copied().unwrap_or(0)),
        topics,
        cluster_authorized_operations,
        ..Default::default()
    }
}

/// Kafka's special ListOffsets timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
/// ListOffsets' isolation_level asking for committed transactions only.
const READ_COMMITTED: i8 = 1;

/// Largest decompressed batch examined by a ListOffsets by time.
const MAX_DECOMPRESSED_FOR_LOOKUP: usize = 64 << 20;
/// Bytes read per step while a ListOffsets by time looks for its record.
const LOOKUP_READ_BYTES: u64 = 1 << 20;
/// Steps of [`LOOKUP_READ_BYTES`] a ListOffsets by time reads at most past the batch the store
/// found (the store finds the first batch late enough; records inside it are exact).
const LOOKUP_MAX_STEPS: usize = 64;

/// Kafka's ListOffsets by time, exact to the record: the offset and timestamp of the first
/// record at or after the log start offset, below the high watermark, whose timestamp is at or
/// after `ts`. The store finds the first batch whose max timestamp is late enough; its records
/// are read (decompressed when compressed) to find the record. A LogAppendTime batch's records
/// all carry its max timestamp.
fn offset_for_timestamp(stream: &LogStream, ts: i64, v: &crate::Visible) -> Option<(u64, i64)> {
    let floor = v.log_start_offset;
    let mut from = stream.offset_for_timestamp(ts).ok()??.max(floor);
    for _ in 0..LOOKUP_MAX_STEPS {
        if from >= v.high_watermark {
            return None;
        }
        let read = stream.read(from, LOOKUP_READ_BYTES).ok()?;
        if read.chunks.is_empty() {
            return None;
        }
        for chunk in read.chunks {
            for batch in kafka_proto::records::split_batches(chunk) {
                let batch = batch.ok()?;
                if batch.max_timestamp() < ts || (batch.next_offset() as u64) <= floor {
                    continue;
                }
                if batch.timestamp_type() == kafka_proto::records::TimestampType::LogAppendTime {
                    return Some((
                        (batch.base_offset() as u64).max(floor),
                        batch.max_timestamp(),
                    ));
                }
                let records = batch.record_summaries(MAX_DECOMPRESSED_FOR_LOOKUP).ok()?;
                for r in records {
                    let r = r.ok()?;
                    let at = batch.base_timestamp().saturating_add(r.timestamp_delta);
                    if r.offset >= 0 && r.offset as u64 >= floor && at >= ts {
                        return Some((r.offset as u64, at));
                    }
                }
            }
        }
        from = read.next_offset;
    }
    None
}

/// Answers ListOffsets: earliest (log start), latest (high watermark; the last stable offset
/// with isolation_level READ_COMMITTED, v2+), the offset of the last
/// batch's max timestamp (-3, approximated by the last committed offset), or the first record
/// whose timestamp is at or after the one asked for, with that timestamp.
pub fn list_offsets<N: NodeView + ?Sized>(
    node: &N,
    access: &Access,
    req: &ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| ListOffsetsTopicResponse {
            name: t.name.clone(),
            partitions: t
                .partitions
                .iter()
                .map(|p| {
                    let mut r = ListOffsetsPartitionResponse {
                        partition_index: p.partition_index,
                        ..Default::default()
                    };
                    // Kafka: DESCRIBE on the topic.
                    if !access.topic(AclOperation::Describe, &t.name) {
                        r.error_code = ErrorCode::TopicAuthorizationFailed.code();
                        return r;
                    }
                    let stream = match locate_partition(node, &t.name, p.partition_index) {
                        PartitionHome::Here(stream) => stream,
                        PartitionHome::Elsewhere => {
                            r.error_code = ErrorCode::NotLeaderOrFollower.code();
                            return r;
                        }
                        PartitionHome::Unknown => {
                            r.error_code = ErrorCode::UnknownTopicOrPartition.code();
                            return r;
                        }
                    };
                    let v = stream.visible();
                    if v.leader != node.config().id {
                        r.error_code = ErrorCode::NotLeaderOrFollower.code();
                        return r;
                    }
                    if !v.leader_ready {
                        // Just elected: its high watermark may still be older than the one the
                        // previous leader answered with (KIP-207); the client retries.
                        r.error_code = ErrorCode::OffsetNotAvailable.code();
                        return r;
                    }
                    // Kafka's last fetchable offset: the last stable offset for
                    // READ_COMMITTED (v2+), else the high watermark.
                    let fetchable = if version >= 2 && req.isolation_level == READ_COMMITTED {
                        v.last_stable_offset
                    } else {
                        v.high_watermark
                    };
                    let mut found_timestamp = -1;
                    let offset = match p.timestamp {
                        LATEST => Some(fetchable),
                        EARLIEST => Some(v.log_start_offset),
                        MAX_TIMESTAMP => Some(v.high_watermark.saturating_sub(1)),
                        ts => offset_for_timestamp(&stream, ts, &v)
                            .filter(|(o, _)| *o < fetchable)
                            .map(|(o, at)| {
                                found_timestamp = at;
                                o
                            }),
                    };
                    let offset = offset.map_or(-1, |o| i64::try_from(o).unwrap_or(i64::MAX));
                    r.leader_epoch = i32::try_from(v.term).unwrap_or(i32::MAX);
                    if version == 0 {
                        r.old_style_offsets = if offset >= 0 { vec![offset] } else { vec![] };
                    } else {
                        r.offset = offset;
                        r.timestamp = found_timestamp;
                    }
                    r
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    ListOffsetsResponse {
        topics,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NodeConfig;
    use crate::metadata::TopicLayout;

    /// A host that is not a node: one topic `t` (incarnation 7) with two partitions on nodes
    /// 1 and 2, none of them hosted here.
    struct Elsewhere(NodeConfig);

    impl NodeView for Elsewhere {
        fn config(&self) -> &NodeConfig {
            &self.0
        }
        fn live_brokers(&self) -> Vec<(u64, String)> {
            vec![(1, "h1:9092".into())]
        }
        fn live_brokers_on(&self, _listener: &str) -> Vec<(u64, String)> {
            self.live_brokers()
        }
        fn partition(&self, _name: &str, _partition: u32) -> Option<LogStream> {
            None
        }
        fn topic_layout(&self, name: &str) -> Option<TopicLayout> {
            (name == "t").then(|| TopicLayout {
                incarnation: 7,
                replicas: vec![vec![1, 2], vec![2, 1]],
            })
        }
        fn topic_incarnation(&self, name: &str) -> Option<u64> {
            self.topic_layout(name).map(|l| l.incarnation)
        }
        fn topic_names(&self) -> Vec<String> {
            vec!["t".into()]
        }
        fn is_topic(&self, name: &str) -> bool {
            name == "t"
        }
        fn reported_leader(&self, _name: &str, _inc: u64, partition: u32) -> Option<(u64, u64)> {
            // Partition 0 reports a live leader, partition 1 one that is not live.
            Some(if partition == 0 { (1, 3) } else { (2, 4) })
        }
    }

    fn host() -> Elsewhere {
        Elsewhere(NodeConfig::single_node_default())
    }

    #[test]
    fn a_partition_is_located_elsewhere_or_unknown_by_the_topic_layout() {
        let h = host();
        assert!(matches!(
            locate_partition(&h, "t", 0),
            PartitionHome::Elsewhere
        ));
        assert!(matches!(
            locate_partition(&h, "t", 1),
            PartitionHome::Elsewhere
        ));
        assert!(matches!(
            locate_partition(&h, "t", 2),
            PartitionHome::Unknown
        ));
        assert!(matches!(
            locate_partition(&h, "t", -1),
            PartitionHome::Unknown
        ));
        assert!(matches!(
            locate_partition(&h, "u", 0),
            PartitionHome::Unknown
        ));
        // Through an `Arc` of the host alike.
        let shared = Arc::new(host());
        assert!(matches!(
            locate_partition(&shared, "t", 1),
            PartitionHome::Elsewhere
        ));
    }

    #[test]
    fn topic_ids_follow_name_and_incarnation_and_find_the_topic_back() {
        let h = host();
        assert_eq!(topic_id_of(&h, "t"), topic_id("t", 7));
        assert_eq!(topic_id_of(&h, "u"), Uuid::ZERO);
        assert_eq!(topic_name_by_id(&h, topic_id("t", 7)), Some("t".into()));
        assert_eq!(topic_name_by_id(&h, topic_id("t", 8)), None);
        assert_eq!(topic_name_by_id(&h, Uuid::ZERO), None);
    }

    #[test]
    fn a_remote_partition_names_its_reported_leader_only_while_it_is_live() {
        let h = host();
        let t = topic_metadata(&h, "t");
        assert_eq!(t.error_code, 0);
        assert_eq!(t.topic_id, topic_id("t", 7));
        let [p0, p1] = &t.partitions[..] else {
            panic!("two partitions expected: {:?}", t.partitions)
        };
        assert_eq!((p0.error_code, p0.leader_id, p0.leader_epoch), (0, 1, 3));
        assert_eq!(
            (p0.isr_nodes.clone(), p0.offline_replicas.clone()),
            (vec![1], vec![2])
        );
        assert_eq!(
            (p1.error_code, p1.leader_id),
            (ErrorCode::LeaderNotAvailable.code(), -1)
        );
        assert_eq!(p1.replica_nodes, vec![2, 1]);
        let unknown = topic_metadata(&h, "u");
        assert_eq!(
            unknown.error_code,
            ErrorCode::UnknownTopicOrPartition.code()
        );
    }
}
