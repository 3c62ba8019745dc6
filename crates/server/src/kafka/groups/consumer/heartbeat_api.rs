//! The Kafka handler of ConsumerGroupHeartbeat (API 68, v0-1): the request to the state
//! machine's parameters, the group's assignor and the cluster's topics to its context, and the
//! outcome to the response, sent once the group's record is written when the heartbeat changed
//! the group (as Kafka answers only after its records are written).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_proto::error_code::ErrorCode;
use kafka_proto::frame::Response;
use kafka_proto::messages::consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest;
use kafka_proto::messages::consumer_group_heartbeat_response::{
    Assignment as WireAssignment, ConsumerGroupHeartbeatResponse, TopicPartitions,
};
use kafka_proto::Uuid;

use super::super::limits::COMMIT_TIMEOUT;
use super::super::node_coordinator::{coordinator, coordinator_term};
use super::assignors::{by_name, Assignment, Assignor, DEFAULT_ASSIGNOR};
use super::group::validate;
use super::types::{Context, HeartbeatOutcome, HeartbeatParams, Settings, TopicView};
use crate::kafka::access::Access;
use crate::kafka::host::GroupsHost;
use crate::kafka::reply::{self, Reply};
use crate::metadata::ClusterMeta;
use crate::security::acl::AclOperation;

/// The cluster's topics as the metadata holds them.
pub(crate) struct MetaTopics<'a>(pub(crate) &'a ClusterMeta);

impl TopicView for MetaTopics<'_> {
    fn topic(&self, name: &str) -> Option<(Uuid, u32)> {
        let t = self.0.topics.get(name)?;
        Some((
            crate::metadata::topic_ids::topic_id(name, t.created_at_index),
            t.partitions,
        ))
    }

    fn names(&self) -> Vec<String> {
        self.0.topics.keys().cloned().collect()
    }
}

/// The cluster's topics read through `node`, the metadata locked per lookup: looked up under a
/// group's lock, never held while a group or the coordinator's term lock is taken (a load of
/// a new term reads the metadata under the term lock, and the metadata's writer takes no
/// group lock: term, then group, then metadata is the one order).
pub(crate) struct NodeTopics<'a, H>(pub(crate) &'a H);

impl<H: GroupsHost> TopicView for NodeTopics<'_, H> {
    fn topic(&self, name: &str) -> Option<(Uuid, u32)> {
        MetaTopics(&self.0.metadata()).topic(name)
    }

    fn names(&self) -> Vec<String> {
        self.0.metadata().topics.keys().cloned().collect()
    }
}

/// The assignor named (None: the default).
pub(crate) fn assignor(name: Option<&str>) -> Option<&'static dyn Assignor> {
    by_name(name.unwrap_or(DEFAULT_ASSIGNOR))
}

/// The `group.consumer.*` settings of this node.
pub(crate) fn settings<H: GroupsHost>(node: &H) -> Settings {
    let k = &node.config().kafka;
    Settings {
        session_timeout: k.consumer_group_session_timeout,
        heartbeat_interval_ms: i32::try_from(k.consumer_group_heartbeat_interval.as_millis())
            .unwrap_or(i32::MAX),
        max_size: k.consumer_group_max_size,
        migration: k.consumer_group_migration_policy,
    }
}

fn response(o: HeartbeatOutcome) -> Response {
    let ok = o.error == ErrorCode::None;
    Response::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse {
        error_code: o.error.code(),
        error_message: o.message.filter(|m| !ok && !m.is_empty()),
        member_id: ok.then_some(o.member_id),
        member_epoch: if ok { o.member_epoch } else { 0 },
        heartbeat_interval_ms: if ok { o.heartbeat_interval_ms } else { 0 },
        assignment: o.assignment.filter(|_| ok).map(|a| WireAssignment {
            topic_partitions: a
                .into_iter()
                .map(|(topic_id, ps)| TopicPartitions {
                    topic_id,
                    partitions: ps.into_iter().collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// A new member id for a v0 join without one (v1 clients generate theirs): 22 characters of
/// URL-safe base64 over 16 random bytes, as Kafka's `Uuid.randomUuid().toString()`.
fn new_member_id() -> String {
    use base64::Engine as _;
    let mut b = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut b);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// The request as the state machine takes it.
fn params(
    req: ConsumerGroupHeartbeatRequest,
    client_id: Option<String>,
    client_host: String,
) -> HeartbeatParams {
    HeartbeatParams {
        member_id: req.member_id,
        member_epoch: req.member_epoch,
        instance_id: req.instance_id,
        rack: req.rack_id,
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_names: req.subscribed_topic_names,
        subscribed_regex: req.subscribed_topic_regex,
        server_assignor: req.server_assignor,
        owned: req.topic_partitions.map(|list| {
            let mut a = Assignment::new();
            for tp in list {
                a.entry(tp.topic_id).or_default().extend(tp.partitions);
            }
            a.retain(|_, ps| !ps.is_empty());
            a
        }),
        client_id: client_id.unwrap_or_default(),
        client_host,
        classic: None,
    }
}

/// Handles ConsumerGroupHeartbeat: READ on the group (else GROUP_AUTHORIZATION_FAILED), on
/// the coordinator only (else NOT_COORDINATOR).
pub(crate) fn consumer_group_heartbeat<H: GroupsHost>(
    node: &Arc<H>,
    access: &Access,
    client_id: Option<String>,
    client_host: String,
    req: ConsumerGroupHeartbeatRequest,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let now = |o: HeartbeatOutcome| reply::now(correlation_id, version, response(o));
    let group_id = req.group_id.clone();
    if group_id.is_empty() {
        return now(HeartbeatOutcome::error(
            ErrorCode::InvalidRequest,
            "GroupId can't be empty.",
            &req.member_id,
        ));
    }
    if !access.group(AclOperation::Read, &group_id) {
        return now(HeartbeatOutcome::error(
            ErrorCode::GroupAuthorizationFailed,
            "",
            &req.member_id,
        ));
    }
    let Some(term) = coordinator_term(node) else {
        return now(HeartbeatOutcome::error(
            ErrorCode::NotCoordinator,
            "",
            &req.member_id,
        ));
    };
    let mut p = params(req, client_id, client_host);
    if let Err((e, msg)) = validate(&p, version) {
        return now(HeartbeatOutcome::error(e, msg, &p.member_id));
    }
    if p.member_id.is_empty() {
        p.member_id = new_member_id();
    }
    let settings = settings(&**node);
    let c = coordinator(node);
    let (outcome, seq) = {
        let topics = NodeTopics(&**node);
        let ctx = Context {
            topics: &topics,
            settings: &settings,
            assignor: &assignor,
        };
        c.consumer_heartbeat(term, &group_id, &p, &ctx, Instant::now())
    };
    let mut stored = c.stored_receiver();
    if seq == 0 || *stored.borrow() >= seq {
        return now(outcome);
    }
    let node = node.clone();
    reply::later(correlation_id, version, async move {
        let deadline = tokio::time::Instant::now() + COMMIT_TIMEOUT;
        loop {
            if *stored.borrow_and_update() >= seq {
                break;
            }
            if coordinator_term(&node) != Some(term) {
                return response(HeartbeatOutcome::error(
                    ErrorCode::NotCoordinator,
                    "",
                    &outcome.member_id,
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(group = %group_id, "answering a consumer group heartbeat before the group's record is written");
                break;
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), stored.changed()).await;
        }
        response(outcome)
    })
}
